"""Scaling-law figures (matplotlib, no pyplot state; each returns a Figure, or None when there is nothing to draw).

- fitted_curves: error vs compute per group with the fitted law and its bootstrap band (Figure 5 with fits),
  the runner-up law dash-dotted; the backtest drawn as the small-budget fit's extrapolation against the points
  it never saw; predictions (--predict) as a dashed extrapolation of the combined law (vitbench.fit.combine)
  inside their shaded prediction interval.
- compute_frontier: which model is best at each budget (the measured frontier), and which group's fitted
  law is lowest across the compute range (the family to buy at a budget).
- throughput_vs_accuracy: inference speed against transfer accuracy (DeiT, Touvron et al. 2021, Figure 1:
  what accuracy a speed buys).

`df` is a results DataFrame (vitbench.tidy.load) or any table; pass `fits` (a vitbench.fit.FitReport) to
draw fits already made, else they are made here from `df` with `spec`. Styles follow vitbench.report.plots.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from vitbench import numfmt
from vitbench.errors import ConfigError
from vitbench.fit import (
    BENCHMARK_COLUMNS,
    FitReport,
    FitSpec,
    FormName,
    GroupFit,
    Source,
    SourceKind,
    fit_source,
    frontier_mask,
    results_frame,
)
from vitbench.fit.groups import DEFAULT_COMPUTE, DEFAULT_GROUP
from vitbench.report import caveats, tables
from vitbench.report.caveats import caveat_legend_entry, mark_caveats
from vitbench.report.plots import (FAMILY_STYLE, _infer_speed, _legend, _log_axis, backend_line, first_panels,
                                   model_colors, plain, varying_series_keys)

_OTHER_COLORS = colormaps["tab10"]
# Axis titles for the compute columns results rows carry (any other column is shown by its name).
COMPUTE_LABELS = {"pretrain_exaflops": "Pre-training compute [exaFLOPs]",
                  "images_seen": "Images seen in pre-training", "params_m": "Parameters [M]",
                  "inference_gflops": "Inference cost [GFLOPs per image]"}


_FITS: dict[tuple, FitReport | None] = {}  # fits of one table, shared by the figures drawn from it


def _fingerprint(df: pd.DataFrame) -> int:
    plain = [c for c in df.columns if not df[c].map(lambda v: isinstance(v, (dict, list))).any()]
    return int(pd.util.hash_pandas_object(df[plain].astype(str), index=False).sum())


def _report(df: pd.DataFrame, fits: FitReport | None, spec: FitSpec | None) -> FitReport | None:
    if fits is not None:
        return fits
    key = (_fingerprint(df), (spec or FitSpec()).model_dump_json())
    if key not in _FITS:  # the bootstrap is the slow part: two figures of one report fit once
        frame = results_frame(df) if "status" in df.columns else df
        try:
            _FITS[key] = fit_source(Source(SourceKind.RESULTS if "status" in df.columns else SourceKind.CSV,
                                           Path("<DataFrame>"), frame), spec or FitSpec())
        except ConfigError:  # no fittable rows (no accuracy or compute column): no figure, the report goes on
            _FITS[key] = None
    return _FITS[key]


def _panels(report: FitReport) -> list[tuple[tuple, list[GroupFit]]]:
    """Groups by benchmark (the split columns that are not group columns), in the report's order."""
    bench = [c for c in report.split_by if c not in (report.spec.group or [DEFAULT_GROUP])]
    out: dict[tuple, list[GroupFit]] = {}
    for g in report.groups:
        out.setdefault(tuple(g.key.get(c) for c in bench), []).append(g)
    return list(out.items())


def _curve_label(g: GroupFit, report: FitReport) -> str:
    groups = report.spec.group or [DEFAULT_GROUP]
    parts = [str(g.key[c]) for c in groups if c in g.key and g.key[c] is not None]
    if parts == [] or groups == [DEFAULT_GROUP] and len(parts) == 1:
        fam = parts[0] if parts else "all"
        return plain(FAMILY_STYLE.get(fam, (None, None, fam))[2])
    return plain(" ".join(parts))


def _style(g: GroupFit, report: FitReport, i: int) -> tuple[str, tuple]:
    """Marker and colour of a group: the family style when grouping by family, else tab10."""
    fam = g.key.get(DEFAULT_GROUP)
    if (report.spec.group or [DEFAULT_GROUP]) == [DEFAULT_GROUP] and fam in FAMILY_STYLE:
        marker, cmap, _ = FAMILY_STYLE[fam]
        return marker, colormaps[cmap](0.75)
    return "o", _OTHER_COLORS(i % 10)


