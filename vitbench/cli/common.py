"""Shared CLI helpers: consoles, JSON output, and building a task's parameters from command-line options.

Output width. A terminal's width is used as rich finds it; `COLUMNS` sets it for any output (read at every
print, not once at start). Output that reaches no terminal at all (a CI log, a file) gets LOG_WIDTH columns
instead of rich's 80. Whatever the width, a table never breaks a word or a number inside a cell: its columns
shrink no further than their longest word (`fit_table`), and a table that cannot fit is printed wider than
the width rather than folded. A table of more than LONG_ROWS rows is laid out by vitbench.cli.long_table (one
pass, the same widths) instead of rich.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

from rich.console import Console, ConsoleDimensions
from rich.segment import Segment
from rich.table import Table

from vitbench.choices import not_allowed
from vitbench.cli.long_table import LONG_ROWS, column_widths, lines
from vitbench.errors import ConfigError, VitbenchWarning, clip, shorten
from vitbench.numfmt import visible

LOG_WIDTH = 160  # columns when no terminal is attached (CI logs, files): wide tables stay on one line


def _env_columns() -> bool:
    return os.environ.get("COLUMNS", "").strip().isdigit()


def _any_terminal() -> bool:
    for fd in (0, 1, 2):
        try:
            os.get_terminal_size(fd)
            return True
        except (OSError, ValueError):
            continue
    return False


def _longest_word(*texts) -> int:
    from rich.text import Text

    words = [w for t in texts if t for w in (Text.from_markup(t).plain if isinstance(t, str) else
                                             getattr(t, "plain", str(t))).split()]
    return max(map(len, words), default=0)


def fit_table(console: Console, table: Table) -> int:
    """Fix the column widths of `table` for `console` so that no cell, title or caption is broken inside a word:
    each column gets at least its longest word (all of a no-wrap column), the rest of the width goes to the
    columns in proportion to what they would still use. Returns the width the table needs: the console's, or
    more when even the minimum does not fit."""
    if not table.columns:
        return console.width
    wide = console.options.update_width(1 << 15)
    mins, maxs = [], []
    for col in table.columns:
        m = table._measure_column(console, wide, col)  # padding included
        mins.append(m.maximum if col.no_wrap else m.minimum)
        maxs.append(m.maximum)
    extra = table._extra_width
    avail = console.width - extra
    title = _longest_word(table.title, table.caption)
    if sum(maxs) <= avail:
        if sum(maxs) + extra >= title:
            return console.width
        widths = list(maxs)
    else:
        widths = column_widths(mins, maxs, avail)
    widths[-1] += max(0, title - sum(widths) - extra)  # a title's long word (a path) fits on one line
    for i, (col, w) in enumerate(zip(table.columns, widths)):
        col.width = max(1, w - table._get_padding_width(i))
    return max(console.width, sum(widths) + extra)


# Control characters in text a user or a results file supplied (a model name with ESC [2J clears a terminal, an
# OSC sequence retitles it): written as visible escapes (numfmt.visible), never to the terminal as they are. Tab
# and newline stay; rich's own styles and cursor controls are not text and are untouched.


class _Console(Console):
    """rich's Console with vitbench's width rules (see the module docstring) and no control characters from text
    (`visible`)."""

    def _render_buffer(self, buffer) -> str:
        return super()._render_buffer(s if s.control else Segment(visible(s.text), s.style) for s in buffer)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._width = None  # rich reads COLUMNS once, here; `size` reads it at every print instead

    @property
    def size(self) -> ConsoleDimensions:
        dims = super().size
        if self._width is None and not self.is_terminal and not _env_columns() and not _any_terminal():
            return ConsoleDimensions(LOG_WIDTH, dims.height)
        return dims

    def print(self, *objects, **kwargs) -> None:
        def long(o) -> bool:
            return isinstance(o, Table) and o.row_count > LONG_ROWS

        if any(map(long, objects)):  # laid out by long_table; written as it is where no style would show
            for o in objects:
                if long(o) and self.color_system is None and not self.record:
                    self.file.write("".join(f"{visible(line)}\n" for line in lines(o, self.width, styled=False)))
                elif long(o):
                    super().print("\n".join(lines(o, self.width)), highlight=False, soft_wrap=True)
                else:
                    self.print(o, **kwargs)
            return
        need = max([self.width, *(fit_table(self, o) for o in objects if isinstance(o, Table))])
        if need <= self.width:
            return super().print(*objects, **kwargs)
        saved, self._width = self._width, need
        try:
            super().print(*objects, **kwargs)
        finally:
            self._width = saved


console = _Console()
err_console = _Console(stderr=True)
_warned: set[str] = set()


def print_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """`warnings.showwarning` for the CLI: vitbench's warnings as one `warning: ...` line each, once per
    message; other warnings in Python's own format."""
    if not issubclass(category, VitbenchWarning):
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))
        return
    warn(str(message))


