"""vitbench ab's schedules: `together` keeps a finished side's core busy (a filler) until the other side ends, so
the slower side's last trials never run alone, and pins each side to its own half of the CPUs, swapped in the
second leg, so that a core's speed cancels; `alternate` needs no filler; nothing is left running after an
interrupt."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vitbench.compare import schedule as sched
from vitbench.compare.ab import Statistic, side_value
from vitbench.compare.schedule import Schedule

# What a fake round does: write the CPUs it may run on (as pinned by the schedule) into its directory, then sleep
ROUND_CODE = ("import json, os, sys, time\n"
              "open(os.path.join(sys.argv[1], 'cpus.json'), 'w').write(json.dumps(sorted(os.sched_getaffinity(0))))\n"
              "time.sleep(float(sys.argv[2]))\n")


class _Round:
    def __init__(self, seconds: float, path: Path, cpus):
        path.mkdir(parents=True)
        self.cpus, self.path = cpus, path
        self.proc = subprocess.Popen([sys.executable, "-c", ROUND_CODE, str(path), str(seconds)],
                                     preexec_fn=sched.pinned_to(cpus))

    def wait(self) -> None:
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class _Side:
    def __init__(self, name: str, seconds: float):
        self.name, self.seconds, self.rounds = name, seconds, []

    def start_round(self, path, cpus=None):
        self.rounds.append(_Round(self.seconds, path, cpus))
        return self.rounds[-1]


def _paths(tmp_path, *sides):
    return {s.name: tmp_path / s.name for s in sides}


LEGS = len(Schedule.TOGETHER.legs(sched.core_halves()))  # 2 where this machine can pin, else 1


@pytest.fixture
def fillers(monkeypatch):
    started: list[subprocess.Popen] = []

    def start(cpus=None):
        started.append(sched.start_filler.__wrapped__(cpus))
        started[-1].cpus_seen = sorted(os.sched_getaffinity(started[-1].pid)) if cpus is not None else None
        return started[-1]

    start.__wrapped__ = sched.start_filler
    monkeypatch.setattr(sched, "start_filler", start)
    return started


def test_together_fills_the_core_of_the_side_that_ended_first(fillers, tmp_path):
    fast, slow = _Side("current", 0.05), _Side("baseline", 3.0)
    t0 = time.monotonic()
    filled = Schedule.TOGETHER.run((slow, fast), _paths(tmp_path, slow, fast))
    took = time.monotonic() - t0  # the slow rounds' whole life (their interpreters' start-up too) and the stops
    assert len(fillers) == LEGS  # one filler a leg, for the fast side only
    for proc, fast_round in zip(fillers, fast.rounds):
        # it ran until it was stopped (a filler that crashed, e.g. on an import, exits 1 on its own, not by SIGTERM)
        assert proc.returncode == -signal.SIGTERM
        # on the fast side's CPUs of that leg, where it was pinned
        assert proc.cpus_seen == (sorted(fast_round.cpus) if fast_round.cpus is not None else None)
    assert all(r.proc.returncode == 0 for r in (*slow.rounds, *fast.rounds))
    # each started after the fast round ended and stopped when the slow one had: within the pair's time (not 3.0 s
    # a leg: the slow round's interpreter start-up adds to its sleep, more so under load)
    assert 0 < filled < took


@pytest.mark.skipif(sched.core_halves() is None, reason="fewer than 2 usable CPUs, or no CPU affinity here")
def test_together_pins_each_side_to_its_half_and_swaps_the_halves_in_the_second_leg(tmp_path):
    a, b = _Side("baseline", 0.0), _Side("current", 0.0)
    Schedule.TOGETHER.run((a, b), _paths(tmp_path, a, b))
    low, high = (sorted(h) for h in sched.core_halves())
    seen = {s.name: [json.loads((tmp_path / s.name / f"leg{n}" / "cpus.json").read_text()) for n in (1, 2)]
            for s in (a, b)}
    # what each process could run on, read by the process itself: the side started first on the lower half,
    # then the upper; the other the reverse; so each side ran once on each half, at the same moments as the other
    assert seen == {"baseline": [low, high], "current": [high, low]}
    assert sched.legs_of(tmp_path / "baseline") == [tmp_path / "baseline" / "leg1", tmp_path / "baseline" / "leg2"]


def test_cpus_split_in_halves_and_no_pinning_below_two(monkeypatch):
    monkeypatch.setattr(sched.os, "sched_getaffinity", lambda pid: {3, 0, 2, 1, 4})
    assert sched.core_halves() == (frozenset({0, 1}), frozenset({2, 3, 4}))
    monkeypatch.setattr(sched.os, "sched_getaffinity", lambda pid: {5})
    assert sched.core_halves() is None
    assert Schedule.TOGETHER.legs(None) == [(None, None)]  # one unpinned leg, as before pinning
    assert Schedule.ALTERNATE.legs((frozenset({0}), frozenset({1}))) == [(frozenset({0}), frozenset({0}))]


def test_a_directory_without_legs_is_its_own_leg(tmp_path):
    (tmp_path / "trials").mkdir()  # a results directory's own subfolders are not legs
    assert sched.legs_of(tmp_path) == [tmp_path]


def test_a_cores_speed_cancels_in_the_sides_values():
    # baseline on the fast CPU (1.45x) in leg 1 and the slow one in leg 2; current, 10 % slower, the reverse
    fast, slow, slower = 1.45, 1.0, 1 / 1.1
    for stat in Statistic:
        b = side_value(stat, [[100 * fast, 90 * fast], [100 * slow, 90 * slow]])
        c = side_value(stat, [[100 * slow * slower, 90 * slow * slower], [100 * fast * slower, 90 * fast * slower]])
        assert math.isclose(c / b, slower, rel_tol=1e-12)  # each leg alone: 0.63 and 1.32
    assert side_value(Statistic.BEST, [[1.0], []]) is None  # a leg not ok: the side is not ok in that pair


def test_alternate_needs_no_filler(fillers, tmp_path):
    a, b = _Side("baseline", 0.05), _Side("current", 0.3)
    assert Schedule.ALTERNATE.run((a, b), _paths(tmp_path, a, b)) == 0.0
    assert fillers == []


def test_an_interrupt_leaves_no_round_nor_filler_running(fillers, monkeypatch, tmp_path):
    fast, slow = _Side("current", 0.05), _Side("baseline", 60.0)
    real_sleep = sched.time.sleep
    pressed = []

    def sleep(s):  # time.sleep itself: Popen.wait(timeout) sleeps too, so the key is pressed once, not at each sleep
        if fillers and not pressed:  # the filler is running: the user presses Ctrl-C
            pressed.append(True)
            raise KeyboardInterrupt
        real_sleep(s)

    monkeypatch.setattr(sched.time, "sleep", sleep)
    with pytest.raises(KeyboardInterrupt):
        Schedule.TOGETHER.run((slow, fast), _paths(tmp_path, slow, fast))
    assert fillers[0].poll() is not None and slow.rounds[0].proc.poll() is not None


def test_the_filler_runs_until_it_is_stopped():
    proc = sched.start_filler()
    try:
        with pytest.raises(subprocess.TimeoutExpired):  # it does not end on its own
            proc.wait(timeout=1.0)
    finally:
        sched.stop_process(proc, sched.FILLER_GRACE_S)
    assert proc.returncode == -signal.SIGTERM
