"""ViT and DeiT in PyTorch: timm VisionTransformer, class token, pre-LN blocks, LayerNorm eps from the spec, GELU in
the spec's flavour (exact erf: timm's nn.GELU(); tanh: nn.GELU(approximate='tanh') == flax nn.gelu's default).
Distilled (DeiT): timm VisionTransformerDistilled (class + distillation token, two heads; inference averages the
two heads' logits, as timm and the DeiT code do). Head and position-embedding variants (classifier gap, rep_size,
posemb kinds and places): vitbench.models.torch_vit. The hybrid family passes its own `embed_layer`.
"""

from __future__ import annotations

from functools import partial

import torch
from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer

from vitbench.models.flavours import Gelu
from vitbench.models.specs import ModelSpec
from vitbench.models.torch_vit import VariantViT, is_plain

_GELUS = {Gelu.ERF: torch.nn.GELU, Gelu.TANH: partial(torch.nn.GELU, approximate="tanh")}


def vit(spec: ModelSpec, resolution: int, num_classes: int, embed_layer=None) -> VisionTransformer:
    kwargs = {} if embed_layer is None else {"embed_layer": embed_layer}
    kwargs.update(patch_size=spec.patch, in_chans=3, embed_dim=spec.width, depth=spec.depth, num_heads=spec.heads,
                  mlp_ratio=spec.mlp_dim / spec.width, qkv_bias=True,
                  norm_layer=partial(torch.nn.LayerNorm, eps=spec.ln_eps), act_layer=_GELUS[spec.flavour.gelu])
    if not is_plain(spec):  # another head or position embedding (ViT appendix D.3, D.4)
        return VariantViT(spec, resolution, num_classes, **kwargs)
    cls = VisionTransformerDistilled if spec.distilled else VisionTransformer
    return cls(img_size=resolution, num_classes=num_classes, global_pool="token", class_token=True, **kwargs)


def build(spec: ModelSpec, resolution: int, num_classes: int) -> VisionTransformer:
    return vit(spec, resolution, num_classes)
