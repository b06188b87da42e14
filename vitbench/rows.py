"""The row reader: a store's results files as records, one line at a time (writing, claims and links:
vitbench.store; which rows count: vitbench.tidy).

It owns which files of a store hold rows (RESULTS_FILE, its shards, the runs in directories below: result_files;
nothing else is read: a user's results-old.jsonl or mydata.jsonl in the tree is not, and is said) and how a line
becomes a record. A line that does not parse (torn tail, garbage in the middle, or JSON that is not a record) is
skipped with a CorruptLineWarning naming the file and line; every good line is kept; so is a line longer than
MAX_LINE_BYTES (read no further than that) or nested deeper than MAX_DEPTH. A number or setting vitbench never
writes (non-finite, an integer beyond a float's range, a setting longer than SETTING_CHARS, a newer schema) stops
the read naming file:line. This module is the one reader of results: the sweep (vitbench.store.Store.refresh),
`report` and `compare` all read through it (and vitbench.tidy's rules of which rows count). It imports no
vitbench.store (the store imports it and re-exports its names).
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vitbench.errors import ConfigError, VitbenchWarning, clip
from vitbench.record import SCHEMA, ErrorInfo, Record, RowProblem, Status

RESULTS_FILE = "results.jsonl"
# a host's shard of a store is results.<SHARD_PREFIX><host>.jsonl (vitbench.executors.remote.host_shard, the only
# writer of shards since they exist, 44e95e2)
SHARD_PREFIX = "w-"
# a store's files: the main one and the shards; a side file beside them (results-old.jsonl, a user's copy) is not
# read (it was pooled with them: the report showed its numbers), nor a copy named like a shard of old
# (results.bak.jsonl, results.2026-12-01.jsonl: read as rows done, until shards had a prefix of their own)
RESULTS_PATTERNS = (RESULTS_FILE, f"results.{SHARD_PREFIX}*.jsonl")
# any other JSONL file in a store's tree (a copy a user kept beside the store, results.bak.jsonl; rows of their
# own, mydata.jsonl): read by no one, said once (`result_files`)
_ANY = "*.jsonl"
# what is wrong with a parsed row as an ok row (vitbench.tasks.row_check), None when nothing is
Check = Callable[[Record], "RowProblem | None"]


# The longest line a reader takes in (longer: skipped with a CorruptLineWarning, read no further than this; a 1 GB
# line took 2.1 GB to read whole). The largest rows vitbench writes: a serve row keeps LoadGen's two logs per run,
# measured 38 KB a run (ViT-Nano/4, Server, 2026-12-01), 3.9 MB at max_probes' 100; a timing row's per-step times
# are at most workload.MAX_STEPS = 100,000 floats of at most 25 characters each, 2.5 MB. 64 MiB is 16 times the
# larger.
MAX_LINE_BYTES = 64 << 20
# The deepest nesting a reader takes (deeper: skipped with a CorruptLineWarning). vitbench's rows nest 5 levels
# (a serve row: raw, runs, a run, logs, a log); json parses up to ~1000, where every recursive walk of a row
# (read_records' interning, a copy, json.dumps) meets Python's recursion limit: 940 levels ended compare in a
# RecursionError traceback. 64 leaves room for a plug-in's raw data and stays far from the limit.
MAX_DEPTH = 64


class CorruptLineWarning(VitbenchWarning):
    """A results line that could not be parsed (torn by a kill, or garbage); it was skipped."""


class UnmeasuredRowWarning(VitbenchWarning):
    """An ok row without its measure (vitbench.tasks.row_check), read as an error row."""


def result_files(path: str | os.PathLike, recursive: bool = True) -> list[Path]:
    """The JSONL files of a store: a .jsonl file itself, or RESULTS_PATTERNS in a directory (main file first) and,
    with `recursive`, in the directories below it (other runs kept beside, e.g. round1/, round2/)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        why = "is neither a file nor a directory (a device or a pipe)" if p.exists() else "does not exist"
        raise ConfigError(f"results path {str(p)!r} {why} (expected a results directory or .jsonl file)")
    found = list(p.rglob(_ANY) if recursive else p.glob(_ANY))  # one walk of the tree, not one per pattern
    files = [f for f in found if any(fnmatch.fnmatchcase(f.name, pattern) for pattern in RESULTS_PATTERNS)]
    beside = sorted(set(found) - set(files))
    if beside:  # said, not read: a user's copy or own rows are not rows of this store (a shard is results.w-*)
        warnings.warn(f"{clip(str(beside[0]), 200)!r}" + (f" and {len(beside) - 1} more" if len(beside) > 1 else "")
                      + f" not read: not a file of the store ({RESULTS_FILE}, results.{SHARD_PREFIX}<host>.jsonl "
                      "shards); to read a file's rows, give the file itself or a folder of its own",
                      VitbenchWarning, stacklevel=2)
    unread = [f for f in files if not f.is_file()]
    if unread:  # a shard that cannot be read would leave its rows out of every table and verdict, unsaid
        f = unread[0]
        what = "a link to nothing" if f.is_symlink() and not f.exists() else "not a file"
        raise ConfigError(f"results file {str(f)!r} is {what}: its rows cannot be read; restore or remove it"
                          + (f" (and {len(unread) - 1} more like it)" if len(unread) > 1 else ""))
    return sorted(files, key=lambda f: (f.parent != p, str(f.parent), f.name != RESULTS_FILE, f.name))


