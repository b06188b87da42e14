"""`vitbench compare` with one sweep per side: how often identical code is called a change, and what a real
slowdown is called, on this machine, quiet or under a stated background load.

Two steps, because sweeps cost a minute each on a busy 2-core machine:

  collect  pairs of back-to-back sweeps of the CI study into OUT/pairNN/{a,b}: both sides the working tree's
           code, side b carrying a known slowdown (extra real work per timed step, $VITBENCH_TEST_EXTRA_WORK: 0 is
           an A/A pair), the order of a and b alternated per pair. `--burn K` starts K busy-loop processes (pure
           Python, never sleeping, at the default niceness) for the whole collection: the stated background load
           (K = 2 x the cores is the issue's "busy host"); they are stopped at the end, also on Ctrl-C. Each pair's
           load average and sizes go to OUT/pairs.jsonl. Safe to stop and resume.
  judge    `vitbench compare` (the library call, the CLI's defaults) on every pair: the decisions per trial and
           pair, the false calls on A/A pairs, what the slowdowns were called, and the between-run spread of each
           trial's median step (the noise a one-run-per-side verdict cannot see from inside a run).

    python benchmarks/bench_compare_aa.py collect OUT [--pairs 20] [--size 0] [--burn 4] [--study studies/ci.yaml]
    python benchmarks/bench_compare_aa.py judge OUT [--threshold 0.05] [--json]

docs/compare.md, "One run per side", holds the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ENV = "VITBENCH_TEST_EXTRA_WORK"  # vitbench.measure.extra_work.ENV (not imported: collect runs without vitbench)


def _spin() -> None:  # a burner: one core's worth of pure-Python work, forever
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF


def _sweep(study: str, out: Path, size: float) -> float:
    env = dict(os.environ)
    env.pop(ENV, None)
    if size:
        env[ENV] = f"{size:g}"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "from vitbench.cli import main; main()", "sweep", study, "--results", str(out)], env=env,
                   check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def collect(out: Path, pairs: int, size: float, burn: int, study: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    log = out / "pairs.jsonl"
    done = [json.loads(line) for line in log.open()] if log.exists() else []
    burners = [mp.Process(target=_spin, daemon=True) for _ in range(burn)]
    for p in burners:
        p.start()
    try:
        time.sleep(5 if burn else 0)  # the load average starts to reflect the burners
        for i in range(len(done), len(done) + pairs):
            d = out / f"pair{i:03d}"
            sides = [("a", 0.0), ("b", size)]
            if i % 2:
                sides.reverse()
            secs = {name: _sweep(study, d / name, s) for name, s in sides}
            row = {"pair": i, "size": size, "first": sides[0][0], "seconds": secs, "burn": burn,
                   "cores": os.cpu_count(), "load1": os.getloadavg()[0], "at": time.time()}
            with log.open("a") as fh:
                fh.write(json.dumps(row) + "\n")
            print(f"pair {i}: size {size:.0%}, {sides[0][0]} first, "
                  f"{secs['a']:.0f} s / {secs['b']:.0f} s, load {row['load1']:.1f}", flush=True)
    finally:
        for p in burners:
            p.terminate()


def judge(out: Path, threshold: float, as_json: bool) -> None:
    from vitbench.compare import compare_paths
    from vitbench.compare.decide import Decision

    meta = {r["pair"]: r for r in map(json.loads, (out / "pairs.jsonl").open())}
    tally: dict[float, Counter] = defaultdict(Counter)  # per size: decisions per trial
    pair_calls: dict[float, Counter] = defaultdict(Counter)  # per size: the pair's worst call
    medians: dict[str, list[float]] = defaultdict(list)  # a-side (no extra work) median img/s per trial
    rows = []
    for i, m in sorted(meta.items()):
        d = out / f"pair{i:03d}"
        if not ((d / "a" / "results.jsonl").exists() and (d / "b" / "results.jsonl").exists()):
            continue
        try:
            cmp = compare_paths(d / "a", d / "b", threshold=threshold)
        except Exception as e:  # noqa: BLE001 - a pair that cannot be compared is reported, not fatal
            print(f"pair {i}: {e}", file=sys.stderr)
            continue
        decisions = {r.trial: r.decision for r in cmp.rows if r.metric == "img_per_s"}
        for r in cmp.rows:
            if r.metric == "img_per_s" and r.baseline:
                medians[r.trial].append(r.baseline)
        size = m["size"]
        tally[size].update(decisions.values())
        calls = set(decisions.values())
        worst = next((c for c in (Decision.REGRESSION, Decision.IMPROVEMENT, Decision.INCONCLUSIVE,
                                  Decision.NO_CHANGE) if c in calls), Decision.NO_DATA)
        pair_calls[size][worst] += 1
        rows.append({"pair": i, "size": size, "load1": m["load1"], "exit": cmp.exit_code,
                     "rows": [{"trial": r.trial, "ratio": r.ratio, "ci": [r.ci_low, r.ci_high],
                               "decision": str(r.decision), "method": r.method}
                              for r in cmp.rows if r.metric == "img_per_s"]})
        if not as_json:
            print(f"pair {i} size {size:.0%} load {m['load1']:.1f} exit {cmp.exit_code}: " + "; ".join(
                f"{r.trial.split(' torch')[0]} {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] {r.decision}"
                for r in cmp.rows if r.metric == "img_per_s" and r.ratio))
    spread = {t: statistics.stdev(math.log(x) for x in xs) for t, xs in medians.items() if len(xs) > 2}
    summary = {"per_size_trial_decisions": {f"{s:g}": {str(k): v for k, v in c.items()} for s, c in tally.items()},
               "per_size_pair_worst_call": {f"{s:g}": {str(k): v for k, v in c.items()}
                                            for s, c in pair_calls.items()},
               "between_run_log_sd": spread}
    if as_json:
        print(json.dumps({"pairs": rows, **summary}, indent=1))
        return
    print(json.dumps(summary, indent=1))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out", type=Path)
    c.add_argument("--pairs", type=int, default=20)
    c.add_argument("--size", type=float, default=0.0, help="side b's slowdown: 0.1 = every step 10 %% longer")
    c.add_argument("--burn", type=int, default=0, help="busy-loop processes for the whole collection")
    c.add_argument("--study", default="studies/ci.yaml")
    j = sub.add_parser("judge")
    j.add_argument("out", type=Path)
    j.add_argument("--threshold", type=float, default=0.05)
    j.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        collect(a.out, a.pairs, a.size, a.burn, a.study)
    else:
        judge(a.out, a.threshold, a.json)


if __name__ == "__main__":
    main()
