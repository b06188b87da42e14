"""An output folder that vitbench writes into (`report`, `fit --out`, `inspect --out`): only files the writer wrote
itself and can prove it did.

Each writer is a `Writer`, declared beside its command (report: vitbench.report.build.REPORT): its name in
messages, its manifest, the suffixes of its files. The proof is the folder's manifest (written last every time):
each file the writer wrote there, with its size and SHA-256. A file is the writer's own when the manifest names
it, it is a plain file (not a link) with one of its suffixes (never a store's .jsonl) and its bytes still hash to
what was written. Anything else in the folder is another's: a file of the user's, a file changed since (then it
is the user's), a file listed by an older vitbench's report manifest (a bare list of names, no hashes: nothing
proves it), another writer's file, a store file, a folder. Then:
- a file of another's is never overwritten, moved or removed; a file name taken by one stops the writer before
  anything is written (ConfigError, exit 2, naming it);
- a folder holding files of another's is refused, unless the caller allows them (`allow_other`, the command's
  `--allow-other-files`): the files are then written beside them;
- the files the writer's previous run wrote and this one does not are removed, those it can prove only.

Staging: the files are rendered into a staging folder inside the output folder (STAGING + a random part), then
moved into place one rename each (a new name with a link that fails if the name was taken meanwhile), after a
manifest that proves both the old and the new files (its `pending` part: a writer killed while it moves its
files in leaves them all provable, and the next one replaces them). The staging folder holds LOCK, kept locked
(flock) until the writer ends; the kernel drops the lock when a writer dies, so a staging folder whose LOCK nobody
holds is a dead writer's leftover, and the next writer into the folder removes it (a live one, another still
running, is left alone).

A writer writes inside `writing(out, writer)`: the folders it creates for `out` are removed again when the write
fails and they are still empty (a failed write leaves no new empty folder), and a file a full or read-only disk
refuses is said naming `out` (PathError, exit 2): the writes of pyarrow, matplotlib, a file's write() name no file.
An `out` that is a symbolic link lying in a results folder (the default `<results>/report` is one) came with that
folder, and a folder from elsewhere could aim it at any folder of the user's: it is refused naming it, unless the
caller says the user typed it (`chosen`: a link the user names is theirs to follow).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vitbench.errors import ConfigError, VitbenchWarning
from vitbench.paths import file_digest

STAGING = ".vitbench-report-staging-"  # prefix of a writer's staging folder in the output folder
LOCK = ".lock"  # in a staging folder: held (flock) by its writer while it runs
_SHOWN = 5  # other files named in a refusal


@dataclass(frozen=True)
class Writer:
    """What writes into an output folder: its name in messages, its manifest, the suffixes of its files."""

    what: str
    manifest: str
    suffixes: tuple[str, ...]  # every file it writes ends so (never a store's .jsonl)
    option: str = "--out"

    @property
    def format(self) -> str:
        return f"vitbench {self.what} manifest 1"

    def plain_name(self, name: str) -> bool:
        return name == Path(name).name and name not in ("", ".", "..") and name.endswith(self.suffixes)


def _read_manifest(out: Path, writer: Writer) -> tuple[dict[str, list[tuple]], bool, bool]:
    """(name -> the (size, SHA-256) pairs the writer's files there may hold, whether its manifest is its own: this
    format or an older vitbench's list of names, whether a writer was stopped while it moved its files in: its
    `pending` files may hold either the old or the new bytes). A manifest that is neither is another's file."""
    p = out / writer.manifest
    if not p.exists() and not p.is_symlink():
        return {}, True, False
    if p.is_symlink() or not p.is_file():
        return {}, False, False
    try:
        doc = json.loads(p.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}, False, False
    if isinstance(doc, list) and all(isinstance(n, str) for n in doc):
        return {}, True, False  # an older vitbench's: it names its files but proves none of them
    if not isinstance(doc, dict) or doc.get("format") != writer.format \
            or not isinstance(doc.get("files"), dict) or not isinstance(doc.get("pending", {}), dict):
        return {}, False, False
    files: dict[str, list[tuple]] = {}
    for part in (doc["files"], doc.get("pending", {})):
        for n, e in part.items():
            if writer.plain_name(n) and isinstance(e, dict) and isinstance(e.get("sha256"), str):
                files.setdefault(n, []).append((e.get("size"), e["sha256"]))
    return files, True, bool(doc.get("pending"))


