"""Comparison of two result sets (the package docstring, vitbench.compare, says how): `compare`, its result
`Comparison`, `compare_paths` over stored results, `load_records`, `env_differences` and `inject_slowdown`."""

from __future__ import annotations

import contextlib
import copy
import gc
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vitbench.compare.calibrations import Calibrations, same_sizes
from vitbench.compare.decide import (DEFAULT_CONFIDENCE, DEFAULT_THRESHOLD, REGRESSING, Decision,
                                     Row, check_gate, compare_trials)
from vitbench.compare.match import DEFAULT_IGNORE, group, labels, why_unmatched
from vitbench.compare.runs import RUN_NOISE_MAX, shared_runs
from vitbench.errors import ConfigError, clip
from vitbench.record import Record, Status, finite_number
from vitbench.stats import N_BOOT

# compare and ab alike: a trial whose interval reaches past the threshold on the bad side (one run per side on a
# noisy host; ab's budget ended first). 0 = no regression, 1 = regression / failed / missing, 2 = bad input.
EXIT_NO_CHANGE, EXIT_REGRESSION, EXIT_INCONCLUSIVE = 0, 1, 3


def metrics():
    """Every metric compare may decide on, by name (declared by the tasks)."""
    from vitbench.tasks import comparable_metrics

    return comparable_metrics()


def default_metrics() -> tuple[str, ...]:
    """Speed and capacity: what a CI speed check fails on by default. Memory on CPU is RSS growth, too noisy to
    fail a build on; ask for it with --metric peak_mem_mib on accelerators."""
    return tuple(n for n, m in metrics().items() if m.default_compare)


@dataclass
class Comparison:
    """Everything `vitbench compare` prints; `exit_code` is 1 when any row regressed or failed, or when a trial
    that was ok in the baseline is missing from current (a sweep that died halfway), unless `allow_missing`;
    else EXIT_INCONCLUSIVE when a row is undecided; else 0."""

    rows: list[Row]
    unmatched_baseline: list[tuple[str, str]]  # (trial label, why)
    unmatched_current: list[tuple[str, str]]
    env_diff: list[tuple[str, str, str]]  # (field, baseline values, current values)
    threshold: float
    confidence: float
    normalized: bool
    metrics: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # matched, but no selected metric
    missing: list[tuple[str, str]] = field(default_factory=list)  # ok in the baseline, absent from current
    allow_missing: bool = False
    context: list[tuple[str, str]] = field(default_factory=list)  # how it was measured (vitbench ab), shown

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.decision in REGRESSING]

    @property
    def inconclusive(self) -> bool:
        """No regression, but a row the noise left undecided: a gate must not pass that silently."""
        return not self.regressions and any(r.decision is Decision.INCONCLUSIVE for r in self.rows)

    @property
    def fails_on_missing(self) -> bool:
        return bool(self.missing) and not self.allow_missing

    @property
    def exit_code(self) -> int:
        if self.regressions or self.fails_on_missing:
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.inconclusive else EXIT_NO_CHANGE


def load_records(path: str | Path, warnings: list[str] | None = None) -> list[Record]:
    """Every record of a results path (vitbench.rows rules), corrupt lines reported into `warnings`.

    Raises ConfigError for a missing path or no records."""
    import warnings as _w

    from vitbench.rows import CorruptLineWarning, read_records
    from vitbench.tasks import row_check

    with _w.catch_warnings(record=True) as caught:
        _w.simplefilter("always", CorruptLineWarning)
        records = read_records(path, row_check())
    skipped = [str(w.message) for w in caught if issubclass(w.category, CorruptLineWarning)]
    for w in caught:  # the others (an unmeasured row read as an error row) are said as they were
        if not issubclass(w.category, CorruptLineWarning):
            _w.warn(w.message, w.category, stacklevel=2)
    if warnings is not None:
        warnings.extend(skipped)
    if not records:
        raise ConfigError(f"{path}: no records ("
                          + (f"{len(skipped)} line(s) skipped, none a record; first: {clip(skipped[0], 200)}"
                             if skipped else "empty results")
                          + "; expected a results .jsonl file or a directory of them, as `vitbench sweep` writes)")
    return records


def _env_order() -> tuple[str, ...]:
    """Environment fields shown first when they differ: the device, the backends' packages, then the machine."""
    from vitbench.env import backend_distributions

    return ("device", "device_name", "gpu", "tpu", "cuda", *backend_distributions(), "numpy", "python",
            "cpu_model", "cpu_count", "threads", "hostname", "platform", "vitbench", "git_sha")


