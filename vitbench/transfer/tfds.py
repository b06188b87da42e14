"""The `tfds` source: a prepared TensorFlow Datasets dataset in a local data_dir, read by index with the
tensorflow-datasets library's own `array_record` reader (`builder.as_data_source`, no TensorFlow needed; the
optional extra `vitbench[tfds]`).

Layout (TFDS's own): `DATA_DIR/NAME[/CONFIG]/VERSION/` with `dataset_info.json`, `features.json` and
`NAME-SPLIT.array_record-XXXXX-of-YYYYY` files, as `tfds build NAME --data_dir DATA_DIR --file_format
array_record` (or a builder's `download_and_prepare(file_format="array_record")`) writes them. The image is the
`Image` feature and the label the `ClassLabel` of the dataset's `supervised_keys` (else the one feature of each
kind); the ClassLabel's names are the class names; the `train` and `test` splits are used (a dataset with only
`train` is one pool, split here). A dataset stored as `tfrecord` (TFDS's default) has no index without TensorFlow:
converted once with `tfds convert_format` (the message says how).

Listing reads the records with the image left encoded (`tfds.decode.SkipDecoding`): labels without a decode;
`decode(i)` reads record i and decodes its image bytes as every other source does (vitbench.transfer.pools), so
the same images give the same numbers in every format.

The dataset's metadata is checked before tensorflow-datasets reads any of it (`check_metadata`): TFDS rebuilds
the features from the Python class names written in `features.json` (and in a `dataset_info.json`'s `features`),
importing the module of a name it does not know (`FeatureConnector.cls_from_name`), so a crafted data folder
could run any module on `sys.path`. Only tensorflow-datasets' own feature connectors are accepted, and the name
is that of a prepared dataset in the data_dir (no `namespace:` prefix, which loads a builder from elsewhere,
nor builder arguments).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

from vitbench.errors import ConfigError, clip, shorten
from vitbench.transfer.limits import MAX_CLASSES
from vitbench.transfer.neutral import key_neutral
from vitbench.transfer.pools import CorruptImage, decode_bytes
from vitbench.transfer.raw import Raw, require_path, same_labels

if TYPE_CHECKING:  # config is made from the formats' options (TfdsOptions below): not imported here
    from vitbench.transfer.config import DataConfig


class TfdsOptions(BaseModel):
    """tfds's own options (its row in vitbench.transfer.formats names this model)."""

    # added after trial and upstream cache keys existed, so left out of the dump at its default (key_neutral)
    tfds_name: str | None = key_neutral(description="tfds: the dataset in the --data-path data_dir, "
                                        "NAME[/CONFIG][:VERSION], e.g. cifar10 (default: the only one there).")


LAYOUT = ("a prepared TFDS dataset: DATA_DIR/NAME[/CONFIG]/VERSION/ with dataset_info.json and "
          "NAME-SPLIT.array_record-* files (tfds build NAME --data_dir DATA_DIR --file_format array_record)")
EXTRA = "pip install 'vitbench[tfds]'"  # the optional extra that brings tensorflow-datasets (pyproject.toml)
LIST_CHUNK = 1024  # records read per call while listing labels (memory: this many encoded images)

# A dataset name as tfds.builder parses it (tensorflow_datasets.core.naming._NAME_REG) less what makes it load from
# anywhere but the data_dir's own files: a `namespace:` prefix (huggingface:, a community namespace) and trailing
# builder arguments (`/key=value`, which need the dataset's code). A config of dots only would leave NAME's folder.
DATASET_NAME = re.compile(r"(?P<dataset>[a-zA-Z]\w*)(/(?P<config>[\w+\-.]+))?(:(\d+|\*)(\.(\d+|\*)){2})?")
NAME_FORM = "NAME[/CONFIG][:VERSION] (letters, digits and _; a CONFIG also + - .)"
# The metadata files from which tensorflow-datasets rebuilds the features (naming their classes), in each
# NAME/VERSION/ and NAME/CONFIG/VERSION/ folder; and the feature classes they may name: tensorflow-datasets' own.
METADATA_FILES = ("features.json", "dataset_info.json")
FEATURES_MODULE = "tensorflow_datasets.core.features."
# A real features.json or dataset_info.json is kilobytes (a dataset of 10,000 shards lists 10,000 shard lengths:
# about 100 kB); read whole with json here, as tensorflow-datasets reads it, so bounded.
MAX_METADATA_BYTES = 2**24


def _library():
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise ConfigError(f"dataset 'tfds' needs tensorflow-datasets, an optional dependency: {EXTRA}") from None
    return tfds