def _panel_title(report: FitReport, key: tuple) -> str:
    bench = [c for c in report.split_by if c not in (report.spec.group or [DEFAULT_GROUP])]
    return plain(tables.settings_text(zip(bench, key), " / ") or Path(report.source).name)


def _axes(n: int, height: float = 4.8, extra_rows: bool = False):
    fig = Figure(figsize=(5.6 * n + 1.8, height + (0.7 if extra_rows else 0)), layout="constrained")
    if extra_rows:
        axes = fig.subplots(2, n, squeeze=False, height_ratios=[height, 0.45], sharex="col")
        return fig, list(axes[0]), list(axes[1])
    return fig, list(fig.subplots(1, n, squeeze=False)[0]), None


def _chosen(g: GroupFit, form: FormName | None):
    """The fit to draw: `form`, or (None) the group's form chosen by the backtest (GroupFit.best)."""
    f = g.best() if form is None else g.fit(form)
    return f if f is not None and f.ok else None


def _loglog(ax, report: FitReport) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    _log_axis(ax.yaxis)
    ax.set_xlabel(COMPUTE_LABELS.get(report.spec.compute, plain(report.spec.compute)))
    ax.set_ylabel(f"Error ({plain(report.error_label)})")
    ax.grid(True, which="both", alpha=0.3)


def _backtest_view(g: GroupFit, f):
    """(mask of the points the chosen form's last backtest cut-off predicted, that fit's parameters) or None."""
    bt = g.backtest.get(f.form) if g.backtest is not None else None
    if bt is None or not bt.fits or not bt.points:
        return None
    cut = max(bt.fits)
    ahead = (g.compute > cut) & (g.compute <= cut * 10**g.backtest.reach * (1 + 1e-9))
    return ahead, bt.fits[cut]


