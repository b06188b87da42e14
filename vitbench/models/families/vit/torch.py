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


# the position embeddings' parameter names (timm's table; posemb variants' per-axis and per-layer tables; the
# relative logits' table): each drawn as the Flax model draws it, normal(posemb.INIT_STD)
_POSEMBS = ("pos_embed", "pos_embedding", "pos_embedding_x", "pos_embedding_y", "rel_embedding")


def flax_init(model: torch.nn.Module) -> torch.nn.Module:
    """`model`'s parameters drawn from the distributions the Flax ViT draws its twins from (flax_model.py, after
    vit_jax), so that both backends pre-train from the same start (timm's default, truncated normal 0.02 on every
    kernel, gave a first qkv kernel std 0.020 against Flax's 0.177 on ViT-Nano/4, and a different model after
    pre-training). Linear kernels Xavier-uniform (Flax's DenseGeneral flattens query/key/value to (D, D) each, so
    the fused qkv is three such blocks), MLP biases normal(1e-6), other biases zero; the patch embedding and the
    pre-logits layer LeCun-normal (Flax's default for Conv and Dense); heads and the class token zero, the
    distillation token and position embeddings normal(0.02). A hybrid's ResNet (inside patch_embed) keeps its own.
    The family's FamilyBuild.torch_init, applied to a model trained from scratch; a benchmarked model keeps
    timm's draws (its head random: a zero head's logits would hide the forward from parity checks)."""
    from timm.layers import lecun_normal_

    from vitbench.models.posemb import INIT_STD

    with torch.no_grad():
        for name, m in model.named_modules():
            leaf = name.rpartition(".")[2]
            if isinstance(m, torch.nn.Linear):
                if name.startswith("head"):  # the paper zero-initialises the head (Flax: kernel_init zeros)
                    torch.nn.init.zeros_(m.weight)
                elif leaf == "pre_logits":
                    lecun_normal_(m.weight)
                else:
                    for block in m.weight.chunk(3) if leaf == "qkv" else (m.weight,):
                        torch.nn.init.xavier_uniform_(block)
                if m.bias is not None:
                    torch.nn.init.normal_(m.bias, std=1e-6) if "mlp" in name.split(".") else torch.nn.init.zeros_(
                        m.bias)
            elif isinstance(m, torch.nn.Conv2d) and name.endswith("patch_embed.proj"):
                lecun_normal_(m.weight)
                if m.bias is not None:
                    torch.nn.init.zeros_(m.bias)
        for name, p in model.named_parameters():
            leaf = name.rpartition(".")[2]
            if leaf == "cls_token":
                p.zero_()
            elif leaf == "dist_token" or leaf in _POSEMBS:
                torch.nn.init.normal_(p, std=INIT_STD)
    return model


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
