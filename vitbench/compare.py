"""Regression decision between two result sets: match trials, compare metrics, decide with the raw timings.

`compare(baseline_records, current_records)` matches trials by their measured configuration (the runner's
normalised trial config, or the record's config), never by environment, and for every matched metric reports
baseline, current, their ratio with a bootstrap confidence interval, and a decision:

- regression   the whole CI is worse than the threshold (current worse by more than `threshold`, with confidence)
- improvement  the whole CI is better than the threshold
- inconclusive the point estimate is past the threshold but the CI reaches back inside it: too noisy to call
- no change    otherwise
- failed       the trial ran ok in the baseline but not in current (oom, error, timeout, interrupted)
- no data      neither side has a value to compare

Throughput (img_per_s) is decided from the raw per-step times (raw['step_s'], achieved batch / step time),
repeats of a trial are pooled with a two-level bootstrap (vitbench.stats); metrics without per-step samples
(max_batch_size, peak_mem_mib, accuracy) are bootstrapped over repeats, or compared as single values when there
is only one. `normalize=True` divides each speed record by the calibration workload (matmul TFLOP/s,
kind='calibration') of its own sweep run, the one measured nearest in time, so a slower or busier machine is not
called a regression; with one calibration per repeat round its noise shows up in the interval too.

A results path is a JSONL file or a directory (every *.jsonl under it). Records are read directly, not through
the DataFrame store, because the decision needs the raw timings.
"""

from __future__ import annotations

import copy
import datetime as _dt
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vitbench.errors import ConfigError
from vitbench.stats import N_BOOT, boot_medians, combine_repeats, percentile_interval

DEFAULT_THRESHOLD = 0.05
DEFAULT_CONFIDENCE = 0.95
REGRESSING = ("regression", "failed")  # decisions that make `vitbench compare` exit 1
CALIBRATION_KIND = "calibration"
SOURCE_FIELD = "_source_dir"  # set by load_records: the directory a record was read from
CALIBRATION_METRIC = "matmul_tflops_per_s"  # raw[CALIBRATION_METRIC] holds the per-run samples
# Trial-config fields that never define a measurement: runner bookkeeping, or machine-dependent defaults
# (max_batch's CPU memory budget is half of the RAM available at the time).
DEFAULT_IGNORE = ("repeat", "repeats", "timeout", "timeout_s", "study", "memory_limit_mib")
# Fixed parts of a trial's label, in this order; other config fields are added only where they tell trials apart.
_LABEL_FIELDS = ("model", "task", "backend", "batch_size", "resolution", "precision", "compile", "device")
# Environment fields shown first when they differ between the two sides.
_ENV_ORDER = ("device", "device_name", "gpu", "tpu", "cuda", "torch", "timm", "jax", "jaxlib", "flax", "numpy",
              "python", "cpu_model", "cpu_count", "threads", "hostname", "platform", "vitbench", "git_sha")


@dataclass(frozen=True)
class MetricDef:
    """A comparable metric: unit, direction, and whether it is a speed (divided out by --normalize)."""

    name: str
    unit: str
    higher_is_better: bool
    speed: bool
    description: str


METRICS: dict[str, MetricDef] = {m.name: m for m in (
    MetricDef("img_per_s", "img/s", True, True, "throughput; decided on raw per-step times (batch / step_s)"),
    MetricDef("max_batch_size", "images", True, False, "largest batch that fits"),
    MetricDef("peak_mem_mib", "MiB", False, False, "peak memory (device allocator; process RSS growth on CPU)"),
    MetricDef("compile_s", "s", False, False, "compile/jit time (single value per run)"),
    MetricDef("accuracy", "fraction", True, False, "transfer accuracy (0..1)"),
)}
# Speed and capacity: what a CI speed check should fail on by default. Memory on CPU is RSS growth, too noisy to
# fail a build on; ask for it with metrics=("peak_mem_mib", ...) on accelerators.
DEFAULT_METRICS = ("img_per_s", "max_batch_size")


@dataclass
class Row:
    """One metric of one matched trial. Ratios are current / baseline (normalised when `normalized`)."""

    trial: str
    metric: str
    unit: str
    higher_is_better: bool
    decision: str
    baseline: float | None = None
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


@dataclass
class Comparison:
    """Everything `vitbench compare` prints; `exit_code` is 1 when any row regressed or failed."""

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

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.decision in REGRESSING]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


