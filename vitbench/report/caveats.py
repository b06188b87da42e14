"""Which measurements the report marks, and how marked rows enter its summaries (tables, plots, ratios).

A timed row (one that carries the `unstable` flag, vitbench.measure.throughput) is *marked* when
- its own noise flags say it may be unstable (`unstable`; `noise` says why: the samples' CV, other processes'
  CPU load during the timed steps, few or short samples, samples drifting while timed, the GPU slowing down), or
- other trials ran on its host while it ran (`runner.overlapped`, vitbench.executors.overlap): co-scheduled,
  its speed may be shared.

A summary never mixes marked and clean rows silently: a group (one configuration's repeats) that has a clean row
is summarised from its clean rows only and says how many marked rows it left out; a group of marked rows only is
summarised from them, and its value is marked. The `caveat` column says which, in every table whose rows have
one (empty where nothing is marked); MARK starts the caveat of a marked value; plots ring marked values red
(`mark_caveats`, with `caveat_legend_entry`) and LEGEND is the line under a table that explains its caveats.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from vitbench.measure.noise import CV_LIMIT
from vitbench.measure.noise import UNSTABLE as UNSTABLE_FLAG  # the timed row's flag (history reads it from here)
from vitbench.record import OVERLAPPED as OVERLAPPED_KEY

CAVEAT = "caveat"  # the column: per trial row, and per summary row
MARK = "\u26a0"  # starts a marked value's caveat: the value rests on unstable or co-scheduled rows only
UNSTABLE = "unstable"  # the reason a caveat names (a word shown, not the flag's name: UNSTABLE_FLAG)
SHARED = "shared host"
OVERLAPPED = f"runner.{OVERLAPPED_KEY}"  # the tidy column: other trials that ran on the row's host meanwhile
LEGEND = (f"{MARK} in caveat: the value rests only on rows flagged unstable (their `noise`: CV >= "
          f"{CV_LIMIT:.2f}, other processes' load, few or short samples, samples that drift, the GPU slowing "
          "down) or measured while other trials ran on the same host (shared host): read it as a rough figure, "
          "not a measurement to compare; 'N ... left out': the value is the clean repeats' and N flagged ones "
          "were not used. A ratio is marked when either side is.")


def overlaps(v) -> list:
    """A row's `runner.overlapped` cell as a list (a list, tuple or array from parquet; [] if missing)."""
    return [] if v is None or isinstance(v, (str, float)) else list(v)


CAVEAT_STYLE = {"marker": "o", "facecolors": "none", "edgecolors": "red", "linewidths": 1.4}
CAVEAT_LABEL = "red ring: unstable or shared-host speed (tables: caveat)"


def mark_caveats(ax, x, y, size: float = 170) -> bool:
    """Ring the points (x, y) red: speeds whose value rests on unstable or co-scheduled rows only. True when some
    point was ringed (the panel's legend then needs `caveat_legend_entry`)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size == 0:
        return False
    ax.scatter(x, y, s=size, zorder=5, **CAVEAT_STYLE)
    return True


def caveat_legend_entry(ax) -> None:
    ax.scatter([], [], s=90, label=CAVEAT_LABEL, **CAVEAT_STYLE)


def true(v) -> bool:
    """A flag cell read back from JSON or parquet (bool, numpy bool, 0/1, missing) as a bool."""
    return isinstance(v, (bool, np.bool_, int, float, np.integer, np.floating)) and v == v and bool(v)


def reasons(unstable, overlapped) -> str:
    """One row's caveat from its `unstable` cell and its `runner.overlapped` cell: '' (clean, or not a timed row:
    no `unstable` at all), or the reasons it is marked ('unstable', 'shared host', both). The report's tables
    (row_caveats) and the history's points (vitbench.history.collect) mark alike through it."""
    if unstable is None or unstable is pd.NA or (isinstance(unstable, float) and unstable != unstable):
        return ""
    return ", ".join(r for r, on in ((UNSTABLE, true(unstable)), (SHARED, len(overlaps(overlapped)) > 0)) if on)


def row_caveats(df: pd.DataFrame) -> pd.Series:
    """Per row: its `reasons`."""
    unstable = df[UNSTABLE_FLAG] if UNSTABLE_FLAG in df else pd.Series(None, index=df.index, dtype=object)
    over = df[OVERLAPPED] if OVERLAPPED in df else pd.Series(None, index=df.index, dtype=object)
    return pd.Series([reasons(u, o) for u, o in zip(unstable.tolist(), over.tolist())], index=df.index,
                     dtype=object)


