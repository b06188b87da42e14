"""What a framework must provide for transfer studies: build, load, train, features, logits.

The protocols (pretrain.py, fewshot.py, finetune.py) are written once against this interface; the torch and
JAX engines implement it. Data crosses the boundary as numpy: images float32 (N, r, r, 3) in [-1, 1] (NHWC,
the engine transposes if it needs to), labels int64, weights as {timm parameter name: float32 array}.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from vitbench.models.specs import ModelSpec
from vitbench.transfer.data import ImageSet
from vitbench.models.convert import resample_pos_embed
from vitbench.transfer.schedules import OptimConfig

ENGINES: tuple[str, ...] = ("torch", "jax")


class TransferEngine(ABC):
    name: str = "?"
    compile_s: float = 0.0  # seconds spent compiling (JAX AOT) since setup; never inside a training time

    @abstractmethod
    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        """Select device/threads; return what was resolved (for the record's env)."""

    @abstractmethod
    def init_model(self, spec: ModelSpec, resolution: int, num_classes: int, seed: int) -> Any:
        """A freshly initialised model (the framework's own init, seeded)."""

    @abstractmethod
    def weights(self, model: Any) -> dict[str, np.ndarray]:
        """All parameters (and buffers) in timm naming, float32 numpy."""

    @abstractmethod
    def load_weights(self, model: Any, weights: dict[str, np.ndarray]) -> Any:
        """Return `model` with `weights` (timm naming) loaded; every model parameter must be given."""

    @abstractmethod
    def train(self, model: Any, data: ImageSet, resolution: int, opt: OptimConfig, batch_size: int,
              seed: int) -> tuple[Any, list[float]]:
        """Run `opt.steps` updates on batches from `data`; return (model, loss per step)."""

    @abstractmethod
    def features(self, model: Any, x: np.ndarray) -> np.ndarray:
        """Pre-logits representation (class token after the final norm / pooled ResNet features), (N, D)."""

    @abstractmethod
    def logits(self, model: Any, x: np.ndarray) -> np.ndarray:
        """(N, num_classes) float32."""

    # ---- shared on top of the primitives ---------------------------------------------------------------
    def from_weights(self, spec: ModelSpec, weights: dict[str, np.ndarray], resolution: int,
                     num_classes: int, seed: int) -> Any:
        """The paper's transfer start: upstream body, head removed and replaced by a zero-initialised one.

        Position embeddings are 2-D interpolated when `resolution` changes the token grid (class token kept).
        """
        model = self.init_model(spec, resolution, num_classes, seed)
        fresh = self.weights(model)
        body = {k: v for k, v in weights.items() if not k.startswith("head.")}
        if "pos_embed" in body and body["pos_embed"].shape != fresh["pos_embed"].shape:
            new_grid = math.isqrt(fresh["pos_embed"].shape[1] - 1)
            body["pos_embed"] = resample_pos_embed(body["pos_embed"], new_grid)  # class token kept
        missing = sorted(set(fresh) - set(body) - {k for k in fresh if k.startswith("head.")})
        unexpected = sorted(set(body) - set(fresh))
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match {spec.name}: missing {missing[:5]}, "
                             f"unexpected {unexpected[:5]}")
        for k, v in body.items():
            if v.shape != fresh[k].shape:
                raise ValueError(f"checkpoint {k} has shape {v.shape}, {spec.name} expects {fresh[k].shape}")
        head = {k: np.zeros_like(v) for k, v in fresh.items() if k.startswith("head.")}  # zero-init head
        return self.load_weights(model, {**body, **head})

    def predict(self, model: Any, data: ImageSet, resolution: int, batch_size: int = 256) -> np.ndarray:
        out = [self.logits(model, data.batch(np.arange(i, min(i + batch_size, len(data))), resolution)[0])
               for i in range(0, len(data), batch_size)]
        return np.concatenate(out) if out else np.zeros((0, data.num_classes), np.float32)

    def accuracy(self, model: Any, data: ImageSet, resolution: int, batch_size: int = 256) -> float:
        """Top-1 accuracy (0..1) on `data`."""
        if len(data) == 0:
            return float("nan")
        return float(np.mean(self.predict(model, data, resolution, batch_size).argmax(1) == data.labels))

    def embed(self, model: Any, data: ImageSet, resolution: int, batch_size: int = 256) -> np.ndarray:
        out = [self.features(model, data.batch(np.arange(i, min(i + batch_size, len(data))), resolution)[0])
               for i in range(0, len(data), batch_size)]
        return np.concatenate(out).astype(np.float64)


def get_engine(name: str) -> TransferEngine:
    from vitbench.errors import BackendUnavailable, ConfigError

    if name == "torch":
        from vitbench.transfer.torch_engine import TorchEngine

        return TorchEngine()
    if name == "jax":
        try:
            from vitbench.transfer.jax_engine import JaxEngine
        except ImportError as e:
            raise BackendUnavailable(f"transfer on backend 'jax' needs jax, flax, optax and "
                                     f"vitbench.models.flax: {e}") from e
        return JaxEngine()
    raise ConfigError(f"unknown backend {name!r}; allowed: {', '.join(ENGINES)}")
