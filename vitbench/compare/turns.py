"""The referee of `vitbench ab --schedule turns`: two sides' rounds on the same CPU(s), taking turns.

Each side's trials connect to their own Unix socket here (VITBENCH_TURNS; the client is vitbench.turns) and
compute only while they hold the turn. The referee gives it to one side at a time:
- a side that asks to take it (a trial starting) gets it as soon as no one holds it and the other side is at the
  same trial, so the two sides measure each trial at the same time. It waits while the other side is between two
  trials (its next may be this one) or inside another trial, unless that side in turn waits to start a different
  one (the sides' trials differ: they then run one after the other, never beside each other). The same trial: the
  same label where both takes name one (vitbench.trial.run_trial sends the trial's role and key), else the same
  place among the side's takes in this round (a side's code from before labels; both sides run one study in its
  order);
- a side that passes it (after a timed window) gets it back only after the other side has had it once since, or
  when the other side's round has ended (`finished`), or when the other side waits to start a different trial (it
  waits for this one to end), so the two sides' timed windows alternate one for one;
- a side's trial that gives it back (its task is done) or whose connection closes (it exited, or died) frees it.

A side between two trials (its sweep writing a row, starting the next trial's process) holds nothing, and the other
side, having passed, waits for it: such a stretch is never beside the other side's timed window, at the cost of
its wait. Where both wait, the turn goes to the side that did not have it last.

Why trials in step: before, a side that finished a trial early started its next one against the other side's last
windows, the two sides' same trial drifted apart by seconds, and this VM's slowdowns of seconds landed on one side
of a trial only (docs/compare.md, "Trials in step").
"""

from __future__ import annotations

import selectors
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from vitbench.turns import ENV, GIVE_BACK, GRANTED, LABEL_MAX, PASS, TAKE, TAKE_AS


@dataclass(frozen=True)
class _Trial:
    """A take's trial: its place among its side's takes in this round (from 1), and its label where the client
    sent one."""

    ordinal: int
    label: str | None = None

    def same(self, other: _Trial | None) -> bool:
        """The same trial: by label where both have one, else by place (both sides run one study in its order)."""
        if other is None:
            return False
        if self.label is not None and other.label is not None:
            return self.label == other.label
        return self.ordinal == other.ordinal


@dataclass
class _Waiter:
    conn: socket.socket
    side: str
    after: int | None  # the other side's turns when this one passed (it waits for one more); None: a take
    trial: _Trial | None = None  # a take's trial


