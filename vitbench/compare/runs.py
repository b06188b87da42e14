"""The noise between runs: what a verdict on throughput must hold besides the steps' own spread.

Two sweeps of the same code a minute apart on a busy host differ by 10-30 %; the steps inside one sweep never show
that (docs/compare.md, "One run per side"). So a throughput interval is built on the runs, not the steps:

- **Several runs per side** (records of a trial: repeats of a sweep, or sweeps in several directories): the runs
  are the units. Each run's value is the median of its steps (normalised by its calibration under
  --normalize); the interval is Welch's t-interval on the difference of the sides' mean log values (Welch 1947,
  "The generalization of 'Student's' problem when several different population variances are involved",
  Biometrika 34), so the run-to-run spread measured here, with its few degrees of freedom, sets the width.
- **One run on a side**: the run-to-run spread cannot be seen from inside the data, so an assumed spread is added
  to the steps' interval: `--run-noise SD` (the user's host, measured with several runs), else the floor this
  project measured for the host's state the rows recorded (quiet or busy: `other_load_cores`, vitbench.measure.
  load). The verdict says which it assumed; at the busy floor only a change of about half or more can be
  decided, so identical code on a busy host comes out inconclusive (exit 3), not a regression.
- **The same runs on both sides** (a results directory compared with itself): no run-to-run noise between them.
  Some runs on both sides, not all (a directory of sweeps against one of its own, copies of a run in both): refused
  (vitbench.compare.comparison), as a shared run would count as two independent ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from vitbench.measure.load import OTHER_LOAD, busy
from vitbench.record import Record, finite_number
from vitbench.stats import t_quantile

# The sd of log(a run's median img/s) between sweeps of identical code, largest over the CI study's four trials,
# measured on this project's 2-core machine (docs/compare.md, "One run per side").
# Quiet host: the `alternate` pool of docs/compare.md (28 sequential pairs), worst trial 0.089 / sqrt(2).
RUN_NOISE_QUIET = 0.063
# Busy host: benchmarks/bench_compare_aa.py's development set (pairs 0-9 of 2026-11-28: 4 busy-loop processes plus
# other engineers' test suites, load average 4-21 on 2 cores): the sd of log run value over its 19-20 runs per
# trial was 0.77-0.91 (R-Micro infer the largest). The later pairs are the verification set.
RUN_NOISE_BUSY = 0.9
RUN_NOISE_MAX = 2.0  # --run-noise above this (a factor of e^2 = 7.4 between runs) is a typo, not a host


@dataclass(frozen=True)
class RunNoise:
    """The sd of a run's log value assumed between runs, and why (shown in the verdict)."""

    sd: float
    why: str


def assumed_noise(records: Sequence[Record], user_sd: float | None) -> RunNoise:
    """The spread between runs to assume for a trial with one run on a side: the user's, or the floor of the host
    state its rows recorded (busy when other processes used BUSY_CORES or more during any of its timed steps, or
    when a row did not record it)."""
    if user_sd is not None:
        return RunNoise(user_sd, f"--run-noise {user_sd:g}")
    loads = [r.metrics.get(OTHER_LOAD) for r in records]
    known = [x for x in loads if finite_number(x)]
    if len(known) < len(loads):
        return RunNoise(RUN_NOISE_BUSY, "busy-host floor (a row did not record the other load)")
    if any(busy(x, missing=True) for x in known):
        return RunNoise(RUN_NOISE_BUSY, f"busy-host floor (other processes used up to {max(known):.1f} cores)")
    return RunNoise(RUN_NOISE_QUIET, "quiet-host floor")


def _run_id(r: Record) -> tuple[str, str, str, str]:
    """A record's run: its sweep run id, start time, trial key and repeat."""
    return str(r.run_id), str(r.started_at), str(r.key), str(r.repeat)


def same_runs(baseline: Sequence[Record], current: Sequence[Record]) -> bool:
    """Both sides hold the very same runs (one results directory compared with itself): the same sweep run ids,
    trial keys, repeats and start times. Records without a run id (not written by a sweep) are never the same."""
    return (all(r.run_id for r in (*baseline, *current))
            and sorted(map(_run_id, baseline)) == sorted(map(_run_id, current)))


def shared_runs(baseline: Sequence[Record], current: Sequence[Record]) -> int:
    """How many runs stand on both sides where the sides are not the same runs: a directory of several sweeps
    compared with one of its own sweeps, or two directories holding copies of one run. Such a run would be counted
    twice as independent, pulling the sides together (a verdict of no change on the same data); 0 when none is
    shared or when every one is (same_runs: a directory compared with itself). Only records a sweep wrote (a run
    id and a start time) are looked at."""
    if same_runs(baseline, current):
        return 0
    def ids(recs):
        return {_run_id(r) for r in recs if r.run_id and r.started_at}
    return len(ids(baseline) & ids(current))


