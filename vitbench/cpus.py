"""The CPUs this process may use, how much of them other processes take, and the CPU thread count that follows.

- `usable_cpus` (the CPUs of this process's affinity), `cpu_quota_cores` (its cgroup's CPU quota) and `cpu_limit`
  (the whole cores it may keep busy at once: the smaller of the two).
- Other processes' CPU use: the CPU time every process used (psutil.cpu_times: user, nice, system, irq, softirq,
  steal) minus this process's own (its threads and waited-for children included: `_own_s`), over the wall time
  between two readings, is the number of cores others kept busy. Steal counts as others': a hypervisor giving the
  core to another guest takes it from us just the same. `mark` and `others_since` measure it around anything
  (vitbench.measure.load.LoadMeter wraps them around a measurement), `others_now` over a short sample.
- A backend's intra-op thread count (`capped_threads`, `free_threads`) and what its row records of how it was
  chosen (`threads_chosen`: `ThreadsChosen`). A pool whose workers meet at a barrier after every operation
  (OpenMP's, as torch's) collapses when one worker is descheduled by other load: the others spin, then sleep,
  until it runs again. Measured on a 2-core machine with 1.4-1.7 cores of other load (docs/measurement.md,
  "Threads on a busy machine"): ViT-Nano/4 training at 32 px, batch 32, 22 img/s on 2 threads against 810 on 1.
  Such a backend lowers its count to the cores others leave free when the trial asks for none (`free_threads`).
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass

import psutil

from vitbench.choices import Choice
from vitbench.errors import ConfigError, VitbenchWarning, clip

BUSY_CORES = 0.5  # others using half a core or more on average: the measurement shared the machine
SAMPLE_S = 0.1  # others' load before a trial: /proc/stat counts in 10 ms ticks, so 0.1 s on n CPUs is 10 n ticks


class ThreadsChosen(Choice):
    """How a row's thread count (its env's `threads`) was chosen: the row's env keeps it as `threads_chosen`."""

    REQUESTED = "requested"  # the trial's `threads`
    CAPPED = "capped"  # the trial's `threads` was more than the usable CPUs (the request is `threads_requested`)
    FREE_CORES = "free_cores"  # none requested: the count in force, lowered to the cores others left free
    DEFAULT = "default"  # none requested: the framework's own count (it honours OMP_NUM_THREADS and the like)


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity; cgroup quotas aside), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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


def cpu_limit() -> int:
    """Whole cores this process may keep busy at once: its usable CPUs, fewer under a cgroup quota (rounded down:
    threads beyond a quota run until it is spent, then all wait out the period), at least 1."""
    quota = cpu_quota_cores()
    n = usable_cpus()
    return max(1, min(n, int(quota)) if quota else n)


def free_cores(other_cores: float, limit: int) -> int:
    """The cores of `limit` that others leave free: their load rounded to whole cores, a core counted as taken from
    BUSY_CORES of it on (the busy threshold of every row), at least 1."""
    taken = math.floor(other_cores + 1 - BUSY_CORES)
    return max(1, limit - taken)


# -----------------------------------------------------------------------------------------------------------------
# Other processes' CPU use
# -----------------------------------------------------------------------------------------------------------------
def _busy_s() -> float:
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


def _own_s(proc: psutil.Process) -> float:
    """A process's CPU seconds: its own and its waited-for children's. This process's children's part is
    os.times()'s: psutil reports every process's as 0 on macOS (its docs, Process.cpu_times), where the system
    tells it to the process itself only (getrusage(RUSAGE_CHILDREN)); on Linux both read the kernel's same counters
    (cutime and cstime). Another process's reaped children stay uncounted there (TreeMeter counts them itself)."""
    t = proc.cpu_times()
    if proc.pid == os.getpid():
        c = os.times()
        return t.user + t.system + c.children_user + c.children_system
    return t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)


@dataclass(frozen=True)
class Mark:
    """The clocks at one moment: wall time, every process's CPU time, this process's (own_s; per_pid: each of
    the measurement's own processes', where several are)."""

    wall: float
    busy_s: float
    own_s: float
    per_pid: tuple[tuple[int, float], ...] = ()

    @classmethod
    def now(cls, own: list[psutil.Process] | None = None) -> Mark:
        """`own`: the processes whose CPU time is this measurement's own (default: this process alone); one that
        is gone is left out."""
        if own is None:
            return cls(time.perf_counter(), _busy_s(), _own_s(psutil.Process()))
        per_pid = []
        for p in own:
            try:
                per_pid.append((p.pid, _own_s(p)))
            except psutil.Error:
                pass
        return cls(time.perf_counter(), _busy_s(), sum(s for _, s in per_pid), tuple(per_pid))


