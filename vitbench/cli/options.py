"""Where every command-line option's default comes from, declared once.

An option either sets something a config, a trial or a record keeps, or it does not:

- it sets a field of a config class or a task's Params (`--steps`, `--classes`, `--min-seconds`): its default is
  that field's declared default, read from the class (`from_field`), shown as the command line writes it
  (`[5, 6, 7, 8, 9]` as "5-9");
- it sets a value the library declares as a named constant rather than a field (`compare --threshold`):
  its default is that constant (`from_constant`);
- it sets nothing kept (how a command prints, where it writes, what it lists, which command mode runs): a
  command-line concern, its default declared here in CLI_DEFAULTS and nowhere else (`cli_option`).

An option whose default is None sets nothing unless given: the config's own default applies. An option with a
literal default of any other origin is refused by tests/test_cli_defaults.py, which walks every command of the
app; so is a command-line option named like a field (with a default) of the configs its command builds.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from types import SimpleNamespace
from typing import Any

import typer
from pydantic import BaseModel

# Command-line concerns: the option's name -> (its default, why no config keeps it). One entry per meaning; the
# commands that take it use cli_option(name, ...) with their own flags and help.
CLI_DEFAULTS: dict[str, tuple[Any, str]] = {
    "json": (False, "print the output as JSON instead of tables"),
    "format": ("table", "how a comparison is printed: table | md | json"),
    "report_formats": ("md,html,csv,parquet", "which report files are written"),
    "plots": (True, "whether the report writes its figures"),
    "allow_other_files": (False, "report, fit: whether --out may hold files they did not write (never touched)"),
    "tiny": (True, "whether `models` lists the tiny variants"),
    "filter": ("", "which names `models` lists (a glob; empty: all)"),
    "bench_task": ("infer", "which of bench's two tasks runs (infer | train); the task is not a field default"),
    "normalize": (False, "compare: divide speeds by the calibration workload before deciding"),
    "allow_missing": (False, "compare: whether a trial missing from current fails the check"),
    "allow_same": (False, "ab: whether REF may be the checked-out commit (an A/A check)"),
    "repo": (".", "ab: the git checkout whose working tree is current"),
    "dry_run": (False, "say what would be done, do nothing (sweep: the trials; cache --prune: what goes)"),
    "prune_days": (None, "cache: remove what has gone unused this many days (none: list only)"),
    "force": (False, "sweep: re-run trials already done"),
    "retry_failed": (False, "sweep: re-run trials whose last row is not ok"),
    "allow_failures": (False, "sweep: exit 0 although trials failed"),
    "refresh": (False, "env: re-measure the peak instead of reading the cached one"),
    "quick": (False, "doctor: smaller checks"),
    "version": (False, "print the version and exit"),
}


@dataclass(frozen=True)
class FieldDefault:
    """The default of field `path` (dotted through nested models: `data.classes`) of `model` (a class, or
    "module:Class" for one whose import the command line should not pay for until the command runs)."""

    model: type[BaseModel] | str
    path: str

    @property
    def lazy(self) -> bool:
        return isinstance(self.model, str)

    def model_class(self) -> type[BaseModel]:
        if isinstance(self.model, str):
            module, _, name = self.model.partition(":")
            return getattr(importlib.import_module(module), name)
        return self.model

    def models(self) -> list[type[BaseModel]]:
        """The config classes the path walks through (`model` first)."""
        cls = self.model_class()
        out = [cls]
        for part in self.path.split(".")[:-1]:
            cls = _model_of(cls.model_fields[part].annotation, cls.model_fields[part].default)
            out.append(cls)
        return out

    def value(self) -> Any:
        """The declared default (a factory's default: None, the config fills it in)."""
        obj: Any = self.model_class()
        parts = self.path.split(".")
        for i, part in enumerate(parts):
            if isinstance(obj, BaseModel):  # a nested model's default instance: its value
                obj = getattr(obj, part)
                continue
            info = obj.model_fields[part]
            default = info.get_default(call_default_factory=False)
            last = i == len(parts) - 1
            obj = default if default is not None or last else _model_of(info.annotation, None)
        return obj

    def default(self) -> Any:
        """The value as the command line writes it: an Enum (or a list of them) by its value."""
        v = self.value()
        if isinstance(v, (list, tuple)):
            return type(v)(x.value if isinstance(x, Enum) else x for x in v)
        return v.value if isinstance(v, Enum) else v

    def __str__(self) -> str:
        cls = self.model_class()
        return f"{cls.__module__}.{cls.__qualname__}.{self.path}"


@dataclass(frozen=True)
class ConstantDefault:
    """The value of constant `name` in module `module` (an Enum member: its value)."""

    module: str
    name: str

    def default(self) -> Any:
        v = getattr(importlib.import_module(self.module), self.name)
        return v.value if isinstance(v, Enum) else v

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class CliDefault:
    """A command-line concern's default: CLI_DEFAULTS[name]."""

    name: str

    def default(self) -> Any:
        return CLI_DEFAULTS[self.name][0]

    def __str__(self) -> str:
        return f"vitbench.cli.options.CLI_DEFAULTS[{self.name!r}]"


Source = FieldDefault | ConstantDefault | CliDefault
_SOURCES: dict[int, tuple[Any, Source]] = {}  # id(OptionInfo) -> (the OptionInfo, kept alive; its source)


def _model_of(annotation, default) -> type[BaseModel]:
    if isinstance(default, BaseModel):
        return type(default)
    for a in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    raise TypeError(f"{annotation!r} is not a config class")


def _declared(source: Source, *param_decls: str, **kwargs):
    if isinstance(source, FieldDefault) and source.lazy:  # read when the command runs without the option
        cls = source.model.rpartition(":")[2]  # type: ignore[union-attr]
        info = typer.Option(..., *param_decls, default_factory=source.default,
                            show_default=f"{cls}.{source.path}", **kwargs)
    else:
        info = typer.Option(source.default(), *param_decls, **kwargs)
    _SOURCES[id(info)] = (info, source)
    return info


def from_field(model: type[BaseModel] | str, path: str, *param_decls: str, **kwargs):
    """typer.Option whose default is `model`'s field `path` (dotted; an Enum: its value). `model` "module:Class":
    read when the command runs (its help says so instead of the value)."""
    return _declared(FieldDefault(model, path), *param_decls, **kwargs)


def from_constant(module: str, name: str, *param_decls: str, **kwargs):
    """typer.Option whose default is the library constant `module.name`."""
    return _declared(ConstantDefault(module, name), *param_decls, **kwargs)


def cli_option(name: str, *param_decls: str, **kwargs):
    """typer.Option of a command-line concern, its default CLI_DEFAULTS[name]."""
    return _declared(CliDefault(name), *param_decls, **kwargs)


def source_of(info) -> Source | None:
    """Where option `info` (a command parameter's typer.OptionInfo) takes its default from; None: not declared
    here."""
    entry = _SOURCES.get(id(info))
    return entry[1] if entry is not None and entry[0] is info else None


def _parameters(command: Callable):
    """(parameter name, the field it sets, its typer declaration) of each argument and option of `command`: the
    field a from_field declaration names, else the parameter's own name."""
    from typer.models import ArgumentInfo, OptionInfo

    for p in inspect.signature(command).parameters.values():
        if isinstance(p.default, (OptionInfo, ArgumentInfo)):
            src = source_of(p.default)
            yield p.name, (src.path if isinstance(src, FieldDefault) else p.name), p.default


def field_options(command: Callable, fields) -> dict[str, str]:
    """How `command` (a command's function) spells the task `fields` it sets: field -> its flag (`--warmup` for
    a parameter declared from_field(..., "warmup_steps", "--warmup")) or its argument's name (MODEL for an
    argument named like the field), read from the command's own declarations. What messages name a field by
    (vitbench.cli.common.task_params), so no command writes its spellings a second time."""
    from typer.models import ArgumentInfo

    out = {}
    for name, field, info in _parameters(command):
        if field not in fields:
            continue
        if isinstance(info, ArgumentInfo):
            out[field] = info.metavar or name.upper()
        else:
            flags = [f for d in (info.param_decls or ()) for f in d.split("/") if f.startswith("--")]
            out[field] = flags[0] if flags else "--" + name.replace("_", "-")
    return out


def typed_fields(command: Callable, values: dict) -> set[str]:
    """The fields among `values` (field -> the value its flag passed) that hold other than the flag's own default
    in `command`'s declarations: typed on the command line. A flag typed as its default (-b 8) is not told apart
    from one left out, which is also what it asks for."""
    from typer.models import OptionInfo

    return {field for _, field, info in _parameters(command)
            if isinstance(info, OptionInfo) and field in values and values[field] != info.default}


@dataclass(frozen=True)
class OptionGroup:
    """Options several commands take, declared once: parameter name -> (its type, its typer.Option). A command
    decorated with the group takes them as one parameter named `marker` (a namespace, an attribute per option),
    placed in its help where that parameter sits in its signature."""

    marker: str
    options: dict[str, tuple[Any, Any]]

    def __call__(self, fn: Callable) -> Callable:
        sig = inspect.signature(fn, eval_str=True)
        params: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name != self.marker:
                params.append(p)
                continue
            params += [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=typ)
                       for n, (typ, info) in self.options.items()]

        @functools.wraps(fn)
        def command(**values):
            group = SimpleNamespace(**{n: values.pop(n) for n in self.options})
            return fn(**{self.marker: group}, **values)

        command.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}  # real types: what typer reads
        return command
