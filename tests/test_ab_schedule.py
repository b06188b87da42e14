"""vitbench ab's schedules: `together` keeps a finished side's core busy (a filler) until the other side ends, so
the slower side's last trials never run alone; `alternate` needs none; nothing is left running after an
interrupt."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from vitbench.compare import schedule as sched
from vitbench.compare.schedule import Schedule


class _Round:
    def __init__(self, seconds: float):
        self.proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])

    def wait(self) -> None:
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class _Side:
    def __init__(self, name: str, seconds: float):
        self.name, self.seconds, self.rounds = name, seconds, []

    def start_round(self, path):
        self.rounds.append(_Round(self.seconds))
        return self.rounds[-1]


@pytest.fixture
def fillers(monkeypatch):
    started: list[subprocess.Popen] = []

    def start():
        started.append(sched.start_filler.__wrapped__())
        return started[-1]

    start.__wrapped__ = sched.start_filler
    monkeypatch.setattr(sched, "start_filler", start)
    return started


def test_together_fills_the_core_of_the_side_that_ended_first(fillers):
    fast, slow = _Side("current", 0.05), _Side("baseline", 3.0)
    t0 = time.monotonic()
    filled = Schedule.TOGETHER.run((slow, fast), {"current": None, "baseline": None})
    took = time.monotonic() - t0  # the slow round's whole life (its interpreter's start-up too) and the stop
    assert len(fillers) == 1  # one filler, for the fast side only
    proc = fillers[0]
    # it ran until it was stopped (a filler that crashed, e.g. on an import, exits 1 on its own, not by SIGTERM)
    assert proc.returncode == -signal.SIGTERM
    assert slow.rounds[0].proc.returncode == 0 and fast.rounds[0].proc.returncode == 0
    # it started after the fast round ended and stopped when the slow one had: within the pair's time (not 3.0 s:
    # the slow round's interpreter start-up adds to its sleep, more so under load)
    assert 0 < filled < took


def test_alternate_needs_no_filler(fillers):
    a, b = _Side("baseline", 0.05), _Side("current", 0.3)
    assert Schedule.ALTERNATE.run((a, b), {"baseline": None, "current": None}) == 0.0
    assert fillers == []


def test_an_interrupt_leaves_no_round_nor_filler_running(fillers, monkeypatch):
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
        Schedule.TOGETHER.run((slow, fast), {"current": None, "baseline": None})
    assert fillers[0].poll() is not None and slow.rounds[0].proc.poll() is not None


def test_the_filler_runs_until_it_is_stopped():
    proc = sched.start_filler()
    try:
        with pytest.raises(subprocess.TimeoutExpired):  # it does not end on its own
            proc.wait(timeout=1.0)
    finally:
        sched.stop_process(proc, sched.FILLER_GRACE_S)
    assert proc.returncode == -signal.SIGTERM
