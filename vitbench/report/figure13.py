"""The report's "accuracy, compute and measured speed per family" section (ViT paper Appendix D.6, Figure 13):
do theoretical FLOPs predict measured speed, and what accuracy does each family buy with compute and with speed?

Reads the ok rows of a study that has transfer rows (accuracy, pre-training exaFLOPs) and inference rows (img/s,
per backend); forward GFLOPs come from the flops rows, else from the model table's analytic count. The table: one
row per model and backend; the figure: (a) accuracy vs pre-training compute, (b) accuracy at the largest budget vs
measured inference speed, (c) GFLOPs per image vs measured img/s, one series per backend, with the line of
constant achieved FLOP/s through each backend's median model (FLOPs predict speed where the points lie on it).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vitbench.report import tables

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_FILLS = ("full", "none")  # first backend filled, the others hollow


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    return pd.to_numeric(df[col], errors="coerce") if col in df.columns else pd.Series(np.nan, index=df.index)


def _gflops(df: pd.DataFrame) -> dict[str, float]:
    """Forward GFLOPs per image per model: the flops rows' analytic number, else the model table's."""
    from vitbench.models.analytic import analytic_counts
    from vitbench.models.specs import get_spec

    out: dict[str, float] = {}
    fl = df[(df.get("kind") == "flops")] if "kind" in df.columns else df.iloc[0:0]
    for model, g in fl.groupby("model"):
        v = _num(g, "gflops").dropna()
        if len(v):
            out[model] = float(v.iloc[0])
    for model, g in df.groupby("model"):
        if model not in out:
            try:
                res = int(_num(g, "resolution").dropna().iloc[0])
                out[model] = analytic_counts(get_spec(model), res).gflops
            except Exception:  # a model no longer in the table: no GFLOPs, the row still shows its speed
                out[model] = math.nan
    return out


def _speed(df: pd.DataFrame) -> pd.DataFrame:
    """Median inference img/s per (model, backend)."""
    if "kind" not in df.columns:
        return pd.DataFrame()
    b = df[(df["kind"] == "bench") & (df.get("task", "infer") == "infer")]
    if b.empty:
        return pd.DataFrame()
    return (b.assign(img_per_s=_num(b, "img_per_s")).groupby(["model", "backend"], as_index=False)["img_per_s"]
            .median())


def _accuracy(df: pd.DataFrame) -> pd.DataFrame:
    """Mean accuracy per (model, kind, shots, pre-training exaFLOPs)."""
    if "accuracy" not in df.columns or "pretrain_exaflops" not in df.columns:
        return pd.DataFrame()
    a = df.assign(accuracy=_num(df, "accuracy"), pretrain_exaflops=_num(df, "pretrain_exaflops"))
    a = a.dropna(subset=["accuracy", "pretrain_exaflops"])
    keys = ["model", *[k for k in ("kind", "shots") if k in a.columns], "pretrain_exaflops"]
    return a.groupby(keys, as_index=False, dropna=False)["accuracy"].mean()


def table(ok: pd.DataFrame) -> pd.DataFrame:
    """One row per model and backend: family, GFLOPs/img, img/s, achieved GFLOP/s, accuracy at the largest
    pre-training budget and that budget's exaFLOPs. Empty unless there are both accuracy and speed rows."""
    speed, acc = _speed(ok), _accuracy(ok)
    if speed.empty or acc.empty:
        return pd.DataFrame()
    gf = _gflops(ok)
    top = acc.sort_values("pretrain_exaflops").groupby("model").tail(1).set_index("model")
    rows = []
    for _, s in speed.iterrows():
        m = s["model"]
        rows.append({"model": m, "family": tables.family_of(m), "backend": s["backend"], "gflops": gf.get(m),
                     "img_per_s": s["img_per_s"], "achieved_gflop_per_s": gf.get(m, math.nan) * s["img_per_s"],
                     "accuracy": top["accuracy"].get(m), "pretrain_exaflops": top["pretrain_exaflops"].get(m)})
    return pd.DataFrame(rows).sort_values(["backend", "family", "model"], ignore_index=True)


