"""The dataset formats vitbench reads: one declaration each, the only list of them.

A format is a reader, `read(cfg: DataConfig) -> Raw` (vitbench.transfer.raw.Raw: its pool, labels, class names
and its own test split, if any) in its own module, and one `Format` row here saying which of DataConfig's fields
it reads. Everything else is derived from this table: `config.DatasetName` (the names a config, a study field and
`--data` accept), which formats take `path` / `test_path`, the error for an option given to a format that does
not read it, the downstream study fields of its options (vitbench.tasks.upstream.Downstream), and
`sources.read_source` (a lookup, not a branch per format). The reader is named by a string and imported
only when the format is read, so listing the formats never imports pyarrow or tensorflow-datasets.

A format's own options are its own small model, declared in its reader's module beside its reader
(`HfOptions` in transfer/hf.py, `TfdsOptions` in transfer/tfds.py, `SyntheticOptions` in transfer/sources.py) and
named by its row here as `"module:Class"` (`Format.own`), imported when the table's options are first asked for
(config.py does, to make DataConfig); DataConfig takes their fields (dumped flat, as every other data setting),
so adding a format with its own option touches two files: its module (its options model and `read`) and its row
here (docs/architecture.md, "Where an addition goes"). A reader's module imports no vitbench.transfer.config at
its top (DataConfig is made from its options model: the bounds it needs are in the leaf transfer/limits.py, the
config type only under TYPE_CHECKING), so importing any of them first makes no cycle.

A format written outside vitbench is one module holding its row, its options model and its reader, named by an
entry point of the group `vitbench.formats` (ENTRY_POINT_GROUP): read when this module is imported (the full
entry-point scan only when some distribution on sys.path names the group: `group_declared`), so that module
imports vitbench's data modules (raw, config) inside its reader, not at its top.

This module imports nothing from vitbench at its top (the leaf `errors` inside a function): config.py reads it
when it is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class Format:
    """One dataset format.

    name: what `DataConfig.name` (`--data`, a study's `dataset`) says.
    reader: 'module:function' of its reader, imported when it is read.
    path: read from a local path (`DataConfig.path`); False: it ships with the code.
    test_path: may take its test split from a separate path (`DataConfig.test_path`).
    own: its own options, a pydantic model whose fields DataConfig takes (named after the format, typed, bounded
        and described: a description is its flag's help), or 'module:Class' of one (imported when first asked
        for: a reader's module declares its format's model); a value other than a field's default given to
        another format is refused, naming the formats that read it.
    generated: its images are made by the code (noise), not read from pictures: a row measured on them says so.
    """

    name: str
    reader: str
    path: bool = True
    test_path: bool = False
    own: type[BaseModel] | str | None = None
    generated: bool = False

    def own_model(self) -> type[BaseModel] | None:
        """Its options model (`own` imported where it names one by 'module:Class')."""
        if not isinstance(self.own, str):
            return self.own
        import importlib

        module, _, name = self.own.partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def options(self) -> tuple[str, ...]:
        """The names of its own options (DataConfig fields)."""
        own = self.own_model()
        return tuple(own.model_fields) if own is not None else ()


_SOURCES = "vitbench.transfer.sources:read_"  # the formats that need no module of their own
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("digits", _SOURCES + "digits", path=False),  # the first: DataConfig's default
    Format("synthetic", _SOURCES + "synthetic", path=False, own="vitbench.transfer.sources:SyntheticOptions",
           generated=True),
    Format("folder", _SOURCES + "folder"),
    Format("webdataset", "vitbench.transfer.shards:read", test_path=True),
    Format("hf", "vitbench.transfer.hf:read", test_path=True, own="vitbench.transfer.hf:HfOptions"),
    Format("tfds", "vitbench.transfer.tfds:read", own="vitbench.transfer.tfds:TfdsOptions"),
    Format("cifar10", _SOURCES + "cifar"),
    Format("cifar100", _SOURCES + "cifar"),
    Format("npz", _SOURCES + "npz"),
)}


# Formats written outside vitbench: each entry point of this group names a Format row ('module:ROW'), added to the
# table when it is first imported (DataConfig, the study fields and the flags are made from the table then)
ENTRY_POINT_GROUP = "vitbench.formats"


def group_declared(path: list[str] | None = None) -> bool:
    """Whether some distribution on `path` (sys.path) may declare an entry point of ENTRY_POINT_GROUP: its metadata
    directory (NAME.dist-info or NAME.egg-info, as pip, uv and editable installs write them) holds an
    entry_points.txt that names the group. A look at the few such files (this project's venv: 171 distributions,
    40 with entry points; 2.9 ms median at load 8 on 2 cores) where the full scan (importlib.metadata's
    entry_points, every distribution's parsed) took 21 ms median (the module's own import, ~25 ms more, is paid
    by pydantic's plug-in loader anyway): the full scan runs only when this says yes. A distribution that only a
    custom finder or a zipped egg provides is not seen here."""
    import os
    import sys

    for entry in sys.path if path is None else path:
        try:
            listing = os.scandir(entry or ".")
        except OSError:  # a zip (the standard library's), a path hook, a missing directory: no metadata there
            continue
        with listing:
            for d in listing:
                if not d.name.endswith((".dist-info", ".egg-info")):
                    continue
                try:
                    with open(os.path.join(d.path, "entry_points.txt"), encoding="utf-8", errors="replace") as f:
                        if ENTRY_POINT_GROUP in f.read():  # a false yes only costs the full scan
                            return True
                except OSError:  # no entry points: the common case
                    continue
    return False


def _add_outside_formats() -> None:
    if not group_declared():
        return
    from importlib.metadata import entry_points

    from vitbench.errors import PluginError

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            row = ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plug-in: say which and why
            raise PluginError(f"dataset format {ep.name} (entry point {ep.value}) failed to import: "
                              f"{type(e).__name__}: {str(e)[:300]}") from None
        if not isinstance(row, Format) or row.name in FORMATS:
            raise PluginError(f"dataset format {ep.name} (entry point {ep.value}): "
                              + ("not a Format row" if not isinstance(row, Format) else
                                 f"the name {row.name!r} is taken"))
        FORMATS[row.name] = row


def format_names() -> tuple[str, ...]:
    return tuple(FORMATS)


def with_path() -> tuple[str, ...]:
    """The formats read from a local path."""
    return tuple(n for n, f in FORMATS.items() if f.path)


def with_test_path() -> tuple[str, ...]:
    """The formats that may take a separate test path."""
    return tuple(n for n, f in FORMATS.items() if f.test_path)


def readers_of(option: str) -> tuple[str, ...]:
    """The formats that read DataConfig field `option` (empty: every format reads it, or none declares it)."""
    return tuple(n for n, f in FORMATS.items() if option in f.options)


def format_options() -> tuple[str, ...]:
    """Every field some format declares as its own (each once, in table order)."""
    return tuple(dict.fromkeys(o for f in FORMATS.values() for o in f.options))


def options_fields() -> dict[str, Any]:
    """Every format's own options as DataConfig field definitions (create_model's (type, FieldInfo)), each once."""
    out: dict[str, Any] = {}
    for f in FORMATS.values():
        own = f.own_model()
        for name, info in (own.model_fields.items() if own is not None else ()):
            out.setdefault(name, (info.annotation, info))
    return out


_add_outside_formats()  # last: an outside row may use this module's names
