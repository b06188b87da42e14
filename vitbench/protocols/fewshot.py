"""Linear few-shot evaluation (paper Sec. 4.1): frozen features, closed-form regularised least squares.

For k shots per class, take the pre-logits representation of k training images of every class, whiten it,
append a constant bias feature, and solve   min_W ||X W - Y||^2 + l2 ||W||^2   with Y in {-1, 1}^K
(one-hot rescaled); predict argmax(X_test W). Same construction as big_vision `evaluators/fewshot_lsr.py`
(whitening, bias constant 100, eigendecomposition of X^T X or X X^T whichever is smaller, so a grid of l2
values costs one decomposition). Accuracy is averaged over several seeds (different k-shot draws).
The regulariser is chosen per draw on the held-out val split of the downstream train set (never on test),
unless fixed in the config.
"""

from __future__ import annotations

import time
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, field_validator

from vitbench.errors import ConfigError, NonFiniteResult, shorten
from vitbench.record import Record, now
from vitbench.transfer.config import MAX_COUNT
from vitbench.transfer.data import load_splits
from vitbench.protocols.downstream import DownstreamConfig
from vitbench.protocols.pretrain import upstream_config, upstream_metrics

BIAS_CONSTANT = 100.0  # big_vision fewshot_lsr.py: a large constant feature, so the bias is ~unregularised
L2_GRID = tuple(2.0**i for i in range(-10, 21, 2))


class LeastSquares:
    """Ridge regression from features to {-1, 1}^K targets, solvable for many l2 at the cost of one eigh."""

    def __init__(self, x: np.ndarray, labels: np.ndarray, num_classes: int):
        x = np.asarray(x, np.float64)
        self.mean = x.mean(0, keepdims=True)
        self.std = x.std(0, keepdims=True) + 1e-5
        xa = self.design(x)
        y = 2.0 * np.eye(num_classes)[labels] - 1.0
        n, d = xa.shape
        if n >= d:  # (X^T X + l2 I)^-1 X^T Y  =  Q (E + l2)^-1 Q^T X^T Y
            self.eigs, q = np.linalg.eigh(xa.T @ xa)
            self.lhs, self.rhs = q, q.T @ (xa.T @ y)
        else:  # X^T (X X^T + l2 I)^-1 Y  =  X^T Q (E + l2)^-1 Q^T Y
            self.eigs, q = np.linalg.eigh(xa @ xa.T)
            self.lhs, self.rhs = xa.T @ q, q.T @ y

    def design(self, x: np.ndarray) -> np.ndarray:
        """Whitened features plus the constant bias column."""
        z = (np.asarray(x, np.float64) - self.mean) / self.std
        return np.pad(z, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)

    def weights(self, l2: float) -> np.ndarray:
        """(D + 1, K) solution for regulariser `l2` (> 0)."""
        return (self.lhs / (self.eigs + l2)[None, :]) @ self.rhs

    def predict(self, x: np.ndarray, l2: float) -> np.ndarray:
        return (self.design(x) @ self.weights(l2)).argmax(1)


def spread(values) -> tuple[float, float | None]:
    """Mean and sample standard deviation (ddof 1; None for a single value: one seed shows no spread, which 0.0
    said was none) of per-seed results.

    The one definition of a row's `accuracy` / `accuracy_std` over seeds, for few-shot draws and fine-tuning
    seeds alike."""
    a = np.asarray(values, dtype=float)
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else None


