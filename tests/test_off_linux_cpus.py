"""Off Linux (macOS simulated here: sys.platform, psutil's answers, no sched_setaffinity): other load read as
others' only, the CPU named, the doctor saying what it cannot read, children spawned where a fork is unsafe, and a
JAX thread count that XLA cannot take refused. Unit-level: no process measures anything."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
from collections import namedtuple
from types import SimpleNamespace

import psutil
import pytest

from vitbench import cpus, env, forkservers
from vitbench.errors import ConfigError

Times = namedtuple("Times", "user system children_user children_system")  # psutil's Process.cpu_times fields
ME = os.getpid()


# ---- other load: a process tree's CPU time (cpus.TreeMeter, cpus.Mark) ---------------------------------------
class Host:
    """A scripted machine for vitbench.cpus: the wall clock, every process's busy seconds, this process's own and
    its reaped children's (os.times()), and its descendants (pid -> (parent pid, own seconds, reaped children's
    seconds)). Off Linux psutil reads every process's children's seconds as 0 (its docs, Process.cpu_times)."""

    def __init__(self, monkeypatch, platform: str):
        self.linux = platform.startswith("linux")
        self.wall, self.busy, self.me, self.reaped = 10.0, 100.0, 1.0, 0.0
        self.kids: dict[int, tuple[int, float, float]] = {}
        monkeypatch.setattr(sys, "platform", platform)
        monkeypatch.setattr(cpus, "time", SimpleNamespace(perf_counter=lambda: self.wall))
        monkeypatch.setattr(cpus, "psutil", SimpleNamespace(
            Process=self._process, cpu_times=lambda: SimpleNamespace(user=self.busy), Error=psutil.Error,
            STATUS_ZOMBIE=psutil.STATUS_ZOMBIE))
        monkeypatch.setattr(os, "times", lambda: os.times_result((self.me, 0.0, self.reaped, 0.0, 0.0)))

    def _times(self, own: float, reaped: float) -> Times:
        return Times(own, 0.0, reaped if self.linux else 0.0, 0.0)

    def _process(self, pid: int | None = None):
        assert pid is None  # the meter reads this process, and its descendants through it
        return SimpleNamespace(pid=ME, cpu_times=lambda: self._times(self.me, self.reaped),
                               children=lambda recursive: [self._kid(p) for p in self.kids])

    def _kid(self, pid: int):
        ppid, own, reaped = self.kids[pid]
        return SimpleNamespace(pid=pid, oneshot=contextlib.nullcontext, cpu_times=lambda: self._times(own, reaped),
                               ppid=lambda: ppid, create_time=lambda: float(pid), status=lambda: "running")


def _meter() -> cpus.TreeMeter:
    m = cpus.TreeMeter(every_s=3600.0)  # read by the test (m._sample()), never by its thread
    m.__enter__()
    return m


# Every number below is a multiple of 1/8 under 2**10: each sum and the one division are exact in binary.
def test_a_child_reaped_by_this_process_is_its_own_time_on_macos(monkeypatch):
    """The review's case: a child's CPU time, reaped by the meter's process, read as other load (tree_s 0.02 and
    other_cores 2.0 for 0.84 / 1.6): os.times() holds it where psutil reads 0."""
    host = Host(monkeypatch, "darwin")
    m = _meter()
    host.kids[1001] = (ME, 0.5, 0.0)
    m._sample()
    del host.kids[1001]  # reaped by us, having used 0.75 s in all
    host.reaped, host.me, host.wall, host.busy = 0.75, 1.25, 12.0, 104.0  # 4 s busy over 2 s: 1 s ours
    m.__exit__(None, None, None)
    assert (m.tree_s, m.other_cores) == (1.0, 1.5)


def test_this_process_s_reaped_children_are_its_own_load_on_macos(monkeypatch):
    host = Host(monkeypatch, "darwin")
    mark = cpus.Mark.now()
    host.reaped, host.me, host.wall, host.busy = 0.75, 1.25, 12.0, 104.0
    assert cpus.others_since(mark) == (2.0, 1.5)  # (4 s busy - 1 s ours) / 2 s


def _grandchild_reaped_by_a_child(host: Host, m: cpus.TreeMeter) -> None:
    """A child (1001) whose own child (1002) it reaps, the child still running afterwards."""
    host.kids = {1001: (ME, 0.125, 0.0), 1002: (1001, 0.25, 0.0)}
    m._sample()
    host.kids = {1001: (ME, 0.25, 0.5)}  # 1002 gone, having used 0.5 s: in 1001's reaped time (Linux reads it)
    m._sample()


@pytest.mark.parametrize("platform, tree_s", [
    ("darwin", 0.5),  # 1001's 0.25 and 1002's as last read, 0.25 (its last stretch missed), not 1001's alone
    ("linux", 0.75),  # 1001's 0.25 and the 0.5 it reaped, which its reading holds (as before)
])
def test_a_grandchild_reaped_by_a_running_child_counts_itself_off_linux(monkeypatch, platform, tree_s):
    host = Host(monkeypatch, platform)
    m = _meter()
    _grandchild_reaped_by_a_child(host, m)
    host.wall = 12.0
    m.__exit__(None, None, None)
    assert m.tree_s == tree_s


@pytest.mark.parametrize("platform", ["darwin", "linux"])
def test_a_grandchild_whose_parent_this_process_reaped_counts_once(monkeypatch, platform):
    """1002 reaped by 1001, 1001 by us: both in os.times() (the kernel adds a reaped child's own reaped children's
    time to its parent's, on macOS too), not 1002 again as last read."""
    host = Host(monkeypatch, platform)
    m = _meter()
    _grandchild_reaped_by_a_child(host, m)
    host.kids = {}
    host.reaped, host.wall = 0.375 + 0.5, 12.0  # 1001's own 0.375 and its reaped 0.5
    m.__exit__(None, None, None)
    assert m.tree_s == 0.875


# ---- the CPU's name (vitbench.env.cpu_model) -------------------------------------------------------------------
SYSCTL = ["sysctl", "-n", "machdep.cpu.brand_string"]


@pytest.fixture
def a_mac(monkeypatch):
    """macOS on Apple silicon: no /proc/cpuinfo, platform.processor() 'arm'; `answer[0]`: what sysctl prints, or
    the exception running it raises. Yields (answer, the commands run)."""
    answer, ran = ["Apple M3 Max\n"], []

    def run(cmd, **kwargs):
        ran.append(cmd)
        if isinstance(answer[0], Exception):
            raise answer[0]
        return subprocess.CompletedProcess(cmd, 0, stdout=answer[0], stderr="")

    def no_file(path):
        raise FileNotFoundError(path)

    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(env, "Path", lambda path: SimpleNamespace(read_text=lambda: no_file(path)))
    monkeypatch.setattr(env.platform, "processor", lambda: "arm")
    monkeypatch.setattr(env.subprocess, "run", run)
    env.cpu_model.cache_clear()
    yield answer, ran
    env.cpu_model.cache_clear()


def test_a_mac_s_cpu_is_named_by_sysctl(a_mac):
    answer, ran = a_mac
    assert env.cpu_model() == "Apple M3 Max" and ran == [SYSCTL]  # not 'arm', as every Apple chip would read


@pytest.mark.parametrize("answer", ["", OSError("no sysctl"), subprocess.TimeoutExpired(SYSCTL, 5)])
def test_without_sysctl_s_answer_a_mac_s_cpu_is_the_platform_s_name(a_mac, answer):
    a_mac[0][0] = answer
    assert env.cpu_model() == "arm"


def test_linux_without_proc_cpuinfo_asks_no_sysctl(a_mac, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    assert env.cpu_model() == "arm" and a_mac[1] == []


# ---- the doctor's clocks and temperatures (vitbench.doctor.host_checks) ------------------------------------
@pytest.mark.parametrize("platform, clocks, thermal", [
    ("darwin", "not readable on this OS (darwin)", "not readable on this OS (darwin)"),
    ("linux", "no cpufreq interface (a VM or container: the host sets the clocks)",
     "no readable thermal zones (VM or container)"),
])
def test_the_doctor_says_an_os_without_sys_files_cannot_be_read(monkeypatch, platform, clocks, thermal):
    from vitbench.doctor import host_checks

    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(host_checks.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(host_checks, "_read", lambda path: None)
    assert (host_checks.check_cpu_frequency().found, host_checks.check_thermal().found) == (clocks, thermal)


# ---- how children start: spawn on macOS (vitbench.forkservers, the local executor, the fits' workers) --------
def test_a_sweep_on_macos_spawns_its_trials_unless_asked_for_the_fork_servers(monkeypatch, tmp_path):
    from vitbench.executors.local import LocalExecutor

    assert forkservers.why_spawned() is None  # Linux, and a Python with what the servers use: forked
    monkeypatch.setattr(sys, "platform", "darwin")
    # CPython 3.11's list on macOS (multiprocessing.context): a fork server is listed there too
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn", "fork", "forkserver"])
    monkeypatch.setattr(forkservers, "unavailable", forkservers.why_spawned())  # as the import on macOS sets it
    how = {}
    for name, options in (("default", {}), ("asked", {"start_method": "forkserver"}),
                          ("spawn", {"start_method": "spawn"})):
        ex = LocalExecutor(tmp_path, **options)
        how[name] = ex._how()
        ex.close()
    assert how == {"default": {"start_method": "spawn",
                               "start_method_note": f"spawned by default on {forkservers.ON_MACOS}; start_method "
                                                    "forkserver forks anyway"},
                   "asked": {"start_method": "forkserver"}, "spawn": {"start_method": "spawn"}}


def test_the_fits_workers_are_forked_on_linux_only(monkeypatch):
    from vitbench.fit import groups

    class Asked(Exception):
        pass

    def get_context(method):
        raise Asked(method)

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn", "fork", "forkserver"])
    monkeypatch.setattr(multiprocessing, "get_context", get_context)
    asked = []
    for platform in ("darwin", "linux"):
        monkeypatch.setattr(sys, "platform", platform)
        with pytest.raises(Asked) as e:
            groups._map(str, [1, 2], ["a", "b"], 2, None)
        asked.append(e.value.args[0])
    assert asked == ["spawn", "fork"]


# ---- JAX's CPU threads without CPU affinity (vitbench.backends.jax.client) ---------------------------------
@pytest.fixture
def jax_client(monkeypatch):
    """The JAX client module on an 8-CPU host, its clients created at the count asked for (none: all) by a fake
    that starts nothing, and `jax.devices` answering one CPU device."""
    client = pytest.importorskip("vitbench.backends.jax.client")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(client, "_init_cpu_client", lambda threads: 8 if threads is None else threads)
    monkeypatch.setitem(sys.modules, "jax", SimpleNamespace(devices=lambda platform=None: ["cpu:0"]))
    return client


def test_without_cpu_affinity_jax_refuses_a_thread_count_xla_cannot_take(jax_client, monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)  # macOS
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    with pytest.raises(ConfigError, match=r"threads=4: .* threads=1 or threads=8 \(all CPUs\), or none"):
        jax_client.select_device("cpu", 4, "cpu")
    for threads, n in ((1, 1), (8, 8), (None, 8)):
        assert jax_client.select_device("cpu", threads, "cpu") == ("cpu:0", "cpu", n)


def test_with_cpu_affinity_jax_takes_any_thread_count(jax_client, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: None, raising=False)
    assert jax_client.select_device("cpu", 4, "cpu") == ("cpu:0", "cpu", 4)
