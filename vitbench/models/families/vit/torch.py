"""ViT and DeiT in PyTorch, and the attention maps inspection reads of them and of hybrids.

timm VisionTransformer, class token, pre-LN blocks, LayerNorm eps from the spec, GELU in the spec's flavour (exact
erf: timm's nn.GELU(); tanh: nn.GELU(approximate='tanh') == flax nn.gelu's default). Distilled (DeiT): timm
VisionTransformerDistilled (class + distillation token, two heads; inference averages the two heads' logits, as
timm and the DeiT code do). Head and position-embedding variants (classifier gap, rep_size, posemb kinds and
places): torch_variants.py. The hybrid family passes its own `embed_layer`.
"""

from __future__ import annotations

from functools import partial

import torch
from timm.models.deit import VisionTransformerDistilled
from timm.models.vision_transformer import VisionTransformer

from vitbench.models.families.vit.torch_variants import VariantViT, is_plain
from vitbench.models.layers.torch import GELUS
from vitbench.models.specs import ModelSpec
from vitbench.models.torch import attention_modules, unfused_attention


def vit(spec: ModelSpec, resolution: int, num_classes: int, embed_layer=None) -> VisionTransformer:
    kwargs = {} if embed_layer is None else {"embed_layer": embed_layer}
    a = spec.arch
    kwargs.update(patch_size=a.patch, in_chans=3, embed_dim=a.width, depth=a.depth, num_heads=a.heads,
                  mlp_ratio=a.mlp_dim / a.width, qkv_bias=True,
                  norm_layer=partial(torch.nn.LayerNorm, eps=a.ln_eps), act_layer=GELUS[spec.flavour.gelu])
    if not is_plain(spec):  # another head or position embedding (ViT appendix D.3, D.4)
        return VariantViT(spec, resolution, num_classes, **kwargs)
    cls = VisionTransformerDistilled if spec.arch.distilled else VisionTransformer
    return cls(img_size=resolution, num_classes=num_classes, global_pool="token", class_token=True, **kwargs)


def build(spec: ModelSpec, resolution: int, num_classes: int) -> VisionTransformer:
    return vit(spec, resolution, num_classes)


def attention_maps(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's attention probabilities (images, heads, tokens, tokens) on NCHW `x`, in forward order.

    timm's `Attention` computes softmax(q k^T * scale) and passes it through `attn_drop` when it is not fused, so
    a forward hook on every `attn_drop`, under `unfused_attention(model)`, sees exactly the probabilities the
    layer multiplies with v.
    """
    captured: list[torch.Tensor] = []
    hooks = [m.attn_drop.register_forward_hook(lambda _m, inp, _out: captured.append(inp[0].detach().clone()))
             for m in attention_modules(model)]
    try:
        with unfused_attention(model):
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return captured
