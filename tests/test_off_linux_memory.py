"""Memory facts on a host without /proc (macOS): psutil answers where Linux reads /proc, so the memory guard, the
executor's per-trial budget and max-batch's probe kill see memory there too, and a phase's peak is its own.

The host is simulated: vitbench.procmem's opening of a path under /proc raises FileNotFoundError (psutil, which
reads /proc on Linux, keeps it: psutil answers as on macOS), os.waitid is gone, psutil's readings are set by the
test where a number is checked."""

from __future__ import annotations

import builtins
import os
import resource
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from vitbench import memory_budget, procmem

MIB = 1024 * 1024


@pytest.fixture
def no_proc(monkeypatch):
    """procmem's opening of anything under /proc fails as on macOS; /proc's presence is looked up again."""
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(procmem, "open", fake_open, raising=False)  # the module's global: shadows the builtin
    monkeypatch.setattr(procmem, "_proc", None, raising=False)


def test_without_proc_a_live_process_has_resident_memory(no_proc):
    """A FileNotFoundError of /proc/PID/status is no "process gone" where there is no /proc: psutil's RSS, so a
    tree's memory (the guard's, a trial's, a probe's) is a number, not None."""
    kib = procmem.resident_kib(os.getpid())
    assert kib is not None and kib > 0
    assert memory_budget.TreeMemory(os.getpid()).mib() is not None
    assert procmem.resident_kib(2**30) is None  # no such pid (Linux's largest is 2**22): gone, psutil says


@pytest.fixture
def host_memory(monkeypatch, no_proc):
    """RSS (psutil) and lifetime peak (ru_maxrss, KiB on Linux where this runs) set by the test, in MiB."""
    mem = SimpleNamespace(rss=50.0, maxrss=100.0)
    monkeypatch.setattr(psutil.Process, "memory_info", lambda self: SimpleNamespace(rss=int(mem.rss * MIB)))
    monkeypatch.setattr(resource, "getrusage", lambda who: SimpleNamespace(ru_maxrss=int(mem.maxrss * 1024)))
    return mem


def test_without_proc_a_phase_starts_from_the_rss_now_not_the_lifetime_peak(host_memory):
    """A compile phase peaked at 100 MiB and freed down to 50; the steady phase grows to 80: 30 MiB, where a
    difference of ru_maxrss said 0 (bench --task train: 15.3 MiB against Linux's 64.7)."""
    assert procmem.rss_mib() == 50.0
    p = procmem.PeakRSS()
    assert p.restart() == 50.0 and not p.resettable
    host_memory.rss = 80.0
    assert p.growth_mib() == 30.0


def test_without_proc_a_sampling_thread_sees_a_phase_peak_below_an_earlier_one(host_memory):
    """The phase's activations came and went (80 MiB, back to 60) below the compile's 100 MiB peak: the sampler
    saw them."""
    p = procmem.PeakRSS()
    p.restart()
    host_memory.rss = 80.0
    deadline = time.monotonic() + 5
    while getattr(getattr(p, "_sampler", None), "high", 0.0) < 80.0 and time.monotonic() < deadline:
        time.sleep(procmem.SAMPLE_S if hasattr(procmem, "SAMPLE_S") else 0.01)
    host_memory.rss = 60.0
    assert p.growth_mib() == 30.0
    # a phase that sets a new lifetime peak has it as its own, however briefly it lasted
    p.restart()
    host_memory.maxrss = 150.0
    assert p.growth_mib() == 90.0


def test_without_proc_a_fork_server_is_known_by_psutils_command_line(no_proc, monkeypatch):
    """Its memory is not a sweep's (vitbench.memory_budget._kept_apart): psutil's cmdline where /proc is none."""
    line = ["python3", "-c", "from multiprocessing.forkserver import main; main(9, 10, ['vitbench'], **{})"]
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: line)
    assert procmem.is_fork_server(os.getpid())
    monkeypatch.setattr(psutil.Process, "cmdline", lambda self: ["python3", "-m", "vitbench", "sweep"])
    assert not procmem.is_fork_server(os.getpid())


def test_without_waitid_the_guard_asks_psutil_for_children(monkeypatch):
    """macOS before Python 3.13 has no os.waitid: an AttributeError killed the guard's thread."""
    monkeypatch.delattr(os, "waitid", raising=False)
    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [])
    assert memory_budget._has_children() is False
    monkeypatch.setattr(psutil.Process, "children", lambda self, recursive=False: [psutil.Process()])
    assert memory_budget._has_children() is True
    assert memory_budget.TreeMemory(os.getpid(), own=True).mib() is not None


def test_off_linux_a_process_ends_when_its_parent_changes(monkeypatch):
    """No PR_SET_PDEATHSIG there: a thread watching getppid ends the process once it is an orphan. The fake
    getppid gives the real parent once (when armed), then 1 (re-parented to launchd)."""
    real_parent = os.getppid()
    answers = iter([real_parent])
    ended = threading.Event()
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(procmem, "PARENT_POLL_S", 0.01, raising=False)
    monkeypatch.setattr(procmem, "_watching_parent", None, raising=False)
    monkeypatch.setattr(os, "getppid", lambda: next(answers, 1))
    monkeypatch.setattr(os, "_exit", lambda code: ended.set())
    procmem.die_with_parent()
    assert ended.wait(5)
    for t in threading.enumerate():
        if t.name == "vitbench-parent-watch":
            t.join(5)  # done before the real getppid (the real parent: no exit) and os._exit are back


def test_a_max_batch_row_says_how_its_probes_started(monkeypatch):
    """A spawned probe holds the framework's imports, a forked one not: the budget's verdict differs (64 forked,
    0 spawned), so the row says which."""
    import vitbench.measure.max_batch as mb
    from vitbench import forkservers
    from vitbench.backends.base import Step
    from vitbench.measure.probe import ProbeStatus

    def probe(step, b, *args):
        return mb.Probe(b, b <= 2, ProbeStatus.OK if b <= 2 else ProbeStatus.OVER_BUDGET)

    monkeypatch.setattr(mb, "run_probe", probe)
    for unavailable, method in ((None, "forkserver"), ("no fork server on this platform", "spawn")):
        monkeypatch.setattr(forkservers, "unavailable", unavailable)
        rec = mb.max_batch(Step("ViT-Nano/4", mode="infer"), memory_limit_gib=8, max_batch_size=8)
        assert rec.metrics["max_batch_size"] == 2 and rec.metrics["probe_start_method"] == method
