"""The image sources that need no module of their own (vitbench.transfer.formats lists every format), all from
local files (nothing is downloaded), and `read_source`, which reads any format by looking it up there. Each gives
the images at their stored size (uint8 in [0, 255] or float32 in [0, 1], NHWC), int64 labels and class names
(vitbench.transfer.raw.Raw); vitbench.transfer.data splits them.

- `digits`   scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes): the offline default.
- `synthetic` class-conditional noisy patterns, for speed runs and tests only (no real-world meaning).
- `folder`   `root/<class>/*.png|jpg|jpeg|webp|bmp|tif|tiff|gif`, or `root/train/<class>/...` +
             `root/test/<class>/...`; class names in NFC, sorted by code point; hidden files skipped, nothing
             read recursively, files of other suffixes, sub-folders and a `val/` beside `train/` left out with a
             warning.
- `cifar10` / `cifar100`  the CIFAR python-pickle layout (`data_batch_1..5` + `test_batch`, or `train` +
             `test`), read with a restricted unpickler (vitbench.transfer.safe_pickle).
- `npz`      `x_train, y_train, x_test, y_test` or `x, y` arrays, read with `allow_pickle=False`.

In their own modules: `webdataset` (tar shards, vitbench.transfer.shards), `hf` (a Hugging Face datasets
directory, vitbench.transfer.hf), `tfds` (a prepared TFDS dataset, vitbench.transfer.tfds).
"""

from __future__ import annotations

import importlib
import unicodedata
import warnings
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel, Field

from vitbench.errors import ConfigError, UnsafeFileError, VitbenchWarning, clip, shorten
from vitbench.transfer.limits import MAX_CLASSES
from vitbench.transfer.pools import FilePool
from vitbench.transfer.preprocess import resize_weights
from vitbench.transfer.raw import (Raw, in_memory, int_labels, label_names, no_images, not_special,
                                  require_path, same_classes, same_labels)

if TYPE_CHECKING:  # config is made from the formats' options (SyntheticOptions below): not imported here
    from vitbench.transfer.config import DataConfig

# The image formats a folder holds: those PIL decodes without a plug-in (a GIF or multi-page TIFF: its first
# frame), matched case-blind. Any other file is left out of the listing and counted in a warning (`_Unread`).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")


def read_digits(cfg: DataConfig) -> Raw:
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (d.images.astype(np.float32) / 16.0)[..., None]  # 0..16 grey levels -> [0, 1], (N, 8, 8, 1)
    return in_memory(images, d.target.astype(np.int64), [str(t) for t in d.target_names])


class SyntheticOptions(BaseModel):
    """synthetic's own options (its row in vitbench.transfer.formats names this model)."""

    synthetic_images: int = Field(600, ge=10, description="synthetic: images generated.")
    synthetic_classes: int = Field(10, ge=2, description="synthetic: classes (one pattern each).")
    synthetic_size: int = Field(16, ge=2, description="synthetic: image side in pixels.")


def read_synthetic(cfg: DataConfig) -> Raw:
    """Each class: a fixed random low-frequency pattern; images = pattern + noise. Learnable, meaningless."""
    rng = np.random.default_rng(12345)  # the classes' patterns do not depend on the split seed
    k, s, n = cfg.synthetic_classes, cfg.synthetic_size, cfg.synthetic_images
    coarse = rng.uniform(0, 1, size=(k, 4, 4, 3)).astype(np.float32)
    up = resize_weights(4, s).astype(np.float32)
    patterns = np.einsum("ih,khwc,jw->kijc", up, coarse, up)
    labels = np.arange(n) % k
    noise = np.random.default_rng(54321).normal(0, 0.15, size=(n, s, s, 3)).astype(np.float32)
    images = np.clip(patterns[labels] + noise, 0, 1).astype(np.float32)
    return in_memory(images, labels.astype(np.int64), [f"class{i}" for i in range(k)])


