"""The `hf` source: a Hugging Face `datasets` dataset on local disk, read with pyarrow (already a dependency; the
`datasets` package itself is not needed).

Layouts (`datasets`' own): a parquet folder (`Dataset.to_parquet`, the Hub's `data/train-*.parquet`,
`test-*.parquet`, or `train/*.parquet`), or a `save_to_disk` directory (`data-*.arrow` + `state.json`; a
DatasetDict: `dataset_dict.json` + one such directory per split). The image column is the `Image` feature
({bytes, path} structs, encoded PNG/JPEG bytes), the label column the `ClassLabel` (its names become the class
names) or the one integer column; `image_column` / `label_column` name them when the features do not.

Splits are read by name: `train` and `test` (none: test_fraction of train, split by vitbench.transfer.data); any
other (`validation`, the Hub's common third split) is not read, with a warning (the val split is val_fraction of
train, as for every format). An Image value without bytes is read from its `path`, a relative one from the
directory of the parquet or arrow file holding it.

Listing reads the label column only; `decode(i)` reads the one row group (parquet) or record batch (arrow)
holding image i, and keeps it while the next index falls in it (sequential passes read each once).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from vitbench.errors import ConfigError, VitbenchWarning, clip, shorten
from vitbench.transfer.limits import MAX_CLASSES
from vitbench.transfer.pools import CorruptImage, decode_bytes, regular_file
from vitbench.transfer.raw import Raw, exists, int_labels, label_names, require_path, same_classes, same_labels

if TYPE_CHECKING:  # config is made from the formats' options (HfOptions below): not imported here
    from vitbench.transfer.config import DataConfig


class HfOptions(BaseModel):
    """hf's own options (its row in vitbench.transfer.formats names this model)."""

    image_column: str | None = Field(None, description="hf: the image column (default: inferred).")
    label_column: str | None = Field(None, description="hf: the label column (default: inferred).")


LAYOUT = ("a Hugging Face datasets directory: parquet files (data/train-*.parquet + data/test-*.parquet, or "
          "train/*.parquet) or a save_to_disk directory (data-*.arrow + state.json, or dataset_dict.json + one "
          "directory per split), with an Image column and a ClassLabel or integer label column")
LABEL_NAMES = ("label", "labels", "fine_label", "target")  # integer columns taken as the label when no ClassLabel


def _parquet_split(files: list[Path], split: str) -> list[Path]:
    return [f for f in files if f.name.startswith(split) or f.parent.name == split]


def read_json(source: Path | str, want: type, what: str):
    """The JSON document of a metadata file or text (`datasets`' dataset_dict.json, dataset_info.json, a schema's
    metadata) as `want` (dict or list); ConfigError naming it (`what`) and what is wrong with it otherwise."""
    try:
        doc = json.loads(source.read_text(encoding="utf-8") if isinstance(source, Path) else source)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        raise ConfigError(f"{what}: not readable JSON ({type(e).__name__}: {str(e)[:120]}); expected {LAYOUT}") \
            from None
    if not isinstance(doc, want):
        raise ConfigError(f"{what}: expected a JSON {want.__name__}, got {type(doc).__name__}; expected {LAYOUT}")
    return doc


def _regular(files: list[Path]) -> list[Path]:
    """`files`, each a regular file; ConfigError naming one that is not (a FIFO would block pyarrow's read)."""
    odd = [f for f in files if not regular_file(f)]
    if odd:
        raise ConfigError(f"{odd[0]}: not a regular file (a directory, FIFO, socket or device); expected {LAYOUT}")
    return files


READ_SPLITS = ("train", "test")


def _not_read(where: Path, what: str, val_rule: str) -> None:
    """Warn that `what` (splits or files of `where` other than train and test) is not read."""
    warnings.warn(f"{where}: {what} not read: hf reads the train and test splits by name (no test split: "
                  f"test_fraction of train); the val split is {val_rule} of train", VitbenchWarning, stacklevel=3)