def kshot_indices(labels: np.ndarray, num_classes: int, shots: int, seed: int) -> np.ndarray:
    """`shots` training indices of every class, drawn by `seed` (nested: a larger k extends a smaller one)."""
    rng = np.random.default_rng(seed)
    out = []
    for c in range(num_classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        if len(idx) < shots:
            raise ConfigError(f"{shots}-shot needs {shots} training images of class {c}, the train split has "
                              f"{len(idx)}; lower `shots` or use more data")
        out.append(idx[:shots])
    return np.concatenate(out)


class FewshotConfig(DownstreamConfig):
    """A few-shot evaluation: the upstream (config or checkpoint), the downstream data, shots and seeds."""

    shots: list[int] = [1, 5, 10, 25]  # paper: 1, 5, 10, 25
    seeds: int = Field(5, ge=1, le=MAX_COUNT)  # k-shot draws per k
    l2_reg: PositiveFloat | Literal["auto"] = "auto"  # "auto": chosen on the val split from L2_GRID

    @field_validator("shots")
    @classmethod
    def _shots(cls, v):
        if not v or any(not 1 <= k <= MAX_COUNT for k in v):
            raise ValueError(f"shots {shorten(v)}: need integers in 1..{MAX_COUNT}, e.g. [1, 5, 10, 25]")
        return sorted(set(v))


def draws(labels: np.ndarray, num_classes: int, shots: list[int], seeds: int) -> dict[tuple[int, int], np.ndarray]:
    """Every (k, seed)'s k-shot training indices (`kshot_indices`): all the few-shot protocol reads of train."""
    return {(k, s): kshot_indices(labels, num_classes, k, s) for k in shots for s in range(seeds)}


def evaluate_features(train: tuple[np.ndarray, np.ndarray], val: tuple[np.ndarray, np.ndarray],
                      test: tuple[np.ndarray, np.ndarray], num_classes: int, shots: list[int], seeds: int,
                      l2_reg: float | str = "auto", train_rows: np.ndarray | None = None) -> tuple[dict, dict]:
    """Few-shot accuracies from precomputed features. Returns (metrics, raw per-seed results).

    `train` = (features, labels of the whole train split); `train_rows`: the sorted train indices whose
    features the rows hold (None: every index), so only the images the draws use need features."""
    (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = train, val, test
    rows = np.arange(len(y_tr)) if train_rows is None else np.asarray(train_rows)
    grid = L2_GRID if l2_reg == "auto" else (float(l2_reg),)
    if l2_reg == "auto" and len(y_va) == 0:
        raise ConfigError("few-shot l2_reg 'auto' needs a val split (data.val_fraction > 0); or fix l2_reg")
    metrics: dict = {}
    raw: dict = {"per_seed": {}, "l2": {}}
    for k in shots:
        accs, chosen = [], []
        for s in range(seeds):
            idx = kshot_indices(y_tr, num_classes, k, s)
            ls = LeastSquares(x_tr[np.searchsorted(rows, idx)], y_tr[idx], num_classes)
            if len(grid) > 1:
                val_acc = [np.mean(ls.predict(x_va, l2) == y_va) for l2 in grid]
                l2 = grid[int(np.argmax(val_acc))]
            else:
                l2 = grid[0]
            accs.append(float(np.mean(ls.predict(x_te, l2) == y_te)))
            chosen.append(l2)
        metrics[f"accuracy_{k}shot"], metrics[f"accuracy_{k}shot_std"] = spread(accs)
        raw["per_seed"][str(k)] = accs
        raw["l2"][str(k)] = chosen
    k_main = max(shots)
    metrics["accuracy"] = metrics[f"accuracy_{k_main}shot"]  # the row's headline: the largest k
    metrics["accuracy_std"] = metrics[f"accuracy_{k_main}shot_std"]
    metrics["shots"] = k_main
    metrics["chance_accuracy"] = float(np.max(np.bincount(y_te, minlength=num_classes)) / len(y_te))
    return metrics, raw


def kshot_features(be, model, splits, r: int, shots: list[int], seeds: int, name: str
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train labels, the train rows the k-shot draws use, their features): only those images are decoded.
    A corrupt file skipped under data.skip_corrupt leaves the pool (its label becomes -1) and the draws are
    made again, until every drawn image has features."""
    from vitbench.transfer import ops

    labels = splits.train.labels.copy()
    done: dict[int, np.ndarray] = {}
    while True:
        counts = np.bincount(labels[labels >= 0], minlength=splits.num_classes)
        if counts.min() < max(shots):  # counts are of images not yet found corrupt: the class's rest is read
            c = int(counts.argmin())  # to say how many are readable, not how many might be
            rest = np.asarray([i for i in np.flatnonzero(labels == c) if i not in done], np.int64)
            read = splits.train.batches(r, 256, rest)
            readable = int(counts[c]) - len(rest) + sum(len(kept) for *_, kept in read)
            raise ConfigError(f"{max(shots)}-shot needs {max(shots)} training images per class; the train split "
                              f"of {splits.source} has {readable} readable ones for class {c} "
                              f"({splits.train.class_names[c]!r}; {len(splits.skipped)} corrupt files skipped)")
        need = np.unique(np.concatenate(list(draws(labels, splits.num_classes, shots, seeds).values())))
        todo = np.asarray([i for i in need if i not in done], np.int64)
        if not len(todo):
            break
        got = np.zeros(0, np.int64)
        for x, _, kept in splits.train.batches(r, 256, todo):
            if len(x):
                f = ops.check_finite(be.features(model, x), f"{name}'s features of the train split")
                done.update(zip(kept.tolist(), np.asarray(f, np.float64)))
            got = np.concatenate([got, kept])
        labels[np.setdiff1d(todo, got)] = -1  # skipped: out of the draws
    rows = np.asarray(sorted(done), np.int64)
    return labels, rows, np.stack([done[i] for i in rows.tolist()])


def fewshot(cfg: FewshotConfig, *, device: str = "cpu", threads: int | None = None,
            cache: str | None = None) -> Record:
    """Run the few-shot protocol on `cfg`'s upstream; return a record of kind 'fewshot'."""
    from vitbench.backends.base import transfer_backend
    from vitbench.env import environment
    from vitbench.transfer import ops

    started = now()
    splits = load_splits(cfg.data)  # data problems first, before any pre-training
    counts = splits.train.per_class_counts()
    if min(counts) < max(cfg.shots):
        # the class by its name: its relabelled index read as another class (3 for digit '8' of classes 5-9)
        raise ConfigError(f"{max(cfg.shots)}-shot needs {max(cfg.shots)} training images per class; the train "
                          f"split of {splits.source} has {min(counts)} for class "
                          f"{splits.train.class_names[counts.index(min(counts))]!r}: shots up to {min(counts)}")
    if cfg.l2_reg == "auto" and len(splits.val) == 0:
        raise ConfigError("few-shot l2_reg 'auto' needs a val split (data.val_fraction > 0); or fix l2_reg")
    splits.warn_uncovered("the l2 regulariser" if cfg.l2_reg == "auto" else None)
    ckpt, backend = cfg.start(directory=cache, device=device, threads=threads)
    spec = ckpt.spec
    r = ckpt.resolution if cfg.resolution is None else cfg.resolution
    spec.check_resolution(r)
    be = transfer_backend(backend)
    info = be.setup(device, threads)
    # Features do not touch the head (from_weights zero-initialises it); position embeddings are resampled
    # if `r` differs from the upstream resolution.
    model = ops.from_weights(be, spec, ckpt.weights, r, ckpt.num_classes or 1, seed=0)  # 0: no classifier
    t0 = time.perf_counter()
    labels, rows, train_feats = kshot_features(be, model, splits, r, cfg.shots, cfg.seeds, spec.name)
    feats = [(ops.check_finite(f, f"{spec.name}'s features of the {name} split"), y) for name, (f, y) in
             (("val", ops.embed(be, model, splits.val, r)), ("test", ops.embed(be, model, splits.test, r)))]
    embed_s = time.perf_counter() - t0
    try:
        metrics, raw = evaluate_features((train_feats, labels), *feats, splits.num_classes, cfg.shots, cfg.seeds,
                                         cfg.l2_reg, train_rows=rows)
    except np.linalg.LinAlgError as e:  # features too large or degenerate for the closed form
        raise NonFiniteResult(f"few-shot regression on {spec.name}'s features failed ({e}); no result is "
                              "written") from None
    metrics.update(upstream_metrics(ckpt))
    metrics.update({"feature_dim": int(train_feats.shape[1]), "embed_s": embed_s,
                    "embedded_images": len(rows) + len(feats[0][1]) + len(feats[1][1]),
                    "skipped_files": len(splits.skipped), **splits.train.input.metrics(), **splits.row_fields()})
    splits.warn_skipped()
    config = {"model": spec.name, "backend": backend, "resolution": r, "device": device,
              **cfg.recorded(),
              **upstream_config(ckpt)}
    return Record.measured("fewshot", config, metrics=metrics, raw=raw, env=environment(info), started_at=started)
