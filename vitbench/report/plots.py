"""Report figures (matplotlib, no pyplot state: each function returns a Figure or None when there is no data).

- throughput vs input size per model and backend (the paper's Figure 12, left; best batch per point)
- largest batch vs input size (Figure 12, right)
- forward GFLOPs per image vs measured throughput (theoretical cost does not predict speed well)
(the accuracy figures: vitbench.report.accuracy_plots, on this module's styles)

Each function gets the ok rows of the record kinds its report section declares (vitbench.tasks.ReportPart).
A speed whose value rests on unstable or co-scheduled rows only (vitbench.report.caveats) is ringed red
(`mark_caveats`), with a legend entry saying so.
Style: colour by model within a family palette (ViT blues, BiT oranges, hybrids greens), marker by family,
line style by backend (in registration order: solid, dashed, dotted, ...); log axes where the paper uses them;
every axis has its unit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter, NullLocator, ScalarFormatter

from vitbench.models.analytic import TRAIN_FLOPS_PER_FORWARD
from vitbench.models.specs import all_specs
from vitbench.report import caveats, tables
from vitbench.report.caveats import CAVEAT, caveat_legend_entry, mark_caveats
from vitbench.report.parts import NotDrawn
from vitbench.tasks.bench import Infer, Train

FAMILY_STYLE = {"other": ("D", "Greys", "other")}
_LINES = ("-", "--", ":", "-.")


def _plugin_family_styles() -> dict[str, tuple[str, str, str]]:
    """Model families' own styles (vitbench.models.families: FamilyPlugin.plot_style, a PlotStyle)."""
    from vitbench.registry import Kind, entries

    return {name: (s.marker, s.colormap, s.legend or name)
            for name, e in entries(Kind.FAMILY).items() for s in (e.obj.plot_style,)}


FAMILY_STYLE.update(_plugin_family_styles())


MAX_PANELS = 6  # panels in one figure, a row: six are some 34 inches wide already


def first_panels(panels: list, fig_of) -> tuple[list, Callable[[Figure], None]]:
    """The first MAX_PANELS of `panels`, and what to do to the figure once made: say how many were left out (the
    tables hold them all), never drop them silently. `fig_of` names what a panel is (benchmarks, groups)."""
    def note(fig: Figure) -> None:
        if len(panels) > MAX_PANELS:
            fig.suptitle(f"the first {MAX_PANELS} of {len(panels)} {fig_of} shown; the tables hold them all",
                         fontsize=8)
    return panels[:MAX_PANELS], note


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


def plain(text) -> str:
    """`text` from the rows (a model's name, a device, a group's value) as matplotlib draws it, never as mathtext:
    each `$` escaped (`\\$`; a model named `ViT$\\frac{$x` left its figure not drawn, a ValueError of the
    mathtext parser). Once per string: the report's figures call it where they put user text in a label, legend
    entry, title or annotation."""
    return str(text).replace("$", r"\$")


# Keys _series_label always reads its own way (the model, "(backend)", a precision, "compiled"), or that a
# panel or the model already says (task, family): never repeated as key=value.
_LABELLED = ("model", "family", "backend", "task", "precision", "compile")
# A figure against input size: its series run over the sizes, each size's best batch (peak_throughput).
_SIZE_AXES = ("resolution", "batch_size", "task")


def series_keys(summary: pd.DataFrame, keys: list[str], drop: tuple[str, ...] = _SIZE_AXES) -> list[str]:
    """What tells a figure's series apart: every key its summary was grouped by (tables.summary_keys: `keys` and
    the settings that split it), less the figure's axes and panels (`drop`). Grouping on a fixed list instead
    joined rows the table keeps apart (devices 1 and 2 drawn as one zig-zag line [32,32,64,64] px)."""
    return [k for k in tables.summary_keys(summary, keys) if k not in drop]


def varying_series_keys(summary: pd.DataFrame, keys: list[str], drop: tuple[str, ...] = _SIZE_AXES) -> list[str]:
    """Those of `series_keys` that take two values or more in `summary` (tables.varying): the settings a figure's
    labels name, or that tell apart two rows a figure reads as one (a CPU's and a GPU's peak)."""
    return tables.varying(summary, series_keys(summary, keys, drop))


