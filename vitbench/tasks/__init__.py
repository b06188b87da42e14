"""What a task is: one module that declares its parameters, what it measures, and how results are shown.

A task (a `Task` subclass, registered with `register_task`) has
- `Params`: its pydantic parameter model (vitbench.tasks.fields.params_model): THE declaration of its fields and
  defaults; a trial's config is `Params(...).config()` and the trial key hashes it with the method versions;
- `kind`: the kind of record it writes (several tasks may write one kind: infer and train write 'bench');
- `needs`: the backend capabilities it uses (a study asking a backend for more fails when it is parsed);
- `metrics`: typed metrics (unit, direction, what `compare` may decide on, where raw samples come from);
- `run(params) -> Record`: the measurement (vitbench.record.Record.measured), run in a trial's own process.
What `vitbench report` shows is declared beside the tasks as `ReportPart`s (tables and figures per record kind),
so the report, compare and the sweep's live line iterate the registry and never name a task.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from vitbench.backends.base import Capability
from vitbench.registry import Kind, entries, get, register
from vitbench.tasks.fields import TaskParams

if TYPE_CHECKING:
    import pandas as pd

    from vitbench.record import Record


class Role(enum.Enum):
    MEASUREMENT = "measurement"
    CALIBRATION = "calibration"  # the device's speed, measured at the start of every sweep run (compare divides)


@dataclass(frozen=True)
class Metric:
    """A metric a record kind carries, declared once.

    comparable: `vitbench compare` may decide on it; default_compare: it does unless told otherwise.
    speed: it scales with the machine's speed (divided by the calibration under --normalize).
    samples: where per-sample values come from for the decision (e.g. per-step img/s from raw step times);
    None: the metric's single value per record.
    """

    name: str
    unit: str
    higher_is_better: bool
    description: str
    comparable: bool = False
    default_compare: bool = False
    speed: bool = False
    samples: Callable[[Record], list[float] | None] | None = None


# Declared once for every record kind whose measurement compiles (bench steps, XLA's FLOP count).
COMPILE_CACHED = Metric("compile_cached", "bool", True, "the compiled code came from the persistent compile cache "
                        "(vitbench.measure.throughput.from_cache; null: nothing compiled, e.g. eager torch)")


class Task(ABC):
    """One kind of trial (see the module docstring)."""

    name: ClassVar[str]
    Params: ClassVar[type[TaskParams]]
    kind: ClassVar[str]
    description: ClassVar[str] = ""
    needs: ClassVar[frozenset[Capability]] = frozenset()
    metrics: ClassVar[tuple[Metric, ...]] = ()
    headline: ClassVar[str | None] = None  # the metric the sweep's live line shows
    version: ClassVar[int] = 1  # bump to invalidate this task's old trial keys
    repeat: ClassVar[bool] = True  # False: deterministic (FLOP counts), measured once whatever `repeats` says
    hidden: ClassVar[bool] = False  # not selectable in studies (the calibration workload)
    role: ClassVar[Role] = Role.MEASUREMENT
    calibrated: ClassVar[bool] = False  # a sweep measures the device's calibration for these trials

    @abstractmethod
    def run(self, params: TaskParams) -> Record: ...

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(cls.Params.model_fields)


def lazy(target: str, **bound: Any) -> Callable[..., Any]:
    """A function given as "module:name", imported on first call (keeps plotting and pandas out of the
    start-up of every trial process, which loads the registry, and a task module from importing the report
    layer); `bound` keyword arguments are passed on every call."""
    module, _, name = target.partition(":")

    def call(*args, **kwargs):
        import importlib

        return getattr(importlib.import_module(module), name)(*args, **{**bound, **kwargs})

    call.__qualname__ = call.__name__ = name
    call.target = target  # type: ignore[attr-defined]
    return call


@dataclass(frozen=True)
class Figure:
    """A report figure: tidy ok rows of `kinds` -> a matplotlib Figure, or None when there is nothing to draw."""

    name: str
    title: str
    make: Callable[[pd.DataFrame], Any]
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReportPart:
    """A section of `vitbench report`: a summary table of the ok rows of `kinds`, and figures.

    columns: the table's columns shown in the terminal (None: all); collapse: fold columns equal in every row
    into the caption; order: sections are shown by order, then registration."""

    name: str
    title: str
    kinds: tuple[str, ...]
    table: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    columns: tuple[str, ...] | None = None
    figures: tuple[Figure, ...] = field(default_factory=tuple)
    collapse: bool = True
    order: int = 50


_REPORT_PARTS: list[ReportPart] = []


def register_task(cls: type[Task], *, replace: bool = False) -> type[Task]:
    """Add a task (usable as a class decorator)."""
    register(Kind.TASK, cls.name, cls, provides=tuple(sorted(c.value for c in cls.needs)),
             description=cls.description, replace=replace)
    return cls


def register_report(part: ReportPart) -> ReportPart:
    """Add a report section (called by the module that owns the record kind it shows)."""
    if all(p.name != part.name for p in _REPORT_PARTS):
        _REPORT_PARTS.append(part)
    return part


def report_parts() -> list[ReportPart]:
    entries(Kind.TASK)  # the task modules register their parts when imported
    return sorted(_REPORT_PARTS, key=lambda p: p.order)


def tasks(include_hidden: bool = False) -> dict[str, type[Task]]:
    """Every registered task (built-ins and plug-ins), by name."""
    return {n: e.obj for n, e in entries(Kind.TASK).items() if include_hidden or not e.obj.hidden}


def get_task(name: str) -> type[Task]:
    return get(Kind.TASK, name)


def kind_metrics() -> dict[str, dict[str, Metric]]:
    """record kind -> {metric name: Metric}, over every registered task (what compare and report read)."""
    out: dict[str, dict[str, Metric]] = {}
    for t in tasks(include_hidden=True).values():
        out.setdefault(t.kind, {}).update({m.name: m for m in t.metrics})
    return out


def comparable_metrics() -> dict[str, Metric]:
    """Every metric compare may decide on, by name (one declaration per name across kinds)."""
    out: dict[str, Metric] = {}
    for by_name in kind_metrics().values():
        out.update({n: m for n, m in by_name.items() if m.comparable})
    return out


def kinds_with_role(role: Role) -> set[str]:
    return {t.kind for t in tasks(include_hidden=True).values() if t.role is role}


def headline(kind: str) -> Metric | None:
    """The metric a record of `kind` is summarised by on one line (the sweep's live line)."""
    for t in tasks(include_hidden=True).values():
        if t.kind == kind and t.headline:
            return kind_metrics()[kind].get(t.headline)
    return None
