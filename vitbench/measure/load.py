"""Other processes' CPU use while a measurement runs: the cause of most noise on a shared machine.

The CPU time every process used (psutil.cpu_times: user, nice, system, irq, softirq, steal) minus this process's
own (its threads included), over the wall time between enter and exit, is the number of cores others kept busy.
Steal counts as others': a hypervisor giving the core to another guest takes it from us just the same.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

BUSY_CORES = 0.5  # others using half a core or more on average: the measurement shared the machine


def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def _own_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


@dataclass
class LoadMeter:
    """`with LoadMeter() as m: ...` then `m.other_cores` (average cores used by other processes)."""

    other_cores: float | None = None
    wall_s: float = 0.0

    def __enter__(self) -> LoadMeter:
        self._proc = psutil.Process()
        self._t0, self._busy0, self._own0 = time.perf_counter(), _busy_s(), _own_s(self._proc)
        return self

    def __exit__(self, *exc) -> None:
        self.wall_s = time.perf_counter() - self._t0
        if self.wall_s > 0:
            others = (_busy_s() - self._busy0) - (_own_s(self._proc) - self._own0)
            self.other_cores = max(0.0, others / self.wall_s)

    @property
    def busy(self) -> bool:
        return self.other_cores is not None and self.other_cores >= BUSY_CORES


def cpu_quota_cores() -> float | None:
    """The CPU quota of this process's cgroup (v2 cpu.max or v1 cfs quota/period), in cores; None if unlimited."""
    v1 = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"
    for quota_file, period_file in (("/sys/fs/cgroup/cpu.max", None), v1):
        try:
            text = open(quota_file).read().split()
            if period_file is None:
                quota, period = text[0], text[1] if len(text) > 1 else "100000"
            else:
                quota, period = text[0], open(period_file).read().strip()
        except (OSError, IndexError):
            continue
        if quota in ("max", "-1"):
            return None
        try:
            return int(quota) / int(period)
        except ValueError:
            return None
    return None