_FOLDER_LAYOUT = ("a directory root/<class>/*.png|jpg|jpeg|webp|bmp|tif|tiff|gif (or root/train/<class>/..., "
                  "root/test/<class>/...)")
_EXAMPLES = 3  # files or folders a warning names (its counts cover the rest)


@dataclass
class _Unread:
    """What a folder listing leaves out and says once (`warn`): files whose suffix is no image's (counted by
    suffix, the first few named) and sub-folders of class folders (nothing is read recursively). Hidden files
    and folders (a name starting with '.': .DS_Store, macOS's ._ AppleDouble files) are skipped unsaid."""

    suffixes: Counter = field(default_factory=Counter)
    files: list[str] = field(default_factory=list)  # the first _EXAMPLES
    dirs: list[str] = field(default_factory=list)  # the first _EXAMPLES
    n_dirs: int = 0

    def file(self, f: Path) -> None:
        self.suffixes[f.suffix.lower() or "(no suffix)"] += 1
        if len(self.files) < _EXAMPLES:
            self.files.append(str(f))

    def dir(self, d: Path) -> None:
        self.n_dirs += 1
        if len(self.dirs) < _EXAMPLES:
            self.dirs.append(str(d))

    def counts(self) -> str:
        n = sum(self.suffixes.values())
        top = ", ".join(f"{s} {k}" for s, k in self.suffixes.most_common(5))
        return f"{n} file{'s' * (n != 1)} ({top}{', ...' if len(self.suffixes) > 5 else ''})"

    def warn(self, root: Path) -> None:
        if self.suffixes:
            more = " ..." if sum(self.suffixes.values()) > len(self.files) else ""
            warnings.warn(f"{root}: {self.counts()} not read: not an image suffix (read: "
                          f"{', '.join(IMAGE_SUFFIXES)}, any case); e.g. {', '.join(self.files)}{more}",
                          VitbenchWarning, stacklevel=3)
        if self.n_dirs:
            more = " ..." if self.n_dirs > len(self.dirs) else ""
            warnings.warn(f"{root}: {self.n_dirs} sub-folder{'s' * (self.n_dirs != 1)} of class folders not read "
                          f"(nothing is read recursively: a class's images lie directly in root/<class>/): "
                          f"{', '.join(self.dirs)}{more}", VitbenchWarning, stacklevel=3)


def _entries(d: Path) -> list[Path]:
    """The entries of directory `d`; ConfigError naming it when it cannot be listed (permissions, I/O)."""
    try:
        return list(d.iterdir())
    except OSError as e:
        raise ConfigError(f"{d}: directory cannot be read ({e.strerror or type(e).__name__}); expected "
                          f"{_FOLDER_LAYOUT}") from None


def _nfc(name: str) -> str:
    return unicodedata.normalize("NFC", name)


def _class_dirs(root: Path) -> list[Path]:
    """The class folders of `root` (hidden ones skipped), in code point order of their names in NFC (Unicode's
    composed form: a name stored decomposed, as macOS writes it, sorts and compares as the same name typed)."""
    dirs = sorted((d for d in _entries(root) if d.is_dir() and not d.name.startswith(".")),
                  key=lambda d: (_nfc(d.name), d.name))
    twins = [(a, b) for a, b in zip(dirs, dirs[1:]) if _nfc(a.name) == _nfc(b.name)]
    if twins:
        a, b = twins[0]
        raise ConfigError(f"{root}: class folders {a.name!r} and {b.name!r} differ only in Unicode normalisation "
                          f"(NFC / NFD: the same name to a reader); merge or rename one; expected "
                          f"{_FOLDER_LAYOUT}")
    return dirs


