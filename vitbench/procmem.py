"""Process facts, from /proc on Linux and psutil where there is none (macOS): current RSS and a resettable peak
(VmHWM) in MiB; a process's descendants and their resident memory; dying with the parent.

On CPU there is no allocator peak, so a measurement's peak memory is the growth of the process's peak resident
set over its RSS at the start. Writing "5" to /proc/self/clear_refs resets VmHWM (Linux >= 4.0), so repeated
measurements in one process do not see each other's peaks. Where the peak cannot be reset, a difference of
lifetime peaks (ru_maxrss) would count only memory above every earlier phase's peak (a steady phase after a
compile that peaked higher: 0), so `PeakRSS` samples the current RSS from a thread instead (see there).
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
import time
import weakref

_MIB = 1024 * 1024

_proc: bool | None = None  # is there a /proc to read processes from (_has_proc: read once)


def _has_proc() -> bool:
    """Is /proc there (Linux; not macOS or Windows)? Without it a FileNotFoundError says nothing of a process."""
    global _proc
    if _proc is None:
        try:
            with open("/proc/self/status", "rb"):
                _proc = True
        except OSError:
            _proc = False
    return _proc


_me = None  # psutil's handle of this process (its pid: a fork gets its own)


def _own_rss_bytes() -> int:
    global _me
    import psutil

    if _me is None or _me.pid != os.getpid():
        _me = psutil.Process()
    return _me.memory_info().rss


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mib() -> float:
    kib = _status_kib("VmRSS")
    if kib is not None:
        return kib / 1024
    return _own_rss_bytes() / _MIB


def peak_rss_mib() -> float:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib / 1024
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / _MIB if sys.platform == "darwin" else r / 1024  # bytes on macOS, KiB on Linux


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS to its current RSS. Returns False where the OS does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def release_free_memory() -> bool:
    """Give memory the C heap holds free back to the OS (glibc `malloc_trim(0)`), so that the resident set is
    what is in use: after a compiler's scratch memory was freed, the next phase's peak does not start from it.
    Returns False where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0) or True)
    except (OSError, AttributeError):
        return False


# How often `PeakRSS` samples the RSS where the peak cannot be reset: one reading is one system call (psutil's
# memory_info: 15 us measured on a 2-core Linux machine, through /proc/PID/statm), so 0.3 % of a core; a step's
# activations live for the step (milliseconds and more on a CPU), so a sampled peak misses a spike only when it
# is shorter than this. `bench ViT-Nano/4 --task train -b 32` with /proc hidden: peak_mem_mib 64-71, VmHWM 67-70.
SAMPLE_S = 0.005


class _Sampler(threading.Thread):
    """The highest RSS (MiB) of this process seen every SAMPLE_S since `mark()`."""

    def __init__(self) -> None:
        super().__init__(name="vitbench-rss-sampler", daemon=True)
        self.lock = threading.Lock()
        self.high = rss_mib()
        self.stopped = threading.Event()

    def mark(self, rss: float) -> None:
        with self.lock:
            self.high = rss

    def run(self) -> None:
        while not self.stopped.wait(SAMPLE_S):
            rss = rss_mib()
            with self.lock:
                self.high = max(self.high, rss)


class PeakRSS:
    """Tracks peak RSS growth from `reset()` on: peak minus the RSS at reset.

    Where the peak cannot be reset (no /proc/self/clear_refs: macOS), a phase's peak is the highest RSS a sampling
    thread saw in it (every SAMPLE_S), or the lifetime peak (ru_maxrss) when the phase set a new one: then that
    is the phase's own, exactly. Still the process's resident set (the same kind), but a spike shorter than
    SAMPLE_S below an earlier phase's peak can go unseen."""

    def __init__(self) -> None:
        self.base = rss_mib()
        self.resettable = reset_peak_rss()
        self._sampler: _Sampler | None = None
        self._peak_at_reset = 0.0
        if not self.resettable:
            self._mark()

    def reset(self) -> None:
        self.resettable = reset_peak_rss()
        self.base = rss_mib()
        if not self.resettable:
            self._mark()

    def _mark(self) -> None:
        """A new phase for the sampled peak: its highest RSS starts from the RSS now (the sampler started on first
        use, and again in a fork, which has none of its parent's threads)."""
        if self._sampler is None or not self._sampler.is_alive():
            self._sampler = _Sampler()
            weakref.finalize(self, self._sampler.stopped.set)
            self._sampler.start()
        self._sampler.mark(self.base)
        self._peak_at_reset = peak_rss_mib()

    def _phase_peak_mib(self) -> float:
        if self.resettable:
            return peak_rss_mib()
        high = max(self._sampler.high, rss_mib())
        peak = peak_rss_mib()
        return max(high, peak) if peak > self._peak_at_reset else high

    def restart(self) -> float:
        """A new phase for the peak: free heap memory goes back to the OS first, then the high-water mark restarts
        from what is resident now; `growth_mib` is then the growth over that (transient memory of the phase).
        Returns the resident MiB the phase starts from."""
        release_free_memory()
        self.reset()
        return self.base

    def growth_mib(self) -> float:
        return max(0.0, self._phase_peak_mib() - self.base)

    def peak_mib(self) -> float:
        return peak_rss_mib()


