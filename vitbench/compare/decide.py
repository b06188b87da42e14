"""Deciding one metric of one matched trial: samples, the machine's calibration, a bootstrap interval on
current / baseline, and the decision against the threshold."""

from __future__ import annotations

import datetime as _dt
import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vitbench.compare.match import Trial
from vitbench.compare.runs import assumed_noise, between_runs, busy_floor, same_runs, widened
from vitbench.errors import ConfigError, clip
from vitbench.record import Record, finite_number
from vitbench.stats import MedianBatch, percentile_intervals, picked, repeat_picks
from vitbench.tasks import Metric
from vitbench.tasks.calibration import CONDITIONS, HOW, SIZE, WHERE, calibrates, matmul_size

# The one declaration of the gates' defaults (`vitbench compare` and `vitbench ab`): a 5 % change matters, decided
# on a 95 % interval (docs/compare.md: the gate's power measured with these).
DEFAULT_THRESHOLD = 0.05
DEFAULT_CONFIDENCE = 0.95


def check_gate(threshold: float | None, confidence: float, zero_threshold: bool) -> None:
    """--threshold a fraction in [0, 1) (`zero_threshold`: compare, where 0 flags any change its interval
    excludes) or (0, 1) (ab and bisect: their sequential rule stops on "no change" only inside a margin), and
    --confidence in (0, 1); ConfigError naming the flag otherwise. The one check of the gates' shared flags
    (compare, ab, bisect; history's --confidence)."""
    if threshold is not None and not (math.isfinite(threshold) and (0 <= threshold if zero_threshold else
                                                                     0 < threshold) and threshold < 1):
        within = "[0, 1)" if zero_threshold else "(0, 1)"
        raise ConfigError(f"--threshold must be a fraction in {within}, e.g. 0.05 for 5 %; got {threshold}")
    if not 0 < confidence < 1:  # NaN fails it too
        raise ConfigError(f"--confidence must be in (0, 1), got {confidence}")


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


def metric_samples(rec: Record, metric: Metric) -> list[float] | None:
    """The samples a record offers for `metric`: its declared sampler (e.g. per-step img/s), else its value. The
    metrics compared (speeds, sizes, accuracies) are never negative, and vitbench writes no non-finite number: a
    sample that is either (a row edited or written by another tool; steps so short a speed overflows) is refused
    naming the row, never decided on (ConfigError)."""
    xs = metric.samples(rec) if metric.samples is not None else None
    if not xs:
        v = rec.metrics.get(metric.name)
        if v is None:
            return None
        xs = [float(v)] if finite_number(v) else [v]
    least = 0.0 if metric.minimum is None else metric.minimum  # (a comparable metric's is >= 0: tasks.Metric)
    bad = next((x for x in xs if not finite_number(x) or x < least), None)
    if bad is not None:
        where = f"{rec.source or 'results'}: trial {clip(str(rec.key or rec.measured_config), 120)}"
        raise ConfigError(f"{where}: {metric.name} {clip(repr(bad), 40)} is not a finite number >= 0, which "
                          "vitbench never records: the row was edited or written by another tool; fix or remove "
                          "it")
    return xs


def _timestamp(s) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(s)).timestamp()
    except ValueError:
        return None