def fitted_curves(df: pd.DataFrame, *, fits: FitReport | None = None, spec: FitSpec | None = None,
                  form: FormName | None = None) -> Figure | None:
    """Error vs compute (log-log), one panel per benchmark, one curve per group: the points, the fitted law
    with its bootstrap band (dashed where there is no CI); dotted, the backtest's fit at its largest cut-off
    extrapolated over the points it never saw (hollow markers); dashed beyond the data, the extrapolation to the
    --predict values (the forms combined by weight, vitbench.fit.combine) inside its shaded prediction interval
    (error bars at the values); dash-dotted, the runner-up
    law. `form`: which law; None: each group's chosen one (vitbench.fit.backtest.choose, named in the legend)."""
    report = _report(df, fits, spec)
    if report is None or not report.groups or all(_chosen(g, form) is None for g in report.groups):
        return None  # no law to draw (too few points: unfit_reason says so)
    panels, note = first_panels(_panels(report), "groups")
    fig, axes, _ = _axes(len(panels))
    note(fig)
    for ax, (key, groups) in zip(axes, panels):
        n = 0
        for i, g in enumerate(groups):
            marker, color = _style(g, report, i)
            f = _chosen(g, form)
            label = _curve_label(g, report)
            if f is not None:
                b = f.params["b"]
                label += f" ({f.form.name.value}): " + (
                    "b undetermined (at its bound)" if f.exponent_at_bound else f"b = {b.value:.2f} " + (
                        f"[{b.ci_low:.2f}, {b.ci_high:.2f}]" if b.ci_low is not None else "(no CI)"))
            view = _backtest_view(g, f) if f is not None else None
            held = view[0] if view is not None else np.zeros(len(g.compute), dtype=bool)
            ax.scatter(g.compute[~held], g.error[~held], marker=marker, color=color, s=36, zorder=3, label=label)
            if held.any():
                ax.scatter(g.compute[held], g.error[held], marker=marker, facecolors="white", edgecolors=color,
                           s=44, linewidths=1.3, zorder=3)
            n += 1
            if f is None:
                continue
            xs = np.geomspace(g.compute.min(), g.compute.max(), 120)
            band = f.band(xs)
            ax.plot(xs, f.predict(xs), color=color, linewidth=1.8, zorder=2, linestyle="-" if band else "--")
            if band is not None:
                ax.fill_between(xs, *band, color=color, alpha=0.18, linewidth=0, zorder=1)
            if view is not None:
                ax.plot(xs, f.form.predict(view[1], xs), color=color, linewidth=1.1, linestyle=":", zorder=2)
            chosen = g.chosen == f.form.name
            top = max([p.compute for p in g.predictions], default=g.compute.max()) if chosen else g.compute.max()
            second = g.fit(g.runner_up) if chosen and g.runner_up is not None else None
            if second is not None and second.ok:  # the runner-up over the same range, thin dash-dot
                xr = np.geomspace(g.compute.min(), max(top, g.compute.max()), 160)
                ax.plot(xr, second.predict(xr), color=color, linewidth=0.9, linestyle="-.", alpha=0.8, zorder=2)
            law = g.law() if chosen else None  # predictions combine the forms (vitbench.fit.combine)
            if law is not None and top > g.compute.max():
                xe = np.geomspace(g.compute.max(), top, 60)
                mid = law.log_predict(xe)
                ax.plot(xe, np.exp(mid), color=color, linewidth=1.6, linestyle="--", zorder=2)
                if g.law_error is not None:  # the prediction interval, widening with the reach (the predictions')
                    ax.fill_between(xe, *g.band(xe)[1:], color=color, alpha=0.10, linewidth=0, zorder=1)
            if g.predictions and chosen:
                px = np.array([p.compute for p in g.predictions])
                py = np.array([p.value for p in g.predictions])
                lo = np.array([p.ci_low if p.ci_low is not None else p.value for p in g.predictions])
                hi = np.array([p.ci_high if p.ci_high is not None else p.value for p in g.predictions])
                ax.errorbar(px, py, yerr=[py - lo, hi - py], fmt="D", color=color, markersize=5, capsize=3, zorder=3)
        _loglog(ax, report)
        law = f"{form.value} law" if form else "law chosen by the backtest per group"
        banded = any(f is not None and f.n_replicates >= 2 for f in (_chosen(g, form) for g in groups))
        ax.set_title(f"{_panel_title(report, key)}: {law}\n" + (f"{report.spec.ci:.0%} band" if banded else
                     "no band: too few points for an interval"), fontsize=10)
        ax.plot([], [], color="0.4", linestyle=":", label="backtest: fit without the hollow points")
        if form is None and any(g.runner_up is not None for g in groups):
            seconds = sorted({g.runner_up.value for g in groups if g.runner_up is not None})
            ax.plot([], [], color="0.4", linestyle="-.", linewidth=0.9, label=f"runner-up ({', '.join(seconds)})")
            n += 1
        if any(g.predictions for g in groups):
            held = [g.law_error.coverage_text() for g in groups if g.predictions and g.law_error is not None]
            held = [h for h in held if h]
            ax.plot([], [], color="0.4", linestyle="--", marker="D",
                    label="prediction (the forms combined by weight), shaded: its interval"
                    + (f" ({held[0]})" if len(held) == 1 else ""))
            n += 1
        _legend(fig, ax, n + 1)
    return fig


def unfit_reason(df: pd.DataFrame, spec: FitSpec | None = None) -> str | None:
    """Why `df`'s rows give no law to draw (every group too small for any form), or None (some group has a law,
    or there is nothing to fit at all)."""
    report = _report(df, None, spec)
    if report is None or not report.groups or any(_chosen(g, None) is not None for g in report.groups):
        return None
    most = max(len(g.compute) for g in report.groups)
    why = next((f.message for g in report.groups for f in g.fits if f.message), "")
    return f"{len(report.groups)} group(s) of at most {most} point(s): too few to fit a law" + (
        f" ({why})" if why else "")


def _winner_spans(groups: list[GroupFit], form: FormName | None, lo: float, hi: float):
    """[(x0, x1, group index)]: which group's fitted law is lowest over [lo, hi] (log-spaced grid), each law
    only inside its own group's measured compute range (no extrapolation); -1 where no law is defined."""
    xs = np.geomspace(lo, hi, 400)
    curves = []
    for i, g in enumerate(groups):
        f = _chosen(g, form)
        if f is not None:
            inside = (xs >= g.compute.min()) & (xs <= g.compute.max())
            curves.append(np.where(inside, f.predict(xs), np.inf))
    if not curves:
        return []
    stack = np.stack(curves)
    owners = [i for i, g in enumerate(groups) if _chosen(g, form) is not None]
    idx = np.where(np.isfinite(stack.min(axis=0)), np.array(owners)[np.argmin(stack, axis=0)], -1)
    spans, start = [], 0
    for j in range(1, len(xs) + 1):
        if j == len(xs) or idx[j] != idx[start]:
            if idx[start] >= 0:
                spans.append((xs[start], xs[min(j, len(xs) - 1)], int(idx[start])))
            start = j
    return spans