def split_files(path: Path, val_rule: str = "val_fraction") -> dict[str, list[Path]]:
    """{'train': files, 'test': files} (or {'pool': files}) of a dataset directory or file; a split of another name
    (`validation`) is left out with a warning naming it and the rule for val (`val_rule`: how the user names
    val_fraction, and its value). A split that a dataset_dict.json declares and whose directory holds no .arrow
    file, a malformed dataset_dict.json, and test parquet files without train ones are ConfigErrors naming the
    file: never another split in its place. Parquet files are pooled only when none is a train or test file."""
    if path.is_file():
        return {"pool": [path]}
    if (path / "dataset_dict.json").is_file():
        meta = path / "dataset_dict.json"
        splits = read_json(meta, dict, str(meta)).get("splits", [])
        if not isinstance(splits, list) or not all(isinstance(s, str) for s in splits):
            raise ConfigError(f"{meta}: 'splits' must be a list of split names, got {shorten(splits)}; expected "
                              f"{LAYOUT}")
        out = {s: _regular(sorted((path / s).glob("*.arrow"))) for s in splits if s in READ_SPLITS}
        other = [s for s in splits if s not in READ_SPLITS]
        if other and "train" in out:
            _not_read(meta, f"split{'s' * (len(other) > 1)} {shorten(other)}", val_rule)
        empty = [s for s, files in out.items() if not files]
        if empty:
            raise ConfigError(f"{path / empty[0]}: split {empty[0]!r} is declared in {meta.name} but has no "
                              f".arrow files; expected {LAYOUT}")
        return out
    arrow = _regular(sorted(path.glob("*.arrow")))
    if arrow:
        return {"pool": arrow}
    parquet = _regular(sorted(path.rglob("*.parquet")))
    if not parquet:
        raise ConfigError(f"{path}: no .parquet or .arrow files; expected {LAYOUT}")
    train, test = _parquet_split(parquet, "train"), _parquet_split(parquet, "test")
    if test and not train:  # the test files would join the pool and be trained on
        raise ConfigError(f"{test[0]}: test parquet files but no train ones in {path}; expected {LAYOUT}")
    if not train:  # no split names: one pool
        return {"pool": parquet}
    other = [f for f in parquet if f not in train and f not in test]  # validation-*.parquet: never trained on
    if other:
        more = f" and {len(other) - 1} more" if len(other) > 1 else ""
        _not_read(path, f"{len(other)} parquet file{'s' * (len(other) > 1)} of other splits ("
                  f"{clip(str(other[0].relative_to(path)), 200)}{more})", val_rule)
    return {"train": train, "test": test}


def _schema(f: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if f.suffix == ".parquet":
            return pq.read_schema(f)
        with pa.memory_map(str(f)) as src:
            return pa.ipc.open_stream(src).schema
    except (pa.ArrowInvalid, OSError) as e:
        raise ConfigError(f"{f}: not a readable {f.suffix} file ({e}); expected {LAYOUT}") from None


def _features(f: Path, schema) -> dict:
    """The `datasets` features: from the schema's 'huggingface' metadata, else the directory's
    dataset_info.json; {} when neither says."""
    meta = (schema.metadata or {}).get(b"huggingface")
    if meta:
        try:
            text = meta.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{f}: its 'huggingface' schema metadata is not UTF-8; expected {LAYOUT}") from None
        info = read_json(text, dict, f"{f} (its 'huggingface' schema metadata)").get("info", {})
        feats, where = (info.get("features") if isinstance(info, dict) else None), f"{f} 'huggingface' metadata"
    else:
        path = f.parent / "dataset_info.json"
        if not path.is_file():
            return {}
        feats, where = read_json(path, dict, str(path)).get("features"), str(path)
    feats = feats or {}
    if not isinstance(feats, dict) or not all(isinstance(v, dict) for v in feats.values()):
        raise ConfigError(f"{where}: 'features' must map column names to feature objects, got {shorten(feats)}; "
                          f"expected {LAYOUT}")
    return feats


def columns(f: Path, image_column: str | None, label_column: str | None) -> tuple[str, str, list[str] | None]:
    """(image column, label column, class names or None), inferred from the features where not given."""
    import pyarrow as pa

    schema = _schema(f)
    feats = _features(f, schema)
    names = schema.names
    for given, what in ((image_column, "--image-column"), (label_column, "--label-column")):
        if given is not None and given not in names:
            raise ConfigError(f"{f}: {what} {given!r} is not a column; columns: {names}")
    images = [c for c in names if feats.get(c, {}).get("_type") == "Image"] or \
        [c for c in names if pa.types.is_struct(schema.field(c).type)
         and schema.field(c).type.get_field_index("bytes") >= 0]
    classes = [c for c in names if feats.get(c, {}).get("_type") == "ClassLabel"]
    ints = [c for c in names if pa.types.is_integer(schema.field(c).type)]
    labels = classes or [c for c in ints if c in LABEL_NAMES] or ints
    image = image_column or (images[0] if len(images) == 1 else None)
    label = label_column or (labels[0] if len(labels) == 1 else None)
    if image is None:
        raise ConfigError(f"{f}: cannot tell the image column ({images or 'none'} of {names}); name it with "
                          "--image-column (study field data.image_column)")
    if label is None:
        raise ConfigError(f"{f}: cannot tell the label column ({labels or 'none'} of {names}); name it with "
                          "--label-column (study field data.label_column); a dataset without labels cannot "
                          "train or evaluate a classifier")
    names = feats.get(label, {}).get("names")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)
                              or not 0 < len(names) <= MAX_CLASSES):
        raise ConfigError(f"{f}: the ClassLabel names of {label!r} must be a list of 1..{MAX_CLASSES} strings, "
                          f"got {shorten(names)}; expected {LAYOUT}")
    return image, label, names


