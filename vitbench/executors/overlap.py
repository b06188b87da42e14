"""Which other trials ran on this host at the same time as a trial: a host-local registry of running trials.

Two timing trials on one host measure each other (two raylets on one machine, a SLURM node shared by jobs, two
sweeps started by hand). Schedulers are asked to prevent it (the executors' `exclusive` defaults), and this
registry records what happened anyway, on every executor alike: every trial process (vitbench.executors.local's
child) registers itself in a directory on the host's local disk while it runs. On start it notes the trials
already registered and appends its own description to each of their entries; on end it reads the descriptions
appended to its own entry. The union is the set of trials that overlapped it, stored in its row
(`runner.overlapped`) and flagged by the report. Either of two trials starting together sees the other (each
registers before it looks). An entry whose process is gone (a trial killed -9) is ignored and removed.

Each overlap names what overlapped (one dict per trial in the row): the trial (`<study>/<key>`), its
sweep run (`run_id`), whether that is this trial's own sweep run (`own`: the same run id) or another process's,
the trial's pid, and the process that started it (`launcher_pid`, `cmd`, `cwd`: the sweep for the local
executor, whose trials are children of a fork server or spawned by it; the job's or worker's own process under
SLURM or Ray). Another sweep of the same study has the same trial keys: the run id and the process tell them
apart. Rows written before these fields existed hold bare `<study>/<key>` strings (the report reads both).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

ENV = "VITBENCH_HOST_REGISTRY"  # the registry directory (default: <tmp>/vitbench-running, shared by all users)
SUFFIX = ".trial"
CMD_CHARS = 300  # a command line is kept to this many characters (a row is one line of the store)
# A process whose command line holds one of these is multiprocessing's helper (a fork server, a spawned child's
# bootstrap: CPython's multiprocessing.forkserver.main, multiprocessing.spawn.spawn_main), not what started the
# trial
_HELPERS = ("multiprocessing.forkserver", "multiprocessing.spawn", "multiprocessing.resource_tracker")
_LAUNCHER_DEPTH = 4  # parents looked through (trial -> fork server -> sweep is two)


def registry_dir() -> Path:
    return Path(os.environ.get(ENV) or Path(tempfile.gettempdir()) / "vitbench-running")


def _make_shared(root: Path) -> None:
    """Make the registry directory, sticky and writable by all (every user's trials on this host register there,
    like /tmp): only one this call made, never through a link, never one that was there (a directory of the
    user's named by $VITBENCH_HOST_REGISTRY, or a link to one, kept its mode: it was made 1777 before)."""
    root.parent.mkdir(parents=True, exist_ok=True)
    try:
        root.mkdir()
    except FileExistsError:
        return
    with contextlib.suppress(OSError):
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.fchmod(fd, 0o1777)
        finally:
            os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's trial
        return True
    return True


def launcher() -> dict:
    """The process that started this trial: this process or the nearest parent that is not a multiprocessing
    helper; its pid, command line (clipped to CMD_CHARS) and working directory (None where it cannot be read)."""
    import psutil

    proc = psutil.Process()
    chain = [proc]
    with contextlib.suppress(psutil.Error):
        chain += proc.parents()[:_LAUNCHER_DEPTH]
    for p in chain:
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if any(h in " ".join(cmd) for h in _HELPERS):
            continue
        cwd = None
        with contextlib.suppress(psutil.Error):
            cwd = p.cwd()
        return {"launcher_pid": p.pid, "cmd": " ".join(cmd)[:CMD_CHARS], "cwd": cwd}
    return {"launcher_pid": None, "cmd": None, "cwd": None}


class Presence:
    """This process's entry in the registry while a trial runs (`with Presence(ident, run_id) as p: ...;
    p.overlapped`, a list of dicts: trial, run_id, own, pid, launcher_pid, cmd, cwd)."""

    def __init__(self, ident: str, run_id: str | None = None, root: Path | None = None):
        self.ident = ident
        self.run_id = run_id
        self.root = root or registry_dir()
        self.path: Path | None = None
        # trial pid (or, from an older vitbench that wrote none, its id) -> its description: one trial key may run
        # in two sweeps at once
        self.seen: dict[int | str, dict] = {}
        self.overlapped: list[dict] = []

    def _me(self) -> dict:
        return {"id": self.ident, "pid": os.getpid(), "run_id": self.run_id, **launcher()}

    def __enter__(self) -> Presence:
        try:
            _make_shared(self.root)
            me = json.dumps(self._me()) + "\n"
            self.path = self.root / f"{os.getpid()}{SUFFIX}"
            # whole or absent: another trial (or a reader) globbing the registry never sees an empty entry, which
            # it would skip; the temporary name does not match the glob
            part = self.root / f".{os.getpid()}{SUFFIX}.part"
            part.write_text(me)
            os.replace(part, self.path)
            for entry in self.root.glob(f"*{SUFFIX}"):
                if entry == self.path:
                    continue
                other = self._read(entry)
                if other is None:
                    continue
                self.seen[other["pid"]] = other
                with contextlib.suppress(OSError):  # it may have just ended
                    fd = os.open(entry, os.O_WRONLY | os.O_APPEND)
                    try:
                        os.write(fd, me.encode())
                    finally:
                        os.close(fd)
        except OSError:  # no writable local tmp: the row then says nothing about overlap
            self.path = None
        return self

    def __exit__(self, *exc) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            for line in self.path.read_text().splitlines()[1:]:
                d = _description(line)
                if d is not None:
                    self.seen.setdefault(d["pid"] if d["pid"] is not None else d["id"], d)
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.seen.pop(os.getpid(), None)
        self.overlapped = sorted((self._overlap(d) for d in self.seen.values()),
                                 key=lambda o: (not o["own"], o["trial"], o["pid"] or 0))

    def _overlap(self, d: dict) -> dict:
        """What the row keeps of a trial that overlapped this one."""
        own = self.run_id is not None and d.get("run_id") == self.run_id
        return {"trial": d["id"], "run_id": d.get("run_id"), "own": own, "pid": d["pid"],
                **{k: d.get(k) for k in ("launcher_pid", "cmd", "cwd")}}

    @staticmethod
    def _read(entry: Path) -> dict | None:
        """The description of a live entry's trial, or None (a stale entry of a dead process is removed)."""
        try:
            head = _description(entry.read_text().splitlines()[0])
        except (OSError, IndexError):
            return None
        if head is None or head["pid"] is None:
            return None
        if not _alive(head["pid"]):
            with contextlib.suppress(OSError):
                entry.unlink()
            return None
        return head


def _description(line: str) -> dict | None:
    """One registry line as a dict with `id` (str) and `pid` (int, or None in a line an older vitbench appended);
    None for a line that is not one."""
    try:
        d = json.loads(line)
        d["id"] = str(d["id"])
        d["pid"] = int(d["pid"]) if d.get("pid") is not None else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return d
