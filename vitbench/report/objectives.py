"""Report section "Pre-training objective" (ViT paper Sec. 4.6): transfer accuracy per pre-training objective
(supervised, masked patch prediction per target and mask rate, none) against pre-training compute, over seeds.

Rows without an `objective` field are supervised (the field is left out of their config, so older rows read the
same). The figure draws one line per objective (mean over seeds, bar min..max) against the upstream's exaFLOPs,
one panel per downstream kind (and shots); no pre-training (0 FLOPs) is a horizontal band at the left edge. A
row that does not say its compute (an older row, another tool's) keeps it blank in the table and is not drawn (the
legend says how many).
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from vitbench.report import tables
from vitbench.report.plots import plain
from vitbench.tasks.upstream import Objective

KINDS = tables.DOWNSTREAM
# the upstream's objectives, as its field declares them (a row without the field ran the default, supervised)
SUPERVISED, MASKED_PATCH, NONE = Objective.SUPERVISED.value, Objective.MASKED_PATCH.value, Objective.NONE.value
ARM_OF = ("objective", "mask_target", "mask_rate")  # the settings an `arm` label says (_with_objective)


def _with_objective(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the downstream kinds with an `arm` label (objective, and target @ rate for masked patch)."""
    if df.empty or "kind" not in df.columns or "accuracy" not in df.columns:
        return df.iloc[0:0]
    df = df[df["kind"].isin(KINDS)].copy()
    obj = df["objective"] if "objective" in df.columns else pd.Series(SUPERVISED, index=df.index)
    df["objective"] = obj.fillna(SUPERVISED).astype(str)
    target = df.get("mask_target", pd.Series("", index=df.index)).fillna("").astype(str)
    rate = pd.to_numeric(df.get("mask_rate", pd.Series(float("nan"), index=df.index)), errors="coerce")
    mp = df["objective"] == MASKED_PATCH
    df["arm"] = df["objective"].where(~mp, f"{MASKED_PATCH} " + target + " @" + rate.map(lambda r: f"{r:g}"))
    df["accuracy"] = pd.to_numeric(df["accuracy"], errors="coerce")
    x = df["pretrain_exaflops"] if "pretrain_exaflops" in df.columns else df.get(
        "exaflops", pd.Series(float("nan"), index=df.index))  # neither column: rows that never recorded it
    # unknown stays unknown: only no pre-training is 0 FLOPs (a supervised row that never recorded its compute
    # was drawn as the random init's band)
    df["pretrain_exaflops"] = pd.to_numeric(x, errors="coerce").mask(df["objective"].eq(NONE) & x.isna(), 0.0)
    return df


def objectives(ok: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per objective arm, downstream kind (and shots) and pre-training budget, across seeds (mean, std,
    min, max, n); empty unless some row was pre-trained by another objective than supervised."""
    df = _with_objective(ok)
    if df.empty or (df["objective"] == SUPERVISED).all():
        return pd.DataFrame()
    base = [c for c in ("kind", "shots", "model", "arm", "pretrain_steps") if c in df.columns]
    # and every other setting that varies (the dataset, the resolution, ...): two benchmarks were averaged as two
    # seeds of one, with a spread between them (found by a review); seeds pool
    extra = [k for k in tables.split_keys(df, base)[len(base):] if k not in ARM_OF]
    keys = [*base, *extra]
    g = df.assign(**{k: tables.hashable(df[k]) for k in keys}).groupby(keys, dropna=False, sort=True)
    out = pd.DataFrame({"exaflops": g["pretrain_exaflops"].mean(), "seeds": g["accuracy"].count(),
                        "accuracy_mean": g["accuracy"].mean(), "accuracy_std": g["accuracy"].std(ddof=1),
                        "accuracy_min": g["accuracy"].min(), "accuracy_max": g["accuracy"].max()}).reset_index()
    out = out.sort_values([c for c in ("kind", "shots", *extra, "model", "arm", "exaflops") if c in out.columns],
                          kind="stable").reset_index(drop=True)
    out.attrs[tables.SPLIT_BY] = extra
    return out


def accuracy_vs_compute(df: pd.DataFrame) -> Figure | None:
    """Transfer accuracy (%) against pre-training exaFLOPs per objective arm (cf. the paper's Sec. 4.6)."""
    table = objectives(df)
    if table.empty:
        return None
    panel_keys = [k for k in ("kind", "shots", *table.attrs.get(tables.SPLIT_BY, ())) if k in table.columns]
    panels = list(table.groupby(panel_keys, dropna=False, sort=True))[:4]
    fig = Figure(figsize=(5.4 * len(panels) + 3.4, 4.6), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    arms = sorted(table["arm"].unique(), key=lambda a: (a != SUPERVISED, a != NONE, a))
    colors = {a: f"C{i}" for i, a in enumerate(arms)}
    for ax, (key, sub) in zip(axes, panels):
        key = key if isinstance(key, tuple) else (key,)
        trained = sub[sub["exaflops"] > 0]
        xmin = trained["exaflops"].min() if not trained.empty else 1e-12
        xmax = trained["exaflops"].max() if not trained.empty else 1e-12
        for arm in arms:
            g = sub[sub["arm"] == arm].sort_values("exaflops")
            unknown = int(g["exaflops"].isna().sum())
            g = g.dropna(subset=["exaflops"])
            if unknown:  # said in the legend, not dropped in silence
                ax.plot([], [], color=colors[arm], ls="none", marker="x",
                        label=f"{plain(arm)}: {unknown} point(s) without their compute, not drawn")
            if g.empty:
                continue
            mean, lo, hi = 100 * g["accuracy_mean"], 100 * g["accuracy_min"], 100 * g["accuracy_max"]
            if (g["exaflops"] <= 0).all():  # no pre-training: a band over the whole x-range
                ax.axhspan(lo.iloc[0], hi.iloc[0], color=colors[arm], alpha=0.15)
                ax.axhline(mean.iloc[0], color=colors[arm], ls="--",
                           label=f"{plain(arm)} (0 FLOPs, n={g['seeds'].iloc[0]})")
                continue
            ax.errorbar(g["exaflops"], mean, yerr=[mean - lo, hi - mean], color=colors[arm], marker="o",
                        capsize=2, label=f"{plain(arm)} (n={int(g['seeds'].min())})")
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # decade labels only: minor ones overlap on a short range
        ax.set_xlim(xmin / 1.5, xmax * 1.5)
        ax.set_xlabel("Pre-training compute [exaFLOPs] (training FLOPs per image x images seen)")
        ax.set_ylabel("Transfer accuracy [%] (mean over seeds, bar: min..max)")
        ax.set_title(plain(" / ".join(str(v) if n == "kind" else f"{n}={v}" for n, v in zip(panel_keys, key)
                                      if not pd.isna(v))))  # fine-tuning rows have no shots
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8)
    return fig