def _chunks(f: Path) -> list[int]:
    """Rows per row group (parquet) or record batch (arrow) of `f`, in order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if f.suffix == ".parquet":
        md = pq.ParquetFile(f).metadata
        return [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    with pa.memory_map(str(f)) as src:
        return [b.num_rows for b in pa.ipc.open_stream(src)]


def _read_chunk(f: str, chunk: int, column: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    if f.endswith(".parquet"):
        return pq.ParquetFile(f).read_row_group(chunk, columns=[column]).column(0)
    with pa.memory_map(f) as src:
        for j, b in enumerate(pa.ipc.open_stream(src)):
            if j == chunk:
                return pa.chunked_array([b.column(b.schema.get_field_index(column))])
    raise IndexError(chunk)


@dataclass
class TablePool:
    """Images in an Image column, addressed by (file, chunk, row in chunk)."""

    files: list[str]
    column: str
    file: np.ndarray  # int32
    chunk: np.ndarray  # int32
    row: np.ndarray  # int32
    resident: bool = False
    _held: tuple = field(default=(), repr=False)  # ((file, chunk), column values) of the last chunk read

    def __getstate__(self):  # worker processes read their own chunks
        return {**self.__dict__, "_held": ()}

    def __len__(self) -> int:
        return len(self.file)

    def origin(self, i: int) -> str:
        return f"{self.files[self.file[i]]} row {int(self.row[i])} of chunk {int(self.chunk[i])} ({self.column})"

    def decode(self, i: int) -> np.ndarray:
        return decode_bytes(self.encoded(i), self.origin(i))

    def encoded(self, i: int) -> bytes | Path:
        where = (int(self.file[i]), int(self.chunk[i]))
        if not self._held or self._held[0] != where:
            try:
                self._held = (where, _read_chunk(self.files[where[0]], where[1], self.column))
            except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
                raise CorruptImage(self.origin(i), str(e)) from None
        value = self._held[1][int(self.row[i])].as_py()
        data = value.get("bytes") if isinstance(value, dict) else value
        if not data and isinstance(value, dict) and value.get("path"):  # relative: to the file holding the row
            return Path(self.files[where[0]]).parent / value["path"]
        if not isinstance(data, bytes):
            raise CorruptImage(self.origin(i), "no image bytes in this row")
        return data


def index_table(files: list[Path], image_column: str | None, label_column: str | None
                ) -> tuple[TablePool, np.ndarray, list[str] | None]:
    """(pool, labels, class names or None) of `files` (one split)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    image, label, names = columns(files[0], image_column, label_column)
    fi, ch, rw, labels = [], [], [], []
    for k, f in enumerate(files):
        theirs = names if k == 0 else columns(f, image, label)[2]
        if theirs != names:  # its labels index its own names: read by the first file's, every label moved
            raise ConfigError(f"{f}: its ClassLabel names of {label!r} ({shorten(theirs)}) are not those of "
                              f"{files[0].name} ({shorten(names)}), the same split's first file: its labels "
                              f"would name other classes; expected {LAYOUT}")
        try:
            if f.suffix == ".parquet":
                y = pq.read_table(f, columns=[label]).column(0)
            else:
                with pa.memory_map(str(f)) as src:
                    y = pa.ipc.open_stream(src).read_all().column(label)
            nulls, y = y.null_count, np.asarray(y.to_numpy(zero_copy_only=False))
        except (pa.ArrowInvalid, KeyError, OSError) as e:
            raise ConfigError(f"{f}: cannot read the label column {label!r} ({e}); expected {LAYOUT}") from None
        if nulls:  # arrow gives an int column with nulls as float64 with NaN: say what is wrong
            raise ConfigError(f"{f}: label column {label!r} has {nulls} empty (null) labels; expected {LAYOUT}")
        labels.append(int_labels(y, f"{f} (label column {label!r})", LAYOUT))
        for c, n in enumerate(_chunks(f)):
            fi += [k] * n
            ch += [c] * n
            rw += list(range(n))
    y = np.concatenate(labels)
    pool = TablePool([str(f) for f in files], image, np.asarray(fi, np.int32), np.asarray(ch, np.int32),
                     np.asarray(rw, np.int32))
    bad = np.flatnonzero((y < 0) | (y >= len(names) if names else y < 0))
    if len(bad):
        raise ConfigError(f"{pool.origin(int(bad[0]))}: label {int(y[bad[0]])} out of range"
                          + (f" for the {len(names)} ClassLabel names" if names else " (negative)")
                          + f" ({len(bad)} rows)")
    return pool, y, names


