"""The report's "accuracy, compute and measured speed per family" section (ViT paper Appendix D.6, Figure 13):
do theoretical FLOPs predict measured speed, and what accuracy does each family buy with compute and with speed?

Reads the ok rows of a study that has transfer rows (accuracy, pre-training exaFLOPs) and inference rows (img/s,
per backend). Every number is one the report shows elsewhere or a division of two of them:
- accuracy: per model and benchmark (kind, shots), the mean over the rows at the model's largest pre-training
  budget (its seeds), with how many;
- speed: the throughput table's peak (median over repeats, then the best batch size, as the throughput figure
  draws it; vitbench.report.tables.peak_throughput) at the resolution the benchmark was evaluated at (where the
  transfer rows do not say, the largest input size measured), with its batch size and caveat;
- forward GFLOPs per image at that resolution: the flops rows' count, else the model table's analytic one.
The table: one row per model, benchmark and backend; the figure: (a) accuracy vs pre-training compute, (b)
accuracy at the largest budget vs measured inference speed, (c) GFLOPs per image vs measured img/s, one series
per backend, with the line of constant achieved FLOP/s through each backend's median model (FLOPs predict speed
where the points lie on it).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vitbench.report import caveats, plots, tables
from vitbench.report.caveats import CAVEAT
from vitbench.tasks.flops import KIND as FLOPS  # the flops rows' kind (their forward GFLOPs per image)

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_FILLS = ("full", "none")  # first backend filled, the others hollow
_SPEED_KEYS = ("backend", "precision", "compile", "resolution", "batch_size", "img_per_s", "repeats", CAVEAT)


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df.columns else pd.Series(np.nan, index=df.index)


def _gflops(df: pd.DataFrame, model: str, resolution) -> float:
    """Forward GFLOPs per image of `model` at `resolution`: the flops rows' count, else the model table's."""
    from vitbench.models.analytic import analytic_counts
    from vitbench.models.specs import get_spec

    if "kind" in df.columns and "gflops" in df.columns:
        fl = df[(df["kind"] == FLOPS) & (df["model"] == model) & (_num(df, "resolution") == resolution)]
        v = _num(fl, "gflops").dropna()
        if len(v):
            return float(v.iloc[0])
    try:
        return analytic_counts(get_spec(model), int(resolution)).gflops
    except Exception:  # a model no longer in the table: no GFLOPs, the row still shows its speed
        return math.nan


def _benchmark(row) -> str:
    """The downstream task a row measured: its kind, shots and dataset (two datasets are two benchmarks)."""
    shots, dataset = row.get("shots"), row.get("dataset")
    return (f"{row['kind']} {int(shots)}-shot" if pd.notna(shots) else str(row["kind"])) + (
        f" {dataset}" if isinstance(dataset, str) and dataset else "")


_ACC_KEYS = ["model", "benchmark", "resolution"]
# the table's columns that are values, or said elsewhere in a point's style: the others label a point where they vary
_NOT_LABELS = ("model", "family", "backend", "benchmark", "accuracy", "seeds", "pretrain_exaflops", "img_per_s",
               "speed_repeats", "gflops", "achieved_gflop_per_s", "batch_size", CAVEAT)


def _accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Per model, benchmark, resolution (NaN where the rows do not say) and any other setting that varies
    (tables.split_keys; its attrs' SPLIT_BY names them): mean accuracy over the rows at the model's largest
    pre-training budget, how many rows (`seeds`: they differ in their seed alone) and that budget. Rows at 32 and
    64 px were averaged as two seeds of one (found by a review)."""
    if "accuracy" not in df.columns or "pretrain_exaflops" not in df.columns or "kind" not in df.columns:
        return pd.DataFrame()
    a = df.assign(accuracy=_num(df, "accuracy"), pretrain_exaflops=_num(df, "pretrain_exaflops"),
                  resolution=_num(df, "resolution"))
    a = a.dropna(subset=["accuracy", "pretrain_exaflops"])
    if a.empty:
        return pd.DataFrame()
    a["benchmark"] = [_benchmark(r) for _, r in a.iterrows()]
    top = a[a["pretrain_exaflops"] == a.groupby(["model", "benchmark"])["pretrain_exaflops"].transform("max")]
    keys = tables.split_keys(top, _ACC_KEYS)
    g = top.assign(**{k: tables.hashable(top[k]) for k in keys}).groupby(keys, sort=True, dropna=False)
    out = pd.DataFrame({"accuracy": g["accuracy"].mean(), "seeds": g.size(),
                        "pretrain_exaflops": g["pretrain_exaflops"].first()}).reset_index()
    out.attrs[tables.SPLIT_BY] = keys[len(_ACC_KEYS):]
    return out


