"""The host-memory budget of everything vitbench runs, so that a too-large request ends as an out-of-memory result
instead of the kernel's OOM killer taking the machine (and whatever else runs on it) down.

On CPU an allocation past what the machine has rarely raises: pages are handed out as they are touched, and when
they run out the kernel kills a process, not necessarily ours, after the machine has been swapping. max-batch
probes have always run against a budget (vitbench.measure.max_batch); this module gives the same rule to the rest:

- every `vitbench` command runs under `guard_this_process()` (started by the CLI): a watchdog thread reads the
  resident memory of the command's process tree every WATCH_S and, past the budget, ends the process at once
  with one line saying so and exit code EXIT_OVER_BUDGET (a bench of batch 1,000,000, a FLOP count at 8192 px,
  `bench --devices 8` whose ranks together pass it); its ranks, workers and probes die with it;
- the local executor watches every trial's process tree the same way (`TreeMemory`) and stops one that passes
  its budget, with everything it started: its row says `oom`, and the sweep goes on.

A budget holds for the whole process tree of a command or a trial (its ranks, data workers, peak probes):
`TreeMemory` sums the resident sets of a process and of every process below it. The sum is an upper bound: pages
that several processes share (the framework's libraries, a forked child's copy-on-write pages) count in each,
as max-batch's probes count their ranks (vitbench.measure.probe). The processes below are looked up every
TREE_SCAN_S (one pass over /proc, milliseconds), their memory read every WATCH_S (microseconds each); a command's
own guard looks them up only while it has children at all, so a one-process measurement pays nothing for it.

Each process is watched once, by whoever can act on it: a trial process (and its tree) by the executor, which
stops that trial alone; a max-batch probe by its search, which records it as over budget and goes on. So a tree
stops at the processes a watcher in this process keeps apart (`watch_apart`) and at fork servers
(vitbench.forkservers: idle after their imports, their children the trials and probes of the line before).

The budget is `VITBENCH_MEMORY_LIMIT_GIB` when set, else half the memory available when it is computed (the rule
max-batch uses), rounded down to three significant binary digits (`coarse`): the other half stays for the rest of
the machine. It bounds host memory on any device; on an
accelerator the device's own out-of-memory error still decides for device memory.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time

from vitbench.errors import ConfigError

ENV = "VITBENCH_MEMORY_LIMIT_GIB"
AVAILABLE_FRACTION = 0.5  # of the memory available now (max-batch on CPU uses this budget too)
WATCH_S = 0.05  # how often resident memory is read; an allocation of 20 GB takes seconds to touch its pages
# how often the processes below a watched one are looked up: a rank or worker starts in about a second (a Python
# interpreter and its framework), and one pass over /proc took 3-14 ms on the 2-core CI machine (146 processes,
# load 2-8), so about 1 % of a core at most
TREE_SCAN_S = 1.0
EXIT_OVER_BUDGET = 1  # as an out-of-memory error (vitbench.cli.EXIT_OOM)


def budget_mib(limit_gib: float | None = None) -> float:
    """The budget in MiB: `limit_gib`, else $VITBENCH_MEMORY_LIMIT_GIB, else half the memory available now, rounded
    down (`coarse`)."""
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

    return coarse(psutil.virtual_memory().available / 2**20 * AVAILABLE_FRACTION)


def coarse(mib: float) -> float:
    """`mib` rounded down to three significant binary digits (down by less than 1/8: 6,975 and 7,034 MiB are both
    6,656), so that runs a moment apart read one budget: what other processes hold moves the available memory
    between two reads, and a largest batch is compared only under the same budget (its metric is bounded_by it:
    a budget read to the MiB made every CPU run's its own)."""
    if not mib > 0:
        return mib
    step = 2.0 ** math.floor(math.log2(mib)) / 8
    return math.floor(mib / step) * step


def describe(budget: float, limit_gib: float | None = None) -> str:
    """Where a budget came from, for messages (with the way to change it)."""
    if limit_gib is not None:
        return f"{budget:.0f} MiB (memory_limit_gib)"
    if os.environ.get(ENV, "").strip():
        return f"{budget:.0f} MiB (${ENV})"
    return f"{budget:.0f} MiB (half the memory available at the start; set ${ENV} to change it)"


_apart: set[int] = set()  # processes this process watches against a budget of their own (and what they start)


def watch_apart(pid: int) -> None:
    """Process `pid`, started by this process, is watched on its own (a trial, a probe): no tree this process
    watches counts it or what it starts, until `end_apart(pid)`."""
    _apart.add(pid)


def end_apart(pid: int) -> None:
    _apart.discard(pid)


def _kept_apart(pid: int) -> bool:
    from vitbench.procmem import is_fork_server

    return pid in _apart or is_fork_server(pid)


class TreeMemory:
    """Resident memory of process `pid` and every process below it, in MiB (see the module docstring); `own`:
    `pid` is this process, whose children a cheap system call can rule out before any look-up."""

    def __init__(self, pid: int, own: bool = False):
        self.pid, self.own = pid, own
        self.below: set[int] = set()
        self.processes = 1  # how many processes the last reading summed
        self._next_scan = 0.0

    def mib(self) -> float | None:
        """The tree's resident MiB now; None when `pid` itself is gone."""
        from vitbench.procmem import descendants, resident_kib

        total = resident_kib(self.pid)
        if total is None:
            return None
        now = time.monotonic()
        if now >= self._next_scan:
            self._next_scan = now + TREE_SCAN_S
            self.below = descendants(self.pid, _kept_apart) if not self.own or _has_children() else set()
        for p in list(self.below):
            kib = resident_kib(p)
            if kib is None:
                self.below.discard(p)  # ended
            else:
                total += kib
        self.processes = 1 + len(self.below)
        return total / 1024


def _has_children() -> bool:
    """Has this process any child (running or not yet reaped)? One waitid(2) that reaps nothing; psutil where
    there is no waitid (macOS before Python 3.13)."""
    if not hasattr(os, "waitid"):
        import psutil

        try:
            return bool(psutil.Process().children())
        except psutil.Error:
            return True
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except OSError:  # no waitid here: assume there may be
        return True
    return True


class _Guard(threading.Thread):
    def __init__(self, budget: float, about: str):
        super().__init__(name="vitbench-memory-guard", daemon=True)
        self.budget, self.about = budget, about
        self.stopped = threading.Event()

    def run(self) -> None:
        tree = TreeMemory(os.getpid(), own=True)
        while not self.stopped.wait(WATCH_S):
            rss = tree.mib()
            if rss is not None and rss > self.budget:
                _over_budget(rss, self.about, tree.processes)


_model_steps = threading.Event()  # set once this process sets up a model's step (note_model_steps)


def note_model_steps() -> None:
    """This process sets up or runs a model's steps from now on (vitbench.measure.group marks it, for itself or for
    the ranks it launches): past the budget, the message then says that a smaller batch, resolution or model
    fits. Before, it names no cause: what passed the budget was not a model (issue 50: a brace range expanded to
    10^9 paths before any model was built was reported as a batch too large)."""
    _model_steps.set()


def _over_budget(rss: float, about: str, processes: int = 1) -> None:
    """End this process now: the main thread may be inside one native allocation that never returns. The
    processes it started die with it (ranks and probes watch their parent: vitbench.procmem.die_with_parent)."""
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed pipe must not keep us alive
        pass
    who = "this process" if processes == 1 else f"this command ({processes} processes)"
    way = ("a smaller batch, resolution or model fits" if _model_steps.is_set() else
           f"it needs more memory than that before any model step ran (${ENV} sets the budget)")
    os.write(2, f"\noom: vitbench stopped: {who} passed its memory budget of {about} with {rss:.0f} MiB "
                f"resident; {way}\n".encode())
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
