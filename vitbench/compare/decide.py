"""Deciding one metric of one matched trial: samples, the machine's calibration, a bootstrap interval on
current / baseline, and the decision against the threshold."""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vitbench.compare.calibrations import Calibrations, metric_samples
from vitbench.compare.match import Trial
from vitbench.compare.runs import assumed_noise, between_runs, busy_floor, same_runs, widened
from vitbench.errors import ConfigError, clip
from vitbench.record import Record, finite_number
from vitbench.stats import MedianBatch, percentile_intervals, picked, repeat_picks
from vitbench.tasks import Metric

# The one declaration of the gates' defaults (`vitbench compare` and `vitbench ab`): a 5 % change matters, decided
# on a 95 % interval (docs/compare.md: the gate's power measured with these).
DEFAULT_THRESHOLD = 0.05
DEFAULT_CONFIDENCE = 0.95
# the least --confidence taken: a two-sided interval of less misses the true ratio more often than it holds it
MIN_CONFIDENCE = 0.5


def check_gate(threshold: float | None, confidence: float, zero_threshold: bool) -> None:
    """--threshold a fraction in [0, 1) (`zero_threshold`: compare, where 0 flags any change its interval
    excludes) or (0, 1) (ab and bisect: their sequential rule stops on "no change" only inside a margin), and
    --confidence in [MIN_CONFIDENCE, 1); ConfigError naming the flag otherwise. The one check of the gates' shared
    flags
    (compare, ab, bisect; history's --confidence)."""
    if threshold is not None and not (math.isfinite(threshold) and (0 <= threshold if zero_threshold else
                                                                     0 < threshold) and threshold < 1):
        within = "[0, 1)" if zero_threshold else "(0, 1)"
        raise ConfigError(f"--threshold must be a fraction in {within}, e.g. 0.05 for 5 %; got {threshold}")
    if not MIN_CONFIDENCE <= confidence < 1:  # NaN fails it too
        raise ConfigError(f"--confidence must be in [{MIN_CONFIDENCE}, 1), e.g. 0.95; got {confidence} (an "
                          "interval of less than 50 % misses the true ratio more often than it holds it)")


class Decision(str, enum.Enum):
    REGRESSION = "regression"  # the whole CI is worse than the threshold
    IMPROVEMENT = "improvement"  # the whole CI is better than the threshold
    INCONCLUSIVE = "inconclusive"  # the CI reaches past the threshold on the bad side: not decided
    NO_CHANGE = "no change"
    FAILED = "failed"  # ok in the baseline, not in current (oom, error, timeout, interrupted)
    NO_DATA = "no data"  # neither side has a value to compare

    def __str__(self) -> str:
        return self.value


REGRESSING = frozenset({Decision.REGRESSION, Decision.FAILED})  # decisions that make `vitbench compare` exit 1


@dataclass
class Row:
    """One metric of one matched trial. Ratios are current / baseline (normalised when `normalized`)."""

    trial: str
    metric: str
    unit: str
    higher_is_better: bool
    decision: Decision
    baseline: float | None = None  # a side's value: the mean of its runs' values (`repeats` of them), raw
    current: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ratio_raw: float | None = None  # before dividing out the calibration
    machine_ratio: float | None = None  # calibration current / baseline (None unless normalised)
    repeats: tuple[int, int] = (0, 0)
    samples: tuple[int, int] = (0, 0)
    method: str = ""
    note: str = ""
    # (baseline, current): the side's value is a lower bound (Metric.lower_bound_when: the largest batch where the
    # search stopped at its cap), shown '\u2265' beside it
    at_least: tuple[bool, bool] = (False, False)
    # (baseline, current): what a side's value is, said beside it in place of 'mean of N runs' where not "" (ab's
    # rows: 'geometric mean of 3 quiet pairs; 2 busy left out', the pairs its ratio is over)
    shown_as: tuple[str, str] = ("", "")


