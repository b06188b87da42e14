"""The results store: append-only JSONL under results/<study>/, and `load()` into a tidy pandas DataFrame.

Layout of a store directory:
    results.jsonl            one record per line (trial rows and calibration rows), append-only
    results.<shard>.jsonl    optional per-worker shards (distributed executors); merged on load
    study.yaml               the study file as last run (an older, different one is kept as study.<sha>.yaml)
    claims/<key>.lock        flock'ed while a sweep runs that trial (two sweeps never run the same trial)
    logs/<key>.log           output of trials that did not end 'ok'

Durability. Each record is serialised to one line and written with a single `os.write` on an O_APPEND file
descriptor, under an exclusive `flock` (several sweeps or workers on one machine may append concurrently),
then `fsync`ed before the next trial starts. A `kill -9` at any moment therefore leaves every finished record
intact and at most one torn last line. Before appending, a writer that finds the file not ending in a newline
(a torn tail) first terminates it, so a torn line never glues itself to the next good record. On load, a line
that does not parse (torn tail or garbage in the middle) is skipped with a warning naming the file and line;
every good line is kept.

Across machines (SLURM/Ray workers on a shared file system) prefer per-worker shards (`Store(dir, shard=...)`)
or let the driver write what workers return: O_APPEND + flock is only as atomic as the file system makes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

RESULTS_FILE = "results.jsonl"
STUDY_FILE = "study.yaml"
# Statuses a resumed sweep treats as done (an outcome was measured); 'interrupted' and 'skipped' re-run.
DONE_STATUSES = frozenset({"ok", "oom", "error", "timeout"})
TRIAL_ID_COLUMNS = ("key", "study", "run_id", "repeat", "kind", "status")


class CorruptLineWarning(UserWarning):
    """A results line that could not be parsed (torn by a kill, or garbage); it was skipped."""


def dumps(record: dict) -> bytes:
    """One record -> one JSON line (no NaN, no raw newlines: JSON escapes them), newline-terminated."""
    return (json.dumps(record, allow_nan=False, separators=(",", ":"), default=str) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def result_files(path: str | os.PathLike) -> list[Path]:
    """The JSONL files of a store: a .jsonl file itself, or results*.jsonl in a directory (main file first)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        from vitbench.errors import ConfigError

        raise ConfigError(f"results path {str(p)!r} does not exist (expected a results directory or .jsonl file)")
    files = sorted(p.glob("results*.jsonl"))
    return sorted(files, key=lambda f: (f.name != RESULTS_FILE, f.name))


def _parse_lines(data: bytes, path: Path, first_line: int = 1, final: bool = True) -> tuple[list[dict], int]:
    """Parse complete lines of `data`; returns (records, bytes consumed). Bad lines warn and are skipped.

    With final=False an unterminated last chunk is left unconsumed (a writer may still be appending it)."""
    records: list[dict] = []
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when data ends with a newline
    consumed = len(data) - len(tail)
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        rec = _parse_one(raw, path, first_line + i, torn=False)
        if rec is not None:
            records.append(rec)
    if tail.strip() and final:
        rec = _parse_one(tail, path, first_line + len(lines), torn=True)
        if rec is not None:
            records.append(rec)
        consumed = len(data)
    return records, consumed


def _parse_one(raw: bytes, path: Path, lineno: int, torn: bool) -> dict | None:
    try:
        rec = json.loads(raw.decode("utf-8"))
        if not isinstance(rec, dict):
            raise ValueError(f"a JSON {type(rec).__name__}, not a record object")
        return rec
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        what = ("torn last line (a write interrupted by a kill?)" if torn else "unparseable line")
        warnings.warn(f"{path}:{lineno}: skipped {what}, {len(raw)} bytes: {str(e)[:120]}",
                      CorruptLineWarning, stacklevel=4)
        return None


def read_records(path: str | os.PathLike) -> list[dict]:
    """Every parseable record of a store (directory, all shards) or of one .jsonl file, in file order."""
    out: list[dict] = []
    for f in result_files(path):
        recs, _ = _parse_lines(f.read_bytes(), f)
        out.extend(recs)
    return out


