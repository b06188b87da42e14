"""What a task is: one module that declares its parameters, what it measures, and how results are shown.

A task (a `Task` subclass, registered with `register_task`) has
- `Params`: its pydantic parameter model (vitbench.tasks.fields.params_model): THE declaration of its fields and
  defaults; a trial's config is `Params(...).config()` and the trial key hashes it with the method versions;
- `kind`: the kind of record it writes (several tasks may write one kind: infer and train write 'bench');
- `needs`: the backend capabilities it uses (a study asking a backend for more fails when it is parsed);
- `metrics`: typed metrics (unit, direction, what `compare` may decide on, where raw samples come from);
- `run(params) -> Record`: the measurement (vitbench.record.Record.measured), run in a trial's own process.
What `vitbench report` shows per record kind is the report's own business (vitbench.report.parts and .views): a
task module never names report code; the report, compare and the sweep's live line iterate the registry and never
name a task.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from vitbench.backends.base import Capability, backend_spec
from vitbench.errors import clip
from vitbench.measure.load import BUSY_CORES, OTHER_LOAD
from vitbench.measure.noise import UNSTABLE
from vitbench.record import OVERLAPPED, finite_number
from vitbench.registry import Kind, entries, get, register
from vitbench.tasks.fields import TaskParams

if TYPE_CHECKING:
    from vitbench.record import Record, RowProblem


class Role(enum.Enum):
    MEASUREMENT = "measurement"
    CALIBRATION = "calibration"  # the device's speed, measured at the start of every sweep run (compare divides)


FRACTION = "fraction"  # the unit of a share of a whole (an accuracy, MFU): at most 1 (Metric.maximum)


@dataclass(frozen=True)
class Metric:
    """A metric a record kind carries, declared once.

    comparable: `vitbench compare` may decide on it; default_compare: it does unless told otherwise.
    speed: it scales with the machine's speed (divided by the calibration under --normalize); an ok row's is
    more than 0 (no work done is no measure).
    samples: where per-sample values come from for the decision (e.g. per-step img/s from raw step times);
    None: the metric's single value per record. samples_from: the raw list they are computed from (an ok row's
    holds at least one number, each > 0: a row of no timed steps, or of negative ones, measured nothing).
    bounded_by: metrics of the same record that bound this one (the largest batch by the memory budget): where
    they differ between two sides, a change of this one is theirs, not the code's, and is not decided.
    positive: an ok row's is more than 0, not 0 (a forward's FLOPs: a model that does no work measured nothing);
    a speed is.
    minimum: the least a value of it can be (a count, size, speed, time or fraction: 0); None: any finite number
    (a plug-in's log-likelihood). A metric whose unit is in NOT_NUMBERS is no number and has none. An ok row
    holding a value below it, or no finite number, is refused where it is written and where it is read (row_check).
    maximum: the most a value of it, and each of its samples_from, can be (None: no bound; a FRACTION's is 1
    unless declared): a value above it is one vitbench could not have measured, refused where it is read
    (row_check). A metric of unit "bool" is a flag:
    an ok row's is true, false or null (absent), anything else is refused where it is read (row_check).
    lower_bound_when: a flag of the same record that, where true, makes this value a lower bound, not the value
    (the largest batch where the search stopped at its cap: that batch or more fits): compare says so beside its
    verdict (two sides both at it are alike only up to it), history shows it '\u2265'.
    """

    name: str
    unit: str
    higher_is_better: bool
    description: str
    comparable: bool = False
    default_compare: bool = False
    speed: bool = False
    samples: Callable[[Record], list[float] | None] | None = None
    samples_from: str | None = None
    bounded_by: tuple[str, ...] = ()
    positive: bool = False
    minimum: float | None = 0.0
    maximum: float | None = None
    lower_bound_when: str | None = None

    @property
    def above_zero(self) -> bool:
        """An ok row's value is more than 0 (a speed, or a metric declared `positive`)."""
        return self.speed or self.positive

    def __post_init__(self):
        if self.unit == FRACTION and self.maximum is None:  # a share of a whole (an accuracy 5.0 was an ok row's)
            object.__setattr__(self, "maximum", 1.0)
        if self.comparable and (self.minimum is None or self.minimum < 0):  # compare decides on current/baseline
            raise ValueError(f"metric {self.name!r}: a comparable metric needs a minimum >= 0 (compare decides on "
                             "ratios of its values)")


ISO_TIME = "ISO 8601 UTC"  # the unit of a metric that is a time of day, not a number
TEXT = "text"  # the unit of a metric that is a name or a note (a timer, a kernel, where a peak came from)
FLAG = "bool"  # the unit of a metric that is a flag: true, false or null (Metric; row_check refuses others)
NOT_NUMBERS = (FLAG, ISO_TIME, TEXT)  # units of declared metrics that are not numbers (Metric.minimum: others)

# Declared once for every record kind whose measurement is timed (bench steps, serve, the calibration): its readers
# decide on it (compare's busy floor, ab's busy pairs, the report's calibration line: vitbench.measure.load.busy).
OTHER_LOAD_CORES = Metric(OTHER_LOAD, "cores", False, "average cores other processes kept busy while the row was "
                          f"measured (vitbench.measure.load); the machine was shared at {BUSY_CORES:g} or more")
# Declared once for every record kind whose measurement judges its own noise (bench steps, serve): the flag
# row_check checks and the report's caveats read (vitbench.report.caveats), and its reasons.
UNSTABLE_ROW = Metric(UNSTABLE, FLAG, False, "the measurement looks untrustworthy (vitbench.measure.noise: "
                      "bench's samples by CV, other load, few or short samples, drift, the GPU slowing down; "
                      "serve's by other load only, LoadGen's latencies being no step samples)")
NOISE_REASONS = Metric("noise", TEXT, False, "why the row is unstable, one clause per flag (null: stable)")
# Declared once for every record kind whose steps are timed (bench steps, serve's prepared batches)
TIMER = Metric("timer", TEXT, True, "the clock the steps were timed with (host_clock; device events on a GPU)")
# Declared once for every record kind whose measurement compiles (bench steps, XLA's FLOP count).
COMPILE_CACHED = Metric("compile_cached", FLAG, True, "the compiled code came from the persistent compile cache "
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

    @classmethod
    def headline_of(cls, rec: Record) -> str | None:
        """The metric an ok row of this task must hold (run_checked, row_check): its headline; a task whose rows
        measure differently by their settings says so per row."""
        return cls.headline

    @abstractmethod
    def run(self, params: TaskParams) -> Record: ...

    @classmethod
    def fields(cls) -> tuple[str, ...]:
        return tuple(cls.Params.model_fields)

    @classmethod
    def runs_on(cls, backend: str) -> bool:
        """Whether backend `backend` (registered) provides everything this task needs."""
        return cls.needs <= backend_spec(backend).capabilities


def register_task(cls: type[Task], *, replace: bool = False) -> type[Task]:
    """Add a task (usable as a class decorator)."""
    register(Kind.TASK, cls.name, cls, provides=tuple(sorted(c.value for c in cls.needs)),
             description=cls.description, replace=replace)
    return cls


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


def setting_columns(kinds: Iterable[str] | None = None) -> frozenset[str]:
    """The columns of a tidy frame (vitbench.tidy) that hold a setting of a row of `kinds` (None: any kind): a
    trial-config field of a task of that kind, as the frame names it ('config.<name>' where that kind declares a
    metric of the name), less the fields that never define a measurement (BOOKKEEPING) and the seeds (draws that
    repeat one measurement). Per kind: another kind's metric or field never changes what is a setting here (a
    plug-in's metric named `threads` took bench's thread count out). Rows equal in every setting are repeats of one
    measurement; the report never summarises across a setting that varies."""
    from vitbench.tasks.fields import BOOKKEEPING, seed_fields

    wanted = None if kinds is None else set(kinds)
    metrics = kind_metrics()
    out: set[str] = set()
    for t in tasks(include_hidden=True).values():
        if wanted is not None and t.kind not in wanted:
            continue
        drop = {*BOOKKEEPING, *seed_fields(t.Params)}
        own = metrics.get(t.kind, {})
        out.update(f"config.{f}" if f in own else f for f in t.fields() if f not in drop)
    return frozenset(out)


def comparable_metrics() -> dict[str, Metric]:
    """Every metric compare may decide on, by name (one declaration per name across kinds)."""
    out: dict[str, Metric] = {}
    for by_name in kind_metrics().values():
        out.update({n: m for n, m in by_name.items() if m.comparable})
    return out


def kinds_with_role(role: Role) -> set[str]:
    return {t.kind for t in tasks(include_hidden=True).values() if t.role is role}


def calibration_task() -> tuple[type[Task], Metric] | None:
    """The calibration task (Role.CALIBRATION) and the metric speeds are divided by: its headline, not whatever
    comes first among its metrics (a reordering would have divided by the matrix size)."""
    for t in tasks(include_hidden=True).values():
        if t.role is Role.CALIBRATION:
            return t, next(m for m in t.metrics if m.name == t.headline)
    return None


def headline(kind: str) -> Metric | None:
    """The metric a record of `kind` is summarised by on one line (the sweep's live line)."""
    for t in tasks(include_hidden=True).values():
        if t.kind == kind and t.headline:
            return kind_metrics()[kind].get(t.headline)
    return None


def run_checked(task: type[Task], params) -> Record:
    """`task().run(params)`, its record held to what every row of the task must be: a Record of the task's kind,
    ok only with its headline measured and nothing a reader would refuse (row_check); TypeError or
    NonFiniteResult (exit 1) otherwise. The one check of a sweep's trial (vitbench.trial) and a command's run
    (vitbench.cli): `bench --json` printed an ok row with img_per_s null where a backend's timer gave NaN, which
    a sweep made an error row."""
    from vitbench.errors import NonFiniteResult
    from vitbench.record import Record, Status

    rec = task().run(params)
    if not isinstance(rec, Record):
        raise TypeError(f"task {task.name!r} returned {type(rec).__name__}, not a vitbench.record.Record")
    if rec.kind != task.kind:  # its readers (row_check, the report's sections) find rows by the declared kind
        raise TypeError(f"task {task.name!r} returned a record of kind {clip(repr(rec.kind), 80)}; it declares "
                        f"{task.kind!r}")
    head = task.headline_of(rec)
    lacking = rec.unmeasured([head]) if rec.status is Status.OK and head else []
    if lacking:  # a row is ok only with what its task promises
        raise NonFiniteResult(f"task {task.name!r} measured no {lacking[0]} (got "
                              f"{clip(repr(rec.metrics.get(lacking[0])), 80)}); a row without its measure is not "
                              "ok")
    problem = row_check()(rec)  # what every reader would refuse is never written as ok
    if problem is not None:
        raise NonFiniteResult(f"task {task.name!r}: {problem.text}; a row with it is not ok")
    return rec


def row_check() -> Callable[[Record], RowProblem | None]:
    """A function of a row saying what is wrong with it as an ok row (None: nothing). A declared number (every unit
    but NOT_NUMBERS) that is not a finite number at least its `minimum` (and at most its `maximum`), or a flag
    (unit FLAG) that is not a bool: vitbench never writes one (the trial makes it an error row, vitbench.trial),
    the read is refused. (Samples are compare's to check, where they are used: checking every row's here cost 68 %
    more reading for rows of 1,000 steps; the raw list they come from, `Metric.samples_from`, is checked here, with
    one min(): not empty, numbers > 0; and one max() where the metric has a `maximum`.) The task's headline missing
    or null: vitbench wrote such rows before 2026-11-28 (finetune --skip-corrupt's accuracy null; vitbench.trial
    makes it an error row since), so the row is read as an error row, never as ok. The stores' readers apply it
    (vitbench.rows: `check=`): an ok row without its measure was taken as done by a resumed sweep, shown as `ok`
    with a blank by report, passed by compare as the baseline's, and silently dropped by history append;
    `img_per_s: -5` was a throughput of -5 in the report. The tables are read once, when it is made."""
    from vitbench.record import RowProblem, Status

    heads: dict[str, list[type[Task]]] = {}  # kind -> the tasks whose rows it is
    numbers: dict[str, dict[str, Metric]] = {}
    flags: dict[str, set[str]] = {}
    raw_lists: dict[str, dict[str, tuple]] = {}  # kind -> raw list -> the least and most a sample is (Metric)
    for t in tasks(include_hidden=True).values():
        heads.setdefault(t.kind, []).append(t)
        numbers.setdefault(t.kind, {}).update({m.name: m for m in t.metrics if m.unit not in NOT_NUMBERS})
        flags.setdefault(t.kind, set()).update(m.name for m in t.metrics if m.unit == FLAG)
        raw_lists.setdefault(t.kind, {}).update({m.samples_from: (m.minimum, m.maximum) for m in t.metrics
                                                 if m.samples_from})

    def problem(rec: Record) -> RowProblem | None:
        if rec.status is not Status.OK or rec.kind not in numbers:
            return None
        for name, m in numbers[rec.kind].items():
            v = rec.metrics.get(name)
            if v is not None and not (_number(v, m.minimum, m.maximum) and (not m.above_zero or v > 0)):
                least = " > 0" if m.above_zero else "" if m.minimum is None else f" >= {m.minimum:g}"
                most = "" if m.maximum is None else f" and at most {m.maximum:g}"
                return RowProblem(f"{name} = {clip(repr(v), 60)}, where vitbench writes a finite number{least}"
                                  f"{most} ({m.unit})", refuse=True)
        for name in flags[rec.kind]:
            v = rec.metrics.get(name)
            if v is not None and not isinstance(v, bool):  # "yes" or 1 was read as clean (report.caveats.true)
                return RowProblem(f"{name} = {clip(repr(v), 60)}, where vitbench writes true, false or null (a "
                                  "flag)", refuse=True)
        for key, (least, most) in raw_lists[rec.kind].items():
            bad = _not_samples(rec.raw.get(key), least, most)
            if bad:
                return RowProblem(f"raw.{key} {bad}, where vitbench writes the timed samples (each > 0"
                                  + ("" if not least else f", at least {least:g}")
                                  + ("" if most is None else f" and at most {most:g}") + ")", refuse=True)
        overlapped = rec.runner.get(OVERLAPPED)
        if overlapped is not None and not (isinstance(overlapped, list)  # (its items: objects; strings before)
                                           and all(isinstance(o, (dict, str)) for o in overlapped)):
            return RowProblem(f"runner.{OVERLAPPED} = {clip(repr(overlapped), 60)}, where vitbench writes a list "
                              "of the trials that ran beside it (\"yes\" was read as none: a shared-host row "
                              "shown clean)", refuse=True)
        lacking = rec.unmeasured(list(dict.fromkeys(h for t in heads[rec.kind] if (h := t.headline_of(rec)))))
        if lacking:
            return RowProblem(f"an ok row without its {lacking[0]}", refuse=False)
        return None

    return problem


def _not_samples(xs, least: float | None = None, most: float | None = None) -> str | None:
    """What is wrong with a raw list of samples (None: nothing, or no list at all: rows that keep none). min()
    is one C loop (a JSON row cannot hold NaN or inf: the reader refuses them first); a text or null in the
    list makes it raise. With `most` (Metric.maximum), max() too: a sample above it was never measured; below
    `least` (Metric.minimum, where more than 0) neither."""
    if not isinstance(xs, list):
        return None
    if not xs:
        return "is empty (no timed step)"
    try:
        lo = min(xs)
        hi = max(xs) if most is not None else None
    except TypeError:
        return "holds something other than numbers"
    if isinstance(lo, bool) or not finite_number(lo) or lo <= 0 or (least is not None and lo < least):
        return f"holds {clip(repr(lo), 40)}"
    if hi is not None and not (finite_number(hi) and hi <= most):
        return f"holds {clip(repr(hi), 40)}"
    return None


def _number(v, minimum: float | None, maximum: float | None = None) -> bool:
    return finite_number(v) and (minimum is None or v >= minimum) and (maximum is None or v <= maximum)