def env_differences(baseline: Sequence[Record], current: Sequence[Record]) -> list[tuple[str, str, str]]:
    """(field, baseline values, current values) for every environment field whose values differ."""
    def values(records):
        vals: dict[str, set[str]] = defaultdict(set)
        for r in records:
            for k, v in r.env.items():
                vals[k].add(json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else str(v))
        return vals
    b, c = values(baseline), values(current)
    keys = [k for k in {*b, *c} if b.get(k, set()) != c.get(k, set())]
    order = _env_order()
    keys.sort(key=lambda k: (order.index(k) if k in order else len(order), k))
    def shown(vals: dict[str, set[str]], k: str) -> str:  # bounded: whatever the row holds (a 5 MB git_sha)
        return clip(", ".join(sorted(vals.get(k, {"-"}))), 300)

    return [(clip(k, 80), shown(b, k), shown(c, k)) for k in keys]


def compare(baseline: Sequence[Record], current: Sequence[Record], *, threshold: float = DEFAULT_THRESHOLD,
            normalize: bool = False, metrics: Sequence[str] | None = None, ignore: Iterable[str] = (),
            confidence: float = DEFAULT_CONFIDENCE, n_boot: int = N_BOOT, seed: int = 0,
            names: tuple[str, str] = ("baseline", "current"), allow_missing: bool = False,
            run_noise: float | None = None) -> Comparison:
    """Compare two lists of records (see the module docstring). Deterministic for a given `seed`.

    threshold: relative change that matters (0.05 = 5 %), in the metric's own direction.
    ignore: extra trial-config fields left out of matching (e.g. 'threads' to compare across thread counts).
    allow_missing: baseline trials absent from current are listed but do not fail the comparison.
    run_noise: the between-run sd of log throughput to assume where a side has one run (None: the floor of the
    host state the rows recorded; vitbench.compare.runs).
    Raises ConfigError for bad arguments, no trials on a side, no matched trial, nothing to compare (no matched
    trial carries a selected metric), or --normalize without a calibration record.
    """
    from vitbench.tidy import select
    from vitbench.tasks import Role, calibration_task, kinds_with_role

    known = globals()["metrics"]()
    metrics = tuple(metrics) if metrics else default_metrics()
    check_gate(threshold, confidence, zero_threshold=True)
    if run_noise is not None and not (math.isfinite(run_noise) and 0 <= run_noise <= RUN_NOISE_MAX):
        raise ConfigError(f"--run-noise must be the sd of log throughput between runs, in [0, {RUN_NOISE_MAX:g}] "
                          f"(e.g. 0.05 for 5 %); got {run_noise}")
    unknown = [m for m in metrics if m not in known]
    if unknown or not metrics:
        raise ConfigError(f"--metric {clip(', '.join(unknown), 200) or '(none)'}: unknown; allowed: "
                          f"{', '.join(known)}")
    fields = {k for r in (*baseline, *current) for k in r.measured_config}
    stray = [f for f in ignore if f not in fields]
    if stray:  # a misspelt field would silently match nothing more
        raise ConfigError(f"--ignore {clip(', '.join(stray), 200)}: no trial has this field; fields: "
                          f"{clip(', '.join(sorted(fields)), 600)}")
    ignore = (*DEFAULT_IGNORE, *ignore)
    rng = np.random.default_rng(seed)
    bt, ct = group(select(baseline), ignore, names[0]), group(select(current), ignore, names[1])
    for side, trials in zip(names, (bt, ct)):
        if not trials:
            raise ConfigError(f"{side}: no measurement records (only calibration or skipped rows)")
    keys = list(dict.fromkeys([*bt, *ct]))
    label = dict(zip(keys, labels([(bt.get(k) or ct.get(k)).config for k in keys])))
    matched = [k for k in bt if k in ct]
    if not matched:
        k0 = next(iter(bt))
        raise ConfigError(f"no trial of {names[1]} matches a trial of {names[0]} (same kind, method version and "
                          f"configuration). First {names[0]} trial, {label[k0]}: {why_unmatched(bt[k0], ct)}. "
                          f"{names[1]} has: {'; '.join(label[k] for k in list(ct)[:5])}.")
    shared = [(label[k], n) for k in matched if (n := shared_runs(bt[k].ok, ct[k].ok))]
    if shared:  # a run on both sides would count as two independent runs, pulling the sides together
        raise ConfigError(f"{names[0]} and {names[1]} share {sum(n for _, n in shared)} run(s) of "
                          f"{len(shared)} trial(s) (first: {clip(shared[0][0], 200)}; the same sweep run id, "
                          "repeat and start time) but are not the same runs: one holds sweeps of the other, or "
                          "copies of a run. Compare directories of separate sweeps (each run on one side only)")
    calibs = None
    if normalize:
        cal_kinds = kinds_with_role(Role.CALIBRATION)
        cal_metric = calibration_task()[1]
        calibs = tuple(Calibrations([r for r in recs if r.kind in cal_kinds and r.status is Status.OK],
                                    cal_metric, side) for recs, side in zip((baseline, current), names))
        same_sizes(calibs)
    selected = [known[m] for m in metrics]
    rows, not_compared = [], []
    per_trial = compare_trials([(label[k], bt[k], ct[k]) for k in matched], selected, threshold, confidence,
                               calibs, n_boot, rng, run_noise)
    for k, trial_rows in zip(matched, per_trial):
        if not trial_rows:
            not_compared.append((label[k], f"{bt[k].kind} records carry none of: {', '.join(metrics)}"))
        rows += trial_rows
    unmatched_baseline = [(label[k], why_unmatched(bt[k], ct)) for k in bt if k not in ct]
    # a baseline trial that failed there too is no loss when it is absent now
    missing = [item for k, item in zip([k for k in bt if k not in ct], unmatched_baseline) if bt[k].ok]
    why_none = None
    if not rows:
        present = sorted({m for k in matched for r in (*bt[k].ok, *ct[k].ok) for m in r.metrics if m in known})
        why_none = (f"none of the {len(matched)} matched trial(s) carries {', '.join(metrics)}; they carry "
                    f"{', '.join(present) or 'no comparable metric'} (choose with --metric)")
    elif all(r.decision == Decision.NO_DATA and r.method == "status" for r in rows):
        why_none = (f"every one of the {len(matched)} matched trial(s) failed on both sides "
                    f"({rows[0].note.split(': ', 1)[-1][:200]}); no speed was measured to decide on")
    if why_none and (allow_missing or not missing):  # (with trials missing from current: exit 1, listing them)
        gone = (f"; {len(missing)} baseline trial(s) missing from current (allowed by --allow-missing), first: "
                f"{clip(missing[0][0], 200)}" if missing else "")
        raise ConfigError(f"nothing compared: {why_none}{gone}")
    warnings = [f"--normalize: {cal.fallbacks} {cal.side} record(s) have no calibration from their own run; used "
                "the calibration of other runs on the same device" for cal in (calibs or ()) if cal.fallbacks]
    return Comparison(
        rows=rows,
        unmatched_baseline=unmatched_baseline,
        unmatched_current=[(label[k], why_unmatched(ct[k], bt)) for k in ct if k not in bt],
        env_diff=env_differences(baseline, current),
        not_compared=not_compared,
        missing=missing,
        allow_missing=allow_missing,
        threshold=threshold, confidence=confidence, normalized=normalize, metrics=tuple(metrics),
        warnings=warnings)


