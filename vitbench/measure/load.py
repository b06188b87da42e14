"""Other processes' CPU use while a measurement runs: the cause of most noise on a shared machine.

`LoadMeter` reads the clocks of vitbench.cpus (every process's CPU time minus this process's own, over the wall
time between enter and exit: the number of cores others kept busy) around a measurement; a row whose
measurement saw others use BUSY_CORES or more shared the machine.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitbench.cpus import BUSY_CORES, Mark, others_since

__all__ = ["BUSY_CORES", "LoadMeter"]


@dataclass
class LoadMeter:
    """`with LoadMeter() as m: ...` then `m.other_cores` (average cores used by other processes)."""

    other_cores: float | None = None
    wall_s: float = 0.0

    def __enter__(self) -> LoadMeter:
        self._mark = Mark.now()
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s, self.other_cores = others_since(self._mark)

    @property
    def busy(self) -> bool:
        return self.other_cores is not None and self.other_cores >= BUSY_CORES