# ------------------------------------------------------------------------------------------------------------
# Reading results
# ------------------------------------------------------------------------------------------------------------
def _read_jsonl(path: Path, warnings: list[str]) -> list[dict]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read results file ({e})") from None
    lines = text.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as e:
            if i == last and not text.endswith("\n"):  # a torn last line (killed mid-write): skip, keep the rest
                warnings.append(f"{path}:{i + 1}: incomplete last line skipped (a run killed while writing?)")
                continue
            raise ConfigError(f"{path}:{i + 1}: not a JSON record ({e}); expected vitbench results JSONL, one "
                              "record per line") from None
        if not isinstance(rec, dict):
            raise ConfigError(f"{path}:{i + 1}: expected a JSON object (a vitbench record), got "
                              f"{type(rec).__name__}")
        missing = [k for k in ("kind", "status", "config", "metrics") if k not in rec]
        if missing or not isinstance(rec.get("config"), dict) or not isinstance(rec.get("metrics"), dict):
            raise ConfigError(f"{path}:{i + 1}: not a vitbench record: needs fields kind, status, "
                              f"config (object), metrics (object); missing {', '.join(missing) or 'none'}")
        out.append(rec)
    return out


def load_records(path: str | Path, warnings: list[str] | None = None) -> list[dict]:
    """Every record of a results JSONL file, or of every *.jsonl under a directory (sorted by name).

    Each record gets SOURCE_FIELD (its file's directory): repeats from different directories pool, never
    supersede each other (several sweeps of one study into round1/, round2/, ... add up).

    Raises ConfigError for a missing path, a directory without results, a non-record line, or no records.
    A torn last line is skipped with a message appended to `warnings`.
    """
    warnings = warnings if warnings is not None else []
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{p}: no such file or directory; expected a results .jsonl file or a directory of them "
                          "(vitbench sweep writes results/<study>/)")
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*.jsonl") if f.is_file())
    if not files:
        raise ConfigError(f"{p}: no *.jsonl results files under this directory")
    records = []
    for f in files:
        src = str(f.parent.resolve())
        records += [{**r, SOURCE_FIELD: src} for r in _read_jsonl(f, warnings)]
    if not records:
        raise ConfigError(f"{p}: no records (empty results)")
    return records


# ------------------------------------------------------------------------------------------------------------
# Matching
# ------------------------------------------------------------------------------------------------------------
def _trial_config(rec: dict) -> dict:
    """The measured configuration: the runner's normalised trial config when present, else the record's."""
    trial = rec.get("trial")
    return trial if isinstance(trial, dict) else rec["config"]


def match_key(rec: dict, ignore: Iterable[str] = DEFAULT_IGNORE) -> str:
    """What must be equal for two records to be compared: kind, method version and measured config."""
    drop = set(ignore)
    cfg = {k: v for k, v in _trial_config(rec).items() if k not in drop}
    return json.dumps({"kind": rec.get("kind"), "method_version": rec.get("method_version"), "config": cfg},
                      sort_keys=True, default=str)


@dataclass
class _Trial:
    kind: str
    method_version: object
    config: dict
    ok: list[dict] = field(default_factory=list)
    failed: list[dict] = field(default_factory=list)


def _group(records: Sequence[dict], ignore: Iterable[str]) -> dict[str, _Trial]:
    """Trials by match key. Of several records for the same trial key and repeat in one results directory the
    last one written wins (as in vitbench.store.select: a re-run after --force or an interruption supersedes the
    older row); records from different directories are different runs and are pooled as repeats."""
    latest: dict[tuple, dict] = {}
    for i, rec in enumerate(records):
        if rec.get("kind") == CALIBRATION_KIND or rec.get("status") == "skipped":
            continue
        mk = match_key(rec, ignore)
        if rec.get("repeat") is None:
            ident = (mk, "record", i)  # no repeat index: every record is its own repeat
        else:
            ident = (mk, rec.get(SOURCE_FIELD), rec.get("key"), rec.get("repeat"))
        latest[ident] = rec
    first = {}  # trials in the order they first appear in the results (the study's order)
    for i, rec in enumerate(records):
        if rec.get("kind") != CALIBRATION_KIND:
            first.setdefault(match_key(rec, ignore), i)
    trials: dict[str, _Trial] = {}
    drop = set(ignore)
    for (mk, *_), rec in sorted(latest.items(), key=lambda kv: (first[kv[0][0]], str(kv[0]))):
        t = trials.setdefault(mk, _Trial(rec.get("kind"), rec.get("method_version"),
                                         {k: v for k, v in _trial_config(rec).items() if k not in drop}))
        (t.ok if rec.get("status") == "ok" else t.failed).append(rec)
    return trials


