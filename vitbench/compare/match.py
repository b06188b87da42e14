"""Which trials of two result sets are the same measurement: grouping records into trials, labels, and why a
trial found no partner. Trials match on their measured configuration (never on environment)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from vitbench.record import Record, Status

# Trial-config fields that never define a measurement: runner bookkeeping, or machine-dependent defaults
# (max_batch's CPU memory budget is half of the RAM available at the time).
DEFAULT_IGNORE = ("repeat", "repeats", "timeout", "timeout_s", "study", "memory_limit_mib")
# Fixed parts of a trial's label, in this order; other config fields are added only where they tell trials apart.
LABEL_FIELDS = ("model", "task", "backend", "batch_size", "resolution", "precision", "compile", "device")


def match_key(rec: Record, ignore: Iterable[str] = DEFAULT_IGNORE) -> str:
    """What must be equal for two records to be compared: kind, method version and measured config."""
    drop = set(ignore)
    cfg = {k: v for k, v in rec.measured_config.items() if k not in drop}
    return json.dumps({"kind": rec.kind, "method_version": rec.method_version, "config": cfg}, sort_keys=True,
                      default=str)


@dataclass
class Trial:
    """One measured configuration on one side: its ok records (repeats) and its failed ones."""

    kind: str
    method_version: object
    config: dict
    ok: list[Record] = field(default_factory=list)
    failed: list[Record] = field(default_factory=list)


def group(records: Sequence[Record], ignore: Iterable[str]) -> dict[str, Trial]:
    """Trials by match key, in the order they first appear (the study's). The records come from
    vitbench.store.select: the latest per trial key and results directory; records of different directories
    are different runs and pool as repeats."""
    trials: dict[str, Trial] = {}
    drop = set(ignore)
    for rec in records:
        if rec.status is Status.SKIPPED:
            continue
        t = trials.setdefault(match_key(rec, ignore), Trial(rec.kind, rec.method_version, {
            k: v for k, v in rec.measured_config.items() if k not in drop}))
        (t.ok if rec.status is Status.OK else t.failed).append(rec)
    return trials


def labels(configs: Sequence[dict]) -> list[str]:
    """Short readable names: the fixed fields, plus other fields where they differ between trials of one task."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for c in configs:
        by_task[str(c.get("task"))].append(c)
    varying_in = {task: sorted({k for c in grp for k in c if k not in LABEL_FIELDS
                                and len({json.dumps(d.get(k), sort_keys=True, default=str) for d in grp}) > 1})
                  for task, grp in by_task.items()}
    out = []
    for c in configs:
        varying = varying_in[str(c.get("task"))]
        parts = []
        for k in LABEL_FIELDS:
            v = c.get(k)
            if v is None or v is False:
                continue
            parts.append({"batch_size": f"bs{v}", "resolution": f"{v}px", "compile": "compile"}.get(k, str(v)))
        parts += [f"{k}={c[k]}" for k in varying if c.get(k) is not None]
        out.append(" ".join(parts))
    return out


def why_unmatched(t: Trial, other: dict[str, Trial]) -> str:
    """Why trial `t` has no match among `other`: the closest trial's differing fields, or method version."""
    if not other:
        return "nothing on the other side"

    def diff(o: Trial) -> list[str]:
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
