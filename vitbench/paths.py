"""Output locations a user names (a results directory, a report folder, a checkpoint file): checked before any
work starts and created with errors that name the path, never a traceback (FileExistsError, OSError 30).

`check_dir` / `check_file` create nothing (a dry run, or a check before minutes of training); `check_entry` says
whether what already lies at a path vitbench writes (a store's files and directories, a lock) is of the kind it
must be; `make_dir` creates the directory; `write_atomic` writes a file whole or not at all, with a new file's
usual mode; `locked` holds an exclusive lock beside a file while a process reads, computes and writes it. `what`
is how the message names the location: the option (`--results`) or its role. Every refusal is a `PathError`: bad
input (exit 2, one line naming the path) and an OSError, so code that goes on without an optional file (the
matmul peaks in a read-only home) still does.

The machine's cache directory (`cache_dir`: the measured matmul peaks, the persistent compile caches) is declared
here too, with the switch that turns the compile caches off (`compile_cache_dir`), and its check
(`check_cache_dir`: a file there, or a directory that cannot be made or written, is refused naming it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from vitbench.errors import ConfigError, clip

# One cache directory per machine: $VITBENCH_CACHE_DIR, else $XDG_CACHE_HOME/vitbench, else ~/.cache/vitbench.
CACHE_ENV = "VITBENCH_CACHE_DIR"
# Persistent compile caches (XLA executables, torch inductor's FX graphs) under <cache>/compile/, on by default;
# this variable set to 0/false/off/no turns them off (each compile then starts from nothing, as before).
COMPILE_CACHE_ENV = "VITBENCH_COMPILE_CACHE"
_OFF = ("0", "false", "off", "no")


class PathError(ConfigError, OSError):
    """A path vitbench must read or write that cannot be (a file where a directory must be, a directory where a
    file must be, a read-only place): bad input, naming the path (exit 2); an OSError too (see the docstring)."""


def cache_dir() -> Path:
    """The machine's vitbench cache directory (not created here)."""
    base = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vitbench")
    return Path(base).expanduser()


def compile_cache_on() -> bool:
    """Are the persistent compile caches on ($VITBENCH_COMPILE_CACHE unset or not one of 0/false/off/no)?"""
    return os.environ.get(COMPILE_CACHE_ENV, "").strip().lower() not in _OFF


def compile_cache_dir(subdir: str | None = None) -> Path | None:
    """Where a backend keeps its persistent compile cache: <cache>/compile/<subdir> (a backend names its
    subdirectory by its framework's versions, so a new version starts a new cache), or None when the compile
    caches are off. Not created here."""
    if not compile_cache_on():
        return None
    root = compile_root(cache_dir())
    return root / subdir if subdir else root


def _cache_what() -> str:
    return f"cache directory ({'$' + CACHE_ENV if os.environ.get(CACHE_ENV) else 'choose one with $' + CACHE_ENV})"


def check_cache_dir(compiling: bool = True) -> Path:
    """The cache directory, refused (PathError naming it and the ways out) when something other than a directory
    lies there or above it, when it is absent and cannot be made, or when it cannot be read. One that exists but
    is read-only is used as it is: read, never written (`mark_used`). `compiling`: the message also names the
    switch that turns the compile caches off."""
    root = cache_dir()
    q = _existing_ancestor(root)
    try:
        if q != root or not q.is_dir():
            return check_dir(root, _cache_what())  # a file there or above it; or absent: can it be made?
        if not os.access(root, os.R_OK | os.X_OK):
            raise PathError(f"{_cache_what()} {_quote(root)} cannot be read: permission denied")
    except PathError as e:
        raise PathError(f"{e}{f' (or ${COMPILE_CACHE_ENV}=0: no compile caches)' if compiling else ''}") from None
    if compiling:
        check_trusted(root, compile_root(root))
    return root


