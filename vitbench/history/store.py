"""The history store: every measured run appended to one SQLite file, never rewritten (docs/history.md).

Why SQLite and not the results' JSON lines or Parquet: the history is appended to by many CI jobs over months,
possibly at once, and read by metric, trial and commit. SQLite (Python's standard library, no new dependency)
gives an append that is one transaction (all of a run's measurements or none, whatever kills the writer:
its journal is rolled back on the next open), concurrent writers serialised by its lock (WAL mode: readers never
block the writer), and queries by column; a Parquet file cannot be appended to in place, and JSON lines would
need this project's own locking and torn-line recovery again. Records are never changed: triggers refuse every
UPDATE and DELETE, so nothing vitbench (or a careless query through it) does rewrites what was recorded.

Tables: `runs` (one row per appended run: commit, its date, the machine's identity, what was appended, when,
the run's own JSON: an `ab` verdict with its pair ratios), `points` (one row per run, trial and metric: the
value, its unit, the machine's calibration for that trial, the raw per-round values as JSON).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vitbench.errors import ConfigError
from vitbench.history import DEFAULT_PATH, HISTORY_ENV
from vitbench.record import finite_number
from vitbench.tasks.calibration import MAX_TFLOPS, MIN_TFLOPS

ROWS_KEY = "rows_sha256"  # in a run's info: the hash of the rows it was made from (the same rows append once)
FORMAT = "vitbench history 1"  # the `meta` row that says a file is ours, and which layout it has
BUSY_TIMEOUT_S = 60.0  # how long an append waits for another writer's transaction (each holds it < 1 s)

# each run's rows (collect.row_ids), so a run that shares rows with one recorded is refused; made where a history
# of before it is appended to (its runs' rows are then unknown: the whole-run hash, ROWS_KEY, still holds for them)
_ROWS_SCHEMA = """
CREATE TABLE IF NOT EXISTS run_rows (run_id INTEGER NOT NULL REFERENCES runs(id), row TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS run_rows_by_row ON run_rows (row);
CREATE TRIGGER IF NOT EXISTS run_rows_append_only_u BEFORE UPDATE ON run_rows
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS run_rows_append_only_d BEFORE DELETE ON run_rows
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END;
"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    appended_at TEXT NOT NULL,       -- ISO 8601 UTC, when it was appended
    source TEXT NOT NULL,            -- 'sweep' | 'ab'
    commit_sha TEXT NOT NULL,
    commit_date TEXT,                -- ISO 8601 committer date (None: not known where it was appended)
    run_date TEXT NOT NULL,          -- ISO 8601, the run's first record's start
    machine TEXT NOT NULL,           -- hostname|cpu model|cpu count|device name (vitbench.history.collect)
    path TEXT NOT NULL,              -- the results directory it was read from
    info TEXT NOT NULL               -- JSON: the environment's versions, an ab verdict and its pairs
);
CREATE TABLE IF NOT EXISTS points (
    run_id INTEGER NOT NULL REFERENCES runs(id),
    trial TEXT NOT NULL,             -- compare's match key: kind, method version, measured config
    label TEXT NOT NULL,
    model TEXT, backend TEXT, task TEXT,
    metric TEXT NOT NULL,
    unit TEXT NOT NULL,
    higher_is_better INTEGER NOT NULL,
    value REAL NOT NULL,             -- the run's value (the median of its rounds)
    calibration REAL,                -- the machine's calibration (matmul TFLOP/s) beside it, None if not measured
    raw TEXT NOT NULL                -- JSON: the rounds' values and calibrations
);
CREATE INDEX IF NOT EXISTS points_by_series ON points (metric, trial);
CREATE TRIGGER IF NOT EXISTS runs_append_only_u BEFORE UPDATE ON runs
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS runs_append_only_d BEFORE DELETE ON runs
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS points_append_only_u BEFORE UPDATE ON points
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END;
CREATE TRIGGER IF NOT EXISTS points_append_only_d BEFORE DELETE ON points
    BEGIN SELECT RAISE(ABORT, 'the history is append-only'); END;
"""


@dataclass
class Point:
    """One trial's value of one metric in one run."""

    trial: str
    label: str
    model: str | None
    backend: str | None
    task: str | None
    metric: str
    unit: str
    higher_is_better: bool
    value: float
    calibration: float | None = None
    raw: dict = field(default_factory=dict)


@dataclass
class Run:
    """One appended run and its points (`id` set once stored)."""

    source: str
    commit: str
    commit_date: str | None
    run_date: str
    machine: str
    path: str
    info: dict = field(default_factory=dict)
    appended_at: str = ""
    id: int | None = None
    rows: list[str] = field(default_factory=list)  # each row's hash (collect.row_ids): kept in run_rows
    legacy_rows: list[str] = field(default_factory=list)  # its hashes as 4af12a3 kept them: checked, not kept
    legacy_rows_sha256: str = ""  # its rows' hash as histories before this session kept it: checked, not kept


def _connect(path: Path) -> sqlite3.Connection:
    """An existing file opened (mode=rw: SQLite never creates one here; a new history is made by `_create`)."""
    con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", timeout=BUSY_TIMEOUT_S, uri=True,
                          isolation_level=None)  # transactions by hand
    con.execute("PRAGMA foreign_keys = ON")
    return con


def _create(p: Path) -> None:
    """Make a new history at `p` (absent): its tables are written in a hidden file beside it, which is then linked
    into place only if nothing is there yet (a racer's history is kept, and opened), so a history file is never
    empty: SQLite takes an empty file for a new database, so an empty file the user named (a mistyped path) would
    have been made a history, and one that is empty now is not ours (`open_db` refuses it)."""
    import tempfile

    from vitbench.paths import file_mode

    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())
        os.close(fd)
        con = _connect(Path(tmp))
        try:
            con.execute("PRAGMA journal_mode = WAL")  # kept in the file; its -wal is merged back on close
            con.execute("BEGIN IMMEDIATE")
            _execute_all(con, _SCHEMA + _ROWS_SCHEMA)
            con.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
            con.execute("COMMIT")
        finally:
            con.close()
        try:
            os.link(tmp, p)  # never over a file: one made meanwhile (another first writer's) stays
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: copied into a file made only if absent (a racer
            _copy_new(Path(tmp), p)  # may see it part-written, and is refused: it exits 2, writing nothing)
    finally:  # and SQLite's own files beside it, which a full disk keeps it from merging and removing
        for leftover in (tmp, f"{tmp}-wal", f"{tmp}-shm", f"{tmp}-journal"):
            Path(leftover).unlink(missing_ok=True)


def _execute_all(con: sqlite3.Connection, script: str) -> None:
    """Each statement of `script` in the open transaction (executescript would commit it first)."""
    for stmt in script.split(";\n"):
        if stmt.strip():
            con.execute(stmt)


def _copy_new(src: Path, p: Path) -> None:
    try:
        f = open(p, "xb")  # noqa: SIM115 - closed below
    except FileExistsError:
        return
    try:
        with f:
            f.write(src.read_bytes())
    except BaseException:
        p.unlink(missing_ok=True)  # ours, part-written (a full disk): nothing is left
        raise


def _bad(path: Path, why: str) -> ConfigError:
    return ConfigError(f"--db {path}: {why} (a history file is made by `vitbench history append`; give another "
                       "path, or move this file away)")


def default_path(db: str | None) -> Path:
    """--db, else $VITBENCH_HISTORY, else DEFAULT_PATH."""
    return Path(db if db is not None else os.environ.get(HISTORY_ENV) or DEFAULT_PATH).expanduser()


def check_db(path: str | Path) -> Path:
    """`path` can be appended to: a history of ours, or absent (and creatable). Nothing is created; ConfigError
    naming the file otherwise. Called before a run is read, so bad --db fails first."""
    from vitbench.paths import check_entry

    p = Path(path).expanduser()
    check_entry(p, "--db")
    if p.is_file():  # an empty one too: not a history (`_create`), never made one
        open_db(p, create=False).close()
    return p


def open_db(path: str | Path, create: bool) -> sqlite3.Connection:
    """An open history file: made (with its tables) when `create` and absent; else it must be one of ours.
    ConfigError naming the file for a missing one, a directory, a file that is not SQLite (an empty one
    included), or another layout: an existing file is never written to unless it is a vitbench history."""
    from vitbench.paths import check_entry

    p = Path(path).expanduser()
    if not create and not p.exists():
        raise ConfigError(f"--db {p}: no such file (a history file is made by `vitbench history append`)")
    check_entry(p, "--db")  # a directory, a device, an unwritable place: named, before SQLite sees it
    if create:
        from vitbench.paths import make_dir

        make_dir(p.parent, f"--db {p}: its directory")
    con = None
    try:
        if create and not os.path.lexists(p):
            try:
                _create(p)
            except OSError as e:  # SQLite's own errors (a full disk) are DatabaseErrors, said below
                raise _disk_error(p, e) from None
        elif p.is_file() and p.stat().st_size == 0:
            raise _bad(p, "an empty file, not a vitbench history (nothing was written to it)")
        con = _connect(p)
        _check(con, p)
    except (sqlite3.DatabaseError, ConfigError) as e:
        if con is not None:
            con.close()
        if isinstance(e, ConfigError):
            raise
        if _disk(e):
            raise _disk_error(p, e) from None
        raise _bad(p, f"not a readable history file ({e})") from None
    return con


def _disk(e: BaseException) -> bool:
    """Whether SQLite's error is the disk's (full, read-only, failing), not the file's content."""
    return isinstance(e, sqlite3.OperationalError) and any(
        w in str(e) for w in ("disk", "full", "readonly", "unable to open"))


def _disk_error(p: Path, e: BaseException) -> ConfigError:
    return ConfigError(f"--db {p} cannot be written now: {e} (a full or read-only disk); the history file was "
                       "left as it was")


def _check(con: sqlite3.Connection, p: Path) -> None:
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"meta", "runs", "points"} <= tables:
        names = ", ".join(sorted(tables)) or "none"
        raise _bad(p, f"an SQLite file, but not a vitbench history (tables: {names})")
    fmt = con.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
    if not fmt or fmt[0] != FORMAT:
        raise _bad(p, f"history format {fmt[0] if fmt else None!r}; this vitbench reads {FORMAT!r}")


