"""Report figures (matplotlib, no pyplot state: each function returns a Figure or None when there is no data).

- throughput vs input size per model and backend (the paper's Figure 12, left; best batch per point)
- largest batch vs input size (Figure 12, right)
- forward GFLOPs per image vs measured throughput (theoretical cost does not predict speed well)
- transfer accuracy vs pre-training compute with the Pareto front (Figure 5), when accuracy rows exist;
  upstreams pre-trained with a teacher (DeiT distillation) drawn apart and marked
- transfer accuracy vs inference throughput of distilled and plain models (DeiT Figure 1), when some upstream
  had a teacher and bench rows measured the models' speed

Each function gets the ok rows of the record kinds its report section declares (vitbench.tasks.ReportPart).
Style: colour by model within a family palette (ViT blues, BiT oranges, hybrids greens), marker by family,
line style by backend (in registration order: solid, dashed, dotted, ...); log axes where the paper uses them;
every axis has its unit.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator, ScalarFormatter

from vitbench import numfmt
from vitbench.models.specs import all_specs
from vitbench.report import tables
from vitbench.stats import frontier_mask

FAMILY_STYLE = {"other": ("D", "Greys", "other")}
_LINES = ("-", "--", ":", "-.")


def _plugin_family_styles() -> dict[str, tuple[str, str, str]]:
    """Model families' own styles (vitbench.models.families: FamilyPlugin.plot_style)."""
    from vitbench.registry import Kind, entries

    return {name: (*e.obj.plot_style[:2], e.obj.plot_style[2] or name)
            for name, e in entries(Kind.FAMILY).items()}


FAMILY_STYLE.update(_plugin_family_styles())


def backend_index(backend: str) -> int:
    """Position of a backend among the registered ones (unknown ones after them): its line style and edge."""
    from vitbench.backends.base import backend_names

    names = backend_names()
    return names.index(backend) if backend in names else len(names)


def backend_line(backend: str) -> str:
    return _LINES[backend_index(backend) % len(_LINES)]
_ORDER = {s.name: i for i, s in enumerate(all_specs())}


def model_colors(models) -> dict[str, tuple]:
    """One colour per model: evenly spaced shades of its family's colormap, small to large."""
    out: dict[str, tuple] = {}
    by_fam: dict[str, list[str]] = {}
    for m in sorted(set(models), key=lambda m: (_ORDER.get(m, 10_000), m)):
        by_fam.setdefault(tables.family_of(m), []).append(m)
    for fam, ms in by_fam.items():
        cmap = colormaps[FAMILY_STYLE.get(fam, FAMILY_STYLE["other"])[1]]
        shades = np.linspace(0.45, 0.95, len(ms)) if len(ms) > 1 else [0.75]
        out.update({m: cmap(float(s)) for m, s in zip(ms, shades)})
    return out


def _groups(df: pd.DataFrame, keys: list[str]):
    """groupby in the model table's order (families together, small to large), then backend."""
    keys = [k for k in keys if k in df.columns]
    groups = list(df.groupby(keys, dropna=False, sort=False))
    return sorted(groups, key=lambda kv: (_ORDER.get(kv[1].iloc[0]["model"], 10_000),
                                          *(str(kv[1].iloc[0][k]) for k in keys[1:])))


def _marker(model: str) -> str:
    return FAMILY_STYLE.get(tables.family_of(model), FAMILY_STYLE["other"])[0]


def _series_label(row: pd.Series, multi_backend: bool) -> str:
    parts = [str(row["model"])]
    if multi_backend:
        parts.append(f"({row['backend']})")
    if row.get("precision") not in (None, "fp32") and isinstance(row.get("precision"), str):
        parts.append(row["precision"])
    if row.get("compile") is True:
        parts.append("compiled")
    return " ".join(parts)


def _size_axis(ax, values) -> None:
    """Input size axis: log2 when sizes span more than 2x (as Figure 12), ticks at the measured sizes."""
    vals = sorted({int(v) for v in values if pd.notna(v)})
    if vals and vals[-1] / max(vals[0], 1) > 2:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(vals))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("Input size [px]")


