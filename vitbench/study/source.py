"""Reading a study file: finding it (a path or a shipped name), parsing YAML safely, and reporting problems with
file and line.

Every problem found while checking a study is collected (`Problems`) and reported at once as one ConfigError
(the CLI exits 2), each line naming the file, the line, the dotted field and the value.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from vitbench.errors import ConfigError

STUDIES_DIR = "studies"


def embedded_studies() -> list[str]:
    """Names of the studies shipped inside the package (usable from any directory)."""
    try:
        return sorted(p.name[:-5] for p in resources.files("vitbench").joinpath(STUDIES_DIR).iterdir()
                      if p.name.endswith(".yaml"))
    except (FileNotFoundError, NotADirectoryError):
        return []


def resolve_study(ref: str | Path) -> tuple[Path | None, str]:
    """A path, or a bare name (`smoke`): ./studies/<name>.yaml, else the package's embedded copy.

    Returns (path or None for an embedded study, text)."""
    p = Path(ref)
    if p.is_file():
        return p, p.read_text()
    if p.exists():
        raise ConfigError(f"study {str(ref)!r} is not a file")
    name = p.name[:-5] if p.name.endswith((".yaml", ".yml")) and p.parent == Path(".") else str(ref)
    if "/" not in name and "\\" not in name:
        local = Path(STUDIES_DIR) / f"{name}.yaml"
        if local.is_file():
            return local, local.read_text()
        if name in embedded_studies():
            return None, resources.files("vitbench").joinpath(STUDIES_DIR, f"{name}.yaml").read_text()
    raise ConfigError(f"study {str(ref)!r} not found: give a path to a YAML file or one of the shipped names: "
                      f"{', '.join(embedded_studies()) or '(none)'}")


def dotted(loc: tuple) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


class Problems:
    """Collects (location, value, message) and formats them with file and line."""

    def __init__(self, source: str, root: yaml.Node | None):
        self.source, self.root, self.items = source, root, []

    def add(self, loc: tuple, msg: str, value: Any = ..., line_loc: tuple | None = None) -> None:
        item = (tuple(loc), value, msg, line_loc)
        if item not in self.items:  # the same problem met by several combinations is reported once
            self.items.append(item)

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
        for loc, value, msg, line_loc in self.items:
            ln = self.line(line_loc or loc)
            where = f"{self.source}:{ln}" if ln else self.source
            field_ = dotted(loc) or "(top level)"
            got = "" if value is ... else f" (got {value!r})"
            lines.append(f"{where}: {field_}: {msg}{got}")
        head = f"invalid study {self.source} ({len(lines)} problem{'s' if len(lines) > 1 else ''}):\n  "
        raise ConfigError(head + "\n  ".join(lines))


def compose(text: str, source: str) -> tuple[Any, yaml.Node | None]:
    """(data, node tree) of a study's YAML text; syntax errors and duplicate keys are ConfigErrors."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"invalid study {where}: not valid YAML: {problem}") from None
    _no_duplicate_keys(node, source)
    return data, node


def _no_duplicate_keys(node: yaml.Node | None, source: str) -> None:
    """YAML lets a repeated key silently replace the earlier one (a second `axes:` would drop the first)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode):
                line = k.start_mark.line + 1
                if k.value in seen:
                    raise ConfigError(f"invalid study {source}:{line}: duplicate key {k.value!r} (first on line "
                                      f"{seen[k.value]}); YAML would silently keep only the last one")
                seen[k.value] = line
            _no_duplicate_keys(v, source)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _no_duplicate_keys(item, source)