def _list_folder(root: Path, unread: _Unread) -> tuple[list[str], np.ndarray, list[str]]:
    """(image files, labels, class names in NFC) of `root/<class>/*`: listed, not decoded; what is left out is
    counted in `unread`. An empty or unreadable class folder is an error (a class no image can teach), named
    with its path."""
    dirs = _class_dirs(root)
    if not dirs:
        raise ConfigError(f"{root}: no class sub-directories found; expected {_FOLDER_LAYOUT}")
    if len(dirs) > MAX_CLASSES:
        raise ConfigError(f"{root}: {len(dirs)} class sub-directories, more than {MAX_CLASSES} classes; expected "
                          f"{_FOLDER_LAYOUT}")
    files, labels = [], []
    for c, d in enumerate(dirs):
        found, here = [], _Unread()
        for f in _entries(d):
            if f.name.startswith("."):
                continue
            if f.suffix.lower() in IMAGE_SUFFIXES and not f.is_dir():
                found.append(str(f))
            elif f.is_dir():
                unread.dir(f)
            else:
                here.file(f)
                unread.file(f)
        if not found:
            besides = f" (it holds {here.counts()} of other suffixes)" if here.suffixes else ""
            raise ConfigError(f"{d}: class folder has no .png/.jpg/.jpeg images (nor "
                              f"{'/'.join(IMAGE_SUFFIXES[3:])}){besides}; add images or remove the folder; "
                              f"expected {_FOLDER_LAYOUT}")
        found.sort()
        files += found
        labels += [c] * len(found)
    return files, np.asarray(labels, np.int64), [_nfc(d.name) for d in dirs]


def read_folder(cfg: DataConfig) -> Raw:
    root = require_path(cfg, _FOLDER_LAYOUT)
    if not root.is_dir():
        raise ConfigError(f"{cfg.name_of('path')} {str(root)!r} is not a directory; expected {_FOLDER_LAYOUT}")
    has_split = (root / "train").is_dir() and (root / "test").is_dir()
    one = [s for s in ("train", "test") if (root / s).is_dir() and not has_split]
    if one:  # root/train without root/test (or the reverse): a split layout with a split missing, not 2 classes
        other = "test" if one[0] == "train" else "train"
        raise ConfigError(f"{root / other}: missing: {root / one[0]} makes {root} a split layout, which needs "
                          f"both; expected {_FOLDER_LAYOUT}")
    unread = _Unread()
    files, labels, names = _list_folder(root / "train" if has_split else root, unread)
    if not has_split:
        unread.warn(root)
        return Raw(FilePool(files), labels, names)
    t_files, t_labels, t_names = _list_folder(root / "test", unread)
    unread.warn(root)
    beside = [d.name for d in _class_dirs(root) if d.name not in ("train", "test")]
    if beside:  # root/val/ (or any other folder) beside train/ and test/: no split of this layout
        warnings.warn(f"{root}: {shorten(beside)} beside train/ and test/ not read: a split layout reads those "
                      f"two; the val split is {cfg.name_of('val_fraction')} ({cfg.val_fraction:g}) of train/, not "
                      "a folder", VitbenchWarning, stacklevel=2)
    same_classes(names, t_names, str(root))
    return Raw(FilePool(files), labels, names, FilePool(t_files), t_labels)


_CIFAR_LAYOUT = {
    "cifar10": "the CIFAR-10 python layout: a directory with data_batch_1..data_batch_5 and test_batch "
               "(e.g. cifar-10-batches-py/)",
    "cifar100": "the CIFAR-100 python layout: a directory with train and test (e.g. cifar-100-python/)",
}


def _key(d: dict, name: str):
    for k in (name.encode(), name):
        if k in d:
            return d[k]
    return None


