"""BiT's ResNet in PyTorch: timm ResNetV2, pre-activation bottlenecks, GroupNorm, weight-standardised convs, 'fixed'
root (7x7/2 conv, pad 3, zero pad 1, 3x3/2 max-pool) as in big_transfer / timm resnetv2_*_bit. The hybrid family
builds its ResNet root here too (`resnet(..., hybrid=True)`). Weight standardisation and GroupNorm epsilon follow
the spec's flavour (vitbench.models.flavours).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from timm.layers import GroupNormAct, StdConv2d, StdConv2dSame
from timm.layers.padding import pad_same
from timm.models.resnetv2 import ResNetV2

from vitbench.models.flavours import WeightStd
from vitbench.models.specs import ModelSpec


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


def resnet(spec: ModelSpec, *, hybrid: bool, num_classes: int) -> ResNetV2:
    """timm ResNetV2: BiT's pre-activation one with the 'fixed' root, or (hybrid=True) the hybrid's v1 root of
    vit_jax models_resnet.py (no pre-activation, 'same'-padded root, no pooling or head)."""
    fl = spec.flavour
    conv = partial(_STD_CONVS[fl.weight_std, hybrid], eps=fl.weight_std_eps)
    norm = partial(GroupNormAct, num_groups=spec.arch.gn_groups, eps=fl.gn_eps)
    return ResNetV2(
        layers=list(spec.arch.layers), channels=spec.arch.channels[: len(spec.arch.layers)],
        num_classes=num_classes,
        global_pool="" if hybrid else "avg", width_factor=spec.arch.width_factor, stem_chs=spec.arch.stem_chs,
        stem_type="same" if hybrid else "fixed", preact=not hybrid, conv_layer=conv, norm_layer=norm,
    )


def build(spec: ModelSpec, resolution: int, num_classes: int) -> ResNetV2:
    return resnet(spec, hybrid=False, num_classes=num_classes)


def zero_head(model: ResNetV2) -> ResNetV2:
    """A zero head, as the Flax model's (BiT, Kolesnikov et al. 2020, 3.3: "we initialize the head to zero"; timm
    draws it at random): the family's FamilyBuild.torch_init, for a model trained from scratch."""
    head = getattr(getattr(model, "head", None), "fc", None)
    if isinstance(head, (torch.nn.Conv2d, torch.nn.Linear)):
        with torch.no_grad():
            head.weight.zero_()
            if head.bias is not None:
                head.bias.zero_()
    return model
