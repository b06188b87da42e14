"""Change points in a synthetic history: which method `vitbench history` uses, and what it finds (issue 55).

A history is 200 commits, one value per commit: log value = steps + noise, the noise normal with the between-run
sd of this machine when quiet (vitbench.compare.runs.RUN_NOISE_QUIET = 0.063 in log, docs/compare.md "One run per
side": the sd of one run's value between sweeps of identical code; busy, it is 0.5-0.9 and nothing below 30 % is
found). Into each history two steps are injected, one of 3 % and one of 10 % (each a slowdown or a speed-up, by
a coin), at random commits at least GAP from either end and from each other; besides, a history without steps
counts the false changes of noise alone. A found change matches a true step within TOLERANCE commits; recall is
per step size; a change within NEAR commits of a step it did not match is mislocated (counted apart); the others
are false changes, per 200 commits.

Methods (each on the log values, noise sd estimated from the series itself as `vitbench history` does,
vitbench.history.changes.noise_sd, so no constant is read off the draw):
  pelt-2, pelt-3     ruptures PELT, cost l2, penalty 2 (Schwarz / BIC) or 3 x sigma^2 x log n
  binseg-2           binary segmentation (vitbench.history.changes.binseg: ruptures' Binseg's splits, a
                     segment of one point allowed at the series' ends), the same penalty as pelt-2
  e-divisive         MongoDB's signal-processing-algorithms (E-divisive means, Matteson and James 2014, as Apache
                     Otava and MongoDB's CI use it), its defaults (pvalue 0.05, 100 permutations); skipped when the
                     package is not importable (it is not in the lock: pip install
                     signal-processing-algorithms, which needs more-itertools and structlog)
Confidence (`+conf`): the same changes kept only at vitbench's permutation confidence >= 0.95, the ones that fail
CI. Two draws: a development draw (seed 0) on which the method is chosen, and a verification draw (seed 1),
reported apart. `--sd` sets other noise (e.g. 0.063 / sqrt(k): the median of k runs per commit).

    python benchmarks/bench_history.py [--histories 200] [--sd 0.063] [--seed 0] [--methods pelt-2,...] [--json]

docs/history.md holds the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from vitbench.compare.runs import RUN_NOISE_QUIET  # noqa: E402
from vitbench.history import changes as ch  # noqa: E402

N = 200  # commits per history (the issue's)
SIZES = (0.03, 0.10)  # the injected steps (the issue's)
GAP = 25  # commits a step keeps from either end and the other step: a step at the newest commit cannot be seen yet
TOLERANCE = 5  # commits between a found change and a true step that still count as finding it
NEAR = 15  # a change further than TOLERANCE but within this of a true step: found, mislocated (not false)
CONFIDENCE = 0.95  # vitbench.compare.decide.DEFAULT_CONFIDENCE, `vitbench history --confidence`'s default


def history(rng: np.random.Generator, sd: float, with_steps: bool) -> tuple[np.ndarray, dict[int, float]]:
    steps = {}
    if with_steps:
        while True:
            at = sorted(rng.integers(GAP, N - GAP + 1, size=2))
            if at[1] - at[0] >= GAP:
                break
        sizes = list(SIZES)
        rng.shuffle(sizes)
        for a, s in zip(at, sizes):
            steps[int(a)] = s * (1 if rng.random() < 0.5 else -1)
    level = np.zeros(N)
    for a, s in steps.items():
        level[a:] += math.log(1 + s)
    return level + rng.normal(0, sd, N), steps


def found(method: str, y: np.ndarray) -> list[tuple[int, float]]:
    """(index, confidence) of each change `method` finds in log values `y`."""
    if method == "e-divisive":
        from signal_processing_algorithms.energy_statistics import energy_statistics as es

        idx = sorted(es.e_divisive(y.tolist(), pvalue=0.05, permutations=100))
        return [(int(i), 1.0) for i in idx]
    name, pen = method.split("-")
    cs = ch.changes(np.exp(y), method=name, penalty_per_log_n=float(pen))
    return [(c.index, c.confidence) for c in cs]


def score(method: str, histories: int, sd: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    hit = {s: 0 for s in SIZES}
    total = {s: 0 for s in SIZES}
    hit_c = {s: 0 for s in SIZES}
    false, false_c, false_null, false_null_c, mislocated = 0, 0, 0, 0, 0
    t0 = time.process_time()
    for _ in range(histories):
        for with_steps in (True, False):
            y, steps = history(rng, sd, with_steps)
            cps = found(method, y)
            used = set()
            for at, s in steps.items():
                total[abs(s)] += 1
                near = [(abs(i - at), i, c) for i, c in cps if abs(i - at) <= TOLERANCE and i not in used]
                if near:
                    _, i, c = min(near)
                    used.add(i)
                    hit[abs(s)] += 1
                    hit_c[abs(s)] += c >= CONFIDENCE
            off = [i for i, c in cps if i not in used and any(abs(i - at) <= NEAR for at in steps)]
            mislocated += len(off)
            extra = [c for i, c in cps if i not in used and i not in off]
            if with_steps:
                false += len(extra)
                false_c += sum(c >= CONFIDENCE for c in extra)
            else:
                false_null += len(extra)
                false_null_c += sum(c >= CONFIDENCE for c in extra)
    n = histories
    return {"method": method, "sd": sd, "seed": seed, "histories": n,
            "recall": {f"{s:.0%}": hit[s] / total[s] for s in SIZES},
            "recall_conf": {f"{s:.0%}": hit_c[s] / total[s] for s in SIZES},
            "false_per_200_with_steps": false / n, "false_per_200_with_steps_conf": false_c / n,
            "false_per_200_null": false_null / n, "false_per_200_null_conf": false_null_c / n,
            "mislocated_per_200": mislocated / n,
            "cpu_s": time.process_time() - t0}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--histories", type=int, default=200)
    ap.add_argument("--sd", type=float, default=RUN_NOISE_QUIET)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", default="pelt-2,pelt-3,binseg-2,e-divisive")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    out = []
    for m in a.methods.split(","):
        if m == "e-divisive":
            try:
                from signal_processing_algorithms.energy_statistics import energy_statistics  # noqa: F401
            except ImportError:
                print("e-divisive: signal-processing-algorithms is not installed; skipped", file=sys.stderr)
                continue
        r = score(m, a.histories, a.sd, a.seed)
        out.append(r)
        if not a.json:
            print(f"{m:12s} sd {a.sd:.4f} seed {a.seed} n {a.histories}: recall 3% {r['recall']['3%']:.1%} "
                  f"10% {r['recall']['10%']:.1%} (conf>=0.95: {r['recall_conf']['3%']:.1%} / "
                  f"{r['recall_conf']['10%']:.1%}); false per 200 commits: with steps "
                  f"{r['false_per_200_with_steps']:.3f} "
                  f"({r['false_per_200_with_steps_conf']:.3f}), noise alone {r['false_per_200_null']:.3f} "
                  f"({r['false_per_200_null_conf']:.3f}); mislocated {r['mislocated_per_200']:.3f}; "
                  f"{r['cpu_s']:.0f} s CPU", flush=True)
    if a.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