def _series_label(row: pd.Series, multi_backend: bool, extra: list[str] | tuple[str, ...] = ()) -> str:
    """The model, its backend where several are drawn, its precision (not fp32), 'compiled', then key=value of
    each of `extra` (the settings that vary between a figure's series, tables.varying) the label does not say
    yet."""
    parts = [str(row["model"])]
    if multi_backend:
        parts.append(f"({row['backend']})")
    if row.get("precision") not in (None, "fp32") and isinstance(row.get("precision"), str):
        parts.append(row["precision"])
    if row.get("compile") is True:
        parts.append("compiled")
    parts.append(tables.settings_text((k, row[k]) for k in extra if k not in _LABELLED and k in row))
    return plain(" ".join(p for p in parts if p))


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


def _marked(g: pd.DataFrame) -> pd.Series:
    """Which of a summary's rows carry a marked value (all False where the summary has no caveat column)."""
    return caveats.marked(g[CAVEAT]) if CAVEAT in g else pd.Series(False, index=g.index)


def _device(df: pd.DataFrame) -> str:
    if "device" in df and df["device"].notna().any():
        return plain(", ".join(sorted(str(d) for d in df["device"].dropna().unique())))
    return "?"


def _what(task: str) -> str:
    """How a panel's labels name a bench task's speed: 'inference', 'training', else the task's name."""
    return {Infer.name: "inference", Train.name: "training"}.get(task, task)


def _task_panels(pt: pd.DataFrame, width: float, height: float):
    """One panel per task (infer, train first): the figure and [(axes, task, that task's rows)]."""
    task_list = [t for t in (Infer.name, Train.name) if t in set(pt["task"])] or sorted(set(pt["task"]))
    fig = Figure(figsize=(width * len(task_list) + 1.6, height), layout="constrained")
    axes = fig.subplots(1, len(task_list), squeeze=False)[0]
    return fig, [(ax, task, pt[pt["task"] == task]) for ax, task in zip(axes, task_list)]


def _one_size(values, table: str) -> NotDrawn | None:
    """NotDrawn when a figure against input size would have one size only (the table holds its values)."""
    sizes = sorted({int(v) for v in values if pd.notna(v)})
    if len(sizes) == 1:
        return NotDrawn(f"one input size measured ({sizes[0]} px): nothing to draw against input size; the "
                        f"values are in the table '{table}'")
    return None