def warn(text: str) -> None:
    """Print `warning: <text>` on stderr, once per distinct text in this command (`_Group.invoke` resets)."""
    if text in _warned:
        return
    _warned.add(text)
    from rich.markup import escape

    err_console.print(f"[yellow]warning:[/] {escape(clip(text, 1000))}", highlight=False, soft_wrap=True)


def print_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def choice(value: str, allowed: tuple[str, ...], option: str) -> str:
    """`value` if it is one of `allowed`, else a ConfigError naming the option and what is allowed."""
    if value not in allowed:
        raise ConfigError(not_allowed(option, value, allowed))
    return value


def checked(value, typ, option_name: str):
    """`value` validated against `typ` (a field's declared type, e.g. tasks.fields.SHARED["threads"][0]), for an
    option that reaches no task's Params; a ConfigError names the option, the rule and the value."""
    from pydantic import TypeAdapter, ValidationError

    if value is None:
        return None
    try:
        return TypeAdapter(typ).validate_python(value)
    except ValidationError as e:
        rule = "; ".join(x["msg"].removeprefix("Value error, ") for x in e.errors())
        raise ConfigError(f"{option_name}: {rule} (got {shorten(value)})") from None


def shared_option(field: str, value, option_name: str | None = None):
    """`value` of a shared trial field (tasks.fields.SHARED: its type and range, declared once) given as an
    option outside a task's Params (`env --threads`)."""
    from vitbench.tasks.fields import SHARED

    return checked(value, SHARED[field][0], option_name or option(field))


def cli_setting(field: str, value) -> str:
    """How a message names a field's setting on the command line: --compile, --no-compile, --precision bf16."""
    flag = option(field)
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {value}"


def option(field: str, names: dict[str, str] | None = None) -> str:
    """The command-line option of a task field: `names[field]` where the command names it otherwise (--warmup
    for warmup_steps), else --field-name."""
    return (names or {}).get(field) or "--" + field.replace("_", "-")


# every task command's --precision (the values: PRECISIONS, which the option checks; what each means: SHARED's)
PRECISION_HELP = ("fp32 (full fp32 on every backend) | tf32 (GPU) | bf16 | fp16 (autocast) | int8 (a runtime's "
                  "dynamic quantization, inference); the backend refuses one it does not run.")
def _keys(keys: tuple[str, ...]) -> str:  # override keys as the help lists them, a choice's values after it
    from vitbench.models.overrides import BUILT_IN

    return ", ".join(f"{k} ({'|'.join(BUILT_IN[k].choices)})" if BUILT_IN[k].choices else k for k in keys)


def _set_help() -> str:
    from vitbench.models.overrides import RESNET_KEYS, TRANSFORMER_KEYS

    return (f"Architecture override KEY=VALUE, repeatable: --set depth=6 --set posemb=none. ViT/hybrid: "
            f"{_keys(TRANSFORMER_KEYS)}; BiT/hybrid: {_keys(RESNET_KEYS)} (blocks: per stage, e.g. 3x4x6x3). The model's "
            "name becomes e.g. ViT-B/16[depth=6].")


SET_HELP = _set_help()
# a task command's --set: the overrides, and any field of its task (path_sets), as a study sets it
SET_FIELDS_HELP = SET_HELP + (" A KEY that is a field of the task sets that field, as a study would (VALUE read "
                              "as YAML; `vitbench plugins --json` lists the fields): --set num_classes=10 --set "
                              "compile=true.")


def parse_sets(sets: list[str] | None, option: str = "--set") -> dict[str, str]:
    """`--set KEY=VALUE` options -> {KEY: VALUE} (keys not yet checked); a malformed or repeated one is a
    ConfigError naming it."""
    out: dict[str, str] = {}
    for item in sets or ():
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise ConfigError(f"{option} {clip(item, 60)!r}: expected KEY=VALUE, e.g. {option} depth=6")
        if key in out:
            raise ConfigError(f"{option} {clip(key, 40)}: given twice ({out[key]!r} and {clip(value, 40)!r})")
        out[key] = value
    return out


