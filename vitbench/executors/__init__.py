"""Executors: where and how trials run. The runner hands jobs to one; it hands back one outcome per job.

An executor is one module that registers an `Executor` subclass (`register_executor`): its name, its options
(a pydantic model, checked when a study is loaded, before anything runs) and four primitives, `submit`, `poll`,
`collect` and `cancel`, which the one queue loop in `Executor.run` drives for every executor: keep up to
`max_parallel` jobs in flight, report each result as it arrives, and on Ctrl-C cancel what runs and report each
of those as interrupted (the row a job wrote just before the cancel is kept). Shared code never names one.

Contract: `jobs` is consumed lazily (the runner claims a trial's key as the job is drawn, so an executor that
drew everything up front would claim everything up front). `on_start(job)` when a job starts, `on_result(job,
outcome)` exactly once per job that started. An executor never raises for a failing trial: a crash, OOM or
timeout is an outcome whose record says so. Every trial runs in a fresh process (`vitbench.trial.run_trial`).
"""

from __future__ import annotations

import contextlib
import enum
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from vitbench.errors import ConfigError
from vitbench.record import ErrorInfo, Record, Status, now


# The warning a scheduler sends before it preempts a job or ends it at its time limit: SLURM's `--signal=USR2@N`
# (`B:USR2@N` for the batch shell only); submitit asks for it on every job (its SUBMITIT_PREEMPT_SIGNAL default).
PREEMPT_SIGNAL = signal.SIGUSR2
# Signals by which a trial, a worker or a sweep is stopped from outside, not by its own fault: a cancelled, requeued
# or preempted job (SLURM sends SIGTERM to every process of the job), Ctrl-C, a closed terminal, the preemption
# warning. A trial stopped by one is 'interrupted' and runs again next time (on every executor).
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, PREEMPT_SIGNAL)


class Stopped(KeyboardInterrupt):
    """A stop signal (STOP_SIGNALS) received by a sweep or a worker, raised where it was waiting as Ctrl-C raises
    KeyboardInterrupt: the executor loop cancels what runs and records it as interrupted."""

    def __init__(self, sig: signal.Signals):
        super().__init__(sig.name)
        self.signal = sig


def _raise_stopped(signum, frame):
    raise Stopped(signal.Signals(signum))