def decide(ci_low: float | None, ci_high: float | None, threshold: float, higher_is_better: bool) -> Decision:
    """The gates' one rule (`vitbench compare` and `vitbench ab` alike), on the interval of current / baseline:
    regression when the whole interval is worse than the threshold; no change when the whole interval is on the
    good side of it (confident: not worse by the threshold), improvement when it is wholly better than
    1 + threshold; inconclusive when the interval reaches past the threshold on the bad side (or there is none)."""
    if ci_low is None or ci_high is None:
        return Decision.INCONCLUSIVE
    # in the metric's direction: `worse` beyond 1 -/+ t is a regression, `better` beyond 1 +/- t an improvement
    if higher_is_better:
        regression, improvement, cleared = ci_high < 1 - threshold, ci_low > 1 + threshold, ci_low >= 1 - threshold
    else:
        regression, improvement, cleared = ci_low > 1 + threshold, ci_high < 1 - threshold, ci_high <= 1 + threshold
    if regression:
        return Decision.REGRESSION
    if improvement:
        return Decision.IMPROVEMENT
    return Decision.NO_CHANGE if cleared else Decision.INCONCLUSIVE


def _in_time(metric: Metric, xs: np.ndarray) -> bool:
    """Whether a run's samples of `metric` are rates whose median is taken in time space: a speed's samples
    (work / each sample's time: per-step img/s) where every one is > 0. A row's speed is work / the median time
    (vitbench.measure.throughput), which with an even count of samples averages the two middle *times*; the median
    of the rates averages the two middle rates instead, 0.2 % apart on a 50-window JAX row (a review recomputing
    the rows). So the run's median and its bootstrap replicates are those of 1 / rate, inverted: work / median
    time, the row's own definition (the same number for an odd count)."""
    if not (metric.speed and metric.samples is not None):
        return False
    with np.errstate(divide="ignore", over="ignore"):
        return bool((xs > 0).all() and np.isfinite(1 / xs).all())


def _draw(trial: Trial, metric: Metric, boot: MedianBatch) -> tuple[list[tuple[Record, int, int, bool]], object]:
    """The bootstrap draws of one side, in the order one trial at a time drew them: each record's resamples, then
    (several records) the repeats' picks. ([(record, handle, samples, in time space)], picks or None)."""
    drawn = []
    for rec in trial.ok:
        xs = metric_samples(rec, metric)
        if xs:
            a = np.asarray(xs, dtype=float)
            inv = _in_time(metric, a)
            drawn.append((rec, boot.draw(1 / a if inv else a), len(xs), inv))
    return drawn, (repeat_picks(len(drawn), boot.n_boot, boot.rng) if len(drawn) > 1 else None)


def _row_value(rec: Record, metric: Metric, p: float) -> float:
    """A run's point: the value its row holds where that is a finite number > 0 and the metric is decided on
    samples (img_per_s: achieved batch / median step time, the number `vitbench report` shows; the samples'
    median in time space is the same up to a few roundings), else `p`, the samples' median."""
    v = rec.metrics.get(metric.name)
    return float(v) if metric.samples is not None and finite_number(v) and v > 0 else p


def _side(drawn, calib: Calibrations | None, boot: MedianBatch, metric: Metric):
    """(point, replicates, repeats, samples, unnormalised point, per-run points, their unnormalised values) of one
    side, or None when no record has it. A run's point is its row's value (_row_value); the replicates are its
    samples' bootstrap medians (in time space for a speed: _in_time)."""
    (recs, picks), points, reps, raw_points, n = drawn, [], [], [], 0
    for rec, handle, size, inv in recs:
        p, r = boot.result(handle)
        if inv:
            p, r = 1 / p, 1 / r
        p = _row_value(rec, metric, p)
        raw_points.append(p)
        n += size
        if calib is not None:
            speed, cal = p, calib.for_record(rec)
            with np.errstate(over="ignore", under="ignore"):  # (refused just below, not warned of)
                p, r = np.float64(p) / cal, r / cal
            if not (finite_number(float(p)) and p > 0 and np.isfinite(r).all()):
                raise ConfigError(f"--normalize: {metric.name} {float(speed):g} divided by the {calib.side} "
                                  f"results' calibration {cal:g} is {float(p):g}, not a finite number > 0 "
                                  f"({rec.source or 'results'}): check it, or compare without --normalize")
        points.append(p)
        reps.append(r)
    if not points:
        return None
    with np.errstate(over="ignore"):  # normalised points may sum past a float's range: _finite_ratio
        replicates = reps[0] if picks is None else picked(np.stack(reps), picks)
        return _mean(points), replicates, len(points), n, _mean(raw_points), points, raw_points


