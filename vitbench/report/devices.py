"""Throughput across devices: scaling efficiency against the same study's 1-device trial, table and figures.

Computed here, from stored rows, never by a task (a trial does not know its study's other trials):
- weak scaling (data-parallel training's usual regime: the per-device batch fixed, the global batch growing):
  scaling_efficiency = img/s at N devices / (N x img/s at 1 device), the 1-device row with the same per-device
  batch (batch_size == the N-device row's batch_size / N); 1 is perfect scaling.
- strong scaling (the global batch fixed): speedup_same_global_batch = img/s at N / img/s at 1 device with the
  same global batch (ideal: N).
Both match the 1-device row on everything else (study, model, backend, task, device kind, precision, compile,
timing, resolution); a row without its 1-device partner has no efficiency (blank), never a guessed one, and the
1-device rows themselves have none either (1 by definition, not a measurement). A ratio whose 1-device partner
is marked (vitbench.report.caveats) is marked in the row's caveat.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from vitbench.report import caveats, tables
from vitbench.report.caveats import CAVEAT
from vitbench.report.parts import NotDrawn
from vitbench.report.plots import plain

_ACROSS = ("devices", "parallelism", "batch_size")  # what a row is compared across (its 1-device partner's)
_MATCH = ["study", "model", "family", "backend", "task", "device", "precision", "compile", "compile_mode", "timing",
          "resolution"]


def scaling(ok: pd.DataFrame) -> pd.DataFrame:
    """One row per (configuration, devices, parallelism, batch): img/s of the group and per device, and the
    efficiency against the 1-device row (see the module docstring). Empty when no row ran on several devices."""
    if ok.empty or "devices" not in ok or not (pd.to_numeric(ok["devices"], errors="coerce") > 1).any():
        return pd.DataFrame()
    keys = [k for k in (*_MATCH, "devices", "parallelism", "batch_size") if k in ok.columns]
    t = tables._collapse(ok, keys, [m for m in ("img_per_s", "mfu", "peak_mem_mib") if m in ok.columns],
                         spread="img_per_s", across=_ACROSS)
    t["devices"] = t["devices"].astype(int)
    t["batch_per_device"] = t["batch_size"] // t["devices"]
    t["img_per_s_per_device"] = t["img_per_s"] / t["devices"]
    match = [k for k in tables.summary_keys(t, _MATCH) if k not in _ACROSS]
    one = t[t["devices"] == 1]
    cav = CAVEAT in t
    one = one.assign(_cav=one[CAVEAT].fillna("") if cav else "")
    agg = {"img_per_s": "median", "_cav": _worst}  # 1-device rows of the same batch and other parallelisms
    weak = one.groupby([*match, "batch_size"], dropna=False, as_index=False).agg(agg).rename(
        columns={"batch_size": "batch_per_device", "img_per_s": "_one_weak", "_cav": "_cav_weak"})
    strong = one.groupby([*match, "batch_size"], dropna=False, as_index=False).agg(agg).rename(
        columns={"img_per_s": "_one_strong", "_cav": "_cav_strong"})
    t = t.merge(weak, on=[*match, "batch_per_device"], how="left").merge(strong, on=[*match, "batch_size"],
                                                                         how="left")
    many = t["devices"] > 1
    t["scaling_efficiency"] = tables.ratio(t["img_per_s"], t["devices"] * t["_one_weak"]).where(many)
    t["speedup_same_global_batch"] = tables.ratio(t["img_per_s"], t["_one_strong"]).where(many)
    if cav:
        t[CAVEAT] = [caveats.combine(c if isinstance(c, str) else "", **({"1-device row (weak)": w,
                                                                          "1-device row (same batch)": s}
                                                                         if m else {}))
                     for c, w, s, m in zip(t[CAVEAT], t["_cav_weak"], t["_cav_strong"], many)]
    t = t.drop(columns=[c for c in ("_one_weak", "_one_strong", "_cav_weak", "_cav_strong") if c in t])
    return t.sort_values([k for k in (*match, "parallelism", "batch_per_device", "devices") if k in t.columns],
                         kind="stable").reset_index(drop=True)


def _worst(cav: pd.Series) -> str:
    """The caveat of a value taken from several rows: a marked one if any is, else the first non-empty one."""
    marked = cav[caveats.marked(cav)]
    return str(marked.iloc[0]) if len(marked) else next((c for c in cav if c), "")


def _series(t: pd.DataFrame):
    """Lines: one per (study, model, backend, task, device, precision, ..., per-device batch) and parallelism of
    its multi-device rows, each starting from the 1-device row (the same for every parallelism)."""
    keys = [k for k in _MATCH if k in t and k != "family"] + ["batch_per_device"]
    out = []
    for k, g in t.groupby(keys, dropna=False, sort=True):
        one, many = g[g["devices"] == 1], g[g["devices"] > 1]
        for par, m in many.groupby("parallelism", sort=True):
            out.append(((*k, par), pd.concat([one, m]).assign(parallelism=par)))
    return out


def _label(row: pd.Series) -> str:
    return plain(f"{row['model']} {row['backend']} {row['task']} {row.get('parallelism', '')} "
                 f"b/dev {row['batch_per_device']}").strip()


def _axes(title: str, ylabel: str):
    fig = Figure(figsize=(7.6, 4.6), layout="constrained")
    ax = fig.subplots()
    ax.set_xlabel("devices")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    return fig, ax


def throughput_vs_devices(ok: pd.DataFrame) -> Figure | NotDrawn | None:
    """Group img/s against devices (per series: model, backend, task, parallelism, per-device batch), with the
    ideal line N x the 1-device img/s."""
    t = scaling(ok)
    if t.empty:
        return None
    if not any(g["devices"].nunique() > 1 for _, g in _series(t)):  # one point a line: no scaling to draw
        return NotDrawn("no line has rows at two device counts (a multi-device row without its 1-device "
                        "partner, or the reverse): nothing to draw against devices; the values are in the table "
                        "'devices'")
    fig, ax = _axes("Throughput vs devices (dotted: ideal linear scaling)",
                    "throughput of the group [img/s] (median over repeats)")
    rings = False
    for _, g in _series(t):
        g = g.sort_values("devices")
        line, = ax.plot(g["devices"], g["img_per_s"], marker="o", label=_label(g.iloc[0]))
        one = g[g["devices"] == 1]
        if not one.empty:
            ax.plot(g["devices"], g["devices"] * float(one["img_per_s"].iloc[0]), linestyle=":",
                    color=line.get_color())
        if CAVEAT in g:  # marked: its own value, or (its ideal line's) 1-device partner
            m = caveats.marked(g[CAVEAT])
            rings |= caveats.mark_caveats(ax, g["devices"][m], g["img_per_s"][m])
    if rings:
        caveats.caveat_legend_entry(ax)
    ax.set_xticks(sorted(t["devices"].unique()))
    ax.legend(fontsize=7, frameon=False)
    return fig


def efficiency_vs_devices(ok: pd.DataFrame) -> Figure | None:
    """Weak-scaling efficiency against devices (1 = linear), per series."""
    t = scaling(ok)
    if t.empty or t["scaling_efficiency"].notna().sum() == 0:
        return None
    fig, ax = _axes("Scaling efficiency vs devices (img/s at N / (N x img/s at 1 device), same per-device batch)",
                    "scaling efficiency [fraction] (of medians over repeats)")
    rings = False
    for _, g in _series(t):
        g = g.assign(scaling_efficiency=g["scaling_efficiency"].where(g["devices"] > 1, 1.0))  # 1: the definition
        g = g.dropna(subset=["scaling_efficiency"]).sort_values("devices")
        if (g["devices"] > 1).any():
            ax.plot(g["devices"], g["scaling_efficiency"], marker="o", label=_label(g.iloc[0]))
            if CAVEAT in g:  # a ratio with a marked side
                m = caveats.marked(g[CAVEAT]) & (g["devices"] > 1)
                rings |= caveats.mark_caveats(ax, g["devices"][m], g["scaling_efficiency"][m])
    if rings:
        caveats.caveat_legend_entry(ax)
    ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(sorted(t["devices"].unique()))
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, frameon=False)
    return fig
