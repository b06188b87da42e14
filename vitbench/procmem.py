"""Process facts on Linux: current RSS and a resettable peak (VmHWM) in MiB; dying with the parent.

On CPU there is no allocator peak, so a measurement's peak memory is the growth of the process's peak resident
set over its RSS at the start. Writing "5" to /proc/self/clear_refs resets VmHWM (Linux >= 4.0), so repeated
measurements in one process do not see each other's peaks. Elsewhere we fall back to ru_maxrss (not resettable).
"""

from __future__ import annotations

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