def _shared_rows(con: sqlite3.Connection, rows: list[str]) -> list[tuple[int, int]]:
    """(run id, how many of `rows` it holds) of each recorded run holding any, most first."""
    return con.execute("SELECT run_id, COUNT(*) AS n FROM run_rows WHERE row IN (SELECT value FROM json_each(?)) "
                       "GROUP BY run_id ORDER BY n DESC, run_id", (json.dumps(rows),)).fetchall()


def append(path: str | Path, run: Run, points: Iterable[Point]) -> int:
    """Append `run` and its points in one transaction (all or nothing, whatever stops the writer); the run's id.
    Safe beside other writers (SQLite's lock; each waits up to BUSY_TIMEOUT_S). A point whose value is not a
    finite positive number is refused (ConfigError) before anything is written."""
    from vitbench.record import now

    con = open_db(path, create=True)
    try:
        con.execute("BEGIN IMMEDIATE")
        try:
            rows = [h for h in (run.info.get(ROWS_KEY), run.legacy_rows_sha256) if h]
            same = rows and con.execute("SELECT id FROM runs WHERE json_extract(info, ?) IN "
                                        "(SELECT value FROM json_each(?))", (f"$.{ROWS_KEY}", json.dumps(rows))
                                        ).fetchone()
            if same:
                raise ConfigError(f"{run.path}: these rows were appended already, as run {same[0]}: nothing was "
                                  "appended (a run is recorded once; measure again for another point)")
            _execute_all(con, _ROWS_SCHEMA)  # a history of before run_rows gets the table here
            shared = _shared_rows(con, [*run.rows, *run.legacy_rows])
            if shared:
                (other, n), more = shared[0], len(shared) - 1
                n = min(n, len(run.rows))
                raise ConfigError(f"{run.path}: {n} of its {len(run.rows)} rows were appended already, as run "
                                  f"{other}{f' (and rows of {more} more runs)' if more else ''}: nothing was "
                                  "appended. A run is recorded once: a sweep appended, then resumed, holds its "
                                  "first rows again; append a directory of new measurements")
            cur = con.execute(
                "INSERT INTO runs (appended_at, source, commit_sha, commit_date, run_date, machine, path, info) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run.appended_at or now(), run.source, run.commit, run.commit_date, run.run_date, run.machine,
                 run.path, json.dumps(run.info, sort_keys=True)))
            run_id = cur.lastrowid
            con.executemany("INSERT INTO run_rows VALUES (?, ?)", ((run_id, row) for row in run.rows))
            n = 0
            for pt in points:
                if not (finite_number(pt.value) and pt.value > 0):
                    raise ConfigError(f"{run.path}: {pt.label} {pt.metric} = {pt.value!r} is not a finite "
                                      "positive "
                                      "number; nothing was appended")
                cal = pt.calibration if finite_number(pt.calibration) and pt.calibration > 0 else None
                con.execute("INSERT INTO points VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            (run_id, pt.trial, pt.label, pt.model, pt.backend, pt.task, pt.metric, pt.unit,
                             int(pt.higher_is_better), float(pt.value), cal, json.dumps(pt.raw, sort_keys=True)))
                n += 1
            if not n:
                raise ConfigError(f"{run.path}: no measurement to append (no ok record with a finite metric)")
            con.execute("COMMIT")
        except BaseException as e:
            if con.in_transaction:  # a failed COMMIT (a full disk) has rolled back already
                con.execute("ROLLBACK")
            if _disk(e):
                raise _disk_error(Path(path).expanduser(), e) from None
            raise
    finally:
        con.close()
    run.id = run_id
    return run_id


