"""Attention probabilities of a Flax ViT / hybrid (vitbench.models.flax), read through the 'intermediates'
collection: with it mutable, every MultiHeadDotProductAttention sows softmax(q k^T * head_dim**-0.5); without it
the model runs its fused path unchanged. The backend's `attention_maps` (vitbench.backends.base.Backend).
"""

from __future__ import annotations

from functools import lru_cache

import jax
import numpy as np

from vitbench.models.convert import torch_to_flax
from vitbench.models.flax import build_flax_model
from vitbench.models.specs import ModelSpec

_SOWN = "attention_weights"  # the name MultiHeadDotProductAttention sows under


@lru_cache(maxsize=8)
def _compiled(spec: ModelSpec, resolution: int):
    module = build_flax_model(spec, resolution, spec.num_classes)

    def run(params, x):
        _, state = module.apply({"params": params}, x, mutable=["intermediates"])
        blocks = state["intermediates"]["Transformer"]
        return [blocks[f"encoderblock_{i}"]["MultiHeadDotProductAttention_1"][_SOWN][0] for i in range(spec.depth)]

    return jax.jit(run)


def attention_maps(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                   images: np.ndarray) -> np.ndarray:
    """(layers, images, heads, tokens, tokens) float32 attention probabilities of `spec` at `resolution` with
    timm-named `weights` (converted to Flax) on NHWC float32 `images` (fp32, JAX's default device)."""
    params = torch_to_flax(weights, spec)
    maps = _compiled(spec, resolution)(params, np.asarray(images, np.float32))
    return np.stack([np.asarray(m, np.float32) for m in maps])