def open_compile_cache(path: Path) -> Path:
    """Create compile-cache directory `path` if needed and mark it used now (its modification time: reads from a
    compile cache write nothing, and `vitbench cache --prune` removes the ones unused for days:
    vitbench.caches). A cache directory that cannot hold it is refused naming it (`check_cache_dir`)."""
    root = check_cache_dir()
    if not path.is_dir():
        made = [d for d in _up_to(root, path) if not d.exists()]
        make_dir(path, "compile cache")
        for d in made:  # what this process made is never writable by others, whatever the umask (000 in a CI
            with contextlib.suppress(OSError):  # container): it would be refused below as no one's to trust
                os.chmod(d, stat.S_IMODE(os.stat(d).st_mode) & ~stat.S_IWOTH)
    check_trusted(root, path)
    mark = path / COMPILE_MARK
    if not os.path.lexists(mark):
        with contextlib.suppress(OSError):  # a read-only cache is still read
            mark.touch()
    mark_used(path)
    return path


def check_trusted(root: Path, path: Path) -> None:
    """Refuse (PathError) compile-cache directory `path` when it, or a directory between it and cache directory
    `root`, is writable by other users or owned by another user (root excepted): the backends load what lies
    there as compiled code (torch's inductor unpickles its FX graphs, JAX runs its executables), so another user's
    file there would run as this user (design: never unpickle untrusted files). A group of the user's is trusted
    (a team's cache): group-writable is allowed, and so is a teammate's directory whose group is one of the
    user's."""
    if (why := untrusted(root, path)) is not None:
        raise PathError(f"compile cache {why}: what lies there is loaded as compiled code, so vitbench does not "
                        f"use it; `chmod o-w` it if it is yours, choose another cache with ${CACHE_ENV}, or turn "
                        f"the compile caches off with ${COMPILE_CACHE_ENV}=0")


def untrusted(root: Path, path: Path) -> str | None:
    """Why directory `path`, or one between it and `root`, is not one to load code or pickles from (check_trusted's
    rule: writable by other users, or owned by another user, root and the user's groups excepted), as
    "'<dir>' is <who>, mode <mode>"; None when all are trusted (or absent)."""
    for d in _up_to(root, path):
        try:
            st = os.stat(d)
        except OSError:
            continue
        other = bool(st.st_mode & stat.S_IWOTH)
        ours = st.st_uid in (os.geteuid(), 0) or st.st_gid in (os.getegid(), *os.getgroups())
        if other or not ours:
            who = "writable by every user" if other else f"owned by another user (uid {st.st_uid})"
            return f"{_quote(d)} is {who}, mode {stat.S_IMODE(st.st_mode):o}"
    return None


def _up_to(root: Path, path: Path) -> list[Path]:
    """`path` and the directories above it up to `root` (`path` alone when it is not below `root`)."""
    chain = [path, *path.parents]
    return chain[:chain.index(root) + 1] if root in chain else chain[:1]


# In each compile-cache directory vitbench opened: what `vitbench cache --prune` asks before removing one whole (a
# directory under <cache>/compile without it, a user's own when $VITBENCH_CACHE_DIR names their folder, is kept)
COMPILE_MARK = ".vitbench-compile-cache"


def mark_used(path: Path) -> None:
    """Set `path`'s modification time to now: a cache entry's last use, what `vitbench cache --prune` goes by
    (vitbench.caches); a cache that cannot be written (read-only) is still read, so a failure is ignored."""
    try:
        os.utime(path)
    except OSError:
        pass


def content_sha256(path: str | os.PathLike) -> str | None:
    """The SHA-256 of the file `path` names (a link followed, `~` expanded), or None where it is no readable plain
    file; kept per (file, size, modification time) in this process, so a file named by many trials is read once."""
    try:
        real = Path(path).expanduser().resolve()
        st = real.stat()
    except (OSError, RuntimeError):
        return None
    return _content_sha256(str(real), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=256)
def _content_sha256(real: str, size: int, mtime_ns: int) -> str | None:
    digest = file_digest(Path(real))
    return digest[1] if digest else None


