"""The CPU thread count a trial runs with: asked for (capped at the usable CPUs), or, where none is asked for and
the backend's pool stalls under other load, the cores other processes leave free; every row says which."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vitbench import cpus
from vitbench.cpus import BUSY_CORES, ThreadsChosen, capped_threads, free_cores, free_threads
from vitbench.errors import ConfigError, VitbenchWarning


@pytest.mark.parametrize("others,limit,free", [
    (0.0, 2, 2), (BUSY_CORES - 0.01, 2, 2),  # others under the busy threshold take no core
    (BUSY_CORES, 2, 1), (1.49, 2, 1),  # from half a core on, a core is taken
    (1.5, 2, 1), (7.0, 2, 1),  # never below one
    (3.2, 16, 13), (3.5, 16, 12),
])
def test_free_cores_round_others_load_at_the_busy_threshold(others, limit, free):
    assert free_cores(others, limit) == free


@pytest.fixture
def host(monkeypatch):
    """A 4-core host whose other load the test sets (cpus.others_now reads it)."""
    state = {"others": 0.0, "samples": 0}

    def others_now(seconds=cpus.SAMPLE_S):
        state["samples"] += 1
        return state["others"]

    monkeypatch.setattr(cpus, "cpu_limit", lambda: 4)
    monkeypatch.setattr(cpus, "others_now", others_now)
    return state


def test_an_unset_count_takes_the_free_cores_and_the_row_says_so(host):
    host["others"] = 1.6  # two cores' worth, rounded
    assert free_threads(8) == (2, {"threads_chosen": "free_cores", "threads_other_cores": 1.6})
    assert free_threads(1)[0] == 1  # never more than the count in force
    host["others"] = 0.2
    assert free_threads(8)[0] == 4 and free_threads(3)[0] == 3  # quiet: the limit, or less if fewer were in force
    host["others"] = 9.0
    assert free_threads(8)[0] == 1


def test_ranks_of_one_group_share_the_cores_without_a_sample(host):
    host["others"] = 3.0
    assert free_threads(8, devices=2) == (2, {"threads_chosen": "free_cores", "threads_other_cores": None})
    assert free_threads(8, devices=8)[0] == 1 and host["samples"] == 0


def test_a_requested_count_is_kept_or_capped_and_says_which():
    assert capped_threads(None) == (None, {"threads_chosen": "default"})
    assert capped_threads(1) == (1, {"threads_chosen": "requested"})
    with pytest.warns(VitbenchWarning, match="capped"):
        n, how = capped_threads(100_000)
    assert n == cpus.usable_cpus() and how == {"threads_chosen": "capped", "threads_requested": 100_000}
    with pytest.raises(ConfigError, match="threads must be >= 1"):
        capped_threads(0)
    assert set(ThreadsChosen.values()) == {"requested", "capped", "free_cores", "default"}


def test_the_cpu_limit_is_the_affinity_lowered_by_a_quota(monkeypatch):
    monkeypatch.setattr(cpus, "usable_cpus", lambda: 8)
    monkeypatch.setattr(cpus, "cpu_quota_cores", lambda: None)
    assert cpus.cpu_limit() == 8
    monkeypatch.setattr(cpus, "cpu_quota_cores", lambda: 2.5)
    assert cpus.cpu_limit() == 2  # threads beyond a quota wait out the period together: rounded down
    monkeypatch.setattr(cpus, "cpu_quota_cores", lambda: 0.3)
    assert cpus.cpu_limit() == 1


def test_others_load_is_every_process_cpu_time_less_this_process_own_over_the_wall_time(monkeypatch):
    start = cpus.Mark(wall=10.0, busy_s=100.0, own_s=5.0)
    monkeypatch.setattr(cpus.Mark, "now", classmethod(lambda cls, own=None: cpus.Mark(12.0, 103.0, 6.0)))
    assert cpus.others_since(start) == (2.0, 1.0)  # (3 s busy - 1 s ours) / 2 s: exact in binary
    monkeypatch.setattr(cpus.Mark, "now", classmethod(lambda cls, own=None: cpus.Mark(12.0, 100.5, 6.0)))
    assert cpus.others_since(start) == (2.0, 0.0)  # clock granularity can read ours above everyone's: never < 0
    monkeypatch.setattr(cpus.Mark, "now", classmethod(lambda cls, own=None: cpus.Mark(10.0, 101.0, 5.0)))
    assert cpus.others_since(start) == (0.0, None)  # no time, no rate


# ------------------------------------------------------------------------------------------------------------
# The torch backend: its OpenMP pool is the one that stalls (docs/measurement.md, "Threads on a busy machine")
# ------------------------------------------------------------------------------------------------------------
@pytest.fixture
def torch_threads(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    n = torch.get_num_threads()
    yield torch
    torch.set_num_threads(n)


def test_torch_fits_an_unset_count_to_the_free_cores(host, torch_threads):
    from vitbench.backends.torch.backend import TorchBackend

    torch_threads.set_num_threads(4)  # in force, as a fresh process on a 4-core host would have it
    host["others"] = 2.7  # three cores' worth: one left
    info = TorchBackend().setup("cpu")
    assert info["threads"] == 1 == torch_threads.get_num_threads()
    assert info["threads_chosen"] == "free_cores" and info["threads_other_cores"] == 2.7
    host["others"] = 0.0
    torch_threads.set_num_threads(4)
    assert TorchBackend().setup("cpu")["threads"] == 4


def test_torch_keeps_a_requested_count_and_omp_num_threads(host, torch_threads, monkeypatch):
    from vitbench.backends.torch.backend import TorchBackend

    host["others"] = 3.5
    info = TorchBackend().setup("cpu", 2)
    assert info["threads"] == 2 and info["threads_chosen"] == "requested" and host["samples"] == 0
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own setting: the framework's default honours it
    info = TorchBackend().setup("cpu")
    assert info["threads"] == 2 and info["threads_chosen"] == "default" and host["samples"] == 0


BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
GRANDCHILD = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN!r}], check=True)\n"


def test_the_tree_meter_counts_every_descendant_as_its_own():
    # a child whose own child spends 0.6 s of CPU (process time: as long on a busy machine as on a quiet one)
    with cpus.TreeMeter(every_s=0.05) as m:
        subprocess.run([sys.executable, "-c", GRANDCHILD], check=True, timeout=120)
    # less 50 ms for the kernel's CPU-time accounting (10 ms ticks, read by two clocks)
    assert m.tree_s >= 0.55 and m.other_cores is not None and m.other_cores >= 0.0


# a "sweep" that starts a "fork server" and exits before it; the fork server runs a "trial" (BURN), reaps it, says
# so, and outlives the sweep a while; the sweep exits a second after hearing it
SERVER = ("import subprocess, sys, time\n"
          f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True)\n"
          "print('reaped', flush=True)\n"
          "time.sleep(2.0)\n")
SWEEP = ("import subprocess, sys, time\n"
         f"server = subprocess.Popen([sys.executable, '-c', {SERVER!r}], stdout=subprocess.PIPE, text=True)\n"
         "server.stdout.readline()\n"
         "time.sleep(1.0)\n")


def test_the_tree_meter_counts_a_trial_reaped_by_a_fork_server_its_sweep_left_behind():
    # the trial's CPU time is in the fork server's once reaped, and the fork server, orphaned when the sweep exits,
    # is no descendant any more: the meter counts the fork server's total as last read (read every 0.25 s over
    # the second between the reaping and the sweep's exit), nothing of the trial lost to the sampling interval
    with cpus.TreeMeter(every_s=0.25) as m:
        subprocess.run([sys.executable, "-c", SWEEP], check=True, timeout=120)
    assert m.tree_s >= 0.55 and m.other_cores is not None


def test_own_processes_count_only_between_two_readings_of_each(monkeypatch):
    """A group's processes are the measurement's own; one that exits before the second reading leaves out only its
    last stretch (read as others'), never its whole lifetime (which the first reading holds)."""
    start = cpus.Mark(wall=10.0, busy_s=100.0, own_s=55.0, per_pid=((1, 5.0), (2, 50.0)))
    monkeypatch.setattr(cpus.Mark, "now", classmethod(
        lambda cls, own=None: cpus.Mark(12.0, 104.0, 6.0, ((1, 6.0),))))  # pid 2 gone: 3 s busy were not ours
    wall, others = cpus.others_since(start, own=[])
    assert (wall, others) == (2.0, 1.5)  # (4 s busy - 1 s of pid 1) / 2 s; pid 2's 50 s of lifetime not counted
