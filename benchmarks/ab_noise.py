"""The noise of `vitbench ab` runs kept with `--results DIR`: per trial, the sd of the pair log-ratios (read the
way `ab` reads them: vitbench.compare.ab.Pairs, ab's step statistic per leg, geometric mean over the legs; busy
pairs left out as the rows read the load, which under-reads it where the gate's own processes fill the machine:
`ab` itself measured the load around each pair and may have left out more), their mean, and how many legs had
less than half of the trial's time in common between the two sides (the two sides' runs of the trial, from their
rows' started_at and finished_at).

An A/A run (`vitbench ab HEAD --allow-same ... --results DIR`) gives the gate's noise on this host;
docs/compare.md, "Trials in step", has the figures this printed. `--statistic` reads the same rounds by another
step statistic (vitbench.compare.ab.Statistic). `--between`, over several A/A runs of one setting: per trial and
statistic, the sd between the runs of each run's mean log ratio (what a history of anchored paired points sees,
docs/history.md) beside the pooled within-run pair sd / sqrt(pairs) (what that would be if the runs shared
nothing):
docs/compare.md, "Which step statistic".

    python benchmarks/ab_noise.py DIR [DIR ...] [--statistic p90]
    python benchmarks/ab_noise.py --between DIR DIR DIR ...
"""

from __future__ import annotations

import argparse
import math
import statistics
from datetime import datetime
from pathlib import Path

from vitbench.compare.ab import DEFAULT_STATISTIC, Pairs, Statistic
from vitbench.compare.comparison import load_records
from vitbench.compare.match import DEFAULT_IGNORE, group
from vitbench.compare.schedule import legs_of
from vitbench.tidy import select


def _spans(leg: Path) -> dict[str, tuple[float, float]]:
    """Match key -> (start, end) in epoch seconds of the leg's ok row of that trial."""
    out = {}
    for key, trial in group(select(load_records(leg)), DEFAULT_IGNORE).items():
        for r in trial.ok:
            if r.started_at and r.finished_at:
                out[key] = tuple(datetime.fromisoformat(t).timestamp() for t in (r.started_at, r.finished_at))
    return out


def in_common(a: tuple[float, float], b: tuple[float, float]) -> float:
    """The time two runs share, as a fraction of the longer one."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0])) / max(a[1] - a[0], b[1] - b[0], 1e-9)


Read = tuple[Pairs, dict[str, list[bool]]]  # a run's pairs and which legs were apart (_read)


def noise(results: Path, statistic: Statistic = DEFAULT_STATISTIC) -> list[dict]:
    return _rows(*_read(results), statistic)


def _read(results: Path) -> Read:
    """The run's pairs as `ab` reads them, and per trial whether each leg's two sides were apart."""
    pairs = Pairs()
    apart: dict[str, list[bool]] = {}
    for b_pair in sorted((results / "baseline").glob("pair*")):
        c_pair = results / "current" / b_pair.name
        if not c_pair.is_dir():
            continue
        pairs.add(b_pair, c_pair)
        for b_leg, c_leg in zip(legs_of(b_pair), legs_of(c_pair)):
            bs, cs = _spans(b_leg), _spans(c_leg)
            for key in bs.keys() & cs.keys():
                apart.setdefault(key, []).append(in_common(bs[key], cs[key]) < 0.5)
    return pairs, apart


def _rows(pairs: Pairs, apart: dict[str, list[bool]], statistic: Statistic) -> list[dict]:
    pairs.statistic = statistic  # the ratios are worked out from the kept steps by this statistic
    names = pairs.names()
    out = []
    for key, ratios in pairs.ratios().items():
        logs = [math.log(r) for r in ratios]
        out.append({"trial": names.get(key, key), "pairs": len(logs),
                    "sd_log": statistics.stdev(logs) if len(logs) > 1 else float("nan"),
                    "mean_log": statistics.fmean(logs) if logs else float("nan"), "logs": logs,
                    "legs_apart": sum(apart.get(key, [])), "legs": len(apart.get(key, []))})
    return out


def between(runs: list[Read], statistic: Statistic) -> dict[str, tuple[float, float]]:
    """Trial -> (sd between the runs of their mean log ratios, pooled within-run pair sd / sqrt(mean pairs))."""
    per: dict[str, list[list[float]]] = {}
    for read in runs:
        for row in _rows(*read, statistic):
            if len(row["logs"]) > 1:
                per.setdefault(row["trial"], []).append(row["logs"])
    out = {}
    for trial, jobs in per.items():
        if len(jobs) > 1:
            within = math.sqrt(statistics.fmean(statistics.variance(j) for j in jobs))
            out[trial] = (statistics.stdev(statistics.fmean(j) for j in jobs),
                          within / math.sqrt(statistics.fmean(len(j) for j in jobs)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="`vitbench ab --results` directories")
    ap.add_argument("--statistic", choices=[s.value for s in Statistic], default=DEFAULT_STATISTIC.value)
    ap.add_argument("--between", action="store_true", help="the runs' spread, per trial and statistic")
    a = ap.parse_args()
    if a.between:
        print(f"{len(a.results)} runs: per trial, sd between the runs' mean log ratios / within-run pair sd / "
              "sqrt(pairs)")
        read = [_read(d) for d in a.results]  # each run read once, its ratios worked out by every statistic
        by = {st: between(read, st) for st in Statistic}
        for trial in sorted(by[DEFAULT_STATISTIC]):
            print(f"  {trial[:40]:40s} " + "  ".join(f"{st.value} {by[st][trial][0]:.3f}/{by[st][trial][1]:.3f}"
                                                     for st in Statistic if trial in by[st]))
        return
    for d in a.results:
        print(d)
        for row in noise(d, Statistic(a.statistic)):
            print(f"  {row['trial'][:40]:40s} pairs {row['pairs']:2d}  sd(log) {row['sd_log']:.3f}  "
                  f"mean(log) {row['mean_log']:+.3f}  legs < half in common {row['legs_apart']}/{row['legs']}")


if __name__ == "__main__":
    main()
