"""`vitbench bisect` end to end: a throwaway branch of 16 commits of this repository, one of which injects a ~10 %
slowdown in the timed path, bisected with real `ab` steps (each side its own checkout, real sweeps).

The branch lives in a clone in a temporary directory (this repository is never touched, its branches neither):
commit i (1..16) writes BISECT_STEP; commit --bad-at and every later one also make every timed step carry 10 %
more real work: vitbench.measure.extra_work's fraction defaults to 0.10 instead of none (the same work the gate's
power test injects, sized once to 10 % of a step, img/s x 1/1.1 = 0.909; its rows say so in raw).
GOOD is the clone's HEAD (this repository's HEAD), BAD the branch's tip. The study: R-Micro inference at batch
16 on one CPU thread, one of studies/ci.yaml's trials, a few seconds a round (--study to change). Of the gate's
trials it had the smallest pair sd under `turns` on a quiet host, 0.032 against ViT-Mini/4 infer's 0.10
(docs/compare.md, "And with R-Micro infer as the trial"; the injected work slows it by about 7 %). With
ViT-Nano/4, ~3 ms a step, the first run read the slowed commit 1.18-1.28x *faster* than GOOD in all of 4 pairs
at load 22-30. Printed and written to --out
(JSON): each step's commit, verdict, pairs and seconds, the first bad commit found, whether it is the injected
one, the wall time, and the load average before, during (sampled every 10 s) and after.

    python benchmarks/bench_bisect.py [--bad-at 11] [--budget-s 150] [--threshold 0.05] [--out bisect.json]

docs/compare.md, "Bisect", holds the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N = 16  # commits on the branch (the check: found in at most 6 ab steps)
SLOW_FILE = "vitbench/measure/extra_work.py"
SLOW_FROM = 'v = os.environ.get(ENV, "").strip()\n'
SLOW_TO = 'v = os.environ.get(ENV, "").strip() or "0.10"  # bench_bisect.py: the injected slowdown\n'
STUDY = """name: bisect-rmicro
repeats: 1
calibration: false
defaults: {device: cpu, threads: 1, batch_size: 16, precision: fp32, warmup_steps: 2, min_steps: 8,
           min_seconds: 0.5, max_seconds: 3}
axes: {model: [R-Micro], task: [infer]}
"""


def _git(repo: Path, *args: str) -> str:
    p = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True)
    return p.stdout.strip()


def make_branch(tmp: Path, bad_at: int) -> tuple[Path, str, str, str]:
    """(clone, GOOD, BAD, the injected commit)."""
    repo = tmp / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    _git(repo, "config", "user.email", "bench@example.com")
    _git(repo, "config", "user.name", "bench_bisect")
    _git(repo, "checkout", "-qb", "bisect-throwaway")
    good = _git(repo, "rev-parse", "HEAD")
    injected = ""
    for i in range(1, N + 1):
        (repo / "BISECT_STEP").write_text(f"{i}\n")
        if i == bad_at:
            src = (repo / SLOW_FILE).read_text()
            if SLOW_FROM not in src:
                raise SystemExit(f"{SLOW_FILE} changed: cannot inject the slowdown ({SLOW_FROM.strip()!r})")
            (repo / SLOW_FILE).write_text(src.replace(SLOW_FROM, SLOW_TO, 1))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"bisect step {i}" + (": 10 % more work per timed step" if i == bad_at
                                                           else ""))
        if i == bad_at:
            injected = _git(repo, "rev-parse", "HEAD")
    return repo, good, _git(repo, "rev-parse", "HEAD"), injected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bad-at", type=int, default=11, help="the commit (1..16) that injects the slowdown")
    ap.add_argument("--budget-s", type=float, default=150.0, help="each ab step's budget in seconds")
    ap.add_argument("--threshold", type=float, default=0.05)
    ap.add_argument("--study", default=None, help="a study file (default: R-Micro infer, above)")
    ap.add_argument("--out", type=Path, default=None, help="write the run's summary here (JSON)")
    a = ap.parse_args()
    if not 1 <= a.bad_at <= N:
        ap.error(f"--bad-at must be in 1..{N}")
    sys.path.insert(0, str(ROOT))
    from vitbench.compare.bisection import run_bisect
    from vitbench.compare.paired import Rule

    loads: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(10.0):
            loads.append((time.monotonic(), os.getloadavg()[0]))

    with tempfile.TemporaryDirectory(prefix="vitbench-bench-bisect-") as tmp:
        repo, good, bad, injected = make_branch(Path(tmp), a.bad_at)
        study = Path(a.study).resolve() if a.study else Path(tmp) / "study.yaml"
        if not a.study:
            study.write_text(STUDY)
        load_before = os.getloadavg()
        t0 = time.monotonic()
        threading.Thread(target=sample, daemon=True).start()
        res = run_bisect(good, bad, repo=repo, study=str(study), rule=Rule(a.threshold), budget_s=a.budget_s,
                         progress=lambda s: print(s, flush=True))
        stop.set()
        wall = time.monotonic() - t0
    during = [x for _, x in loads]
    summary = {
        "commits": N, "bad_at": a.bad_at, "injected": injected, "first_bad": res.first_bad,
        "found": res.first_bad == injected, "exit_code": res.exit_code,
        "range": list(res.range) if res.range else None, "steps": [
            {"commit": s.commit, "subject": s.subject, "verdict": s.reading, "seconds": round(s.elapsed_s),
             "detail": s.detail} for s in res.steps],
        "n_steps": len(res.steps), "max_steps": res.max_steps, "wall_s": round(wall), "budget_s": a.budget_s,
        "threshold": a.threshold, "load_before": load_before,
        "load_during": [min(during), sorted(during)[len(during) // 2], max(during)] if during else None,
        "load_after": os.getloadavg(), "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=1))
    if a.out:
        a.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
