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
A part a row does not say is unmeasured (NaN, a blank cell), never 0: a timed row without raw.budget_s (written
before it existed) has no compile, warm-up, timed or other part; a row without a wall time none at all; a value
that is not a finite number is none. A group's part is unmeasured where any of its rows' is.
"""

from __future__ import annotations

import json
import math

import pandas as pd

PARTS = ("startup_s", "compile_s", "warmup_s", "timed_s", "other_s")
CACHED = ("compile_cached", "counted_cached")  # the rows' own bool metrics (tasks COMPILE_CACHED, tasks/flops.py)
COLUMNS = ("backend", "task", "trials", "wall_s", *PARTS, *CACHED)


NOT_SAID = float("nan")


def _num(v, absent: float = NOT_SAID) -> float:
    """`v` as seconds; `absent` where the row leaves it out, NaN where it is not a finite number."""
    if v is None:
        return absent
    try:
        x = float(v)
    except (TypeError, ValueError):
        return NOT_SAID
    return x if math.isfinite(x) else NOT_SAID


def row_budget(row) -> dict[str, float]:
    """One row's wall time in PARTS (see the module docstring); unmeasured parts NaN. `row`: a Series or a dict
    of the row's columns."""
    raw = row.get("raw")
    raw = json.loads(raw) if isinstance(raw, str) else raw  # the report loads raw as JSON text (tidy.load_each)
    raw = raw if isinstance(raw, dict) else {}
    b = raw.get("budget_s")
    # a timed row says its steps' parts (budget_s; one written before it existed: unmeasured); a part a budget
    # leaves out, or a task that times no step, is 0 (its time "other")
    none = NOT_SAID if b is None and "step_s" in raw else 0.0
    b = b if isinstance(b, dict) else {}
    startup = _num(row.get("runner.startup_s"), 0.0) + _num(b.get("setup"), none)
    out = {"wall_s": _num(row.get("runner.wall_s")), "startup_s": startup,
           "compile_s": _num(b.get("compile"), none),
           "warmup_s": _num(b.get("warmup"), none), "timed_s": _num(b.get("timed"), none)}
    other = out["wall_s"] - sum(out[p] for p in PARTS[:-1])
    out["other_s"] = other if math.isnan(other) else max(0.0, other)
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
    table = pd.concat([keys, parts], axis=1).groupby(["backend", "task"], as_index=False).sum(skipna=False)
    parts_sum = table.drop(columns=["backend", "task"]).sum(skipna=False)  # a part unknown in a row: unknown
    total = {"backend": "all", "task": "all", **parts_sum.to_dict()}
    table = pd.concat([table, pd.DataFrame([total])], ignore_index=True)
    return table[list(COLUMNS)]  # unrounded: shown to 4 significant digits (numfmt), exact in CSV and Parquet
