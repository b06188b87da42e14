"""Which trials of two result sets are the same measurement: grouping records into trials, labels, and why a
trial found no partner. Trials match on their measured configuration (never on environment)."""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from vitbench.errors import ConfigError, clip
from vitbench.record import Record, Status
from vitbench.tasks.fields import BOOKKEEPING as DEFAULT_IGNORE  # fields that never define a measurement

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
    pooled: dict[str, set] = field(default_factory=dict)  # an ignored field -> the values its records hold


def group(records: Sequence[Record], ignore: Iterable[str], side: str = "results") -> dict[str, Trial]:
    """Trials by match key, in the order they first appear (the study's). The records come from
    vitbench.tidy.select: the latest per trial key and results directory, each measurement once (one run copied
    into two directories is one run, not two repeats); records of different directories are different runs and
    pool as repeats. A field `ignore` names beyond DEFAULT_IGNORE (`--ignore threads`: to match trials across the
    sides) that would pool different trials of one side as repeats of one (threads 1 and 2: a false regression,
    their mean against one of them) is a ConfigError naming `side`, the trial and the values."""
    trials: dict[str, Trial] = {}
    drop = set(ignore)
    asked = drop - set(DEFAULT_IGNORE)
    for rec in records:
        if rec.status is Status.SKIPPED:
            continue
        cfg = rec.measured_config
        t = trials.setdefault(match_key(rec, ignore), Trial(rec.kind, rec.method_version, {
            k: v for k, v in cfg.items() if k not in drop}))
        for f in asked:
            t.pooled.setdefault(f, set()).add(_identity(cfg.get(f)))
        (t.ok if rec.status is Status.OK else t.failed).append(rec)
    for t in trials.values():
        mixed = {f: sorted(str(v[1] if isinstance(v, tuple) else v) for v in vals)
                 for f, vals in t.pooled.items() if len(vals) > 1}
        if mixed:
            f, vals = next(iter(mixed.items()))
            shown = ", ".join(clip(v, 40) for v in vals[:5]) + (" ..." if len(vals) > 5 else "")
            raise ConfigError(f"--ignore {f}: {side} holds trials of {f} {shown} that would pool as repeats of "
                              f"one (first: {clip(labels([t.config])[0], 200)}); --ignore matches a field that "
                              f"differs between the sides: give each side's results one value of {f}")
    return trials


def _identity(v) -> object:
    """What json.dumps(v, sort_keys=True, default=str) tells apart, without dumping the plain values: JSON's
    scalars by type and value (1, 1.0 and true stay apart, as their JSON texts do; a float by its repr, which is
    the text JSON writes), anything else by its JSON text."""
    t = type(v)
    if v is None or t is str or t is int or t is bool:
        return (t, v)
    if t is float:
        return (t, repr(v))
    return json.dumps(v, sort_keys=True, default=str)


def _varying(grp: Sequence[dict]) -> list[str]:
    """The fields (not LABEL_FIELDS) whose values differ between the configs of `grp` (a missing field reads as
    null), sorted: one pass over each field, stopping at its first difference."""
    fields = dict.fromkeys(k for c in grp for k in c if k not in LABEL_FIELDS)
    out = []
    for k in fields:
        first = _identity(grp[0].get(k))
        if any(_identity(d.get(k)) != first for d in grp):
            out.append(k)
    return sorted(out)


