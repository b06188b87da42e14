"""R50+ViT hybrids in Flax: the vit family's VisionTransformer on the ResNet root of flax_model.py
(vit_jax models_resnet.py), whose parameters sit beside the transformer's (the vit_jax layout)."""

from __future__ import annotations

from typing import Any

from vitbench.models.families.hybrid.flax_model import hybrid_root
from vitbench.models.families.vit.flax_model import VisionTransformer
from vitbench.models.specs import ModelSpec


def build(spec: ModelSpec, num_classes: int, dtype: Any, representation_size: int | None = None):
    return VisionTransformer(spec, num_classes, representation_size=representation_size, dtype=dtype,
                             root=hybrid_root)
