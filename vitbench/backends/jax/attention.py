"""Attention probabilities of a Flax ViT / hybrid (vitbench.models.flax), read through the 'intermediates'
collection: with it mutable, every MultiHeadDotProductAttention sows softmax(q k^T * head_dim**-0.5); without it
the model runs its fused path unchanged. A plug-in family with per-axis attention layers
(vitbench.models.families: `axis_layers`) reads its own (`FamilyPlugin.flax_attention_maps`). The backend's
`attention_maps` (vitbench.backends.base.Backend).
"""

from __future__ import annotations

from functools import lru_cache

import jax
import numpy as np

from vitbench.models.convert import torch_to_flax
from vitbench.models.families import family_plugin
from vitbench.models.flax import build_flax_model
from vitbench.models.specs import ModelSpec

_SOWN = "attention_weights"  # the name MultiHeadDotProductAttention sows under


@lru_cache(maxsize=8)
def _compiled(spec: ModelSpec, resolution: int):
    module = build_flax_model(spec, resolution, spec.num_classes)
    plugin = family_plugin(spec.family)
    if plugin.axis_layers is not None:
        return jax.jit(lambda params, x: plugin.flax_attention_maps(module, params, x))

    def run(params, x):
        _, state = module.apply({"params": params}, x, mutable=["intermediates"])
        blocks = state["intermediates"]["Transformer"]
        return [blocks[f"encoderblock_{i}"]["MultiHeadDotProductAttention_1"][_SOWN][0] for i in range(spec.depth)]

    return jax.jit(run)


def attention_maps(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                   images: np.ndarray) -> np.ndarray | list[np.ndarray]:
    """(layers, images, heads, tokens, tokens) float32 attention probabilities of `spec` at `resolution` with
    timm-named `weights` (converted to Flax) on NHWC float32 `images` (fp32, JAX's default device); for a family
    with per-axis layers, a list of (images, sequences, heads, length, length), one per layer."""
    params = torch_to_flax(weights, spec)
    maps = _compiled(spec, resolution)(params, np.asarray(images, np.float32))
    if family_plugin(spec.family).axis_layers is not None:
        return [np.asarray(m, np.float32) for m in maps]
    return np.stack([np.asarray(m, np.float32) for m in maps])