class _NonFinite(Exception):
    pass


def _no_constant(name: str):
    raise _NonFinite(name)


def _finite_float(text: str) -> float:
    x = float(text)
    if not math.isfinite(x):  # 1e999 parses as infinity
        raise _NonFinite(text)
    return x


# the longest text a row's setting holds: a path's limit (Linux PATH_MAX, 4096 bytes); model names, modes and
# datasets are far shorter. A 5 MB model name made compare print 5 MB, history 10 MB, report's legend a traceback
SETTING_CHARS = 4096
_INT_DIGITS = 308  # more digits: beyond a float's range (1.8e308); no measure, count or seed reaches it


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > _INT_DIGITS:  # 10**400 written as digits: a traceback in every reader's float()
        raise _NonFinite(f"an integer of {len(text.lstrip('-'))} digits, beyond a float's range")
    return int(text)


class _Duplicate(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's dict, refused where a key repeats (json keeps the last silently: an edited row's second
    "metrics" replaced the first unseen; the study reader refuses repeated keys too). Its cost was within a busy
    host's noise: 10,000 rows read in 2.09-2.27 s against 1.64-2.24 s (CPU time, best of 5, three alternations)."""
    d = dict(pairs)
    if len(d) != len(pairs):
        seen: set[str] = set()
        raise _Duplicate(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return d


def _parse_one(raw: bytes, path: Path, lineno: int, torn: bool, check: Check | None = None,
               demoted: list | None = None) -> Record | None:
    """One line's record (None: skipped with a CorruptLineWarning); a row `check` demotes to an error row is
    added to `demoted` as (path, line, why), said once for them all by _say_demoted."""
    try:  # (each float through _finite_float: 26 % over json's parsing; a regex to skip it cost more, measured)
        d = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite_float,
                       parse_int=_bounded_int, object_pairs_hook=_unique_keys)
    except _Duplicate as e:
        raise ConfigError(f"{path}:{lineno}: the row holds the key {clip(repr(str(e)), 80)} twice, which vitbench "
                          "never writes (JSON readers keep either one): the file was edited or written by another "
                          "tool; fix or remove that line") from None
    except _NonFinite as e:  # vitbench writes null for them (record.clean): a number no report or compare uses
        raise ConfigError(f"{path}:{lineno}: the row holds {clip(str(e), 80)} (a non-finite number), which "
                          "vitbench never writes (it records null): the file was edited or written by another "
                          "tool; fix or remove that line") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors; nesting
        what = ("torn last line (a write interrupted by a kill?)" if torn else "unparseable line")  # too deep
        warnings.warn(f"{path}:{lineno}: skipped {what}, {len(raw)} bytes: {str(e)[:120]}",
                      CorruptLineWarning, stacklevel=4)
        return None
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and _deeper_than(d, MAX_DEPTH):  # (counting is cheap)
        warnings.warn(f"{path}:{lineno}: skipped line nested more than {MAX_DEPTH} levels deep (vitbench's rows "
                      "nest 5): not a vitbench record", CorruptLineWarning, stacklevel=4)
        return None
    try:
        if not isinstance(d, dict):
            raise ValueError(f"a JSON {type(d).__name__}, not a record object")
        rec = Record.from_dict(d)
    except ValueError as e:
        warnings.warn(f"{path}:{lineno}: skipped line that is not a vitbench record: {str(e)[:160]}",
                      CorruptLineWarning, stacklevel=4)
        return None
    if rec.schema > SCHEMA:  # another shape: read as this one's, its numbers could mean something else
        raise ConfigError(f"{path}:{lineno}: a row of schema {rec.schema}, written by a newer vitbench (this one "
                          f"reads schema {SCHEMA}): upgrade vitbench to read these results")
    long = next(((k, v) for cfg in (rec.config, rec.trial or {}) for k, v in cfg.items()
                 if isinstance(v, str) and len(v) > SETTING_CHARS), None)
    if long is not None:  # every reader would print it, in every table, label and legend
        raise ConfigError(f"{path}:{lineno}: the row's {clip(long[0], 60)} is {len(long[1])} characters, where "
                          f"a setting vitbench writes is at most {SETTING_CHARS} (a path's limit): the file was "
                          "edited or written by another tool; fix or remove that line")
    problem = check(rec) if check is not None else None
    if problem is not None and problem.refuse:  # not skipped: its trial would run again, its rows pool without it
        raise ConfigError(f"{path}:{lineno}: {problem.text}; vitbench never writes such a row: the file was "
                          "edited or written by another tool; fix or remove that line")
    if problem is not None:  # never an ok row: an error row (a sweep re-runs it with --retry-failed)
        rec.status, rec.error = Status.ERROR, ErrorInfo("UnmeasuredRow", problem.text)
        if demoted is not None:
            demoted.append((path, lineno, problem.text))
    return rec


