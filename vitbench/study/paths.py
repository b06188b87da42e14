"""A study field written as the nested config path it sets (`upstream.lr: 0.003`, `--set data.workers=4`), read as
the field's name (`pretrain_lr`, `data_workers`) before anything else looks at it.

The paths are declared by the tasks' parameter classes (`TaskParams.field_paths`, each transfer part's `PATHS`,
generated from the nested configs' tables in vitbench.tasks.upstream and vitbench.tasks.real_input); nothing is
listed here. A trial's config and key are made of the field names only, so a key does not depend on the spelling:
the shipped studies (written with the field names) keep theirs. A path is told from a field by its dot (no field
name has one; tests/test_study_paths.py checks it).
"""

from __future__ import annotations

import difflib
from typing import Any

from vitbench.errors import ConfigError, shorten
from vitbench.study.schema import StudyModel
from vitbench.study.reader import Problems
from vitbench.tasks import tasks

LISTED_CHARS = 1200  # of the allowed fields in an error: the message stays within the CLI's bound (2 KiB)
# of the allowed paths: a study's problem is clipped at 1,200 characters (vitbench.study.reader.Problems), so the
# list leaves room for the key (shortened to ~60), three close paths and the words around them
PATHS_LISTED_CHARS = 800


def field_paths() -> dict[str, str]:
    """Every path a study may write -> the field it is read as, over every registered task. A path two tasks
    read as different fields is a plug-in's error (named with both)."""
    out: dict[str, str] = {}
    for name, task in tasks().items():
        for path, field in task.Params.field_paths().items():
            if out.setdefault(path, field) != field:
                raise ConfigError(f"task {name!r} reads the study path {path} as {field}, another task as "
                                  f"{out[path]}: one path, one field")
    return out


def listed(names, what: str = "fields", limit: int = LISTED_CHARS) -> str:
    """`names` joined, those that fit in `limit` characters, then how many more (every task's fields or paths
    together, plug-ins' included, pass any bound as the tasks grow)."""
    shown, size = [], 0
    for n in names:
        if size + len(n) + 2 > limit:
            return f"{', '.join(shown)} and {len(names) - len(shown)} more (each task's {what}: README.md, " \
                   "\"Studies\")"
        shown.append(n)
        size += len(n) + 2
    return ", ".join(shown)


def unknown_path(key: str, paths: dict[str, str]) -> str:
    """The message for a dotted key that is no path: the close ones, then the allowed paths (bounded)."""
    close = difflib.get_close_matches(key, list(paths), n=3) if len(key) < 100 else []
    return (f"unknown path {shorten(key)}." + (f" Did you mean {', '.join(close)}?" if close else "")
            + f" Allowed paths: {listed(list(paths), 'paths', PATHS_LISTED_CHARS)}")


def _renamed(block: dict[str, Any], loc: tuple, paths: dict[str, str], problems: Problems) -> dict[str, Any]:
    """`block` with each path key replaced by its field (in place of the key, so the order stays); an unknown
    path or a field given both ways is a problem at its key."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # field -> the key that set it here
    for key, value in block.items():
        if not isinstance(key, str) or "." not in key:
            name = key
        elif key not in paths:
            problems.add((*loc, key), unknown_path(key, paths))
            continue
        else:
            name = paths[key]
        if name in out:
            problems.add((*loc, key), f"{name} is set twice here (as {spelled[name]} and as {key}): keep one")
            continue
        out[name], spelled[name] = value, key
        if name != key:
            problems.spelled[(*loc, name)] = (*loc, key)  # its problems reported at the path, as written
    return out


def read_paths(m: StudyModel, problems: Problems) -> None:
    """Every path key of the study's grid blocks (defaults, axes, zip, include, exclude) read as its field."""
    if not any(isinstance(k, str) and "." in k for block in (m.defaults, m.axes, *m.zip, *m.include, *m.exclude)
               for k in block):
        return  # no path written: the study is read as it is (the shipped ones)
    paths = field_paths()
    m.defaults = _renamed(m.defaults, ("defaults",), paths, problems)
    m.axes = _renamed(m.axes, ("axes",), paths, problems)
    for name in ("zip", "include", "exclude"):
        setattr(m, name, [_renamed(b, (name, i), paths, problems) for i, b in enumerate(getattr(m, name))])


def set_field(key: str, option: str = "--set") -> str:
    """The field `--set KEY=...` sets: KEY itself, or the field of the path KEY (a ConfigError naming the option
    and the allowed paths when it is none)."""
    if "." not in key:
        return key
    paths = field_paths()
    if key not in paths:
        raise ConfigError(f"{option} {unknown_path(key, paths)}")
    return paths[key]