def _cifar_batch(path: Path, label_key: str, layout: str) -> tuple[np.ndarray, np.ndarray]:
    from vitbench.transfer.safe_pickle import safe_load

    obj = safe_load(path)
    data = _key(obj, "data") if isinstance(obj, dict) else None
    labels = _key(obj, label_key) if isinstance(obj, dict) else None
    if data is None or labels is None:
        raise ConfigError(f"{path}: expected a dict with 'data' and '{label_key}'; {layout}")
    data, labels = np.asarray(data), int_labels(labels, f"{path} ({label_key!r})", layout)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ConfigError(f"{path}: 'data' must be uint8 (N, 3072) with N labels, got {data.dtype} "
                          f"{data.shape} and {len(labels)} labels; {layout}")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def read_cifar(cfg: DataConfig) -> Raw:
    layout = _CIFAR_LAYOUT[cfg.name]
    root = require_path(cfg, layout)
    sub = "cifar-10-batches-py" if cfg.name == "cifar10" else "cifar-100-python"
    if (root / sub).is_dir():
        root = root / sub
    if cfg.name == "cifar10":
        train_files = [root / f"data_batch_{i}" for i in range(1, 6)]
        test_file, label_key = root / "test_batch", "labels"
        meta, names_key, k = root / "batches.meta", "label_names", 10
    else:
        train_files, test_file, label_key = [root / "train"], root / "test", "fine_labels"
        meta, names_key, k = root / "meta", "fine_label_names", 100
    missing = [f.name for f in [*train_files, test_file] if not f.is_file()]
    if missing:
        raise ConfigError(f"{root}: missing {', '.join(missing)}; expected {layout}")
    parts = [_cifar_batch(f, label_key, layout) for f in train_files]
    x_test, y_test = _cifar_batch(test_file, label_key, layout)
    names = [str(i) for i in range(k)]
    if meta.is_file():
        from vitbench.transfer.safe_pickle import safe_load

        m = safe_load(meta)
        found = _key(m, names_key) if isinstance(m, dict) else None
        if found is not None and len(found) == k:
            names = [n.decode() if isinstance(n, bytes) else str(n) for n in found]
    y = np.concatenate([p[1] for p in parts])
    for split, labels in (("train", y), ("test", y_test)):
        no_images(labels, split, str(root), layout)
    if y.min() < 0 or max(y.max(), y_test.max()) >= k:
        raise ConfigError(f"{root}: labels outside 0..{k - 1}; is this {cfg.name}? expected {layout}")
    return in_memory(np.concatenate([p[0] for p in parts]), y, names, x_test, y_test)


_NPZ_LAYOUT = ("an .npz file with arrays x_train, y_train, x_test, y_test (or x, y): images (N, H, W) or "
               "(N, H, W, 1|3) as uint8 [0, 255] or float [0, 1], integer labels (N,)")


def _npz_images(x: np.ndarray, name: str, path: Path) -> np.ndarray:
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[-1] not in (1, 3) or 0 in x.shape[1:3]:  # 0 x 0 images: an ok row of nothing
        raise ConfigError(f"{path}: array {name!r} has shape {x.shape}; expected {_NPZ_LAYOUT}, H and W at least 1")
    if x.dtype == np.uint8:
        return x
    if not np.issubdtype(x.dtype, np.floating):  # uint16 (16-bit images), int64, bool: no scale to assume
        kind = f"{x.dtype.itemsize * 8}-bit integer" if np.issubdtype(x.dtype, np.integer) else str(x.dtype)
        raise ConfigError(f"{path}: array {name!r} is {x.dtype}: {kind} image arrays are not accepted, only uint8 "
                          f"[0, 255] or floats in [0, 1] (store a 16-bit array as floats: x / 65535); expected "
                          f"{_NPZ_LAYOUT}")
    if x.size and not (x.min() >= 0 and x.max() <= 1):  # NaN: false
        bad = int(np.size(x) - np.isfinite(x).sum())
        raise ConfigError(f"{path}: array {name!r} is {x.dtype} with "
                          + (f"{bad} value(s) NaN or infinite" if bad else "range outside [0, 1]")
                          + f"; expected {_NPZ_LAYOUT}")
    return x.astype(np.float32)


# Inflated bytes asked of zipfile per call while an .npz member is read: numpy.lib.format's BUFFER_SIZE, the
# chunk numpy reads an array in. zipfile's read(n) inflates up to n bytes in one call before cutting them to the
# member's declared size (read() asks for 2 GiB), so one call on a member whose data inflates past its declared
# size could hold gigabytes for a moment; asked for this much at a time, it holds at most this much.
NPZ_READ_CHUNK = 2**18