def _speeds(df: pd.DataFrame) -> pd.DataFrame:
    """The throughput table's peak inference rows (median over repeats, best batch), per model and backend, with
    every setting that tells two of them apart (the device: a CPU's and a GPU's row read alike)."""
    pt = plots._infer_speed(df)
    if pt.empty:
        return pt
    extra = plots.varying_series_keys(pt, tables.THROUGHPUT_KEYS, drop=("model", "family", "task", *_SPEED_KEYS))
    return pt[[c for c in ("model", *_SPEED_KEYS, *extra) if c in pt.columns]]


def table(ok: pd.DataFrame) -> pd.DataFrame:
    """One row per model, benchmark and backend with both an accuracy and a measured speed (module docstring).
    Empty unless some model has both."""
    speed, acc = _speeds(ok), _accuracy(ok)
    if speed.empty or acc.empty:
        return pd.DataFrame()
    acc_extra = acc.attrs.get(tables.SPLIT_BY, [])
    rows = []
    for _, a in acc.iterrows():
        sp = speed[speed["model"] == a["model"]]
        if sp.empty:
            continue
        at = a["resolution"] if pd.notna(a["resolution"]) and (sp["resolution"] == a["resolution"]).any() \
            else (None if pd.notna(a["resolution"]) else sp["resolution"].max())
        if at is None:  # the benchmark's resolution was not measured: no speed for it, none guessed
            continue
        for _, s in sp[sp["resolution"] == at].iterrows():
            gf = _gflops(ok, a["model"], at)
            rows.append({"model": a["model"], "family": tables.family_of(a["model"]), "benchmark": a["benchmark"],
                         **{f"transfer_{k}" if k in s.index else k: a[k] for k in acc_extra},
                         "accuracy": a["accuracy"], "seeds": int(a["seeds"]),
                         "pretrain_exaflops": a["pretrain_exaflops"],
                         **{k: s[k] for k in s.index if k != "model"},
                         "gflops": gf, "achieved_gflop_per_s": gf * s["img_per_s"]})
    if not rows:
        return pd.DataFrame()
    out = pd.DataFrame(rows).rename(columns={"repeats": "speed_repeats"})
    if CAVEAT in out and not (out[CAVEAT].fillna("") != "").any():
        out = out.drop(columns=[CAVEAT])
    return out.sort_values(["benchmark", "backend", "family", "model"], ignore_index=True)


