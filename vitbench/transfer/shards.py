"""The `webdataset` source: tar shards read with the standard library (no webdataset package needed).

Conventions are webdataset's (github.com/webdataset/webdataset, `tariterators.base_plus_ext`): a sample is the
run of consecutive tar members that share a key, the member's path up to the first dot of its file name
(`train/000123.jpg` + `train/000123.cls` -> key `train/000123`); a member whose file name starts with a dot is
no sample's (macOS's `._KEY.png` AppleDouble files, `.DS_Store`: skipped, as `base_plus_ext` skips them). The
image is the member of an image extension (`IMAGE_EXTENSIONS`: the folder source's), the label the `.cls` member
(an integer, as text); the test shards must hold the train shards' classes. Shards are named by a brace pattern
(`train-{000..099}.tar`, `{a,b}`), a single file, or a directory holding `train-*.tar` and `test-*.tar` (or just
`*.tar`: one pool, split here); beside a pattern or file, the `test-*.tar` of its directory are the test split
(`split_shards`).

Listing reads the tar headers and the small `.cls` members only: an index of (shard, byte offset, size) per
sample, so `decode(i)` seeks to one image and decodes it; no image is decoded to learn the labels.
"""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vitbench.errors import ConfigError, clip
from vitbench.transfer.limits import MAX_CLASSES
from vitbench.transfer.pools import CorruptImage, decode_bytes, regular_file
from vitbench.transfer.raw import Raw, label_names, same_labels

if TYPE_CHECKING:
    from vitbench.transfer.config import DataConfig

IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "webp", "bmp", "tif", "tiff", "gif")  # as sources.IMAGE_SUFFIXES
LABEL_EXTENSION = "cls"  # webdataset's class-index member
LAYOUT = ("webdataset tar shards: a brace pattern (train-{000..099}.tar), one .tar, or a directory of "
          "train-*.tar [+ test-*.tar]; each sample = KEY.png|jpg|jpeg|webp|bmp|tif|tiff|gif + KEY.cls (the "
          "integer label)")
_BRACE = re.compile(r"\{([^{}]*)\}")
# Shards one pattern may name. A shard is "often ~1GB" (huggingface.co/docs/hub/datasets-webdataset; OpenImages:
# 554 shards of ~1 GB, webdataset.github.io/webdataset/sharding), ~10,000 images of ~100 KB, and the index keeps
# 36 bytes per sample (ShardPool's shard, offset, size, header and the label), so 2**20 shards are ~10**10 samples
# and ~360 GB of index: beyond any listing held in memory. A pattern past it (a typo, `{0..999999999}`) is refused
# before any path is made, instead of expanding into gigabytes of names.
MAX_SHARDS = 2**20


def _items(body: str) -> Iterator[str]:
    """The words one brace group stands for, lazily: `000..002` (zero padding kept; descending too, as bash)
    or `x,y`."""
    rng = re.fullmatch(r"(\d+)\.\.(\d+)", body)
    if not rng:
        return iter(body.split(","))
    a, b = rng.groups()
    width = len(a) if a.startswith("0") else 0
    step = 1 if int(b) >= int(a) else -1
    return (str(i).zfill(width) for i in range(int(a), int(b) + step, step))


def _substituted(head: str, items: Iterator[str], tail: str) -> Iterator[str]:
    return (head + item + tail for item in items)


def _expanded(pattern: str) -> Iterator[str]:
    """The names `pattern` stands for, in order, made one at a time (a stack of iterators, no recursion: a
    pattern of a thousand groups is no deeper than one)."""
    stack = [iter([pattern])]
    while stack:
        p = next(stack[-1], None)
        if p is None:
            stack.pop()
            continue
        m = _BRACE.search(p)
        if m is None:
            yield p
        else:
            stack.append(_substituted(p[:m.start()], _items(m.group(1)), p[m.end():]))


def expand_braces(pattern: str, limit: int = MAX_SHARDS) -> list[str]:
    """`a-{000..002}.tar` -> a-000.tar, a-001.tar, a-002.tar (zero padding kept); `{x,y}` -> both; nested in
    order. ConfigError naming the pattern when it stands for more than `limit` names (counted as they are made:
    at most `limit` + 1 ever exist)."""
    names = list(islice(_expanded(pattern), limit + 1))
    if len(names) > limit:
        raise ConfigError(f"{clip(pattern, 200)}: the brace pattern names more than {limit:,} shards (at most "
                          f"{limit:,}: vitbench.transfer.shards.MAX_SHARDS); check its ranges")
    return names


def _is(p: Path, kind: str) -> bool:
    """`p.is_dir()` / `p.is_file()` (`kind`), False for a name the file system cannot even look up (too long)."""
    try:
        return p.is_dir() if kind == "dir" else p.is_file()
    except OSError:
        return False


def split_shards(path: str, test_path: str | None) -> tuple[list[Path], list[Path]]:
    """(train shards, test shards; [] when none): the test shards are `test_path`'s, else the `test-*.tar` beside
    the train shards (in a directory `path`, or in the directories of the files a pattern or file `path` names),
    never one of the train shards; a directory of neither `train-*` nor `test-*` names is one pool. ConfigError
    for a directory of `test-*.tar` without `train-*.tar` (the test shards would be trained on) and for a test
    shard that is also a train shard."""
    p = Path(path).expanduser()
    if _is(p, "dir"):
        train, test = shard_files(path, "train"), shard_files(path, "test")
        if not train:
            if test:
                raise ConfigError(f"{p}: holds test-*.tar shards but no train-*.tar: name the train shards "
                                  f"train-*.tar (or give a pattern of them); expected {LAYOUT}")
            train = shard_files(path)  # no train-*/test-* names: every shard is the pool
        else:  # the other shards beside them are not read: said, as hf and folder say a split they leave
            other = sorted(f.name for f in shard_files(path) if f not in {*train, *test})
            if other:
                import warnings

                from vitbench.errors import VitbenchWarning, shorten

                warnings.warn(f"{p}: {len(other)} shard(s) not read ({shorten(other)}): a directory's train-*.tar "
                              "are the train split and test-*.tar the test split; the val split is val_fraction "
                              "of train", VitbenchWarning, stacklevel=2)
    else:
        train = shard_files(path)
        names = {f.resolve() for f in train}
        test = sorted({t for d in dict.fromkeys(f.parent for f in train) for t in shard_files(str(d), "test")
                       if t.resolve() not in names})
    if test_path:
        test = shard_files(test_path)
    both = sorted({f.resolve() for f in train} & {f.resolve() for f in test})
    if both:
        raise ConfigError(f"{both[0]}: both a train and a test shard ({len(both)} such); the test split must be "
                          f"other shards; expected {LAYOUT}")
    return train, test


