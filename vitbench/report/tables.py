"""Summary tables from the tidy results DataFrame (vitbench.tidy.load): one row per measured configuration.

Each function gets the ok rows of the record kinds its report section declares (`ok_rows`; the sections are
registered beside the tasks, vitbench.tasks.ReportPart). Repeats of a trial collapse into one row: the median
over repeats of each metric, with `repeats` the count and, for throughput, the min and max over repeats so the
spread stays visible. Timed rows flagged unstable or co-scheduled are never pooled with clean ones
(vitbench.report.caveats: a `caveat` column says what each summary row rests on).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pandas as pd

from vitbench import numfmt
from vitbench.errors import clip
from vitbench.models.families import family_names
from vitbench.models.specs import get_spec
from vitbench.record import INCOMPARABLE
from vitbench.report import caveats
from vitbench.report.caveats import CAVEAT, OVERLAPPED
from vitbench.tasks.bench_metrics import METRICS as BENCH_METRICS
from vitbench.tasks.fewshot import Fewshot
from vitbench.tasks.fields import shared_default
from vitbench.tasks.finetune import Finetune
from vitbench.tasks.max_batch import MaxBatch
from vitbench.tasks.pretrain import Pretrain
from vitbench.tasks.upstream import TEACHER_FIELDS  # what tells a distilled upstream apart (absent without one)

# The record kinds of transfer accuracy, as their tasks declare them: the downstream evaluations (few-shot linear,
# fine-tuning) and the upstream's own test (the report's sections, views.py, and the figures that pick them out)
DOWNSTREAM = (Fewshot.kind, Finetune.kind)
PRETRAIN = Pretrain.kind

# Trial fields left out of the config at their defaults (key_neutral in tasks.fields.SHARED): a row without them
# ran with the default.
GROUP_DEFAULTS = {f: shared_default(f) for f in ("devices", "parallelism")}


def family_of(model: str) -> str:
    try:
        return get_spec(model).family
    except Exception:  # noqa: BLE001 - a model name from a newer/older table
        return "other"


def ok_rows(df: pd.DataFrame, kinds: tuple[str, ...], failed: bool = False) -> pd.DataFrame:
    """The ok rows of `kinds`, with the model's family beside its name and, where some timed row is unstable or
    co-scheduled, each row's `caveat` (vitbench.report.caveats). failed: the rows of every status (a figure that
    draws failed rows too, vitbench.report.parts.Figure.failed)."""
    if df.empty or "kind" not in df:
        return df.iloc[0:0]
    out = caveats.with_caveats(df[df["kind"].isin(kinds) & (failed | (df["status"] == "ok"))].copy())
    if any(col in out for col in GROUP_DEFAULTS):  # left out of 1-device rows' config (vitbench.tasks.fields)
        for col, default in GROUP_DEFAULTS.items():
            out[col] = out[col].astype(object).where(out[col].notna(), default) if col in out else default
    if not out.empty and "model" in out and "family" not in out:
        families: dict = {}  # once per model name, not per row
        out.insert(out.columns.get_loc("model") + 1, "family", out["model"].map(
            lambda m: families[m] if m in families else families.setdefault(m, family_of(m))))
    return out


def _present(df: pd.DataFrame, cols) -> list[str]:
    return [c for c in cols if c in df.columns and df[c].notna().any()]


SPLIT_BY = "split_by"  # a summary's attrs: the settings beyond its keys that split it
GROUPED_BY = "grouped_by"  # a summary's attrs: every key it was grouped by (its named keys, then SPLIT_BY's)


def split_keys(df: pd.DataFrame, keys: list[str], across: tuple[str, ...] = ()) -> list[str]:
    """`keys` (those `df` has), then every setting of `df`'s kinds (and the method versions, record.INCOMPARABLE)
    that varies within a group of them: a median never crosses settings (1 thread's 100 img/s and 4 threads' 350
    read 225; serve rows at 32 and 64 px, or train rows with 0 and 4 input workers, read as repeats of one); then
    every other setting that varies between the rows (it splits no group, and a reader sees what differs). Seeds
    and bookkeeping pool.
    `across`: keys a caller compares across (the backends side by side, the best batch, the devices): a setting
    that varies within a group of the other keys joins too, so torch at 1 thread is never set beside jax at 4."""
    from vitbench.tasks import setting_columns

    out = [k for k in keys if k in df.columns]
    settings = setting_columns(df["kind"].dropna().unique() if "kind" in df.columns else None)
    grouped = {k: hashable(df[k]).astype(object).where(df[k].notna(), "") for k in out if k not in across}
    shown = []
    for col in [c for c in df.columns if c not in out and (c in settings or c in INCOMPARABLE)]:
        values = hashable(df[col])
        if values.nunique(dropna=False) < 2:
            continue
        by = list(grouped.values()) or [pd.Series(0, index=df.index)]
        if (values.groupby(by, sort=False).nunique(dropna=False) > 1).any():
            out.append(col)
            grouped[col] = values.astype(object).where(df[col].notna(), "")
        elif values.nunique() > 1:  # two values (not one and rows it does not apply to), never within a group:
            # one more key splits nothing, and shows it (batch 64 with Adam beside batch 256 with SGD read as a
            # change of batch alone)
            shown.append(col)
    return out + shown


def summary_keys(summary: pd.DataFrame, keys: list[str]) -> list[str]:
    """The keys a summary of _collapse was grouped by: `keys` (those it has) and the settings that split it
    (its attrs, SPLIT_BY), read back rather than worked out again from the summary."""
    return [*(k for k in keys if k in summary.columns), *summary.attrs.get(SPLIT_BY, ())]


def unshown_keys(summary: pd.DataFrame, columns) -> list[str]:
    """The keys of `summary` a terminal showing `columns` must add so that no two of its rows read alike: the
    settings that split it (SPLIT_BY), then each key it was grouped by (GROUPED_BY) that tells apart rows the
    shown keys do not (a section's columns left out compile_mode, num_classes, devices: rows of two compile
    modes, of 10 and 1000 classes, of 1 and 2 devices were printed as one configuration's, nothing apart)."""
    out = [k for k in summary.attrs.get(SPLIT_BY, ()) if k not in columns]
    keys = [k for k in summary.attrs.get(GROUPED_BY, ()) if k in summary.columns]
    cell = {k: hashable(summary[k]).astype(object).where(summary[k].notna(), "") for k in keys}
    for k in keys:
        if k in columns or k in out:
            continue
        by = [cell[c] for c in keys if c in columns or c in out] or [pd.Series(0, index=summary.index)]
        if (cell[k].groupby(by, sort=False).nunique() > 1).any():
            out.append(k)
    return out


def varying(df: pd.DataFrame, keys) -> list[str]:
    """Those of `keys` that `df` has and that take two values or more in it (a missing value counts as one)."""
    return [k for k in keys if k in df.columns and hashable(df[k]).nunique(dropna=False) > 1]


def hashable(s: pd.Series) -> pd.Series:
    """`s` with its lists and dicts as their JSON texts (a list-valued setting, e.g. lr_grid, can be grouped)."""
    if s.dtype != object or not s.map(lambda v: isinstance(v, (list, dict))).any():
        return s
    return s.map(lambda v: json.dumps(v, sort_keys=True) if isinstance(v, (list, dict)) else v)


def settings_text(pairs: Iterable[tuple[str, Any]], sep: str = " ") -> str:
    """'setting=value' of each (setting, value) in `pairs` that has a value, joined by `sep`, the value as the
    tables print it (numfmt.fmt: 2 for 2.0, yes/no): how a figure's label, title or reference line names the
    settings that tell it apart (the one spelling; six figures had their own)."""
    return sep.join(f"{k}={text}" for k, text in ((k, numfmt.fmt(v)) for k, v in pairs) if text)


def distinct(v: pd.Series) -> str:
    """A group's distinct values, sorted and '/'-joined (a text column carried through _collapse)."""
    return "/".join(sorted(set(v.dropna().astype(str))))


def _collapse(df: pd.DataFrame, keys: list[str], metrics: list[str], spread: str | None = None,
              across: tuple[str, ...] = (), carry: dict[str, Any] | None = None) -> pd.DataFrame:
    """Median of each metric over repeats per `keys` group (and per any setting that varies in one, split_keys;
    `across`: its keys a caller then compares across); `repeats` = rows the median is over. Where some row is
    marked (a `caveat`), a group's clean rows only, else its marked ones, and the group's `caveat` says which.
    `carry`: other columns kept, each by its aggregation (a pandas name such as "first", or a function such as
    `distinct`)."""
    named = keys
    keys = split_keys(df, keys, across)
    metrics = [m for m in metrics if m in df.columns]
    if df.empty or not metrics:
        return pd.DataFrame(columns=[*keys, "repeats", *metrics])
    flagged = CAVEAT in df.columns and caveats.marked(df[CAVEAT]).any()
    df = df.assign(**{k: hashable(df[k]) for k in keys})
    df = caveats.split(df, keys) if flagged else df
    for m in metrics:  # metrics may arrive as object columns (None where a row lacks them)
        if df[m].map(lambda v: isinstance(v, bool)).any():
            df[m] = df[m].map(lambda v: None if v is None else bool(v)).astype("boolean")
        else:
            df[m] = pd.to_numeric(df[m], errors="coerce")
    g = df.groupby(keys, dropna=False, sort=True)
    out = pd.DataFrame({m: (g[m].max() if str(df[m].dtype) == "boolean" else g[m].median()) for m in metrics})
    out.insert(0, "repeats", g.size())
    if spread and spread in df.columns:
        out[f"{spread}_min"] = g[spread].min()
        out[f"{spread}_max"] = g[spread].max()
    if flagged:
        out[CAVEAT] = g[CAVEAT].first()
    for col, how in (carry or {}).items():
        if col in df.columns:
            out[col] = g[col].agg(how)
    out = out.reset_index()
    fam_rank = {f: i for i, f in enumerate(family_names())}  # the registry's order: vit, bit, hybrid, ...
    if "family" in out:
        out = out.sort_values(by=["family", *[k for k in keys if k != "family"]],
                              key=lambda s: s.map(fam_rank) if s.name == "family" else s, kind="stable")
    out = out.reset_index(drop=True)
    out.attrs[SPLIT_BY] = [k for k in keys if k not in named]  # shown beside a section's columns in a terminal
    out.attrs[GROUPED_BY] = list(keys)  # those that tell rows apart too (unshown_keys)
    return out


THROUGHPUT_KEYS = ["model", "family", "backend", "task", "device", "devices", "parallelism", "precision",
                   "compile", "compile_mode", "timing", "resolution", "batch_size"]
THROUGHPUT_METRICS = ["img_per_s", "step_ms_median", "step_ms_p90", "step_ms_iqr", "step_cv", "first_step_s",
                      "compile_s", "peak_mem_mib", "model_tflops_per_s", "mfu", "batch_size_achieved"]


def throughput(ok: pd.DataFrame, across: tuple[str, ...] = (),
               carry: dict[str, Any] | None = None) -> pd.DataFrame:
    """infer/train throughput per configuration (median over repeats; img_per_s_min/max over repeats). `across`:
    the keys a caller compares across (split_keys); `carry`: as _collapse's."""
    return _collapse(ok, THROUGHPUT_KEYS, _present(ok, THROUGHPUT_METRICS), spread="img_per_s", across=across,
                     carry=carry)


# (qualifier, the metric it qualifies): the bench metrics' Metric.bounded_by (memory_kind beside peak_mem_mib,
# compile_cached beside compile_s), as compare and history read them
_QUALIFIERS = tuple((q, m.name) for m in BENCH_METRICS for q in m.bounded_by)


def throughput_table(ok: pd.DataFrame) -> pd.DataFrame:
    """The report's throughput section: `throughput`, and where the rows' memory kinds differ, each row's beside
    its peak_mem_mib (peak memory of two kinds is two quantities: CUDA-graph replays' reserved peak, XLA's plan,
    an allocator's peak; vitbench.backends.kinds.MemoryKind); where some compiles came from the compile cache and
    some did not, each row's `compile_cached` beside its compile_s (a cold compile's 0.35 s and a cache load's
    0.10 s read as one median of 0.22 s, neither; compare and history keep them apart)."""
    carry = {col: distinct for col, _ in _QUALIFIERS if col in ok and ok[col].dropna().astype(str).nunique() >= 2}
    out = throughput(ok, carry=carry or None)
    for col, beside in _QUALIFIERS:
        if col in out and beside in out:  # beside the number it qualifies
            out.insert(out.columns.get_loc(beside) + 1, col, out.pop(col))
    return out


def peak_throughput(ok: pd.DataFrame) -> pd.DataFrame:
    """The best batch size per (model, backend, task, precision, compile, resolution): the paper's 'peak
    inference speed' (Figure 12, left) picks the fastest batch for each input size; the fastest of the batches
    whose value is not marked (vitbench.report.caveats) where there is one."""
    t = throughput(ok, across=("batch_size",))
    if t.empty:
        return t
    keys = [k for k in summary_keys(t, THROUGHPUT_KEYS) if k != "batch_size"]
    t = t[t["img_per_s"].notna()]
    rank = t.assign(_marked=caveats.marked(t[CAVEAT]) if CAVEAT in t else False)
    rank = rank.sort_values(["_marked", "img_per_s"], ascending=[True, False], kind="stable")
    best = rank.groupby(keys, dropna=False, sort=False).head(1).index
    return t.loc[sorted(best)].reset_index(drop=True)


MAX_BATCH_KEYS = ["model", "family", "backend", "mode", "device", "devices", "parallelism", "precision", "compile",
                  "resolution"]
# the flag that makes the largest batch a lower bound (the search's cap), as its metric declares it
MAX_BATCH_BOUND = next(m.lower_bound_when for m in MaxBatch.metrics if m.name == MaxBatch.headline)


def max_batch(ok: pd.DataFrame) -> pd.DataFrame:
    """The largest batch per configuration (median over repeats); `max_batch` as it reads: '\u2265 N' where the
    search reached its cap in every repeat (a lower bound, not the largest batch: `capped`), 'N (capped in k of
    n)' where in some (a median of found batches and lower bounds; repeats 100 and a cap of 128 read '\u2265 114'
    before), else N. process_peak_mib, the probe's whole-process peak, beside memory_limit_mib: it is what the
    search held to the limit (vitbench.measure.max_batch.run_probe), not peak_mem_mib, the steps' own peak (rows
    from before it was recorded have none, and no column)."""
    measured = ["max_batch_size", "peak_mem_mib", "process_peak_mib", "memory_limit_mib", "probes", "search_s"]
    bound = MAX_BATCH_BOUND
    if bound in ok:
        ok = ok.assign(**{bound: ok[bound].map(caveats.true).astype(int)})
    out = _collapse(ok, MAX_BATCH_KEYS, _present(ok, measured), carry={bound: "sum"})
    if not out.empty and "max_batch_size" in out:
        n_capped = out.pop(bound) if bound in out else pd.Series(0, index=out.index)
        if bound in ok:
            out.insert(out.columns.get_loc("max_batch_size") + 1, bound, n_capped == out["repeats"])
        out.insert(out.columns.get_loc("max_batch_size"), "max_batch",
                   ["" if pd.isna(v) else f"\u2265 {v:g}" if k == n else f"{v:g} (capped in {k} of {n})" if k
                    else f"{v:g}" for v, k, n in zip(out["max_batch_size"], n_capped, out["repeats"])])
    return out


def flops(ok: pd.DataFrame) -> pd.DataFrame:
    if ok.empty or "gmacs" not in ok:
        return _collapse(ok, ["model"], ["gflops"])
    counted = sorted(c for c in ok.columns if c.startswith(("gflops_", "rel_diff_")) and ok[c].notna().any())
    return _collapse(ok, ["model", "family", "backend", "resolution", "num_classes"],
                     _present(ok, ["params_m", "tokens", "gmacs", "gflops", *counted]))


def accuracy(ok: pd.DataFrame) -> pd.DataFrame:
    """Transfer results with their pre-training compute when known."""
    if ok.empty or "accuracy" not in ok.columns:
        return pd.DataFrame(columns=["model", "kind", "accuracy"])
    keys = [c for c in ("model", "family", *TEACHER_FIELDS, "kind", "dataset", "shots", "pretrain_steps",
                        "resolution", "backend")
            if c in ok.columns]  # pretrain_steps: one upstream budget per row (paper Table 6: epochs)
    return _collapse(ok, keys, _present(ok, ["accuracy", "accuracy_std", "pretrain_exaflops", "exaflops",
                                             "pretrain_epochs", "images_seen"]))


def distilled(df: pd.DataFrame) -> pd.Series:
    """Whether each row's upstream was pre-trained with a teacher (DeiT distillation)."""
    if "teacher" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["teacher"].notna()


def distillation(ok: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per student and teacher across seeds (mean, std, min, max, n): upstream test accuracy (kind
    pretrain, with the teacher's test and train accuracy and the student's test agreement with it) and transfer
    accuracy (fewshot, finetune), with each row's pre-training compute; for a distilled upstream, its gain over
    the same model without a teacher, seed by seed. Empty unless some row had a teacher."""
    if ok.empty or "accuracy" not in ok.columns or not distilled(ok).any():
        return pd.DataFrame()
    df = ok.copy()
    df["accuracy"] = pd.to_numeric(df["accuracy"], errors="coerce")
    keys = [c for c in ("model", "family", *TEACHER_FIELDS, "kind", "dataset", "shots", "pretrain_steps",
                        "resolution", "backend") if c in df.columns]
    g = df.groupby(keys, dropna=False, sort=False)
    out = pd.DataFrame({"seeds": g["accuracy"].count(), "accuracy_mean": g["accuracy"].mean(),
                        "accuracy_std": g["accuracy"].std(ddof=1), "accuracy_min": g["accuracy"].min(),
                        "accuracy_max": g["accuracy"].max()})
    for m in ("exaflops", "teacher_exaflops", "teacher_accuracy", "teacher_train_accuracy", "teacher_agreement"):
        if m in df.columns and df[m].notna().any():
            out[m] = g[m].apply(lambda s: pd.to_numeric(s, errors="coerce").mean())
    out = out.reset_index()
    if "seed" in df.columns:
        out = out.merge(_paired_gain(df, keys), on=keys, how="left")
    from vitbench.tasks import kind_metrics

    kind_rank = {k: i for i, k in enumerate(kind_metrics())}  # the tasks' order: upstream before its transfers
    order = [c for c in ("kind", "shots", "model", "teacher", "distillation") if c in out.columns]
    return out.sort_values(order, key=lambda s: s.map(kind_rank) if s.name == "kind" else s,
                           na_position="first", kind="stable").reset_index(drop=True)


def _paired_gain(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per distilled upstream: accuracy minus that of the same model without a teacher trained with the same
    seed (same initialisation and batches), averaged over the seeds both have (`gain_vs_no_teacher`), and on
    how many of them it is positive (`gain_wins`, 'k/n')."""
    base = [k for k in keys if k not in TEACHER_FIELDS]
    plain = df[~distilled(df)][[*base, "seed", "accuracy"]]
    pairs = df[distilled(df)].merge(plain, on=[*base, "seed"], suffixes=("", "_plain"))
    if pairs.empty:
        return pd.DataFrame(columns=[*keys, "gain_vs_no_teacher", "gain_wins"])
    pairs["gain"] = pairs["accuracy"] - pairs["accuracy_plain"]
    g = pairs.groupby(keys, dropna=False)["gain"]
    wins = g.apply(lambda d: f"{int((d > 0).sum())}/{int(d.notna().sum())}")
    return pd.DataFrame({"gain_vs_no_teacher": g.mean(), "gain_wins": wins}).reset_index()


def backend_pivot(ok: pd.DataFrame) -> pd.DataFrame:
    """img/s side by side per backend for configurations measured on more than one, with each backend's ratio to
    the default backend's (the first registered)."""
    from vitbench.backends.base import default_backend

    t = throughput(ok, across=("backend",))
    if t.empty or t["backend"].nunique() < 2:
        return pd.DataFrame()
    keys = [k for k in summary_keys(t, THROUGHPUT_KEYS) if k != "backend"]
    # one value per configuration and backend (the throughput table's): no aggregation happens here
    p = t.pivot_table(index=keys, columns="backend", values="img_per_s", aggfunc="first", dropna=False)
    p = p.dropna(thresh=2)
    if p.empty:
        return pd.DataFrame()
    ref = default_backend()
    backends = list(p.columns)
    p.columns = [f"img_per_s_{b}" for b in backends]
    if ref in backends:
        for b in backends:
            if b != ref:
                p[f"{b}_vs_{ref}"] = ratio(p[f"img_per_s_{b}"], p[f"img_per_s_{ref}"])
    if CAVEAT in t:  # each backend's caveat; a ratio with a marked side is marked (vitbench.report.caveats)
        c = t.assign(**{CAVEAT: t[CAVEAT].fillna("")}).pivot_table(index=keys, columns="backend", values=CAVEAT,
                                                                   aggfunc="first", dropna=False)
        c = c.reindex(index=p.index, columns=backends).fillna("")
        p[CAVEAT] = [caveats.combine("", **dict(zip(backends, row))) for row in c.itertuples(index=False)]
    return p.reset_index()


def ratio(num: pd.Series, den: pd.Series) -> pd.Series:
    """num / den, NaN (shown blank) where it is not a finite number: two speeds that each pass the row check
    (1e308 and 1e-300 img/s) divided to inf, printed as a result."""
    import numpy as np

    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        out = pd.to_numeric(num, errors="coerce") / pd.to_numeric(den, errors="coerce")
    return out.where(np.isfinite(out))


def failures(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty or "status" not in df:
        return pd.DataFrame(columns=["key", "status"])
    bad = df[df["status"] != "ok"]
    cols = [c for c in ("key", "model", "backend", "task", "resolution", "batch_size", "repeat", "status",
                        "error_type", "error_message") if c in bad.columns]
    out = bad[cols].copy()
    if "error_message" in out:
        out["error_message"] = out["error_message"].fillna("").map(  # cut where it says so (was mid-word)
            lambda s: clip(str(s).strip().splitlines()[0], 160) if str(s).strip() else "")
    return out.reset_index(drop=True)


def flag_shared_host(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with a `shared_host` column: how many other trials ran on the row's host while it ran
    (vitbench.executors.overlap); a speed measured with company may be shared. 0 where the row says none."""
    out = df.copy()
    col = out[OVERLAPPED] if OVERLAPPED in out else pd.Series([None] * len(out), index=out.index, dtype=object)
    out["shared_host"] = col.map(lambda v: len(caveats.overlaps(v))).astype(int)
    return out


def _who(o) -> str:
    """One overlap as the report prints it: this sweep's own trial, or another process's (pid, command, cwd)."""
    if not isinstance(o, dict):  # a row written before overlaps named their process
        return f"{o} (origin not recorded)"
    if o.get("own"):
        return f"own sweep: {o.get('trial')}"
    cmd = o.get("cmd") or "?"
    return (f"another process: {o.get('trial')} (run {o.get('run_id') or '?'}, "
            f"pid {o.get('launcher_pid') or '?'}: {cmd[:80]}{' ...' if len(cmd) > 80 else ''}; "
            f"cwd {o.get('cwd') or '?'})")


def shared_host(df: pd.DataFrame) -> pd.DataFrame:
    """ok rows measured while other trials ran on the same host (flagged in the report): how many of this sweep's
    own trials and of other processes' overlapped each, and which (the first three)."""
    if df.empty or "shared_host" not in df or "status" not in df or OVERLAPPED not in df:
        return pd.DataFrame(columns=["key", "shared_host"])
    rows = df[(df["status"] == "ok") & (df["shared_host"] > 0)]
    cols = [c for c in ("key", "model", "backend", "task", "resolution", "batch_size", "repeat", "runner.host",
                        "shared_host") if c in rows.columns]
    out = rows[cols].copy()
    over = rows[OVERLAPPED].map(caveats.overlaps)
    out["own_sweep"] = over.map(lambda v: sum(1 for o in v if isinstance(o, dict) and o.get("own"))).astype(int)
    out["other_process"] = (out["shared_host"] - out["own_sweep"]).astype(int)
    out["overlapped"] = over.map(lambda v: "; ".join(_who(o) for o in v[:3]) + (" ..." if len(v) > 3 else ""))
    return out.reset_index(drop=True)


def status_counts(df: pd.DataFrame) -> pd.DataFrame:
    if df.empty:
        return pd.DataFrame(columns=["task", "status", "trials"])
    return (df.groupby(["task", "status"], dropna=False).size().rename("trials").reset_index()
            if "task" in df else df.groupby("status", dropna=False).size().rename("trials").reset_index())


