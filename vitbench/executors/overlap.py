"""Which other trials ran on this host at the same time as a trial: a host-local registry of running trials.

Two timing trials on one host measure each other (two raylets on one machine, a SLURM node shared by jobs, two
sweeps started by hand). Schedulers are asked to prevent it (the executors' `exclusive` defaults), and this
registry records what happened anyway, on every executor alike: every trial process (vitbench.executors.local's
child) registers itself in a directory on the host's local disk while it runs. On start it notes the trials
already registered and appends its own id to each of their entries; on end it reads the ids appended to its own
entry. The union is the set of trials that overlapped it, stored in its row (`runner.overlapped`) and flagged by
the report. Either of two trials starting together sees the other (each registers before it looks). An entry
whose process is gone (a trial killed -9) is ignored and removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

ENV = "VITBENCH_HOST_REGISTRY"  # the registry directory (default: <tmp>/vitbench-running, shared by all users)
SUFFIX = ".trial"


def registry_dir() -> Path:
    return Path(os.environ.get(ENV) or Path(tempfile.gettempdir()) / "vitbench-running")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's trial
        return True
    return True


class Presence:
    """This process's entry in the registry while a trial runs (`with Presence(ident) as p: ...; p.overlapped`)."""

    def __init__(self, ident: str, root: Path | None = None):
        self.ident = ident
        self.root = root or registry_dir()
        self.path: Path | None = None
        self.seen: set[str] = set()
        self.overlapped: list[str] = []

    def __enter__(self) -> Presence:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                os.chmod(self.root, 0o1777)  # every user's trials on this host register here (sticky, like /tmp)
            self.path = self.root / f"{os.getpid()}{SUFFIX}"
            self.path.write_text(json.dumps({"id": self.ident, "pid": os.getpid()}) + "\n")
            for entry in self.root.glob(f"*{SUFFIX}"):
                if entry == self.path:
                    continue
                other = self._read(entry)
                if other is None:
                    continue
                self.seen.add(other)
                with contextlib.suppress(OSError):  # it may have just ended
                    fd = os.open(entry, os.O_WRONLY | os.O_APPEND)
                    try:
                        os.write(fd, (json.dumps({"id": self.ident}) + "\n").encode())
                    finally:
                        os.close(fd)
        except OSError:  # no writable local tmp: the row then says nothing about overlap
            self.path = None
        return self

    def __exit__(self, *exc) -> None:
        if self.path is None:
            return
        with contextlib.suppress(OSError):
            lines = self.path.read_text().splitlines()[1:]
            self.seen |= {json.loads(x)["id"] for x in lines if x.strip()}
        with contextlib.suppress(OSError):
            self.path.unlink()
        self.overlapped = sorted(self.seen - {self.ident})

    @staticmethod
    def _read(entry: Path) -> str | None:
        """The id of a live entry's trial, or None (a stale entry of a dead process is removed)."""
        try:
            head = json.loads(entry.read_text().splitlines()[0])
            pid, ident = int(head["pid"]), str(head["id"])
        except (OSError, ValueError, IndexError, KeyError, TypeError):
            return None
        if not _alive(pid):
            with contextlib.suppress(OSError):
                entry.unlink()
            return None
        return ident
