"""Model operations of the transfer protocols, written once over any backend's transfer primitives.

A backend with Capability.TRANSFER (vitbench.backends.base.transfer_backend) implements init_model, weights, load_weights, train, features and logits
(vitbench.backends.base.Backend); these functions build the paper's transfer start and evaluate on top of them.
Data crosses as numpy: images float32 NHWC in [-1, 1], labels int64, weights {timm parameter name: float32}.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vitbench.errors import ConfigError, NonFiniteResult, TrainingDiverged
from vitbench.models.posemb_resize import resize_pos_embeds
from vitbench.models.specs import ModelSpec
from vitbench.transfer.data import ImageSet


def from_weights(backend, spec: ModelSpec, weights: dict[str, np.ndarray], resolution: int, num_classes: int,
                 seed: int) -> Any:
    """The paper's transfer start: upstream body, head removed and replaced by a zero-initialised one.

    Position embeddings are resized when `resolution` changes the token grid (2-D interpolated; the class token, and a
    distilled model's distillation token, kept).
    """
    from vitbench.models.checkpoints import is_head

    model = backend.init_model(spec, resolution, num_classes, seed)
    fresh = backend.weights(model)
    body = {k: v for k, v in weights.items() if not is_head(k, spec)}  # both heads of a distilled model
    missing = sorted(set(fresh) - set(body) - {k for k in fresh if is_head(k, spec)})
    unexpected = sorted(set(body) - set(fresh))
    if missing or unexpected:
        raise ConfigError(f"checkpoint does not match {spec.name}: missing {missing[:5]}, "
                          f"unexpected {unexpected[:5]}")
    # position embeddings of every kind to the new grid (vitbench.models.posemb_resize; relative ones refused)
    body = resize_pos_embeds(body, {k: tuple(v.shape) for k, v in fresh.items()}, spec)
    for k, v in body.items():
        if v.shape != fresh[k].shape:
            raise ConfigError(f"checkpoint {k} has shape {v.shape}, {spec.name} expects {fresh[k].shape}")
    head = {k: np.zeros_like(v) for k, v in fresh.items() if is_head(k, spec)}  # zero-init head(s)
    return backend.load_weights(model, {**body, **head})


def outputs(fn, data: ImageSet, resolution: int, batch_size: int = 256, rows: np.ndarray | None = None,
            width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(fn(x) of `rows` of `data` (default all), stacked; the labels of the rows computed). The images stream
    in batches (vitbench.transfer.data.ImageSet.batches): corrupt files skipped under data.skip_corrupt are
    absent from both, so outputs and labels stay aligned. Rows asked for and none readable: a ConfigError naming
    the split (an evaluation of no image is no number)."""
    out, labels = [], []
    for x, y, _ in data.batches(resolution, batch_size, rows):
        if len(x):
            out.append(np.asarray(fn(x)))
            labels.append(y)
    if not out:
        asked = len(data) if rows is None else len(rows)
        if asked:
            raise data.unreadable(asked)
        return np.zeros((0, width or 0), np.float32), np.zeros(0, np.int64)
    return np.concatenate(out), np.concatenate(labels)


def predict(backend, model: Any, data: ImageSet, resolution: int, batch_size: int = 256
            ) -> tuple[np.ndarray, np.ndarray]:
    """(logits, labels) of the images of `data` that decode (all of them unless data.skip_corrupt)."""
    return outputs(lambda x: backend.logits(model, x), data, resolution, batch_size, width=data.num_classes)


def predict_all(backend, model: Any, data: ImageSet, resolution: int, what: str) -> np.ndarray:
    """Logits of every image of `data`, row for row (a table indexed by position: a teacher's); a split with
    skipped corrupt files cannot give one."""
    logits, labels = predict(backend, model, data, resolution)
    if len(labels) != len(data):
        raise ConfigError(f"{what} needs every image of the split; {len(data) - len(labels)} corrupt files were "
                          f"skipped ({', '.join(list(data.skipped.files)[:3])}): fix or remove them")
    return logits


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy (0..1) of `logits` (N, K) against `labels` (nan on no images)."""
    return float(np.mean(logits.argmax(1) == labels)) if len(labels) else float("nan")


def accuracy(backend, model: Any, data: ImageSet, resolution: int, batch_size: int = 256) -> float:
    """Top-1 accuracy (0..1) on `data`; NonFiniteResult where a logit is NaN or infinite (argmax would still
    pick a class: a NaN image scored as if it were one)."""
    if len(data) == 0:
        return float("nan")
    logits, labels = predict(backend, model, data, resolution, batch_size)
    return top1(check_finite(logits, f"logits of {len(labels)} images"), labels)


def embed(backend, model: Any, data: ImageSet, resolution: int, batch_size: int = 256,
          rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(features float64, labels) of `rows` of `data` (default all) that decode."""
    feats, labels = outputs(lambda x: backend.features(model, x), data, resolution, batch_size, rows)
    return feats.astype(np.float64), labels


def divergence(losses: list[float], weights: dict[str, np.ndarray]) -> tuple[int | None, str] | None:
    """Why a finished training run diverged, or None: (first step with a non-finite loss, 1-based; None when
    only the weights show it) and a description. Read after the loop from the losses it kept: no sync is added
    to the steps."""
    bad = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    if bad is not None:
        return bad + 1, f"the loss is {losses[bad]} at step {bad + 1} of {len(losses)}"
    names = [k for k, v in weights.items() if not np.isfinite(v).all()]
    if names:
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return None, f"non-finite weights ({shown}) after {len(losses)} steps"
    return None


def check_trained(losses: list[float], weights: dict[str, np.ndarray], what: str, hint: str) -> None:
    """TrainingDiverged naming `what` (the run) and `hint` (the way out) when the run diverged."""
    d = divergence(losses, weights)
    if d is not None:
        raise TrainingDiverged(f"{what} diverged: {d[1]}; nothing was saved. {hint}", step=d[0])


def check_finite(values: np.ndarray, what: str) -> np.ndarray:
    """`values` if every one is finite, else NonFiniteResult naming `what` (features, logits)."""
    values = np.asarray(values)
    if not np.isfinite(values).all():
        n = int(values.size - np.isfinite(values).sum())
        raise NonFiniteResult(f"{what}: {n} of {values.size} values are NaN or infinite; no result is written")
    return values
