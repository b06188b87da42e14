"""What `vitbench report` shows, registered per record kind: a section (`ReportPart`) is a summary table of the
ok rows of its kinds plus figures. The report's own views are registered in vitbench.report.views; a plug-in
that adds a task with a record kind of its own registers its section here too (docs/plugins.md). The report
iterates the registered sections and names no task; tasks never name report code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vitbench.errors import ConfigError, clip, shorten

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class NotDrawn:
    """What a figure's `make` returns when its rows are too few to draw it honestly (a fit from one point): the
    report shows `reason` in the figure's place."""

    reason: str


@dataclass(frozen=True)
class Figure:
    """A report figure: tidy ok rows of `kinds` -> a matplotlib Figure, None when there is nothing to draw, or
    NotDrawn when there is something but too little to draw. failed: it is given the rows of `kinds` whatever
    their status (column `status`), for a figure that draws what failed rows keep too (LoadGen's INVALID runs)."""

    name: str
    title: str
    make: Callable[[pd.DataFrame], Any]
    kinds: tuple[str, ...] = ()
    failed: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", _kinds(f"report figure {shorten(self.name)} ({_caller()})", self.kinds))


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

    def __post_init__(self) -> None:
        """Checked when made, in the plug-in's import: `figures=(Figure(...))`, a tuple missing its comma, failed
        only when the report drew it ('Figure' object is not iterable)."""
        what = f"report section {shorten(self.name)} ({_caller()})"
        object.__setattr__(self, "kinds", _kinds(what, self.kinds))
        figs = self.figures
        if not isinstance(figs, (tuple, list)) or not all(isinstance(f, Figure) for f in figs):
            got = (f"one Figure ({shorten(figs.name, 60)}): a one-element tuple needs its comma, "
                   "figures=(Figure(...),)" if isinstance(figs, Figure)
                   else f"{type(figs).__name__} {shorten(figs, 120)}")
            raise ConfigError(f"{what}: figures must be a tuple of vitbench.report.parts.Figure, got {got}")
        object.__setattr__(self, "figures", tuple(figs))


def _kinds(what: str, kinds) -> tuple[str, ...]:
    """`kinds` as a tuple of record kinds; a bare string (`kinds=("tokens")`: a tuple missing its comma) is
    refused."""
    if not isinstance(kinds, (tuple, list)) or not all(isinstance(k, str) for k in kinds):
        hint = ': a one-element tuple needs its comma, kinds=("name",)' if isinstance(kinds, str) else ""
        raise ConfigError(f"{what}: kinds must be a tuple of record kinds (strings), got {type(kinds).__name__} "
                          f"{shorten(kinds, 120)}{hint}")
    return tuple(kinds)


def _caller() -> str:
    """The module that made or registered a section: the first frame outside this module."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return str(frame.f_globals.get("__name__", "?")) if frame is not None else "?"


_REPORT_PARTS: list[ReportPart] = []
_OWNERS: dict[str, str] = {}  # section name -> the module that registered it


def register_report(part: ReportPart) -> ReportPart:
    """Add a report section (the report's own views, or a plug-in's for its own record kind)."""
    if not isinstance(part, ReportPart):
        raise ConfigError(f"register_report ({_caller()}): expected a vitbench.report.parts.ReportPart, got "
                          f"{type(part).__name__} {shorten(part, 120)}")
    if all(p.name != part.name for p in _REPORT_PARTS):
        _REPORT_PARTS.append(part)
        _OWNERS[part.name] = _caller()
    return part


def owner(part: ReportPart) -> str:
    """Who registered `part`, as the report's warnings name it: 'plug-in module m' or vitbench's own module."""
    module = _OWNERS.get(part.name, "?")
    return module if module == "vitbench" or module.startswith("vitbench.") else f"plug-in module {module}"


def failure(exc: BaseException) -> str:
    """An exception as a report's note and warning say it: its type and a clipped message."""
    msg = clip(" ".join(str(exc).split()), 200)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def covered_kinds(parts: list[ReportPart]) -> set[str]:
    """The record kinds some section shows (its table's kinds, its figures')."""
    return {k for p in parts for k in (*p.kinds, *(k for f in p.figures for k in f.kinds))}


def report_parts() -> list[ReportPart]:
    """Every registered section, by order: the report's views (registered when vitbench.report.views is imported,
    as vitbench.report does), then what plug-ins registered when loaded."""
    from vitbench.registry import Kind, entries

    entries(Kind.TASK)  # plug-in task modules register their sections when imported
    return sorted(_REPORT_PARTS, key=lambda p: p.order)
