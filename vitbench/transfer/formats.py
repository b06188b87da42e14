"""The dataset formats vitbench reads: one declaration each, the only list of them.

A format is a reader, `read(cfg: DataConfig) -> Raw` (vitbench.transfer.raw.Raw: its pool, labels, class names
and its own test split, if any) in its own module, and one `Format` row here saying which of DataConfig's fields
it reads. Everything else is derived from this table: `config.DatasetName` (the names a config, a study field and
`--data` accept), which formats take `path` / `test_path`, the error for an option given to a format that does
not read it, the downstream study fields of its options (vitbench.tasks.upstream.Downstream), and
`sources.read_source` (a lookup, not a branch per format). The reader is named by a string and imported
only when the format is read, so listing the formats never imports pyarrow or tensorflow-datasets.

Adding a format with its own option touches three files: its module (`read`), its row here, and its option's
field in `transfer/config.py::DataConfig` (docs/architecture.md, "Where an addition goes").

This module imports nothing from vitbench: config.py reads it when it is imported.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """One dataset format.

    name: what `DataConfig.name` (`--data`, a study's `dataset`) says.
    reader: 'module:function' of its reader, imported when it is read.
    path: read from a local path (`DataConfig.path`); False: it ships with the code.
    test_path: may take its test split from a separate path (`DataConfig.test_path`).
    options: DataConfig fields only this format (and any other format listing them) reads; a value other than
        the field's default given to another format is refused, naming the formats that read it.
    """

    name: str
    reader: str
    path: bool = True
    test_path: bool = False
    options: tuple[str, ...] = ()


_SOURCES = "vitbench.transfer.sources:read_"  # the formats that need no module of their own
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("digits", _SOURCES + "digits", path=False),  # the first: DataConfig's default
    Format("synthetic", _SOURCES + "synthetic", path=False,
           options=("synthetic_images", "synthetic_classes", "synthetic_size")),
    Format("folder", _SOURCES + "folder"),
    Format("webdataset", "vitbench.transfer.shards:read", test_path=True),
    Format("hf", "vitbench.transfer.hf:read", test_path=True, options=("image_column", "label_column")),
    Format("tfds", "vitbench.transfer.tfds:read", options=("tfds_name",)),
    Format("cifar10", _SOURCES + "cifar"),
    Format("cifar100", _SOURCES + "cifar"),
    Format("npz", _SOURCES + "npz"),
)}


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
