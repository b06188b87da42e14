"""Where a sweep's time went: each trial's wall time split into start-up, compile, warm-up, timed steps and other.

Per row (seconds, from the row's own fields):
- wall: runner.wall_s (the executor's: the trial process's start to its result collected);
- start-up: runner.startup_s (process start to the trial's code: fork, imports) plus, for a timed step, the
  measurement's set-up before its first step (raw.budget_s.setup: framework import, device, model build, tracing
  less an ahead-of-time compile; vitbench.measure.throughput.budget);
- compile: raw.budget_s.compile (JAX's ahead-of-time compile, torch.compile's first-step compile; 0 for eager);
- warm-up: the first step and the warm-up steps (a lazy compile excluded); timed: the timed steps or windows;
- other: the rest of the wall time (memory and kernel read-outs, the MFU peak, a task that times no step: flops,
  max_batch, calibration spend their whole time there after start-up).
CACHED counts, per flag, the rows that took it from a cache rather than making it (metrics): `compile_cached`
the compiled code (persistent compile cache), `counted_cached` a flops row's counts (vitbench.value_cache).
"""

from __future__ import annotations

import json
import math

import pandas as pd

PARTS = ("startup_s", "compile_s", "warmup_s", "timed_s", "other_s")
CACHED = ("compile_cached", "counted_cached")  # the rows' own bool metrics (tasks COMPILE_CACHED, tasks/flops.py)
COLUMNS = ("backend", "task", "trials", "wall_s", *PARTS, *CACHED)


def _num(v) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) else 0.0


def row_budget(row) -> dict[str, float]:
    """One row's wall time in PARTS (see the module docstring); all 0 where the row has no wall time. `row`: a
    Series or a dict of the row's columns."""
    raw = row.get("raw")
    raw = json.loads(raw) if isinstance(raw, str) else raw  # the report loads raw as JSON text (tidy.load_each)
    b = raw.get("budget_s") if isinstance(raw, dict) and isinstance(raw.get("budget_s"), dict) else {}
    wall = _num(row.get("runner.wall_s"))
    out = {"wall_s": wall, "startup_s": _num(row.get("runner.startup_s")) + _num(b.get("setup")),
           "compile_s": _num(b.get("compile")), "warmup_s": _num(b.get("warmup")), "timed_s": _num(b.get("timed"))}
    out["other_s"] = max(0.0, wall - sum(out[p] for p in PARTS[:-1]))
    return out


def time_budget(df: pd.DataFrame) -> pd.DataFrame:
    """Seconds per (backend, task) and a total line: trials, wall, PARTS, and per CACHED flag the rows that took
    it from a cache."""
    if df.empty or "runner.wall_s" not in df:
        return pd.DataFrame(columns=list(COLUMNS))
    cols = [c for c in ("raw", "runner.wall_s", "runner.startup_s") if c in df]  # what row_budget reads
    parts = pd.DataFrame([row_budget(r) for r in df[cols].to_dict("records")], index=df.index)  # not iterrows:
    # a Series of every column per row was 7 % of a report of 10,000 rows (issue 51)
    keys = pd.DataFrame({"backend": df["backend"] if "backend" in df else None,
                         "task": df["task"] if "task" in df else df["kind"]}, index=df.index)
    keys = keys.fillna("-").astype(str)
    for flag in CACHED:
        cached = df[flag] if flag in df else pd.Series([None] * len(df), index=df.index)
        parts[flag] = cached.map(lambda v: v is True or v == 1.0).astype(int)
    parts["trials"] = 1
    table = pd.concat([keys, parts], axis=1).groupby(["backend", "task"], as_index=False).sum(numeric_only=True)
    total = {"backend": "all", "task": "all", **table.drop(columns=["backend", "task"]).sum().to_dict()}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    return table[list(COLUMNS)]  # unrounded: shown to 4 significant digits (numfmt), exact in CSV and Parquet
