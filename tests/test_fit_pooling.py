"""Pooled curves and numeric settings (vitbench.fit.rows.pooled): a setting of the rows' kinds that varies at one
compute is named in the group's note whatever its dtype; seeds, bookkeeping and the pre-training budget pool.

The review's case: finetune rows at 32 and 64 px, 5 budgets each, errors 0.15 apart, were fitted as one curve
({'kind': 'finetune', 'dataset': 'digits', 'family': 'vit'}, 10 points, no note): only text columns and a fixed
list were looked at, so a numeric setting (resolution, batch size, a regularisation) never was.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from vitbench.fit import FitSpec, fit_path
from vitbench.fit.rows import pooled

STEPS = (50, 100, 200, 400, 800)


def _store(root, rows):
    """A results store of `rows`: (kind, config, accuracy, pretrain_exaflops, extra envelope fields)."""
    from records import record

    from vitbench.store import Store

    with Store(root) as store:
        for i, (kind, cfg, acc, flops, fields) in enumerate(rows):
            store.append(record(kind, cfg, metrics={"accuracy": acc, "pretrain_exaflops": flops},
                                **{"key": f"k{i}", "started_at": f"2026-01-01T00:00:{i:02d}", **fields}))
    return root


def _err(steps: int, offset: float = 0.0) -> float:
    return 0.05 + offset + 0.5 * (steps / 50) ** -0.4


def _row(steps: int, offset: float = 0.0, kind: str = "finetune", flops: float | None = None, fields=None,
         **cfg):
    """One row at `steps` pre-training steps (compute `flops`, else steps x 1e-9), its error _err(...) at that
    compute."""
    budget = steps if flops is None else flops / 1e-9
    base = {"model": "ViT-Nano/4", "backend": "torch", "task": kind, "dataset": "digits", "resolution": 32,
            "pretrain_steps": steps, **({"shots": 10} if kind == "fewshot" else {})}
    return kind, {**base, **cfg}, 1 - _err(budget, offset), budget * 1e-9, fields or {}


def _fit(root, **spec):
    return fit_path(root, FitSpec(bootstrap=0, cutoffs=1, **spec), workers=1)


def test_two_resolutions_at_the_same_budgets_are_named_in_a_note(tmp_path):
    """The review's reproduction: the note names resolution and its values; --group resolution fits them apart,
    each group keyed by its resolution, without a note."""
    rows = [_row(s, off, resolution=res) for s in STEPS for res, off in ((32, 0), (64, .15))]
    root = _store(tmp_path / "r", rows)
    [g] = _fit(root).groups
    assert g.key == {"kind": "finetune", "dataset": "digits", "family": "vit"} and len(g.compute) == 10
    assert len(g.notes) == 1 and "2 values of 'resolution' (32, 64)" in g.notes[0], g.notes
    assert "--group resolution" in g.notes[0] and "pretrain_steps" not in g.notes[0]
    apart = _fit(root, group=["family", "resolution"])
    assert sorted(g.key["resolution"] for g in apart.groups) == [32, 64]
    assert all(len(g.compute) == 5 and not g.notes for g in apart.groups)


@pytest.mark.parametrize("kind, column, values, shown", [
    ("finetune", "batch_size", (16, 64), "(16, 64)"),
    ("finetune", "finetune_steps", (100, 1000), "(100, 1000)"),  # numbers in order, not as text (1000 < 200)
    ("fewshot", "l2_reg", (0.001, 0.1), "(0.001, 0.1)"),
    ("finetune", "resolution", (128, 32, 64), "(32, 64, 128)"),
])
def test_any_numeric_setting_of_the_rows_kind_is_named(tmp_path, kind, column, values, shown):
    rows = [_row(s, 0.1 * i, kind=kind, **{column: v}) for s in STEPS for i, v in enumerate(values)]
    [g] = _fit(_store(tmp_path / "r", rows)).groups
    assert len(g.notes) == 1 and f"{len(values)} values of {column!r} {shown}" in g.notes[0], g.notes


def test_a_curve_over_seeds_and_budgets_at_one_resolution_stays_one_curve(tmp_path):
    """Repeats over seeds are one curve's points at each budget: one group, every row a point, no note. As a sweep
    writes them: a trial per seed (a config field), two repeats of each, the second in another run and study (a
    resumed or repeated sweep), every row its own key and start time (the reader keeps the latest row of a key).
    The run and the study are text: they were taken for curve labels."""
    rows = [_row(s, 0.01 * seed + 0.002 * r, seed=seed, data_seed=10 + seed, finetune_seed=20 + seed,
                 fields={"key": f"t{s}-{seed}-{r}", "repeat": r, "run_id": f"run{r}", "study": f"study{r}"})
            for s in STEPS for seed in range(3) for r in range(2)]
    report = _fit(_store(tmp_path / "r", rows))
    [g] = report.groups
    assert g.key == {"kind": "finetune", "dataset": "digits", "family": "vit"}
    assert len(g.compute) == 30 and g.notes == [] and report.dropped == []


def test_the_pre_training_budget_is_the_compute_axis_not_a_curve(tmp_path):
    """pretrain_steps sets the compute: where two of its values meet at one compute (here 64 px rows reach a
    budget in a quarter of the steps), the resolution pools the curves, never the budget."""
    rows = [_row(s, 0.0, resolution=32, flops=s * 1e-9) for s in STEPS]
    rows += [_row(s // 4, 0.15, resolution=64, flops=s * 1e-9) for s in STEPS]
    [g] = _fit(_store(tmp_path / "r", rows)).groups
    assert len(g.notes) == 1 and "'resolution' (32, 64)" in g.notes[0] and "pretrain_steps" not in g.notes[0]


def _frame(**cols) -> pd.DataFrame:
    n = len(next(iter(cols.values())))
    return pd.DataFrame({"_compute": np.repeat([1.0, 2.0, 4.0, 8.0], n // 4), **cols})


def test_budget_seed_metric_and_bookkeeping_columns_never_pool():
    """At one compute, several values of the budget's settings, of the seeds, of a metric (images_seen, derived
    inference_gflops) or of the repeat counter are one curve's points; a setting beside them is named."""
    n = 12
    cols = {"kind": ["finetune"] * n, "pretrain_steps": [50, 200, 800] * 4, "checkpoint_images": [10, 20, 30] * 4,
            "checkpoint_epochs": [1.0, 2.0, 3.0] * 4, "seed": [0, 1, 2] * 4, "finetune_seed": [3, 4, 5] * 4,
            "data_seed": [6, 7, 8] * 4, "repeat": [0, 1, 2] * 4, "images_seen": [64, 128, 256] * 4,
            "inference_gflops": [0.1, 0.2, 0.3] * 4}
    assert pooled(_frame(**cols), set()) == []
    assert pooled(_frame(**cols, batch_size=[8, 16, 32] * 4), set()) == [("batch_size", ["8", "16", "32"])]
    # a skipped column (the group's own, the fit's x) is never named, setting or not
    assert pooled(_frame(**cols, batch_size=[8, 16, 32] * 4), {"batch_size"}) == []


