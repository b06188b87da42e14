"""Flax (linen) layers shared by families (vitbench.models.layers)."""

from __future__ import annotations

from typing import Any

import flax.linen as nn


def layer_norm(eps: float, name: str, dtype: Any) -> nn.LayerNorm:
    """LayerNorm with the exact two-pass variance (torch's layer_norm), statistics in float32."""
    return nn.LayerNorm(epsilon=eps, use_fast_variance=False, dtype=dtype, name=name)
