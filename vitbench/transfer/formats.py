"""The dataset formats vitbench reads: one declaration each, the only list of them.

A format is a reader, `read(cfg: DataConfig) -> Raw` (vitbench.transfer.raw.Raw: its pool, labels, class names
and its own test split, if any) in its own module, and one `Format` row here saying which of DataConfig's fields
it reads. Everything else is derived from this table: `config.DatasetName` (the names a config, a study field and
`--data` accept), which formats take `path` / `test_path`, the error for an option given to a format that does
not read it, the downstream study fields of its options (vitbench.tasks.upstream.Downstream), and
`sources.read_source` (a lookup, not a branch per format). The reader is named by a string and imported
only when the format is read, so listing the formats never imports pyarrow or tensorflow-datasets.

A format's own options are its own small model, declared here beside its row (`Format.own`: `HfOptions`,
`TfdsOptions`, `SyntheticOptions`); DataConfig takes their fields (dumped flat, as every other data setting),
so adding a format with its own option touches two files: its module (`read`) and its row here with its options
model (docs/architecture.md, "Where an addition goes").

A format written outside vitbench is one module holding its row, its options model and its reader, named by an
entry point of the group `vitbench.formats` (ENTRY_POINT_GROUP): read when this module is imported, so that
module imports vitbench's data modules (raw, config) inside its reader, not at its top.

This module imports nothing from vitbench but the leaves `neutral` (key_neutral) and `errors`: config.py reads
it when it is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from vitbench.transfer.neutral import key_neutral


@dataclass(frozen=True)
class Format:
    """One dataset format.

    name: what `DataConfig.name` (`--data`, a study's `dataset`) says.
    reader: 'module:function' of its reader, imported when it is read.
    path: read from a local path (`DataConfig.path`); False: it ships with the code.
    test_path: may take its test split from a separate path (`DataConfig.test_path`).
    own: its own options, a pydantic model whose fields DataConfig takes (named after the format, typed, bounded
        and described: a description is its flag's help); a value other than a field's default given to another
        format is refused, naming the formats that read it.
    """

    name: str
    reader: str
    path: bool = True
    test_path: bool = False
    own: type[BaseModel] | None = None

    @property
    def options(self) -> tuple[str, ...]:
        """The names of its own options (DataConfig fields)."""
        return tuple(self.own.model_fields) if self.own is not None else ()


class SyntheticOptions(BaseModel):
    synthetic_images: int = Field(600, ge=10, description="synthetic: images generated.")
    synthetic_classes: int = Field(10, ge=2, description="synthetic: classes (one pattern each).")
    synthetic_size: int = Field(16, ge=2, description="synthetic: image side in pixels.")


class HfOptions(BaseModel):
    image_column: str | None = Field(None, description="hf: the image column (default: inferred).")
    label_column: str | None = Field(None, description="hf: the label column (default: inferred).")


class TfdsOptions(BaseModel):
    # added after trial and upstream cache keys existed, so left out of the dump at its default (key_neutral)
    tfds_name: str | None = key_neutral(description="tfds: the dataset in the --data-path data_dir, "
                                        "NAME[/CONFIG][:VERSION], e.g. cifar10 (default: the only one there).")


_SOURCES = "vitbench.transfer.sources:read_"  # the formats that need no module of their own
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("digits", _SOURCES + "digits", path=False),  # the first: DataConfig's default
    Format("synthetic", _SOURCES + "synthetic", path=False, own=SyntheticOptions),
    Format("folder", _SOURCES + "folder"),
    Format("webdataset", "vitbench.transfer.shards:read", test_path=True),
    Format("hf", "vitbench.transfer.hf:read", test_path=True, own=HfOptions),
    Format("tfds", "vitbench.transfer.tfds:read", own=TfdsOptions),
    Format("cifar10", _SOURCES + "cifar"),
    Format("cifar100", _SOURCES + "cifar"),
    Format("npz", _SOURCES + "npz"),
)}


# Formats written outside vitbench: each entry point of this group names a Format row ('module:ROW'), added to the
# table when it is first imported (DataConfig, the study fields and the flags are made from the table then)
ENTRY_POINT_GROUP = "vitbench.formats"


def _add_outside_formats() -> None:
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
        for name, info in (f.own.model_fields.items() if f.own is not None else ()):
            out.setdefault(name, (info.annotation, info))
    return out


_add_outside_formats()  # last: an outside row may use this module's names
