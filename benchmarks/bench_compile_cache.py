"""The smoke study cold and warm: what the persistent compile caches save a re-run (issue 34).

Runs `vitbench sweep STUDY` three times in one go, each into its own results directory, with a private cache
directory ($VITBENCH_CACHE_DIR, empty at the start):
  1. cold: empty cache (no compiled executables, no cached values, no measured matmul peak);
  2. warm: the same again with --force (every executable from the compile cache, the FLOP counts and JAX's
     parameter shapes from the value cache, the peak cached);
  3. compile-cold: the compile and value caches removed, the peak kept, --force: what they save.
and prints, for each, the sweep's wall time and its trials' time budget (vitbench.report.budget: start-up,
compile, warm-up, timed, other) with how many rows' compiled code came from the compile cache (`compile_cached`)
and how many flops rows' counts from the value cache (`counted_cached`). Target (issue 34, on 2 CPU
cores): cold <= 120 s, warm <= 0.5 x cold. Timings on a shared machine are noisy: the load average is printed
before and after each sweep; run it on a quiet machine for figures worth quoting.

    python benchmarks/bench_compile_cache.py                 # the embedded smoke study
    python benchmarks/bench_compile_cache.py --study studies/ci.yaml --keep /tmp/cc
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def sweep(study: str, results: Path, env: dict, force: bool) -> float:
    cmd = [sys.executable, "-c", "from vitbench.cli import main; main()", "sweep", study, "--results",
           str(results), "--allow-failures"]
    if force:
        cmd.append("--force")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit(f"sweep failed (exit {p.returncode})")
    return wall


def budget(results: Path):
    """The time budget table of a sweep's rows and calibrations."""
    from vitbench.report.budget import time_budget
    from vitbench.tidy import load

    df = load(results)
    cal = load(results, kinds=("calibration",))
    import pandas as pd

    return time_budget(pd.concat([df, cal], ignore_index=True) if not cal.empty else df)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="smoke", help="a study name or file (default: the embedded smoke study)")
    ap.add_argument("--keep", type=Path, default=None, help="keep results and cache here (default: a temp dir)")
    a = ap.parse_args()

    root = a.keep or Path(tempfile.mkdtemp(prefix="vitbench-cc-"))
    if root.exists() and any(root.iterdir()):
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    cache = root / "cache"
    env = {**os.environ, "VITBENCH_CACHE_DIR": str(cache)}
    env.pop("VITBENCH_COMPILE_CACHE", None)
    from vitbench.cpus import usable_cpus
    from vitbench.value_cache import SUBDIR

    runs = (("cold", False, ()), ("warm", True, ()), ("compile-cold", True, (cache / "compile", cache / SUBDIR)))
    walls = {}

    print(f"study {a.study}, {usable_cpus()} usable CPU(s), cache {cache}")
    for name, force, wipe in runs:
        for d in wipe:
            shutil.rmtree(d, ignore_errors=True)
        before = load_average()
        walls[name] = sweep(a.study, root / name, env, force)
        print(f"\n== {name}: sweep wall {walls[name]:.1f} s (load average before {before}, "
              f"after {load_average()})")
        print(budget(root / name).to_string(index=False))
    cold, warm = walls["cold"], walls["warm"]
    print(f"\ncold {cold:.1f} s, warm {warm:.1f} s: warm/cold {warm / cold:.2f} (target <= 0.5; cold <= 120 s); "
          f"compile-cold (compile and value caches removed, peak cached) {walls['compile-cold']:.1f} s")
    if a.keep is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
