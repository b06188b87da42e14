"""What every dataset format's reader gives and the checks they share: `Raw` (a source as listed), integer labels
as read, class names of bare integer labels, a required path, the same classes in both splits, and the refusal
of a path that is no file or directory. The formats themselves: vitbench.transfer.formats (the table) and their
modules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vitbench.errors import ConfigError, clip
from vitbench.transfer.limits import MAX_CLASSES
from vitbench.transfer.pools import ArrayPool, Pool, regular_file

if TYPE_CHECKING:
    from vitbench.transfer.config import DataConfig


@dataclass
class Raw:
    """A source as listed: the pool (or train) images (vitbench.transfer.pools: decoded on demand), their labels,
    the class names, and the source's own test split if any. Labels are read without decoding an image."""

    pool: Pool
    labels: np.ndarray
    class_names: list[str]
    test_pool: Pool | None = None
    test_labels: np.ndarray | None = None


def int_labels(values, where: str, layout: str) -> np.ndarray:
    """`values` (a list as unpickled, an array as stored) as int64 labels, or ConfigError naming `where`: labels
    are integers, not booleans, floats or strings (a float label 2.7 would otherwise be truncated to class 2 in
    silence), and fit int64 (a uint64 label past 2**63 - 1 would wrap to a negative number; a Python int past it
    cannot be stored at all)."""
    try:
        y = np.asarray(values)
    except (ValueError, TypeError, OverflowError) as e:
        raise ConfigError(f"{where}: labels are not an array of integers ({clip(str(e), 120)}); "
                          f"expected {layout}") from None
    if y.ndim != 1:
        raise ConfigError(f"{where}: labels must be one integer per image, got shape {y.shape}; expected {layout}")
    if not len(y):  # an empty list reads as float64: no label to refuse (the empty split is refused by name)
        return y.astype(np.int64)
    if y.dtype.kind not in "iu":
        kind = {"b": "booleans", "f": "floats", "U": "strings", "S": "bytes", "O": "mixed or out-of-range values"}
        bad = next((v for v in y.tolist() if type(v) is not int or not -2**63 <= v < 2**63), None)
        raise ConfigError(f"{where}: labels must be integers, got {kind.get(y.dtype.kind, y.dtype.name)} "
                          f"(e.g. {clip(repr(bad), 60)}); expected {layout}")
    if y.dtype == np.uint64 and len(y) and int(y.max()) >= 2**63:
        raise ConfigError(f"{where}: label {int(y.max())} out of range (past 2**63 - 1); expected {layout}")
    return y.astype(np.int64)


def label_names(labels: np.ndarray, where: str, layout: str) -> list[str]:
    """Class names "0".."K-1" of integer labels that name no class (shards, npz, an hf integer column), K =
    the largest label + 1. ConfigError naming `where` for a negative label or one past MAX_CLASSES (a label of
    10**9 would be a class list of 10**9 names), before any list is made."""
    if not len(labels):
        raise ConfigError(f"{where}: no labelled images; expected {layout}")
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= MAX_CLASSES:
        bad = lo if lo < 0 else hi
        raise ConfigError(f"{where}: label {bad} out of range: class indices are 0..K-1 with K at most "
                          f"{MAX_CLASSES}; expected {layout}")
    return [str(c) for c in range(hi + 1)]


def in_memory(images: np.ndarray, labels: np.ndarray, names: list[str], test_images: np.ndarray | None = None,
           test_labels: np.ndarray | None = None) -> Raw:
    """A Raw of in-memory arrays (the bundled and array formats)."""
    return Raw(ArrayPool(images), labels, names, None if test_images is None else ArrayPool(test_images),
               test_labels)


def exists(p: Path, field: str) -> bool:  # field: as the message names it (DataConfig.name_of)
    """Whether a path the user gave exists; ConfigError naming it (clipped) when it cannot even be looked up (a
    name past the file system's length limit, a component that is no directory it can search)."""
    try:
        return p.exists()
    except OSError as e:
        raise ConfigError(f"{field} {clip(str(p), 200)!r} cannot be looked up ({e.strerror or e})") from None


def require_path(cfg: DataConfig, layout: str) -> Path:
    if not cfg.path:
        raise ConfigError(f"{cfg.name_of('path')} is required for dataset {cfg.name!r}; expected {layout}")
    p = Path(cfg.path).expanduser()
    if not exists(p, cfg.name_of("path")):
        raise ConfigError(f"{cfg.name_of('path')} {clip(str(p), 200)!r} does not exist; dataset {cfg.name!r} "
                          f"expects {layout}")
    return p


def same_classes(train: list[str], test: list[str], where: str) -> None:
    """ConfigError unless the test split has exactly the train split's classes (in the same order). Names are
    compared in Unicode's NFC form: a name stored decomposed (NFD, as macOS writes file names) is the same name."""
    import unicodedata

    train, test = ([unicodedata.normalize("NFC", c) for c in names] for names in (train, test))
    if train != test:
        only_train = [c for c in train if c not in test]
        only_test = [c for c in test if c not in train]
        if not only_train and not only_test:
            at = next((i for i, (a, b) in enumerate(zip(train, test)) if a != b), min(len(train), len(test)))
            raise ConfigError(f"{where}: train and test name the same classes in another order or with repeats "
                              f"(train: {len(train)} names, test: {len(test)}; first difference at class {at}: "
                              f"{clip(str(train[at:at + 1]), 100)} in train, {clip(str(test[at:at + 1]), 100)} in "
                              f"test); both splits need the same classes in the same order")
        raise ConfigError(f"{where}: train and test classes differ (only in train: {only_train[:10]}, only in "
                          f"test: {only_test[:10]}); both splits need the same classes")


def no_images(labels: np.ndarray, split: str, where: str, layout: str | None = None) -> None:
    """ConfigError naming `where` when the `split` holds no image (a reader's own check, before its labels are
    used: the largest label of none was a traceback, and a test split of none read as "the classes differ")."""
    if not len(labels):
        raise ConfigError(f"{where}: the {split} split has no images" + (f"; expected {layout}" if layout else ""))


def same_labels(train: np.ndarray, test: np.ndarray, names: list[str], where: str) -> None:
    """`same_classes` for a test split of its own labelled by index (shards, npz, an hf label column): ConfigError
    naming the classes when the test split has no image of a class the train split has (exit 2, as a folder's
    test/ without that class folder). A test class the train split lacks is load_splits' refusal
    (vitbench.transfer.data: no training images, naming the classes to keep), made for every format."""
    no_images(test, "test", where)  # not "the classes differ": the split is empty
    have, got = np.unique(train), np.unique(test)
    if len(np.setdiff1d(have, got)):
        name = lambda c: names[c] if 0 <= c < len(names) else str(c)  # noqa: E731
        same_classes([name(int(c)) for c in have], [name(int(c)) for c in got], where)


def not_special(cfg: DataConfig) -> None:
    """ConfigError for a data path that exists and is neither a directory nor a regular file (a FIFO, socket or
    device: reading it could block for ever); a brace pattern is checked shard by shard."""
    for field in ("path", "test_path"):
        value = getattr(cfg, field)
        if not value or "{" in value:
            continue
        p = Path(value).expanduser()
        if exists(p, cfg.name_of(field)) and not p.is_dir() and not regular_file(p):
            raise ConfigError(f"{cfg.name_of(field)} {clip(str(p), 200)!r} is not a regular file or a directory "
                              "(a FIFO, socket or device)")
