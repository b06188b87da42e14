"""Taking turns on one CPU with another measurement (`vitbench ab --schedule turns`; the referee:
vitbench.compare.turns).

Where VITBENCH_TURNS names a Unix socket (`vitbench ab` sets it for each side's rounds), a trial computes only
while it holds the turn: `held()` (vitbench.trial.run_trial, around the task) takes it before the task runs and
gives it back after, and a timing loop calls `between_windows()` after each window (a latency step is a window of
one), which hands the turn to the other side and waits until it comes back. The two sides' timed windows then
alternate on the same CPU tens of milliseconds apart, so a slowdown of that CPU lasting longer than a window (this
VM's vCPUs slow 2-4x for seconds at a time: docs/compare.md, "Cores that differ") lands on both sides alike.

Waiting is never inside a time: each window is timed while the turn is held, and `between_windows` returns the
seconds it waited, which the loop leaves out of its stop rule's elapsed time (so the rule sees as much timed work
as without turns). Without VITBENCH_TURNS every call here does nothing.

A trial takes the turn under its label (`held(label)`: run_trial gives the trial's role and key, which both sides of
a pair share), so the referee can start the two sides' same trial together: their windows then alternate on the
same CPU at the same time, and a slowdown of seconds lands on both sides of that trial, not on one side's trial and
the other side's next one.

Protocol, one connection per trial process (the process that took the turn; a forked child connects anew), single
bytes: TAKE (answered GRANTED when the turn is this process's), TAKE_AS followed by the label and a newline (the
same, labelled; a referee from before labels closes the connection at it, and the trial takes plainly instead),
PASS (hand it over; answered GRANTED when it is back), GIVE_BACK (no answer). A referee that has gone is an
OSError: never a measurement that claims turns it did not take.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator

ENV = "VITBENCH_TURNS"
TAKE, PASS, GIVE_BACK, GRANTED = b"T", b"P", b"R", b"G"
TAKE_AS = b"L"  # a labelled take: TAKE_AS + label + b"\n". The referee is the code running `ab`; an older one (from
# before labels, run against a newer commit: a bisect started from an old checkout) drops the connection at
# TAKE_AS: the trial then takes plainly on a new connection (matched by place, as that referee matches every take)
LABEL_MAX = 400  # bytes of a label sent; a trial's role and key are far shorter


class Turn:
    """This process's connection to the referee at `path`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.sock: socket.socket | None = None
        self.pid = 0
        self.held = False
        self.labels = True  # False once the referee closed on a labelled take: one from before labels

    def _send(self, msg: bytes, answer: bool) -> None:
        if self.sock is None or self.pid != os.getpid():  # first use, or a forked child: its own connection
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(self.path)
            self.pid, self.held = os.getpid(), False
        self.sock.sendall(msg)
        if answer and self.sock.recv(1) != GRANTED:
            raise OSError(f"{ENV}={self.path}: the turns referee closed the connection")

    def take(self, label: str | None = None) -> None:
        """Wait for the turn; `label` names the trial (see the module docstring), None for a take without one. A
        referee that closes the connection at a labelled take is one from before labels: the take is made again
        plainly, on a new connection (one that is gone fails that too: an OSError, as before)."""
        if label is not None and self.labels:
            try:
                self._send(TAKE_AS + label.encode()[:LABEL_MAX].replace(b"\n", b" ") + b"\n", answer=True)
                self.held = True
                return
            except OSError:
                self.labels = False
                if self.sock is not None:
                    self.sock.close()
                self.sock = None
        self._send(TAKE, answer=True)
        self.held = True

    def pass_over(self) -> float:
        """Hand the turn over and wait for it back; the seconds waited (0.0 when this process does not hold it)."""
        if not self.held or self.pid != os.getpid():
            return 0.0
        t0 = time.perf_counter()
        self._send(PASS, answer=True)
        return time.perf_counter() - t0

    def give_back(self) -> None:
        if self.held and self.pid == os.getpid():
            self.held = False
            self._send(GIVE_BACK, answer=False)


_turn: Turn | None = None


def current() -> Turn | None:
    """This process's Turn where VITBENCH_TURNS is set, else None."""
    global _turn
    path = os.environ.get(ENV)
    if not path:
        return None
    if _turn is None or _turn.path != path:
        _turn = Turn(path)
    return _turn


@contextlib.contextmanager
def held(label: str | None = None) -> Iterator[None]:
    """Hold the turn for the block (nothing without VITBENCH_TURNS, or when this process holds it already); `label`
    names the trial, the same on both sides."""
    turn = current()
    if turn is None or (turn.held and turn.pid == os.getpid()):
        yield
        return
    turn.take(label)
    try:
        yield
    finally:
        turn.give_back()


def between_windows() -> float:
    """After a timed window: hand the turn over and wait for it back. The seconds waited, for the loop to leave out
    of its elapsed time (0.0 without turns)."""
    turn = current()
    return turn.pass_over() if turn is not None else 0.0