@dataclass(frozen=True)
class Interval:
    ratio: float
    low: float
    high: float
    method: str


def busy_floor(records: Sequence[Record]) -> float:
    """The between-run sd a side's runs of a speed are held to at least: where any of its rows records other
    processes using BUSY_CORES or more, RUN_NOISE_BUSY, else 0 (its runs' own spread). Not `--run-noise`: that
    is one run's assumed spread, a quiet host's figure perhaps, and would undo the floor where it is needed. Runs
    of one busy spell agree with each other and not with the next spell: two busy runs a side a few percent
    apart, against a quiet baseline, gave `R-Micro infer 0.580 [0.540, 0.622] regression` on identical
    code (normalised; raw 0.414, machine 0.715). A row that does not record the load is not counted busy here: its
    side's spread is measured."""
    return RUN_NOISE_BUSY if any(busy(r.metrics.get(OTHER_LOAD), missing=False) for r in records) else 0.0


def between_runs(base: Sequence[float], cur: Sequence[float], confidence: float,
                 floors: tuple[float, float] = (0.0, 0.0)) -> Interval:
    """Welch's t-interval on mean log(current) - mean log(baseline), runs as the units (two or more a side), each
    side's variance held to at least its floor squared (`floors`: busy_floor's, baseline and current). The
    Welch-Satterthwaite degrees of freedom count only the measured variances, so a side far below its floor is
    a known sd (df towards infinity: the normal quantile) and the interval moves smoothly as a side's spread
    crosses its floor (taking the floor as known only below it made 2/2 busy runs' interval 8x wider on the log
    scale between a measured sd of 0.89 and 0.91); with no floor it is Welch's."""
    (nb, mb, vb), (nc, mc, vc) = (_log_stats(xs) for xs in (base, cur))
    hb, hc = max(vb, floors[0] ** 2), max(vc, floors[1] ** 2)  # the variances used
    se = math.sqrt(hb / nb + hc / nc)
    # not rounded down to a whole number (as tables must): the quantile moves with the spread, with no step of its
    # own (t at df 3.99 rounded to 3 is 14 % above t at 4); no spread and no floor: nb + nc - 2
    den = (vb / nb) ** 2 / (nb - 1) + (vc / nc) ** 2 / (nc - 1)
    df = (nb + nc - 2) if se == 0 else math.inf if den == 0 else se ** 4 / den
    q = NormalDist().inv_cdf(0.5 + confidence / 2) if df > 1e9 else t_quantile(0.5 + confidence / 2, max(1.0, df))
    half, d = q * se, mc - mb
    note = f"runs: {nb}/{nc}, Welch t (between-run sd {math.sqrt(vb):.3f}/{math.sqrt(vc):.3f})"
    if hb > vb or hc > vc:
        note = (f"runs: {nb}/{nc}, Welch t held to the busy floor (between-run sd {math.sqrt(hb):.3f}/"
                f"{math.sqrt(hc):.3f}, measured {math.sqrt(vb):.3f}/{math.sqrt(vc):.3f})")
    return Interval(math.exp(d), math.exp(d - half), math.exp(d + half), note)


def _log_stats(xs: Sequence[float]) -> tuple[int, float, float]:
    """n, mean and sample variance of the log values."""
    logs = [math.log(x) for x in xs]
    n, m = len(logs), sum(logs) / len(logs)
    return n, m, sum((x - m) ** 2 for x in logs) / (n - 1)


def widened(ratio: float, low: float, high: float, noise: RunNoise, runs: tuple[int, int],
            confidence: float) -> Interval:
    """The steps' interval (low, high around ratio) with the assumed between-run spread added in quadrature."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    se_steps = (math.log(high) - math.log(low)) / (2 * z)
    se = math.sqrt(se_steps ** 2 + noise.sd ** 2 * (1 / runs[0] + 1 / runs[1]))
    d = math.log(ratio)
    return Interval(ratio, math.exp(d - z * se), math.exp(d + z * se),
                    f"one run on a side: steps + assumed between-run sd {noise.sd:g}, {noise.why}")


def runs_needed(sd: float, change: float, confidence: float = 0.95, power: float = 0.8) -> int:
    """Runs per side for a slowdown of `change` (0.1 = 10 %) to be called a regression `power` of the time by a
    gate whose threshold is half the change, at a between-run sd of `sd` (log): the normal-approximation sample
    size n = 2 ((z_conf + z_power) sd / (log(1 - change / 2) - log(1 - change)))^2, rounded up (Welch's t with
    few runs needs somewhat more)."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2) + NormalDist().inv_cdf(power)
    gap = math.log(1 - change / 2) - math.log(1 - change)
    return max(2, math.ceil(2 * (z * sd / gap) ** 2))
