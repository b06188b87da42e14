"""ViT and DeiT in Flax: flax_model.VisionTransformer (the vit_jax parameter layout), and the
attention maps inspection reads of them and of hybrids."""

from __future__ import annotations

from typing import Any

from vitbench.models.families.vit.flax_model import VisionTransformer
from vitbench.models.specs import ModelSpec


def build(spec: ModelSpec, num_classes: int, dtype: Any, representation_size: int | None = None):
    return VisionTransformer(spec, num_classes, representation_size=representation_size, dtype=dtype)


_SOWN = "attention_weights"  # the name MultiHeadDotProductAttention sows under


def attention_maps(module, params, x) -> list:
    """Every layer's attention probabilities (images, heads, tokens, tokens) on NHWC `x`, in forward order: with
    the 'intermediates' collection mutable, every MultiHeadDotProductAttention sows softmax(q k^T * head_dim**-0.5);
    without it the model runs its fused path unchanged. Traceable (the backend jits it)."""
    _, state = module.apply({"params": params}, x, mutable=["intermediates"])
    blocks = state["intermediates"]["Transformer"]
    return [blocks[f"encoderblock_{i}"]["MultiHeadDotProductAttention_1"][_SOWN][0]
            for i in range(module.spec.arch.depth)]