def _mean(xs: list[float]) -> float:
    """float(np.mean(xs)), without numpy's overhead for the one value of a single run (x / 1 is x)."""
    return float(xs[0]) if len(xs) == 1 else float(np.mean(xs))


def _bounds_moved(md: Metric, base: list[Record], cur: list[Record]) -> str:
    """Why `md` cannot be decided between the sides: a metric bounding it (Metric.bounded_by) differs; '' if none
    does."""
    out = []
    for name in md.bounded_by:
        bv, cv = ({r.metrics.get(name) for r in recs} for recs in (base, cur))
        shown = ["/".join(sorted(map(str, v))) for v in (bv, cv)]
        if bv != cv:
            out.append(f"{name} differs ({shown[0]} vs {shown[1]}): {md.name} follows it")
        elif len(bv) > 1:  # the runs of each side mix values of it: their repeats are not alike
            out.append(f"{name} differs between the runs of each side ({shown[0]}): {md.name} follows it")
    return "; ".join(out)


def _lower_bounds(md: Metric, base: list[Record], cur: list[Record], row: Row) -> list[str]:
    """What a side's value is where it is a lower bound (Metric.lower_bound_when: the largest batch where the
    search stopped at its cap): a verdict between two such sides holds only up to them."""
    flag = md.lower_bound_when
    if flag is None:
        return []
    at = [(side, v) for side, recs, v in (("baseline", base, row.baseline), ("current", cur, row.current))
          if any(r.metrics.get(flag) is True for r in recs)]
    row.at_least = (any(s == "baseline" for s, _ in at), any(s == "current" for s, _ in at))
    if len(at) == 2:
        return [f"both sides {flag}: each {md.name} is a lower bound (\u2265 {at[0][1]:g} vs \u2265 {at[1][1]:g}), "
                "alike up to it, unknown past it: raise the cap to compare past it"]
    return [f"{side} {flag}: its {md.name} is a lower bound (\u2265 {v:g})" for side, v in at]


def status_note(recs: list[Record]) -> str:
    st = sorted({r.status.value for r in recs})
    msg = next((r.error.message for r in recs if r.error), None)
    return "/".join(st) + (f": {str(msg).strip().splitlines()[-1][:120]}" if msg and str(msg).strip() else "")


def _finite_ratio(label: str, md: Metric, row: Row, normalize: bool) -> None:
    """Refuse a ratio or interval that is no finite number, or, normalised, one or a machine factor that is not
    > 0: values that each pass tasks.row_check but divide past a float's range (a speed over a calibration: a
    machine 'inf' times faster; a step of 1e10 s against one of 1e-300 s: an improvement of inf). A plain ratio
    of 0 stays a verdict (a size or accuracy of 0 is measured)."""
    values = (row.ratio, row.ci_low, row.ci_high, row.machine_ratio)
    if not all(v is None or (finite_number(v) and (v > 0 or not normalize)) for v in values):
        shown = ", ".join(f"{k} {v:g}" for k, v in zip(("ratio", "low", "high", "machine"), values)
                          if v is not None)
        if normalize:
            raise ConfigError(f"--normalize: {clip(label, 120)} {md.name}: the calibrations give {shown}, not "
                              "each a finite number > 0: check the calibration rows, or compare without "
                              "--normalize")
        raise ConfigError(f"{clip(label, 120)} {md.name}: the two sides give {shown}, not each a finite number: "
                          "values no machine measured (rows edited or written by another tool); check the rows")


