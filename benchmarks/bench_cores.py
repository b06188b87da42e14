"""Are this machine's CPUs equally fast? One single-threaded process pinned to each usable CPU, all at once, each
timing the same work (float32 products of 256 x 256 matrices, the gate's filler work: vitbench.compare.schedule),
repeated; printed per CPU: each repetition's milliseconds and the fastest.

Why it matters: `vitbench ab`'s `together` schedule runs the two sides at the same moments on different CPUs. On
this project's 2-core VM one process ran 1.45x slower on CPU 0 than on CPU 1, in three runs of this script at load
1 (docs/compare.md, "Cores that differ"), which is as much as the slowdowns the gate must find; so `ab` pins each
side to its own half of the CPUs and swaps the halves within a pair.

    python benchmarks/bench_cores.py [--reps 10] [--runs 3] [--products 200]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from vitbench.compare.schedule import FILLER_THREADS, pinned_to

WORK = ("import sys, time\n"
        "import numpy as np\n"
        "a = np.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)\n"
        "b = a.copy()\n"
        "ms = []\n"
        "for _ in range(int(sys.argv[1])):\n"
        "    t = time.perf_counter()\n"
        "    for _ in range(int(sys.argv[2])):\n"
        "        b = a @ b\n"
        "        b /= np.abs(b).max() + 1\n"
        "    ms.append((time.perf_counter() - t) * 1e3)\n"
        "print(' '.join(f'{x:.1f}' for x in ms), min(ms))\n")


def run_once(cpus: list[int], reps: int, products: int) -> dict[int, tuple[str, float]]:
    """One process per CPU at once, pinned; per CPU (its repetitions' ms as printed, the fastest ms)."""
    env = {**os.environ, **{k: "1" for k in FILLER_THREADS}}
    procs = {c: subprocess.Popen([sys.executable, "-c", WORK, str(reps), str(products)], env=env, text=True,
                                 stdout=subprocess.PIPE, preexec_fn=pinned_to({c})) for c in cpus}
    out = {}
    for c, p in procs.items():
        line = p.communicate()[0].strip()
        reps_ms, _, fastest = line.rpartition(" ")
        out[c] = (reps_ms, float(fastest))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--products", type=int, default=200, help="matrix products per repetition")
    a = ap.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    print(f"CPUs {cpus}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for r in range(a.runs):
        res = run_once(cpus, a.reps, a.products)
        best = min(f for _, f in res.values())
        for c, (reps_ms, fastest) in res.items():
            print(f"run {r + 1} CPU {c}: {reps_ms}  fastest {fastest:.1f} ms ({fastest / best:.2f}x the fastest CPU)")


if __name__ == "__main__":
    main()