def resident_kib(pid: int) -> int | None:
    """Resident memory (VmRSS) of process `pid` in KiB; None when it is gone (or is a zombie, whose memory is
    freed). Read from /proc/PID/status (a few microseconds); psutil elsewhere."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1])
        return None  # a zombie has no VmRSS line
    except FileNotFoundError:
        if _has_proc():
            return None  # gone; without /proc (macOS) every pid's file is missing: psutil says
    except OSError:
        pass
    import psutil

    try:
        return psutil.Process(pid).memory_info().rss // 1024
    except psutil.Error:
        return None


# How CPython starts a fork server (Lib/multiprocessing/forkserver.py, ForkServer.ensure_running: `cmd`)
FORK_SERVER_CMD = b"from multiprocessing.forkserver import main"


def is_fork_server(pid: int) -> bool:
    """Is process `pid` a multiprocessing fork server (by its command line)? psutil's where there is no /proc."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return FORK_SERVER_CMD in f.read()
    except OSError:
        if _has_proc():
            return False
    import psutil

    try:
        return any(FORK_SERVER_CMD.decode() in arg for arg in psutil.Process(pid).cmdline())
    except psutil.Error:
        return False


def descendants(pid: int, stop=lambda pid: False) -> set[int]:
    """Every process below `pid` (children, theirs, ...) but those for which `stop(pid)` is true and what is below
    them, from one pass over /proc/*/stat (parent ids): a few milliseconds for a few hundred processes, a tenth of
    what psutil's `children(recursive=True)` takes. psutil where there is no /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        import psutil

        try:
            tree = psutil.Process(pid).children(recursive=True)
            cut = {c.pid for c in tree if stop(c.pid)}
            return {c.pid for c in tree if c.pid not in cut and not any(a.pid in cut for a in c.parents())}
        except psutil.Error:
            return set()
    children: dict[int, list[int]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ')'
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out and not stop(c):
                out.add(c)
                todo.append(c)
    return out


_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# How often a process checks its parent where the kernel cannot tell it (die_with_parent off Linux): an orphan
# keeps its memory at most this long; getppid(2) costs microseconds, so 2 calls a second are nothing
PARENT_POLL_S = 0.5
_watching_parent: int | None = None  # the pid whose parent a thread watches (a fork has no such thread)


def last_marked(stdout: str, mark: str):
    """The JSON after `mark` on the last line of a child's stdout that starts with it (None when none does): how
    a probe process answers its parent, whatever else it printed before."""
    import json

    line = next((x for x in reversed(stdout.splitlines()) if x.startswith(mark)), None)
    return None if line is None else json.loads(line[len(mark):])


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent exits (no orphans after a killed sweep).
    Elsewhere (macOS): a daemon thread checks every PARENT_POLL_S whether the parent changed (an orphan is
    re-parented to launchd) and ends this process then.

    Safe as a subprocess `preexec_fn` on Linux (it survives exec), or at the start of a child's main anywhere (a
    thread does not survive exec).
    """
    if not sys.platform.startswith("linux"):
        _watch_parent()
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _watch_parent() -> None:
    global _watching_parent
    if _watching_parent == os.getpid():
        return
    _watching_parent = os.getpid()
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)  # as a trial whose parent died before it was watched (vitbench.executors.local)

    threading.Thread(target=watch, name="vitbench-parent-watch", daemon=True).start()
