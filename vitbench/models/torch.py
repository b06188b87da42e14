"""ModelSpec -> timm model, with every architecture argument explicit (no pretrained configs, no downloads).

- ViT: timm VisionTransformer, class token, pre-LN blocks, LayerNorm eps from the spec, GELU in the spec's
  flavour (exact erf: timm's nn.GELU(); tanh: nn.GELU(approximate='tanh') == flax nn.gelu's default).
  Distilled (DeiT): timm VisionTransformerDistilled (class + distillation token, two heads; inference averages
  the two heads' logits, as timm and the DeiT code do).
- BiT: timm ResNetV2, pre-activation bottlenecks, GroupNorm, weight-standardised convs, 'fixed' root
  (7x7/2 conv, pad 3, zero pad 1, 3x3/2 max-pool) as in big_transfer / timm resnetv2_*_bit.
- Head and position-embedding variants (classifier gap, rep_size, posemb kinds and places): torch_vit.py.
- Hybrid: timm ResNetV2 without pre-activation and a 'same'-padded root (vit_jax models_resnet.py), feeding a
  HybridEmbed with 1x1 patches into the same VisionTransformer.
Weight standardisation and GroupNorm epsilon follow the spec's flavour (vitbench.models.flavours).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import torch
import torch.nn.functional as F
from timm.layers import GroupNormAct, HybridEmbed, StdConv2d, StdConv2dSame
from timm.layers.padding import pad_same
from timm.models.deit import VisionTransformerDistilled
from timm.models.resnetv2 import ResNetV2
from timm.models.vision_transformer import VisionTransformer

from vitbench.models.flavours import Gelu, WeightStd
from vitbench.models.specs import ModelSpec
from vitbench.models.torch_vit import VariantViT, is_plain


def _std_plus_eps(weight: torch.Tensor, eps: float) -> torch.Tensor:
    """(w - mean) / (std + eps) per output filter, biased std (vit_jax models_resnet.weight_standardize)."""
    w = weight - weight.mean(dim=(1, 2, 3), keepdim=True)
    return w / (w.square().mean(dim=(1, 2, 3), keepdim=True).sqrt() + eps)


class StdConv2dStdEps(StdConv2d):
    """timm StdConv2d with vit_jax's standardisation, (w - mean) / (std + eps); same parameters."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, _std_plus_eps(self.weight, self.eps), self.bias, self.stride, self.padding,
                        self.dilation, self.groups)


class StdConv2dSameStdEps(StdConv2dSame):
    """timm StdConv2dSame (TF 'SAME' padding) with vit_jax's standardisation, (w - mean) / (std + eps)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.same_pad:
            x = pad_same(x, self.kernel_size, self.stride, self.dilation)
        return StdConv2dStdEps.forward(self, x)  # the same conv after the padding (not a subclass: same fields)


_STD_CONVS = {  # (form, 'SAME' padding) -> conv class
    (WeightStd.SQRT_VAR, False): StdConv2d, (WeightStd.SQRT_VAR, True): StdConv2dSame,
    (WeightStd.STD_PLUS_EPS, False): StdConv2dStdEps, (WeightStd.STD_PLUS_EPS, True): StdConv2dSameStdEps,
}
_GELUS = {Gelu.ERF: torch.nn.GELU, Gelu.TANH: partial(torch.nn.GELU, approximate="tanh")}


def _resnet(spec: ModelSpec, *, hybrid: bool, num_classes: int) -> ResNetV2:
    fl = spec.flavour
    conv = partial(_STD_CONVS[fl.weight_std, hybrid], eps=fl.weight_std_eps)
    norm = partial(GroupNormAct, num_groups=spec.gn_groups, eps=fl.gn_eps)
    return ResNetV2(
        layers=list(spec.layers), channels=spec.channels[: len(spec.layers)], num_classes=num_classes,
        global_pool="" if hybrid else "avg", width_factor=spec.width_factor, stem_chs=spec.stem_chs,
        stem_type="same" if hybrid else "fixed", preact=not hybrid, conv_layer=conv, norm_layer=norm,
    )


def _vit(spec: ModelSpec, resolution: int, num_classes: int, embed_layer=None) -> VisionTransformer:
    kwargs = {} if embed_layer is None else {"embed_layer": embed_layer}
    kwargs.update(patch_size=spec.patch, in_chans=3, embed_dim=spec.width, depth=spec.depth, num_heads=spec.heads,
                  mlp_ratio=spec.mlp_dim / spec.width, qkv_bias=True,
                  norm_layer=partial(torch.nn.LayerNorm, eps=spec.ln_eps), act_layer=_GELUS[spec.flavour.gelu])
    if not is_plain(spec):  # another head or position embedding (ViT appendix D.3, D.4)
        return VariantViT(spec, resolution, num_classes, **kwargs)
    cls = VisionTransformerDistilled if spec.distilled else VisionTransformer
    return cls(img_size=resolution, num_classes=num_classes, global_pool="token", class_token=True, **kwargs)


def build_torch_model(spec: ModelSpec, resolution: int | None = None, num_classes: int | None = None,
                      device: str | torch.device = "cpu") -> torch.nn.Module:
    """Build `spec` at `resolution` (default: its native one) with random init, on `device`."""
    resolution = spec.resolution if resolution is None else resolution
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
    """Pre-logits representation: the class token after the final norm (ViT/hybrid), the mean of the class and
    distillation tokens (distilled DeiT, as timm's forward_head(pre_logits=True)), or pooled features (BiT)."""
    return model.forward_head(model.forward_features(x), pre_logits=True)


def forward_heads(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(class-token logits, distillation-token logits), for training with distillation (DeiT Section 4).

    A distilled model's two heads, each on its own token after the final norm; `model(x)` is their mean. A model
    without a distillation token returns its logits twice (the same tensor), so a distillation loss then goes
    through the class token, DeiT's baseline without the token.
    """
    if isinstance(model, VisionTransformerDistilled):
        tokens = model.forward_features(x)
        return model.head(model.head_drop(tokens[:, 0])), model.head_dist(model.head_drop(tokens[:, 1]))
    logits = model(x)
    return logits, logits