def _labels(configs: Sequence[dict]) -> list[str]:
    """Short readable names: the fixed fields, plus other fields where they differ between trials of one task."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for c in configs:
        by_task[str(c.get("task"))].append(c)
    varying_in = {task: sorted({k for c in group for k in c if k not in _LABEL_FIELDS
                                and len({json.dumps(d.get(k), sort_keys=True, default=str) for d in group}) > 1})
                  for task, group in by_task.items()}
    out = []
    for c in configs:
        varying = varying_in[str(c.get("task"))]
        parts = []
        for k in _LABEL_FIELDS:
            v = c.get(k)
            if v is None or v is False:
                continue
            parts.append({"batch_size": f"bs{v}", "resolution": f"{v}px", "compile": "compile"}.get(k, str(v)))
        parts += [f"{k}={c[k]}" for k in varying if c.get(k) is not None]
        out.append(" ".join(parts))
    return out


# ------------------------------------------------------------------------------------------------------------
# Samples and calibration
# ------------------------------------------------------------------------------------------------------------
def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def metric_samples(rec: dict, metric: str) -> list[float] | None:
    """The samples a record offers for `metric`: per-step throughput for img_per_s, else its single value."""
    m = rec.get("metrics") or {}
    if metric == "img_per_s":
        steps = (rec.get("raw") or {}).get("step_s")
        batch = m.get("batch_size_achieved") or _trial_config(rec).get("batch_size")
        if isinstance(steps, list) and _number(batch):
            xs = [batch / s for s in steps if _number(s) and s > 0]
            if xs:
                return xs
    v = m.get(metric)
    return [float(v)] if _number(v) else None


def _timestamp(s) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(s)).timestamp()
    except ValueError:
        return None


class _Calibrations:
    """Calibration records of one side, looked up per trial record (same run, backend, device; precision)."""

    def __init__(self, records: Sequence[dict], side: str):
        self.side = side
        self.records = [r for r in records if r.get("kind") == CALIBRATION_KIND and r.get("status") == "ok"]
        self._cache: dict[tuple, float] = {}
        self.fallbacks = 0

    @staticmethod
    def _samples(rec: dict) -> list[float]:
        raw = (rec.get("raw") or {}).get(CALIBRATION_METRIC)
        if isinstance(raw, list) and any(_number(x) for x in raw):
            return [x for x in raw if _number(x)]
        v = (rec.get("metrics") or {}).get(CALIBRATION_METRIC)
        return [v] if _number(v) else []

    def for_record(self, rec: dict) -> float:
        cfg = _trial_config(rec)
        cands = [c for c in self.records if self._samples(c)
                 and all(_trial_config(c).get(k) == cfg.get(k) for k in ("backend", "device")
                         if _trial_config(c).get(k) is not None and cfg.get(k) is not None)]
        if not cands:
            raise ConfigError(
                f"--normalize: the {self.side} results have no calibration record (kind 'calibration', metric "
                f"{CALIBRATION_METRIC}) for backend {cfg.get('backend')!r} on device {cfg.get('device')!r}; "
                "`vitbench sweep` measures one at the start of every run. Re-run the sweep, or compare without "
                "--normalize.")
        same_run = [c for c in cands if c.get("run_id") is not None and c.get("run_id") == rec.get("run_id")]
        if not same_run:
            self.fallbacks += 1
        pool = same_run or cands
        same_prec = [c for c in pool if _trial_config(c).get("precision") == cfg.get("precision")]
        pool = same_prec or [c for c in pool if _trial_config(c).get("precision") in (None, "fp32")] or pool
        pool = [c for c in pool if _trial_config(c).get("threads") == cfg.get("threads")] or pool
        # several calibrations in the run (one per repeat round): the one measured nearest in time tracks the
        # machine's state (other load, clocks) at the trial best
        t = _timestamp(rec.get("started_at"))
        times = [_timestamp(c.get("started_at")) for c in pool]
        if t is not None and len(pool) > 1 and None not in times:
            best = min(abs(x - t) for x in times)
            pool = [c for c, x in zip(pool, times) if abs(x - t) == best]
        # A fixed divisor: the median of the calibration's runs. Its uncertainty is not resampled from its 3-odd
        # runs (a median of 3 bootstraps to a lumpy, outlier-driven distribution); it enters the interval through
        # the repeats instead, when every repeat round has its own calibration (see docs/compare.md).
        ident = tuple(sorted(id(c) for c in pool))
        if ident not in self._cache:
            self._cache[ident] = float(np.median([x for c in pool for x in self._samples(c)]))
        return self._cache[ident]


# ------------------------------------------------------------------------------------------------------------
# Deciding
# ------------------------------------------------------------------------------------------------------------
def decide(ratio: float, ci_low: float, ci_high: float, threshold: float, higher_is_better: bool) -> str:
    """regression / improvement only when the whole CI of current/baseline is past the threshold."""
    worse_ci, better_ci = (ci_high < 1 - threshold, ci_low > 1 + threshold) if higher_is_better else \
        (ci_low > 1 + threshold, ci_high < 1 - threshold)
    if worse_ci:
        return "regression"
    if better_ci:
        return "improvement"
    if ratio < 1 - threshold or ratio > 1 + threshold:
        return "inconclusive"
    return "no change"


def _side(trial: _Trial, metric: str, calib: _Calibrations | None, n_boot: int, rng: np.random.Generator):
    """(point, replicates, repeats, samples, unnormalised point) of one side, or None when no record has it."""
    points, reps, raw_points, n = [], [], [], 0
    for rec in trial.ok:
        xs = metric_samples(rec, metric)
        if not xs:
            continue
        p, r = boot_medians(xs, n_boot, rng)
        raw_points.append(p)
        n += len(xs)
        if calib is not None:
            cal = calib.for_record(rec)
            p, r = p / cal, r / cal
        points.append(p)
        reps.append(r)
    if not points:
        return None
    point, replicates = combine_repeats(points, reps, rng)
    return point, replicates, len(points), n, float(np.mean(raw_points))


def _status_note(recs: list[dict]) -> str:
    st = sorted({r.get("status", "?") for r in recs})
    msg = next(((r.get("error") or {}).get("message") for r in recs if r.get("error")), None)
    return "/".join(st) + (f": {str(msg).strip().splitlines()[-1][:120]}" if msg and str(msg).strip() else "")


def _compare_trial(label: str, b: _Trial, c: _Trial, metrics: Sequence[str], threshold: float,
                   confidence: float, calibs, n_boot: int, rng: np.random.Generator) -> list[Row]:
    if not c.ok or not b.ok:
        if b.ok:
            decision, note = "failed", f"current: {_status_note(c.failed)}"
        elif c.ok:
            decision, note = "improvement", f"baseline: {_status_note(b.failed)}; current: ok"
        else:
            decision = "no data"
            note = f"failed on both sides: {_status_note(b.failed)} / {_status_note(c.failed)}"
        return [Row(label, "status", "", True, decision, repeats=(len(b.ok), len(c.ok)), method="status",
                    note=note)]
    rows = []
    for name in metrics:
        md = METRICS[name]
        norm = calibs is not None and md.speed
        bs = _side(b, name, calibs[0] if norm else None, n_boot, rng)
        cs = _side(c, name, calibs[1] if norm else None, n_boot, rng)
        if bs is None and cs is None:
            continue  # this kind of record does not carry the metric
        row = Row(label, name, md.unit, md.higher_is_better, "no data")
        notes = []
        if c.failed:
            notes.append(f"{len(c.failed)} current repeat(s) {_status_note(c.failed)}")
        if bs is None or cs is None:
            row.baseline = bs[4] if bs else None
            row.current = cs[4] if cs else None
            row.note = "; ".join([*notes, f"not in {'baseline' if bs is None else 'current'}"])
            rows.append(row)
            continue
        (bp, br, bn_rep, bn, b_raw), (cp, cr, cn_rep, cn, c_raw) = bs, cs
        row.baseline, row.current = b_raw, c_raw
        row.repeats, row.samples = (bn_rep, cn_rep), (bn, cn)
        if bp <= 0:
            row.decision = "no change" if cp == bp else ("improvement" if (cp > bp) == md.higher_is_better
                                                          else "regression")
            row.note = "; ".join([*notes, "baseline is 0: no ratio"])
            rows.append(row)
            continue
        ratio = cp / bp
        lo, hi = percentile_interval(cr / br, confidence)
        row.ratio, row.ci_low, row.ci_high = ratio, lo, hi
        row.ratio_raw = c_raw / b_raw if b_raw else None
        if norm and row.ratio_raw:
            row.machine_ratio = row.ratio_raw / ratio
        single = bn == bn_rep and cn == cn_rep and bn_rep == 1 and cn_rep == 1
        row.method = "single value" if single else (
            "bootstrap: steps" + (" + repeats" if max(bn_rep, cn_rep) > 1 else "")
            if max(bn, cn) > max(bn_rep, cn_rep) else "bootstrap: repeats")
        row.decision = decide(ratio, lo, hi, threshold, md.higher_is_better)
        if row.decision == "inconclusive":
            notes.append("past the threshold but within noise: add repeats or steps")
        row.note = "; ".join(notes)
        rows.append(row)
    return rows


def _env_values(records: Sequence[dict]) -> dict[str, set[str]]:
    vals: dict[str, set[str]] = defaultdict(set)
    for r in records:
        for k, v in (r.get("env") or {}).items():
            vals[k].add(json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else str(v))
    return vals


def env_differences(baseline: Sequence[dict], current: Sequence[dict]) -> list[tuple[str, str, str]]:
    """(field, baseline values, current values) for every environment field whose values differ."""
    b, c = _env_values(baseline), _env_values(current)
    keys = [k for k in {*b, *c} if b.get(k, set()) != c.get(k, set())]
    keys.sort(key=lambda k: (_ENV_ORDER.index(k) if k in _ENV_ORDER else len(_ENV_ORDER), k))
    return [(k, ", ".join(sorted(b.get(k, {"-"}))), ", ".join(sorted(c.get(k, {"-"})))) for k in keys]


def _why_unmatched(t: _Trial, other: dict[str, _Trial]) -> str:
    """Why trial `t` has no match among `other`: the closest trial's differing fields, or method version."""
    if not other:
        return "nothing on the other side"
    def diff(o: _Trial) -> list[str]:
        d = [k for k in sorted({*t.config, *o.config}) if t.config.get(k) != o.config.get(k)]
        return (["kind"] if o.kind != t.kind else []) + d
    o = min(other.values(), key=lambda o: len(diff(o)))
    fields = diff(o)
    if not fields:
        return (f"method_version {t.method_version} vs {o.method_version}: the measurement method changed, the "
                "numbers are not comparable; re-measure the baseline")
    if len(fields) > 3 or {"kind", "model", "task", "backend"} & set(fields):
        return "no trial with this configuration on the other side"
    shown = ", ".join(f"{k} ({t.config.get(k)!r} vs {o.config.get(k)!r})" for k in fields if k != "kind")
    return f"the closest trial differs in {shown}; --ignore {' --ignore '.join(fields)} would match them"


