"""Report sections of the paper's controlled architecture experiments (ViT appendix D.2-D.4), read from the
models' names: a variant's name carries its overrides (`ViT-Nano/4[depth=8]`, vitbench.models.overrides), so
the rows of any study that varies them are grouped here without a field of their own.

- shape (Figure 8): depth, width, MLP width and patch each varied around one base, and several scaled together;
  transfer accuracy against pre-training compute, one panel per dimension.
- head (Figure 9): class token (+ tanh pre-logits) vs global average pooling, accuracy against the pre-training
  learning rate.
- posemb (Table 8): accuracy per position-embedding kind and place, mean and spread over pre-training seeds.

Each function gets the ok rows of the section's kinds and returns a table (empty when the rows do not vary what
the section is about) or a Figure (None then). Spread is over pre-training seeds (the trial's `seed`): mean,
standard deviation (ddof 1) and range; a single seed has no spread (NaN std).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from vitbench.models.overrides import POSEMB_ATS, POSEMBS, TRANSFORMER_KEYS, render_value
from vitbench.report.plots import _log_axis, plain
from vitbench.tasks.fewshot import Fewshot
from vitbench.tasks.finetune import Finetune
from vitbench.tasks.pretrain import Pretrain

# The architecture columns: a transformer's override fields (rows of families that take them all: vit, hybrid)
ARCH_FIELDS = TRANSFORMER_KEYS

SHAPE = ("depth", "width", "mlp_dim", "patch")  # Figure 8's dimensions
ALL = "all"  # a variant that changes several of them at once
_SHAPE_TITLES = {"depth": "depth (blocks)", "width": "width D", "mlp_dim": "MLP width", "patch": "patch size (px)",
                 ALL: "all scaled together"}
_SHORT = {"depth": "L", "width": "D", "mlp_dim": "MLP", "patch": "P"}
# What else must be equal for two rows to be compared (the recipe of their upstream and their evaluation): every
# setting of their tasks (vitbench.tasks.setting_columns), less what these sections vary or pool on purpose: the
# model (its arch_* fields are the sections' axes), the task and shots (the series), the seed (the spread).
# A list of recipe fields of its own had left out every setting it did not name: two fine-tuning step counts or
# optimizers were averaged as seeds of one.
_NOT_RECIPE = ("model", "task", "shots", "seed")
_STATS = ["seeds", "accuracy_mean", "accuracy_std", "accuracy_min", "accuracy_max"]


@lru_cache(maxsize=4096)
def _spec(model: str):
    from vitbench.models.specs import get_spec

    try:
        return get_spec(model)
    except Exception:  # noqa: BLE001 - a name from another vitbench's table: not part of these sections
        return None


def _series(row) -> str:
    """What kind of accuracy a row is: 'pre-training (upstream test)', 'k-shot linear' or 'fine-tuning'."""
    kind = row["kind"]
    if kind == Fewshot.kind:
        shots = row.get("shots")
        return f"{int(shots)}-shot linear" if pd.notna(shots) else "few-shot linear"
    return {Finetune.kind: "fine-tuning", Pretrain.kind: "pre-training (upstream test)"}.get(kind, str(kind))


def _frame(ok: pd.DataFrame) -> pd.DataFrame:
    """ViT/hybrid rows with an accuracy, their series and every architecture field of their model as columns."""
    if ok.empty or not {"model", "accuracy", "kind"} <= set(ok.columns):
        return pd.DataFrame()
    df = ok.reset_index(drop=True)
    specs = df["model"].map(lambda m: _spec(str(m)))
    df = df[specs.map(lambda s: s is not None and set(ARCH_FIELDS) <= set(s.override_keys))].copy()
    if df.empty:
        return df
    specs = specs[df.index]
    for f in ARCH_FIELDS:
        df[f"arch_{f}"] = specs.map(lambda s, f=f: getattr(s.arch, f))  # an override key: a field of the arch
    df["arch_row"] = specs.map(lambda s: s.base_row().name)
    df["accuracy"] = pd.to_numeric(df["accuracy"], errors="coerce")
    df["series"] = df.apply(_series, axis=1)
    for c in ("pretrain_exaflops", "pretrain_lr", "seed"):
        if c in df.columns:
            df[c] = pd.to_numeric(df[c], errors="coerce")
    from vitbench.report.tables import hashable

    for c in _recipe_fields(df):  # grouped on: a list-valued setting (lr_grid) as its JSON text
        df[c] = hashable(df[c])
    return df.dropna(subset=["accuracy"])


def _recipe_fields(df: pd.DataFrame) -> list[str]:
    """The recipe's fields `df` has (_NOT_RECIPE says which settings are not)."""
    from vitbench.tasks import setting_columns

    settings = setting_columns(df["kind"].dropna().unique())
    return [c for c in df.columns if c in settings and c not in _NOT_RECIPE]