class TrialKeys:
    """Each trial key of a results directory names one trial: its key is the hash of its trial and repeat
    (vitbench.study.trials.trial_key), so two rows of one key are reruns of one measurement, the latest of which
    counts (record.supersedes). A row of a key read before whose trial or repeat differs (rows copied by hand, a
    setting changed and the key kept) is refused naming both lines: the latest-row rule kept one such row of
    2,000 and the report showed 1 trial. Rows without a trial (a command's) have no key to check."""

    def __init__(self):
        self._first: dict[tuple, tuple[int, Path, int]] = {}  # (directory, key) -> (trial hash, file, line)

    def check(self, rec: Record, path: Path, lineno: int) -> None:
        if not rec.key or rec.trial is None:
            return
        made = hash(json.dumps([rec.repeat, rec.trial], sort_keys=True, default=str))
        first = self._first.setdefault((rec.source, rec.key), (made, path, lineno))
        if first[0] != made:
            raise ConfigError(f"{path}:{lineno}: the row's trial key {clip(repr(rec.key), 40)} is the key of "
                              f"{first[1]}:{first[2]}, whose trial or repeat differs (a key is the hash of its "
                              "trial's settings and repeat): the file was edited (a row copied, its settings "
                              "changed and its key kept) or written by another tool; fix or remove that line")

    def clear(self) -> None:
        self._first.clear()


