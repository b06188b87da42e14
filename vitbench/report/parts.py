"""What `vitbench report` shows, registered per record kind: a section (`ReportPart`) is a summary table of the
ok rows of its kinds plus figures. The report's own views are registered in vitbench.report.views; a plug-in
that adds a task with a record kind of its own registers its section here too (docs/plugins.md). The report
iterates the registered sections and names no task; tasks never name report code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    NotDrawn when there is something but too little to draw."""

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


def register_report(part: ReportPart) -> ReportPart:
    """Add a report section (the report's own views, or a plug-in's for its own record kind)."""
    if all(p.name != part.name for p in _REPORT_PARTS):
        _REPORT_PARTS.append(part)
    return part


def report_parts() -> list[ReportPart]:
    """Every registered section, by order: the report's views (registered when vitbench.report.views is imported,
    as vitbench.report does), then what plug-ins registered when loaded."""
    from vitbench.registry import Kind, entries

    entries(Kind.TASK)  # plug-in task modules register their sections when imported
    return sorted(_REPORT_PARTS, key=lambda p: p.order)