def others_since(mark: Mark, own: list[psutil.Process] | None = None) -> tuple[float, float | None]:
    """(wall seconds since `mark`, average cores other processes kept busy meanwhile; None over no time).
    `own`: as `Mark.now`'s, the same processes as the mark's: their time between the two readings is ours, each
    counted only where both readings have it (a peer that exited meanwhile: its last stretch is read as others',
    never its whole lifetime)."""
    now = Mark.now(own)
    wall = now.wall - mark.wall
    if wall <= 0:
        return wall, None
    if own is None:
        ours = now.own_s - mark.own_s
    else:
        before = dict(mark.per_pid)
        ours = sum(s - before[pid] for pid, s in now.per_pid if pid in before)
    return wall, max(0.0, ((now.busy_s - mark.busy_s) - ours) / wall)


class TreeMeter:
    """`with TreeMeter() as m: ...` then `m.other_cores`: the cores processes other than this one *and its
    descendants* kept busy meanwhile (the machine's busy time less the CPU time of this process tree, over the wall
    time). Where a run is several processes at once (`vitbench ab`: the sides' sweeps, their trials, their fork
    servers), a single process's `others_since` counts its siblings as others; this one does not.

    A process's CPU time is its own plus that of the children it has waited for (the kernel adds a reaped child's
    total to its parent's). So the tree's time is this process's (its reaped children's included) plus, for every
    descendant whose total no live ancestor of it took in, that descendant's total when last read. Descendants are
    read every `every_s` seconds from a thread: one that vanished while its parent was still seen afterwards was
    reaped by that parent (counted there); one whose parent had died first (a fork server left behind by its sweep,
    which keeps reaping its trials) counts itself, as last read (a last `every_s` of its CPU time can be
    missed). Off Linux another process's reaped children are not in what it is read to use (psutil reads them as
    0 on macOS; `_own_s`): there a descendant reaped by its parent counts itself, as last read, unless that parent
    was reaped in turn by this process or by one this process took in (then os.times() holds them both)."""

    def __init__(self, every_s: float = 0.25) -> None:
        self.every_s = every_s
        self.other_cores: float | None = None
        self.tree_s = 0.0  # CPU seconds this process and its descendants used meanwhile
        # (pid, create time) -> (parent pid, own + reaped children's CPU seconds, the last reading it was in)
        self._seen: dict[tuple[int, float], tuple[int, float, int]] = {}
        self._readings = 0
        self._alive: dict[int, int] = {}  # pid -> index of the last reading it was seen alive in (not a zombie)
        self._stop = threading.Event()

    def _sample(self) -> None:
        self._readings += 1
        for child in psutil.Process().children(recursive=True):
            try:
                with child.oneshot():
                    t, ppid, key = child.cpu_times(), child.ppid(), (child.pid, child.create_time())
                    alive = child.status() != psutil.STATUS_ZOMBIE
                self._seen[key] = (ppid, t.user + t.system + t.children_user + t.children_system, self._readings)
                if alive:
                    self._alive[child.pid] = self._readings
            except psutil.Error:  # it exited meanwhile
                pass

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def _descendants_s(self) -> float:
        """The descendants' CPU seconds that no process of the tree took in by reaping them (class docstring)."""
        me, taken, by_pid = os.getpid(), {}, {}
        for key in self._seen:
            by_pid.setdefault(key[0], []).append(key)
        return sum(cpu - self._before.get(key, 0.0) for key, (_, cpu, _) in self._seen.items()
                   if not self._taken_in(key, me, taken, by_pid))

    def _taken_in(self, key: tuple[int, float], me: int, taken: dict, by_pid: dict) -> bool:
        """Whether the descendant `key`'s CPU time is in another process's reading (class docstring); off Linux,
        where that depends on its parent's (the last process seen under its parent pid before it started: by_pid),
        `taken` memoises the answers."""
        ppid, _, seen = self._seen[key]
        if seen == self._readings:  # still there: read itself
            return False
        # gone while its parent still ran: reaped by it (a parent that died first, even if not yet reaped
        # itself, left it to init: an orphan, which counts itself)
        if not (ppid == me or self._alive.get(ppid, 0) > seen):
            return False
        if ppid == me or sys.platform.startswith("linux"):  # in os.times(), or in its parent's reading
            return True
        if key not in taken:
            taken[key] = False  # (stale readings of reused pids that lead back here: counted)
            parents = [k for k in by_pid.get(ppid, ()) if k[1] <= key[1]]
            taken[key] = bool(parents) and self._taken_in(max(parents, key=lambda k: k[1]), me, taken, by_pid)
        return taken[key]

    def __enter__(self) -> TreeMeter:
        self._wall, self._busy, self._own = time.perf_counter(), _busy_s(), _own_s(psutil.Process())
        self._sample()
        self._before = {k: cpu for k, (_, cpu, _) in self._seen.items()}  # used before the block
        self._thread = threading.Thread(target=self._run, name="vitbench-tree-meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        wall = time.perf_counter() - self._wall
        own = _own_s(psutil.Process()) - self._own
        self.tree_s = own + self._descendants_s()
        self.other_cores = max(0.0, (_busy_s() - self._busy - self.tree_s) / wall) if wall > 0 else None


def others_now(seconds: float = SAMPLE_S) -> float:
    """Average cores other processes keep busy over the next `seconds` (this process sleeping)."""
    mark = Mark.now()
    time.sleep(seconds)
    return others_since(mark)[1] or 0.0


# -----------------------------------------------------------------------------------------------------------------
# A backend's thread count
# -----------------------------------------------------------------------------------------------------------------
def capped_threads(threads: int | None) -> tuple[int | None, dict]:
    """The intra-op thread count a backend may set for `threads` (None: the framework's default), and what a row
    records about it (`threads_chosen`): more threads than usable CPUs are capped at the CPUs, with a warning,
    and the row keeps the request (`threads_requested`). Thread pools far beyond the cores crash OpenMP runtimes
    (a segfault at 100,000) and, below that, only oversubscribe: nothing a measurement wants."""
    if threads is None:
        return None, {"threads_chosen": ThreadsChosen.DEFAULT.value}
    if threads < 1:
        raise ConfigError(f"threads must be >= 1, got {threads}")
    n = usable_cpus()
    if threads <= n:
        return threads, {"threads_chosen": ThreadsChosen.REQUESTED.value}
    warnings.warn(VitbenchWarning(f"threads {clip(str(threads), 30)} is more than the {n} CPU(s) this process "
                                  f"may use: capped at {n} (a measured row keeps the request as "
                                  "threads_requested)"), stacklevel=2)
    return n, {"threads_chosen": ThreadsChosen.CAPPED.value, "threads_requested": threads}


def unset_threads(in_force: int, devices: int = 1) -> tuple[int | None, dict]:
    """A CPU trial's thread count when it asks for none: OMP_NUM_THREADS set, the framework's own reading of it
    (None, 'default'); else `free_threads`: an OpenMP pool's workers spin at a barrier after every operation, so
    under other load a descheduled one stalls the rest (docs/measurement.md, "Threads on a busy machine"). One
    rule for torch and the runtimes."""
    if "OMP_NUM_THREADS" in os.environ:
        return capped_threads(None)
    return free_threads(in_force, devices)


def free_threads(in_force: int, devices: int = 1, sample_s: float = SAMPLE_S) -> tuple[int, dict]:
    """For a trial that asks for no thread count, on a backend whose pool stalls when a worker is descheduled:
    `in_force` (the framework's count in this process: its default in a fresh one, or what this process set),
    lowered to `cpu_limit()` and to the cores other processes leave free over a `sample_s` sample
    (`free_cores`), at least 1; with `devices` processes of one group on the CPUs (each a rank calling this), a
    1/devices share of the limit, without a sample (the other ranks, starting, are not other load). Returns it
    and what the row records (`threads_chosen`, `threads_other_cores`: the sample, None without one)."""
    limit = cpu_limit()
    if devices > 1:
        n, others = max(1, min(in_force, limit // devices)), None
    else:
        others = others_now(sample_s)
        n = max(1, min(in_force, free_cores(others, limit)))
    return n, {"threads_chosen": ThreadsChosen.FREE_CORES.value, "threads_other_cores": others}