class Referee:
    """Turns between two sides (names), each on its own socket in a temporary directory; serves from a thread
    until `close()`. `in_step=False`: a take waits only for the turn to be free and a pass only for the other
    side's turn, trials not kept in step (a harness that starts one side once the other holds the turn:
    benchmarks/bench_runtimes_parity.py)."""

    def __init__(self, names: tuple[str, str], in_step: bool = True) -> None:
        self.names = names
        self.in_step = in_step
        self._dir = tempfile.TemporaryDirectory(prefix="vitbench-turns-")
        self._sel = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self.paths: dict[str, str] = {}
        for name in names:
            path = str(Path(self._dir.name) / f"{name}.sock")
            lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            lsock.bind(path)
            lsock.listen(8)
            self._sel.register(lsock, selectors.EVENT_READ, ("listen", name))
            self.paths[name] = path
        self.holder: socket.socket | None = None
        self.last: str | None = None
        self.turns = dict.fromkeys(names, 0)  # turns given per side
        self.log: list[tuple[str, float]] = []  # every turn given, in order: (side, perf_counter when given)
        self.done: set[str] = set()
        self.waiting: list[_Waiter] = []
        self.takes = dict.fromkeys(names, 0)  # takes asked per side
        self.trial: dict[socket.socket, tuple[str, _Trial]] = {}  # a connection's side and trial, from its take
        # until it gives the turn back
        self.ended: dict[str, _Trial] = {}  # per side, the last trial it gave back
        self._closing = False
        self._thread = threading.Thread(target=self._serve, name="vitbench-turns", daemon=True)
        self._thread.start()

    def env(self, name: str) -> dict[str, str]:
        """The environment that puts side `name`'s trials under this referee."""
        return {ENV: self.paths[name]}

    def finished(self, name: str) -> None:
        """Side `name`'s round has ended: the other side no longer waits for it."""
        with self._lock:
            self.done.add(name)
            self._grant()

    def close(self) -> None:
        self._closing = True
        self._thread.join(timeout=5)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()
        self._sel.close()
        self._dir.cleanup()

    # ---- the serving thread ---------------------------------------------------------------------------------
    def _other(self, name: str) -> str:
        return self.names[1] if name == self.names[0] else self.names[0]

    def _trial_of(self, side: str) -> _Trial | None:
        """The trial `side` is in (since its take), None between two trials."""
        return next((t for s, t in self.trial.values() if s == side), None)

    def _taking(self, side: str, other_than: _Trial) -> bool:
        """Whether `side` waits to start a trial other than `other_than`."""
        return any(w.side == side and w.trial is not None and not w.trial.same(other_than) for w in self.waiting)

    def _ready(self, w: _Waiter) -> bool:
        other = self._other(w.side)
        if other in self.done or (w.trial is not None and not self.in_step):
            return True
        if w.trial is not None:  # a take
            if w.trial.same(self._trial_of(other)) or w.trial.same(self.ended.get(other)):
                return True  # the other side at this trial, or done with it (this side's then runs alone)
            # the other side between two trials: wait for its take; inside another trial: wait for its end, unless it
            # waits to start another one too (the sides' trials differ)
            return self._taking(other, w.trial)
        mine = self._trial_of(w.side)
        return self.turns[other] > w.after or (self.in_step and mine is not None and self._taking(other, mine))

    def _grant(self) -> None:
        """Give the free turn to a waiter that may have it (the side that did not have it last first)."""
        if self.holder is not None:
            return
        ready = [w for w in self.waiting if self._ready(w)]
        if not ready:
            return
        w = next((w for w in ready if w.side != self.last), ready[0])
        self.waiting.remove(w)
        try:
            w.conn.sendall(GRANTED)
        except OSError:
            self._drop(w.conn)
            self._grant()
            return
        self.holder, self.last = w.conn, w.side
        self.turns[w.side] += 1
        self.log.append((w.side, time.perf_counter()))

    def _end(self, conn: socket.socket) -> None:
        """`conn`'s trial is over (it gave the turn back, or its connection closed)."""
        if conn in self.trial:
            side, trial = self.trial.pop(conn)
            self.ended[side] = trial

    def _drop(self, conn: socket.socket) -> None:
        self.waiting = [w for w in self.waiting if w.conn is not conn]
        self._end(conn)
        if self.holder is conn:
            self.holder = None
        try:
            self._sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def _serve(self) -> None:
        while not self._closing:
            for key, _ in self._sel.select(timeout=0.1):
                kind, name = key.data
                with self._lock:
                    if kind == "listen":
                        conn, _ = key.fileobj.accept()
                        self._sel.register(conn, selectors.EVENT_READ, ("conn", name))
                        continue
                    conn = key.fileobj
                    try:
                        msg = conn.recv(1)
                    except OSError:
                        msg = b""
                    if not msg:  # the trial's process ended (or died): whatever it held is free
                        self._drop(conn)
                    elif msg == TAKE or (msg == TAKE_AS and (label := _line(conn)) is not None):
                        self.takes[name] += 1
                        trial = _Trial(self.takes[name], label if msg == TAKE_AS else None)
                        self.trial[conn] = (name, trial)
                        self.waiting.append(_Waiter(conn, name, None, trial))
                    elif msg == PASS and self.holder is conn:
                        self.holder = None
                        self.waiting.append(_Waiter(conn, name, self.turns[self._other(name)]))
                    elif msg == GIVE_BACK and self.holder is conn:
                        self.holder = None
                        self._end(conn)
                    else:  # out of protocol: answer nothing, free what it held
                        self._drop(conn)
                    self._grant()


def _line(conn: socket.socket) -> str | None:
    """A take's label: the bytes up to a newline (the client sends the message whole); None if the connection
    closes first or the label is longer than any client sends."""
    buf = b""
    while not buf.endswith(b"\n"):
        try:
            got = conn.recv(LABEL_MAX + 1 - len(buf))
        except OSError:
            return None
        if not got or len(buf) + len(got) > LABEL_MAX + 1:
            return None
        buf += got
    return buf[:-1].decode(errors="replace")
