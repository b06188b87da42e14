"""ViT and DeiT in Flax: vitbench.models.flax.vit.VisionTransformer (the vit_jax parameter layout)."""

from __future__ import annotations

from typing import Any

from vitbench.models.flax.vit import VisionTransformer
from vitbench.models.specs import ModelSpec


def build(spec: ModelSpec, num_classes: int, dtype: Any, representation_size: int | None = None):
    return VisionTransformer(spec, num_classes, representation_size=representation_size, dtype=dtype)