def figure(ok: pd.DataFrame) -> Figure | None:
    t = table(ok)
    if t.empty:
        return None
    acc = _accuracy(ok)
    bench = t["benchmark"].value_counts().index[0]  # the benchmark most models have: (a) and (b) show it
    t = t[t["benchmark"] == bench]
    acc = acc[acc["benchmark"] == bench] if not acc.empty else acc
    curves = ok.assign(accuracy=_num(ok, "accuracy"), pretrain_exaflops=_num(ok, "pretrain_exaflops"))
    curves = curves.dropna(subset=["accuracy", "pretrain_exaflops"])
    curves = curves[[_benchmark(r) == bench for _, r in curves.iterrows()]]
    models = sorted(set(t["model"]), key=lambda m: (tables.family_of(m), m))
    families = sorted({tables.family_of(m) for m in models})
    cmap = {f: f"C{i}" for i, f in enumerate(families)}
    style = {m: dict(color=cmap[tables.family_of(m)], marker=_MARKERS[i % len(_MARKERS)])
             for i, m in enumerate(models)}
    backends = list(dict.fromkeys(t["backend"]))
    fig = Figure(figsize=(16, 4.8), layout="constrained")
    ax_c, ax_s, ax_f = fig.subplots(1, 3)
    # a line per model and per setting its rows at the largest budget differ in (the resolution, ...): pooled, two
    # input sizes read as seeds of one
    split = tables.varying(curves, ["resolution", *acc.attrs.get(tables.SPLIT_BY, [])])
    for m in models:
        of_m = curves[curves["model"] == m]
        for key, c in (of_m.assign(**{k: tables.hashable(of_m[k]) for k in split}).groupby(split, dropna=False)
                       if split else [((), of_m)]):
            key = key if isinstance(key, tuple) else (key,)
            g = c.groupby("pretrain_exaflops")["accuracy"].mean()
            tag = tables.settings_text(zip(split, key))
            ax_c.plot(g.index, 100 * g.to_numpy(), linestyle="-", label=plots.plain(f"{m} {tag}".strip()),
                      **style[m])
    rings = False
    label_keys = tables.varying(t, [c for c in t.columns if c not in _NOT_LABELS])  # what tells points apart
    for i, b in enumerate(backends):
        sp = t[t["backend"] == b]
        fill = _FILLS[min(i, 1)]
        for _, r in sp.iterrows():
            st = style[r["model"]]
            face = st["color"] if fill == "full" else "none"
            tag = tables.settings_text((k, r[k]) for k in label_keys)
            label = plots.plain(f"{r['model']} ({b}) {tag}".strip())
            ax_s.scatter(r["img_per_s"], 100 * r["accuracy"], marker=st["marker"], facecolors=face,
                         edgecolors=st["color"], s=60, label=label)
            ax_f.scatter(r["gflops"], r["img_per_s"], marker=st["marker"], facecolors=face, edgecolors=st["color"],
                         s=60, label=label)
        if CAVEAT in sp:
            m = caveats.marked(sp[CAVEAT])
            rings |= plots.mark_caveats(ax_s, sp["img_per_s"][m], 100 * sp["accuracy"][m])
            rings |= plots.mark_caveats(ax_f, sp["gflops"][m], sp["img_per_s"][m])
        # a line per setting that tells the backend's points apart (fp32 and bf16: one median over both drew a
        # line through neither, as plots._reference_lines found)
        for key, g in (sp.groupby([tables.hashable(sp[k]) for k in label_keys], dropna=False, sort=True)
                       if label_keys else [((), sp)]):
            pts = g[["gflops", "img_per_s"]].to_numpy(dtype=float)
            pts = pts[np.isfinite(pts).all(axis=1)]
            if len(pts):
                achieved = float(np.median(pts[:, 0] * pts[:, 1]))
                xs = np.geomspace(pts[:, 0].min() / 1.5, pts[:, 0].max() * 1.5, 20)
                tag = tables.settings_text(zip(label_keys, key if isinstance(key, tuple) else (key,)))
                ax_f.plot(xs, achieved / xs, linestyle=(":", "--")[min(i, 1)], color="0.5",
                          label=plots.plain(f"{b}: constant {achieved:.3g} GFLOP/s (median model) {tag}".strip()))
    if rings:
        for ax in (ax_s, ax_f):
            plots.caveat_legend_entry(ax)
    res = sorted({int(r) for r in t["resolution"].dropna()})
    at = f"{res[0]} px" if len(res) == 1 else "each benchmark's input size"
    ax_c.set(xscale="log", xlabel="Pre-training compute [exaFLOPs]",
             ylabel=f"Transfer accuracy [%]\n({plots.plain(bench)}; mean over seeds)",
             title="(a) accuracy vs pre-training compute")
    ax_s.set(xscale="log", xlabel=f"Peak inference speed [img/s] ({at})\n(median over repeats, best batch; "
             "filled: " + plots.plain(backends[0]) + (", hollow: " + plots.plain(", ".join(backends[1:]))
                                                      if len(backends) > 1 else "")
             + ")",
             ylabel=f"Accuracy at the largest budget [%]\n({plots.plain(bench)}; mean over seeds)",
             title="(b) accuracy vs measured speed")
    ax_f.set(xscale="log", yscale="log", xlabel=f"Forward cost [GFLOPs per image] ({at})\n(1 MAC = 2 FLOPs)",
             ylabel="Peak inference speed [img/s]\n(median over repeats, best batch)",
             title="(c) do FLOPs predict speed? (on the line: yes)")
    for axis in (ax_c.xaxis, ax_s.xaxis, ax_f.xaxis, ax_f.yaxis):
        plots._log_axis(axis)
    for ax in (ax_c, ax_s, ax_f):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    dev = ", ".join(sorted(set(map(str, ok.get("device", pd.Series(dtype=str)).dropna())))) or "device ?"
    dev = plots.plain(dev)
    fig.suptitle(f"Accuracy, compute and measured speed per family (cf. ViT paper Figure 13; {dev})", fontsize=11)
    return fig
