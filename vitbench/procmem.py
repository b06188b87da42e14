"""Process facts on Linux: current RSS and a resettable peak (VmHWM) in MiB; a process's descendants and their
resident memory; dying with the parent.

On CPU there is no allocator peak, so a measurement's peak memory is the growth of the process's peak resident
set over its RSS at the start. Writing "5" to /proc/self/clear_refs resets VmHWM (Linux >= 4.0), so repeated
measurements in one process do not see each other's peaks. Elsewhere we fall back to ru_maxrss (not resettable).
"""

from __future__ import annotations

import os
import resource
import signal
import sys

_MIB = 1024 * 1024


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
    return peak_rss_mib()


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


class PeakRSS:
    """Tracks peak RSS growth from `reset()` on: peak minus the RSS at reset."""

    def __init__(self) -> None:
        self.base = rss_mib()
        self.resettable = reset_peak_rss()

    def reset(self) -> None:
        self.resettable = reset_peak_rss()
        self.base = rss_mib()

    def restart(self) -> float:
        """A new phase for the peak: free heap memory goes back to the OS first, then the high-water mark restarts
        from what is resident now; `growth_mib` is then the growth over that (transient memory of the phase).
        Returns the resident MiB the phase starts from."""
        release_free_memory()
        self.reset()
        return self.base

    def growth_mib(self) -> float:
        return max(0.0, peak_rss_mib() - self.base)

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
        return None
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
    """Is process `pid` a multiprocessing fork server (by its command line)?"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return FORK_SERVER_CMD in f.read()
    except OSError:
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


def last_marked(stdout: str, mark: str):
    """The JSON after `mark` on the last line of a child's stdout that starts with it (None when none does): how
    a probe process answers its parent, whatever else it printed before."""
    import json

    line = next((x for x in reversed(stdout.splitlines()) if x.startswith(mark)), None)
    return None if line is None else json.loads(line[len(mark):])


def die_with_parent() -> None:
    """Linux: have the kernel SIGKILL this process when its parent exits (no orphans after a killed sweep).

    Safe as a subprocess `preexec_fn` (it survives exec) or at the start of a child's main.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass
