"""The `webdataset` source: tar shards read with the standard library (no webdataset package needed).

Conventions are webdataset's (github.com/webdataset/webdataset, `tariterators.base_plus_ext`): a sample is the
run of consecutive tar members that share a key, the member's path up to the first dot of its file name
(`train/000123.jpg` + `train/000123.cls` -> key `train/000123`); the image is the `.png` / `.jpg` / `.jpeg`
member, the label the `.cls` member (an integer, as text). Shards are named by a brace pattern
(`train-{000..099}.tar`, `{a,b}`), a single file, or a directory holding `train-*.tar` and `test-*.tar` (or just
`*.tar`: one pool, split here).

Listing reads the tar headers and the small `.cls` members only: an index of (shard, byte offset, size) per
sample, so `decode(i)` seeks to one image and decodes it; no image is decoded to learn the labels.
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vitbench.errors import ConfigError
from vitbench.transfer.pools import CorruptImage, decode_bytes

IMAGE_EXTENSIONS = ("png", "jpg", "jpeg")  # as the folder source (vitbench.transfer.sources.IMAGE_SUFFIXES)
LABEL_EXTENSION = "cls"  # webdataset's class-index member
LAYOUT = ("webdataset tar shards: a brace pattern (train-{000..099}.tar), one .tar, or a directory of "
          "train-*.tar [+ test-*.tar]; each sample = KEY.png|jpg|jpeg + KEY.cls (the integer label)")
_BRACE = re.compile(r"\{([^{}]*)\}")


def expand_braces(pattern: str) -> list[str]:
    """`a-{000..002}.tar` -> a-000.tar, a-001.tar, a-002.tar (zero padding kept); `{x,y}` -> both; nested in order."""
    m = _BRACE.search(pattern)
    if m is None:
        return [pattern]
    body, head, tail = m.group(1), pattern[:m.start()], pattern[m.end():]
    rng = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if rng:
        a, b = rng.groups()
        width = len(a) if a.startswith("0") else 0
        items = [str(i).zfill(width) for i in range(int(a), int(b) + 1)]
    else:
        items = body.split(",")
    return [p for item in items for p in expand_braces(head + item + tail)]


def shard_files(path: str, prefix: str | None = None) -> list[Path]:
    """The shards a path names: a brace pattern / a .tar file (each must exist), or a directory's
    `prefix-*.tar` (all `*.tar` when `prefix` is None). ConfigError naming the path when none is found."""
    p = Path(path).expanduser()
    if p.is_dir():
        found = sorted(p.glob(f"{prefix}-*.tar" if prefix else "*.tar"))
        if not found and prefix is None:
            raise ConfigError(f"{p}: no .tar shards in this directory; expected {LAYOUT}")
        return found
    files = [Path(f) for f in expand_braces(str(p))]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ConfigError(f"{missing[0]}: shard does not exist" + (f" (and {len(missing) - 1} more of "
                          f"{len(files)})" if len(missing) > 1 else "") + f"; expected {LAYOUT}")
    return files


def _key_ext(name: str) -> tuple[str, str]:
    """webdataset's split of a member path into (key, extension): at the first dot of the file name."""
    d, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext.lower()


@dataclass
class ShardPool:
    """Images inside tar shards, addressed by (shard, byte offset, size); labels read beside it."""

    shards: list[str]
    shard: np.ndarray  # int32: which shard holds sample i
    offset: np.ndarray  # int64: byte offset of its image's data in the shard
    size: np.ndarray  # int64: the image's byte size
    header: np.ndarray  # int64: byte offset of its image member's header (to name it in a message)
    resident: bool = False

    def __len__(self) -> int:
        return len(self.shard)

    def encoded(self, i: int) -> bytes:
        path = self.shards[self.shard[i]]
        try:
            with open(path, "rb") as f:
                f.seek(int(self.offset[i]))
                return f.read(int(self.size[i]))
        except OSError as e:
            raise CorruptImage(self.origin(i), str(e)) from None

    def decode(self, i: int) -> np.ndarray:
        return decode_bytes(self.encoded(i), self.origin(i))

    def origin(self, i: int) -> str:
        path = self.shards[self.shard[i]]
        try:
            with tarfile.open(path, "r:") as tf:
                tf.fileobj.seek(int(self.header[i]))
                return f"{path}:{tarfile.TarInfo.fromtarfile(tf).name}"
        except (OSError, tarfile.TarError):
            return f"{path} (member at byte {int(self.header[i])})"


def _read_label(tf: tarfile.TarFile, m: tarfile.TarInfo, where: str) -> int:
    data = tf.extractfile(m).read()
    try:
        label = int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(f"{where}: .cls must hold an integer class index, got {data[:20]!r}") from None
    if label < 0:
        raise ConfigError(f"{where}: label {label} is negative; class indices are 0..K-1")
    return label


def index_shards(files: list[Path]) -> tuple[ShardPool, np.ndarray]:
    """(pool, labels) of the samples of `files`, in shard and member order. ConfigError naming the shard and
    the sample for a truncated tar, a sample without an image or without a label."""
    shard, offset, size, header, labels = [], [], [], [], []
    for s, path in enumerate(files):
        samples: dict[str, dict] = {}
        try:
            with tarfile.open(path, "r:") as tf:
                for m in tf:
                    if not m.isfile():
                        continue
                    key, ext = _key_ext(m.name)
                    sample = samples.setdefault(key, {})
                    if ext in IMAGE_EXTENSIONS and "image" not in sample:
                        sample["image"] = (m.offset_data, m.size, m.offset)
                    elif ext == LABEL_EXTENSION:
                        sample["label"] = _read_label(tf, m, f"{path}:{m.name}")
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ConfigError(f"{path}: not a readable tar shard ({e}); expected {LAYOUT}") from None
        if not samples:
            raise ConfigError(f"{path}: shard holds no samples; expected {LAYOUT}")
        for key, sample in samples.items():
            if "image" not in sample:
                raise ConfigError(f"{path}: sample {key!r} has no .png/.jpg/.jpeg member; expected {LAYOUT}")
            if "label" not in sample:
                raise ConfigError(f"{path}: sample {key!r} has no .cls label (a shard without labels cannot "
                                  f"train or evaluate a classifier); expected {LAYOUT}")
            shard.append(s)
            offset.append(sample["image"][0])
            size.append(sample["image"][1])
            header.append(sample["image"][2])
            labels.append(sample["label"])
    pool = ShardPool([str(f) for f in files], np.asarray(shard, np.int32), np.asarray(offset, np.int64),
                     np.asarray(size, np.int64), np.asarray(header, np.int64))
    return pool, np.asarray(labels, np.int64)


def check_test_labels(labels: np.ndarray, pool: ShardPool, k: int) -> None:
    """ConfigError naming the sample whose label is not one of the train split's 0..k-1 classes."""
    bad = np.flatnonzero(labels >= k)
    if len(bad):
        raise ConfigError(f"{pool.origin(int(bad[0]))}: label {int(labels[bad[0]])} out of range: the train "
                          f"shards have classes 0..{k - 1} ({len(bad)} test samples outside them)")