def shard_files(path: str, prefix: str | None = None) -> list[Path]:
    """The shards a path names: a brace pattern / a .tar file (each must exist), or a directory's
    `prefix-*.tar` (all `*.tar` when `prefix` is None). ConfigError naming the path when none is found."""
    p = Path(path).expanduser()
    if _is(p, "dir"):
        found = sorted(p.glob(f"{prefix}-*.tar" if prefix else "*.tar"))
        odd = [f for f in found if not regular_file(f)]
        if odd:  # a FIFO named x.tar would block the listing for ever
            raise ConfigError(f"{odd[0]}: not a regular file (a directory, FIFO, socket or device); expected "
                              f"{LAYOUT}")
        if not found and prefix is None:
            raise ConfigError(f"{p}: no .tar shards in this directory; expected {LAYOUT}")
        return found
    files = [Path(f) for f in expand_braces(str(p))]
    missing = [str(f) for f in files if not _is(f, "file")]
    if missing:
        raise ConfigError(f"{clip(missing[0], 200)}: shard does not exist" + (f" (and {len(missing) - 1} more of "
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


LABEL_BYTES = 32  # a class index below MAX_CLASSES is 5 digits; a longer .cls member is no label (not read whole)


def _read_label(tf: tarfile.TarFile, m: tarfile.TarInfo, where: str) -> int:
    if m.size > LABEL_BYTES:
        raise ConfigError(f"{where}: .cls member of {m.size:,} bytes; it must hold an integer class index (at most "
                          f"{LABEL_BYTES} bytes)")
    data = tf.extractfile(m).read()
    try:
        label = int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(f"{where}: .cls must hold an integer class index, got {data[:20]!r}") from None
    if not 0 <= label < MAX_CLASSES:
        raise ConfigError(f"{where}: label {label} out of range; class indices are 0..K-1 with K at most "
                          f"{MAX_CLASSES}")
    return label


def _check_ended(tf: tarfile.TarFile, path: Path) -> None:
    """ConfigError unless the members read end at the archive's end-of-archive block (a block of zeros, which
    tarfile and GNU tar write): tarfile stops without a word at a header cut short or garbled, so a shard cut at
    or in a header (a writer killed) was read as a shorter one, its missing samples unsaid."""
    tf.fileobj.seek(tf.offset)
    end = tf.fileobj.read(tarfile.BLOCKSIZE)
    if len(end) < tarfile.BLOCKSIZE or any(end):
        raise ConfigError(f"{path}: the tar shard ends without its end-of-archive block at byte {tf.offset:,} "
                          "(cut short, e.g. by a writer that was killed, or garbled there): its samples past that "
                          f"point are not read; write the shard again; expected {LAYOUT}")


def index_shards(files: list[Path]) -> tuple[ShardPool, np.ndarray]:
    """(pool, labels) of the samples of `files`, in shard and member order. ConfigError naming the shard and
    the sample for a truncated tar, a sample without an image or without a label."""
    shard, offset, size, header, labels = [], [], [], [], []
    for s, path in enumerate(files):
        samples: dict[str, dict] = {}
        try:
            with tarfile.open(path, "r:") as tf:
                last = None
                for m in tf:
                    if not m.isfile() or m.name.rpartition("/")[2].startswith("."):  # ._KEY.png, .DS_Store
                        continue
                    key, ext = _key_ext(m.name)
                    if key != last and key in samples:  # its first image kept, its last label: a wrong label
                        raise ConfigError(f"{path}:{m.name}: sample {key!r} appears again after other samples "
                                          "(two shards appended into one?); a sample's members are consecutive "
                                          f"and its key unique in its shard; expected {LAYOUT}")
                    last = key
                    sample = samples.setdefault(key, {})
                    seen = sample.setdefault("members", [])
                    twice = ext in seen or (ext in IMAGE_EXTENSIONS and "image" in sample)
                    if twice and (ext in IMAGE_EXTENSIONS or ext == LABEL_EXTENSION):  # the first image and the
                        # last label were kept: two samples of one key, every label wrong (webdataset refuses it)
                        raise ConfigError(f"{path}:{m.name}: sample {key!r} has a second "
                                          f"{'image' if ext in IMAGE_EXTENSIONS else 'label'} member (after "
                                          f"{', '.join(key + '.' + e for e in seen)}); a key names one sample "
                                          f"in its shard; expected {LAYOUT}")
                    seen.append(ext)
                    if ext in IMAGE_EXTENSIONS and "image" not in sample:
                        sample["image"] = (m.offset_data, m.size, m.offset)
                    elif ext == LABEL_EXTENSION:
                        sample["label"] = _read_label(tf, m, f"{path}:{m.name}")
                _check_ended(tf, path)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ConfigError(f"{path}: not a readable tar shard ({e}); expected {LAYOUT}") from None
        if not samples:
            raise ConfigError(f"{path}: shard holds no samples; expected {LAYOUT}")
        for key, sample in samples.items():
            if "image" not in sample:
                raise ConfigError(f"{path}: sample {key!r} has no image member (.{'/.'.join(IMAGE_EXTENSIONS)}); "
                                  f"expected {LAYOUT}")
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


def read(cfg: DataConfig) -> Raw:
    """The `webdataset` format (vitbench.transfer.formats): the train shards, and the test shards if any."""
    if not cfg.path:
        raise ConfigError(f"{cfg.name_of('path')} is required for dataset 'webdataset'; expected {LAYOUT}")
    train, test = split_shards(cfg.path, cfg.test_path)
    pool, labels = index_shards(train)
    names = label_names(labels, f"{cfg.path} (the train shards)", LAYOUT)
    if not test:
        return Raw(pool, labels, names)
    t_pool, t_labels = index_shards(test)
    check_test_labels(t_labels, t_pool, len(names))
    same_labels(labels, t_labels, names, f"{clip(cfg.path, 200)} and its test shards ({clip(str(test[0]), 200)}"
                + (f" and {len(test) - 1} more)" if len(test) > 1 else ")"))
    return Raw(pool, labels, names, t_pool, t_labels)
