"""compare's matching at scale (issue 51): labels and why_unmatched give what the direct, quadratic definitions
give (written out here as they were before), on random trial sets with few and with many varying fields."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from vitbench.compare.match import LABEL_FIELDS, MAX_SUBSETS, Trial, labels, why_unmatched


def labels_direct(configs):
    """The definition: a field joins a task's labels when its JSON text differs between two configs of the task."""
    by_task = defaultdict(list)
    for c in configs:
        by_task[str(c.get("task"))].append(c)
    varying_in = {task: sorted({k for c in grp for k in c if k not in LABEL_FIELDS
                                and len({json.dumps(d.get(k), sort_keys=True, default=str) for d in grp}) > 1})
                  for task, grp in by_task.items()}
    out = []
    for c in configs:
        parts = [{"batch_size": f"bs{v}", "resolution": f"{v}px", "compile": "compile"}.get(k, str(v))
                 for k in LABEL_FIELDS if (v := c.get(k)) is not None and v is not False]
        varying = varying_in[str(c.get("task"))]
        out.append(" ".join(parts + [f"{k}={c[k]}" for k in varying if c.get(k) is not None]))
    return out


def closest_direct(t, other):
    """The definition: the first trial of `other` with the fewest differing fields (kind and config)."""
    def diff(o):
        d = [k for k in sorted({*t.config, *o.config}) if t.config.get(k) != o.config.get(k)]
        return (["kind"] if o.kind != t.kind else []) + d

    return min(other.values(), key=lambda o: len(diff(o)))


def why_direct(t, other):
    o = closest_direct(t, other)
    fields = [k for k in sorted({*t.config, *o.config}) if t.config.get(k) != o.config.get(k)]
    fields = (["kind"] if o.kind != t.kind else []) + fields
    if not fields:
        return f"method_version {t.method_version} vs {o.method_version}"
    if len(fields) > 3 or {"kind", "model", "task", "backend"} & set(fields):
        return "no trial with this configuration on the other side"
    shown = ", ".join(f"{k} ({t.config.get(k)!r} vs {o.config.get(k)!r})" for k in fields if k != "kind")
    return f"the closest trial differs in {shown}"


# Values that JSON and Python equality tell apart differently: 1, 1.0 and True are equal in Python and not in JSON
VALUES = [None, 0, 1, 1.0, True, False, "1", "a", [1, 2], [1, 2.0], {"x": 1}, {"x": [1]}, 0.5]


def random_trials(rng: random.Random, n: int, fields: list[str], p_missing: float = 0.2) -> dict[str, Trial]:
    out = {}
    for i in range(n):
        cfg = {"task": rng.choice(["infer", "train"]), "model": rng.choice(["A", "B"])}
        for f in fields:
            if rng.random() > p_missing:
                cfg[f] = rng.choice(VALUES)
        out[f"t{i}"] = Trial(rng.choice(["bench", "bench", "other"]), rng.choice([1, 2]), cfg)
    return out


@pytest.mark.parametrize("n_fields", [3, 12])  # 12 varying fields: C(12, 2) > MAX_SUBSETS, the scan
def test_labels_and_why_unmatched_match_the_direct_definitions(n_fields):
    assert n_fields * (n_fields - 1) // 2 > MAX_SUBSETS or n_fields == 3
    rng = random.Random(n_fields)
    fields = [f"f{i}" for i in range(n_fields)]
    for _ in range(30):
        side = random_trials(rng, rng.randint(1, 25), fields)
        other = random_trials(rng, rng.randint(1, 25), fields[: rng.randint(1, n_fields)])
        configs = [t.config for t in side.values()]
        assert labels(configs) == labels_direct(configs)
        for t in side.values():
            assert why_unmatched(t, other).startswith(why_direct(t, other))


def test_why_unmatched_names_the_one_differing_field_among_many_trials():
    """A grid of 400 trials against the same grid at another thread count: each finds its twin."""
    grid = {f"{m}{b}": Trial("bench", 1, {"model": m, "task": "infer", "batch_size": b, "threads": 1})
            for m in ("A", "B") for b in range(200)}
    other = {k: Trial("bench", 1, {**t.config, "threads": 2}) for k, t in grid.items()}
    assert why_unmatched(grid["A7"], other) == ("the closest trial differs in threads (1 vs 2); --ignore threads "
                                                "would match them")
    moved = {k: Trial("bench", 2, dict(t.config)) for k, t in grid.items()}
    assert why_unmatched(grid["B3"], moved).startswith("method_version 1 vs 2")
