"""Reading a study file: finding it (a path or a shipped name), parsing YAML safely, and reporting problems with
file and line.

Every problem found while checking a study is collected (`Problems`) and reported at once as one ConfigError
(the CLI exits 2), each line naming the file, the line, the dotted field and the value.

A study file is untrusted input: it is read only up to a size, must be UTF-8 text, and is parsed by a loader
that refuses what no study needs before it can cost memory or time: documents whose aliases expand past a
number of nodes (a "billion laughs" document of a few hundred bytes), nesting past a depth, recursive aliases,
integers too long to be a count and numbers that are not finite. Values quoted in messages are shortened and
the number of problems listed is capped, so a message stays short whatever the input.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from vitbench.errors import ConfigError, clip, shorten

STUDIES_DIR = "studies"
# Limits of a study file (a shipped study is 1-3 KB, ~300 nodes, 4 levels deep): generous for any real study,
# far below what would take seconds or gigabytes.
MAX_STUDY_BYTES = 1 << 20
MAX_NODES = 100_000  # YAML nodes, counting every alias as the nodes it stands for
MAX_DEPTH = 32  # nesting levels of mappings and lists
MAX_NUMBER_CHARS = 32  # an integer or float literal longer than this is no count, size or duration
MAX_INT = 2**63 - 1  # what the frameworks' int64 sizes can hold
MAX_PROBLEMS_SHOWN = 50


def embedded_studies() -> list[str]:
    """Names of the studies shipped inside the package (usable from any directory)."""
    try:
        return sorted(p.name[:-5] for p in resources.files("vitbench").joinpath(STUDIES_DIR).iterdir()
                      if p.name.endswith(".yaml"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def resolve_study(ref: str | Path) -> tuple[Path | None, str]:
    """A path, or a bare name (`smoke`, `transfer-digits`): ./studies/<name>.yaml, else the package's embedded
    copy (every shipped study: vitbench/studies/, which the checkout's studies/ links to). A folder named like a
    study (`vitbench sweep ci --results ci` makes ./ci) does not hide it: the name still means the study. The
    docs' spelling `studies/<name>.yaml`, where no such file is here, is the name too (outside the checkout
    `vitbench sweep studies/ci.yaml` said 'not found', the README saying shipped studies run from any directory).

    Returns (path or None for an embedded study, text)."""
    p = Path(ref)
    if p.is_file():
        return p, read_text(p)
    name = p.stem if p.suffix in (".yaml", ".yml") and p.parent in (Path("."), Path(STUDIES_DIR)) else str(ref)
    if "/" not in name and "\\" not in name:  # a name: a folder of that name here (its results) hides no study
        local = Path(STUDIES_DIR) / f"{name}.yaml"
        if local.is_file():
            return local, read_text(local)
        if name in embedded_studies():
            return None, resources.files("vitbench").joinpath(STUDIES_DIR, f"{name}.yaml").read_text()
    if p.exists():
        raise ConfigError(f"study {shorten(str(ref))} is not a file")
    raise ConfigError(f"study {shorten(str(ref))} not found: give a path to a YAML file or one of the shipped "
                      f"names: {', '.join(embedded_studies()) or '(none)'}")


def read_text(path: Path) -> str:
    """A study file's text: at most MAX_STUDY_BYTES, UTF-8 (a byte-order mark is allowed)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_STUDY_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"study {str(path)!r} cannot be read: {e.strerror or e}") from None
    if len(data) > MAX_STUDY_BYTES:
        raise ConfigError(f"invalid study {path}: larger than {MAX_STUDY_BYTES >> 20} MiB; a study is a small "
                          "YAML text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"invalid study {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset "
                          f"{e.start}); a study is a YAML text file") from None


# A problem's location when the command line set the field (`--set batch_size=0`): (SET_ORIGIN, "--set batch_size"),
# reported as that, not at a line of the study file (vitbench.study.load.apply_sets)
SET_ORIGIN = "<command line>"


def dotted(loc: tuple) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class Problems:
    """Collects (location, value, message) and formats them with file and line."""

    def __init__(self, source: str, root: yaml.Node | None):
        self.source, self.root = source, root
        self._items: dict[tuple, tuple] = {}
        # a key's location as read -> as written, where a study wrote a field as its config path
        # (vitbench.study.paths): a problem is reported where and as the user wrote it
        self.spelled: dict[tuple, tuple] = {}

    @property
    def items(self) -> list[tuple]:
        return list(self._items.values())

    def add(self, loc: tuple, msg: str, value: Any = ..., line_loc: tuple | None = None) -> None:
        loc = tuple(loc)
        for n in (2, 3):  # (block, key) or (block, index, key): the key as written
            if loc[:n] in self.spelled:
                loc = self.spelled[loc[:n]] + loc[n:]
                break
        got = "" if value is ... else shorten(value)
        msg = clip(msg, 1200)  # a message may quote the value itself (an unknown model's name)
        ident = (tuple(loc), got, msg, line_loc)  # the same problem met by several combinations is reported once
        self._items.setdefault(ident, (tuple(loc), got, msg, line_loc))

    def merge(self, other: Problems) -> None:
        """Report `other`'s problems with these (the missing paths of a study that is to run)."""
        for ident, item in other._items.items():
            self._items.setdefault(ident, item)

    def about(self, field: str) -> bool:
        """Was a problem reported at a location naming `field`?"""
        return any(field in loc for loc, *_ in self.items)

    def line(self, loc: tuple) -> int | None:
        node, line = self.root, None
        if node is None:
            return None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                        node, line = v, v.start_mark.line + 1
                        break
                else:
                    break
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line

    def raise_if_any(self) -> None:
        if not self.items:
            return
        lines = []
        items = self.items
        for loc, got, msg, line_loc in items[:MAX_PROBLEMS_SHOWN]:
            if loc[:1] == (SET_ORIGIN,):  # set on the command line: no line of the file to point at
                where, field_ = "the command line", clip(" ".join(map(str, loc[1:])), 120)
            else:
                ln = self.line(line_loc or loc)
                where = f"{self.source}:{ln}" if ln else self.source
                field_ = clip(dotted(loc), 120) or "(top level)"
            lines.append(f"{where}: {field_}: {msg}" + (f" (got {got})" if got else ""))
        if len(items) > MAX_PROBLEMS_SHOWN:
            lines.append(f"... and {len(items) - MAX_PROBLEMS_SHOWN} more problems")
        head = f"invalid study {self.source} ({len(items)} problem{'s' if len(items) > 1 else ''}):\n  "
        raise ConfigError(head + "\n  ".join(lines))


class _Refused(yaml.YAMLError):
    """A document the study loader will not build (see the limits at the top of this module)."""

    def __init__(self, problem: str, mark):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that counts, while composing, the nodes every node stands for with its aliases expanded,
    and the nesting depth, and refuses a document past MAX_NODES or MAX_DEPTH (or with a recursive alias) before
    anything is expanded; numbers must be finite and of a sane length."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._expanded: dict[int, int] = {}  # id(node) -> nodes it stands for, once composed

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None and id(node) not in self._expanded:  # still being composed: it contains itself
                raise _Refused(f"alias *{clip(event.anchor, 40)} refers to a node that contains it (a recursive "
                               "structure)", event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self._expanded[id(c)] for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self._expanded[id(k)] + self._expanded[id(v)] for k, v in node.value)
        if size > MAX_NODES:
            raise _Refused(f"the document stands for more than {MAX_NODES:,} values once its aliases (*name) are "
                           "expanded; a study needs a few hundred", node.start_mark)
        self._expanded[id(node)] = size
        return node

    def construct_yaml_int(self, node):
        if len(node.value) > MAX_NUMBER_CHARS:
            raise _Refused(f"integer {clip(node.value, 40)} is too long ({len(node.value)} characters)",
                           node.start_mark)
        value = super().construct_yaml_int(node)
        if abs(value) > MAX_INT:
            raise _Refused(f"integer {clip(node.value, 40)} is out of range (at most {MAX_INT})", node.start_mark)
        return value

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node) if len(node.value) <= MAX_NUMBER_CHARS else math.nan
        if not math.isfinite(value):
            raise _Refused(f"{clip(node.value, 40)} is not a finite number", node.start_mark)
        return value

    def construct_yaml_timestamp(self, node):
        """A date-like scalar (`2020-13-45`) is built by datetime, whose ValueError is no YAMLError: refused here,
        with its line."""
        try:
            return super().construct_yaml_timestamp(node)
        except (ValueError, OverflowError) as e:
            raise _Refused(f"{clip(node.value, 40)} is not a date ({e})", node.start_mark) from None


BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
BoundedLoader.add_constructor("tag:yaml.org,2002:float", BoundedLoader.construct_yaml_float)
BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", BoundedLoader.construct_yaml_timestamp)


def load_bounded(text: str, duplicates: list[str] | None = None) -> tuple[Any, yaml.Node | None]:
    """(data, node tree) of one YAML document, through BoundedLoader (raises yaml.YAMLError); `duplicates`: a
    list the document's duplicate keys are added to, found as written (before construction merges `<<:` keys
    into their mappings, after which a key that overrides a merged one would look like a second copy)."""
    if len(text) > MAX_STUDY_BYTES:
        raise _Refused(f"larger than {MAX_STUDY_BYTES >> 20} MiB", None)
    loader = BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if duplicates is not None:  # (composing bounded the tree: depth, and nodes with aliases expanded)
            _duplicate_keys(node, duplicates)
        return (loader.construct_document(node) if node is not None else None), node
    finally:
        loader.dispose()


def load_value(text: str, what: str) -> Any:
    """One value given on the command line (`--set FIELD=VALUE`), read as YAML through the study's own limits
    (BoundedLoader: aliases, depth, number lengths), so a value cannot do what a study file may not; ConfigError
    naming `what` otherwise."""
    try:
        return load_bounded(text)[0]
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e)
        kind = "refused" if isinstance(e, _Refused) else "not valid YAML"
        raise ConfigError(f"{what}: value {shorten(text)} {kind}: {clip(str(problem), 300)}") from None


