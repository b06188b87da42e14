"""Other processes' CPU use while a measurement runs: the cause of most noise on a shared machine.

`LoadMeter` reads the clocks of vitbench.cpus (every process's CPU time minus this process's own, over the wall
time between enter and exit: the number of cores others kept busy) around a measurement; a row whose
measurement saw others use BUSY_CORES or more shared the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitbench.cpus import BUSY_CORES, Mark, others_since
from vitbench.record import finite_number

__all__ = ["BUSY_CORES", "OTHER_LOAD", "LoadMeter", "busy"]

OTHER_LOAD = "other_load_cores"  # a timed row's metric: LoadMeter.other_cores over its measurement


def busy(cores, missing: bool) -> bool:
    """Whether a recorded other load (a row's OTHER_LOAD) says the machine was shared: a number of at least
    BUSY_CORES. `missing`: the answer where none was recorded (null, absent, not a number): each reader says
    which way its rule errs (a verdict's noise floor assumes busy; a median of calibrations keeps the row)."""
    return cores >= BUSY_CORES if finite_number(cores) else missing


@dataclass
class LoadMeter:
    """`with LoadMeter() as m: ...` then `m.other_cores` (average cores used by other processes). `own`: the
    processes measured together (a group's ranks: each one's siblings are no other load), default this one."""

    own: list | None = None
    other_cores: float | None = None
    wall_s: float = 0.0

    def __enter__(self) -> LoadMeter:
        self._mark = Mark.now(self.own)
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s, self.other_cores = others_since(self._mark, self.own)

    @property
    def busy(self) -> bool:
        return busy(self.other_cores, missing=False)