@contextlib.contextmanager
def _cyclic_gc_paused():
    """Python's cyclic garbage collector paused (as it was after): a parsed row is some 1,000 objects (JSON's dicts,
    lists and floats, in no cycle), and each collection of the oldest generation walks every one of them: 1.2-1.4
    s of the 6.6-7.8 s of CPU `vitbench compare` took for two 10,000-trial stores at load 11 (measured, issue 51).
    Reference counting still frees what is dropped; a cycle made meanwhile waits for the next collection."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compare_paths(baseline: str | Path, current: str | Path, *, slowdown: float | None = None,
                  **kw) -> Comparison:
    """`compare` on two results paths (file or directory). `slowdown`: see `inject_slowdown()`."""
    warnings: list[str] = []
    unread: list[str] = []  # the baseline's lines that could not be read
    with _cyclic_gc_paused():
        b = load_records(baseline, unread)
        c = load_records(current, warnings)
        if slowdown is not None:
            c = inject_slowdown(c, slowdown)
            warnings.append(f"self-test: every timed step of CURRENT made {slowdown:g}x slower before comparing")
        cmp = compare(b, c, names=(f"baseline {baseline}", f"current {current}"), **kw)
    if unread and cmp.unmatched_current:  # its partner may be on a line that could not be read: no verdict
        raise ConfigError(f"baseline {baseline}: {len(unread)} line(s) could not be read (first: "
                          f"{clip(unread[0], 300)}), and {len(cmp.unmatched_current)} trial(s) of current have no "
                          f"partner there (first: {clip(cmp.unmatched_current[0][0], 200)}): a trial on such a "
                          "line would leave the gate unseen; fix or remove those lines")
    cmp.warnings[:0] = [*unread, *warnings]
    return cmp


def inject_slowdown(records: Sequence[Record], factor: float) -> list[Record]:
    """Copies of `records` with every timed step `factor` times slower: the self-test of a speed check.

    Scales raw['step_s'] and the metrics derived from it (step_ms_*, timed_s up; img_per_s*, model TFLOP/s, MFU
    down). Records without step times (calibrations among them) are left alone, as a slower harness on the same
    machine would leave them. Post-processing only: it never touches the measurement code path.
    """
    if not finite_number(factor) or factor <= 0:
        raise ConfigError(f"--inject-slowdown must be a positive factor (2.0 = twice as slow), got {factor}")
    out = []
    for rec in records:
        rec = copy.deepcopy(rec)
        if isinstance(rec.raw.get("step_s"), list):
            rec.raw["step_s"] = [s * factor if finite_number(s) else s for s in rec.raw["step_s"]]
            m = rec.metrics
            for k, v in m.items():
                if not finite_number(v):
                    continue
                if k.startswith("step_ms_") or k == "timed_s":
                    m[k] = v * factor
                elif k.startswith("img_per_s") or k in ("model_tflops_per_s", "mfu"):
                    m[k] = v / factor
        out.append(rec)
    return out
