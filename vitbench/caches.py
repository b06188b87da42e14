"""What the machine's cache directory holds (vitbench.paths.cache_dir), and removing what has gone unused.

The persistent caches grow without bound on their own: each framework version, compiler setting and host gets its
own compile-cache directory (paths.compile_cache_dir; a backend names its subdirectory), and the value cache keeps
one entry per key (vitbench.value_cache), a new one for every change of vitbench's source. `vitbench cache` lists
them; `vitbench cache --prune DAYS` removes

- a compile-cache directory neither opened nor written to for DAYS days (a framework version, a host or a
  compiler setting no longer used; a backend marks its directory when it opens it, paths.open_compile_cache,
  since reading a compiled program writes nothing), whole;
- a value-cache entry neither written nor read for DAYS days (value_cache sets an entry's modification time
  when it reads it).

Files directly in the cache directory (the measured matmul peaks, peaks.json, and its lock) are measurements,
not caches: listed, never removed. Symbolic links are never followed, counted or removed: a link in the cache
directory may lead to a user's own files (a link under a compile-cache directory goes with that directory as a
link; what it points to stays). Removing a cache costs only a recompile or a recount on the next run; run it
while no sweep is running (a directory being read by a running sweep goes with the rest). What could not be
removed is said (`Pruned.failed`), not counted as removed. Only what is provably vitbench's goes: a compile-cache
directory holding paths.COMPILE_MARK (written when a backend opens it), a value file named as value_cache names
them; anything else old is kept and said (`Pruned.kept`).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from vitbench.paths import COMPILE_MARK, PathError, cache_dir, compile_root
from vitbench.value_cache import SUBDIR as VALUES

DAY_S = 86400.0
# A value entry's file name as vitbench.value_cache makes it (32 hex digits of its key's hash): nothing else under
# values/ is removed, nor a compile-cache directory without paths.COMPILE_MARK ($VITBENCH_CACHE_DIR naming a folder
# of the user's had its old files and folders removed)
_VALUE_ENTRY = re.compile(r"[0-9a-f]{32}\.json")


class PartKind(str, Enum):
    COMPILE = "compile"  # one compile-cache directory: removed whole
    VALUES = "values"  # one kind of value: its entries removed one by one
    FILE = "file"  # a file directly in the cache directory: kept


@dataclass(frozen=True)
class Part:
    """One thing in the cache directory: files under it, their bytes, and the newest modification (epoch s)."""

    kind: PartKind
    path: Path
    files: int
    bytes: int
    newest: float | None  # None: nothing in it, nothing to date it by

    def to_dict(self, root: Path) -> dict:
        return {"kind": self.kind.value, "path": str(self.path.relative_to(root)), "files": self.files,
                "bytes": self.bytes, "newest": self.newest}


def _real_dir(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink()


def _files(d: Path) -> list[Path]:
    """The regular files under `d`, links to files or directories neither followed nor listed."""
    if not _real_dir(d):
        return []
    return [f for top, _, names in os.walk(d, followlinks=False) for f in (Path(top) / n for n in names)
            if f.is_file() and not f.is_symlink()]


def _part(kind: PartKind, path: Path) -> Part:
    """`newest`: of its files and, for a directory, of the directory itself (an empty one was made when)."""
    files = [path] if kind is PartKind.FILE else _files(path)
    stats = [p.stat() for p in files]
    times = [s.st_mtime for s in stats] + ([] if kind is PartKind.FILE else [path.stat().st_mtime])
    return Part(kind, path, len(stats), sum(s.st_size for s in stats), max(times, default=None))


def _places(root: Path) -> list[tuple[PartKind, Path]]:
    """(kind, path) of everything in cache directory `root`, unread: its files, the compile-cache directories,
    the value kinds' directories."""
    if not root.is_dir():
        return []
    out = [(PartKind.FILE, p) for p in root.iterdir() if p.is_file() and not p.is_symlink()]
    for kind, d in ((PartKind.COMPILE, compile_root(root)), (PartKind.VALUES, root / VALUES)):
        if _real_dir(d):
            out += [(kind, p) for p in d.iterdir() if _real_dir(p)]
    return sorted(out, key=lambda kp: str(kp[1]))


def parts(root: Path | None = None) -> list[Part]:
    """Everything in the cache directory, by path: each compile-cache directory, each kind of value, each file.
    An entry that cannot be looked at (its permissions) is a PathError naming it (it was a traceback)."""
    root = root or cache_dir()
    try:
        return [_part(kind, p) for kind, p in _places(root)]
    except OSError as e:
        raise PathError(f"cache directory {str(root)!r}: {e.filename or 'an entry'!s} cannot be looked at: "
                        f"{e.strerror or e}") from None


@dataclass(frozen=True)
class Pruned:
    """What a prune removed (or, dry, would remove): paths and their bytes; and what it could not remove, with
    why."""

    removed: tuple[Path, ...]
    bytes: int
    failed: tuple[tuple[Path, str], ...] = ()
    kept: tuple[Path, ...] = ()  # old, but not provably vitbench's (no COMPILE_MARK; not a value entry's name)


def prune(days: float, root: Path | None = None, dry_run: bool = False, now: float | None = None) -> Pruned:
    """Remove the compile-cache directories neither opened nor written to since `days` ago, whole, and the
    value-cache entries neither written nor read since then (module docstring). `dry_run`: say what, remove
    nothing."""
    if not days >= 0:
        raise ValueError(f"days must be a number >= 0, got {days!r}")
    root = root or cache_dir()
    cutoff = (time.time() if now is None else now) - days * DAY_S
    removed, size, failed = [], 0, []

    def remove(path: Path, nbytes: int, rm) -> None:
        nonlocal size
        try:
            if not dry_run:
                rm(path)
        except OSError as e:
            failed.append((path, e.strerror or type(e).__name__))
        else:
            removed.append(path)
            size += nbytes

    kept = []
    for kind, path in _places(root):
        if kind is PartKind.COMPILE:
            part = _part(kind, path)
            if part.newest is None or part.newest < cutoff:
                mark = path / COMPILE_MARK
                if mark.is_file() and not mark.is_symlink():
                    remove(path, part.bytes, shutil.rmtree)  # rmtree removes links inside as links
                else:
                    kept.append(path)
        elif kind is PartKind.VALUES:  # entry by entry: each read of one sets its time
            for f in _files(path):
                st = f.stat()
                if st.st_mtime >= cutoff:
                    continue
                if _VALUE_ENTRY.fullmatch(f.name):
                    remove(f, st.st_size, lambda f: f.unlink(missing_ok=True))
                else:
                    kept.append(f)
    return Pruned(tuple(removed), size, tuple(failed), tuple(kept))
