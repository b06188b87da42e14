"""The report sections of the controlled architecture experiments (vitbench.report.arch), on synthetic rows:
which model varies which dimension, spread over seeds, and nothing shown for studies that vary none of it."""

from __future__ import annotations

import pandas as pd

from vitbench.report import arch
from tolerances_stat import f64, f64_std


def _rows(models_acc: dict[str, list[float]], kind="fewshot", **extra) -> pd.DataFrame:
    rows = []
    for model, accs in models_acc.items():
        for seed, acc in enumerate(accs):
            rows.append({"kind": kind, "status": "ok", "model": model, "accuracy": acc, "seed": seed,
                         "shots": 10 if kind == "fewshot" else None, "backend": "torch", "resolution": 16,
                         "pretrain_steps": 200, "pretrain_lr": 0.002, "pretrain_exaflops": 1e-7 * (1 + len(model)),
                         "params_m": 0.03, **extra})
    return pd.DataFrame(rows)


def test_shape_rows_get_the_dimension_they_vary():
    ok = pd.concat([_rows({"ViT-Nano/4": [0.8, 0.82], "ViT-Nano/4[depth=4]": [0.85, 0.86],
                           "ViT-Nano/4[depth=8]": [0.9, 0.88], "ViT-Nano/4[width=64]": [0.81, 0.8],
                           "ViT-Nano/4[patch=2]": [0.9, 0.9],
                           "ViT-Nano/4[depth=4,width=64,mlp_dim=256]": [0.92, 0.93]}),
                    _rows({"ViT-Nano/4": [0.7], "ViT-Nano/4[depth=4]": [0.75], "ViT-Nano/4[patch=2]": [0.8]},
                          kind="finetune")])
    t = arch.shape_table(ok)
    few = t[t["series"] == "10-shot linear"].set_index("model")
    assert few.loc["ViT-Nano/4", "dimension"] == "" and few.loc["ViT-Nano/4", "value"] == "base"
    assert few.loc["ViT-Nano/4[depth=8]", "dimension"] == "depth"
    assert few.loc["ViT-Nano/4[depth=8]", "value"] == "L=8"
    assert few.loc["ViT-Nano/4[depth=4,width=64,mlp_dim=256]", "dimension"] == arch.ALL
    assert few.loc["ViT-Nano/4[depth=8]", "seeds"] == 2
    # the mean: 0.9 + 0.88 (two literals, one sum; / 2 is exact) against the literal 0.89
    assert few.loc["ViT-Nano/4[depth=8]", "accuracy_mean"] == f64(0.89, roundings=3)
    assert few.loc["ViT-Nano/4[depth=8]", "accuracy_std"] == f64_std([0.9, 0.88])
    assert set(t["series"]) == {"10-shot linear", "fine-tuning"}
    fig = arch.shape_figure(ok)
    assert fig is not None and len(fig.axes) == 4  # depth, width, patch, all


def test_head_table_marks_each_heads_best_learning_rate():
    parts = []
    for lr, (tok, gap) in {0.0003: (0.6, 0.8), 0.001: (0.8, 0.7), 0.003: (0.7, 0.5)}.items():
        parts.append(_rows({"ViT-Nano/4[rep_size=32]": [tok, tok + 0.02],
                            "ViT-Nano/4[classifier=gap]": [gap, gap]}, pretrain_lr=lr))
    ok = pd.concat(parts)
    t = arch.head_table(ok)
    best = t[t["best"]].set_index("head")["pretrain_lr"].to_dict()
    assert best == {"class token + tanh pre-logits (32)": 0.001, "GAP + linear head": 0.0003}
    assert set(t["base"]) == {"ViT-Nano/4"}
    assert arch.head_figure(ok) is not None