def compare(baseline: Sequence[dict], current: Sequence[dict], *, threshold: float = DEFAULT_THRESHOLD,
            normalize: bool = False, metrics: Sequence[str] = DEFAULT_METRICS,
            ignore: Iterable[str] = (), confidence: float = DEFAULT_CONFIDENCE, n_boot: int = N_BOOT,
            seed: int = 0, names: tuple[str, str] = ("baseline", "current")) -> Comparison:
    """Compare two lists of records (see the module docstring). Deterministic for a given `seed`.

    threshold: relative change that matters (0.05 = 5 %), in the metric's own direction.
    ignore: extra trial-config fields left out of matching (e.g. 'threads' to compare across thread counts).
    Raises ConfigError for bad arguments, no trials on a side, no matched trial, or --normalize without a
    calibration record.
    """
    if not (0 <= threshold < 1) or not math.isfinite(threshold):
        raise ConfigError(f"--threshold must be a fraction in [0, 1), e.g. 0.05 for 5 %; got {threshold}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise ConfigError(f"--metric {', '.join(unknown) or '(none)'}: unknown; allowed: {', '.join(METRICS)}")
    ignore = (*DEFAULT_IGNORE, *ignore)
    rng = np.random.default_rng(seed)
    bt, ct = _group(baseline, ignore), _group(current, ignore)
    for side, trials in zip(names, (bt, ct)):
        if not trials:
            raise ConfigError(f"{side}: no measurement records (only calibration or skipped rows)")
    keys = list(dict.fromkeys([*bt, *ct]))
    label = dict(zip(keys, _labels([(bt.get(k) or ct.get(k)).config for k in keys])))
    matched = [k for k in bt if k in ct]
    if not matched:
        k0 = next(iter(bt))
        raise ConfigError(f"no trial of {names[1]} matches a trial of {names[0]} (same kind, method version and "
                          f"configuration). First {names[0]} trial, {label[k0]}: {_why_unmatched(bt[k0], ct)}. "
                          f"{names[1]} has: {'; '.join(label[k] for k in list(ct)[:5])}.")
    warnings: list[str] = []
    calibs = None
    if normalize:
        calibs = (_Calibrations(baseline, names[0]), _Calibrations(current, names[1]))
    rows, not_compared = [], []
    for k in matched:
        trial_rows = _compare_trial(label[k], bt[k], ct[k], metrics, threshold, confidence, calibs, n_boot, rng)
        if not trial_rows:
            not_compared.append((label[k], f"{bt[k].kind} records carry none of: {', '.join(metrics)}"))
        rows += trial_rows
    if calibs:
        for cal in calibs:
            if cal.fallbacks:
                warnings.append(f"--normalize: {cal.fallbacks} {cal.side} record(s) have no calibration from "
                                "their own run; used the calibration of other runs on the same device")
    return Comparison(
        rows=rows,
        unmatched_baseline=[(label[k], _why_unmatched(bt[k], ct)) for k in bt if k not in ct],
        unmatched_current=[(label[k], _why_unmatched(ct[k], bt)) for k in ct if k not in bt],
        env_diff=env_differences(baseline, current),
        not_compared=not_compared,
        threshold=threshold, confidence=confidence, normalized=normalize, metrics=tuple(metrics),
        warnings=warnings)


def compare_paths(baseline: str | Path, current: str | Path, *, slowdown: float | None = None,
                  **kw) -> Comparison:
    """`compare` on two results paths (file or directory). `slowdown`: see `inject_slowdown()`."""
    warnings: list[str] = []
    b = load_records(baseline, warnings)
    c = load_records(current, warnings)
    if slowdown is not None:
        c = inject_slowdown(c, slowdown)
        warnings.append(f"self-test: every timed step of CURRENT made {slowdown:g}x slower before comparing")
    cmp = compare(b, c, names=(f"baseline {baseline}", f"current {current}"), **kw)
    cmp.warnings[:0] = warnings
    return cmp


def inject_slowdown(records: Sequence[dict], factor: float) -> list[dict]:
    """Copies of `records` with every timed step `factor` times slower: the self-test of a speed check.

    Scales raw['step_s'] and the metrics derived from it (step_ms_*, timed_s up; img_per_s*, model TFLOP/s, MFU
    down). Calibration records are left alone, as a slower harness on the same machine would leave them.
    Post-processing only: it never touches the measurement code path, so it cannot affect a real run.
    """
    if not _number(factor) or factor <= 0:
        raise ConfigError(f"--inject-slowdown must be a positive factor (2.0 = twice as slow), got {factor}")
    out = []
    for rec in records:
        rec = copy.deepcopy(rec)
        raw = rec.get("raw") or {}
        if rec.get("kind") != CALIBRATION_KIND and isinstance(raw.get("step_s"), list):
            raw["step_s"] = [s * factor if _number(s) else s for s in raw["step_s"]]
            m = rec.get("metrics") or {}
            for k, v in m.items():
                if not _number(v):
                    continue
                if k.startswith("step_ms_") or k == "timed_s":
                    m[k] = v * factor
                elif k.startswith("img_per_s") or k in ("model_tflops_per_s", "mfu"):
                    m[k] = v / factor
        out.append(rec)
    return out


# ------------------------------------------------------------------------------------------------------------
# Rendering helpers (the CLI draws the rich table from `row_cells`)
# ------------------------------------------------------------------------------------------------------------
def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if float(x).is_integer() and abs(x) < 1e6:
        return f"{int(x)}"
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:,.0f}"


