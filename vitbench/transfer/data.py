"""Image classification datasets for transfer studies, all from local files (nothing is downloaded).

Sources (`DataConfig.name`):
- `digits`   scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes): the offline default.
- `synthetic` class-conditional noisy patterns, for speed runs and tests only (no real-world meaning).
- `folder`   `root/<class>/*.png|jpg|jpeg`, or `root/train/<class>/...` + `root/test/<class>/...`.
- `cifar10` / `cifar100`  the CIFAR python-pickle layout (`data_batch_1..5` + `test_batch`, or `train` +
             `test`), read with a restricted unpickler (vitbench.transfer.safe_pickle).
- `npz`      `x_train, y_train, x_test, y_test` or `x, y` arrays, read with `allow_pickle=False`.

Images are kept at their stored size (uint8 in [0, 255] or float32 in [0, 1], NHWC) and preprocessed per
batch as in the paper's input pipeline (vit_jax `input_pipeline.py`): resize to the model resolution, then
scale values to [-1, 1]. Splits are stratified and deterministic in `seed`; `classes` picks a subset and
relabels it 0..K-1, so one dataset can give a disjoint upstream/downstream pair (e.g. digits 0-4 / 5-9).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from vitbench.errors import ConfigError, UnsafeFileError, shorten
from vitbench.transfer.config import MAX_COUNT, PATH_DATASETS, DatasetName, Seed

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_CACHE_LIMIT_BYTES = 256 * 2**20  # keep a preprocessed copy of a split only while it is this small


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
class DataConfig(BaseModel):
    """Which images, which classes, how to split. JSON-able; part of a trial's key."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: DatasetName = "digits"  # vitbench.transfer.config.DatasetName
    path: str | None = None  # folder / cifar / npz: a local path
    classes: list[int] | None = None  # subset of source labels, relabelled 0..K-1 in this order; "0-4" ok
    seed: Seed = 0  # split seed
    val_fraction: float = Field(0.1, ge=0.0, lt=1.0)  # of train, held out (fine-tuning LR choice, few-shot L2)
    test_fraction: float = Field(0.25, gt=0.0, lt=1.0)  # used only when the source has no test split
    train_per_class: int | None = Field(None, ge=1, le=MAX_COUNT)  # cap train images per class (data-size scaling)
    # synthetic only
    synthetic_images: int = Field(600, ge=10)
    synthetic_classes: int = Field(10, ge=2)
    synthetic_size: int = Field(16, ge=2)

    @field_validator("path")
    @classmethod
    def _path_fits_dataset(cls, v, info):
        """A path only for datasets read from one, and one for each of them (never silently ignored)."""
        name = info.data.get("name")
        if name is not None and name not in PATH_DATASETS and v is not None:
            raise ValueError(f"dataset {name!r} takes no path (it ships with the code); a path is for "
                             f"{', '.join(PATH_DATASETS)}")
        return v

    @field_validator("classes", mode="before")
    @classmethod
    def _parse_classes(cls, v):
        """Accept a list, 'a-b' (inclusive range), or 'a,b,c'."""
        if isinstance(v, str):
            try:
                if "-" in v:
                    a, b = (int(t) for t in v.split("-"))
                    return list(range(a, b + 1))
                return [int(t) for t in v.split(",") if t.strip()]
            except ValueError:
                raise ValueError(f"classes {shorten(v)}: expected a list of ints, 'a-b' or 'a,b,c'") from None
        return v

    @field_validator("classes")
    @classmethod
    def _unique(cls, v):
        if v is not None and (len(set(v)) != len(v) or len(v) < 2):
            raise ValueError(f"classes {shorten(v)}: need at least 2 distinct labels")
        return v