def file_digest(path: Path) -> tuple[int, str] | None:
    """(size, SHA-256) of the plain file at `path`, read without following a link; None for anything else (a link,
    a directory, a device, a file that cannot be read)."""
    try:
        # O_NONBLOCK: a named pipe opens at once (and is refused below); opened blocking it waited for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        h, size = hashlib.sha256(), 0
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
            size += len(chunk)
        return size, h.hexdigest()
    finally:
        os.close(fd)


def compile_root(cache: Path) -> Path:
    """The directory of the compile caches in cache directory `cache`: <cache>/compile."""
    return cache / "compile"


MAX_PATH_CHARS = 200  # a path in a message is quoted whole up to here; beyond, its end (where its name is)


def _quote(p: str | os.PathLike) -> str:
    """A path for a message: quoted whole, or its last MAX_PATH_CHARS characters (the name that matters)."""
    text = str(p)
    return repr(text) if len(text) <= MAX_PATH_CHARS else f"'...{text[-MAX_PATH_CHARS:]}' ({len(text)} characters)"


# errors of the disk, not of the input: what a file could not be written for, said in one line naming it
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
# A path the user gave that no file system call can take: a name past NAME_MAX (255 bytes) or PATH_MAX, a loop
# of symbolic links, a file where a directory is needed: bad input (exit 2), wherever the call that met it is.
PATH_ERRNOS = (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR)


def reason(e: OSError) -> str:
    """Why a file could not be written, in words (the disk is full, read-only, permission denied)."""
    if e.errno == errno.EROFS:
        return "the file system is read-only"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({e.strerror or e})"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return e.strerror or str(e)


def _writable(d: Path) -> bool:
    return os.access(d, os.W_OK | os.X_OK)  # access(2) also answers EROFS for a read-only file system


def _existing_ancestor(p: Path) -> Path:
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def check_dir(path: str | os.PathLike, what: str) -> Path:
    """`path` is, or can be created as, a directory this process can write into (nothing is created)."""
    p = Path(path).expanduser()
    q = _existing_ancestor(p)
    if not q.is_dir():
        kind = "a file" if q.is_file() else "not a directory (a device or a pipe)"
        where = f"is {kind}" if q == p else f"is inside {_quote(q)}, which is {kind}"
        raise PathError(f"{what} {_quote(p)} {where}; give a directory")
    why = ("the file system is read-only" if _read_only(q) else "permission denied") if not _writable(q) \
        else _cannot_create_in(q)
    if why:
        where = "" if q == p else f" (cannot create it in {_quote(q)})"
        raise PathError(f"{what} {_quote(p)} is not writable{where}: {why}")
    return p


def _cannot_create_in(d: Path) -> str | None:
    """Why no file can be created in the directory `d` (None: one can). access(2) says yes to root everywhere;
    /proc and /sys still refuse: a file is created and removed at once to find out."""
    try:
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".vitbench-check-")
    except OSError as e:
        return reason(e) + (" (a special file system)" if e.errno == errno.ENOENT else "")
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)
    return None


def check_file(path: str | os.PathLike, what: str) -> Path:
    """`path` can be written as a file: not a directory, its directory exists or can be made, and is writable."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise PathError(f"{what} {_quote(p)} is a directory; give a file name")
    if p.exists() and not p.is_file():  # /dev/null, a pipe: written through a temporary file, it would be replaced
        raise PathError(f"{what} {_quote(p)} is not a regular file (a device or a pipe); give a file name")
    check_dir(p.parent, f"{what} {_quote(p)}: its directory")
    if p.exists() and not _writable(p.parent):
        raise PathError(f"{what} {_quote(p)} cannot be replaced: its directory is not writable")
    return p


def check_entry(path: str | os.PathLike, what: str, directory: bool = False) -> Path:
    """What lies at `path`, which vitbench reads and writes, is of the kind it must be: a directory it can create
    files in (`directory`), else a regular file it can read and write; absent, it can be created. Nothing is
    created. A store's files, its claims and logs, a lock beside a file are checked this way before any work."""
    p = Path(path).expanduser()
    if directory:
        return check_dir(p, what)
    if p.is_dir():
        raise PathError(f"{what} {_quote(p)} is a directory, where vitbench keeps a file; move it away")
    if p.exists() or p.is_symlink():
        if not p.is_file():
            raise PathError(f"{what} {_quote(p)} is not a regular file (a device, a pipe or a broken link); "
                            "move it away")
        if not os.access(p, os.R_OK | os.W_OK):
            raise PathError(f"{what} {_quote(p)} cannot be read and written: "
                            f"{'the file system is read-only' if _read_only(p.parent) else 'permission denied'}")
        return p
    check_dir(p.parent, f"{what} {_quote(p)}: its directory")
    return p