def with_caveats(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with the per-row `caveat` column (MARK and the reasons, or '') when some row is marked."""
    reasons = row_caveats(df)
    if not (reasons != "").any():
        return df
    return df.assign(**{CAVEAT: reasons.map(lambda r: f"{MARK} {r}" if r else "")})


def marked(caveat: pd.Series) -> pd.Series:
    """Whether each caveat marks its value (MARK first), as a boolean Series."""
    return caveat.fillna("").astype(str).str.startswith(MARK)


def split(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The rows a summary by `keys` uses, their `caveat` now their group's: a group with a clean row uses its
    clean rows ('' or 'N unstable left out'); a group of marked rows only uses them all and is marked. Linear in
    the rows: one pass over the marked rows' reasons, the counts from groupby."""
    flagged = marked(df[CAVEAT])
    gid = df.groupby(keys, dropna=False, sort=False).ngroup() if keys else pd.Series(0, index=df.index)
    has_clean = (~flagged).groupby(gid).transform("any")
    size, n_out, clean = gid.groupby(gid).size(), flagged.groupby(gid).sum(), (~flagged).groupby(gid).any()
    seen: dict = {}  # group -> the reasons its marked rows give
    for g, c in zip(gid[flagged], df.loc[flagged, CAVEAT]):
        seen.setdefault(g, set()).update(reason_set(c))
    text = {}  # the counts as plain numbers (a Series' item access was 3/4 of split: issue 51)
    for g, n, out, any_clean in zip(size.index, size.tolist(), n_out.reindex(size.index).tolist(),
                                    clean.reindex(size.index).tolist()):
        why = join_reasons(seen.get(g, ()))
        if not any_clean:
            text[g] = f"{MARK} {why} ({n} of {n} rows)"
        else:
            text[g] = f"{int(out)} {why} left out" if out else ""
    return df[~flagged | ~has_clean].assign(**{CAVEAT: gid.map(text)})


def reason_set(caveat) -> set[str]:
    """The reasons a caveat text names, MARK and blanks dropped (join_reasons' inverse)."""
    return {r.strip() for r in str(caveat or "").removeprefix(MARK).split(",") if r.strip()}


def join_reasons(seen) -> str:
    """The distinct reasons `seen` in marked caveats ('unstable', 'shared host' or both), in that order (the
    history's points name theirs through it too)."""
    return ", ".join(r for r in (UNSTABLE, SHARED) if r in seen) or UNSTABLE


def combine(own: str, **others: str) -> str:
    """One caveat for a value computed from several summaries (a ratio): marked when any part is, naming the
    other parts (`others`: name -> that part's caveat)."""
    def bare(c: str) -> str:
        return c.removeprefix(MARK).strip()

    parts = [bare(own)] if own else []
    parts += [f"{name}: {bare(c)}" for name, c in others.items() if isinstance(c, str) and c]
    any_marked = any(isinstance(c, str) and c.startswith(MARK) for c in (own, *others.values()))
    return f"{MARK} {'; '.join(parts)}" if any_marked else "; ".join(parts)


def marked_rows(df: pd.DataFrame) -> int:
    """How many ok rows of `df` (the trials) are marked."""
    ok = df[df["status"] == "ok"] if "status" in df else df.iloc[0:0]
    return int((row_caveats(ok) != "").sum())


def calibration_line(cal: pd.DataFrame | None) -> str | None:
    """The report's line on the run's calibration rows (dense matmul TFLOP/s): their median and range, over the
    runs measured while other processes left the machine alone where there are such runs (vitbench.measure.load:
    BUSY_CORES), saying how many busy runs were left out; marked when every run was busy. Calibrations of other
    backends, devices, precisions, thread counts or matrix sizes are never pooled: a line gives each its own median
    (the GPU check's line pooled fp32, tf32 and bf16 of two backends: "median 44.51 TFLOP/s, range 30.04 to
    126.2"). Only ok rows are read."""
    from vitbench.measure.load import BUSY_CORES, OTHER_LOAD, busy as shared
    from vitbench.tasks.calibration import CONDITIONS, LEGACY_N, METRIC, SIZE

    if cal is None or cal.empty or METRIC not in cal:
        return None
    if "status" in cal:  # a failed calibration's number is no reading of the device (an error row's 10x one was
        cal = cal[cal["status"] == "ok"]  # the line's median); compare --normalize reads ok rows only too
    c = cal.assign(v=pd.to_numeric(cal[METRIC], errors="coerce")).dropna(subset=["v"])
    if c.empty:
        return None
    # the matrix size: the row's metric, else its config's (tidy: `config.<name>` beside a metric's name), else
    # LEGACY_N (a row from before either was kept); a GPU's n=8192 reads ~7x its n=1024, never one median
    size = pd.Series(LEGACY_N, index=c.index, dtype=float)
    for col in (f"config.{SIZE}", SIZE):
        if col in c:
            size = pd.to_numeric(c[col], errors="coerce").fillna(size)
    c = c.assign(**{SIZE: size.astype(int)})
    busy = c[OTHER_LOAD].map(lambda x: shared(x, missing=False)).astype(bool) if OTHER_LOAD in c else \
        pd.Series(False, index=c.index)  # a row without the load (from before it was kept) is counted
    apart = [k for k in (*CONDITIONS, SIZE) if k in c and c[k].astype(str).nunique() > 1]
    if apart:  # each group its own median, its own busy runs left out (a group that was all busy: marked)
        parts = []
        for name, g in c.groupby([c[k].astype(str) for k in apart], sort=True):
            b = busy.loc[g.index]
            v = (g[~b] if (~b).any() else g)["v"]
            how = (", every one shared the machine" if b.all() else
                   f", {int(b.sum())} busy left out" if b.any() else "")
            parts.append(f"{MARK + ' ' if b.all() else ''}{' '.join(name)} {v.median():.4g} ({v.min():.4g} to "
                         f"{v.max():.4g}, {len(v)} run(s){how})")
        return (f"calibration (dense matmul TFLOP/s by {', '.join(apart)}: median (range, runs); busy: other "
                f"processes used >= {BUSY_CORES:g} cores): {'; '.join(parts)}")
    used = c[~busy] if (~busy).any() else c
    vals = used["v"]
    line = (f"calibration (dense matmul, {len(vals)} run(s)): median {vals.median():.4g} TFLOP/s, "
            f"range {vals.min():.4g} to {vals.max():.4g}")
    if busy.all():
        return (f"{MARK} {line}; every run shared the machine (other processes used >= {BUSY_CORES:g} cores "
                "meanwhile)")
    if busy.any():
        return (f"{line}; {int(busy.sum())} run(s) measured while other processes used >= {BUSY_CORES:g} cores "
                "left out")
    return line
