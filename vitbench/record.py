"""The record: one measurement or trial outcome, the one envelope every writer builds and every reader gets.

JSON shape (unchanged since schema 1, so every results file written before still reads):
    schema, kind, status, config, metrics, raw, env, error, started_at, finished_at, method_version
  and, for a trial run by a sweep: key, study, study_sha, run_id, repeat, trial (the normalised trial config)
  and runner (where and how it ran: pid, wall_s, executor, job id, ...).
- kind: the record kind the task produces ('bench', 'max_batch', 'flops', 'fewshot', ...; see the tasks).
- status: a Status.
- metrics: flat {name_with_unit: number | str | bool | None}; units are in the names (img_per_s, peak_mem_mib).
- raw: lists kept for later statistics ({'step_s': [...], 'probes': [...]}).

Built in one place: a task returns `Record.measured(...)`; a failed or lost trial is `Record.failed(...)`; the
trial's identity is attached by `Record.for_job(...)` (vitbench.trial). Readers get records from vitbench.rows.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import json
import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA = 1
# Bump when a change to how something is measured makes old numbers incomparable; it is part of a trial key.
# 2: torch training steps clip gradients at global norm 1, like JAX. 3: steps are timed in throughput windows by
# default (`timing`), fp32 is full fp32 on every backend, MFU divides by one peak per device and precision, and
# peak_mem_mib is the steady steps' memory (compilation apart).
METHOD_VERSION = 3
# Row fields two values of which are two measurements whatever else agrees: numbers of two method versions are
# incomparable by definition. The report's summaries never pool across them (report.tables.split_keys), nor a fit's
# curves (fit.rows.pooled).
INCOMPARABLE = ("method_version",)
# A row's runner key: the trials that ran on its host while it ran (vitbench.executors.overlap, written by the
# local executor); the report and the history mark its speed as measured on a shared host (report.caveats)
OVERLAPPED = "overlapped"


class Status(str, enum.Enum):
    """How a trial ended. A str enum: it is written to JSON as its value."""

    OK = "ok"
    OOM = "oom"
    ERROR = "error"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"
    DIVERGED = "diverged"  # training's loss or weights became non-finite (vitbench.errors.TrainingDiverged)

    def __str__(self) -> str:
        return self.value

    @property
    def done(self) -> bool:
        """An outcome was measured: a resumed sweep does not run the trial again ('interrupted' and 'skipped'
        do run again)."""
        return self in (Status.OK, Status.OOM, Status.ERROR, Status.TIMEOUT, Status.DIVERGED)


STATUSES: tuple[str, ...] = tuple(s.value for s in Status)


def row_state(r: Record) -> tuple[bool, str | None]:
    """What `supersedes` weighs of a row: whether it has an outcome (Status.done), and its end time."""
    return r.status.done, r.finished_at


def supersedes(r: tuple[bool, str | None], prev: tuple[bool, str | None]) -> bool:
    """Whether the row of state `r` (`row_state`; read after `prev`'s, of the same trial) is the trial's state: a
    row with an outcome over one without (an interrupted or skipped rerun leaves the trial as its last outcome
    says, which is what a resumed sweep acts on: store.done_keys), else the later by finish time; a row without an
    end time (edited, another tool's) is placed by file order, never as the oldest. The one rule of the report
    (tidy.load), compare (tidy.select) and a sweep's resume (store.done_keys)."""
    (done, end), (prev_done, prev_end) = r, prev
    if done != prev_done:
        return done
    return not prev_end or not end or end >= prev_end


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def clean(x: Any) -> Any:
    """JSON-safe: NaN/inf -> None, numpy scalars -> python, tuples -> lists, enums -> values."""
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and getattr(x, "ndim", 0) == 0:
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


@dataclass
class ErrorInfo:
    type: str
    message: str
    tail: str | None = None

    MAX_MESSAGE = 2000  # characters kept of an exception's message (its end: where the cause is)

    @classmethod
    def of(cls, exc: BaseException, tail: str | None = None) -> ErrorInfo:
        return cls(type(exc).__name__, str(exc)[-cls.MAX_MESSAGE:], tail)


def finite_number(x) -> bool:
    """A finite int or float, not a bool: what a measured value must be (every reader's test, declared once). An
    int beyond a float's range (JSON's 1e400 written as digits) is not one: math.isfinite raised OverflowError on
    it, a traceback in compare, report and history."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


@dataclass(frozen=True)
class RowProblem:
    """What a reader found wrong with a parsed ok row (vitbench.tasks.row_check): `refuse` stops the read (a row
    vitbench never writes), else the row is read as an error row, with a warning (one vitbench once wrote)."""

    text: str
    refuse: bool


# the first item of Record.measurement for a row no sweep run wrote (its own content is what identifies it)
STANDALONE = "standalone"
# Envelope fields that identify a trial of a sweep (absent on a standalone measurement such as `vitbench bench`).
JOB_FIELDS = ("key", "study", "study_sha", "run_id", "repeat")
# The envelope's optional fields and their JSON types (absent or null: the default), checked when a row is read: a
# row of another shape (edited, another tool's) is skipped with a warning, never a traceback in a reader.
_ENVELOPE = (*((k, str, "a string") for k in ("key", "study", "study_sha", "run_id", "started_at", "finished_at")),
             *((k, int, "an integer") for k in ("repeat", "method_version", "schema")),
             *((k, dict, "an object") for k in ("raw", "env", "runner", "trial", "error")))


@dataclass
class Record:
    """A measurement (kind, status, config, metrics, raw, env, error, timestamps) and, for a trial, its
    identity."""

    kind: str
    status: Status
    config: dict
    metrics: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    error: ErrorInfo | None = None
    started_at: str = ""
    finished_at: str = ""
    method_version: int = METHOD_VERSION
    schema: int = SCHEMA
    key: str | None = None
    study: str | None = None
    study_sha: str | None = None
    run_id: str | None = None
    repeat: int | None = None
    trial: dict | None = None
    runner: dict = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)  # the results directory it was read from (not saved)

    # ---- construction (the only places a record is made) -----------------------------------------------------
    @classmethod
    def measured(cls, kind: str, config: dict, *, metrics: dict | None = None, raw: dict | None = None,
                 env: dict | None = None, started_at: str | None = None, status: Status = Status.OK,
                 error: ErrorInfo | None = None) -> Record:
        """What a measurement produced (status OK, or OOM when the measurement itself found it does not fit)."""
        return cls(kind=kind, status=Status(status), config=clean(config), metrics=clean(metrics or {}),
                   raw=clean(raw or {}), env=clean(env or {}), error=error, started_at=started_at or now(),
                   finished_at=now())

    @classmethod
    def failed(cls, kind: str, config: dict, status: Status, error: ErrorInfo, started_at: str | None = None,
               env: dict | None = None) -> Record:
        """A measurement that produced nothing: crash, OOM, timeout, interruption, skip."""
        return cls.measured(kind, config, status=status, error=error, started_at=started_at, env=env)

    def for_job(self, job) -> Record:
        """This record as the row of a sweep's job (vitbench.job.Job): its identity and trial config."""
        return dataclasses.replace(self, key=job.row_key, study=job.study, study_sha=job.study_sha,
                                   run_id=job.run_id, repeat=job.repeat, trial=dict(job.config),
                                   runner=dict(self.runner))

    # ---- (de)serialisation ----------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {"schema": self.schema, "kind": self.kind, "status": self.status.value, "config": self.config,
             "metrics": self.metrics, "raw": self.raw, "env": self.env,
             "error": dataclasses.asdict(self.error) if self.error else None,
             "started_at": self.started_at, "finished_at": self.finished_at,
             "method_version": self.method_version}
        if self.trial is not None or self.key is not None:
            d.update({k: getattr(self, k) for k in JOB_FIELDS})
            d["trial"] = self.trial
        if self.runner:
            d["runner"] = self.runner
        return clean(d)

    @classmethod
    def from_dict(cls, d: dict) -> Record:
        """A record from its JSON form; raises ValueError when `d` is not a record (names what is missing)."""
        missing = [k for k in ("kind", "status", "config", "metrics") if k not in d]
        if missing or not isinstance(d.get("config"), dict) or not isinstance(d.get("metrics"), dict):
            raise ValueError("not a vitbench record: needs kind, status, config (object) and metrics (object)"
                             + (f"; missing {', '.join(missing)}" if missing else ""))
        try:
            status = Status(d["status"])
        except ValueError:
            raise ValueError(f"unknown status {d['status']!r}; allowed: {', '.join(STATUSES)}") from None
        bad = [f"{k} ({type(d[k]).__name__}, not {want})" for k, types, want in _ENVELOPE
               if d.get(k) is not None and (not isinstance(d[k], types) or isinstance(d[k], bool))]
        if bad:
            raise ValueError(f"field(s) of the wrong type: {'; '.join(bad)}")
        err = d.get("error")
        error = None if err is None else ErrorInfo(str(err.get("type")), str(err.get("message", "")),
                                                   err.get("tail"))
        return cls(kind=str(d["kind"]), status=status, config=d["config"], metrics=d["metrics"],
                   raw=d.get("raw") or {}, env=d.get("env") or {}, error=error,
                   started_at=d.get("started_at") or "", finished_at=d.get("finished_at") or "",
                   method_version=d.get("method_version"),
                   schema=SCHEMA if d.get("schema") is None else d["schema"],  # null: the default (_ENVELOPE)
                   key=d.get("key"), study=d.get("study"), study_sha=d.get("study_sha"), run_id=d.get("run_id"),
                   repeat=d.get("repeat"), trial=d.get("trial"),
                   runner=d.get("runner") or {})

    def unmeasured(self, names) -> list[str]:
        """Those of `names` (the metrics a task promises: its headline) this record lacks: absent, null, or not a
        finite number. An `ok` row has none of them lacking (vitbench.trial turns such a record into an error)."""
        return [n for n in names if not finite_number(self.metrics.get(n))]

    @property
    def measurement(self) -> tuple | None:
        """What tells one measurement from another wherever its row is found: a sweep's run, trial key, repeat and
        start. One run copied into two directories is one measurement, not two repeats. A row no sweep run wrote
        (a command's `--json`) is its kind, start, finish, config and metrics (STANDALONE first): a line of it
        copied twice is one measurement too. None for a row without a start."""
        if self.run_id is not None:
            return (self.run_id, self.key, self.repeat, self.started_at)
        if not self.started_at:
            return None
        return (STANDALONE, self.kind, self.started_at, self.finished_at,
                json.dumps([self.config, self.metrics], sort_keys=True, default=str))

    @property
    def measured_config(self) -> dict:
        """What was measured: the sweep's normalised trial config when there is one, else the record's config."""
        return self.trial if self.trial is not None else self.config