def compute_frontier(df: pd.DataFrame, *, fits: FitReport | None = None, spec: FitSpec | None = None,
                     form: FormName | None = None) -> Figure | None:
    """The measured compute frontier (step line through the rows no cheaper row beats, each named by its
    model), over every point; below each panel, the group whose fitted law (`form`, or None: each group's
    best-extrapolating one) is lowest at each budget, within the compute range that group measured."""
    report = _report(df, fits, spec)
    if report is None or not report.groups:
        return None
    panels, note = first_panels(_panels(report), "groups")
    fig, axes, strips = _axes(len(panels), extra_rows=True)
    note(fig)
    for ax, strip, (key, groups) in zip(axes, strips, panels):
        c = np.concatenate([g.compute for g in groups])
        e = np.concatenate([g.error for g in groups])
        labels = [lab for g in groups for lab in g.labels]
        colors = model_colors(labels) if report.source_kind == SourceKind.RESULTS else {}
        n = 0
        for i, g in enumerate(groups):
            marker, color = _style(g, report, i)
            pc = [colors.get(lab, color) for lab in g.labels]
            ax.scatter(g.compute, g.error, marker=marker, c=pc, s=30, alpha=0.55, zorder=2,
                       label=_curve_label(g, report))
            n += 1
        keep = frontier_mask(c, e)
        order = np.argsort(c[keep])
        fx, fy = c[keep][order], e[keep][order]
        fl = [labels[j] for j in np.flatnonzero(keep)[order]]
        ax.step(np.append(fx, c.max()), np.append(fy, fy[-1]), where="post", color="black", linewidth=1.2,
                zorder=3, label="measured frontier (best at this compute or less)")
        ax.scatter(fx, fy, s=110, facecolors="none", edgecolors="black", linewidths=1.0, zorder=4)
        for x, y, lab in zip(fx, fy, fl):
            ax.annotate(plain(lab), (x, y), textcoords="offset points", xytext=(4, -11), fontsize=7, color="0.2")
        n += 1
        _loglog(ax, report)
        ax.set_xlabel("")
        ax.set_title(f"{_panel_title(report, key)}: best at each budget", fontsize=10)
        _legend(fig, ax, n)
        spans = _winner_spans(groups, form, c.min(), c.max())
        for x0, x1, gi in spans:
            strip.axvspan(x0, x1, color=_style(groups[gi], report, gi)[1], alpha=0.8, linewidth=0)
        strip.set_yticks([])
        strip.set_xscale("log")
        strip.set_xlabel(COMPUTE_LABELS.get(report.spec.compute, plain(report.spec.compute)))
        strip.set_ylabel("fit\nbest", rotation=0, fontsize=7, labelpad=14, va="center")
        if spans:
            seen = sorted({gi for _, _, gi in spans})
            strip.legend(handles=[Patch(color=_style(groups[gi], report, gi)[1], label=_curve_label(groups[gi],
                                                                                                       report))
                                  for gi in seen], fontsize=7, frameon=False, loc="center left",
                         bbox_to_anchor=(1.01, 0.5))
    return fig


def _peak_speed(df: pd.DataFrame, speed_task: str) -> pd.DataFrame:
    """Peak img/s of `speed_task`'s ok rows per model, backend, precision and resolution: the speed of
    plots._infer_speed (median over repeats, then the best batch size), as the distillation figure shows it."""
    need = {"task", "status", "img_per_s", "model", "resolution"}
    if df.empty or not need <= set(df.columns):
        return pd.DataFrame()
    b = _infer_speed(df[df["status"] == "ok"], speed_task)
    if b.empty:
        return pd.DataFrame()
    b["img_per_s"] = pd.to_numeric(b["img_per_s"], errors="coerce")
    keys = [k for k in ("model", "backend", "precision", "resolution") if k in b.columns]
    # and every other setting that tells two peaks apart (a CPU's and a GPU's: the fastest was taken silently;
    # found by a review)
    keys += varying_series_keys(b, tables.THROUGHPUT_KEYS, drop=(*keys, "family", "task", "batch_size"))
    b = b.assign(marked=caveats.marked(b[caveats.CAVEAT]) if caveats.CAVEAT in b else False)  # the fastest clean
    b = b.sort_values(["marked", "img_per_s"], ascending=[True, False])  # speed where there is one
    return b.groupby(keys, dropna=False, sort=True).head(1)[[*keys, "img_per_s", "marked"]].reset_index(drop=True)