def figure(ok: pd.DataFrame) -> Figure | None:
    speed, acc = _speed(ok), _accuracy(ok)
    if speed.empty or acc.empty:
        return None
    gf = _gflops(ok)
    models = sorted(set(acc["model"]) | set(speed["model"]), key=lambda m: (tables.family_of(m), m))
    families = sorted({tables.family_of(m) for m in models})
    cmap = {f: f"C{i}" for i, f in enumerate(families)}
    style = {m: dict(color=cmap[tables.family_of(m)], marker=_MARKERS[i % len(_MARKERS)])
             for i, m in enumerate(models)}
    backends = list(dict.fromkeys(speed["backend"]))
    fig = Figure(figsize=(16, 4.8), layout="constrained")
    ax_c, ax_s, ax_f = fig.subplots(1, 3)
    for m, g in acc.groupby("model"):
        g = g.sort_values("pretrain_exaflops")
        ax_c.plot(g["pretrain_exaflops"], 100 * g["accuracy"], linestyle="-", label=m, **style[m])
    top = acc.sort_values("pretrain_exaflops").groupby("model").tail(1).set_index("model")["accuracy"]
    for i, b in enumerate(backends):
        sp = speed[speed["backend"] == b].set_index("model")["img_per_s"]
        fill = _FILLS[min(i, 1)]
        for m, v in sp.items():
            st = style[m]
            face = st["color"] if fill == "full" else "none"
            if m in top:
                ax_s.scatter(v, 100 * top[m], marker=st["marker"], facecolors=face, edgecolors=st["color"], s=60,
                             label=f"{m} ({b})")
            ax_f.scatter(gf.get(m, math.nan), v, marker=st["marker"], facecolors=face, edgecolors=st["color"],
                         s=60, label=f"{m} ({b})")
        pts = np.array([(gf.get(m, math.nan), v) for m, v in sp.items()], dtype=float)
        pts = pts[np.isfinite(pts).all(axis=1)] if len(pts) else pts
        if len(pts):
            achieved = float(np.median(pts[:, 0] * pts[:, 1]))
            xs = np.geomspace(pts[:, 0].min() / 1.5, pts[:, 0].max() * 1.5, 20)
            ax_f.plot(xs, achieved / xs, linestyle=(":", "--")[min(i, 1)], color="0.5",
                      label=f"{b}: constant {achieved:.3g} GFLOP/s")
    what = ", ".join(sorted({f"{k} {int(n)}-shot" if pd.notna(n) else str(k) for k, n in
                            zip(acc.get("kind", pd.Series(["transfer"] * len(acc))),
                                acc.get("shots", pd.Series([np.nan] * len(acc))))}))
    ax_c.set(xscale="log", xlabel="Pre-training compute [exaFLOPs]", ylabel=f"Transfer accuracy [%] ({what})",
             title="(a) accuracy vs pre-training compute")
    ax_s.set(xscale="log", xlabel="Measured inference speed [img/s] (filled: " + backends[0]
             + (", hollow: " + ", ".join(backends[1:]) if len(backends) > 1 else "") + ")",
             ylabel="Accuracy at the largest budget [%]", title="(b) accuracy vs measured speed")
    ax_f.set(xscale="log", yscale="log", xlabel="Forward cost [GFLOPs per image] (1 MAC = 2 FLOPs)",
             ylabel="Measured inference speed [img/s]", title="(c) do FLOPs predict speed? (on the line: yes)")
    for ax in (ax_c, ax_s, ax_f):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, loc="best")
    dev = ", ".join(sorted(set(map(str, ok.get("device", pd.Series(dtype=str)).dropna())))) or "device ?"
    fig.suptitle(f"Accuracy, compute and measured speed per family (cf. ViT paper Figure 13; {dev})", fontsize=11)
    return fig