def read(cfg: DataConfig) -> Raw:
    """The `hf` format (vitbench.transfer.formats): its train split, and its test split (or test_path's) if any."""
    root = require_path(cfg, LAYOUT)
    val_rule = f"{cfg.name_of('val_fraction')} ({cfg.val_fraction:g})"
    parts = split_files(root, val_rule)
    if cfg.test_path:
        test_root = Path(cfg.test_path).expanduser()
        if not exists(test_root, cfg.name_of("test_path")):
            raise ConfigError(f"{cfg.name_of('test_path')} {clip(str(test_root), 200)!r} does not exist; expected "
                              f"{LAYOUT}")
        test_parts = split_files(test_root, val_rule)
        test = test_parts.get("test") or test_parts.get("pool")
        if not test:  # a train split alone there: not a test split
            raise ConfigError(f"{cfg.name_of('test_path')} {str(test_root)!r} holds no test split (splits there: "
                              f"{', '.join(test_parts) or 'none'}); expected {LAYOUT}")
        parts = {"train": parts.get("train") or parts.get("pool"), "test": test}
    train = parts.get("train") or parts.get("pool")
    if not train:
        raise ConfigError(f"{root}: no train split found; expected {LAYOUT}")
    pool, labels, names = index_table(train, cfg.image_column, cfg.label_column)
    if names is None:
        names = label_names(labels, f"{train[0]} (the train split's label column)", LAYOUT)
    if not parts.get("test"):
        return Raw(pool, labels, names)
    t_pool, t_labels, t_names = index_table(parts["test"], cfg.image_column, cfg.label_column)
    if t_names is not None:
        same_classes(names, t_names, str(root))
    bad = np.flatnonzero(t_labels >= len(names))
    if len(bad):
        raise ConfigError(f"{t_pool.origin(int(bad[0]))}: label {int(t_labels[bad[0]])} out of range: the train "
                          f"split has classes 0..{len(names) - 1}")
    same_labels(labels, t_labels, names, f"{root} (train) and {parts['test'][0]}"
                + (f" and {len(parts['test']) - 1} more (test)" if len(parts["test"]) > 1 else " (test)"))
    return Raw(pool, labels, names, t_pool, t_labels)