def test_posemb_table_has_spread_and_difference_to_the_default():
    ok = _rows({"ViT-Nano/4": [0.9, 0.92, 0.91], "ViT-Nano/4[posemb=none]": [0.7, 0.72, 0.74],
                "ViT-Nano/4[posemb=learned_2d,posemb_at=every_layer]": [0.9, 0.9, 0.93]})
    t = arch.posemb_table(ok).set_index(["posemb", "posemb_at"])
    # two means of 3 (3 literals, 2 sums, a division each), their difference, the literal -0.19: 15 roundings of
    # terms up to 0.93 (the difference cancels, so the bound is on the terms' size, not on 0.19)
    assert t.loc[("none", "input"), "vs_default"] == f64(-0.19, roundings=15, scale=0.93)
    assert t.loc[("none", "input"), "accuracy_min"] == 0.7 and t.loc[("none", "input"), "seeds"] == 3
    assert list(t.index)[0] == ("none", "input")  # Table 8's order: none, learned, learned_2d, ...
    assert arch.posemb_figure(ok) is not None


def test_rows_without_a_seed_count_as_seeds_of_their_own():
    """Rows that do not say their seed (an empty column: rows from another tool, or a task that has none) showed
    `seeds 0` beside a mean and spread of 3 values."""
    ok = _rows({"ViT-Nano/4": [0.9, 0.92, 0.91], "ViT-Nano/4[posemb=none]": [0.7, 0.72, 0.74]})
    t = arch.posemb_table(ok.assign(seed=None)).set_index(["posemb", "posemb_at"])
    assert t.loc[("none", "input"), "seeds"] == 3


def test_rows_that_do_not_say_their_dataset_are_a_panel_of_their_own_with_their_default():
    """A posemb study whose older rows do not say their fine-tuning dataset (blank) beside rows on digits: the
    blank rows' panel drew their dots and their default's line, as the named dataset's does."""
    ok = pd.concat([_rows({"ViT-Nano/4": [0.9, 0.92], "ViT-Nano/4[posemb=none]": [0.8, 0.82]}, kind="finetune",
                          dataset="digits"),
                    _rows({"ViT-Nano/4": [0.4, 0.42], "ViT-Nano/4[posemb=none]": [0.45, 0.47]}, kind="finetune",
                          dataset=None)])
    fig = arch.posemb_figure(ok)
    assert len(fig.axes) == 2
    for ax in fig.axes:  # each panel: its two cells' dots and its own default's dashed line
        assert len(ax.collections) >= 2 and [ln for ln in ax.lines if ln.get_linestyle() == "--"], ax.get_title()
    # and the table's difference to the default, the blank dataset's too (a NaN key had matched no default: NaN)
    t = arch.posemb_table(ok)
    blank = t[t["dataset"].isna()].set_index("posemb")["vs_default"]
    assert blank["learned"] == 0 and blank["none"] == f64(0.05, roundings=7, scale=0.47), t


