"""One side's calibrations (`vitbench compare --normalize`, `vitbench history`): the samples a record offers for
a metric, checked where they are read, and the calibration record each trial record is divided by."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Sequence

import numpy as np

from vitbench.errors import ConfigError, clip
from vitbench.record import Record, finite_number
from vitbench.tasks import Metric
from vitbench.tasks.calibration import CONDITIONS, HOW, SIZE, WHERE, calibrates, matmul_size


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
        raise ConfigError(f"{where}: {metric.name} {clip(repr(bad), 40)} is not a finite number >= {least:g}, "
                          "which vitbench never records: the row was edited or written by another tool; fix or "
                          "remove it")
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