def labels(configs: Sequence[dict]) -> list[str]:
    """Short readable names: the fixed fields, plus other fields where they differ between trials of one task.
    Linear in the number of configs (times their fields)."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for c in configs:
        by_task[str(c.get("task"))].append(c)
    varying_in = {task: _varying(grp) for task, grp in by_task.items()}
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


SHOWN_DIFFERENCES = 3  # why_unmatched names the closest trial's differing fields when there are at most this many
KIND = ("kind",)  # the record kind, a field of its own in why_unmatched's count (no config key is a tuple)
MAX_SUBSETS = 64  # Nearest: index the field subsets of one size up to this many, else scan (see Nearest)


def _frozen(v) -> object:
    """`v` as a hashable value equal to another exactly when `v == other` (lists and dicts from JSON)."""
    if isinstance(v, list):
        return ("list", tuple(_frozen(x) for x in v))
    if isinstance(v, dict):
        return ("dict", frozenset((k, _frozen(x)) for k, x in v.items()))
    return v


class Nearest:
    """The trials of one side, to find for a trial of the other the first one with the fewest differing fields
    (its kind, and every config field, a missing one reading as None), as far as SHOWN_DIFFERENCES.

    Fields equal in every trial add the same count to each; over the fields that vary (V of them) the trials at
    d differing fields are found by looking up the trial's values on every V-minus-d subset of the fields in a
    dict per subset (built once, on first need): linear in the trials while C(V, d) <= MAX_SUBSETS (a sweep's few
    axes). With more varying fields it compares with every trial, vectorised (numpy over integer codes)."""

    def __init__(self, trials: Iterable[Trial]):
        self.trials = list(trials)
        keys = [KIND, *dict.fromkeys(k for o in self.trials for k in o.config)]
        columns = {k: [_frozen(self._get(o, k)) for o in self.trials] for k in keys}
        self.keys = set(keys)
        self.const = {k: col[0] for k, col in columns.items() if len(set(col)) == 1}
        self.vary = [k for k in keys if k not in self.const]
        self.columns = [columns[k] for k in self.vary]
        self.levels: dict[int, list[tuple[tuple[int, ...], dict]]] = {}
        self.codes = None

    @staticmethod
    def _get(t: Trial, k):
        return t.kind if k is KIND else t.config.get(k)

    def _level(self, d: int) -> list[tuple[tuple[int, ...], dict]]:
        """(kept field positions, their values -> the first trial holding them) for each d-subset left out."""
        if d not in self.levels:
            index = []
            for out in itertools.combinations(range(len(self.vary)), d):
                kept = tuple(i for i in range(len(self.vary)) if i not in out)
                first: dict[tuple, int] = {}
                rows = zip(*(self.columns[i] for i in kept)) if kept else [()] * len(self.trials)
                for pos, values in enumerate(rows):
                    first.setdefault(values, pos)
                index.append((kept, first))
            self.levels[d] = index
        return self.levels[d]

    def _scan(self, values: list, budget: int) -> Trial | None:
        import numpy as np

        if self.codes is None:
            self.lookup = [{v: i for i, v in enumerate(dict.fromkeys(col))} for col in self.columns]
            self.codes = np.array([[lk[v] for v in col] for lk, col in zip(self.lookup, self.columns)],
                                  dtype=np.int64).T  # trials x varying fields
        mine = np.array([lk.get(v, -1) for lk, v in zip(self.lookup, values)], dtype=np.int64)
        dist = (self.codes != mine).sum(axis=1)
        pos = int(np.argmin(dist))  # the first of the fewest
        return self.trials[pos] if dist[pos] <= budget else None

    def closest(self, t: Trial) -> Trial | None:
        """The first trial with the fewest fields differing from `t`'s, or None where every trial differs in more
        than SHOWN_DIFFERENCES."""
        base = sum(_frozen(self._get(t, k)) != v for k, v in self.const.items())
        base += sum(v is not None for k, v in t.config.items() if k not in self.keys)
        budget = SHOWN_DIFFERENCES - base
        values = [_frozen(self._get(t, k)) for k in self.vary]
        for d in range(min(budget, len(self.vary)) + 1):
            if math.comb(len(self.vary), d) > MAX_SUBSETS:
                return self._scan(values, budget)
            found = [pos for kept, first in self._level(d)
                     if (pos := first.get(tuple(values[i] for i in kept))) is not None]
            if found:
                return self.trials[min(found)]
        return None


_NEAREST: list[tuple[dict, int, Nearest]] = []  # the last sides asked about (compare asks about every unmatched
# trial of one side against the other): each with its length when indexed, held so its id stays its own


def _nearest(other: dict[str, Trial]) -> Nearest:
    for side, n, index in _NEAREST:
        if side is other and n == len(other):
            return index
    index = Nearest(other.values())
    _NEAREST[:] = [*_NEAREST[-1:], (other, len(other), index)]
    return index


def why_unmatched(t: Trial, other: dict[str, Trial]) -> str:
    """Why trial `t` has no match among `other`: the closest trial's differing fields (Nearest), or method
    version."""
    if not other:
        return "nothing on the other side"

    o = _nearest(other).closest(t)
    if o is None:
        return "no trial with this configuration on the other side"
    fields = [k for k in sorted({*t.config, *o.config}) if t.config.get(k) != o.config.get(k)]
    fields = (["kind"] if o.kind != t.kind else []) + fields
    if not fields:
        return (f"method_version {t.method_version} vs {o.method_version}: the measurement method changed, the "
                "numbers are not comparable; re-measure the baseline")
    if len(fields) > SHOWN_DIFFERENCES or {"kind", "model", "task", "backend"} & set(fields):
        return "no trial with this configuration on the other side"
    shown = ", ".join(f"{k} ({t.config.get(k)!r} vs {o.config.get(k)!r})" for k in fields if k != "kind")
    return f"the closest trial differs in {shown}; --ignore {' --ignore '.join(fields)} would match them"
