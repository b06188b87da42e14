"""The report's accuracy figures (matplotlib, no pyplot state; each returns a Figure or None without data):

- transfer accuracy vs pre-training compute with the Pareto front (Figure 5), when accuracy rows exist;
  upstreams pre-trained with a teacher (DeiT distillation) drawn apart and marked
- transfer accuracy vs inference throughput of distilled and plain models (DeiT Figure 1), when some upstream
  had a teacher and bench rows measured the models' speed (a speed resting on unstable or co-scheduled rows
  only is ringed red: vitbench.report.caveats)

Styles, axes and legends are vitbench.report.plots'.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from vitbench.report import tables
from vitbench.report.caveats import caveat_legend_entry, mark_caveats
from vitbench.report.plots import (
    _ORDER,
    FAMILY_STYLE,
    _device,
    _groups,
    _infer_speed,
    _log_axis,
    _marked,
    _marker,
    _shared_legend,
    first_panels,
    model_colors,
    plain,
)
from vitbench.stats import frontier_mask


def pareto_front(x, y) -> np.ndarray:
    """Indices of points no other point beats on both axes (less compute and higher accuracy), by x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    front = np.flatnonzero(frontier_mask(x, -y))
    return front[np.argsort(x[front], kind="stable")]


DISTILLED_MARKER = "*"  # DeiT marks its distilled models with an alembic; its stand-in among markers
DODGE = 1.06  # factor between side-by-side points of one model on a log speed axis (legibility only)


def _upstream_keys(df: pd.DataFrame) -> list[str]:
    """What makes an upstream: the model, and its teacher's fields where some row had one."""
    return ["model", *(k for k in tables.TEACHER_FIELDS if k in df.columns and df[k].notna().any())]


def upstream_label(row) -> str:
    """'DeiT-Micro/4-dist ⚗ R-Nano (hard)' for a distilled upstream, else the model's name."""
    teacher = row.get("teacher")
    if not isinstance(teacher, str):
        return plain(row["model"])
    return plain(f"{row['model']} \u2697 {teacher} ({row.get('distillation', '?')})")


def upstream_style(row, colors: dict) -> dict:
    """Scatter style of an upstream: the model's family marker and colour; distilled: a star in the teacher's
    family colours, filled for hard distillation, hollow for soft."""
    teacher = row.get("teacher")
    if not isinstance(teacher, str):
        return {"marker": _marker(row["model"]), "color": colors[row["model"]]}
    cmap = colormaps[FAMILY_STYLE.get(tables.family_of(teacher), FAMILY_STYLE["other"])[1]]
    edge = cmap(0.8)
    soft = row.get("distillation") == "soft"
    return {"marker": DISTILLED_MARKER, "color": "white" if soft else cmap(0.55), "edgecolors": edge,
            "linewidths": 1.2}


def _panel_id(key) -> tuple[str, ...]:
    """A groupby key as comparable text (NaN, e.g. fine-tuning's shots, included)."""
    return tuple(str(v) for v in (key if isinstance(key, tuple) else (key,)))