def path_sets(task_name: str, sets: list[str] | None) -> tuple[list[str], dict, dict[str, str]]:
    """`--set` items split: a KEY that is a field of the task's Params (`num_classes=10`, `compile=true`: what a
    study may set, whether or not the command has an option for it) or a config path of one (`upstream.lr=3e-3`
    sets pretrain_lr; TaskParams.field_paths) sets it, its VALUE read as YAML, as `sweep --set` reads it; any
    other KEY is an architecture override, as before (no field is named like one: a study's rule too). Returns
    (the overrides as given, {field: value}, {field: '--set KEY'}: how an error names it). A set field wins over
    the field's flag at its default (one typed otherwise beside it is refused: task_params). An unknown path is
    a ConfigError naming it with the allowed ones."""
    from vitbench.study.paths import listed, unknown_path
    from vitbench.study.reader import load_value
    from vitbench.tasks import get_task

    given = parse_sets(sets)
    params = get_task(task_name).Params
    paths = {**{f: f for f in params.model_fields if f not in ("model", "task")}, **params.field_paths()}
    fields, names = {}, {}
    for key, text in given.items():
        if key in ("model", "task"):  # chosen by the command's own argument and option, never by --set
            chosen = "MODEL argument" if key == "model" else "--task option (where it has one)"
            raise ConfigError(f"--set {key}: the {key} is the command's {chosen}, not a --set item")
        if "." in key and key not in paths:
            dotted = {p: f for p, f in paths.items() if "." in p}
            raise ConfigError(f"--set {unknown_path(key, dotted)}" if dotted else
                              f"--set {shorten(key)}: task {task_name!r} has no nested settings (a dotted KEY "
                              f"sets one); its fields: {listed(sorted(paths), 'fields', 600)}")
        if key in paths:
            fields[paths[key]] = load_value(text, f"--set {clip(key, 80)}")
            names[paths[key]] = f"--set {key}"
    return [f"{k}={v}" for k, v in given.items() if k not in paths], fields, names


def model_asked(model: str | None, sets: list[str] | None, default: str) -> str:
    """How the user asked for a model beside a checkpoint, for messages: '--model X', '--set K=V --set ...', or
    `default` (neither)."""
    if model:
        return f"--model {model}"
    wanted = parse_sets(sets)
    return " ".join(f"--set {k}={v}" for k, v in wanted.items()) if wanted else default


def checkpoint_model(path, model: str | None, sets: list[str] | None) -> str:
    """The model of a checkpoint file a command was given: --model and --set, else the file's (a vitbench
    checkpoint's header says it, weights of another origin are read for theirs). A vitbench checkpoint of another
    architecture than asked is refused here, naming --model / --set (the task's Params refuse it too, and take
    the resolution it was trained at: FromCheckpoint)."""
    from pathlib import Path

    from vitbench.transfer.checkpoint import checkpoint_spec, load_checkpoint, read_meta, refuse_other_architecture

    path = Path(path).expanduser()
    meta = read_meta(path) if path.suffix == ".safetensors" and path.is_file() else None
    asked = with_sets(model, sets) if model else None
    if meta is None:  # weights of another origin (or no file: the loader says so)
        return asked or with_sets(load_checkpoint(path, asked).spec.name, sets)
    have = checkpoint_spec(path)
    if model or sets:
        from vitbench.models.specs import get_spec

        refuse_other_architecture(have, get_spec(asked) if asked else have.with_overrides(**parse_sets(sets)),
                                  model_asked(model, sets, "--model"))
    return asked or with_sets(have.name, sets)


def with_sets(model: str, sets: list[str] | None, option: str = "--set") -> str:
    """The canonical name of `model` with the `--set KEY=VALUE` overrides applied (vitbench.models.overrides),
    e.g. ("ViT-B/16", ["depth=6"]) -> "ViT-B/16[depth=6]"; `model` unchanged without overrides. A bad key,
    value or combination is a ConfigError naming the option and what is allowed."""
    wanted = parse_sets(sets, option)
    if not wanted:
        return model
    from vitbench.models.specs import get_spec

    spec = get_spec(model)
    try:
        return spec.with_overrides(**wanted).name
    except ConfigError as e:
        named = [f"{option} {k}={v}" for k, v in wanted.items() if k in str(e)] or \
            [f"{option} {k}={v}" for k, v in wanted.items()]
        raise ConfigError(f"{' '.join(named)}: {e}") from None