def test_a_setting_of_another_kind_is_not_looked_at():
    """Settings are the rows' kinds' (vitbench.tasks.setting_columns): a fewshot row's l2_reg is a setting, a
    finetune row has none of that name (a column it does not declare, as a derived number, pools nothing)."""
    col = {"l2_reg": [0.001, 0.1] * 4}
    assert pooled(_frame(kind=["fewshot"] * 8, **col), set()) == [("l2_reg", ["0.001", "0.1"])]
    assert pooled(_frame(kind=["finetune"] * 8, **col), set()) == []


def test_a_csv_without_kinds_is_checked_against_every_kind_s_settings(tmp_path):
    """A CSV with no `kind` column (another tool's table): a numeric column named as a vitbench setting pools
    curves as the report reads it (any kind's settings); another numeric column does not."""
    p = tmp_path / "curves.csv"
    pd.DataFrame([{"compute": s, "error": _err(s, off), "resolution": res, "params": 5.7}
                  for s in STEPS for res, off in ((32, 0.0), (64, 0.15))]).to_csv(p, index=False)
    [g] = _fit(p, compute="compute", error="error").groups
    assert len(g.notes) == 1 and "2 values of 'resolution' (32, 64)" in g.notes[0]
    assert "params" not in g.notes[0]


def test_two_method_versions_at_the_same_budgets_are_named_in_a_note(tmp_path):
    """Rows of two method versions (vitbench.record.INCOMPARABLE) at one compute are two curves, as the report
    keeps them apart: the note names method_version, numeric and outside the settings as it is."""
    rows = [_row(s, off, fields={"method_version": v}) for s in STEPS for v, off in ((2, 0), (3, .1))]
    [g] = _fit(_store(tmp_path / "r", rows)).groups
    assert len(g.notes) == 1 and "2 values of 'method_version' (2, 3)" in g.notes[0], g.notes