def _deeper_than(d, limit: int) -> bool:
    """Whether the parsed JSON value `d` nests containers more than `limit` levels deep (walked, not recursed)."""
    stack = [(d, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in (v.values() if type(v) is dict else v) if type(c) in (dict, list))
    return False


def _over_long(path: Path, lineno: int, size: int) -> None:
    warnings.warn(f"{path}:{lineno}: skipped line of {size} bytes or more, longer than any row vitbench writes "
                  f"(a reader takes at most {MAX_LINE_BYTES} bytes a line): not a vitbench record",
                  CorruptLineWarning, stacklevel=4)


def _lines(fh) -> Iterator[tuple[bytes | None, int]]:
    """Each line of binary file `fh` from where it stands, with its length in bytes (its newline included, the
    last one may lack it), read MAX_LINE_BYTES at most: a longer line is None, the rest of it read past in
    chunks (never held)."""
    while raw := fh.readline(MAX_LINE_BYTES + 1):
        if len(raw) <= MAX_LINE_BYTES or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        size = len(raw)
        while (more := fh.readline(1 << 20)) and not more.endswith(b"\n"):
            size += len(more)
        yield None, size + len(more)


def _say_demoted(demoted: list) -> None:
    """One warning for every row a read demoted (a store of old rows would print a line each)."""
    if demoted:
        path, lineno, why = demoted[0]
        warnings.warn(f"{len(demoted)} ok row(s) without their measure read as error rows (vitbench wrote "
                      "such rows before 2026-11-28; a row without its measure is not ok); first: "
                      f"{path}:{lineno}: {why}",
                      UnmeasuredRowWarning, stacklevel=3)


def iter_records(path: str | os.PathLike, check: Check | None = None) -> Iterator[Record]:
    """Every record of a results path (a directory with its shards and the runs below it, or one .jsonl file),
    in file order, read one line at a time; each knows the directory it came from (`Record.source`). Bad lines
    are skipped with a CorruptLineWarning naming file:line; a row `check` finds a problem with (its readers pass
    vitbench.tasks.row_check()) is refused, a ConfigError naming its file and line, or read as an error row,
    said once at the end."""
    demoted: list = []
    keys = TrialKeys()
    try:
        for f in result_files(path):
            source = str(f.parent.resolve())
            with open(f, "rb") as fh:
                for lineno, (raw, size) in enumerate(_lines(fh), 1):
                    if raw is None:
                        _over_long(f, lineno, size)
                        continue
                    if not raw.strip():
                        continue
                    rec = _parse_one(raw, f, lineno, torn=not raw.endswith(b"\n"),  # a last line lacks \n
                                     check=check, demoted=demoted)
                    if rec is not None:
                        rec.source = source
                        keys.check(rec, f, lineno)
                        yield rec
    finally:  # said also where a reader stops early
        _say_demoted(demoted)


def read_records(path: str | os.PathLike, check: Check | None = None) -> list[Record]:
    """Every record of a results path (iter_records), as a list held whole (compare's and history's): each row's
    mappings rebuilt with interned keys, and a row's environment shared with the row before when they are equal
    (a sweep run's rows have one). As parsed, a row was some 17 KB of Python objects, a third of it key strings
    every row repeats and a fifth its environment: 158 MiB for 10,000 rows of bench_scale.py's store, 76 MiB
    so, for 25 % more reading time (0.15 s on 0.65 s). The mappings are read-only by convention: nothing in
    vitbench writes a read record's."""
    out: list[Record] = []
    env: dict | None = None
    for rec in iter_records(path, check):
        rec.config, rec.metrics, rec.raw, rec.runner = (_interned(rec.config), _interned(rec.metrics),
                                                        _interned(rec.raw), _interned(rec.runner))
        rec.trial = None if rec.trial is None else _interned(rec.trial)
        rec.env = env if rec.env == env else _interned(rec.env)
        env = rec.env
        out.append(rec)
    return out


def _interned(d: dict) -> dict:
    """`d` with interned keys (JSON's are strings), nested mappings too."""
    return {sys.intern(k): _interned(v) if type(v) is dict else v for k, v in d.items()}