COLUMNS = ("trial", "metric", "baseline", "current", "ratio", "CI", "decision", "note")


def row_cells(row: Row) -> dict[str, str]:
    """Display strings of a row, one per COLUMNS entry (the ratio and CI as current / baseline)."""
    note = row.note
    if row.machine_ratio is not None:
        note = "; ".join(filter(None, [f"raw {row.ratio_raw:.3f}, machine {row.machine_ratio:.3f}", note]))
    if row.method and row.method != "status":
        note = "; ".join(filter(None, [row.method, note]))
    return {
        "trial": row.trial,
        "metric": row.metric + (f" ({row.unit})" if row.unit else ""),
        "baseline": _fmt(row.baseline) if row.baseline is not None else "-",
        "current": _fmt(row.current) if row.current is not None else "-",
        "ratio": f"{row.ratio:.3f}" if row.ratio is not None else "-",
        "CI": f"[{row.ci_low:.3f}, {row.ci_high:.3f}]" if row.ci_low is not None else "-",
        "decision": row.decision,
        "note": note,
    }


def summary_line(cmp: Comparison) -> str:
    counts = defaultdict(int)
    for r in cmp.rows:
        counts[r.decision] += 1
    parts = ", ".join(f"{n} {d}" for d, n in sorted(counts.items()))
    verdict = "REGRESSION" if cmp.exit_code else "no regression"
    how = f"threshold {cmp.threshold:.0%}, {cmp.confidence:.0%} CI" + (", normalised by calibration"
                                                                        if cmp.normalized else "")
    unmatched = len(cmp.unmatched_baseline) + len(cmp.unmatched_current)
    return f"{verdict}: {parts or 'nothing compared'} ({how})" + (f"; {unmatched} unmatched trial(s)"
                                                                 if unmatched else "")


