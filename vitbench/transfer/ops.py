"""Model operations of the transfer protocols, written once over any backend's transfer primitives.

A backend with Capability.TRANSFER implements init_model, weights, load_weights, train, features and logits
(vitbench.backends.base.Backend); these functions build the paper's transfer start and evaluate on top of them.
Data crosses as numpy: images float32 NHWC in [-1, 1], labels int64, weights {timm parameter name: float32}.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitbench.errors import ConfigError
from vitbench.models.posemb_resize import resize_pos_embeds
from vitbench.models.specs import ModelSpec
from vitbench.transfer.data import ImageSet


def transfer_backend(name: str):
    """The named backend, set up for transfer (a backend without Capability.TRANSFER is a ConfigError)."""
    from vitbench.backends.base import Capability, backend_spec, get_backend

    if Capability.TRANSFER not in backend_spec(name).capabilities:
        raise ConfigError(f"backend {name!r} does not implement transfer (pre-training, features, fine-tuning)")
    return get_backend(name)


def from_weights(backend, spec: ModelSpec, weights: dict[str, np.ndarray], resolution: int, num_classes: int,
                 seed: int) -> Any:
    """The paper's transfer start: upstream body, head removed and replaced by a zero-initialised one.

    Position embeddings are resized when `resolution` changes the token grid (2-D interpolated; the class token, and a
    distilled model's distillation token, kept).
    """
    from vitbench.models.checkpoints import is_head

    model = backend.init_model(spec, resolution, num_classes, seed)
    fresh = backend.weights(model)
    body = {k: v for k, v in weights.items() if not is_head(k)}  # both heads of a distilled model
    missing = sorted(set(fresh) - set(body) - {k for k in fresh if is_head(k)})
    unexpected = sorted(set(body) - set(fresh))
    if missing or unexpected:
        raise ConfigError(f"checkpoint does not match {spec.name}: missing {missing[:5]}, "
                          f"unexpected {unexpected[:5]}")
    # position embeddings of every kind to the new grid (vitbench.models.posemb_resize; relative ones refused)
    body = resize_pos_embeds(body, {k: tuple(v.shape) for k, v in fresh.items()}, spec)
    for k, v in body.items():
        if v.shape != fresh[k].shape:
            raise ConfigError(f"checkpoint {k} has shape {v.shape}, {spec.name} expects {fresh[k].shape}")
    head = {k: np.zeros_like(v) for k, v in fresh.items() if is_head(k)}  # zero-init head(s)
    return backend.load_weights(model, {**body, **head})


def _batches(data: ImageSet, resolution: int, batch_size: int):
    for i in range(0, len(data), batch_size):
        yield data.batch(np.arange(i, min(i + batch_size, len(data))), resolution)[0]


def predict(backend, model: Any, data: ImageSet, resolution: int, batch_size: int = 256) -> np.ndarray:
    out = [backend.logits(model, x) for x in _batches(data, resolution, batch_size)]
    return np.concatenate(out) if out else np.zeros((0, data.num_classes), np.float32)


def accuracy(backend, model: Any, data: ImageSet, resolution: int, batch_size: int = 256) -> float:
    """Top-1 accuracy (0..1) on `data`."""
    if len(data) == 0:
        return float("nan")
    return float(np.mean(predict(backend, model, data, resolution, batch_size).argmax(1) == data.labels))


def embed(backend, model: Any, data: ImageSet, resolution: int, batch_size: int = 256) -> np.ndarray:
    out = [backend.features(model, x) for x in _batches(data, resolution, batch_size)]
    return np.concatenate(out).astype(np.float64)