def make_dir(path: str | os.PathLike, what: str) -> Path:
    """Create the directory `path` (and its parents) or raise a ConfigError naming it and why not."""
    p = check_dir(path, what)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        link = next((a for a in (p, *p.parents) if a.is_symlink() and not a.exists()), None)
        why = (f"{_quote(link)} is a symbolic link to {clip(os.readlink(link), 200)!r}, which does not exist"
               if link is not None else reason(e))
        raise PathError(f"{what} {_quote(p)} cannot be created: {why}") from None
    return p


def _read_only(d: Path) -> bool:
    try:
        return bool(os.statvfs(d).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def file_mode() -> int:
    """The mode a new file gets here (0o666 minus the umask), read without changing the umask."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: read it by setting it (and put it back at once)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` under a temporary name beside `path` and rename it into place: a reader sees the old file or
    the new one, never half of one. The file gets a new file's usual mode (mkstemp would leave it 0600: a
    checkpoint or result others on the machine could not read). Text is written as UTF-8."""
    path = Path(path)
    if not path.parent.is_dir():
        make_dir(path.parent, f"{clip(path.name, 80)}'s directory")
    if path.is_dir():
        raise PathError(f"{_quote(path)} is a directory, where vitbench writes a file; move it away")
    _remove_stale_temps(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        raise PathError(f"{_quote(path)} cannot be written: {reason(e)}") from None
    try:
        os.fchmod(fd, file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):  # a full disk while writing: the old file is still there, whole
            raise PathError(f"{_quote(path)} cannot be written: {reason(e)}") from None
        raise
    return path


# A temporary file of write_atomic's not written to for this long is a killed writer's: a live one writes its data
# in one go (a ViT-H checkpoint, 2.5 GB, in well under a minute on any disk), then renames it at once.
STALE_TEMP_S = 3600.0


def _remove_stale_temps(path: Path) -> None:
    """Remove what killed writers of `path` left (its `.<name>.*.tmp` temporaries untouched for STALE_TEMP_S:
    a kill -9 mid-write left a checkpoint's partial copy, hidden, for ever). Plain files only, never a link."""
    import glob
    import time

    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        with contextlib.suppress(OSError):
            st = os.lstat(tmp)
            if stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > STALE_TEMP_S:
                tmp.unlink()


@contextlib.contextmanager
def locked(path: Path, what: str | None = None) -> Iterator[None]:
    """An exclusive lock on `<path>.lock` (beside `path`, created with its directory) while the block runs:
    concurrent processes that read-modify-write `path` (the peak cache) or create it once (a checkpoint that
    several trials need) take turns. Released when the block ends or the process dies. A directory that cannot
    hold the lock, or a lock that is not a file, is refused naming it (PathError) and `what` it is (say where
    the user sets it: an option, an environment variable; default: `path`'s directory)."""
    lock_path = path.with_suffix(".lock")
    within = f" in {what}" if what else ""
    if not path.parent.is_dir():
        make_dir(path.parent, what or f"{clip(path.name, 80)}'s directory")
    try:
        lock = open(lock_path, "a")  # noqa: SIM115 - closed below, after the lock is released
    except OSError as e:
        check_entry(lock_path, f"lock of {_quote(path)}{within}")  # names what lies there
        raise PathError(f"lock {_quote(lock_path)}{within} cannot be written: {reason(e)}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
