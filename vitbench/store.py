"""The results store: append-only JSONL under results/<study>/ (its rows as a tidy DataFrame: vitbench.tidy).

Layout of a store directory:
    results.jsonl            one record per line (trial rows and calibration rows), append-only
    results.w-<host>.jsonl   optional per-host shards (distributed executors); merged on load
    <sub>/results.jsonl, <sub>/results.w-<host>.jsonl
                             other runs kept beside (e.g. round1/, round2/ of a CI baseline): read as runs of
                             their own (rows of one directory supersede each other; directories pool). Nothing
                             else is read (rows.RESULTS_PATTERNS: a user's results-old.jsonl beside them is
                             not; a warning names it)
    study.yaml               the study file as last run (an older, different one is kept as study.<sha>.yaml)
    claims/<key>.lock        flock'ed while a sweep runs that trial (two sweeps never run the same trial)
    logs/<key>.log           output of trials that did not end 'ok'

Durability. Each record is serialised to one line and written with a single `os.write` on an O_APPEND file
descriptor, under an exclusive `flock` (several sweeps or workers on one machine may append concurrently),
then `fsync`ed before the next trial starts. The descriptor is the file at the path: a results file replaced
while a sweep runs (an editor's save writes a new file; `rm`) is reopened by its name before the next row, with a
warning (before, every later row went to the unlinked file and was lost, the sweep saying all ok), and the rows
the sweep has read are read again from the files as they are now (`Store.refresh`). A `kill -9` at any moment
therefore leaves every finished record intact and at most one torn last line. Before appending, a writer that
finds the file not ending in a newline (a torn tail) first terminates it, so a torn line never glues itself to
the next good record. On load, a line that does not parse (torn tail, garbage in the middle, or JSON that is not
a record) is skipped with a CorruptLineWarning naming the file and line; every good line is kept. The reading
is vitbench.rows' (the one reader of results: iter_records, read_records, result_files, MAX_LINE_BYTES,
MAX_DEPTH; importable from here too): the sweep (`Store.refresh`, over its line reader), `report` and `compare`
all read through it.

Links. What a sweep writes in a store (the results file and shards, claims/ and logs/ and their files) is never
written through a symbolic link: a results folder from elsewhere could hold claims/<key>.lock -> ~/any-file (trial
keys are deterministic), which the claim truncated. Such a link is refused naming it (PathError, exit 2), checked
before the first trial (`Store.check_links`) and again where each file is opened (O_NOFOLLOW, `open_in_store`).
The store directory itself may be a link (the user named it). Reading follows links (it writes nothing).

Across machines (SLURM/Ray workers on a shared file system) prefer per-worker shards (`Store(dir, shard=...)`)
or let the driver write what workers return: O_APPEND + flock is only as atomic as the file system makes it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import socket
import warnings
from pathlib import Path

from vitbench.errors import VitbenchWarning, clip
from vitbench.paths import PathError, reason, write_atomic
from vitbench.record import Record, Status, row_state, supersedes
from vitbench.rows import (RESULTS_FILE, RESULTS_PATTERNS, SHARD_PREFIX, Check, TrialKeys, _lines, _over_long,
                           _parse_one, _say_demoted, result_files)

# the row reader's names, kept importable from here (vitbench.rows owns them)
from vitbench.rows import (MAX_DEPTH, MAX_LINE_BYTES, SETTING_CHARS, CorruptLineWarning,  # noqa: F401
                           UnmeasuredRowWarning, iter_records, read_records)  # noqa: F401

STUDY_FILE = "study.yaml"
CLAIMS_DIR = "claims"  # claims/<key>.lock
LOGS_DIR = "logs"  # logs/<key>.log, written by the executors
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # a store's files are never written through a link (the docstring)
# in a `vitbench ab --results` folder (vitbench.compare.ab writes it): each side's commit and description, its
# rounds in baseline/pairNN/ and current/pairNN/ (two code versions: the report refuses to pool them)
SIDES_FILE = "sides.json"
AB_SIDES = ("baseline", "current")
TRIAL_ID_COLUMNS = ("key", "study", "run_id", "repeat", "kind", "status")


def dumps(record: Record) -> bytes:
    """One record -> one JSON line (no NaN, no raw newlines: JSON escapes them), newline-terminated."""
    return (json.dumps(record.to_dict(), allow_nan=False, separators=(",", ":"), default=str) + "\n").encode()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _same_file(fd: int, path: Path) -> bool:
    """Whether the open file `fd` is still the file at `path` (not replaced by another, not removed)."""
    try:
        at = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    st = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (at.st_dev, at.st_ino)


def _whole_json(raw: bytes) -> bool:
    """Whether a line parses as JSON: a last line without its newline that does not is a part of a row (still
    being written, perhaps by a worker on another node, whose lock a network file system may not show here; or
    torn by a kill), waited for as before; one that does is a whole row (`_final_tail`)."""
    try:
        json.loads(raw)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError
        return False
    return True


def _final_tail(fh, end: int) -> bool:
    """Whether a whole last row without its newline, ending at byte `end`, is all the file will hold of it: no
    vitbench writer is appending (each writes under LOCK_EX) and nothing came after it. Such a row is an editor's
    save without the final newline: the report read it as the row it is, and the sweep ran its trial again."""
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # held by a writer (BlockingIOError), or no locks here: read when it is whole
        return False
    try:
        return os.fstat(fh.fileno()).st_size == end
    finally:
        fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def ab_sides(folder: str | os.PathLike) -> dict[str, dict] | None:
    """The sides a `vitbench ab --results` folder names in its SIDES_FILE ({side: {"commit": SHA or "",
    "describe": text}}, each of AB_SIDES present, empty where the file cannot be read); None where `folder` has
    no SIDES_FILE."""
    path = Path(folder) / SIDES_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError, RecursionError):
        data = None
    data = data if isinstance(data, dict) else {}
    return {side: {k: str(v)[:200] for k, v in data[side].items() if isinstance(v, str)}
            if isinstance(data.get(side), dict) else {} for side in AB_SIDES}


def claim_path(root: Path, key: str) -> Path:
    """The lock file by which a sweep claims trial `key` in store `root` (Store.claim)."""
    return root / CLAIMS_DIR / f"{key}.lock"


def log_path(root: Path, key: str) -> Path:
    """Where an executor keeps the output of trial `key` in store `root`."""
    return root / LOGS_DIR / f"{key}.log"


def linked(path: Path, what: str, remedy: str | None = None) -> PathError:
    """The refusal of a symbolic link at `path` in a store, where vitbench writes (see the module docstring)."""
    try:
        to = f" (to {clip(os.readlink(path), 120)!r})"
    except OSError:
        to = ""
    return PathError(f"{what} {clip(str(path), 200)!r} is a symbolic link{to}: vitbench does not write through a "
                     "link in a results folder (one from elsewhere could aim it at any file of yours); "
                     + (remedy or "remove the link (`rm` removes the link only) and run again"))


def open_in_store(path: Path, flags: int, what: str, subdir: bool = True, mode: int = 0o644) -> int:
    """os.open(path, flags) of a store's file never through a symbolic link: neither `path` nor, with `subdir`
    (claims/, logs/: made here when absent), its directory may be one (PathError naming it). Other OSErrors are
    raised as they are."""
    dfd = None
    try:
        if subdir:
            path.parent.mkdir(parents=True, exist_ok=True)
            dfd = os.open(path.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW)
        return os.open(path.name if subdir else path, flags | _NOFOLLOW, mode, dir_fd=dfd)
    except OSError:
        for p, w in ((path.parent, f"{what}'s directory"), (path, what))[0 if subdir else 1:]:
            if p.is_symlink():
                raise linked(p, w) from None
        raise
    finally:
        if dfd is not None:
            os.close(dfd)


def _results_linked(path: Path) -> PathError:
    return linked(path, "results file", "move the file it links to here in its place, or give the folder it is "
                  "in as the results folder (a results folder that is itself a link is followed)")


def _unclaimed(lock: Path, key: str, e: OSError) -> PathError:
    many = (" (this process holds one open claim per trial in flight: bound them with the executor's "
            "max_parallel, or raise `ulimit -n`)" if e.errno == errno.EMFILE else "")
    return PathError(f"claim file {str(lock)!r} cannot be written: {reason(e)}{many}: trial {key} was not run (a "
                     "sweep run again runs what has no row)")


def more_open_files() -> bool:
    """Raise this process's soft limit of open files towards its hard limit; whether it rose. A sweep holds one
    claim (an open lock file) per trial in flight, and slurm and ray put every pending trial in flight: a resume of
    1,793 trials under a soft limit of 1,024 claimed none and ran nothing (found by a scale review)."""
    try:
        import resource
    except ImportError:  # not on this platform
        return False
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16  # macOS refuses an infinite soft limit
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return True
    return False


class Store:
    """Append-only results of one study directory (see the module docstring)."""

    def __init__(self, root: str | os.PathLike, shard: str | None = None, check: Check | None = None):
        self.root, self.check = Path(root), check  # check: as iter_records' (the sweep passes tasks.row_check())
        if shard is not None and not shard.startswith(SHARD_PREFIX):  # any other name is not read back (rows)
            raise ValueError(f"a shard's name starts with {SHARD_PREFIX!r}, got {shard!r}")
        self.path = self.root / (RESULTS_FILE if shard is None else f"results.{shard}.jsonl")
        self._fd: int | None = None
        self._ids: dict[Path, tuple[int, int]] = {}  # each file's (device, inode) when it was read
        self._stale = False  # this store's own file was replaced: every row is read again
        self._offsets: dict[Path, int] = {}
        self._lines: dict[Path, int] = {}
        self._records: list[Record] = []
        self._claims: dict[str, int] = {}
        self._done: dict[bool, set[str]] = {False: set(), True: set()}  # done_keys, kept as rows are read
        self._last: dict[str, tuple[bool, str | None]] = {}  # each key's latest outcome (record.row_state)
        self._keys = TrialKeys()  # each key names one trial

    # -- writing -----------------------------------------------------------------------------------------
    def _open(self) -> int:
        if self._fd is None:
            self.root.mkdir(parents=True, exist_ok=True)
            new = not os.path.lexists(self.path)
            try:  # read and written through this one descriptor (a torn tail's check: never by its name again)
                self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o644)
            except OSError:
                if self.path.is_symlink():
                    raise _results_linked(self.path) from None
                raise
            if new:
                _fsync_dir(self.root)
        return self._fd

    def append(self, record: Record) -> None:
        """Durably append one record (one write of one full line, under an exclusive lock, then fsync)."""
        data = dumps(record)
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _same_file(fd, self.path):  # replaced or removed since it was opened: to the file at the path
            warnings.warn(f"results file {str(self.path)!r} was replaced or removed while this sweep ran (an "
                          "editor's save?): rows go on into the file now at that path; rows it held then are "
                          "only there if they were kept", VitbenchWarning, stacklevel=2)
            self._fd = None
            fd, old = self._open(), fd  # the new one opened first: the old inode's number is not reused for it
            os.close(old)  # (its lock with it)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._stale = True  # what was read of the old file is not the store's any more
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn tail left by a killed writer: ended first
                data = b"\n" + data
            try:
                _write_all(fd, data)
                os.fsync(fd)
            except OSError as e:  # a full disk: no torn line left behind, and the row's loss said
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                what = f"trial {record.key}'s row" if record.key else "a row"
                raise PathError(f"results file {str(self.path)!r} cannot be written: {reason(e)}: {what} was not "
                                "recorded (a sweep run again runs what has no row)") from None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        for fd in self._claims.values():
            os.close(fd)
        self._claims.clear()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------------------
    def refresh(self) -> list[Record]:
        """Read what was appended since the last call (all shards); returns every record read so far."""
        if not self.root.is_dir():
            return self._records
        demoted: list = []
        files = result_files(self.root, recursive=False)
        if self._stale or set(self._ids) - set(files):  # a file read before is gone: what it held is no rows now
            return self._read_again()
        for f in files:
            off, lineno, recs, source = self._offsets.get(f, 0), self._lines.get(f, 0), [], None
            with open(f, "rb") as fh:
                st = os.fstat(fh.fileno())
                if self._ids.setdefault(f, (st.st_dev, st.st_ino)) != (st.st_dev, st.st_ino) or st.st_size < off:
                    return self._read_again()  # replaced (or cut) since it was read: offsets into another file
                fh.seek(off)
                for raw, size in _lines(fh):  # a line at a time, MAX_LINE_BYTES at most
                    torn = raw is not None and not raw.endswith(b"\n")
                    if torn and not (_whole_json(raw) and _final_tail(fh, off + size)):
                        break  # unterminated: a writer may still be appending it (read when it is whole)
                    off, lineno = off + size, lineno + 1
                    if raw is None:
                        _over_long(f, lineno, size)
                    elif raw.strip() and (rec := _parse_one(raw, f, lineno, torn=torn, check=self.check,
                                                            demoted=demoted)) is not None:
                        rec.source = source = source or str(f.parent.resolve())
                        self._keys.check(rec, f, lineno)
                        recs.append(rec)
            self._offsets[f], self._lines[f] = off, lineno
            self._records.extend(recs)
            for r in recs:
                if r.key and r.status.done:
                    self._done[False].add(r.key)
                    state = row_state(r)
                    if r.key not in self._last or supersedes(state, self._last[r.key]):
                        # ok where its latest outcome is: --retry-failed re-runs a trial ok once and failed since
                        self._last[r.key] = state
                        (self._done[True].add if r.status is Status.OK else self._done[True].discard)(r.key)
        _say_demoted(demoted)
        return self._records

    def _read_again(self) -> list[Record]:
        """Every row read afresh, from the files as they are now (one was replaced, cut or removed)."""
        for kept in (self._ids, self._offsets, self._lines, self._last, self._keys, *self._done.values()):
            kept.clear()
        self._records, self._stale = [], False
        return self.refresh()

    def done_keys(self, only_ok: bool = False) -> set[str]:
        """Keys of trials with a terminal row (Status.done), or whose latest one is 'ok' when `only_ok`: kept up to
        date as rows are read (a sweep asks before every trial; rebuilding the set from every row made a sweep of N
        trials O(N^2): 90 ms a trial at 100,000 rows). A copy: the caller may change it."""
        self.refresh()
        return set(self._done[only_ok])

    def outcome(self, key: str) -> tuple[bool, str | None] | None:
        """The row_state of trial `key`'s latest terminal row (None: it has none), rows appended since included."""
        self.refresh()
        return self._last.get(key)

    def outcomes(self) -> dict[str, tuple[bool, str | None]]:
        """Every trial's `outcome` at once (one read of the rows appended since, not one per trial). A copy."""
        self.refresh()
        return dict(self._last)

    def is_done(self, key: str, only_ok: bool = False) -> bool:
        """Whether trial `key` has a terminal row (an 'ok' one when `only_ok`), rows appended since included."""
        self.refresh()
        return key in self._done[only_ok]

    # -- claims: two sweeps on one directory never run the same trial ----------------------------------
    def claim(self, key: str) -> bool:
        """Try to take the trial `key` for this process (non-blocking flock; released by `release` or death).

        Lock files are never deleted (deleting a lock file races with a process about to lock it). A lock file
        that cannot be written (a full disk) is a PathError naming it, the trial left unclaimed."""
        if key in self._claims:
            return True
        lock = claim_path(self.root, key)
        for tried in (False, True):
            try:
                fd = open_in_store(lock, os.O_RDWR | os.O_CREAT, f"claim of trial {key}")
                break
            except PathError:
                raise
            except OSError as e:
                if tried or e.errno != errno.EMFILE or not more_open_files():
                    raise _unclaimed(lock, key, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{socket.gethostname()} {os.getpid()}\n".encode(), 0)
        except OSError as e:  # a full disk: the claim released, not held by a process that said it failed
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # drops the lock
            raise _unclaimed(lock, key, e) from None
        self._claims[key] = fd
        return True

    def release(self, key: str) -> None:
        fd = self._claims.pop(key, None)
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- the study file beside the results ----------------------------------------------------------------
    def check_links(self) -> None:
        """Refuse (PathError naming it) a symbolic link where a sweep writes in the store: the results file and
        shards, claims/ and logs/, the files in them (see the module docstring). Run by `save_study`, the sweep's
        first write, before any trial; each file is opened without following a link all the same."""
        for f in (f for pattern in RESULTS_PATTERNS for f in self.root.glob(pattern)):
            if f.is_symlink():
                raise _results_linked(f)
        for name, what in ((CLAIMS_DIR, "claim"), (LOGS_DIR, "log")):
            d = self.root / name
            if d.is_symlink():
                raise linked(d, f"the store's {name} directory")
            if d.is_dir():
                with os.scandir(d) as it:
                    for e in it:
                        if e.is_symlink():
                            raise linked(Path(e.path), f"the store's {what} file")

    @contextlib.contextmanager
    def locked(self):
        """An exclusive flock on the store's directory itself (no file made in it), held while a sweep checks the
        folder once more and writes its study copy (runner.run_study): of two studies started at once into one
        folder, the second then finds the first's copy (each had checked the folder before either wrote)."""
        fd = os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            with contextlib.suppress(OSError):  # NFS takes a write lock for flock, refused on a read-only fd:
                fcntl.flock(fd, fcntl.LOCK_EX)  # the check is then made again unlocked, as before this lock
            yield self
        finally:
            os.close(fd)

    def save_study(self, text: str) -> Path:
        """Copy the study as run to study.yaml (atomically); a different older copy is kept as study.<sha>.yaml.
        The sweep's first write: links where it writes are refused first (`check_links`)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.check_links()
        dest = self.root / STUDY_FILE
        if dest.exists():
            old = dest.read_bytes()  # bytes: a copy the user edited in another encoding is kept as it is
            if old == text.encode():
                return dest
            sha = hashlib.sha256(old).hexdigest()[:12]
            kept = self.root / f"study.{sha}.yaml"
            os.replace(dest, kept)
            warnings.warn(f"{dest} held another study text (an earlier run's, or yours): kept as {kept.name}; "
                          f"{STUDY_FILE} is now the study this run is", VitbenchWarning, stacklevel=2)
        return write_atomic(dest, text)
