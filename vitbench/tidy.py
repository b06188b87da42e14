"""Which rows of results count, and the tidy DataFrame of them.

`select`: per trial key and results directory the latest row, each measurement once (a copy of a row read before
is left out); `load` / `load_each`: those rows as one flat DataFrame, read one line at a time
(vitbench.frames). The store itself (writing, claims) is vitbench.store, reading records vitbench.rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from vitbench.errors import VitbenchWarning, clip
from vitbench.record import STANDALONE, Record, row_state, supersedes
from vitbench.rows import iter_records
from vitbench.store import TRIAL_ID_COLUMNS


def _flatten(rec: Record, declared: dict[str, dict] | None = None) -> dict[str, Any]:
    """One flat row. Names: the config's fields, then the metrics (a metric named like a field becomes
    'metric.<name>'), except that a metric the record's task declares keeps its own name and a config field of
    that name becomes 'config.<name>': max_batch's cap `max_batch_size` beside the largest batch found, also
    `max_batch_size` (the report showed the cap as the result: 4,096 for 2,127 on an H200). `declared`:
    vitbench.tasks.kind_metrics(), read once by a caller flattening many rows."""
    from vitbench.tasks import kind_metrics

    measured = (kind_metrics() if declared is None else declared).get(rec.kind, {})
    row: dict[str, Any] = {"key": rec.key, "study": rec.study, "run_id": rec.run_id, "repeat": rec.repeat,
                           "kind": rec.kind, "status": rec.status.value, "study_sha": rec.study_sha}
    for k, v in rec.measured_config.items():
        if k not in row:
            row[f"config.{k}" if k in measured else k] = v
    for k, v in rec.metrics.items():
        row[f"metric.{k}" if k in row else k] = v
    row["error_type"] = rec.error.type if rec.error else None
    row["error_message"] = rec.error.message if rec.error else None
    row["error_tail"] = rec.error.tail if rec.error else None
    row.update(started_at=rec.started_at, finished_at=rec.finished_at, method_version=rec.method_version)
    for k, v in rec.env.items():
        row[f"env.{k}"] = v if not isinstance(v, (dict, list)) else json.dumps(v)
    for k, v in rec.runner.items():
        row[f"runner.{k}"] = v
    row["source"] = rec.source
    row["raw"] = rec.raw
    return row


class _Once:
    """Each measurement once (Record.measurement), among the rows kept (the latest of each trial and directory):
    the same measurement kept in another directory too (one run copied beside itself) is counted in the first only,
    whatever the directories' names, and a row no sweep wrote (STANDALONE: no trial key for `latest` to choose
    by) in the same directory too (its line copied twice was two runs, a between-run sd of 0); `warn` says where
    the copies were."""

    def __init__(self):
        self.copies: dict[str | None, set] = {}  # directory -> the measurements it held copies of

    def first(self, items: Iterable[tuple[Any, tuple | None, str | None]]) -> list:
        """The items (item, measurement, directory), in reading order, less the later copies of a measurement in
        other directories (within one, rows are never copies: `latest` decides between them, or all are
        asked for)."""
        seen: dict[tuple, str | None] = {}  # measurement -> the directory that holds it first
        out = []
        for item, ident, source in items:
            if ident is not None and (ident in seen and ident[0] == STANDALONE
                                      or seen.setdefault(ident, source) != source):
                self.copies.setdefault(source, set()).add(ident)
                continue
            out.append(item)
        return out

    def warn(self) -> None:
        if self.copies:
            n = {d: len(v) for d, v in self.copies.items()}
            where = ", ".join(f"{clip(str(d), 200)} ({k})" for d, k in list(n.items())[:5])
            more = " ..." if len(n) > 5 else ""
            warnings.warn(VitbenchWarning(
                f"{sum(n.values())} row(s) are copies of rows read before them (the same sweep run, trial, repeat "
                f"and start; a command's row: the same start, finish, config and metrics), counted once: "
                f"{where}{more}"), stacklevel=3)


def select(records: Iterable[Record], kinds: Iterable[str] | str | None = None,
           latest: bool = True) -> list[Record]:
    """Filter records by kind (None: every kind but the calibration's; 'all': everything) and keep, per trial key
    and results directory, only the latest record by finish time (a re-run after --force or an interruption
    supersedes the older row, but one that ended without an outcome never supersedes one with: record.supersedes;
    rows from several shards interleave in time; other directories are other runs, but a copy of a row kept in
    another directory is left out: _Once)."""
    from vitbench.tasks import Role, kinds_with_role

    recs = list(records)
    if kinds is None:
        calibration = kinds_with_role(Role.CALIBRATION)
        recs = [r for r in recs if r.kind not in calibration]
    elif kinds != "all":
        wanted = {kinds} if isinstance(kinds, str) else set(kinds)
        recs = [r for r in recs if r.kind in wanted]
    if latest:
        last: dict[tuple, int] = {}
        for i, r in enumerate(recs):
            if r.key:
                ident = (r.source, r.key)
                if ident not in last or supersedes(row_state(r), row_state(recs[last[ident]])):
                    last[ident] = i
        recs = [r for i, r in enumerate(recs) if not r.key or last[(r.source, r.key)] == i]
    once = _Once()
    recs = once.first((r, r.measurement, r.source) for r in recs)
    once.warn()
    return recs


def load(path: str | os.PathLike, kinds: Iterable[str] | str | None = None, latest: bool = True):
    """Results (a store directory or a .jsonl file) -> tidy DataFrame, one row per trial.

    Columns: key, study, run_id, repeat, kind, status, the trial config (model, backend, task, resolution,
    batch_size, precision, ...), every metric under its own name with its unit (img_per_s, step_ms_median,
    peak_mem_mib, gflops, max_batch_size, ...; a metric that shares a config field's name becomes
    'metric.<name>', unless the task declares it: then the field becomes 'config.<name>', _flatten),
    error_type/error_message/error_tail, timestamps, env.* and runner.* columns, `source` (the
    directory the row came from) and `raw` (the raw per-step timings etc., a dict per row). `kinds`: None =
    trials only (no calibration rows), 'all', or an iterable such as ('calibration',). `latest`: one row per key
    and directory (the last one finished).

    The records are read one line at a time and go straight into columns (vitbench.frames), each record dropped
    once flattened: memory holds the rows' values once (equal strings shared), never every parsed record. The
    frame is the one `pd.DataFrame(rows)` makes of the rows `select` keeps (the same columns, order and dtypes).
    """
    return load_each(path, (kinds,), latest)[0]


def load_each(path: str | os.PathLike, kinds: Sequence[Iterable[str] | str | None], latest: bool = True,
              raw_json: bool = False) -> list:
    """[load(path, k, latest) for k in kinds], the results read once (the report's trials and calibration).

    raw_json: each row's `raw` as JSON text, json.dumps(raw, default=str) (what the report's trials files hold),
    not a dict: at 100,000 rows some 90 MB of text instead of some 320 MB of Python lists and dicts."""
    import pandas as pd

    from vitbench.frames import Columns  # pandas: imported by the readers of frames, never by a sweep's workers

    from vitbench.tasks import kind_metrics, row_check

    # per kind filter: its columns, the latest row of each (source, key), the rows superseded, each row's
    # (measurement, source) for _Once
    wanted = [(_kind_filter(k), Columns(), {}, set(), []) for k in kinds]
    once, declared = _Once(), kind_metrics()
    for rec in iter_records(path, row_check()):
        row = None
        for keep, cols, last, superseded, idents in wanted:  # last: (source, key) -> (row, its row_state)
            if not keep(rec.kind):
                continue
            if latest and rec.key:
                ident, state = (rec.source, rec.key), row_state(rec)
                if ident in last:
                    if not supersedes(state, last[ident][1]):
                        continue  # the row kept is the trial's state (select's rule)
                    superseded.add(last[ident][0])
                last[ident] = (cols.n, state)
            if row is None:
                row = _flatten(rec, declared)
                if raw_json:
                    row["raw"] = json.dumps(row["raw"], default=str)
            cols.add(row)
            idents.append((rec.measurement, rec.source))
    out = []
    for _, cols, _, superseded, idents in wanted:
        kept = once.first((i, *idents[i]) for i in range(cols.n) if i not in superseded)
        df = cols.frame(kept if len(kept) < cols.n else None)
        if df.empty:
            df = pd.DataFrame(columns=[*TRIAL_ID_COLUMNS, "raw"])
        for col in cols.integer_columns if len(df) else ():  # a batch size stays 8 where others lack it, not 8.0
            with contextlib.suppress(TypeError, ValueError, OverflowError):  # past int64: left as it is
                df[col] = df[col].astype("Int64")
        out.append(df)
    once.warn()
    return out


def _kind_filter(kinds: Iterable[str] | str | None):
    """select's rule for `kinds` as a test of one record kind."""
    from vitbench.tasks import Role, kinds_with_role

    if kinds is None:
        calibration = kinds_with_role(Role.CALIBRATION)
        return lambda kind: kind not in calibration
    if kinds == "all":
        return lambda kind: True
    wanted = {kinds} if isinstance(kinds, str) else set(kinds)
    return lambda kind: kind in wanted