class Calibrations:
    """Calibration records of one side, looked up per trial record (same run, backend, device; precision)."""

    def __init__(self, records: Sequence[Record], metric: Metric, side: str):
        self.side, self.metric = side, metric
        self.records = [r for r in records if metric_samples(r, metric)]
        self._cache: dict[tuple, tuple[float, int | None]] = {}
        self._cands: dict[tuple, tuple[list[Record], dict[str, list[Record]]]] = {}
        self.fallbacks = 0

    def _candidates(self, cfg: dict) -> tuple[list[Record], dict[str, list[Record]]]:
        """The calibrations of the trial's backend and device, and the same by run: found once per backend and
        device (scanning every calibration for every trial made `compare --normalize` and `history append`
        grow as trials x calibrations: 120 s at 100,000 rows)."""
        key = tuple(str(cfg.get(k)) for k in WHERE)
        if key not in self._cands:
            cands = [c for c in self.records
                     if all(c.measured_config.get(k) == cfg.get(k) for k in WHERE
                            if c.measured_config.get(k) is not None and cfg.get(k) is not None)]
            by_run: dict[str, list[Record]] = {}
            for c in cands:
                if c.run_id is not None:
                    by_run.setdefault(c.run_id, []).append(c)
            self._cands[key] = cands, by_run
        return self._cands[key]

    def sizes(self) -> dict[tuple, set]:
        """The matrix sizes this side's calibrations were taken at, per backend, device, precision and threads."""
        out: dict[tuple, set] = {}
        for c in self.records:
            out.setdefault(tuple(str(c.measured_config.get(k)) for k in CONDITIONS), set()).add(matmul_size(c))
        return out

    def for_record(self, rec: Record) -> float:
        """The calibration a trial record's speed is divided by (`lookup`'s value)."""
        return self.lookup(rec)[0]

    def lookup(self, rec: Record) -> tuple[float, int | None]:
        """The calibration a trial record's speed is divided by, and its matrix size (None where its pool mixes
        sizes). A fixed divisor: the median of the calibration's runs. Its uncertainty is not resampled from its
        3-odd runs (a median of 3 bootstraps to a lumpy, outlier-driven distribution); it enters the interval
        through the repeats instead, when every repeat round has its own calibration (see docs/compare.md)."""
        pool, same_run = self._pool(rec)
        self.fallbacks += not same_run
        ident = tuple(sorted(id(c) for c in pool))
        if ident not in self._cache:
            value = float(np.median([x for c in pool for x in metric_samples(c, self.metric)]))
            if not (value > 0 and math.isfinite(value)):
                cfg = rec.measured_config
                raise ConfigError(f"--normalize: the {self.side} results' calibration ({self.metric.name}) for "
                                  f"backend {cfg.get('backend')!r} is {value:g}: nothing to divide "
                                  f"by ({pool[0].source or 'results'}); compare without --normalize")
            sizes = {matmul_size(c) for c in pool}
            self._cache[ident] = value, (sizes.pop() if len(sizes) == 1 else None)
        return self._cache[ident]

    def _pool(self, rec: Record) -> tuple[list[Record], bool]:
        """The calibrations a trial record is divided by, and whether they are of its own run."""
        cfg = rec.measured_config
        cands, by_run = self._candidates(cfg)
        if not cands and not calibrates(str(cfg.get("backend"))):
            raise ConfigError(
                f"--normalize: backend {cfg.get('backend')!r} times no matmul of its own (a deployment runtime), "
                "so no sweep takes a calibration for it and its trials have nothing to be divided by: compare "
                "without --normalize (same-job runs, as `vitbench ab` does, need none)")
        if not cands:
            raise ConfigError(
                f"--normalize: the {self.side} results have no calibration record (metric {self.metric.name}) for "
                f"backend {cfg.get('backend')!r} on device {cfg.get('device')!r}; `vitbench sweep` measures one "
                "at the start of every run. Re-run the sweep, or compare without --normalize.")
        same_run = by_run.get(rec.run_id, []) if rec.run_id is not None else []
        pool = same_run or cands
        # The same precision and threads, never another's: a bf16 trial divided by an fp32 peak on one side and a
        # bf16 one on the other, or 1 thread by 4, invents a change of the peaks' ratio (a sweep measures one
        # calibration per backend, device, precision and threads; a missing one failed or was removed).
        same = [c for c in pool if all(c.measured_config.get(k) == cfg.get(k) for k in HOW)]
        if not same:
            raise ConfigError(
                f"--normalize: the {self.side} results have no calibration for backend {cfg.get('backend')!r}, "
                f"precision {cfg.get('precision')!r}, threads {cfg.get('threads')!r} (only "
                f"{sorted({(c.measured_config.get('precision'), c.measured_config.get('threads')) for c in pool})}"
                "): dividing by another's would invent a change; re-run the sweep, or compare without --normalize")
        pool = same
        # several calibrations in the run (one per repeat round): the one measured nearest in time tracks the
        # machine's state (other load, clocks) at the trial best
        t = _timestamp(rec.started_at)
        times = [_timestamp(c.started_at) for c in pool]
        if t is not None and len(pool) > 1 and None not in times:
            best = min(abs(x - t) for x in times)
            pool = [c for c, x in zip(pool, times) if abs(x - t) == best]
        return pool, bool(same_run)