# ---------------------------------------------------------------------------------------------
# Preprocessing (backend-free, so torch and JAX see identical inputs)
# ---------------------------------------------------------------------------------------------
def resize_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) bilinear interpolation matrix, half-pixel centres, antialiased when shrinking.

    Same filter as PIL's BILINEAR resize and torch `interpolate(..., 'bilinear', antialias=True)`: a
    triangle kernel whose support is stretched by the shrink factor; edges renormalised (clamp to edge).
    """
    scale = n_in / n_out
    support = max(scale, 1.0)
    centres = (np.arange(n_out) + 0.5) * scale
    pos = np.arange(n_in) + 0.5
    w = np.maximum(0.0, 1.0 - np.abs(pos[None, :] - centres[:, None]) / support)
    return w / w.sum(axis=1, keepdims=True)


def preprocess(images: np.ndarray, resolution: int) -> np.ndarray:
    """uint8 [0,255] or float [0,1] NHWC (C = 1 or 3) -> float32 (N, r, r, 3) in [-1, 1] (paper pipeline)."""
    x = images.astype(np.float32)
    x = x / 255.0 if images.dtype == np.uint8 else x
    n, h, w, c = x.shape
    if (h, w) != (resolution, resolution):
        wy = resize_weights(h, resolution).astype(np.float32)
        wx = resize_weights(w, resolution).astype(np.float32)
        x = np.einsum("ih,nhwc,jw->nijc", wy, x, wx, optimize=True)
    if c == 1:
        x = np.repeat(x, 3, axis=-1)
    return np.ascontiguousarray(x * 2.0 - 1.0, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# Containers
# ---------------------------------------------------------------------------------------------
@dataclass
class ImageSet:
    """Images (N, H, W, C) uint8 or float32-in-[0,1] and int64 labels in 0..num_classes-1."""

    images: np.ndarray
    labels: np.ndarray
    num_classes: int
    class_names: list[str]
    _cache: dict = field(default_factory=dict, repr=False)

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, idx: np.ndarray) -> ImageSet:
        return ImageSet(self.images[idx], self.labels[idx], self.num_classes, self.class_names)

    def array(self, resolution: int) -> np.ndarray:
        """The whole set preprocessed at `resolution` (cached while small)."""
        if resolution in self._cache:
            return self._cache[resolution]
        out = np.concatenate([preprocess(self.images[i:i + 512], resolution)
                              for i in range(0, len(self), 512)]) if len(self) else \
            np.zeros((0, resolution, resolution, 3), np.float32)
        if out.nbytes <= _CACHE_LIMIT_BYTES:
            self._cache[resolution] = out
        return out

    def batch(self, idx: np.ndarray, resolution: int) -> tuple[np.ndarray, np.ndarray]:
        """(images float32 (B, r, r, 3) in [-1, 1], labels int64 (B,)) for indices `idx`."""
        n_bytes = len(self) * resolution * resolution * 3 * 4
        if resolution in self._cache or n_bytes <= _CACHE_LIMIT_BYTES:
            return self.array(resolution)[idx], self.labels[idx]
        return preprocess(self.images[idx], resolution), self.labels[idx]

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

    def summary(self) -> dict:
        return {"source": self.source, "num_classes": self.num_classes, "train": len(self.train),
                "val": len(self.val), "test": len(self.test),
                "image_shape": list(self.train.images.shape[1:])}


# ---------------------------------------------------------------------------------------------
# Sources -> (pool images, pool labels, class names) or explicit train/test
# ---------------------------------------------------------------------------------------------
@dataclass
class _Raw:
    images: np.ndarray
    labels: np.ndarray
    class_names: list[str]
    test_images: np.ndarray | None = None
    test_labels: np.ndarray | None = None


def _digits() -> _Raw:
    from sklearn.datasets import load_digits

    d = load_digits()
    images = (d.images.astype(np.float32) / 16.0)[..., None]  # 0..16 grey levels -> [0, 1], (N, 8, 8, 1)
    return _Raw(images, d.target.astype(np.int64), [str(t) for t in d.target_names])


def _synthetic(cfg: DataConfig) -> _Raw:
    """Each class: a fixed random low-frequency pattern; images = pattern + noise. Learnable, meaningless."""
    rng = np.random.default_rng(12345)  # the classes' patterns do not depend on the split seed
    k, s, n = cfg.synthetic_classes, cfg.synthetic_size, cfg.synthetic_images
    coarse = rng.uniform(0, 1, size=(k, 4, 4, 3)).astype(np.float32)
    up = resize_weights(4, s).astype(np.float32)
    patterns = np.einsum("ih,khwc,jw->kijc", up, coarse, up)
    labels = np.arange(n) % k
    noise = np.random.default_rng(54321).normal(0, 0.15, size=(n, s, s, 3)).astype(np.float32)
    images = np.clip(patterns[labels] + noise, 0, 1).astype(np.float32)
    return _Raw(images, labels.astype(np.int64), [f"class{i}" for i in range(k)])


def _require_path(cfg: DataConfig, layout: str) -> Path:
    if not cfg.path:
        raise ConfigError(f"data.path is required for dataset {cfg.name!r}; expected {layout}")
    p = Path(cfg.path).expanduser()
    if not p.exists():
        raise ConfigError(f"data.path {str(p)!r} does not exist; dataset {cfg.name!r} expects {layout}")
    return p


_FOLDER_LAYOUT = "a directory root/<class>/*.png|jpg (or root/train/<class>/..., root/test/<class>/...)"


def _class_dirs(root: Path) -> list[Path]:
    return sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))


def _read_folder(root: Path, class_names: list[str] | None = None
                 ) -> tuple[list[np.ndarray], list[int], list[str]]:
    from PIL import Image

    dirs = _class_dirs(root)
    names = class_names or [d.name for d in dirs]
    if class_names is not None:
        missing = [d.name for d in dirs if d.name not in names]
        if missing:
            raise ConfigError(f"{root}: class folders {missing} are not in the train classes {names}")
    images, labels = [], []
    for d in dirs:
        files = sorted(f for f in d.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        for f in files:
            try:
                with Image.open(f) as im:
                    images.append(np.asarray(im.convert("RGB"), dtype=np.uint8))
            except OSError as e:
                raise ConfigError(f"{f}: cannot be read as an image ({e}); expected {_FOLDER_LAYOUT}") from e
            labels.append(names.index(d.name))
    return images, labels, names


def _stack_images(images: list[np.ndarray]) -> np.ndarray:
    """Stack decoded images; mixed sizes are resized (bilinear) to the most common size."""
    sizes = Counter(im.shape[:2] for im in images)
    (h, w), _ = sizes.most_common(1)[0]
    if len(sizes) > 1:
        from PIL import Image

        images = [im if im.shape[:2] == (h, w) else
                  np.asarray(Image.fromarray(im).resize((w, h), Image.BILINEAR), dtype=np.uint8) for im in images]
    return np.stack(images)


def _folder(cfg: DataConfig) -> _Raw:
    root = _require_path(cfg, _FOLDER_LAYOUT)
    if not root.is_dir():
        raise ConfigError(f"data.path {str(root)!r} is not a directory; expected {_FOLDER_LAYOUT}")
    has_split = (root / "train").is_dir() and (root / "test").is_dir()
    train_root = root / "train" if has_split else root
    if not _class_dirs(train_root):
        raise ConfigError(f"{train_root}: no class sub-directories found; expected {_FOLDER_LAYOUT}")
    images, labels, names = _read_folder(train_root)
    if not images:
        raise ConfigError(f"{train_root}: no .png/.jpg images in the class folders; expected {_FOLDER_LAYOUT}")
    if not has_split:
        return _Raw(_stack_images(images), np.asarray(labels, np.int64), names)
    t_images, t_labels, _ = _read_folder(root / "test", names)
    if not t_images:
        raise ConfigError(f"{root / 'test'}: no images; expected {_FOLDER_LAYOUT}")
    x = _stack_images(images + t_images)
    return _Raw(x[: len(images)], np.asarray(labels, np.int64), names, x[len(images):],
                np.asarray(t_labels, np.int64))


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
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072 or len(labels) != len(data):
        raise ConfigError(f"{path}: 'data' must be uint8 (N, 3072) with N labels, got {data.dtype} "
                          f"{data.shape} and {len(labels)} labels; {layout}")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), np.asarray(labels, np.int64)


def _cifar(cfg: DataConfig) -> _Raw:
    layout = _CIFAR_LAYOUT[cfg.name]
    root = _require_path(cfg, layout)
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
    if y.min() < 0 or max(y.max(), y_test.max()) >= k:
        raise ConfigError(f"{root}: labels outside 0..{k - 1}; is this {cfg.name}? expected {layout}")
    return _Raw(np.concatenate([p[0] for p in parts]), y, names, x_test, y_test)


_NPZ_LAYOUT = ("an .npz file with arrays x_train, y_train, x_test, y_test (or x, y): images (N, H, W) or "
               "(N, H, W, 1|3) as uint8 [0, 255] or float [0, 1], integer labels (N,)")


def _npz_images(x: np.ndarray, name: str, path: Path) -> np.ndarray:
    if x.ndim == 3:
        x = x[..., None]
    if x.ndim != 4 or x.shape[-1] not in (1, 3):
        raise ConfigError(f"{path}: array {name!r} has shape {x.shape}; expected {_NPZ_LAYOUT}")
    if x.dtype == np.uint8:
        return x
    if not np.issubdtype(x.dtype, np.floating) or x.size and (x.min() < 0 or x.max() > 1):
        raise ConfigError(f"{path}: array {name!r} is {x.dtype} with range outside [0, 1]; expected {_NPZ_LAYOUT}")
    return x.astype(np.float32)


def _npz(cfg: DataConfig) -> _Raw:
    path = _require_path(cfg, _NPZ_LAYOUT)
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except ValueError as e:
        if "allow_pickle" in str(e):
            raise UnsafeFileError(f"{path}: contains object arrays that need unpickling; refused. "
                                  f"Expected {_NPZ_LAYOUT}") from e
        raise ConfigError(f"{path}: not a readable .npz ({e}); expected {_NPZ_LAYOUT}") from e
    except (OSError, EOFError) as e:
        raise ConfigError(f"{path}: not a readable .npz ({e}); expected {_NPZ_LAYOUT}") from e
    if {"x_train", "y_train", "x_test", "y_test"} <= arrays.keys():
        names = ("x_train", "y_train", "x_test", "y_test")
    elif {"x", "y"} <= arrays.keys():
        names = ("x", "y", None, None)
    else:
        raise ConfigError(f"{path}: has arrays {sorted(arrays)}; expected {_NPZ_LAYOUT}")
    out = []
    for xi, yi in (names[:2], names[2:]):
        if xi is None:
            out += [None, None]
            continue
        x, y = _npz_images(arrays[xi], xi, path), arrays[yi]
        if y.ndim != 1 or len(y) != len(x) or not np.issubdtype(y.dtype, np.integer):
            raise ConfigError(f"{path}: {yi!r} must be integer labels of length {len(x)}; got {y.dtype} {y.shape}")
        out += [x, y.astype(np.int64)]
    k = int(max(out[1].max(), out[3].max() if out[3] is not None else 0)) + 1
    if out[1].min() < 0:
        raise ConfigError(f"{path}: negative labels; expected {_NPZ_LAYOUT}")
    return _Raw(out[0], out[1], [str(i) for i in range(k)], out[2], out[3])


def _raw(cfg: DataConfig) -> _Raw:
    if cfg.name == "digits":
        return _digits()
    if cfg.name == "synthetic":
        return _synthetic(cfg)
    if cfg.name == "folder":
        return _folder(cfg)
    if cfg.name in ("cifar10", "cifar100"):
        return _cifar(cfg)
    return _npz(cfg)


# ---------------------------------------------------------------------------------------------
# Splitting
# ---------------------------------------------------------------------------------------------
def stratified_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (keep, held_out): round(fraction * n_c) of every class held out (at least 1 if the class has 2+)."""
    rng = np.random.default_rng(seed)
    keep, held = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_out = int(round(fraction * len(idx)))
        if fraction > 0 and len(idx) >= 2:
            n_out = min(max(n_out, 1), len(idx) - 1)
        held.append(idx[:n_out])
        keep.append(idx[n_out:])
    return np.sort(np.concatenate(keep)), np.sort(np.concatenate(held))


