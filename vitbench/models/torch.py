"""ModelSpec -> timm model, with every architecture argument explicit (no pretrained configs, no downloads).

- ViT: timm VisionTransformer, class token, pre-LN blocks, exact-erf GELU, LayerNorm eps from the spec.
- BiT: timm ResNetV2, pre-activation bottlenecks, GroupNorm, weight-standardised convs, 'fixed' root
  (7x7/2 conv, pad 1, 3x3/2 max-pool) as in big_transfer / timm resnetv2_*_bit.
- Hybrid: timm ResNetV2 without pre-activation and a 'same'-padded root (vit_jax models_resnet.py), feeding a
  HybridEmbed with 1x1 patches into the same VisionTransformer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import torch
from timm.layers import GroupNormAct, HybridEmbed, StdConv2d, StdConv2dSame
from timm.models.resnetv2 import ResNetV2
from timm.models.vision_transformer import VisionTransformer

from vitbench.models.specs import ModelSpec


def _resnet(spec: ModelSpec, *, hybrid: bool, num_classes: int) -> ResNetV2:
    conv = partial(StdConv2dSame if hybrid else StdConv2d, eps=spec.std_conv_eps)
    norm = partial(GroupNormAct, num_groups=spec.gn_groups, eps=spec.gn_eps)
    return ResNetV2(
        layers=list(spec.layers), channels=spec.channels[: len(spec.layers)], num_classes=num_classes,
        global_pool="" if hybrid else "avg", width_factor=spec.width_factor, stem_chs=spec.stem_chs,
        stem_type="same" if hybrid else "fixed", preact=not hybrid, conv_layer=conv, norm_layer=norm,
    )


def _vit(spec: ModelSpec, resolution: int, num_classes: int, embed_layer=None) -> VisionTransformer:
    kwargs = {} if embed_layer is None else {"embed_layer": embed_layer}
    return VisionTransformer(
        img_size=resolution, patch_size=spec.patch, in_chans=3, num_classes=num_classes,
        global_pool="token", embed_dim=spec.width, depth=spec.depth, num_heads=spec.heads,
        mlp_ratio=spec.mlp_dim / spec.width, qkv_bias=True, class_token=True,
        norm_layer=partial(torch.nn.LayerNorm, eps=spec.ln_eps), act_layer=torch.nn.GELU, **kwargs,
    )


def build_torch_model(spec: ModelSpec, resolution: int | None = None, num_classes: int | None = None,
                      device: str | torch.device = "cpu") -> torch.nn.Module:
    """Build `spec` at `resolution` (default: its native one) with random init, on `device`."""
    resolution = resolution or spec.resolution
    num_classes = spec.num_classes if num_classes is None else num_classes
    spec.check_resolution(resolution)
    with torch.device(device):
        if spec.family == "vit":
            model = _vit(spec, resolution, num_classes)
        elif spec.family == "bit":
            model = _resnet(spec, hybrid=False, num_classes=num_classes)
        else:
            backbone = _resnet(spec, hybrid=True, num_classes=0)
            model = _vit(spec, resolution, num_classes, embed_layer=partial(HybridEmbed, backbone=backbone))
    return model


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if hasattr(m, "fused_attn")]


@contextlib.contextmanager
def unfused_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run attention as explicit matmuls (q@k^T, softmax, @v) so FLOP counters see it.

    fvcore has no handle for aten::scaled_dot_product_attention and FlopCounterMode counts 0 for it on CPU.
    """
    mods = attention_modules(model)
    saved = [m.fused_attn for m in mods]
    try:
        for m in mods:
            m.fused_attn = False
        yield
    finally:
        for m, s in zip(mods, saved):
            m.fused_attn = s


def feature_forward(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Pre-logits representation: the class token after the final norm (ViT/hybrid) or pooled features (BiT)."""
    return model.forward_head(model.forward_features(x), pre_logits=True)