def compare_trial(label: str, b: Trial, c: Trial, metrics: Sequence[Metric], threshold: float,
                  confidence: float, calibs: tuple[Calibrations, Calibrations] | None, n_boot: int,
                  rng: np.random.Generator, run_noise: float | None = None) -> list[Row]:
    """The rows of one matched trial: a status row when a side has no ok record, else one per metric it has.

    `run_noise`: the between-run sd (log) to assume where a side has one run (None: the host-state floor;
    vitbench.compare.runs)."""
    return compare_trials([(label, b, c)], metrics, threshold, confidence, calibs, n_boot, rng, run_noise)[0]


BLOCK = 256  # trials whose bootstrap is computed together: some 25-50 MB of draws at the CI study's 5-7 steps


def compare_trials(pairs: Sequence[tuple[str, Trial, Trial]], metrics: Sequence[Metric], threshold: float,
                   confidence: float, calibs: tuple[Calibrations, Calibrations] | None, n_boot: int,
                   rng: np.random.Generator, run_noise: float | None = None) -> list[list[Row]]:
    """compare_trial of each (label, baseline, current), the bootstrap of BLOCK trials at a time computed together
    (stats.MedianBatch, stats.percentile_intervals; issue 51): the draws are made in the order one trial at a time
    made them, so the rows are the same, bit for bit, for the same `rng`."""
    out = []
    for start in range(0, len(pairs), BLOCK):
        block, boot = pairs[start:start + BLOCK], MedianBatch(rng, n_boot)
        drawn = [[(_draw(b, md, boot), _draw(c, md, boot)) for md in metrics] if b.ok and c.ok else None
                 for _, b, c in block]
        boot.run()
        sides = [None if d is None else [
            (_side(db, calibs[0] if calibs is not None and md.speed else None, boot, md),
             _side(dc, calibs[1] if calibs is not None and md.speed else None, boot, md))
            for md, (db, dc) in zip(metrics, d)] for d in drawn]
        with np.errstate(over="ignore", invalid="ignore"):  # past a float's range: _finite_ratio refuses it
            ratios = [cs[1] / bs[1] for s in sides if s for bs, cs in s if bs and cs and bs[0] > 0]
            intervals = iter(percentile_intervals(np.stack(ratios) if ratios else np.empty((0, n_boot)),
                                                  confidence))
        out += [_rows(label, b, c, metrics, threshold, confidence, calibs is not None, s, intervals, run_noise)
                for (label, b, c), s in zip(block, sides)]
    return out