def refuse_set_clash(command, values: dict, set_fields: dict, set_names: dict[str, str] | None = None) -> None:
    """A ConfigError where a field `--set` sets (path_sets' {field: value}) is one whose flag `command` was also
    typed with, otherwise (`values`: field -> what its flag passed): the --set won in silence (--backend torch
    --set backend=jax; pretrain --steps 100 --set pretrain_steps=5 trained 5 steps). A flag at its default is
    not told apart from one left out: the --set sets it. `set_names`: field -> '--set KEY' as typed (a path)."""
    from vitbench.cli.options import field_options, typed_fields

    typed = typed_fields(command, values)
    clash = [f for f, v in set_fields.items() if f in typed and values[f] != v]
    if clash:
        flags = field_options(command, values)
        typed_set = {f: (set_names or {}).get(f, f"--set {f}") for f in clash}
        raise ConfigError("; ".join(f"{option(f, flags)} {shorten(values[f])} and {typed_set[f]}="
                                    f"{shorten(set_fields[f])} both set it" for f in clash) + ": give one")


def task_params(task_name: str, names: dict[str, str] | None = None, sets: list[str] | None = None, *,
                command=None, **values):
    """(task class, its validated Params) from command-line values; a bad value is a ConfigError naming the
    option and what it must be: `names[field]` where given (a field set from another's value: inspect's SOURCE),
    else `command`'s own spelling (the command's function; options.field_options: --warmup for warmup_steps,
    MODEL), else --field-name. `sets`: the command's `--set KEY=VALUE` items (path_sets: a field of the task, or
    its path, wins over its flag left at its default, and is refused beside one typed otherwise; else an
    architecture override of `values["model"]`)."""
    from pydantic import ValidationError

    from vitbench.cli.options import field_options
    from vitbench.tasks import get_task
    from vitbench.tasks.fields import FIELD_NAMES
    from vitbench.transfer.config import field_range

    task = get_task(task_name)
    declared = field_options(command, task.Params.model_fields) if command else None
    names = {**(declared or {}), **(names or {})}

    def name_of(field: str) -> str:
        """`field` as this command takes it: its own spelling, else (a field of the task the command has no flag
        for) `--set FIELD` (fewshot's messages named a --val-fraction it does not have), else --field-name."""
        if field in names or declared is None or field not in task.Params.model_fields:
            return option(field, names)
        return f"--set {field}"

    # a flag not given is None (its default applies); a --set item's null is the value asked for, as in a study
    # (`--set classes=null` fell back to the default classes)
    given = {k: v for k, v in values.items() if v is not None}
    if sets:
        arch, set_fields, set_names = path_sets(task_name, sets)
        if command:
            refuse_set_clash(command, values, set_fields, set_names)
        model = with_sets(values.get("model"), arch)
        given = {**given, **({"model": model} if model is not None else {}), **set_fields}
        names = {**(names or {}), **set_names}
    try:  # a check across fields names each by its option too (FIELD_NAMES)
        params = task.Params.model_validate({"task": task.name, **given},
                                            context={FIELD_NAMES: name_of})
    except ValidationError as e:
        problems = []
        for x in e.errors():
            msg = x["msg"].removeprefix("Value error, ")
            if not x["loc"]:  # a check across fields (the model and its resolution): its message says which
                problems.append(msg)
                continue
            got = f" (got {shorten(x['input'])})" if "input" in x and x["type"] != "missing" else ""
            allowed = field_range(task.Params, x["loc"][:1]) if x["type"] == "finite_number" else None
            problems.append(f"{name_of(str(x['loc'][0]))}: {msg}{f', {allowed}' if allowed else ''}{got}")
        raise ConfigError("; ".join(problems)) from None
    config = params.config()
    if "backend" in config:  # what the backend cannot do fails here, not in the middle of a measurement
        refuse_unsupported(config["backend"], config, task.needs, names)
    return task, params


def refuse_unsupported(backend: str, fields: dict, needs: frozenset = frozenset(),
                       names: dict[str, str] | None = None) -> None:
    """A ConfigError naming the option and the reason for everything `backend` cannot do with these fields (tf32
    on a CPU, a capability it lacks): the one message `bench`, `env` and every task command give."""
    from vitbench.backends.base import backend_spec

    problems = backend_spec(backend).problems(fields, needs, cli_setting)

    def where(field: str) -> str:  # a capability the task needs: on --task where the command has one, else
        return option("backend" if field == "task" and "task" not in (names or {}) else field, names)  # --backend

    if problems:
        raise ConfigError("; ".join(f"{where(f)}: {msg}" for f, msg in problems))