def prepared_names(data_dir: Path) -> list[str]:
    """The datasets prepared under `data_dir` (NAME or NAME/CONFIG: the directories holding a VERSION/
    dataset_info.json)."""
    found = {str(info.parent.parent.relative_to(data_dir)) for info in data_dir.glob("*/*/dataset_info.json")}
    found |= {str(info.parent.parent.relative_to(data_dir)) for info in data_dir.glob("*/*/*/dataset_info.json")}
    return sorted(found)


def feature_classes() -> set[str]:
    """The feature classes a dataset's metadata may name: tensorflow-datasets' own connectors, as its registry of
    imported ones holds them (`FeatureConnector._registered_features`, filled as its modules define them: a name
    found there is never imported). Empty, so every dataset refused, if a later version drops the registry."""
    from tensorflow_datasets.core.features import feature

    registered = getattr(feature.FeatureConnector, "_registered_features", None)
    return {n for n in registered or () if isinstance(n, str) and n.startswith(FEATURES_MODULE)}


class _Object(list):
    """A JSON object as its (key, value) pairs, duplicated keys included (json's object_pairs_hook)."""


def _parse(text):
    return json.loads(text, object_pairs_hook=_Object)


def _class_names(doc):
    """Every feature class name tensorflow-datasets could resolve from a parsed metadata file: the values of
    `pythonClassName` at any depth (also `python_class_name`, the proto field's own name, which protobuf's JSON
    parser accepts too), of `type` beside `content` (the legacy form FeatureConnector.from_json reads), and those
    inside string values holding JSON (a `jsonFeature`'s `json`, a legacy `content`), which the features parse."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, _Object):
            keys = {k for k, _ in value}
            for k, v in value:
                if k in ("pythonClassName", "python_class_name") or (k == "type" and "content" in keys):
                    yield v
                stack.append(v)
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
            try:
                stack.append(_parse(value))
            except (ValueError, RecursionError):  # text, not JSON: nothing the features would parse
                pass


def _templates(doc):
    """The shard file templates of a parsed dataset_info.json (`splits[].filepathTemplate`, or the proto field's
    own name), at any depth."""
    stack = [doc]
    while stack:
        value = stack.pop()
        if isinstance(value, _Object):
            for k, v in value:
                if k in ("filepathTemplate", "filepath_template"):
                    yield v
                stack.append(v)
        elif isinstance(value, list):
            stack.extend(value)


def _outside(template) -> bool:
    """Does a shard file template leave its version folder? tensorflow-datasets joins it to that folder
    (naming.ShardedFileTemplate: data_dir / template), so a separator, '..' or an absolute path reads elsewhere."""
    return not isinstance(template, str) or "/" in template or "\\" in template or ".." in template


def _metadata(path: Path):
    """A metadata file parsed (json only), or ConfigError naming it."""
    try:
        if not path.is_file():  # a FIFO would block the read, a folder cannot be read
            raise ConfigError(f"{path}: not a regular file; expected {LAYOUT}")
        with open(path, "rb") as f:
            data = f.read(MAX_METADATA_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({clip(str(e), 200)}); expected {LAYOUT}") from None
    if len(data) > MAX_METADATA_BYTES:
        raise ConfigError(f"{path}: more than {MAX_METADATA_BYTES:,} bytes, not TFDS metadata; expected {LAYOUT}")
    try:
        return _parse(data)
    except (ValueError, RecursionError) as e:
        raise ConfigError(f"{path}: not valid JSON ({clip(str(e), 200)}); expected {LAYOUT}") from None


def check_metadata(data_dir: Path, name: str) -> None:
    """ConfigError unless `name` is a dataset name of NAME_FORM and every metadata file tensorflow-datasets could
    read for it (METADATA_FILES of every version and config under DATA_DIR/NAME) names only tensorflow-datasets'
    own feature classes; it names the file and the class found. Reads the files with json only: nothing named in
    them is imported. Called before each tfds.builder() on a data_dir."""
    m = DATASET_NAME.fullmatch(name)
    if m is None or (m["config"] is not None and not m["config"].strip(".")):
        raise ConfigError(f"{data_dir}: TFDS dataset name {shorten(name)} is not of the form {NAME_FORM}; "
                          "vitbench reads a dataset prepared in the data_dir (no namespace, no builder arguments)")
    allowed = feature_classes()
    root = Path(data_dir) / m["dataset"]
    for path in sorted({p for d in ("*", "*/*") for f in METADATA_FILES for p in root.glob(f"{d}/{f}")}):
        doc = _metadata(path)
        bad = next((t for t in _templates(doc) if _outside(t)), None)
        if bad is not None:
            raise ConfigError(f"{path}: shard file template {shorten(str(bad))} leaves the dataset's folder (a "
                              "file name is expected, e.g. {DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}); "
                              "refused before tensorflow-datasets reads the shards it names")
        for found in _class_names(doc):
            if not isinstance(found, str) or found not in allowed:
                ok = ", ".join(sorted(n.removeprefix(FEATURES_MODULE) for n in allowed)) or "none (no registry)"
                raise ConfigError(f"{path}: feature class {shorten(found)} is not one of tensorflow-datasets' own "
                                  f"feature connectors ({FEATURES_MODULE}{{{clip(ok, 1500)}}}); refused before "
                                  "tensorflow-datasets reads the file, which would import the module it names")


def builder(data_dir: Path, name: str | None):
    """The read-only builder of `name` (NAME, NAME/CONFIG, NAME:VERSION) in `data_dir`; the one dataset there when
    `name` is None. ConfigError naming the data_dir and the datasets found in it otherwise."""
    tfds = _library()
    found = prepared_names(data_dir)
    if name is None:
        if not found:  # naming one cannot help: there is none to name
            raise ConfigError(f"{data_dir}: no prepared TFDS dataset in it (give the data directory the dataset "
                              f"was built into); expected {LAYOUT}")
        if len(found) > 1:
            raise ConfigError(f"{data_dir}: {len(found)} TFDS datasets found ({', '.join(found)}); name one with "
                              f"--tfds-name (study field tfds_name)")
        name = found[0]
    check_metadata(data_dir, name)  # before tensorflow-datasets reads any of it
    try:
        b = tfds.builder(name, data_dir=str(data_dir))
        prepared = b.is_prepared()
    except Exception as e:  # noqa: BLE001 - the library's many lookup errors (DatasetNotFoundError, ...)
        raise ConfigError(f"{data_dir}: no prepared TFDS dataset {name!r} ({type(e).__name__}); prepared there: "
                          f"{', '.join(found) or 'none'}; expected {LAYOUT}") from None
    if not prepared:
        raise ConfigError(f"{data_dir}: TFDS dataset {name!r} is not prepared there (nothing is downloaded); "
                          f"prepared there: {', '.join(found) or 'none'}; expected {LAYOUT}")
    fmt = getattr(b.info.file_format, "value", b.info.file_format)
    if fmt != "array_record":
        raise ConfigError(f"{b.data_dir}: TFDS dataset {name!r} is stored as {fmt}, which cannot be read by index "
                          "without TensorFlow; convert it once (needs tensorflow-cpu): tfds convert_format "
                          f"--dataset_dir={b.data_dir} --out_file_format=array_record")
    return b


def feature_keys(b) -> tuple[str, str, list[str]]:
    """(image feature, label feature, class names): the supervised keys where they are an Image and a
    ClassLabel, else the one top-level feature of each kind."""
    tfds = _library()
    feats = b.info.features
    kinds = {k: type(v) for k, v in feats.items()}
    images = [k for k, t in kinds.items() if issubclass(t, tfds.features.Image)]
    labels = [k for k, t in kinds.items() if issubclass(t, tfds.features.ClassLabel)]
    sup = b.info.supervised_keys
    if isinstance(sup, tuple) and len(sup) >= 2 and sup[0] in images and sup[1] in labels:
        image, label = sup[0], sup[1]
    elif len(images) == 1 and len(labels) == 1:
        image, label = images[0], labels[0]
    else:
        raise ConfigError(f"{b.data_dir}: cannot tell the image and label features (Image: {images or 'none'}, "
                          f"ClassLabel: {labels or 'none'} of {list(kinds)}); vitbench reads one Image and one "
                          "ClassLabel feature (a dataset without labels cannot train or evaluate a classifier)")
    k = feats[label].num_classes
    if not 0 < k <= MAX_CLASSES:  # checked before its names are listed (a ClassLabel of 10**9 would list them all)
        raise ConfigError(f"{b.data_dir}: ClassLabel {label!r} has {k} classes; vitbench reads 1..{MAX_CLASSES}")
    return image, label, list(feats[label].names)


@dataclass
class TfdsPool:
    """The images of one split of a prepared TFDS dataset, addressed by record index."""

    data_dir: str
    name: str  # as tfds.builder takes it (NAME, NAME/CONFIG, NAME:VERSION)
    split: str
    image: str  # the Image feature's key
    files: list[str]  # the split's array_record shards, in order
    ends: np.ndarray  # int64: cumulative record counts of `files` (record i is in the first shard ending past it)
    resident: bool = False
    _source: object = field(default=None, repr=False)  # the library's data source, opened on first use

    def __getstate__(self):  # a worker process opens its own readers
        return {**self.__dict__, "_source": None}

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def source(self):
        if self._source is None:
            tfds = _library()
            check_metadata(Path(self.data_dir), self.name)  # as read() did: a worker reads the files afresh
            b = tfds.builder(self.name, data_dir=self.data_dir)
            self._source = b.as_data_source(split=self.split, decoders={self.image: tfds.decode.SkipDecoding()})
        return self._source

    def origin(self, i: int) -> str:
        s = int(np.searchsorted(self.ends, i, side="right"))
        first = int(self.ends[s - 1]) if s else 0
        return f"{self.files[s]} record {i - first} ({self.split}[{i}], feature {self.image!r})"

    def encoded(self, i: int) -> bytes:
        try:
            data = self.source()[int(i)][self.image]
        except Exception as e:  # noqa: BLE001 - the reader's and the proto parser's errors: an unreadable record
            raise CorruptImage(self.origin(i), f"{type(e).__name__}: {e}") from None
        if not isinstance(data, bytes) or not data:
            raise CorruptImage(self.origin(i), "no image bytes in this record")
        return data

    def decode(self, i: int) -> np.ndarray:
        return decode_bytes(self.encoded(i), self.origin(i))


def _split(b, data_dir: Path, name: str, split: str, image: str, label: str, k: int
           ) -> tuple[TfdsPool, np.ndarray]:
    info = b.info.splits[split]
    files = [str(f) for f in info.filepaths]
    pool = TfdsPool(str(data_dir), name, split, image, files, np.cumsum(info.shard_lengths).astype(np.int64))
    tfds = _library()
    src = b.as_data_source(split=split, decoders={image: tfds.decode.SkipDecoding()})
    labels = np.empty(len(pool), np.int64)
    for start in range(0, len(pool), LIST_CHUNK):
        keys = list(range(start, min(start + LIST_CHUNK, len(pool))))
        try:
            labels[start:start + len(keys)] = [int(r[label]) for r in src.__getitems__(keys)]
        except Exception as e:  # noqa: BLE001 - an unreadable shard, named with the records being read
            raise ConfigError(f"{pool.origin(keys[0])}: cannot read the records from here on "
                              f"({type(e).__name__}: {e}); expected {LAYOUT}") from None
    bad = np.flatnonzero((labels < 0) | (labels >= k))
    if len(bad):
        raise ConfigError(f"{pool.origin(int(bad[0]))}: label {int(labels[bad[0]])} out of range for the {k} "
                          f"ClassLabel names ({len(bad)} records)")
    return pool, labels


def index_tfds(data_dir: Path, name: str | None):
    """(pool, labels, class names, test pool or None, test labels or None) of a prepared dataset."""
    b = builder(data_dir, name)
    name = name or prepared_names(data_dir)[0]
    image, label, names = feature_keys(b)
    splits = list(b.info.splits)
    train = "train" if "train" in splits else (splits[0] if len(splits) == 1 else None)
    if train is None or train == "test":  # a test split alone is not trained on in place of a train split
        raise ConfigError(f"{b.data_dir}: no 'train' split (splits: {splits}); expected {LAYOUT}")
    pool, labels = _split(b, data_dir, name, train, image, label, len(names))
    if "test" not in splits or train == "test":
        return pool, labels, names, None, None
    t_pool, t_labels = _split(b, data_dir, name, "test", image, label, len(names))
    return pool, labels, names, t_pool, t_labels


def read(cfg: DataConfig) -> Raw:
    """The `tfds` format (vitbench.transfer.formats): dataset `tfds_name` of the data_dir `path`."""
    root = require_path(cfg, LAYOUT)
    if not root.is_dir():
        raise ConfigError(f"{cfg.name_of('path')} {str(root)!r} is not a directory; expected {LAYOUT}")
    pool, labels, names, t_pool, t_labels = index_tfds(root, cfg.tfds_name)
    if t_labels is not None:  # a test split of its own holds every class train does, as in every format
        same_labels(np.asarray(labels), np.asarray(t_labels), names, f"{root} (train and test splits)")
    return Raw(pool, labels, names, t_pool, t_labels)
