"""Flax (linen) layers shared by families (vitbench.models.layers)."""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


# A norm's output is float32 whatever the model's compute dtype: the mixed precision of torch's autocast
# (layer_norm and group_norm are on its float32 list: the torch.amp docs, "Ops that can autocast to float32") and
# of big_vision's ViT (`dtype_mm`: the matmuls alone in the low dtype). Norms that gave bf16 made a JAX bf16 step
# another computation than a torch one (block outputs bf16 against float32; a parity review).
NORM_DTYPE = jnp.float32


def layer_norm(eps: float, name: str) -> nn.LayerNorm:
    """LayerNorm with the exact two-pass variance (torch's layer_norm), statistics and output in float32."""
    return nn.LayerNorm(epsilon=eps, use_fast_variance=False, dtype=NORM_DTYPE, name=name)