def test_two_downstream_datasets_are_never_averaged_as_seeds():
    """A posemb, head and shape study fine-tuned on two datasets (digits near 0.9, pets near 0.4): each table kept
    one row per model, its mean 0.65 over both datasets as 'seeds' with their 0.29 spread as the seeds' std
    (the groups that choose the rows split by the recipe, the summaries did not). Now a row per dataset, each its
    own seeds' mean, and vs_default and `best` within it."""
    ok = pd.concat([_rows({"ViT-Nano/4": [0.9, 0.92], "ViT-Nano/4[posemb=none]": [0.8, 0.82]}, kind="finetune",
                          dataset="digits"),
                    _rows({"ViT-Nano/4": [0.4, 0.42], "ViT-Nano/4[posemb=none]": [0.45, 0.47]}, kind="finetune",
                          dataset="pets")])
    t = arch.posemb_table(ok).set_index(["dataset", "posemb"])
    assert t.loc[("digits", "learned"), "accuracy_mean"] == f64(0.91, roundings=3)
    assert t.loc[("pets", "learned"), "accuracy_mean"] == f64(0.41, roundings=3)
    assert t.loc[("digits", "none"), "vs_default"] == f64(-0.1, roundings=7, scale=0.92)
    assert t.loc[("pets", "none"), "vs_default"] == f64(0.05, roundings=7, scale=0.47)
    assert (t["seeds"] == 2).all() and (t["accuracy_std"] < 0.02).all()
    assert arch.posemb_table(ok).attrs["split_by"] == ["dataset"]  # the terminal shows it
    fig = arch.posemb_figure(ok)  # a panel per dataset, its default line its own
    assert [(ax.get_title(), [ln.get_xdata()[0] for ln in ax.lines if ln.get_linestyle() == "--"])
            for ax in fig.axes] == [("fine-tuning dataset=digits", [f64(91.0, roundings=4, scale=92)]),
                                    ("fine-tuning dataset=pets", [f64(41.0, roundings=4, scale=42)])]
    heads = pd.concat([_rows({"ViT-Nano/4": [acc], "ViT-Nano/4[classifier=gap]": [acc]}, kind="finetune",
                             dataset=ds, pretrain_lr=lr)
                       for ds, lr, acc in (("digits", 0.001, 0.9), ("digits", 0.003, 0.8),
                                           ("pets", 0.001, 0.3), ("pets", 0.003, 0.5))])
    h = arch.head_table(heads)
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in arch.head_figure(heads).axes[0].lines}
    assert lines["class token dataset=pets"] == [30.0, 50.0] and lines["GAP + linear head dataset=digits"] == [
        90.0, 80.0]
    assert sorted(zip(h["dataset"], h["pretrain_lr"], h["accuracy_mean"], h["best"]))[::2] == [
        ("digits", 0.001, 0.9, True), ("digits", 0.003, 0.8, False), ("pets", 0.001, 0.3, False),
        ("pets", 0.003, 0.5, True)]
    shape = pd.concat([_rows({"ViT-Nano/4": [0.8], "ViT-Nano/4[depth=4]": [0.85], "ViT-Nano/4[depth=8]": [0.9]},
                             kind="finetune", dataset=ds) for ds in ("digits", "pets")])
    shape.loc[shape["dataset"] == "pets", "accuracy"] -= 0.5
    s = arch.shape_table(shape)
    assert len(s) == 6 and (s["seeds"] == 1).all()
    assert sorted(s.loc[s["dataset"] == "pets", "accuracy_mean"].round(9)) == [0.3, 0.35, 0.4]


def test_any_setting_of_the_tasks_keeps_rows_apart_not_only_a_listed_few():
    """The recipe was a list of twelve fields: a study that varied any other setting of its task (here the
    fine-tuning steps, and the list-valued lr_grid) had its rows averaged as seeds of one. Every setting the
    task declares (vitbench.tasks.setting_columns) now splits, but the seed (the spread) and the model."""
    ok = pd.concat([_rows({"ViT-Nano/4": [0.9, 0.92], "ViT-Nano/4[posemb=none]": [0.8, 0.82]}, kind="finetune",
                          finetune_steps=steps, lr_grid=grid)
                    for steps, grid in ((100, [0.01, 0.03]), (100, [0.1]), (500, [0.01, 0.03]))])
    ok.loc[ok["finetune_steps"] == 500, "accuracy"] -= 0.5
    t = arch.posemb_table(ok)
    assert set(t.attrs["split_by"]) == {"finetune_steps", "lr_grid"}, t.attrs
    assert len(t) == 6 and (t["seeds"] == 2).all() and (t["accuracy_std"] < 0.02).all(), t
    low = t[t["finetune_steps"] == 500].set_index("posemb")
    assert low.loc["learned", "accuracy_mean"] == f64(0.41, roundings=5)
    # a setting only one series has (the few-shot draws; blank on pre-training rows) tells the series apart,
    # which the table already does: it splits nothing
    two = pd.concat([_rows({"ViT-Nano/4": [0.9, 0.92], "ViT-Nano/4[posemb=none]": [0.8, 0.82]}, fewshot_seeds=5),
                     _rows({"ViT-Nano/4": [0.7, 0.72], "ViT-Nano/4[posemb=none]": [0.6, 0.62]}, kind="pretrain")])
    t = arch.posemb_table(two)
    assert t.attrs["split_by"] == [] and len(t) == 4 and (t["seeds"] == 2).all(), t


def test_sections_stay_empty_for_studies_that_vary_no_architecture():
    ok = _rows({"ViT-Nano/4": [0.8], "ViT-Micro/4": [0.85], "R-Nano": [0.9], "ViT-Mini/4": [0.9]})
    assert arch.shape_table(ok).empty and arch.shape_figure(ok) is None
    assert arch.head_table(ok).empty and arch.posemb_table(ok).empty and arch.posemb_figure(ok) is None
    assert arch.shape_table(ok.iloc[0:0]).empty