def throughput_vs_resolution(df: pd.DataFrame) -> Figure | NotDrawn | None:
    """Peak throughput (best batch size) vs input size; one panel per task (infer, train)."""
    pt = tables.peak_throughput(df)
    if pt.empty:
        return None
    if (note := _one_size(pt["resolution"], "throughput")) is not None:
        return note
    keys = series_keys(pt, tables.THROUGHPUT_KEYS)  # the table's own split (not a fixed list: devices 1 and 2)
    fig, panels = _task_panels(pt, 6.4, 4.6)
    colors = model_colors(pt["model"])
    multi = pt["backend"].nunique() > 1
    extra = tables.varying(pt, keys)
    for ax, task, sub in panels:
        n = 0
        for _, g in _groups(sub, keys):
            g = g.sort_values("resolution")
            row = g.iloc[0]
            ax.plot(g["resolution"], g["img_per_s"], marker=_marker(row["model"]), color=colors[row["model"]],
                    linestyle=backend_line(row["backend"]), markersize=6, linewidth=1.6,
                    label=_series_label(row, multi, extra))
            n += 1
        m = _marked(sub)
        if mark_caveats(ax, sub["resolution"][m], sub["img_per_s"][m]):
            caveat_legend_entry(ax)
            n += 1
        ax.set_yscale("log")
        _log_axis(ax.yaxis)
        _size_axis(ax, sub["resolution"])
        what = _what(task)
        ax.set_ylabel(f"Peak {what} speed [img/s] (median over repeats)")
        ax.set_title(f"{what.capitalize()} throughput vs input size ({_device(sub)}; best batch per point)",
                     fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        _legend(fig, ax, n)
    return fig


def max_batch_vs_resolution(df: pd.DataFrame) -> Figure | NotDrawn | None:
    """Largest batch that fits vs input size (hollow markers: the search cap was reached, a lower bound)."""
    mb = tables.max_batch(df)
    if mb.empty:
        return None
    if (note := _one_size(mb["resolution"], "max_batch")) is not None:
        return note
    fig = Figure(figsize=(8.0, 4.6), layout="constrained")
    ax = fig.subplots()
    colors = model_colors(mb["model"])
    multi = mb["backend"].nunique() > 1
    n, any_capped = 0, 0.0  # the largest capped value (0: none capped)
    keys = series_keys(mb, tables.MAX_BATCH_KEYS, drop=("resolution",))  # the table's split (devices 1 and 2 too)
    extra = [k for k in tables.varying(mb, keys) if k != "mode"]  # the mode is said in brackets
    for _, g in _groups(mb, keys):
        g = g.sort_values("resolution")
        row = g.iloc[0]
        label = _series_label(row, multi, extra) + (f" [{plain(row['mode'])}]" if "mode" in row
                                                    and row["mode"] != "infer" else "")
        line, = ax.plot(g["resolution"], g["max_batch_size"], marker=_marker(row["model"]),
                        color=colors[row["model"]], linestyle=backend_line(row["backend"]),
                        markersize=6, linewidth=1.6, label=label)
        capped = g[_capped(g)]
        if not capped.empty:  # a lower bound: the search stopped at its cap, the batch that fails is not known
            ax.plot(capped["resolution"], capped["max_batch_size"], marker=_marker(row["model"]),
                    linestyle="none", markersize=10, markerfacecolor="white", color=line.get_color())
            for x, y in zip(capped["resolution"], capped["max_batch_size"]):  # an arrow up: "or more"
                ax.annotate("", xy=(x, y * 1.5), xytext=(x, y * 1.08), arrowprops={
                    "arrowstyle": "->", "color": line.get_color(), "linewidth": 1.2})
                ax.annotate(f"\u2265{int(y)}", (x, y), textcoords="offset points", xytext=(7, -3), fontsize=7,
                            color=line.get_color())
            any_capped = max(any_capped, float(capped["max_batch_size"].max()))
        n += 1
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(ScalarFormatter())
    if any_capped:  # room for the arrows above the capped points
        ax.set_ylim(top=max(ax.get_ylim()[1], any_capped * 1.8))
    _size_axis(ax, mb["resolution"])
    ax.set_ylabel("Largest batch size [images]" + (" (median over repeats)" if mb["repeats"].max() > 1 else ""))
    limit = mb["memory_limit_mib"].dropna() if "memory_limit_mib" in mb else pd.Series(dtype=float)
    budget = f"; budget {limit.iloc[0] / 1024:.1f} GiB" if len(limit) and limit.nunique() == 1 else ""
    if any_capped:
        ax.plot([], [], marker="o", linestyle="none", markersize=8, markerfacecolor="white", color="0.3",
                label="\u2265 N (hollow, arrow up): the search stopped at its cap N; N or more fit")
        n += 1
    ax.set_title(f"Largest batch that fits vs input size ({_device(mb)}{budget})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    _legend(fig, ax, n)
    return fig


def _capped(mb: pd.DataFrame) -> pd.Series:
    """Which max-batch summary rows reached the search's cap (a lower bound, not the largest batch)."""
    bound = tables.MAX_BATCH_BOUND
    return mb[bound].map(caveats.true).astype(bool) if bound in mb else pd.Series(False, index=mb.index)


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


def gflops_vs_throughput(df: pd.DataFrame) -> Figure | NotDrawn | None:
    """Forward GFLOPs per image (x) vs measured peak throughput (y), log-log; one panel per task."""
    pt = tables.peak_throughput(_throughput_rows(df))
    if pt.empty:
        return None
    pt = pt.assign(gflops=_gflops_per_image(df, pt)).dropna(subset=["gflops"])
    if pt.empty:
        return None
    if pt["gflops"].nunique() < 2:
        return NotDrawn("one forward cost measured (one model at one input size): nothing to compare speed "
                        "against; the values are in the table 'throughput'")
    # a series per configuration of the table's (grouped on model and backend only, fp32 and bf16 points were
    # one series labelled from its first row, bf16)
    keys = series_keys(pt, tables.THROUGHPUT_KEYS)
    fig, panels = _task_panels(pt, 6.0, 4.8)
    colors = model_colors(pt["model"])
    multi = pt["backend"].nunique() > 1
    extra = tables.varying(pt, keys)
    for ax, task, sub in panels:
        n = 0
        label_points = len(sub) <= 30 and sub["resolution"].nunique() > 1
        for _, g in _groups(sub, keys):
            row = g.iloc[0]
            ax.scatter(g["gflops"], g["img_per_s"], marker=_marker(row["model"]), color=colors[row["model"]],
                       s=40, edgecolors="black" if backend_index(row["backend"]) else "none", linewidths=0.8,
                       label=_series_label(row, multi, extra), zorder=3)
            if label_points:
                for x, y, r in zip(g["gflops"], g["img_per_s"], g["resolution"]):
                    ax.annotate(f"{int(r)}", (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6,
                                color="0.3")
            n += 1
        m = _marked(sub)
        if mark_caveats(ax, sub["gflops"][m], sub["img_per_s"][m], size=120):
            caveat_legend_entry(ax)
            n += 1
        apart = [k for k in tables.varying(sub, keys) if k not in ("model", "family")]
        n += _reference_lines(ax, sub, m, apart, TRAIN_FLOPS_PER_FORWARD if task == Train.name else 1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_axis(ax.xaxis)
        _log_axis(ax.yaxis)
        ax.set_xlabel("Forward cost [GFLOPs per image] (1 MAC = 2 FLOPs)")
        what = _what(task)
        ax.set_ylabel(f"Measured peak {what} speed [img/s]\n(median over repeats, best batch)")
        ax.set_title(f"Theoretical cost vs measured {what} speed ({_device(sub)}"
                     + ("; labels: input px)" if label_points else ")"), fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        _legend(fig, ax, n)
    return fig


_REF_GREYS = ("0.6", "0.35", "0.75", "0.2", "0.5")


def _reference_lines(ax, sub: pd.DataFrame, marked: pd.Series, apart: list[str], per_forward: float = 1) -> int:
    """Reference: constant achieved FLOP/s through the median point (speed ~ 1/FLOPs if FLOPs predicted it), one
    line per value of the settings that vary between the panel's series other than the model (`apart`): one
    median over fp32 and bf16 points drew a line through neither. Labelled with those settings where there are
    any ('constant N GFLOP/s' alone otherwise). The x axis is the forward cost; `per_forward`: the step's FLOPs
    per forward FLOP (TRAIN_FLOPS_PER_FORWARD in a training panel), so the label is the step's FLOP/s, as
    model_tflops_per_s is (a training panel read 1/3 of it). How many lines it drew (legend entries)."""
    groups = list(sub.groupby([tables.hashable(sub[k]) for k in apart], dropna=False, sort=True)) if apart \
        else [((), sub)]
    xs = np.geomspace(sub["gflops"].min() / 1.5, sub["gflops"].max() * 1.5, 50)
    n = 0
    for i, (_, g) in enumerate(groups):
        m = marked.loc[g.index]
        clean = g[~m] if (~m).any() else g  # the reference line is drawn through clean points where any
        achieved = (clean["gflops"] * clean["img_per_s"]).median()
        if not (achieved and math.isfinite(achieved)):
            continue
        row = g.iloc[0]
        which = tables.settings_text(((k, row[k]) for k in apart), ", ")
        step = f" ({per_forward:g}x forward: a training step)" if per_forward != 1 else ""
        label = f"constant {achieved * per_forward:.3g} GFLOP/s{step}" + (f" ({plain(which)})" if which else "")
        ax.plot(xs, achieved / xs, color=_REF_GREYS[i % len(_REF_GREYS)], linestyle=":", linewidth=1,
                label=label, zorder=1)
        n += 1
    return n


def _infer_speed(df: pd.DataFrame, speed_task: str = Infer.name) -> pd.DataFrame:
    """Peak img/s of `speed_task`'s rows (median over repeats, then the best batch) per model, resolution,
    backend, precision and device: the speed every figure of accuracy against speed shows."""
    if "task" not in df.columns or "img_per_s" not in df.columns:
        return pd.DataFrame()
    bench = df[(df["task"] == speed_task) & df["img_per_s"].notna()]
    return tables.peak_throughput(bench) if not bench.empty else pd.DataFrame()
