"""Power of the A/B speed gate (`vitbench ab`): detection and false-alarm rates per injected slowdown.

Two steps, because complete gate runs cost minutes each on a shared machine:

  collect  real interleaved round pairs of the gate's study, both sides the working tree's code, current carrying
           a known slowdown (extra real work per step, $VITBENCH_TEST_EXTRA_WORK: 0 = A/A, 0.05, 0.10, 0.20),
           sizes cycled so that every size sees the same machine over time; each pair's per-trial medians are
           appended to a JSONL pool (safe to stop at any time, and to resume).
  replay   the gate's exact sequential rule (vitbench.compare.paired.Rule.replay) on many gate runs drawn from
           the pool: each run a sequence of pairs resampled with replacement, alternating baseline-first and
           current-first pairs as the gate does, capped at the pairs the time budget allows. Prints detection
           (regression), pass (no change) and inconclusive rates per size and the pairs used.

    python benchmarks/bench_gate_power.py collect POOL.jsonl [--blocks N] [--study studies/ci.yaml]
    python benchmarks/bench_gate_power.py replay POOL.jsonl [--threshold 0.05] [--confidence 0.95]
                                          [--min-pairs 4] [--budget-s 480] [--runs 2000]
    python benchmarks/bench_gate_power.py noise POOL.jsonl          # the pool's pair noise per trial
    python benchmarks/bench_gate_power.py simulate --sd 0.04 ...     # the rule at a given pair noise

Confirm with a few complete runs: `vitbench ab HEAD --allow-same` (A/A) and `--test-extra-work 0.1`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vitbench.compare.ab import (DEFAULT_BUDGET_S, DEFAULT_SCHEDULE, DEFAULT_STATISTIC, DEFAULT_STUDY, Pairs,
                                 Schedule, Side, Statistic, repo_root, side_value)
from vitbench.compare.decide import Decision
from vitbench.compare.decide import DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD
from vitbench.compare.paired import DEFAULT_MIN_PAIRS, Rule
from vitbench.cpus import TreeMeter
from vitbench.measure.extra_work import ENV

SIZES = (0.0, 0.10, 0.05, 0.0, 0.10, 0.20)  # one cycle of blocks: 0 % and 10 % (the goal's sizes) twice
START_S = 3.0  # the gate's own start (git archive, lock check) beyond its pairs, measured


def collect(pool: Path, blocks: int, study: str, schedules: list[Schedule]) -> None:
    root = repo_root(".")
    done = [json.loads(line) for line in pool.open()] if pool.exists() else []
    for b in range(len(done), len(done) + blocks):
        size = SIZES[b % len(SIZES)]
        seen = sum(1 for d in done if d["size"] == size)
        base = Side("baseline", "working tree", root, root / study, sys.executable, "this interpreter")
        cur = Side("current", "working tree", root, root / study, sys.executable, "this interpreter",
                   {ENV: f"{size:g}"} if size else {})
        schedule = schedules[(seen // 2) % len(schedules)]  # each size: both orders under each schedule
        order = (base, cur) if seen % 2 == 0 else (cur, base)
        with tempfile.TemporaryDirectory(prefix="vitbench-power-") as tmp:
            t0 = time.monotonic()
            with TreeMeter() as gate:  # others' load beside the gate's processes, as `vitbench ab` reads it
                schedule.run(order, {s.name: Path(tmp) / s.name for s in order})
            pairs = Pairs()
            pairs.add(Path(tmp) / "baseline", Path(tmp) / "current", gate.other_cores)
            secs = time.monotonic() - t0
        trials = {f"{pairs.trials[k][0].config['model']} {pairs.trials[k][0].config['task']}": v[0]
                  for k, v in pairs.samples.items() if pairs.matched(k)}  # per leg, per-step img/s, both sides
        row = {"block": b, "size": size, "first": order[0].name, "schedule": schedule.value, "seconds": secs,
               "trials": trials, "at": time.time(), "load1": os.getloadavg()[0], "others": gate.other_cores}
        done.append(row)
        with pool.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"block {b} size {size:.0%} {schedule.value} {order[0].name} first {secs:.0f} s, others "
              f"{gate.other_cores:.2f} cores: " + ", ".join(
            f"{t} {t_r:.3f}" for t, t_r in _ratios(row, DEFAULT_STATISTIC).items()), flush=True)


def replay(pool: Path, rule: Rule, budget_s: float, runs: int, seed: int, statistic: Statistic) -> None:
    rows = [json.loads(line) for line in pool.open()]
    rng = random.Random(seed)
    print(f"pool: {len(rows)} pairs; rule: threshold {rule.threshold:.0%}, confidence {rule.confidence:.0%}, "
          f"min {rule.min_pairs} pairs, budget {budget_s:.0f} s; round value: the {statistic.value} step; "
          f"{runs} replayed gate runs per line; load average during the pool "
          f"{min(r.get('load1', 0) for r in rows):.1f}-{max(r.get('load1', 0) for r in rows):.1f}")
    print("| schedule | injected | img/s ratio | pairs in pool | regression | no change | inconclusive | mean pairs "
          "| mean time s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for schedule, size in sorted({(r.get("schedule", "alternate"), r["size"]) for r in rows}):
        same = [r for r in rows if r.get("schedule", "alternate") == schedule]
        pair_s = statistics.median(r["seconds"] for r in same)  # the time a pair takes does not depend on size
        max_pairs = max(rule.min_pairs, int((budget_s - START_S) // pair_s))
        capped = Rule(rule.threshold, rule.confidence, rule.min_pairs, max_pairs)
        mine = [r for r in same if r["size"] == size]
        by_first = {f: [r for r in mine if r["first"] == f] for f in ("baseline", "current")}
        if not all(by_first.values()):
            by_first = {"baseline": mine, "current": mine}
        counts = {d: 0 for d in (Decision.REGRESSION, Decision.NO_CHANGE, Decision.INCONCLUSIVE)}
        used = []
        for _ in range(runs):
            seq = [_ratios(rng.choice(by_first["baseline" if i % 2 == 0 else "current"]), statistic)
                   for i in range(max_pairs)]
            v, n = capped.replay(seq)
            counts[v] += 1
            used.append(n)
        mean_n = statistics.fmean(used)
        print(f"| {schedule} | {size:.0%} | {1 / (1 + size):.3f} | {len(mine)} | "
              f"{counts[Decision.REGRESSION] / runs:.1%} | {counts[Decision.NO_CHANGE] / runs:.1%} | "
              f"{counts[Decision.INCONCLUSIVE] / runs:.1%} | {mean_n:.1f} (max {max_pairs}) | "
              f"{START_S + mean_n * pair_s:.0f} |")


def noise(pool: Path, statistic: Statistic) -> None:
    """Per trial, the spread of log pair ratios around their size's expected log ratio, over the whole pool."""
    rows = [json.loads(line) for line in pool.open()]
    devs: dict[str, list[float]] = {}
    for r in rows:
        for t, ratio in _ratios(r, statistic).items():
            devs.setdefault(t, []).append(math.log(ratio) + math.log(1 + r["size"]))
    for t, d in sorted(devs.items()):
        print(f"{t}: {len(d)} pairs, sd of log pair ratio {statistics.stdev(d):.3f}, "
              f"median |deviation| {statistics.median(abs(x) for x in d):.3f}")


