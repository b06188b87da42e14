"""Command-line options generated from a task's fields by their config paths (issue 52, item 1).

A transfer command (pretrain, fewshot, finetune) lists the config paths of its task's fields it takes as
options (`upstream.lr`, `upstream.data.classes`, `data.workers`: TaskParams.field_paths, the paths a study and
`--set` write; a field that has no path by its own name, `shots`), each with the spellings users already type
(`--lr`, `--classes`; the first is how messages name it). Everything else is read from the field, the one
declaration: the option's parameter is the field's name (the command passes its values to the task as they
are), its type the field's, its default the field's (`from_field`, the mechanism bench and max-batch use), its
help the field's description; the path's own spelling (`--upstream.lr`, `--data.classes`) is added beside the
old ones. A field added to the table of a command is one entry here, no parameter, mapping or message written by
hand.
"""

from __future__ import annotations

import enum
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from vitbench.cli.options import OptionGroup, from_field


@dataclass(frozen=True)
class PathOption:
    """One option of a task field: `path` its config path (or its name when it has none), `names` the spellings
    users have (first: the one messages name). Its default and bounds are the field's: a command runs the trial
    a study runs with the same settings, and refuses what a study refuses."""

    path: str
    names: tuple[str, ...] = ()


def path_spelling(path: str) -> str:
    """The option a config path gives: `--upstream.lr` (as `--set` and a study write it), `--shots`."""
    return f"--{path}" if "." in path else f"--{path.replace('_', '-')}"


def cli_type(annotation) -> type:
    """The command-line type of a field's annotation: bool, int, float or str (a Literal, an Enum, a path:
    str; Optional[X]: X; a union with str: str)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return cli_type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return str if str in args else cli_type(args[0])
    if origin is typing.Literal:
        return type(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return str
    return annotation if annotation in (bool, int, float, str) else str


def field_of(params: type[BaseModel], path: str) -> str:
    """The task field a config path sets (TaskParams.field_paths), or `path` itself: a field without one."""
    return params.field_paths().get(path, path)  # type: ignore[attr-defined]


def path_options(params: type[BaseModel], options: tuple[PathOption, ...]) -> dict[str, tuple[Any, Any]]:
    """The options of `params`' fields named by `options`, for an OptionGroup: field -> (type, typer.Option)."""
    out: dict[str, tuple[Any, Any]] = {}
    for o in options:
        name = field_of(params, o.path)
        info = params.model_fields[name]
        spelled = path_spelling(o.path)
        decls = [*o.names, *(() if any(spelled in n.split("/") for n in o.names) else (spelled,))]
        out[name] = (cli_type(info.annotation), from_field(params, name, *decls, help=info.description))
    return out


def path_group(marker: str, params: type[BaseModel], *options: PathOption) -> OptionGroup:
    """An OptionGroup of generated options (`path_options`): the command gets them as one namespace, an
    attribute per task field."""
    return OptionGroup(marker, path_options(params, options))


def data_options(prefix: str, *, classes: str = "--classes") -> tuple[PathOption, ...]:
    """The data options every transfer command takes, the config paths under `prefix` (`upstream.data.`,
    `data.`), with their spellings (bench's are cli/data_options.py's): each dataset format's own options among
    them (vitbench.transfer.formats: a format added there needs no line here)."""
    from vitbench.transfer.formats import format_options

    return (PathOption(prefix + "name", ("--data",)), PathOption(prefix + "path", ("--data-path",)),
            PathOption(prefix + "test_path", ("--data-test-path",)),
            PathOption(prefix + "skip_corrupt", ("--skip-corrupt",)),
            PathOption(prefix + "workers", ("--data-workers",)),
            *(PathOption(prefix + f, (f"--{f.replace('_', '-')}",)) for f in format_options()),
            PathOption(prefix + "check_data", ("--check-data",)),
            PathOption(prefix + "classes", (classes,)), PathOption(prefix + "seed", ("--data-seed",)))