def _select_classes(x: np.ndarray, y: np.ndarray, classes: list[int] | None, k: int, source: str):
    if classes is None:
        return x, y
    bad = [c for c in classes if not 0 <= c < k]
    if bad:
        raise ConfigError(f"data.classes {bad} out of range for {source} (labels 0..{k - 1})")
    remap = np.full(k, -1, np.int64)
    remap[classes] = np.arange(len(classes))
    keep = remap[y] >= 0
    return x[keep], remap[y[keep]]


def load_splits(cfg: DataConfig | dict | None = None) -> Splits:
    """Load `cfg`'s source and split it into train / val / test (stratified, deterministic in `cfg.seed`).

    The test split is the source's own when it has one, else `test_fraction` of the pool; val is
    `val_fraction` of what remains for training. `classes` selects and relabels before splitting.
    """
    cfg = cfg if isinstance(cfg, DataConfig) else DataConfig.model_validate(cfg or {})
    raw = _raw(cfg)
    k_src = len(raw.class_names)
    source = cfg.name + (f":{cfg.path}" if cfg.path else "")
    x, y = _select_classes(raw.images, raw.labels, cfg.classes, k_src, source)
    names = [raw.class_names[c] for c in cfg.classes] if cfg.classes else list(raw.class_names)
    if raw.test_images is None:
        tr, te = stratified_split(y, cfg.test_fraction, cfg.seed)
        x_te, y_te, x, y = x[te], y[te], x[tr], y[tr]
    else:
        x_te, y_te = _select_classes(raw.test_images, raw.test_labels, cfg.classes, k_src, source)
    tr, va = stratified_split(y, cfg.val_fraction, cfg.seed + 1)
    if cfg.train_per_class is not None:
        rng = np.random.default_rng(cfg.seed + 2)
        tr = np.sort(np.concatenate([rng.permutation(tr[y[tr] == c])[: cfg.train_per_class]
                                     for c in range(len(names))]))
    k = len(names)
    splits = Splits(ImageSet(x[tr], y[tr], k, names), ImageSet(x[va], y[va], k, names),
                    ImageSet(x_te, y_te, k, names),
                    source + (f" classes={cfg.classes}" if cfg.classes else ""))
    if len(splits.train) == 0 or len(splits.test) == 0:
        raise ConfigError(f"{splits.source}: empty train or test split ({splits.summary()})")
    return splits


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