def _log_axis(axis) -> None:
    """Log axis with readable plain-number labels at 1, 2, 5 x 10^k, or at 10^k only where the data already plotted
    span more than 1.5 decades (a narrow panel's labels would overlap); no minor labels."""
    lo, hi = axis.get_view_interval()
    wide = lo > 0 and hi / lo > 10**1.5
    axis.set_major_locator(LogLocator(base=10, subs=(1.0,) if wide else (1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    axis.set_minor_formatter(NullFormatter())


def _legend(fig: Figure, ax, n: int) -> None:
    if n == 0:
        return
    # handles long enough to show a dashed (second backend's) line on both sides of the marker
    if n <= 8:
        ax.legend(fontsize=8, frameon=False, handlelength=4)
    else:
        ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                  ncol=1 if n <= 24 else 2, handlelength=4)


def _shared_legend(fig: Figure, axes) -> None:
    """One legend for panels that show the same series (each label once), outside on the right."""
    seen: dict[str, object] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(label, h)
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside right upper", fontsize=7.5, frameon=False)


def _device(df: pd.DataFrame) -> str:
    if "device" in df and df["device"].notna().any():
        return ", ".join(sorted(str(d) for d in df["device"].dropna().unique()))
    return "?"


def _task_panels(pt: pd.DataFrame, width: float, height: float):
    """One panel per task (infer, train first): the figure and [(axes, task, that task's rows)]."""
    task_list = [t for t in ("infer", "train") if t in set(pt["task"])] or sorted(set(pt["task"]))
    fig = Figure(figsize=(width * len(task_list) + 1.6, height), layout="constrained")
    axes = fig.subplots(1, len(task_list), squeeze=False)[0]
    return fig, [(ax, task, pt[pt["task"] == task]) for ax, task in zip(axes, task_list)]


def throughput_vs_resolution(df: pd.DataFrame) -> Figure | None:
    """Peak throughput (best batch size) vs input size; one panel per task (infer, train)."""
    pt = tables.peak_throughput(df)
    if pt.empty:
        return None
    fig, panels = _task_panels(pt, 6.4, 4.6)
    colors = model_colors(pt["model"])
    multi = pt["backend"].nunique() > 1
    for ax, task, sub in panels:
        n = 0
        for _, g in _groups(sub, ["model", "backend", "precision", "compile", "device"]):
            g = g.sort_values("resolution")
            row = g.iloc[0]
            ax.plot(g["resolution"], g["img_per_s"], marker=_marker(row["model"]), color=colors[row["model"]],
                    linestyle=backend_line(row["backend"]), markersize=6, linewidth=1.6,
                    label=_series_label(row, multi))
            n += 1
        ax.set_yscale("log")
        _log_axis(ax.yaxis)
        _size_axis(ax, sub["resolution"])
        what = "inference" if task == "infer" else ("training" if task == "train" else task)
        ax.set_ylabel(f"Peak {what} speed [img/s]")
        ax.set_title(f"{what.capitalize()} throughput vs input size ({_device(sub)}; best batch per point)",
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        _legend(fig, ax, n)
    return fig


def max_batch_vs_resolution(df: pd.DataFrame) -> Figure | None:
    """Largest batch that fits vs input size (hollow markers: the search cap was reached, a lower bound)."""
    mb = tables.max_batch(df)
    if mb.empty:
        return None
    fig = Figure(figsize=(8.0, 4.6), layout="constrained")
    ax = fig.subplots()
    colors = model_colors(mb["model"])
    multi = mb["backend"].nunique() > 1
    n = 0
    for _, g in _groups(mb, ["model", "backend", "mode", "precision", "compile", "device"]):
        g = g.sort_values("resolution")
        row = g.iloc[0]
        label = _series_label(row, multi) + (f" [{row['mode']}]" if "mode" in row and row["mode"] != "infer"
                                             else "")
        line, = ax.plot(g["resolution"], g["max_batch_size"], marker=_marker(row["model"]),
                        color=colors[row["model"]], linestyle=backend_line(row["backend"]),
                        markersize=6, linewidth=1.6, label=label)
        if "capped" in g and g["capped"].fillna(False).astype(bool).any():
            capped = g[g["capped"].fillna(False).astype(bool)]
            ax.plot(capped["resolution"], capped["max_batch_size"], marker=_marker(row["model"]),
                    linestyle="none", markersize=10, markerfacecolor="white", color=line.get_color())
        n += 1
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(ScalarFormatter())
    _size_axis(ax, mb["resolution"])
    ax.set_ylabel("Largest batch size [images]")
    limit = mb["memory_limit_mib"].dropna() if "memory_limit_mib" in mb else pd.Series(dtype=float)
    budget = f"; budget {limit.iloc[0] / 1024:.1f} GiB" if len(limit) and limit.nunique() == 1 else ""
    ax.set_title(f"Largest batch that fits vs input size ({_device(mb)}{budget}; hollow = capped)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    _legend(fig, ax, n)
    return fig


def _throughput_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["img_per_s"].notna()] if "img_per_s" in df else df.iloc[0:0]


def _gflops_per_image(df: pd.DataFrame, pt: pd.DataFrame) -> pd.Series:
    """Forward GFLOPs per image for each throughput row: from FLOP-count rows, else the throughput rows' own
    analytic count."""
    out = pd.Series(np.nan, index=pt.index)
    fl = tables.flops(df[df["img_per_s"].isna()] if "img_per_s" in df else df)
    if not fl.empty and "gflops" in fl:
        lut = {(r.model, int(r.resolution)): r.gflops for r in fl.itertuples() if r.resolution == r.resolution}
        out = pd.Series([lut.get((m, int(r)), np.nan) for m, r in zip(pt["model"], pt["resolution"])],
                        index=pt.index)
    if "gflops_per_img_fwd" in df.columns:
        ok = _throughput_rows(df)
        lut2 = {(m, int(r)): g for m, r, g in zip(ok["model"], ok["resolution"], ok["gflops_per_img_fwd"])
                if g == g and g is not None}
        fill = pd.Series([lut2.get((m, int(r)), np.nan) for m, r in zip(pt["model"], pt["resolution"])],
                         index=pt.index)
        out = out.fillna(fill)
    return out


def gflops_vs_throughput(df: pd.DataFrame) -> Figure | None:
    """Forward GFLOPs per image (x) vs measured peak throughput (y), log-log; one panel per task."""
    pt = tables.peak_throughput(_throughput_rows(df))
    if pt.empty:
        return None
    pt = pt.assign(gflops=_gflops_per_image(df, pt)).dropna(subset=["gflops"])
    if pt.empty:
        return None
    fig, panels = _task_panels(pt, 6.0, 4.8)
    colors = model_colors(pt["model"])
    multi = pt["backend"].nunique() > 1
    for ax, task, sub in panels:
        n = 0
        label_points = len(sub) <= 30 and sub["resolution"].nunique() > 1
        for _, g in _groups(sub, ["model", "backend"]):
            row = g.iloc[0]
            ax.scatter(g["gflops"], g["img_per_s"], marker=_marker(row["model"]), color=colors[row["model"]],
                       s=40, edgecolors="black" if backend_index(row["backend"]) else "none", linewidths=0.8,
                       label=_series_label(row, multi), zorder=3)
            if label_points:
                for x, y, r in zip(g["gflops"], g["img_per_s"], g["resolution"]):
                    ax.annotate(f"{int(r)}", (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6,
                                color="0.3")
            n += 1
        # Reference: constant achieved FLOP/s through the median point (speed ~ 1/FLOPs if FLOPs predicted it).
        achieved = (sub["gflops"] * sub["img_per_s"]).median()
        if achieved and math.isfinite(achieved):
            xs = np.geomspace(sub["gflops"].min() / 1.5, sub["gflops"].max() * 1.5, 50)
            ax.plot(xs, achieved / xs, color="0.6", linestyle=":", linewidth=1,
                    label=f"constant {achieved:.3g} GFLOP/s", zorder=1)
            n += 1
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_axis(ax.xaxis)
        _log_axis(ax.yaxis)
        ax.set_xlabel("Forward cost [GFLOPs per image] (1 MAC = 2 FLOPs)")
        what = "inference" if task == "infer" else ("training" if task == "train" else task)
        ax.set_ylabel(f"Measured peak {what} speed [img/s]")
        ax.set_title(f"Theoretical cost vs measured {what} speed ({_device(sub)}"
                     + ("; labels: input px)" if label_points else ")"), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        _legend(fig, ax, n)
    return fig


def _fmt_key(v) -> str:
    return numfmt.fmt(v)


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
        return str(row["model"])
    return f"{row['model']} \u2697 {teacher} ({row.get('distillation', '?')})"


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
    panels = list(acc.groupby(panel_keys, dropna=False, sort=True))[:6]
    raw = df.assign(accuracy=pd.to_numeric(df["accuracy"], errors="coerce"),
                    **{xcol: pd.to_numeric(df[xcol], errors="coerce")}).dropna(subset=[xcol, "accuracy"])
    raw_panels = {_panel_id(k): r for k, r in raw.groupby(panel_keys, dropna=False)}
    fig = Figure(figsize=(5.2 * len(panels) + 3.2, 4.6), layout="constrained")  # legend on the right
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
        ax.set_title(" / ".join(f"{k}={_fmt_key(v)}" for k, v in zip(panel_keys, pkey) if pd.notna(v)),
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    _shared_legend(fig, axes)
    return fig


def _infer_speed(df: pd.DataFrame, speed_task: str = "infer") -> pd.DataFrame:
    """Peak img/s of `speed_task`'s rows (median over repeats, then the best batch) per model, resolution,
    backend, precision and device: the speed every figure of accuracy against speed shows."""
    if "task" not in df.columns or "img_per_s" not in df.columns:
        return pd.DataFrame()
    bench = df[(df["task"] == speed_task) & df["img_per_s"].notna()]
    return tables.peak_throughput(bench) if not bench.empty else pd.DataFrame()


def distilled_accuracy_vs_throughput(df: pd.DataFrame) -> Figure | None:
    """Transfer accuracy (mean over seeds, bar: min..max) vs peak inference throughput (img/s, log), one panel
    per benchmark: plain and distilled upstreams of each model at the model's measured speed (DeiT Figure 1:
    distillation buys accuracy at no inference cost). Distilled arms of one model share its speed and are drawn
    side by side, a few percent apart. None unless some upstream had a teacher and its model's speed was
    measured at the transfer resolution (task `infer`)."""
    rows = df[df["kind"].isin(("fewshot", "finetune"))] if "kind" in df.columns else df.iloc[0:0]
    speed = _infer_speed(df)
    if rows.empty or speed.empty or "accuracy" not in rows.columns or not tables.distilled(rows).any():
        return None
    rows = rows.assign(accuracy=pd.to_numeric(rows["accuracy"], errors="coerce")).dropna(subset=["accuracy"])
    join = [k for k in ("model", "resolution", "backend", "device") if k in rows.columns and k in speed.columns]
    best = speed.groupby(join, dropna=False)["img_per_s"].max().rename("infer_img_per_s").reset_index()
    rows = rows.merge(best, on=join, how="inner")
    if rows.empty or not tables.distilled(rows).any():
        return None
    panel_keys = [k for k in ("kind", "dataset", "shots") if k in rows.columns]
    panels = list(rows.groupby(panel_keys, dropna=False, sort=True))[:6]
    fig = Figure(figsize=(5.6 * len(panels) + 3.2, 4.8), layout="constrained")  # legend on the right
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colors = model_colors(rows["model"])
    series = _upstream_keys(rows)
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
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
        ax.set_xlabel(f"Peak inference throughput [img/s] ({_device(sub)}; best batch)\n"
                      f"(upstreams of one model drawn {DODGE:g}x apart)", fontsize=9)
        ax.set_ylabel("Accuracy [%] (mean over seeds; bar: min..max)")
        ax.set_title(" / ".join(f"{k}={_fmt_key(v)}" for k, v in zip(panel_keys, pkey) if pd.notna(v))
                     + ": distilled (\u2697) and plain", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    _shared_legend(fig, axes)
    return fig