def same_sizes(calibs: Sequence[Calibrations]) -> None:
    """Refuse to normalise by calibrations taken at different matrix sizes (on both sides together): a GPU's
    calibration took n=1024 before 2026-11-29 and 8192 since, some 7x apart in bf16 on an H200, which dividing by
    both would call a change of the code."""
    merged: dict[tuple, set] = {}
    for cal in calibs:
        for k, v in cal.sizes().items():
            merged.setdefault(k, set()).update(v)
    mixed = {k: v for k, v in merged.items() if len(v) > 1}
    if mixed:
        k, v = next(iter(mixed.items()))
        raise ConfigError(
            f"--normalize: the calibrations of {', '.join(f'{n} {x}' for n, x in zip(CONDITIONS, k))} were "
            f"taken at different matrix sizes ({SIZE} {', '.join(map(str, sorted(v, key=str)))}; a calibration "
            "follows the device's kind since 2026-11-29): dividing by both would invent a change. Compare runs "
            "calibrated alike, or compare without --normalize")


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
    with np.errstate(over="ignore"):  # normalised points may sum past a float's range: _finite_normalised
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


def status_note(recs: list[Record]) -> str:
    st = sorted({r.status.value for r in recs})
    msg = next((r.error.message for r in recs if r.error), None)
    return "/".join(st) + (f": {str(msg).strip().splitlines()[-1][:120]}" if msg and str(msg).strip() else "")


def _finite_normalised(label: str, md: Metric, row: Row) -> None:
    """Refuse a normalised ratio, interval or machine factor that is not a finite number > 0 (calibrations that
    pass tasks.row_check but divide past a float's range: a machine 'inf' times faster)."""
    values = (row.ratio, row.ci_low, row.ci_high, row.machine_ratio)
    if not all(v is None or (finite_number(v) and v > 0) for v in values):
        shown = ", ".join(f"{k} {v:g}" for k, v in zip(("ratio", "low", "high", "machine"), values)
                          if v is not None)
        raise ConfigError(f"--normalize: {clip(label, 120)} {md.name}: the calibrations give {shown}, not each a "
                          "finite number > 0: check the calibration rows, or compare without --normalize")


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
        ratios = [cs[1] / bs[1] for s in sides if s for bs, cs in s if bs and cs and bs[0] > 0]
        intervals = iter(percentile_intervals(np.stack(ratios) if ratios else np.empty((0, n_boot)), confidence))
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
        if norm:
            _finite_normalised(label, md, row)
        row.decision = decide(lo, hi, threshold, md.higher_is_better)
        moved = _bounds_moved(md, b.ok, c.ok)
        if moved and row.decision is not Decision.NO_CHANGE:  # the bound's change, not the code's
            row.decision = Decision.INCONCLUSIVE
            notes.append(moved)
        if c.failed and not b.failed:  # ok in every baseline repeat, failing in some now: not a pass
            row.decision = Decision.FAILED
        if row.decision is Decision.INCONCLUSIVE and not moved:
            notes.append("more sweeps per side (each into its own directory), or `vitbench ab`" if one_run else
                         "the interval reaches past the threshold: add runs")
        row.note = "; ".join(notes)
        rows.append(row)
    return rows
