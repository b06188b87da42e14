"""The report's section of 'serve' rows (vitbench.tasks.serve, docs/serving.md): a table per scenario and
configuration, and latency against target QPS from every LoadGen run a row keeps (the Server search's probes),
with the latency bound drawn. Generic: a line per configuration the table keeps apart (model, backend, batch
size, ...), a marked row's probes ringed red (vitbench.report.caveats)."""

from __future__ import annotations

import json

import pandas as pd
from matplotlib.figure import Figure

from vitbench.measure import loadgen
from vitbench.measure.load import OTHER_LOAD
from vitbench.report import caveats, tables
from vitbench.report.caveats import CAVEAT, caveat_legend_entry, mark_caveats
from vitbench.report.parts import NotDrawn
from vitbench.report.plots import backend_line, model_colors, plain

KEYS = ["model", "backend", "device", "precision", "scenario", "latency_per", "batch_size", "max_wait_ms",
        "latency_bound_ms", "min_duration_s"]
VALUES = ["samples_per_s", "latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "latency_percentile_judged",
          "latency_ms_judged", "probes", "mean_batch", "throughput_img_per_s", "offline_over_throughput",
          OTHER_LOAD]
COLUMNS = (*KEYS, "repeats", *VALUES, "qps_search_bracket", CAVEAT)


def table(ok: pd.DataFrame) -> pd.DataFrame:
    """Median over repeats per configuration; the Server search's last bracket (of the first repeat) beside it.
    Latencies per query in MultiStream (an older row, without `latency_per`, held them per sample: read again
    from the detail log it keeps, `per_query_of_old`), per sample elsewhere; `latency_per` says which."""
    ok = per_query_of_old(ok)
    return tables._collapse(ok, KEYS, tables._present(ok, VALUES), carry={"qps_search_bracket": "first"})


def _runs(raw) -> list[dict]:
    """The LoadGen runs a row keeps (raw['runs']), from the raw dict or its JSON text."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    runs = raw.get("runs") if isinstance(raw, dict) else None
    return [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []


def _detail(run: dict) -> dict | None:
    """The MLLOG entries of the detail log a run keeps (None: none kept)."""
    detail = (run.get("logs") or {}).get(loadgen.LOG_FILES[1])
    return loadgen.mllog(detail) if isinstance(detail, str) and detail else None


def _stale(run: dict) -> bool:
    """A run of a per-query scenario (MultiStream) kept by an older row: its latencies per sample, no
    `latency_per`."""
    return run.get("latency_per") is None and loadgen.latency_per(run.get("scenario")) == "query"


def _judged(run: dict) -> float | None:
    """A run's latency at its judged percentile: its `latency_ms` entry (`p95`), else (a row written before
    2026-11-30 kept p50/p90/p99 only; an older MultiStream run, its latencies per sample, `_stale`) LoadGen's
    detail log the run keeps (per query in MultiStream)."""
    p = run.get("percentile")
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        return None
    got = None if _stale(run) else (run.get("latency_ms") or {}).get(f"p{p:g}")
    if got is None:
        log = _detail(run)
        got = loadgen.percentile_ms(log, p, loadgen.latency_per(run.get("scenario"))) if log else None
    return got


def per_query_of_old(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with every row's `latency_per` ('sample', 'query'), and an older MultiStream row (its latencies per
    sample, no `latency_per`) given its per-query ones, MLPerf's, from the detail log its run
    keeps; one without that log keeps its per-sample numbers and says so ('sample')."""
    if "scenario" not in df.columns or df.empty:
        return df
    df = df.copy()
    per = df["latency_per"].astype(object) if "latency_per" in df.columns else pd.Series(None, df.index, object)
    per = per.where(per.notna(), None)
    for i, r in df.iterrows():
        if per[i] is not None:
            continue
        per[i] = "sample"
        runs = _runs(r.get("raw")) if loadgen.latency_per(r["scenario"]) == "query" else []
        log = _detail(runs[-1]) if runs else None  # a stream scenario's one run
        p = r.get("latency_percentile_judged")
        if not log or not isinstance(p, (int, float)) or pd.isna(p):
            continue
        lat = loadgen.latencies_ms(log, float(p), "query")
        for k, v in [*lat.items(), ("judged", lat[f"p{float(p):g}"])]:
            if f"latency_ms_{k}" in df.columns:
                df.at[i, f"latency_ms_{k}"] = v
        per[i] = "query"
    df["latency_per"] = per
    return df


PROBE_VALUES = ["target_qps", "latency_ms", "latency_ms_p50", "valid", "bound_ms", "percentile", CAVEAT]


