"""Attention probabilities of a Flax model, read by its family (vitbench.models.families: `AttentionMaps.flax`,
e.g. the vit family's sown 'intermediates' of every MultiHeadDotProductAttention, the axial families' per-axis
maps), jit-compiled per spec and resolution. The backend's `attention_maps` (vitbench.backends.base.Backend).
"""

from __future__ import annotations

from functools import lru_cache

import jax
import numpy as np

from vitbench.backends.base import TRANSFER_PRECISION
from vitbench.backends.jax.numerics import traced_at
from vitbench.errors import ConfigError
from vitbench.models.convert import torch_to_flax
from vitbench.models.families import family_plugin
from vitbench.models.flax import build_flax_model
from vitbench.models.specs import ModelSpec


@lru_cache(maxsize=8)
def _compiled(spec: ModelSpec, resolution: int):
    module = build_flax_model(spec, resolution, spec.num_classes)
    plugin = family_plugin(spec.family)
    return jax.jit(traced_at(TRANSFER_PRECISION)(lambda params, x: plugin.flax_attention_maps(module, params, x)))


def attention_maps(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                   images: np.ndarray) -> np.ndarray | list[np.ndarray]:
    """(layers, images, heads, tokens, tokens) float32 attention probabilities of `spec` at `resolution` with
    timm-named `weights` (converted to Flax) on NHWC float32 `images` (fp32, JAX's default device); for a family
    with per-axis layers, a list of (images, sequences, heads, length, length), one per layer."""
    if not family_plugin(spec.family).attention_maps.flax:
        raise ConfigError(f"{spec.name}: family {spec.family} declares no attention maps to read")
    params = torch_to_flax(weights, spec)
    maps = _compiled(spec, resolution)(params, np.asarray(images, np.float32))
    if family_plugin(spec.family).attention_maps.axis_layers is not None:
        return [np.asarray(m, np.float32) for m in maps]
    return np.stack([np.asarray(m, np.float32) for m in maps])
