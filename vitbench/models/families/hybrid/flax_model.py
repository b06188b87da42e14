"""The ResNet half of the hybrid (R50+ViT): vit_jax models_resnet.py layout and computation.

Same function as the timm ResNetV2(preact=False, stem_type='same') that feeds HybridEmbed in torch.py: every
conv is a weight-standardised conv (in the spec's flavour) with TF 'SAME' padding (timm StdConv2dSame;
asymmetric for strided convs), root = conv 7x7/2 -> GroupNorm+ReLU -> max-pool
3x3/2 'SAME' (-inf padding, timm MaxPool2dSame); v1.5 bottleneck units (stride on the 3x3 conv) with GroupNorm
after every conv, ReLU after gn1, gn2 and after the residual add; the first unit of each stage has a 1x1
projection + GroupNorm shortcut.

Parameter names are vit_jax's, at the top level of the ViT's tree: ``conv_root``, ``gn_root``,
``block{k}/unit{j}/{conv1,gn1,conv2,gn2,conv3,gn3,conv_proj,gn_proj}`` (unit numbers not zero-padded).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vitbench.models.families.bit.flax_model import Stage, group_norm, mid_channels, std_conv
from vitbench.models.specs import ModelSpec


class ResidualUnit(nn.Module):
    """vit_jax ResidualUnit (non-pre-activation bottleneck), with an explicit `project` flag like timm."""

    spec: ModelSpec
    features: int  # output channels
    strides: int = 1
    project: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s, mid = self.spec, mid_channels(self.features)

        def conv(f: int, k: int, st: int, name: str) -> nn.Module:
            return std_conv(s, f, k, st, "SAME", name, self.dtype)

        residual = x
        if self.project:
            residual = conv(self.features, 1, self.strides, "conv_proj")(x)
            residual = group_norm(s, "gn_proj")(residual)
        y = nn.relu(group_norm(s, "gn1")(conv(mid, 1, 1, "conv1")(x)))
        y = nn.relu(group_norm(s, "gn2")(conv(mid, 3, self.strides, "conv2")(y)))
        # a zero scale: each unit starts as the identity (vit_jax models_resnet.ResidualUnit's gn3; timm zeroes
        # norm3.weight too, so both backends start alike)
        gn3 = group_norm(s, "gn3", scale_init=nn.initializers.zeros)
        y = gn3(conv(self.features, 1, 1, "conv3")(y))
        return nn.relu(residual + y)


def hybrid_root(x: jax.Array, spec: ModelSpec, dtype: Any) -> jax.Array:
    """Run the hybrid's ResNet on NHWC `x`. Call inside the parent's @nn.compact method: the layers created here
    become the parent's direct children, so their names sit at the top of the tree as in vit_jax."""
    x = std_conv(spec, spec.arch.root_channels, 7, 2, "SAME", "conv_root", dtype)(x)
    x = nn.relu(group_norm(spec, "gn_root")(x))
    x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")  # pads with -inf, like timm MaxPool2dSame
    for k, (blocks, cout) in enumerate(zip(spec.arch.layers, spec.arch.stage_channels), start=1):
        x = Stage(spec, cout, blocks, 1 if k == 1 else 2, dtype, unit=ResidualUnit, unit_name="unit{}",
                  name=f"block{k}")(x)
    return x
