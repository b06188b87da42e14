"""Image classification data for transfer studies: a source (vitbench.transfer.sources) split into train / val /
test, and the batches every backend trains on.

Images are kept at their stored size (uint8 in [0, 255] or float32 in [0, 1], NHWC) and preprocessed per
batch as in the paper's input pipeline (vitbench.transfer.preprocess). Splits are stratified and deterministic in
`seed`; `classes` picks a subset and relabels it 0..K-1, so one dataset can give a disjoint upstream/downstream
pair (e.g. digits 0-4 / 5-9). Which images, which classes, how to split: `DataConfig`
(vitbench.transfer.config).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from vitbench.errors import ConfigError, clip, shorten
from vitbench.transfer.config import DataConfig, ints_text
from vitbench.transfer.limits import ROW_CLASS_NAMES
from vitbench.transfer.loader import InputStats, stream
from vitbench.transfer.pools import Pool, Skipped, images_at
from vitbench.transfer.preprocess import preprocess
from vitbench.transfer.raw import no_images
from vitbench.transfer.sources import read_source

_CACHE_LIMIT_BYTES = 256 * 2**20  # keep a preprocessed copy of a resident split only while it is this small


# ---------------------------------------------------------------------------------------------
# Containers
# ---------------------------------------------------------------------------------------------
@dataclass
class ImageSet:
    """A split: indices into a pool of images (vitbench.transfer.pools, decoded on demand) and their int64
    labels in 0..num_classes-1. Only a resident pool's images are ever all in memory; `skipped` counts the
    corrupt files dropped (shared by the splits of a source), `input` what streaming them cost; `split` and
    `source` name it in messages ("the test split of folder:/data")."""

    pool: Pool
    index: np.ndarray
    labels: np.ndarray
    num_classes: int
    class_names: list[str]
    workers: int = 0
    skipped: Skipped = field(default_factory=Skipped)
    input: InputStats = field(default_factory=InputStats)
    split: str = "data"
    source: str = "the dataset"
    _cache: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def images(self) -> np.ndarray:
        """The split's images as one array: resident pools only (a streamed pool is never materialised)."""
        if not self.pool.resident:
            raise ConfigError("a streamed split has no resident image array; use batch() or batches()")
        return self.pool.images[self.index]

    def subset(self, idx: np.ndarray) -> ImageSet:
        return ImageSet(self.pool, self.index[idx], self.labels[idx], self.num_classes, self.class_names,
                        self.workers, self.skipped, self.input, self.split, self.source)

    def join(self, other: ImageSet) -> ImageSet:
        """This split followed by `other` (of the same pool, e.g. train + val for a final fine-tuning run)."""
        if other.pool is not self.pool:
            raise ValueError("ImageSet.join: the two splits come from different pools")
        return ImageSet(self.pool, np.concatenate([self.index, other.index]),
                        np.concatenate([self.labels, other.labels]), self.num_classes, self.class_names,
                        self.workers, self.skipped, self.input, f"{self.split} + {other.split}", self.source)

    def unreadable(self, listed: int) -> ConfigError:
        """The error of a pass that read none of the `listed` images it was asked for (all skipped as corrupt
        under data.skip_corrupt): zero usable images is no measurement, named with the split."""
        first = ", ".join(list(self.skipped.files)[:2])
        return ConfigError(f"no readable image in the {self.split} split of {self.source}: all {listed} images "
                           f"read were skipped as corrupt (--skip-corrupt; {len(self.skipped)} skipped in all, "
                           f"e.g. {first}); fix or remove them")

    def array(self, resolution: int) -> np.ndarray:
        """The whole (resident) set preprocessed at `resolution` (cached while small)."""
        if resolution in self._cache:
            return self._cache[resolution]
        out = np.concatenate([preprocess(self.images[i:i + 512], resolution)
                              for i in range(0, len(self), 512)]) if len(self) else \
            np.zeros((0, resolution, resolution, 3), np.float32)
        if out.nbytes <= _CACHE_LIMIT_BYTES:
            self._cache[resolution] = out
        return out

    def batch(self, idx: np.ndarray, resolution: int) -> tuple[np.ndarray, np.ndarray]:
        """(images float32 (B, r, r, 3) in [-1, 1], labels int64 (B,)) for indices `idx`, decoded here. With
        data.skip_corrupt, a corrupt file's row is dropped (B smaller) and counted in `skipped`."""
        idx = np.asarray(idx)
        t0 = time.perf_counter()
        if self.pool.resident and (resolution in self._cache or
                                   len(self) * resolution * resolution * 3 * 4 <= _CACHE_LIMIT_BYTES):
            x, y = self.array(resolution)[idx], self.labels[idx]
        else:
            b = images_at(self.pool, self.index[idx], resolution, self.skipped.allowed)
            self.skipped.files.update(b.failed)
            x, y = b.images, self.labels[idx][b.kept]
        self.input.input_s += time.perf_counter() - t0  # the caller (a training step) waits for this
        self.input.images += len(y)
        return x, y

    def batches(self, resolution: int, batch_size: int, rows: np.ndarray | None = None):
        """(images, labels, rows kept) for `rows` of the split (default all) in order, `batch_size` at a time,
        decoded ahead by `workers` processes (vitbench.transfer.loader): memory bounded by the batches."""
        rows = np.arange(len(self)) if rows is None else np.asarray(rows, np.int64)
        chunks = [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
        for c, b in zip(chunks, stream(self.pool, [self.index[c] for c in chunks], resolution,
                                       workers=self.workers, skip_corrupt=self.skipped.allowed,
                                       stats=self.input)):
            self.skipped.files.update(b.failed)
            yield b.images, self.labels[c][b.kept], c[b.kept]

    def steps(self, order: np.ndarray, resolution: int):
        """Each training step's (images, labels) for `order` (steps, batch) of split indices (batch_indices),
        decoded ahead by `workers` processes. Batches stay full: a corrupt file skipped under data.skip_corrupt
        leaves its row to a repeat of the batch's other images (a compiled step keeps its shape), and a batch whose
        every file is corrupt to the nearest batch that has one (the one before; the first readable one for the
        steps before it). No readable image in any step: a ConfigError naming the split, never a step on
        nothing."""
        if self.pool.resident:
            for idx in order:
                yield self.batch(idx, resolution)
            return
        last, waiting = None, 0  # the last full batch; steps owed one (every file of theirs corrupt)
        for idx, b in zip(order, stream(self.pool, [self.index[i] for i in order], resolution,
                                        workers=self.workers, skip_corrupt=self.skipped.allowed,
                                        stats=self.input)):
            self.skipped.files.update(b.failed)
            x, y = b.images, self.labels[idx][b.kept]
            if not len(y):
                if last is None:
                    waiting += 1
                    continue
                x, y = last
            elif len(y) < len(idx):
                fill = np.resize(np.arange(len(y)), len(idx))
                x, y = x[fill], y[fill]
            last = (x, y)
            for _ in range(waiting):
                yield x, y
            waiting = 0
            yield x, y
        if waiting:
            raise self.unreadable(int(np.unique(np.asarray(order)).size))  # files, not reads of them

    def per_class_counts(self) -> list[int]:
        return np.bincount(self.labels, minlength=self.num_classes).tolist()


@dataclass
class Splits:
    train: ImageSet
    val: ImageSet
    test: ImageSet
    source: str  # human description: dataset name, path, classes

    @property
    def num_classes(self) -> int:
        return self.train.num_classes

    @property
    def skipped(self) -> Skipped:
        return self.train.skipped

    def warn_skipped(self) -> None:
        """Say on the terminal how many corrupt files were skipped (data.skip_corrupt), naming a few, and which
        test classes lost every image to it (`warn_emptied`)."""
        if not len(self.skipped):
            return
        import warnings

        from vitbench.errors import VitbenchWarning

        names = ", ".join(list(self.skipped.files)[:3])
        warnings.warn(f"{len(self.skipped)} corrupt files skipped in {self.source} (--skip-corrupt): {names}"
                      + (" ..." if len(self.skipped) > 3 else ""), VitbenchWarning, stacklevel=2)
        self.warn_emptied()

    def warn_emptied(self) -> None:
        """Warn naming the test classes every image of which was skipped as corrupt: they are out of the accuracy,
        said as warn_uncovered says a class the test split never had (an `ok` row over 4 of 5 classes went
        unsaid: found by a review)."""
        import warnings

        from vitbench.errors import VitbenchWarning

        test = self.test
        read = np.array([test.pool.origin(int(i)) not in self.skipped.files for i in test.index], bool)
        listed = np.bincount(test.labels, minlength=self.num_classes)
        gone = np.flatnonzero((listed > 0) & (np.bincount(test.labels[read], minlength=self.num_classes) == 0))
        if len(gone):
            warnings.warn(f"every test image of {len(gone)} of the {self.num_classes} classes of {self.source} "
                          f"was skipped as corrupt: {class_list(gone, self.train.class_names)}; the accuracy "
                          "is over the other classes", VitbenchWarning, stacklevel=3)

    def warn_uncovered(self, val_chooses: str | None = None) -> None:
        """Warn (VitbenchWarning) naming the classes the test split holds no image of (the accuracy is over the
        others: a class of one image goes to train) and, where the val split chooses something (`val_chooses`:
        what, e.g. 'the fine-tuning LR'; None: it chooses nothing), those it holds none of. A warning, not a
        refusal: every split is read and the accuracy is over every test image read; what it is not over, the
        user hears."""
        import warnings

        from vitbench.errors import VitbenchWarning

        checked = [(self.test, "the accuracy is over the other classes; a class needs 2 images or more to have "
                                "one held out for test, or give it test images of its own")]
        if val_chooses and len(self.val):  # an empty val split that chooses is the protocol's refusal
            checked.append((self.val, f"{val_chooses} is chosen on the other classes; a class needs 2 training "
                                      "images or more to have one held out for val (data.val_fraction)"))
        for split, what in checked:
            missing = np.flatnonzero(np.bincount(split.labels, minlength=self.num_classes) == 0)
            if len(missing):
                warnings.warn(f"the {split.split} split of {self.source} has no images of {len(missing)} of its "
                              f"{self.num_classes} classes: {class_list(missing, self.train.class_names)}; {what}",
                              VitbenchWarning, stacklevel=2)

    def row_fields(self) -> dict:
        """What a transfer row says of its data, to check it against the disk: the images each split lists
        (before a corrupt file is skipped: skipped_files), the classes, and the first ROW_CLASS_NAMES of their
        names (num_classes says how many there are). Declared where the tasks declare their metrics
        (vitbench.tasks.upstream.SPLIT_METRICS, SPLIT_LISTS)."""
        return {"train_images": len(self.train), "val_images": len(self.val), "test_images": len(self.test),
                "num_classes": self.num_classes,
                "class_names": [clip(str(n), 100) for n in self.train.class_names[:ROW_CLASS_NAMES]]}

    def summary(self) -> dict:
        return {"source": self.source, "num_classes": self.num_classes, "train": len(self.train),
                "val": len(self.val), "test": len(self.test), "image_shape": self._first_shape()}

    def _first_shape(self) -> list[int] | None:
        """The stored shape of the first training image (sources may mix sizes; None if it does not decode)."""
        from vitbench.transfer.pools import CorruptImage

        try:
            return list(self.train.pool.decode(int(self.train.index[0])).shape) if len(self.train) else None
        except CorruptImage:
            return None


# ---------------------------------------------------------------------------------------------
# Splitting
# ---------------------------------------------------------------------------------------------
# How a split is drawn (SPLIT_RULE, in the upstream cache key: an upstream trained under another rule is another
# upstream). 2: each class's images are shuffled by a generator of (seed, the class's source label) of its own,
# so which images of a class are held out depends on the seed alone, never on which other classes were chosen or
# their order. Under rule 1 one generator walked the chosen classes in turn: an upstream pre-trained on every
# digit trained on 168 of the 225 test images of a downstream of digits 5-9 (found by a review).
SPLIT_RULE = 2


def stratified_split(labels: np.ndarray, fraction: float, seed: int,
                     source_labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices (keep, held_out): round(fraction * n_c) of every class held out (at least 1 if the class has 2+),
    each class shuffled by its own generator of (seed, its source label: `source_labels[c]`, else c; SPLIT_RULE)."""
    keep, held = [], []
    for c in np.unique(labels):
        rng = np.random.default_rng([seed, int(c if source_labels is None else source_labels[c])])
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_out = int(round(fraction * len(idx)))
        if fraction > 0 and len(idx) >= 2:
            n_out = min(max(n_out, 1), len(idx) - 1)
        held.append(idx[:n_out])
        keep.append(idx[n_out:])
    return np.sort(np.concatenate(keep)), np.sort(np.concatenate(held))


def _select_classes(y: np.ndarray, classes: list[int] | None, k: int, source: str
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(pool indices kept, their labels relabelled 0..K-1 in `classes`' order)."""
    if classes is None:
        return np.arange(len(y)), y
    bad = [c for c in classes if not 0 <= c < k]
    if bad:
        raise ConfigError(f"data.classes {shorten(bad)} out of range for {source} "
                          f"(labels 0..{k - 1}); --classes '' (study field data.classes: null) takes every class")
    remap = np.full(k, -1, np.int64)
    remap[classes] = np.arange(len(classes))
    keep = np.flatnonzero(remap[y] >= 0)
    return keep, remap[y[keep]]


def load_splits(cfg: DataConfig | dict | None = None) -> Splits:
    """List `cfg`'s source (labels read, images not decoded) and split it into train / val / test (stratified,
    deterministic in `cfg.seed`).

    The test split is the source's own when it has one, else `test_fraction` of the pool; val is
    `val_fraction` of what remains for training. `classes` selects and relabels before splitting.
    """
    cfg = cfg if isinstance(cfg, DataConfig) else DataConfig.model_validate(cfg or {})
    raw = read_source(cfg)
    k_src = len(raw.class_names)
    source = cfg.name + (f":{cfg.path}" if cfg.path else "") + (f" {cfg.tfds_name}" if cfg.tfds_name else "")
    for split, labels in (("train", raw.labels), ("test", raw.test_labels)):  # any format: an empty split
        if labels is not None:
            no_images(labels, split, source)
    x, y = _select_classes(raw.labels, cfg.classes, k_src, source)
    names = [raw.class_names[c] for c in cfg.classes] if cfg.classes else list(raw.class_names)
    present = np.unique(y)
    if len(present) < 2:  # every prediction would be right: an accuracy of 1.0 that measures nothing
        one = f"of one class ({names[int(present[0])]!r})" if len(present) else "of no class"
        chosen = f" classes={ints_text(cfg.classes)}" if cfg.classes else ""
        raise ConfigError(f"{source}{chosen}: its training images are all {one}; a classifier needs images of at "
                          "least 2 classes")
    src = np.asarray(cfg.classes if cfg.classes else range(k_src))  # relabelled class -> its source label
    if raw.test_pool is None:
        tr, te = stratified_split(y, cfg.test_fraction, cfg.seed, src)
        test_pool, x_te, y_te, x, y = raw.pool, x[te], y[te], x[tr], y[tr]
    else:
        test_pool = raw.test_pool
        x_te, y_te = _select_classes(raw.test_labels, cfg.classes, k_src, source)
    tr, va = stratified_split(y, cfg.val_fraction, cfg.seed + 1, src)
    if cfg.train_per_class is not None:  # each class's own generator, as stratified_split's
        tr = np.sort(np.concatenate([np.random.default_rng([cfg.seed + 2, int(src[c])]).permutation(
            tr[y[tr] == c])[: cfg.train_per_class] for c in range(len(names))]))
    k = len(names)
    described = source + (f" classes={ints_text(cfg.classes)}" if cfg.classes else "")
    shared = {"workers": cfg.workers, "skipped": Skipped(cfg.skip_corrupt), "input": InputStats(),
              "source": described}
    splits = Splits(ImageSet(raw.pool, x[tr], y[tr], k, names, split="train", **shared),
                    ImageSet(raw.pool, x[va], y[va], k, names, split="val", **shared),
                    ImageSet(test_pool, x_te, y_te, k, names, split="test", **shared), described)
    if len(splits.train) == 0 or len(splits.test) == 0:
        raise ConfigError(f"{splits.source}: empty train or test split ({len(splits.train)} train, "
                          f"{len(splits.test)} test images)")
    untrained = _classes_without_training(splits, cfg.classes)
    if untrained:
        raise ConfigError(untrained)
    if cfg.check_data:
        from vitbench.transfer.check import check_splits

        check_splits(splits)
    return splits


NAMED_CLASSES = 10  # a message names at most this many classes (then how many in all)


def class_list(classes, names: list[str], limit: int = NAMED_CLASSES) -> str:
    """"'cat' (0), 'dog' (1), ... (18 in all)": classes (indices) by name, at most `limit` of them, each name cut
    short: a message's size whatever the dataset (a label range 0..65535 of three classes)."""
    classes = [int(c) for c in classes]
    shown = ", ".join(f"{shorten(str(names[c]), 40)} ({c})" for c in classes[:limit])
    return shown + (f", ... ({len(classes)} in all)" if len(classes) > limit else "")


def _classes_without_training(splits: Splits, chosen: list[int] | None) -> str | None:
    """Why `splits` give no classifier worth measuring when some class 0..K-1 has no training image (None: every
    class has one): its head row learns nothing, and a test image of it is wrong whatever the model (an npz
    labelled 0/10/20 made a 21-way head of 18 empty classes; a test split with a class train lacks capped the
    accuracy at 2/3). One rule for every protocol (pretrain, fewshot, finetune), here where they all pass."""
    train = np.bincount(splits.train.labels, minlength=splits.num_classes)
    empty = np.flatnonzero(train == 0)
    if not len(empty):
        return None
    names = splits.train.class_names
    test = np.bincount(splits.test.labels, minlength=splits.num_classes)[empty]
    held = (f"; the test split holds {int(test.sum())} images of {int((test > 0).sum())} of them, which no "
            "classifier trained here gets right" if test.any() else "")
    have = np.flatnonzero(train > 0)
    source_ids = [chosen[c] for c in have] if chosen else have.tolist()
    return (f"{splits.source}: {len(empty)} of its {splits.num_classes} classes have no training images: "
            f"{class_list(empty, names)}{held}. Every class needs training images: add some, or keep the classes "
            f"that have them (data.classes, --classes {clip(ints_text(source_ids), 80)}; a label range with gaps "
            "counts every label in it as a class)")


def warn_oversized_batch(batch_size: int, steps: int, splits: Splits, option: str = "batch_size") -> None:
    """Warn (VitbenchWarning) when a batch is larger than the training set: allowed (`batch_indices` fills it
    from the next epochs), but every step then costs many passes over the data, which a user should hear about
    before the minutes go by. `option`: how the user named the batch size (a CLI option, a config field)."""
    import warnings

    from vitbench.errors import VitbenchWarning

    n = len(splits.train)
    if batch_size <= n:
        return
    warnings.warn(f"{option} {batch_size} is {batch_size / n:.0f}x the {n} training images of {splits.source}: "
                  f"every step sees each image about {batch_size // n} times ({steps} steps x {batch_size} = "
                  f"{steps * batch_size} images per training run); a batch of at most {n} takes a pass per step",
                  VitbenchWarning, stacklevel=3)


def batch_indices(n: int, batch_size: int, steps: int, seed: int) -> np.ndarray:
    """(steps, batch) indices into a set of `n`: consecutive shuffled epochs, the same on every backend.

    A batch larger than the set is filled from the next epoch's permutation (sampling without replacement
    inside an epoch); images seen = steps x batch_size.
    """
    if n <= 0:
        raise ConfigError("cannot draw training batches from an empty split")
    rng = np.random.default_rng(seed)
    need = steps * batch_size
    perms = [rng.permutation(n) for _ in range(-(-need // n))]
    return np.concatenate(perms)[:need].reshape(steps, batch_size)