def compose(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """(data, node tree) of a study's YAML text; syntax errors, refused documents and duplicate keys are
    ConfigErrors (every duplicate key at once)."""
    dups: list[str] = []
    try:
        data, node = load_bounded(text, dups)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e)
        kind = "refused" if isinstance(e, _Refused) else "not valid YAML"
        raise ConfigError(f"invalid study {where}: {kind}: {clip(str(problem), 300)}") from None
    dups = list(dict.fromkeys(dups))  # a mapping reached through several aliases is one mapping
    if dups:
        shown = dups[:MAX_PROBLEMS_SHOWN] + ([f"... and {len(dups) - MAX_PROBLEMS_SHOWN} more"]
                                             if len(dups) > MAX_PROBLEMS_SHOWN else [])
        raise ConfigError(f"invalid study {source} ({len(dups)} duplicate key{'s' if len(dups) > 1 else ''}; YAML "
                          "would silently keep only the last one):\n  " + "\n  ".join(
                              f"{source}:{d}" for d in shown))
    return data, node


def _duplicate_keys(node: yaml.Node | None, out: list[str]) -> None:
    """YAML lets a repeated key silently replace the earlier one (a second `axes:` would drop the first). A merge
    key (`<<: *defaults`) loses nothing: a key written beside it overrides the merged one, as YAML specifies."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                line = k.start_mark.line + 1
                if k.value in seen:
                    out.append(f"{line}: duplicate key {shorten(k.value)} (first on line {seen[k.value]})")
                else:
                    seen[k.value] = line
            _duplicate_keys(v, out)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _duplicate_keys(item, out)