class Store:
    """Append-only results of one study directory (see the module docstring)."""

    def __init__(self, root: str | os.PathLike, shard: str | None = None):
        self.root = Path(root)
        self.path = self.root / (RESULTS_FILE if shard is None else f"results.{shard}.jsonl")
        self._fd: int | None = None
        self._offsets: dict[Path, int] = {}
        self._lines: dict[Path, int] = {}
        self._records: list[dict] = []
        self._claims: dict[str, int] = {}

    # -- writing -----------------------------------------------------------------------------------------
    def _open(self) -> int:
        if self._fd is None:
            self.root.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists()
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if new:
                _fsync_dir(self.root)
        return self._fd

    def append(self, record: dict) -> None:
        """Durably append one record (one write of one full line, under an exclusive lock, then fsync)."""
        data = dumps(record)
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size:
                with open(self.path, "rb") as f:  # torn tail left by a killed writer: terminate it first
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        data = b"\n" + data
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for fd in self._claims.values():
            os.close(fd)
        self._claims.clear()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------------------
    def refresh(self) -> list[dict]:
        """Read what was appended since the last call (all shards); returns every record read so far."""
        if not self.root.is_dir():
            return self._records
        for f in result_files(self.root):
            off = self._offsets.get(f, 0)
            with open(f, "rb") as fh:
                fh.seek(off)
                data = fh.read()
            recs, used = _parse_lines(data, f, self._lines.get(f, 0) + 1, final=False)
            self._offsets[f] = off + used
            self._lines[f] = self._lines.get(f, 0) + data[:used].count(b"\n")
            self._records.extend(recs)
        return self._records

    def records(self) -> list[dict]:
        """Every parseable record, all shards (warns about corrupt lines)."""
        return read_records(self.root) if self.root.is_dir() else []

    def done_keys(self, statuses: Iterable[str] = DONE_STATUSES) -> set[str]:
        statuses = set(statuses)
        return {r["key"] for r in self.refresh() if r.get("key") and r.get("status") in statuses
                and r.get("kind") != "calibration"}

    # -- claims: two sweeps on one directory never run the same trial ----------------------------------
    def claim(self, key: str) -> bool:
        """Try to take the trial `key` for this process (non-blocking flock; released by `release` or death).

        Lock files are never deleted (deleting a lock file races with a process about to lock it)."""
        if key in self._claims:
            return True
        d = self.root / "claims"
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
        self._claims[key] = fd
        return True

    def release(self, key: str) -> None:
        fd = self._claims.pop(key, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- the study file beside the results ----------------------------------------------------------------
    def save_study(self, text: str) -> Path:
        """Copy the study as run to study.yaml (atomically); a different older copy is kept as study.<sha>.yaml."""
        self.root.mkdir(parents=True, exist_ok=True)
        dest = self.root / STUDY_FILE
        if dest.exists():
            old = dest.read_text()
            if old == text:
                return dest
            sha = hashlib.sha256(old.encode()).hexdigest()[:12]
            os.replace(dest, self.root / f"study.{sha}.yaml")
        tmp = dest.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, dest)
        return dest


# ---------------------------------------------------------------------------------------------------------
# Tidy DataFrame
# ---------------------------------------------------------------------------------------------------------
def _flatten(rec: dict) -> dict[str, Any]:
    row: dict[str, Any] = {c: rec.get(c) for c in TRIAL_ID_COLUMNS}
    row["study_sha"] = rec.get("study_sha")
    config = rec.get("trial") or rec.get("config") or {}
    for k, v in config.items():
        if k not in row:
            row[k] = v
    for k, v in (rec.get("metrics") or {}).items():
        row[f"metric.{k}" if k in row else k] = v
    err = rec.get("error") or {}
    row["error_type"] = err.get("type")
    row["error_message"] = err.get("message")
    row["error_tail"] = err.get("tail")
    for k in ("started_at", "finished_at", "method_version"):
        row[k] = rec.get(k)
    for k, v in (rec.get("env") or {}).items():
        row[f"env.{k}"] = v if not isinstance(v, (dict, list)) else json.dumps(v)
    for k, v in (rec.get("runner") or {}).items():
        row[f"runner.{k}"] = v
    row["raw"] = rec.get("raw") or {}
    return row


def select(records: Iterable[dict], kinds: Iterable[str] | str | None = None, latest: bool = True) -> list[dict]:
    """Filter records by kind (None: every kind but 'calibration'; 'all': everything) and keep, per trial key,
    only the latest record (a re-run after --force or an interruption supersedes the older row)."""
    recs = list(records)
    if kinds is None:
        recs = [r for r in recs if r.get("kind") != "calibration"]
    elif kinds != "all":
        wanted = {kinds} if isinstance(kinds, str) else set(kinds)
        recs = [r for r in recs if r.get("kind") in wanted]
    if latest:
        # the latest by finish time, then by position: rows from several shards (workers) interleave in time
        last: dict[str, int] = {}
        for i, r in enumerate(recs):
            k = r.get("key")
            done_at = str(r.get("finished_at") or "")
            if k and (k not in last or done_at >= str(recs[last[k]].get("finished_at") or "")):
                last[k] = i
        recs = [r for i, r in enumerate(recs) if not r.get("key") or last[r["key"]] == i]
    return recs


def load(path: str | os.PathLike, kinds: Iterable[str] | str | None = None, latest: bool = True):
    """Results (a store directory or a .jsonl file) -> tidy DataFrame, one row per trial.

    Columns: key, study, run_id, repeat, kind, status, the trial config (model, backend, task, resolution,
    batch_size, precision, ...), every metric under its own name with its unit (img_per_s, step_ms_median,
    peak_mem_mib, gflops, max_batch_size, ...; a metric that shares a config field's name becomes
    'metric.<name>'), error_type/error_message/error_tail, timestamps, env.* and runner.* columns, and `raw`
    (the raw per-step timings etc., a dict per row). `kinds`: None = trials only (no calibration rows),
    'all', or an iterable such as ('calibration',). `latest`: one row per key (the last one written).
    """
    import pandas as pd

    rows = [_flatten(r) for r in select(read_records(path), kinds, latest)]
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=[*TRIAL_ID_COLUMNS, "raw"])
    return df


def iter_keys(records: Iterable[dict]) -> Iterator[str]:
    for r in records:
        if r.get("key"):
            yield r["key"]