def _rows(label: str, b: Trial, c: Trial, metrics: Sequence[Metric], threshold: float, confidence: float,
          normalize: bool, sides, intervals, run_noise: float | None) -> list[Row]:
    """The rows of one trial from its sides' values (`sides`: per metric, (baseline, current) as _side gives them)
    and, in order, the percentile intervals of its ratios' replicates."""
    if not c.ok or not b.ok:
        if b.ok:
            decision, note = Decision.FAILED, f"current: {status_note(c.failed)}"
        elif c.ok:
            decision, note = Decision.IMPROVEMENT, f"baseline: {status_note(b.failed)}; current: ok"
        else:
            decision = Decision.NO_DATA
            note = f"failed on both sides: {status_note(b.failed)} / {status_note(c.failed)}"
        return [Row(label, "status", "", True, decision, repeats=(len(b.ok), len(c.ok)), method="status",
                    note=note)]
    rows = []
    for md, (bs, cs) in zip(metrics, sides):
        norm = normalize and md.speed
        if bs is None and cs is None:
            continue  # this kind of record does not carry the metric
        row = Row(label, md.name, md.unit, md.higher_is_better, Decision.NO_DATA)
        notes = []
        if c.failed:
            notes.append(f"{len(c.failed)} current repeat(s) {status_note(c.failed)}")
        if bs is None or cs is None:
            row.baseline = bs[4] if bs else None
            row.current = cs[4] if cs else None
            row.repeats = (bs[2] if bs else 0, cs[2] if cs else 0)
            if cs is None:  # an ok row without the measure the baseline has: vitbench never writes one
                row.decision = Decision.FAILED
                notes.append(f"current's ok row(s) carry no {md.name}: edited or written by another tool?")
            row.note = "; ".join([*notes, f"not in {'baseline' if bs is None else 'current'}"])
            rows.append(row)
            continue
        (bp, _, bn_rep, bn, b_raw, b_pts, b_raws), (cp, _, cn_rep, cn, c_raw, c_pts, c_raws) = bs, cs
        row.baseline, row.current = b_raw, c_raw
        row.repeats, row.samples = (bn_rep, cn_rep), (bn, cn)
        if bp <= 0:
            row.decision = Decision.NO_CHANGE if cp == bp else (
                Decision.IMPROVEMENT if (cp > bp) == md.higher_is_better else Decision.REGRESSION)
            row.note = "; ".join([*notes, "baseline is 0: no ratio"])
            rows.append(row)
            continue
        ratio = cp / bp
        lo, hi = next(intervals)  # of cr / br
        stepwise = max(bn, cn) > max(bn_rep, cn_rep)
        single = not stepwise and bn_rep == 1 and cn_rep == 1
        row.method = "single value" if single else (
            "bootstrap: steps" + (" + repeats" if max(bn_rep, cn_rep) > 1 else "") if stepwise
            else "bootstrap: repeats")
        one_run, row.ratio_raw = False, c_raw / b_raw if b_raw else None
        if same_runs(b.ok, c.ok):  # one measurement on both sides (a self-test may have scaled one copy)
            lo = hi = ratio
            row.method = "the same runs on both sides"
        elif min(bn_rep, cn_rep) >= 2 and min(*b_pts, *c_pts, *b_raws, *c_raws) > 0 \
                and len({*b_pts}) + len({*c_pts}) > 2:  # runs are the units (runs without any spread: no sd)
            floors = (busy_floor(b.ok), busy_floor(c.ok)) if md.speed else (0.0, 0.0)
            iv = between_runs(b_pts, c_pts, confidence, floors)  # (the floor: measured on img/s only)
            ratio, lo, hi, row.method = iv.ratio, iv.low, iv.high, iv.method
            row.ratio_raw = between_runs(b_raws, c_raws, confidence).ratio  # the same (geometric) mean, raw
        elif (md.speed or md.samples is not None) and lo > 0:  # measured on a side once: its run noise assumed
            # (a speed without step samples, e.g. serve's samples_per_s, too: as a single value it had an interval
            # of zero width, 12 % called a certain regression where two runs a side were undecided)
            one_run = True
            iv = widened(ratio, lo, hi, assumed_noise([*b.ok, *c.ok], run_noise), (bn_rep, cn_rep), confidence)
            lo, hi, row.method = iv.low, iv.high, iv.method
        row.ratio, row.ci_low, row.ci_high = ratio, lo, hi
        if norm and row.ratio_raw:
            row.machine_ratio = row.ratio_raw / ratio if ratio else math.inf  # (refused just below)
        _finite_ratio(label, md, row, norm)
        row.decision = decide(lo, hi, threshold, md.higher_is_better)
        moved = _bounds_moved(md, b.ok, c.ok)
        if moved and row.decision is not Decision.NO_CHANGE:  # the bound's change, not the code's
            row.decision = Decision.INCONCLUSIVE
            notes.append(moved)
        if c.failed and not b.failed:  # ok in every baseline repeat, failing in some now: not a pass
            row.decision = Decision.FAILED
        notes += _lower_bounds(md, b.ok, c.ok, row)
        if row.decision is Decision.INCONCLUSIVE and not moved:
            notes.append("more sweeps per side (each into its own directory), or `vitbench ab`" if one_run else
                         "the interval reaches past the threshold: add runs")
        row.note = "; ".join(notes)
        rows.append(row)
    return rows