def to_markdown(cmp: Comparison) -> str:
    """A Markdown report: summary, metric table, environment differences, unmatched trials, warnings."""
    def esc(s: str) -> str:
        return s.replace("|", "\\|")
    lines = ["## vitbench compare", "", f"**{summary_line(cmp)}**", "",
             "Ratios are current / baseline; decisions need the whole confidence interval past the threshold.", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in cmp.rows:
        cells = row_cells(r)
        if r.decision in REGRESSING:
            cells["decision"] = f"**{cells['decision']}**"
        lines.append("| " + " | ".join(esc(cells[c]) for c in COLUMNS) + " |")
    if cmp.env_diff:
        lines += ["", "### Environment differences", "", "| field | baseline | current |", "|---|---|---|"]
        lines += [f"| {esc(k)} | {esc(b)} | {esc(c)} |" for k, b, c in cmp.env_diff]
    for title, items in (("Only in baseline (not compared)", cmp.unmatched_baseline),
                         ("Only in current (not compared)", cmp.unmatched_current),
                         ("Matched, no metric to compare (see --metric)", cmp.not_compared)):
        if items:
            lines += ["", f"### {title}", ""] + [f"- {esc(lbl)}: {esc(why)}" for lbl, why in items]
    if cmp.warnings:
        lines += ["", "### Warnings", ""] + [f"- {esc(w)}" for w in cmp.warnings]
    return "\n".join(lines) + "\n"


def to_benchmark_json(cmp: Comparison) -> list[dict]:
    """github-action-benchmark's `customBiggerIsBetter` entries: name, unit, value (current), range, extra.

    Only bigger-is-better metrics are emitted (that tool reads every entry as bigger-is-better); names are
    '<trial> - <metric>', stable across runs of the same study.
    """
    out = []
    for r in cmp.rows:
        if not r.higher_is_better or r.current is None or r.metric == "status":
            continue
        entry = {"name": f"{r.trial} - {r.metric}", "unit": r.unit, "value": r.current}
        if r.ci_low is not None and r.ratio:
            # half-width of the ratio's CI, relative: the spread a dashboard should expect between runs
            entry["range"] = f"± {(r.ci_high - r.ci_low) / 2 / r.ratio:.1%}"
        extra = [f"decision: {r.decision}", f"baseline: {_fmt(r.baseline)}"]
        if r.ratio is not None:
            extra.append(f"ratio: {r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]"
                         + (" (normalised)" if r.machine_ratio is not None else ""))
        extra.append(f"repeats: {r.repeats[0]}/{r.repeats[1]}, samples: {r.samples[0]}/{r.samples[1]}")
        entry["extra"] = "; ".join(extra)
        out.append(entry)
    return out