def _manifest(writer: Writer, files: dict[str, dict], pending: dict[str, dict] | None = None) -> str:
    doc = {"format": writer.format, "files": files, **({"pending": pending} if pending else {})}
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


class OutputFolder:
    """A writer's output folder, read once before the files are rendered (`check`), then written (`publish`)."""

    def __init__(self, out: Path, writer: Writer, allow_other: bool = False):
        self.out = out
        self.allow_other = allow_other
        self.writer = w = writer
        self.written, manifest_ours, self.interrupted = _read_manifest(out, w)
        self.own: set[str] = {w.manifest} if manifest_ours else set()
        # the (size, SHA-256) of each file the manifest proves, read once (a report's tables reach 100s of MB)
        self.held = {n: d for n, ok in self.written.items() if (d := file_digest(out / n)) in ok}
        self.own |= set(self.held)
        self.others: list[str] = []

    def check(self) -> None:
        """Remove dead reports' staging folders; refuse a folder holding other files unless they are allowed."""
        self.others = []
        for entry in sorted(self.out.iterdir(), key=lambda p: p.name):
            if entry.name.startswith(STAGING) and _staging(entry):
                if not _in_use(entry):
                    shutil.rmtree(entry, ignore_errors=True)  # a dead report's leftover
                continue
            if entry.name not in self.own:
                self.others.append(entry.name)
        if self.interrupted:
            warnings.warn(f"{self.writer.what} directory {str(self.out)!r}: the last {self.writer.what} written "
                          "there was stopped while it moved its files in, so they may be a mix of two runs; this "
                          "one replaces them", VitbenchWarning, stacklevel=2)
        if self.others and not self.allow_other:
            w = self.writer
            raise ConfigError(
                f"{w.what} directory {str(self.out)!r} holds {len(self.others)} file(s) no {w.what} can prove it "
                f"wrote ({_names(self.others)}): nothing was written; give an empty or new {w.option}, or pass "
                f"--allow-other-files to write the {w.what}'s files beside them (they are never touched)")

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A staging folder inside the output folder, locked while the block runs, removed after it."""
        try:
            stage = Path(tempfile.mkdtemp(dir=self.out, prefix=STAGING))
        except OSError as e:
            raise ConfigError(f"{self.writer.what} directory {str(self.out)!r} is not writable: "
                              f"{e.strerror or e}") from None
        try:
            with open(stage / LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                yield stage
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def publish(self, stage: Path, names: list[str]) -> list[str]:
        """Move the staged files `names` into the folder, remove the previous report's files this one does not
        write (those it can prove), and record what was written in the manifest (moved in last); the names
        removed (for the command to say: a file of its earlier run gone without a word looked lost)."""
        w = self.writer
        taken = [n for n in names if n not in self.own and (os.path.lexists(self.out / n))]
        if taken:
            raise ConfigError(f"{w.what} directory {str(self.out)!r}: {_names(taken)} not written by "
                              f"`vitbench {w.what}` (or changed since): nothing was written; move it away or give "
                              f"another {w.option}")
        bad = [n for n in names if not w.plain_name(n)]
        if bad:  # a section's name that would not read back as the report's (vitbench.report.parts)
            raise ConfigError(f"{w.what} file name(s) {_names(bad)}: `vitbench {w.what}` writes only "
                              f"{', '.join(w.suffixes)} files")
        files = {}
        for n in names:
            size, sha = file_digest(stage / n)
            files[n] = {"size": size, "sha256": sha}
        # first a manifest that proves both the old and the new files (`pending`): a writer killed while it moves
        # them in leaves a folder whose files are all still provably its own, and the next run replaces them all
        old = {n: {"size": size, "sha256": sha} for n, (size, sha) in self.held.items()}
        (stage / w.manifest).write_text(_manifest(w, old, files))
        _move(stage / w.manifest, self.out / w.manifest, replace=w.manifest in self.own)
        for n in names:
            _move(stage / n, self.out / n, replace=n in self.own)
        removed = sorted(n for n in set(self.written) - set(names) if n in self.own)  # proven: a report's bytes
        for n in removed:
            (self.out / n).unlink(missing_ok=True)
        (stage / w.manifest).write_text(_manifest(w, files))
        os.replace(stage / w.manifest, self.out / w.manifest)
        self.written = {n: [(e["size"], e["sha256"])] for n, e in files.items()}
        self.held = {n: (e["size"], e["sha256"]) for n, e in files.items()}
        self.own, self.interrupted = {w.manifest, *names}, False
        return removed


def _store_link(out: Path) -> Path | None:
    """The results folder `out` lies in when `out` is a symbolic link there (else None)."""
    from vitbench.rows import RESULTS_PATTERNS

    if not out.is_symlink():
        return None
    store = out.parent
    return store if any(next(store.glob(pattern), None) for pattern in RESULTS_PATTERNS) else None


@contextlib.contextmanager
def writing(out: Path, writer: Writer, what: str | None = None, chosen: bool = False) -> Iterator[Path]:
    """Make folder `out` (and its missing parents; `what` it is in a message, default the writer's option) for the
    block. When the block fails, the folders made are removed again if still empty (nothing was published into
    them), and a file a full or read-only disk refused is said naming `out` (or the file, one outside it). An `out`
    that is a link in a results folder is refused unless `chosen` (the user typed it; the module docstring)."""
    from vitbench.paths import DISK_ERRNOS, PathError, make_dir, reason

    out = Path(out)
    if not chosen and (store := _store_link(out)) is not None:
        try:
            to = f" (to {os.readlink(out)[-120:]!r})"
        except OSError:
            to = ""
        raise PathError(f"{what or writer.option} {str(out)[-200:]!r} is a symbolic link{to} in results folder "
                        f"{str(store)[-200:]!r}: vitbench does not write through a link that came with a results "
                        "folder (one from elsewhere could aim it at any folder of yours); remove the link (`rm` "
                        f"removes the link only), or give the folder you want as {writer.option}")
    made = [d for d in (out, *out.parents) if not os.path.lexists(d)]  # deepest first
    make_dir(out, what or writer.option)
    try:
        yield out
    except BaseException as e:
        for d in made:
            try:
                d.rmdir()  # only an empty one: a file published into it (or anyone's) keeps it
            except OSError:
                break
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            where = f"{writer.what} directory {str(out)!r}"
            if e.filename and not _inside(Path(os.fsdecode(e.filename)), out):
                where = f"file {os.fsdecode(e.filename)!r} (writing {writer.what} directory {str(out)!r})"
            raise PathError(f"{where} cannot be written: {reason(e)}") from None
        raise


def write_files(out: Path, files: dict[str, bytes], writer: Writer, allow_other: bool = False) -> list[Path]:
    """Write `files` (name -> bytes, rendered already) into folder `out` (made if need be) as `writer`: checked,
    staged, then published (above; `writing`: a failure leaves no new empty folder); the paths written."""
    with writing(out, writer):
        folder = OutputFolder(out, writer, allow_other=allow_other)
        folder.check()
        with folder.staging() as stage:
            for name, data in files.items():
                (stage / name).write_bytes(data)
            removed = folder.publish(stage, list(files))
    if removed:
        warnings.warn(removed_note(writer, removed), VitbenchWarning, stacklevel=2)
    return [out / name for name in files]


def removed_note(writer: Writer, removed: list[str]) -> str:
    """What a writer says of its earlier run's files that this run does not write (and so removed)."""
    return (f"removed {len(removed)} file(s) the previous {writer.what} wrote there and this one does not: "
            f"{_names(removed)}")


def _move(src: Path, dst: Path, replace: bool) -> None:
    """Rename `src` to `dst`: over the report's own file (`replace`), else only if the name is still free."""
    if replace:
        os.replace(src, dst)
        return
    try:
        os.link(src, dst)  # fails if the name was taken since the check: never over another's file
    except FileExistsError:
        raise ConfigError(f"file {str(dst)!r} appeared while vitbench wrote into its folder: left as it is; "
                          "run the command again") from None
    except OSError:  # a file system without hard links
        if os.path.lexists(dst):
            raise ConfigError(f"file {str(dst)!r} appeared while vitbench wrote into its folder: left as it is; "
                              "run the command again") from None
        os.rename(src, dst)
        return
    src.unlink()


def _inside(path: Path, folder: Path) -> bool:
    try:
        return path.resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError):
        return False


def _staging(entry: Path) -> bool:
    """Whether `entry` is a report's staging folder (its LOCK inside), not a folder someone named alike."""
    return entry.is_dir() and not entry.is_symlink() and (entry / LOCK).is_file()


def _in_use(stage: Path) -> bool:
    """Whether a report still holds the staging folder's lock (a running report, here or on another host)."""
    try:
        with open(stage / LOCK) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False
    except OSError:
        return True  # cannot tell: leave it


def _names(names: list[str]) -> str:
    return ", ".join(names[:_SHOWN]) + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")