def throughput_vs_accuracy(df: pd.DataFrame, *, speed_task: str, compute: str = DEFAULT_COMPUTE) -> Figure | None:
    """Peak throughput of `speed_task` (the inference task; x, log) vs transfer accuracy (y), one panel per
    benchmark: each model's accuracy at its largest pre-training budget (mean over rows there) against its speed
    at the resolution it was evaluated at; models of a family joined in speed order (DeiT Figure 1)."""
    speed = _peak_speed(df, speed_task)
    rows = results_frame(df) if "status" in df.columns else pd.DataFrame()
    if speed.empty or rows.empty or "accuracy" not in rows.columns or compute not in rows.columns:
        return None
    acc = rows.copy()  # rows with an accuracy and a pre-training compute: the transfer rows
    acc["accuracy"] = pd.to_numeric(acc["accuracy"], errors="coerce")
    acc[compute] = pd.to_numeric(acc[compute], errors="coerce")
    acc = acc.dropna(subset=["accuracy", compute])
    if "teacher" in acc.columns:  # plain upstreams: distilled ones have their own figure (distillation section)
        acc = acc[acc["teacher"].isna()]
    if acc.empty:
        return None
    bench = [c for c in BENCHMARK_COLUMNS if c in acc.columns and acc[c].notna().any()]
    panels, note = first_panels(list(acc.groupby(bench, dropna=False, sort=True)), "benchmarks")
    skeys = [k for k in speed.columns if k not in ("model", "resolution", "img_per_s", "marked")]
    series = list(speed.groupby(skeys, dropna=False)) if skeys else [((), speed)]
    fig, axes, _ = _axes(len(panels), height=4.6)
    note(fig)
    colors = model_colors(acc["model"])
    drawn = 0
    for ax, (key, part) in zip(axes, panels):
        n, rings = 0, False
        for skey, sp in series:
            skey = skey if isinstance(skey, tuple) else (skey,)
            pts = []
            for model, m in part.groupby("model"):
                top = m[m[compute] == m[compute].max()]
                # a point per resolution evaluated at: pooled, 32 and 64 px's accuracies were averaged and set
                # against the 32 px speed (found by a review)
                by_res = top.groupby("resolution", dropna=False) if "resolution" in top.columns else [(None, top)]
                several = "resolution" in top.columns and top["resolution"].nunique() > 1
                for res, at in by_res:
                    s = sp[(sp["model"] == model) & (sp["resolution"] == res)]
                    if not s.empty:
                        name = f"{model} {numfmt.fmt(res)} px" if several else model
                        pts.append((name, float(s["img_per_s"].max()), float(at["accuracy"].mean()),
                                    at["family"].iloc[0], bool(s["marked"].iloc[0]), model))
            if not pts:
                continue
            line = backend_line(str(skey[0])) if skey else "-"
            tag = plain(" ".join(str(v) for v in skey if pd.notna(v)))
            for fam in dict.fromkeys(p[3] for p in pts):
                fp = sorted((p for p in pts if p[3] == fam), key=lambda p: p[1])
                marker, cmap, name = FAMILY_STYLE.get(fam, FAMILY_STYLE["other"])
                ax.plot([p[1] for p in fp], [100 * p[2] for p in fp], linestyle=line, color=colormaps[cmap](0.6),
                        marker=marker, markersize=6, linewidth=1.2, zorder=2,
                        label=f"{name} ({tag})" if tag else name)
                for name, x, y, _, ringed, model in fp:
                    ax.scatter([x], [100 * y], marker=marker, color=colors[model], s=45, zorder=3)
                    ax.annotate(plain(name), (x, 100 * y), textcoords="offset points", xytext=(4, 4), fontsize=7)
                    rings = mark_caveats(ax, [x], [100 * y]) if ringed else rings
                n += 1
        key = key if isinstance(key, tuple) else (key,)
        ax.set_xscale("log")
        _log_axis(ax.xaxis)
        if rings:
            caveat_legend_entry(ax)
            n += 1
        ax.set_xlabel("Peak inference throughput [img/s] (median over repeats, best batch size)")
        ax.set_ylabel("Accuracy [%] at the largest pre-training budget")
        where = plain(tables.settings_text(zip(bench, key), " / "))
        ax.set_title(f"{where}: what accuracy a speed buys", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        _legend(fig, ax, n)
        drawn += n
    return fig if drawn else None
