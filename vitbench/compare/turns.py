"""The referee of `vitbench ab --schedule turns`: two sides' rounds on the same CPU(s), taking turns.

Each side's trials connect to their own Unix socket here (VITBENCH_TURNS; the client is vitbench.turns) and
compute only while they hold the turn. The referee gives it to one side at a time:
- a side that asks to take it (a trial starting) gets it as soon as no one holds it;
- a side that passes it (after a timed window) gets it back only after the other side has had it once since, or
  when the other side's round has ended (`finished`), so the two sides' timed windows alternate one for one;
- a side's trial that gives it back (its task is done) or whose connection closes (it exited, or died) frees it.

A side between two trials (its sweep writing a row, starting the next trial's process) holds nothing, and the other
side, having passed, waits for it: such a stretch is never beside the other side's timed window, at the cost of
its wait. Where both wait, the turn goes to the side that did not have it last.
"""

from __future__ import annotations

import selectors
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from vitbench.turns import ENV, GIVE_BACK, GRANTED, PASS, TAKE


@dataclass
class _Waiter:
    conn: socket.socket
    side: str
    after: int | None  # the other side's turns when this one passed (it waits for one more); None: a first take


class Referee:
    """Turns between two sides (names), each on its own socket in a temporary directory; serves from a thread
    until `close()`."""

    def __init__(self, names: tuple[str, str]) -> None:
        self.names = names
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

    def _ready(self, w: _Waiter) -> bool:
        other = self._other(w.side)
        return w.after is None or self.turns[other] > w.after or other in self.done

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

    def _drop(self, conn: socket.socket) -> None:
        self.waiting = [w for w in self.waiting if w.conn is not conn]
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
                    elif msg == TAKE:
                        self.waiting.append(_Waiter(conn, name, None))
                    elif msg == PASS and self.holder is conn:
                        self.holder = None
                        self.waiting.append(_Waiter(conn, name, self.turns[self._other(name)]))
                    elif msg == GIVE_BACK and self.holder is conn:
                        self.holder = None
                    else:  # out of protocol: answer nothing, free what it held
                        self._drop(conn)
                    self._grant()
