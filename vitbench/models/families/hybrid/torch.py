"""R50+ViT hybrids in PyTorch: timm ResNetV2 without pre-activation and a 'same'-padded root (vit_jax
models_resnet.py), feeding a HybridEmbed with 1x1 patches into the same VisionTransformer as the vit family's."""

from __future__ import annotations

from functools import partial

from timm.layers import HybridEmbed
from timm.models.vision_transformer import VisionTransformer

from vitbench.models.families.bit.torch import resnet
from vitbench.models.families.vit.torch import vit
from vitbench.models.specs import ModelSpec


def build(spec: ModelSpec, resolution: int, num_classes: int) -> VisionTransformer:
    backbone = resnet(spec, hybrid=True, num_classes=0)
    return vit(spec, resolution, num_classes, embed_layer=partial(HybridEmbed, backbone=backbone))
