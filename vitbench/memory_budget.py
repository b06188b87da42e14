"""The host-memory budget of everything vitbench runs, so that a too-large request ends as an out-of-memory result
instead of the kernel's OOM killer taking the machine (and whatever else runs on it) down.

On CPU an allocation past what the machine has rarely raises: pages are handed out as they are touched, and when
they run out the kernel kills a process, not necessarily ours, after the machine has been swapping. max-batch
probes have always run against a budget (vitbench.measure.max_batch); this module gives the same rule to the rest:

- every `vitbench` command runs under `guard_this_process()` (started by the CLI): a watchdog thread reads the
  process's resident memory every WATCH_S and, past the budget, ends the process at once with one line saying so
  and exit code EXIT_OVER_BUDGET (a bench of batch 1,000,000, a FLOP count at 8192 px);
- the local executor watches every trial process the same way (`resident_mib`) and stops one that passes its
  budget: its row says `oom`, and the sweep goes on.

The budget is `VITBENCH_MEMORY_LIMIT_GIB` when set, else half the memory available when it is computed (the rule
max-batch uses): the other half stays for the rest of the machine. It bounds host memory on any device; on an
accelerator the device's own out-of-memory error still decides for device memory.
"""

from __future__ import annotations

import math
import os
import sys
import threading

from vitbench.errors import ConfigError

ENV = "VITBENCH_MEMORY_LIMIT_GIB"
AVAILABLE_FRACTION = 0.5  # of the memory available now (max-batch on CPU uses this budget too)
WATCH_S = 0.05  # how often resident memory is read; an allocation of 20 GB takes seconds to touch its pages
EXIT_OVER_BUDGET = 1  # as an out-of-memory error (vitbench.cli.EXIT_OOM)


def budget_mib(limit_gib: float | None = None) -> float:
    """The budget in MiB: `limit_gib`, else $VITBENCH_MEMORY_LIMIT_GIB, else half the memory available now."""
    if limit_gib is None:
        text = os.environ.get(ENV, "").strip()
        if text:
            try:
                limit_gib = float(text)
            except ValueError:
                limit_gib = math.nan
            if not (math.isfinite(limit_gib) and limit_gib > 0):
                raise ConfigError(f"${ENV}={text[:40]!r}: expected a positive number of GiB, e.g. 8")
    if limit_gib is not None:
        if not (math.isfinite(limit_gib) and limit_gib > 0):
            raise ConfigError(f"memory limit {limit_gib!r} GiB: expected a positive number")
        return limit_gib * 1024
    import psutil

    return psutil.virtual_memory().available / 2**20 * AVAILABLE_FRACTION


def describe(budget: float, limit_gib: float | None = None) -> str:
    """Where a budget came from, for messages (with the way to change it)."""
    if limit_gib is not None:
        return f"{budget:.0f} MiB (memory_limit_gib)"
    if os.environ.get(ENV, "").strip():
        return f"{budget:.0f} MiB (${ENV})"
    return f"{budget:.0f} MiB (half the memory available at the start; set ${ENV} to change it)"


def resident_mib(pid: int) -> float | None:
    """Resident memory of process `pid` in MiB (None when it is gone)."""
    import psutil

    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:  # NoSuchProcess, AccessDenied, ZombieProcess
        return None


class _Guard(threading.Thread):
    def __init__(self, budget: float, about: str):
        super().__init__(name="vitbench-memory-guard", daemon=True)
        self.budget, self.about = budget, about
        self.stopped = threading.Event()

    def run(self) -> None:
        pid = os.getpid()
        while not self.stopped.wait(WATCH_S):
            rss = resident_mib(pid)
            if rss is not None and rss > self.budget:
                _over_budget(rss, self.about)


def _over_budget(rss: float, about: str) -> None:
    """End this process now: the main thread may be inside one native allocation that never returns."""
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed pipe must not keep us alive
        pass
    os.write(2, (f"\noom: vitbench stopped: this process passed its memory budget of {about} with {rss:.0f} MiB "
                 "resident; a smaller batch, resolution or model fits\n").encode())
    os._exit(EXIT_OVER_BUDGET)


_guard: _Guard | None = None


def guard_this_process(limit_gib: float | None = None) -> float:
    """Watch this process's resident memory from a daemon thread and end the process past the budget (see the
    module docstring). Idempotent: a second call keeps the first guard. Returns the budget in MiB."""
    global _guard
    if _guard is not None and _guard.is_alive():
        return _guard.budget
    budget = budget_mib(limit_gib)
    _guard = _Guard(budget, describe(budget, limit_gib))
    _guard.start()
    return budget