class _Member:
    """An .npz member as numpy reads it (`read`), giving at most its declared size, NPZ_READ_CHUNK inflated bytes
    per call into zipfile (see NPZ_READ_CHUNK): the read stops where the declared size ends, however far the
    compressed data would inflate (zipfile then finds the CRC wrong: BadZipFile)."""

    def __init__(self, f, declared: int):
        self.f, self.left = f, declared

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        out = bytearray()
        while len(out) < n:
            data = self.f.read(min(n - len(out), NPZ_READ_CHUNK))
            if not data:
                break
            out += data
        self.left -= len(out)
        return bytes(out)


def _npz_key(member: str) -> str:
    return member[:-4] if member.endswith(".npy") else member  # numpy.load's names for an .npz's members


def _declared_within_budget(infos, path: Path) -> None:
    """ConfigError naming the array whose declared uncompressed size takes the members' total past the memory
    budget (vitbench.memory_budget: $VITBENCH_MEMORY_LIMIT_GIB, else half the memory available), before anything
    is inflated: an .npz is loaded whole into memory, so a larger one cannot be read (and a 13 MB zip declaring
    3 GB, a 'zip bomb', would take 3 GB before any check). The bound is memory, not a compression ratio, since
    real arrays deflate as far as a bomb: measured with zlib, int64 labels sorted by class 666:1, sklearn's digits
    upscaled to 32 px 41:1, zeros 1027:1 (deflate's own limit is 1032:1)."""
    from vitbench import memory_budget

    budget = memory_budget.budget_mib()
    total = 0
    for info in infos:
        total += info.file_size
        if total > budget * 2**20:
            raise ConfigError(f"{path}: array {_npz_key(info.filename)!r} declares {info.file_size:,} bytes "
                              f"uncompressed ({total:,} with the arrays before it), past the memory budget of "
                              f"{memory_budget.describe(budget)}; refused before reading: an .npz is loaded whole "
                              f"into memory. Expected {_NPZ_LAYOUT}")


def _npz_arrays(zf, path: Path) -> dict[str, np.ndarray | None]:
    """The arrays of an .npz (numpy.load's names; None for a member that is no .npy array, never read past its
    magic), read by numpy.lib.format after these checks: the members' declared sizes within the memory budget;
    each header's array no larger than the bytes its member holds (a header of shape (10**12, ...) would
    otherwise be allocated before the short data is found: an 'out of memory' for a bad file), of a header
    version numpy.lib.format reads publicly (1.0, 2.0; 3.0 is written only for structured dtypes with non-latin-1
    field names, which no image or label array has), not of objects (unpickled: UnsafeFileError); every read
    stopped at its member's declared size (_Member)."""
    from numpy.lib import format as npy

    infos = zf.infolist()
    _declared_within_budget(infos, path)
    readers = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}
    arrays = {}
    for name, info in {i.filename: i for i in infos}.items():  # a repeated name: the last, as zipfile opens it
        key = _npz_key(name)
        with zf.open(info) as f:
            member = _Member(f, info.file_size)
            head = member.read(len(npy.MAGIC_PREFIX) + 2)
            if len(head) < len(npy.MAGIC_PREFIX) + 2 or not head.startswith(npy.MAGIC_PREFIX):
                arrays[key] = None  # numpy.load would give its bytes, read whole
                continue
            reader = readers.get((head[-2], head[-1]))
            if reader is None:
                raise ConfigError(f"{path}: array {key!r} has .npy header version {head[-2]}.{head[-1]}; image "
                                  f"and label arrays are written as 1.0 or 2.0. Expected {_NPZ_LAYOUT}")
            shape, _, dtype = reader(member)
            if dtype.hasobject:
                raise UnsafeFileError(f"{path}: contains object arrays that need unpickling; refused. "
                                      f"Expected {_NPZ_LAYOUT}")
            declared, held = int(np.prod(shape, dtype=object)) * dtype.itemsize, member.left
        if declared > held:
            raise ConfigError(f"{path}: array {key!r} declares shape {shorten(shape)} ({declared:,} "
                              f"bytes) but holds {held:,}; expected {_NPZ_LAYOUT}")
        with zf.open(info) as f:
            arrays[key] = npy.read_array(_Member(f, info.file_size), allow_pickle=False)
    return arrays