@contextlib.contextmanager
def stopped_by(signals: Iterable[signal.Signals]) -> Iterator[None]:
    """While inside, each of `signals` raises Stopped (only the main thread can take signals: elsewhere a no-op);
    the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, _raise_stopped) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


class Role(enum.Enum):
    TRIAL = "trial"
    CALIBRATION = "calibration"  # a per-run measurement of the device: never skipped as done, no trial key


@dataclass(frozen=True)
class Job:
    """One trial (or a run's calibration) to run; plain data, picklable to any worker."""

    key: str
    config: dict
    repeat: int
    study: str
    study_sha: str
    run_id: str
    timeout_s: float
    task_module: str  # the module that registered the task (imported by the worker if it is a plug-in)
    role: Role = Role.TRIAL

    @property
    def task(self) -> str:
        return self.config["task"]

    @property
    def row_key(self) -> str | None:
        """The key its row carries: the trial's, or none for a calibration (a per-run row, never 'done')."""
        return None if self.role is Role.CALIBRATION else self.key

    def label(self) -> str:
        c = self.config
        return " ".join(str(x) for x in (c.get("model", ""), c.get("backend", ""), c["task"], self.key) if x)


class Stored(enum.Enum):
    """Who keeps an outcome's record."""

    DRIVER = "driver"  # the runner appends it to the store (the usual case)
    WORKER = "worker"  # a worker already appended it to its shard of the store
    ELSEWHERE = "elsewhere"  # not measured: another job or sweep has (or is measuring) it; nothing is written


@dataclass
class Outcome:
    record: Record
    stored: Stored = Stored.DRIVER


OnStart = Callable[[Job], None]
OnResult = Callable[[Job, Outcome], None]


def is_timing(job: Job) -> bool:
    """A trial whose result is a speed (its task asks for the device's calibration, or it is the calibration):
    by default it gets a node's devices to itself on every executor."""
    from vitbench.tasks import get_task

    if job.role is Role.CALIBRATION:
        return True
    try:
        return get_task(job.task).calibrated
    except Exception:  # noqa: BLE001 - a plug-in task not importable here: be safe, give it a node
        return True


def failure(job: Job, status: Status, etype: str, message: str, tail: str | None = None,
            started_at: str | None = None, **runner) -> Record:
    """The row of a job that produced no record itself (died, timed out, was cancelled, was skipped)."""
    from vitbench.tasks import get_task

    try:
        kind = get_task(job.task).kind
    except Exception:  # noqa: BLE001 - the task may not be importable here
        kind = "error"
    rec = Record.failed(kind, job.config, status, ErrorInfo(etype, message, tail or None), started_at)
    rec = rec.for_job(job)
    rec.runner = dict(runner)
    return rec


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Executor(ABC):
    """Runs trial jobs and reports an outcome for each (see the module docstring for the contract)."""

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]] = NoOptions
    description: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()  # importable modules it needs (cluster libraries)
    poll_s: float = 1.0  # how long `poll` may wait for a job to finish

    def __init__(self, results_dir: str | Path | None = None, **options):
        self.results_dir = Path(results_dir) if results_dir is not None else None
        self.opts = self.check_options(options)

    @classmethod
    def check_options(cls, options: dict) -> BaseModel:
        """The executor's options, validated; a ConfigError names each bad option and the allowed ones."""
        try:
            return cls.Options.model_validate(options)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(str(p) for p in x['loc'])}: {x['msg']}"
                                 + (f" (got {x['input']!r})" if x["type"] != "missing" else "")
                                 for x in e.errors())
            raise ConfigError(f"executor {cls.name!r} options: {problems}; allowed options: "
                              f"{', '.join(cls.Options.model_fields) or '(none)'}") from None

    @property
    def max_parallel(self) -> int:
        return getattr(self.opts, "max_parallel", None) or 1 << 30

    # ---- the primitives an executor implements ------------------------------------------------------------
    def submit(self, jobs: list[Job]) -> list[Any]:
        """Start `jobs`; one handle each, in order (an executor may submit them together, e.g. a job array)."""
        return [self.submit_one(j) for j in jobs]

    def submit_one(self, job: Job) -> Any:
        raise NotImplementedError

    @abstractmethod
    def poll(self, handles: list[Any]) -> list[Any]:
        """The handles of jobs that have finished (waiting up to about `poll_s` for one)."""

    @abstractmethod
    def collect(self, job: Job, handle: Any) -> Outcome:
        """The outcome of a finished job."""

    @abstractmethod
    def cancel(self, running: list[tuple[Job, Any]]) -> list[Outcome]:
        """Stop every running job, wait for them to end, and give each one's outcome (its row if it wrote one
        just before, else an 'interrupted' row)."""

    def close(self) -> None:
        """Release workers/servers held by the executor."""

    # ---- the one loop ------------------------------------------------------------------------------------------
    def run(self, jobs: Iterable[Job], on_start: OnStart, on_result: OnResult) -> None:
        pending: Iterator[Job] = iter(jobs)
        running: list[tuple[Job, Any]] = []
        exhausted = False
        try:
            while True:
                batch: list[Job] = []
                while not exhausted and len(running) + len(batch) < self.max_parallel:
                    try:
                        batch.append(next(pending))
                    except StopIteration:
                        exhausted = True
                if batch:
                    handles = self.submit(batch)
                    for job, h in zip(batch, handles):
                        running.append((job, h))  # before announcing: a Ctrl-C in on_start still cancels it
                    for job in batch:
                        on_start(job)
                if not running:
                    return
                done = self.poll([h for _, h in running])
                for item in [r for r in running if any(r[1] is d for d in done)]:
                    running.remove(item)
                    on_result(item[0], self.collect(*item))
        except KeyboardInterrupt:
            for (job, _), outcome in zip(running, self.cancel(running)):
                on_result(job, outcome)
            raise


def register_executor(cls: type[Executor]) -> type[Executor]:
    """Add an executor (usable as a class decorator)."""
    from vitbench.registry import Kind, register

    register(Kind.EXECUTOR, cls.name, cls, requires=cls.requires, provides=tuple(cls.Options.model_fields),
             description=cls.description)
    return cls


def executor_class(name: str) -> type[Executor]:
    from vitbench.registry import Kind, get

    return get(Kind.EXECUTOR, name)


def get_executor(name: str, results_dir: str | Path | None = None, **options) -> Executor:
    """An executor by name with its options (from the study's `executor` block or the CLI)."""
    return executor_class(name)(results_dir, **options)


def wait_until(pred: Callable[[], bool], seconds: float, step: float = 0.2) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline and not pred():
        time.sleep(step)


__all__ = ["PREEMPT_SIGNAL", "STOP_SIGNALS", "Executor", "Job", "OnResult", "OnStart", "Outcome", "Role", "Stopped",
           "Stored", "executor_class", "failure", "get_executor", "is_timing", "now", "register_executor",
           "stopped_by", "wait_until"]
