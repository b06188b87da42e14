"""`vitbench ab --schedule turns`: the referee (vitbench.compare.turns) gives the turn to one side at a time and
makes the sides' timed windows alternate; a timing loop's waits are not timed (vitbench.turns); the schedule runs
both legs at once, each on its own CPU half, and falls back to `together` for a side whose code cannot take
turns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cluster_fixtures import wait_for

from vitbench import turns
from vitbench.backends.base import Backend
from vitbench.backends.workload import StopRule
from vitbench.compare import schedule as sched
from vitbench.compare.schedule import Schedule
from vitbench.compare.turns import Referee


@pytest.fixture
def referee():
    ref = Referee(("a", "b"))
    yield ref
    ref.close()


def _side(ref: Referee, name: str, windows: int, log: list, hold_s: float = 0.0) -> threading.Thread:
    def run():
        t = turns.Turn(ref.paths[name])
        t.take()
        for _ in range(windows):
            log.append(name)
            time.sleep(hold_s)
            t.pass_over()
        t.give_back()

    th = threading.Thread(target=run)
    th.start()
    return th


def test_two_sides_windows_alternate_one_for_one(referee):
    log: list[str] = []
    threads = [_side(referee, "a", 5, log), _side(referee, "b", 5, log)]
    for th in threads:
        th.join(timeout=10)
    assert sorted(log) == ["a"] * 5 + ["b"] * 5
    assert all(x != y for x, y in zip(log, log[1:])), log  # never the same side twice in a row


def test_a_side_that_passed_waits_for_the_other_until_its_round_ends(referee):
    t = turns.Turn(referee.paths["a"])
    th = threading.Thread(target=t.take)
    th.start()
    wait_for(lambda: referee.takes["a"] == 1, 5, "a's take")
    u = turns.Turn(referee.paths["b"])
    b = threading.Thread(target=lambda: (u.take(), u.give_back()))  # b's first trial, the same as a's
    b.start()
    th.join(timeout=5)
    assert t.held  # a asked first
    t.pass_over()  # b has its turn, gives it back (its trial is over), and a has it again
    b.join(timeout=5)
    waited: list[float] = []
    th = threading.Thread(target=lambda: waited.append(t.pass_over()))
    th.start()
    th.join(timeout=0.3)
    assert th.is_alive()  # b has not had the turn since a passed: a waits (b is between two trials)
    referee.finished("b")  # b's round ended: nothing to wait for
    th.join(timeout=5)
    assert not th.is_alive() and waited[0] >= 0.3
    t.give_back()


def test_a_process_that_dies_holding_the_turn_frees_it(referee):
    code = ("import os, sys; from vitbench import turns\n"
            "t = turns.Turn(sys.argv[1]); t.take(); os._exit(0)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, referee.paths["a"]])
    wait_for(lambda: referee.takes["a"] == 1, 60, "a's take")  # a waits first: it gets the turn when b asks
    t = turns.Turn(referee.paths["b"])
    got = threading.Thread(target=t.take)
    got.start()
    assert proc.wait(timeout=60) == 0
    got.join(timeout=5)
    assert not got.is_alive() and t.held
    t.give_back()


def _trials(ref: Referee, name: str, trials: list[tuple[str, int]], log: list, gap_s: float = 0.0):
    """A side's round: each trial a new connection that takes the turn under its label, times `windows` windows
    (logged as (side, label), or (side, its index) without a label) and gives it back; `gap_s` between two trials (the sweep starting the next)."""
    def run():
        for n, (label, windows) in enumerate(trials):
            t = turns.Turn(ref.paths[name])
            t.take(label)
            for _ in range(windows):
                log.append((name, label or n))
                time.sleep(0.002)
                t.pass_over()
            t.give_back()
            t.sock.close()
            time.sleep(gap_s)
        ref.finished(name)

    th = threading.Thread(target=run)
    th.start()
    return th


def _run(referee, *sides) -> list[tuple[str, str]]:
    log: list[tuple[str, str]] = []
    threads = [_trials(referee, name, trials, log, gap) for name, trials, gap in sides]
    for th in threads:
        th.join(timeout=20)
    assert not any(th.is_alive() for th in threads), log
    return log


def test_labelled_takes_start_the_sides_same_trial_together(referee):
    # a needs 1 window of x, b 4: a's y waits for b's x to end (and for b's 0.2 s between two trials) instead of
    # alternating with b's last windows of x; then the two sides' y windows alternate
    log = _run(referee, ("a", [("x", 1), ("y", 4)], 0.0), ("b", [("x", 4), ("y", 4)], 0.2))
    last_bx = max(i for i, e in enumerate(log) if e == ("b", "x"))
    first_ay = log.index(("a", "y"))
    assert first_ay > last_bx, log
    ys = [side for side, label in log if label == "y"]
    assert all(u != v for u, v in zip(ys, ys[1:])), log


@pytest.mark.parametrize("labels", [(None, None), ("x", None)], ids=["no labels", "one side labelled"])
def test_without_both_labels_the_sides_trials_are_matched_by_place(referee, labels):
    # a side's code from before labels: its n-th take is the other side's n-th (one study, run in its order)
    a1, b1 = labels
    log = _run(referee, ("a", [(a1, 1), (None, 4)], 0.0), ("b", [(b1, 4), (None, 4)], 0.2))
    assert log.index(("a", 1)) > max(i for i, e in enumerate(log) if e[0] == "b" and e[1] in (0, "x")), log
    seconds = [side for side, n in log if n == 1]
    assert all(u != v for u, v in zip(seconds, seconds[1:])), log


def test_sides_whose_trials_differ_run_them_one_after_the_other_then_together_again(referee):
    # a's x and b's y are not the same trial: neither waits forever for the other; they never alternate (one runs
    # while the other waits to start), and the shared z alternates
    log = _run(referee, ("a", [("x", 3), ("z", 3)], 0.0), ("b", [("y", 3), ("z", 3)], 0.0))
    xy = [label for _, label in log if label in ("x", "y")]
    assert xy in (["x"] * 3 + ["y"] * 3, ["y"] * 3 + ["x"] * 3), log
    zs = [side for side, label in log if label == "z"]
    assert sorted(zs) == ["a"] * 3 + ["b"] * 3 and all(u != v for u, v in zip(zs, zs[1:])), log


def test_a_labelled_take_waits_while_the_other_side_is_between_trials(referee):
    t = turns.Turn(referee.paths["a"])
    th = threading.Thread(target=t.take, args=("x",))
    th.start()
    th.join(timeout=0.3)
    assert th.is_alive()  # b has not started a trial: its first may be x
    u = turns.Turn(referee.paths["b"])
    other = threading.Thread(target=u.take, args=("x",))
    other.start()
    th.join(timeout=5)
    assert not th.is_alive() and t.held
    t.give_back()
    other.join(timeout=5)  # then b's x has it
    assert u.held
    u.give_back()


def test_an_overlong_label_is_refused_and_frees_nothing_it_did_not_hold(referee):
    t = turns.Turn(referee.paths["a"])
    t._send(b"", answer=False)  # connect
    t.sock.sendall(turns.TAKE_AS + b"x" * (turns.LABEL_MAX + 10) + b"\n")
    try:
        got = t.sock.recv(1)
    except ConnectionResetError:
        got = b""
    assert got == b""  # dropped, never granted
    referee.finished("a")  # b does not wait for a's next trial
    u = turns.Turn(referee.paths["b"])
    u.take()  # the turn is free: the refused take holds nothing
    assert u.held
    u.give_back()


def test_a_referee_from_before_labels_gets_plain_takes(tmp_path):
    """`ab` run from a checkout older than labels (a bisect started there) measures a newer side: its referee drops
    the connection at a labelled take, so the trial takes plainly on a new connection, and later takes go plainly
    at once. A referee that is gone stays an OSError."""
    import socket

    path = str(tmp_path / "old.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen()
    seen: list[bytes] = []

    def old_referee():  # its protocol: TAKE is granted, GIVE_BACK answered by nothing, anything else dropped
        for _ in range(2):
            conn, _ = srv.accept()
            while msg := conn.recv(1):
                seen.append(msg)
                if msg == turns.TAKE:
                    conn.sendall(turns.GRANTED)
                elif msg != turns.GIVE_BACK:
                    break
            conn.close()

    th = threading.Thread(target=old_referee, daemon=True)
    th.start()
    t = turns.Turn(path)
    t.take("measure ViT-Nano/4")
    assert t.held and not t.labels
    t.give_back()
    t.take("measure R-Nano")
    t.give_back()
    t.sock.close()
    th.join(timeout=10)
    srv.close()
    assert seen == [turns.TAKE_AS, turns.TAKE, turns.GIVE_BACK, turns.TAKE, turns.GIVE_BACK]
    with pytest.raises(OSError):
        turns.Turn(str(tmp_path / "gone.sock")).take("measure ViT-Nano/4")


def test_without_turns_everything_is_a_no_op(monkeypatch):
    monkeypatch.delenv(turns.ENV, raising=False)
    with turns.held():
        assert turns.between_windows() == 0.0


class _Work:
    def step(self):
        time.sleep(0.005)

    def sync_window(self, outs):
        return outs


def test_a_timing_loop_never_times_the_other_sides_turn(referee, monkeypatch):
    monkeypatch.setenv(turns.ENV, referee.paths["a"])
    monkeypatch.setattr(turns, "_turn", None)
    hold = 0.15
    other = _side(referee, "b", 100, [], hold_s=hold)
    stop = StopRule(min_steps=1, min_seconds=0.05, max_seconds=30.0)
    with turns.held():
        times = Backend.time_windows(None, _Work(), 2, stop)
    referee.finished("a")
    other.join(timeout=60)
    # each window is 2 steps of 5 ms, never the other side's 150 ms turn; and the stop rule's 50 ms are timed work
    # only (counting the waits, one window would have been enough, its timed part under 50 ms). How many windows
    # that takes depends on the load (4 of 10-15 ms at load average 5), so it is not asserted.
    assert all(w < hold for w in times) and sum(times) >= stop.min_seconds


ROUND_CODE = (
    "import json, os, sys, time\n"
    "from vitbench import turns\n"
    "log = []\n"
    "with turns.held():\n"
    "    for _ in range(4):\n"
    "        log.append(time.monotonic())\n"
    "        time.sleep(0.01)\n"
    "        turns.between_windows()\n"
    "open(os.path.join(sys.argv[1], 'turns.json'), 'w').write(json.dumps(\n"
    "    {'cpus': sorted(os.sched_getaffinity(0)), 't': log}))\n")


class _Side:
    takes_turns = True

    def __init__(self, name: str):
        self.name = name

    def start_round(self, path: Path, cpus=None, env=None):
        path.mkdir(parents=True)
        proc = subprocess.Popen([sys.executable, "-c", ROUND_CODE, str(path)], env={**os.environ, **(env or {})},
                                preexec_fn=sched.pinned_to(cpus))
        return _Round(proc, cpus)


class _Round:
    def __init__(self, proc, cpus):
        self.proc, self.cpus = proc, cpus

    def wait(self):
        assert self.proc.wait() == 0

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_turns_runs_both_legs_at_once_each_on_one_half_the_sides_alternating(tmp_path):
    a, b = _Side("baseline"), _Side("current")
    assert Schedule.TURNS.run((a, b), {s.name: tmp_path / s.name for s in (a, b)}) == 0.0  # no filler
    legs = Schedule.TURNS.legs(sched.core_halves())
    for n, (cpus, _) in enumerate(legs, 1):
        got = {s.name: json.loads((tmp_path / s.name / f"leg{n}" / "turns.json").read_text()) for s in (a, b)}
        if cpus is not None:  # both sides of a leg on the same half
            assert got["baseline"]["cpus"] == got["current"]["cpus"] == sorted(cpus)
        order = [name for _, name in sorted((t, name) for name in got for t in got[name]["t"])]
        assert all(x != y for x, y in zip(order, order[1:])), order


def test_a_side_that_cannot_take_turns_runs_together_and_says_so():
    class Old:
        name, takes_turns = "baseline", False

    class New:
        name, takes_turns = "current", True

    assert Schedule.TURNS.for_sides((New(), New())) == (Schedule.TURNS, "")
    got, why = Schedule.TURNS.for_sides((Old(), New()))
    assert got is Schedule.TOGETHER and "baseline side's code cannot take turns" in why
    assert Schedule.TOGETHER.for_sides((Old(), New())) == (Schedule.TOGETHER, "")


def test_a_trial_takes_the_turn_under_its_role_and_key(monkeypatch):
    """vitbench.trial.run_trial names its trial when it takes the turn: the role and the trial key, which both sides
    of an `ab` pair share (the same study's trial), so the referee can keep their trials in step."""
    import contextlib

    import vitbench.tasks
    from vitbench.job import Job, Role
    from vitbench.record import Record
    from vitbench.trial import run_trial

    taken: list[str | None] = []

    @contextlib.contextmanager
    def held(label=None):
        taken.append(label)
        yield

    class Task:
        kind, headline, __module__ = "bench", None, __name__

        class Params:
            model_validate = staticmethod(lambda config: config)

        def run(self, p):
            return Record.measured("bench", dict(p), metrics={})

    monkeypatch.setattr(turns, "held", held)
    monkeypatch.setattr(vitbench.tasks, "get_task", lambda name: Task)
    for role in Role:
        run_trial(Job(key="k1", config={"task": "t"}, repeat=0, study="s", study_sha="x", run_id="r",
                      timeout_s=60, task_module=__name__, role=role))
    assert taken == ["trial k1", "calibration k1"]