def _npz_or_npy(path) -> bool:
    """Whether the file starts as a zip archive (an .npz) or an .npy array does."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return False
    return head.startswith((b"PK\x03\x04", b"\x93NUMPY"))


def read_npz(cfg: DataConfig) -> Raw:
    path = require_path(cfg, _NPZ_LAYOUT)
    try:
        # mmap_mode: an .npy file is mapped, not read (its header's shape is not allocated); an .npz ignores it
        loaded = np.load(path, mmap_mode="r", allow_pickle=False)
        if isinstance(loaded, np.ndarray):  # an .npy file: one array, no names
            raise ConfigError(f"{path}: one .npy array {shorten(loaded.shape)}, not an .npz of named arrays; "
                              f"expected {_NPZ_LAYOUT}")
        with loaded as z:
            arrays = _npz_arrays(z.zip, path)
    except ValueError as e:
        if "allow_pickle" in str(e) and not _npz_or_npy(path):  # numpy reads anything else as a pickle
            raise ConfigError(f"{path}: not an .npz (neither a zip archive of arrays nor an .npy array); "
                              f"expected {_NPZ_LAYOUT}") from None
        if "allow_pickle" in str(e):
            raise UnsafeFileError(f"{path}: contains object arrays that need unpickling; refused. "
                                  f"Expected {_NPZ_LAYOUT}") from e
        raise ConfigError(f"{path}: not a readable .npz ({clip(str(e), 200)}); expected {_NPZ_LAYOUT}") from e
    except (OSError, EOFError, zipfile.BadZipFile) as e:  # BadZipFile: zip's magic, then no archive
        raise ConfigError(f"{path}: not a readable .npz ({clip(str(e), 200)}); expected {_NPZ_LAYOUT}") from e
    split = {"x_train", "y_train", "x_test", "y_test"}
    if split <= arrays.keys():
        names = ("x_train", "y_train", "x_test", "y_test")
    elif {"x", "y"} <= arrays.keys() and not split & arrays.keys():
        names = ("x", "y", None, None)
    else:  # a test (or train) split half given is not silently left out
        raise ConfigError(f"{path}: has arrays {shorten(sorted(arrays))}; expected {_NPZ_LAYOUT}")
    not_arrays = [k for k in names if k is not None and arrays[k] is None]
    if not_arrays:
        raise ConfigError(f"{path}: {shorten(not_arrays[0])} is not an .npy array (no numpy header); expected "
                          f"{_NPZ_LAYOUT}")
    out = []
    for xi, yi in (names[:2], names[2:]):
        if xi is None:
            out += [None, None]
            continue
        x, y = _npz_images(arrays[xi], xi, path), arrays[yi]
        if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
            raise ConfigError(f"{path}: {yi!r} must be integer labels of length {len(x)}; got {y.dtype} {y.shape}")
        out += [x, int_labels(y, f"{path} ({yi!r})", _NPZ_LAYOUT)]
    names = label_names(np.concatenate([out[1], out[3] if out[3] is not None else out[1][:0]]),
                        f"{path} ({names[1]}{', ' + names[3] if names[3] else ''})", _NPZ_LAYOUT)
    if out[3] is not None:
        same_labels(out[1], out[3], names, f"{path} (y_train, y_test)")
    return in_memory(out[0], out[1], names, out[2], out[3])


def read_source(cfg: DataConfig) -> Raw:
    """The images and labels of `cfg`'s source, with its own test split where it has one: the reader
    vitbench.transfer.formats names for `cfg.name`."""
    from vitbench.transfer.formats import FORMATS  # here: the table names this module's options model

    not_special(cfg)
    module, _, function = FORMATS[cfg.name].reader.partition(":")
    return getattr(importlib.import_module(module), function)(cfg)