def _keys(df: pd.DataFrame, *more: str) -> list[str]:
    return [c for c in dict.fromkeys((*more, *_recipe_fields(df))) if c in df.columns]


def _stats(g) -> pd.Series:
    a = g["accuracy"]
    # a row that does not say its seed counts as one of its own (the column all empty: 0 seeds were shown)
    seeds = g["seed"].nunique() + int(g["seed"].isna().sum()) if "seed" in g else len(a)
    return pd.Series({"seeds": seeds, "accuracy_mean": a.mean(),
                      "accuracy_std": a.std(ddof=1) if len(a) > 1 else np.nan, "accuracy_min": a.min(),
                      "accuracy_max": a.max()})


def _recipe(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """The recipe fields (_recipe_fields) not in `keys` that take two values or more within one series of one
    base (a missing one counts): a summary over seeds keeps them apart. Two datasets, backends or input sizes
    were averaged as seeds of one (digits 0.9 and pets 0.4 read 0.65, their spread as the seeds'). A field that
    only tells the series apart (the few-shot settings, blank on pre-training rows) splits nothing."""
    fields = [k for k in _recipe_fields(df) if k not in keys]  # hashable already (_frame)
    if not fields:
        return []
    by = [k for k in ("series", "base") if k in df.columns]  # _frame gives every row its series
    most = df.groupby(by, dropna=False, sort=False)[fields].nunique(dropna=False).max()
    return [k for k in fields if most[k] > 1]


def _split_by(t: pd.DataFrame) -> list[str]:
    """The recipe fields a summary of _summary keeps apart (its attrs)."""
    from vitbench.report.tables import SPLIT_BY

    return [k for k in t.attrs.get(SPLIT_BY, ()) if k in t.columns]


def _of(df: pd.DataFrame, keys: list[str], values) -> pd.Series:
    """The rows of `df` whose `keys` hold `values` (a missing value matches a missing one)."""
    mask = pd.Series(True, index=df.index)
    for k, v in zip(keys, values):
        mask &= df[k].isna() if pd.isna(v) else df[k] == v
    return mask


def _tag(split: list[str], key) -> str:
    from vitbench.report.tables import settings_text

    return settings_text(zip(split, key))


def _summary(df: pd.DataFrame, keys: list[str], extra: tuple[str, ...] = (), split=()) -> pd.DataFrame:
    """Accuracy over seeds per `keys` (dropna=False: a missing recipe field is one value), + mean of `extra`;
    `split`: those of `keys` that are recipe fields that vary (_recipe), named in the result's attrs (the
    terminal shows them, the figures draw each its own line: vitbench.report.tables.SPLIT_BY)."""
    from vitbench.report.tables import GROUPED_BY, SPLIT_BY

    g = df.groupby(keys, dropna=False, sort=True)
    out = g.apply(_stats, include_groups=False)
    for c in extra:
        if c in df.columns:
            out[c] = g[c].mean()
    out = out.reset_index()
    out.attrs.update({SPLIT_BY: list(split), GROUPED_BY: list(keys)})
    return out


# ---- shape (Figure 8) -------------------------------------------------------------------------------------------
def _shape_rows(ok: pd.DataFrame) -> pd.DataFrame:
    """Rows of groups (same row, head, position embedding and recipe) whose models vary the shape: each model's
    `dimension` (the one field it changes from the group's most common value, 'all' for several, '' for the
    base) and `value` (its label)."""
    df = _frame(ok)
    if df.empty:
        return df
    group = _keys(df, "arch_row", "arch_heads", "arch_classifier", "arch_rep_size", "arch_posemb",
                  "arch_posemb_at")
    parts = []
    for _, g in df.groupby(group, dropna=False, sort=False):
        models = g.drop_duplicates("model")
        if len(models) < 3:
            continue
        centre = {f: models[f"arch_{f}"].mode().iloc[0] for f in SHAPE}
        dims = models.set_index("model").apply(
            lambda r: tuple(f for f in SHAPE if r[f"arch_{f}"] != centre[f]), axis=1)
        if not any(len(d) for d in dims):
            continue
        g = g.copy()
        g["dims"] = g["model"].map(dims)
        g["dimension"] = g["dims"].map(lambda d: "" if not d else (d[0] if len(d) == 1 else ALL))
        g["value"] = g.apply(lambda r: ", ".join(f"{_SHORT[f]}={render_value(r[f'arch_{f}'])}" for f in r["dims"])
                             or "base", axis=1)
        g["base"] = g.loc[g["dimension"] == "", "model"].iloc[0] if (g["dimension"] == "").any() else ""
        parts.append(g)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def shape_table(ok: pd.DataFrame) -> pd.DataFrame:
    """Per model of a shape study: the dimension it varies, its accuracy per series (over seeds) and its
    pre-training compute and parameters."""
    df = _shape_rows(ok)
    if df.empty:
        return pd.DataFrame()
    keys = ["series", "base", "dimension", "value", "model"]
    split = _recipe(df, keys)
    out = _summary(df, [*keys[:2], *split, *keys[2:]], extra=("pretrain_exaflops", "params_m"), split=split)
    order = {d: i for i, d in enumerate(("", *SHAPE, ALL))}
    return out.sort_values(["series", "base", "dimension", "pretrain_exaflops"],
                           key=lambda s: s.map(order) if s.name == "dimension" else s).reset_index(drop=True)


def shape_figure(ok: pd.DataFrame) -> Figure | None:
    """Figure 8: one panel per varied dimension (the base's point on every line); accuracy (mean over seeds,
    bars: min-max) against pre-training compute, a line per series (k-shot linear, fine-tuning)."""
    t = shape_table(ok)
    if t.empty or "pretrain_exaflops" not in t.columns or t["pretrain_exaflops"].isna().all():
        return None
    dims = [d for d in (*SHAPE, ALL) if (t["dimension"] == d).any()]
    series = list(dict.fromkeys(t["series"]))
    colors = {s: colormaps["tab10"](i) for i, s in enumerate(series)}
    fig = Figure(figsize=(3.3 * len(dims) + 0.8, 3.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(dims), sharey=True, squeeze=False).ravel())
    split = _split_by(t)  # a line per recipe too (two datasets: two lines, not one zig-zag through both)
    for ax, dim in zip(axes, dims):
        for s in series:
            for key, part in t[t["series"] == s].groupby(["base", *split], sort=False, dropna=False):
                pts = part[part["dimension"].isin(("", dim))].sort_values("pretrain_exaflops")
                x, y = pts["pretrain_exaflops"].to_numpy(), 100 * pts["accuracy_mean"].to_numpy()
                lo, hi = 100 * pts["accuracy_min"].to_numpy(), 100 * pts["accuracy_max"].to_numpy()
                ax.errorbar(x, y, yerr=[y - lo, hi - y], color=colors[s], marker="o", ms=4, lw=1.2, capsize=2,
                            label=plain(f"{s} {_tag(split, key[1:])}".strip()))
                is_base = (pts["dimension"] == "").to_numpy()
                ax.scatter(x[is_base], y[is_base], s=70, facecolors="none", edgecolors="black", zorder=3)
                for xi, yi, v in zip(x, y, pts["value"]):
                    ax.annotate(plain(v), (xi, yi), textcoords="offset points", xytext=(3, 4), fontsize=6)
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
        ax.set_title(_SHAPE_TITLES[dim], fontsize=9)
        ax.set_xlabel("Pre-training compute [exaFLOPs]", fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("Accuracy [%] (mean over seeds, bar: range)", fontsize=8)
    handles, labels = axes[0].get_legend_handles_labels()
    uniq = dict(zip(labels, handles))
    fig.legend(uniq.values(), uniq.keys(), loc="outside lower center", ncol=len(uniq), fontsize=8, frameon=False)
    bases = plain(", ".join(sorted(set(t["base"]) - {""})))
    fig.suptitle(f"Transformer shape around {bases} (circled: the base; cf. paper Figure 8)", fontsize=10)
    return fig


# ---- head type (Figure 9) ---------------------------------------------------------------------------------------
def _head_label(r) -> str:
    if r["arch_classifier"] == "gap":
        return "GAP + linear head"
    return f"class token + tanh pre-logits ({int(r['arch_rep_size'])})" if r["arch_rep_size"] else "class token"


def _head_rows(ok: pd.DataFrame) -> pd.DataFrame:
    df = _frame(ok)
    if df.empty or "pretrain_lr" not in df.columns:
        return pd.DataFrame()
    df["head"] = df.apply(_head_label, axis=1)
    df["base"] = df["model"].map(lambda m: _spec(m).with_overrides(classifier="token", rep_size=0).name)
    keys = [k for k in _keys(df, "base") if k != "pretrain_lr"]
    parts = [g for _, g in df.groupby(keys, dropna=False, sort=False)
             if g["head"].nunique() > 1 and g["pretrain_lr"].nunique() > 1]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def head_table(ok: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per head type and pre-training learning rate (over seeds); `best` marks each head's best LR."""
    df = _head_rows(ok)
    if df.empty:
        return pd.DataFrame()
    recipe = _recipe(df, ["pretrain_lr"])
    out = _summary(df, ["series", "base", *recipe, "head", "pretrain_lr"], split=recipe)
    best = out.groupby(["series", "base", *recipe, "head"], dropna=False)["accuracy_mean"].transform("max")
    out["best"] = out["accuracy_mean"] == best
    return out


def head_figure(ok: pd.DataFrame) -> Figure | None:
    """Figure 9: accuracy against the pre-training learning rate, a line per head type (mean over seeds, band:
    min-max), one panel per series; a star at each head's best learning rate."""
    t = head_table(ok)
    if t.empty:
        return None
    series = list(dict.fromkeys(t["series"]))
    heads = list(dict.fromkeys(t["head"]))
    colors = {h: colormaps["tab10"](i) for i, h in enumerate(heads)}
    fig = Figure(figsize=(4.2 * len(series) + 0.6, 3.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(series), squeeze=False).ravel())
    split = _split_by(t)  # a line per recipe too
    for ax, s in zip(axes, series):
        for (base, *key, head), part in t[t["series"] == s].groupby(["base", *split, "head"], sort=False,
                                                                    dropna=False):
            part = part.sort_values("pretrain_lr")
            x, y = part["pretrain_lr"].to_numpy(), 100 * part["accuracy_mean"].to_numpy()
            ax.plot(x, y, marker="o", ms=4, color=colors[head], label=plain(f"{head} {_tag(split, key)}".strip()))
            ax.fill_between(x, 100 * part["accuracy_min"], 100 * part["accuracy_max"], color=colors[head],
                            alpha=0.15, linewidth=0)
            b = part[part["best"]]
            ax.scatter(b["pretrain_lr"], 100 * b["accuracy_mean"], marker="*", s=120, color=colors[head],
                       edgecolors="black", zorder=3)
        ax.set_xscale("log")
        ax.set_xlabel("Pre-training learning rate (Adam peak)", fontsize=8)
        ax.set_ylabel("Accuracy [%] (mean over seeds, band: range)", fontsize=8)
        ax.set_title(plain(s), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, frameon=False)
    bases = plain(", ".join(sorted(set(t["base"]))))
    fig.suptitle(f"Class token vs global average pooling, {bases} (star: each head's best LR; cf. paper Figure 9)",
                 fontsize=10)
    return fig


# ---- position embeddings (Table 8) ------------------------------------------------------------------------------
_PLACES = POSEMB_ATS
_KINDS = ("none", *(k for k in POSEMBS if k != "none"))  # Table 8's order: no position embedding first


def _posemb_rows(ok: pd.DataFrame) -> pd.DataFrame:
    df = _frame(ok)
    if df.empty:
        return df
    df["base"] = df["model"].map(lambda m: _spec(m).with_overrides(posemb="learned", posemb_at="input").name)
    df["posemb"], df["posemb_at"] = df["arch_posemb"], df["arch_posemb_at"]
    keys = _keys(df, "base")
    parts = [g for _, g in df.groupby(keys, dropna=False, sort=False)
             if g[["posemb", "posemb_at"]].drop_duplicates().shape[0] > 1]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def posemb_table(ok: pd.DataFrame) -> pd.DataFrame:
    """Table 8: accuracy per position-embedding kind and place (over seeds), and its difference to the default
    (learned 1-D at the input) of the same base and series."""
    df = _posemb_rows(ok)
    if df.empty:
        return pd.DataFrame()
    at = ["series", "base", *_recipe(df, [])]  # the default of the same base, series and recipe
    out = _summary(df, [*at, "posemb", "posemb_at"], split=at[2:])

    def key(t: pd.DataFrame) -> list[tuple]:  # a missing value as None: NaN matched no key, not even its own
        return list(t[at].astype(object).where(t[at].notna(), None).itertuples(index=False, name=None))

    default = out[(out["posemb"] == "learned") & (out["posemb_at"] == "input")]
    of = dict(zip(key(default), default["accuracy_mean"]))  # one row per key (`out` summarises `at` and more)
    out["vs_default"] = out["accuracy_mean"] - pd.Series([of.get(k, np.nan) for k in key(out)], index=out.index)
    kind = {k: i for i, k in enumerate(_KINDS)}
    place = {p: i for i, p in enumerate(_PLACES)}
    return out.sort_values(["series", "base", "posemb", "posemb_at"], key=lambda s: s.map(kind) if s.name ==
                           "posemb" else (s.map(place) if s.name == "posemb_at" else s)).reset_index(drop=True)


def posemb_figure(ok: pd.DataFrame) -> Figure | None:
    """Table 8 as a picture: each kind and place a row, each pre-training seed a dot, mean and +-1 std a bar;
    one panel per series; the dashed line is the default (learned 1-D at the input)."""
    df = _posemb_rows(ok)
    if df.empty:
        return None
    t = posemb_table(ok)
    split = ["series", *_split_by(t)]  # a panel per series and per recipe that varies (two datasets: two)
    panels = list(dict.fromkeys(t[split].itertuples(index=False, name=None)))
    cells = list(dict.fromkeys(zip(t["posemb"], t["posemb_at"])))
    fig = Figure(figsize=(4.6 * len(panels) + 0.8, 0.42 * len(cells) + 1.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True, squeeze=False).ravel())
    ys = {c: len(cells) - 1 - i for i, c in enumerate(cells)}
    for ax, key in zip(axes, panels):
        s = key[0]
        rows = df[_of(df, split, key)]
        for i, ((kind, at), g) in enumerate(rows.groupby(["posemb", "posemb_at"], sort=False)):
            y = ys[(kind, at)]
            color = colormaps["tab10"](_KINDS.index(kind) if kind in _KINDS else 9)
            ax.scatter(100 * g["accuracy"], np.full(len(g), y), s=14, color=color, alpha=0.6)
            m, sd = 100 * g["accuracy"].mean(), 100 * (g["accuracy"].std(ddof=1) if len(g) > 1 else 0.0)
            ax.errorbar([m], [y], xerr=[[sd], [sd]], fmt="|", ms=14, color=color, capsize=3, lw=1.5)
        d = t[_of(t, split, key) & (t["posemb"] == "learned") & (t["posemb_at"] == "input")]
        if not d.empty:
            ax.axvline(100 * d["accuracy_mean"].iloc[0], color="0.4", ls="--", lw=0.8)
        ax.set_title(plain(f"{s} {_tag(split[1:], key[1:])}".strip()), fontsize=9)
        ax.set_xlabel("Accuracy [%] (dots: seeds; bar: mean +- 1 std)", fontsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(list(ys.values()), [f"{k} @ {a}" for k, a in ys])
    bases = plain(", ".join(sorted(set(t["base"]))))
    fig.suptitle(f"Position embeddings, {bases} (dashed: learned 1-D at the input; cf. paper Table 8)",
                 fontsize=10)
    return fig
