"""The executor interface: `Executor` (four primitives and the one queue loop that drives them), `Outcome` and who
stores its record (`Stored`), the failure row of a job that wrote none, and the executors' registry
(`register_executor`, `executor_class`, `get_executor`). The package vitbench.executors re-exports every name;
its docstring states the contract."""

from __future__ import annotations

import enum
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from vitbench.errors import ConfigError
from vitbench.executors.signals import STOP_SIGNALS, deferred
from vitbench.job import Job, Role
from vitbench.record import ErrorInfo, Record, Status


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


def wants_gpu(job: Job) -> bool:
    """A trial whose device is a GPU in its backend's spelling (torch's cuda:N, JAX's gpu): a cluster executor
    asks the scheduler for one unless told how many."""
    from vitbench.backends.kinds import DeviceKind
    from vitbench.backends.spec import device_kind

    return device_kind(str(job.config.get("device", "cpu"))) is DeviceKind.GPU


def gpus_wanted(job: Job) -> int:
    """The GPUs a cluster executor asks the scheduler for, for a trial not told how many: none off a GPU; else
    its `devices` (a `devices: 4` trial got 1 and its ranks failed to start), plus its device index, since a
    scheduler numbers the GPUs it gives from 0 (`cuda:1` needs two of them to exist)."""
    if not wants_gpu(job):
        return 0
    from vitbench.backends.kinds import DEFAULT_DEVICES
    from vitbench.backends.spec import device_index

    index = device_index(str(job.config.get("device", ""))) or 0
    return int(job.config.get("devices", DEFAULT_DEVICES)) + index


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
            problems = "; ".join(f"{'.'.join(str(p) for p in x['loc']) or '(options)'}: "
                                 f"{x['msg'].removeprefix('Value error, ')}"
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
        running: dict[int, tuple[Job, Any]] = {}  # by the handle's id, in order of submission
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
                        running[id(h)] = (job, h)  # before announcing: a Ctrl-C in on_start still cancels it
                    for job in batch:
                        on_start(job)
                if not running:
                    return
                # matched by id, each finished job leaving `running` as its result is taken (a Ctrl-C in
                # on_result cancels the rest): matching every handle against every finished one was O(n^2) per
                # poll, 25 s for 10,000 jobs of an unbounded slurm or ray sweep (found by a scale review)
                for h in self.poll([h for _, h in running.values()]):
                    if (item := running.pop(id(h), None)) is not None:
                        on_result(item[0], self.collect(*item))
        except KeyboardInterrupt:
            with deferred(STOP_SIGNALS):  # the running trials' rows are written whole, whatever comes next
                left = list(running.values())
                for (job, _), outcome in zip(left, self.cancel(left)):
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