def read(path: str | Path) -> Iterator[tuple[Run, Point]]:
    """Every stored point with its run, in the order appended."""
    con = open_db(path, create=False)
    try:
        runs = {}
        for row in con.execute("SELECT id, appended_at, source, commit_sha, commit_date, run_date, machine, path, "
                               "info FROM runs ORDER BY id"):
            runs[row[0]] = Run(id=row[0], appended_at=row[1], source=row[2], commit=row[3], commit_date=row[4],
                               run_date=row[5], machine=row[6], path=row[7],
                               info=_json_object(row[8], path, f"run {row[0]}'s info"))
        rows = con.execute("SELECT run_id, trial, label, model, backend, task, metric, unit, higher_is_better, "
                           "value, calibration, raw FROM points ORDER BY run_id, rowid").fetchall()
    except sqlite3.DatabaseError as e:
        raise _bad(Path(path), f"not a readable history file ({e})") from None
    finally:
        con.close()
    for r in rows:
        # a calibration within the bounds the calibration metric declares, as where results rows are read
        # (tasks.row_check): a DB edited to 1e-300 divided every speed of its machine past a float's range
        if not (finite_number(r[9]) and r[9] > 0) or r[0] not in runs or not (
                r[10] is None or (finite_number(r[10]) and MIN_TFLOPS <= r[10] <= MAX_TFLOPS)):
            raise _bad(Path(path), f"run {r[0]}'s point {str(r[2])[:80]} {str(r[6])[:40]} holds value {r[9]!r}, "
                                   f"calibration {r[10]!r}, which `vitbench history append` never writes (a "
                                   f"finite number > 0 of a stored run; a calibration {MIN_TFLOPS:g} to "
                                   f"{MAX_TFLOPS:g} TFLOP/s): the file was edited")
        yield runs[r[0]], Point(trial=r[1], label=r[2], model=r[3], backend=r[4], task=r[5], metric=r[6],
                                unit=r[7], higher_is_better=bool(r[8]), value=r[9], calibration=r[10],
                                raw=_json_object(r[11], path, f"run {r[0]}'s point {str(r[2])[:80]}"))


def _json_object(text, path, what: str) -> dict:
    """A stored JSON object (a run's info, a point's raw); the history refused (exit 2, naming what) if it is
    not one: the file was edited."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        raise _bad(Path(path), f"{what} is not the JSON object `vitbench history append` writes: the file was "
                               "edited")
    return doc