def probes(df: pd.DataFrame) -> pd.DataFrame:
    """One row per LoadGen run of the Server rows (error rows too: a search none of whose probes was VALID): the
    row's configuration (the table's KEYS and any other setting that splits it, tables.split_keys: with model and
    backend only, batch 1's and batch 32's probes were one line), target QPS, the judged percentile's latency,
    p50, validity, the bound and the row's `caveat` (vitbench.report.caveats; '' where none)."""
    rows = []
    server = df[df["scenario"] == "Server"] if "scenario" in df.columns else df.iloc[0:0]
    # less the probe's own columns: target_qps, a Server setting (where its search starts), is the figure's x
    split = tables.split_keys(server, KEYS) if len(server) else []
    keys = [k for k in dict.fromkeys(["model", "backend", *split]) if k not in PROBE_VALUES]
    server = server.assign(**{k: tables.hashable(server[k]) for k in keys if k in server})  # a list: groupable
    for _, r in server.iterrows():
        config = {k: r.get(k) for k in keys}
        caveat = r.get(CAVEAT)
        for run in _runs(r.get("raw")):
            lat = run.get("latency_ms") or {}
            rows.append({**config, "target_qps": run.get("target_qps"), "latency_ms": _judged(run),
                         "latency_ms_p50": lat.get("p50"), "valid": bool(run.get("valid")),
                         "bound_ms": run.get("latency_bound_ms"), "percentile": run.get("percentile"),
                         CAVEAT: caveat if isinstance(caveat, str) else ""})
    return pd.DataFrame(rows, columns=[*keys, *PROBE_VALUES])


_MARKERS = ("o", "s", "^", "D", "v", "P")  # the series of one model and backend told apart (o: the first)


def _label(g: pd.DataFrame, apart: list[str]) -> str:
    """'model (backend)', key=value of each other setting that varies between the figure's lines (`apart`), and
    the judged percentile."""
    row, p = g.iloc[0], g["percentile"].dropna()
    extra = tables.settings_text((k, row[k]) for k in apart if k not in ("model", "backend"))
    return plain(f"{row['model']} ({row['backend']}) {extra}".strip()) + (f" p{p.iloc[0]:g}" if len(p) else "")


def latency_vs_qps(df: pd.DataFrame) -> Figure | NotDrawn | None:
    """Per model and backend, the judged latency percentile (solid) and the median (thin) of every Server run
    (the report gives it error rows too: Figure.failed) against its target QPS; filled markers VALID, hollow
    INVALID; the latency bound a dashed line. Runs but none with a target and a judged latency: a note."""
    runs = probes(df)
    pr = runs.dropna(subset=["target_qps", "latency_ms"])
    if runs.empty:
        return None
    if pr.empty:
        pct = ", ".join(sorted({f"p{p:g}" for p in runs["percentile"] if isinstance(p, (int, float))
                                and not pd.isna(p)})) or "no percentile"
        return NotDrawn(f"{len(runs)} LoadGen Server run(s), none with a target QPS and its judged latency "
                        f"({pct}) in its row or its detail log: no point to draw")
    fig = Figure(figsize=(8.0, 4.8), layout="constrained")
    ax = fig.subplots()
    colors = model_colors(pr["model"])
    keys = [c for c in pr.columns if c not in PROBE_VALUES]  # a line per configuration the serve table has
    apart = tables.varying(pr, keys)
    lines = list(pr.groupby(keys, sort=True, dropna=False))
    shared = pd.Series([(g["model"].iloc[0], g["backend"].iloc[0]) for _, g in lines]).value_counts()
    seen: dict[tuple, int] = {}  # lines drawn so far per model and backend: the next one's marker
    for _, g in lines:
        g = g.sort_values("target_qps")
        model, backend = g["model"].iloc[0], g["backend"].iloc[0]
        color, style = colors[model], backend_line(backend)
        k = seen[(model, backend)] = seen.get((model, backend), -1) + 1
        marker = _MARKERS[k % len(_MARKERS)]
        # lines of one model and backend share colour and style: their legend entries show their marker
        own = {"marker": marker, "markersize": 6} if shared[(model, backend)] > 1 else {}
        ax.plot(g["target_qps"], g["latency_ms"], linestyle=style, color=color, linewidth=1.6,
                label=_label(g, apart), **own)
        ax.plot(g["target_qps"], g["latency_ms_p50"], linestyle=style, color=color, linewidth=0.8, alpha=0.6)
        for valid, part in g.groupby("valid"):
            ax.plot(part["target_qps"], part["latency_ms"], linestyle="none", marker=marker, markersize=6,
                    color=color, markerfacecolor=color if valid else "white")
    # a probe of a row marked unstable or shared-host ringed red, as every speed figure does (the serve table
    # marked it, the figure did not)
    m = caveats.marked(pr[CAVEAT])
    rings = mark_caveats(ax, pr["target_qps"][m], pr["latency_ms"][m])
    for bound in sorted(pr["bound_ms"].dropna().unique()):
        ax.axhline(bound, color="0.3", linestyle="--", linewidth=1.0)
        ax.annotate(f"bound {bound:g} ms", (0.01, bound), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 3), fontsize=8, color="0.3")
    ax.set_yscale("log")
    ax.set_xlabel("Target QPS (LoadGen Server, Poisson arrivals) [queries/s]")
    ax.set_ylabel("Latency per sample [ms] (thick: judged percentile; thin: p50)")
    ax.plot([], [], linestyle="none", marker="o", color="0.3", label="VALID")
    ax.plot([], [], linestyle="none", marker="o", color="0.3", markerfacecolor="white", label="INVALID")
    if rings:
        caveat_legend_entry(ax)
    ax.legend(fontsize=8, loc="best")
    return fig