def accuracy_vs_compute(df: pd.DataFrame) -> Figure | None:
    """Transfer accuracy vs pre-training compute (exaFLOPs, log), Pareto front marked; panel per benchmark.
    One marker per upstream (median over seeds; each seed a faint dot of the same style when there are several).
    Upstreams pre-trained with a teacher are their own series (stars, labelled with the teacher); their
    compute includes the teacher's forward passes."""
    acc = tables.accuracy(df)
    xcol = next((c for c in ("pretrain_exaflops", "exaflops") if c in acc.columns and acc[c].notna().any()), None)
    if acc.empty or xcol is None:
        return None
    acc = acc.dropna(subset=[xcol, "accuracy"])
    if acc.empty:
        return None
    panel_keys = [k for k in ("kind", "dataset", "shots") if k in acc.columns]
    panels, note = first_panels(list(acc.groupby(panel_keys, dropna=False, sort=True)), "benchmarks")
    raw = df.assign(accuracy=pd.to_numeric(df["accuracy"], errors="coerce"),
                    **{xcol: pd.to_numeric(df[xcol], errors="coerce")}).dropna(subset=[xcol, "accuracy"])
    raw_panels = {_panel_id(k): r for k, r in raw.groupby(panel_keys, dropna=False)}
    fig = Figure(figsize=(5.2 * len(panels) + 3.2, 4.6), layout="constrained")  # legend on the right
    note(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colors = model_colors(acc["model"])
    series = _upstream_keys(acc)
    for ax, (pkey, sub) in zip(axes, panels):
        for _, g in _groups(raw_panels.get(_panel_id(pkey), raw.iloc[0:0]), series):
            if len(g) > 1:  # the seeds apart: the spread behind the median
                style = upstream_style(g.iloc[0], colors)
                ax.scatter(g[xcol], 100 * g["accuracy"], s=14, alpha=0.45, zorder=2,
                           **{**style, "linewidths": 0.6 if "edgecolors" in style else None})
        for _, g in _groups(sub, series):
            row = g.iloc[0]
            style = upstream_style(row, colors)
            ax.scatter(g[xcol], 100 * g["accuracy"], label=upstream_label(row), zorder=3,
                       s=90 if style["marker"] == DISTILLED_MARKER else 45, **style)
        idx = pareto_front(sub[xcol].to_numpy(), sub["accuracy"].to_numpy())
        if len(idx):
            fx, fy = sub[xcol].to_numpy()[idx], 100 * sub["accuracy"].to_numpy()[idx]
            ax.step(fx, fy, where="post", color="black", linewidth=1.2, alpha=0.7, zorder=2)
            ax.scatter(fx, fy, s=140, facecolors="none", edgecolors="black", linewidths=1.0, zorder=4,
                       label="Pareto front (not beaten on compute and accuracy)")
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
        ax.set_xlabel("Pre-training compute [exaFLOPs]" + (" (\u2697: incl. teacher forward)"
                                                            if tables.distilled(sub).any() else ""))
        ax.set_ylabel("Accuracy [%]" + (" (median over seeds; dots: seeds)" if sub.get("repeats", pd.Series(
            [1])).max() > 1 else ""))
        pkey = pkey if isinstance(pkey, tuple) else (pkey,)
        ax.set_title(plain(tables.settings_text(zip(panel_keys, pkey), " / ")),
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    _shared_legend(fig, axes)
    return fig


def distilled_accuracy_vs_throughput(df: pd.DataFrame) -> Figure | None:
    """Transfer accuracy (mean over seeds, bar: min..max) vs peak inference throughput (img/s, log), one panel
    per benchmark: plain and distilled upstreams of each model at the model's measured speed (DeiT Figure 1:
    distillation buys accuracy at no inference cost). Distilled arms of one model share its speed and are drawn
    side by side, a few percent apart. None unless some upstream had a teacher and its model's speed was
    measured at the transfer resolution (task `infer`)."""
    rows = df[df["kind"].isin(tables.DOWNSTREAM)] if "kind" in df.columns else df.iloc[0:0]
    speed = _infer_speed(df)
    if rows.empty or speed.empty or "accuracy" not in rows.columns or not tables.distilled(rows).any():
        return None
    rows = rows.assign(accuracy=pd.to_numeric(rows["accuracy"], errors="coerce")).dropna(subset=["accuracy"])
    join = [k for k in ("model", "resolution", "backend", "device") if k in rows.columns and k in speed.columns]
    ranked = speed.assign(_marked=_marked(speed)).sort_values(["_marked", "img_per_s"], ascending=[True, False])
    best = ranked.groupby(join, dropna=False, sort=False).head(1)  # the fastest clean speed where there is one
    best = best[[*join, "img_per_s", "_marked"]].rename(columns={"img_per_s": "infer_img_per_s"})
    rows = rows.merge(best, on=join, how="inner")
    if rows.empty or not tables.distilled(rows).any():
        return None
    panel_keys = [k for k in ("kind", "dataset", "shots") if k in rows.columns]
    panels, note = first_panels(list(rows.groupby(panel_keys, dropna=False, sort=True)), "benchmarks")
    fig = Figure(figsize=(5.6 * len(panels) + 3.2, 4.8), layout="constrained")  # legend on the right
    note(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colors = model_colors(rows["model"])
    series = _upstream_keys(rows)
    rings = False
    for ax, (pkey, sub) in zip(axes, panels):
        pkey = pkey if isinstance(pkey, tuple) else (pkey,)
        groups = sorted(_groups(sub, series), key=lambda kv: (_ORDER.get(kv[1].iloc[0]["model"], 10_000),
                                                             tables.distilled(kv[1].iloc[:1]).iloc[0]))
        arms: dict[str, int] = {}  # upstreams per model: dodged around the model's speed
        for _, g in groups:
            row = g.iloc[0]
            i, k = arms.get(row["model"], 0), sum(1 for _, h in groups if h.iloc[0]["model"] == row["model"])
            arms[row["model"]] = i + 1
            x = float(row["infer_img_per_s"]) * DODGE ** (i - (k - 1) / 2)
            acc = 100 * g["accuracy"]
            style = upstream_style(row, colors)
            ax.errorbar([x], [acc.mean()], yerr=[[acc.mean() - acc.min()], [acc.max() - acc.mean()]],
                        fmt="none", ecolor="0.4", elinewidth=1, capsize=2, zorder=2)
            ax.scatter([x], [acc.mean()], s=110 if style["marker"] == DISTILLED_MARKER else 50, zorder=3,
                       label=f"{upstream_label(row)} (n={len(g)})", **style)
            if bool(row["_marked"]) and mark_caveats(ax, [x], [acc.mean()]):
                rings = True
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
        ax.set_xlabel(f"Peak inference throughput [img/s] ({_device(sub)}; median over repeats, best batch)\n"
                      f"(upstreams of one model drawn {DODGE:g}x apart)", fontsize=9)
        ax.set_ylabel("Accuracy [%] (mean over seeds; bar: min..max)")
        ax.set_title(plain(tables.settings_text(zip(panel_keys, pkey), " / "))
                     + ": distilled (\u2697) and plain", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    if rings:
        caveat_legend_entry(axes[0])
    _shared_legend(fig, axes)
    return fig