def simulate(rule: Rule, max_pairs: int, sds: list[float], runs: int, seed: int, trials: int = 4) -> None:
    """The rule on synthetic pairs: log-normal pair noise of each sd, `trials` independent trials."""
    capped = Rule(rule.threshold, rule.confidence, rule.min_pairs, max_pairs)
    rng = random.Random(seed)
    print(f"synthetic: {trials} trials, log-normal pair noise, threshold {rule.threshold:.0%}, confidence "
          f"{rule.confidence:.0%}, {rule.min_pairs}-{max_pairs} pairs, {runs} runs per line")
    print("| pair noise sd | injected | regression | no change | inconclusive | mean pairs |")
    print("|---|---|---|---|---|---|")
    for sd in sds:
        for size in (0.0, 0.05, 0.10, 0.20):
            out, used = [], []
            for _ in range(runs):
                seq = [{f"t{i}": math.exp(rng.gauss(-math.log(1 + size), sd)) for i in range(trials)}
                       for _ in range(max_pairs)]
                v, n = capped.replay(seq)
                out.append(v)
                used.append(n)
            print(f"| {sd:.2f} | {size:.0%} | {out.count(Decision.REGRESSION) / runs:.1%} | "
                  f"{out.count(Decision.NO_CHANGE) / runs:.1%} | {out.count(Decision.INCONCLUSIVE) / runs:.1%} | "
                  f"{statistics.fmean(used):.1f} |")


def _ratios(row: dict, statistic: Statistic) -> dict[str, float]:
    """Per trial, current / baseline of one pooled pair: each side's legs (a pool written before legs: one list of
    steps a side, its single leg)."""
    out = {}
    for t, (b, c) in row["trials"].items():
        b, c = ([x] if x and not isinstance(x[0], list) else x for x in (b, c))
        vb, vc = side_value(statistic, b), side_value(statistic, c)
        if vb and vc:
            out[t] = vc / vb
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("pool", type=Path)
    c.add_argument("--blocks", type=int, default=60)
    c.add_argument("--study", default=DEFAULT_STUDY)
    c.add_argument("--schedule", action="append", choices=[x.value for x in Schedule],
                   help="repeatable: cycled per size (default: the gate's)")
    r = sub.add_parser("replay")
    r.add_argument("pool", type=Path)
    r.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    r.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE)
    r.add_argument("--min-pairs", type=int, default=DEFAULT_MIN_PAIRS)
    r.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    r.add_argument("--runs", type=int, default=2000)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--statistic", choices=[x.value for x in Statistic], default=DEFAULT_STATISTIC.value)
    n = sub.add_parser("noise")
    n.add_argument("pool", type=Path)
    n.add_argument("--statistic", choices=[x.value for x in Statistic], default=DEFAULT_STATISTIC.value)
    m = sub.add_parser("simulate")
    m.add_argument("--sd", type=float, action="append", help="pair noise sd (log), repeatable")
    m.add_argument("--max-pairs", type=int, default=32)
    m.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD)
    m.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE)
    m.add_argument("--min-pairs", type=int, default=DEFAULT_MIN_PAIRS)
    m.add_argument("--runs", type=int, default=2000)
    a = ap.parse_args(argv)
    if a.cmd == "noise":
        noise(a.pool, Statistic(a.statistic))
    elif a.cmd == "simulate":
        simulate(Rule(a.threshold, a.confidence, a.min_pairs), a.max_pairs, a.sd or [0.02, 0.04, 0.06, 0.08],
                 a.runs, 0)
    elif a.cmd == "collect":
        collect(a.pool, a.blocks, a.study, [Schedule(x) for x in a.schedule or [DEFAULT_SCHEDULE.value]])
    else:
        replay(a.pool, Rule(a.threshold, a.confidence, a.min_pairs), a.budget_s, a.runs, a.seed,
               Statistic(a.statistic))


if __name__ == "__main__":
    main()
