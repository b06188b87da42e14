"""Flax (linen) BiT ResNet-v2 and the ResNet pieces shared with the hybrid: weight-standardised conv, GroupNorm.

Computes the same function as timm's ResNetV2 that vitbench/models/torch.py builds (checked by the parity tests):

- StdConv: kernel standardised per output filter over (kh, kw, cin) with the *biased* variance, in the spec's
  flavour: (w - mean) / sqrt(var + eps) (timm StdConv2d, big_transfer) or (w - mean) / (std + eps) (vit_jax
  models_resnet.py); GroupNorm epsilon from the flavour too (vitbench.models.flavours).
- BiT root ('fixed' in timm, bit_jax): 7x7/2 conv with symmetric padding 3, then a zero pad of 1 and a 3x3/2
  VALID max-pool (zero, not -inf, padding: the root has no ReLU before the pool, so this matters).
- Pre-activation bottleneck (He et al. 2016b, stride on the 3x3 conv): gn1+ReLU feeds both the residual branch
  and the 1x1 projection shortcut of the first unit of every stage; final GroupNorm+ReLU, global average pool,
  dense head.

Parameter names follow big_transfer's bit_jax / big_vision's `bit_paper` layout so BiT checkpoints map by name:
``root_block/conv_root``, ``block{k}/unit{jj:02d}/{gn1,conv1,gn2,conv2,gn3,conv3,conv_proj}``, ``norm-pre-head``,
``head``. (Their GroupNorm scale/bias are stored as (1,1,1,C); ours are (C,) as in flax.linen.GroupNorm -- the
.npz loader in vitbench.models.npz squeezes them.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vitbench.models.flavours import WeightStd
from vitbench.models.layers.flax import NORM_DTYPE
from vitbench.models.specs import ModelSpec

Padding = str | Sequence[tuple[int, int]]


def standardize_kernel(kernel: jax.Array, eps: float, form: WeightStd = WeightStd.SQRT_VAR) -> jax.Array:
    """Weight standardisation of an HWIO kernel per output channel (Qiao et al. 2019), biased variance.

    SQRT_VAR: (w - mean) / sqrt(var + eps), timm StdConv2d (F.batch_norm(w.reshape(1, O, -1), training=True)).
    STD_PLUS_EPS: (w - mean) / (std + eps), vit_jax models_resnet.weight_standardize.
    """
    kernel = kernel.astype(jnp.float32)
    mean = jnp.mean(kernel, axis=(0, 1, 2), keepdims=True)
    var = jnp.mean(jnp.square(kernel - mean), axis=(0, 1, 2), keepdims=True)
    if form is WeightStd.STD_PLUS_EPS:
        return (kernel - mean) / (jnp.sqrt(var) + eps)
    return (kernel - mean) * jax.lax.rsqrt(var + eps)


class StdConv(nn.Module):
    """Conv2d (NHWC, HWIO kernel named 'kernel') with weight standardisation; no bias by default."""

    features: int
    kernel_size: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    padding: Padding = "SAME"  # 'SAME' = TF/XLA asymmetric same padding (timm StdConv2dSame)
    eps: float = 1e-8
    form: WeightStd = WeightStd.SQRT_VAR
    use_bias: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        shape = (*self.kernel_size, x.shape[-1], self.features)
        # He init, fan_out, as timm's ResNetV2 init (any scale works: the kernel is standardised)
        init = nn.initializers.variance_scaling(2.0, "fan_out", "normal")
        kernel = standardize_kernel(self.param("kernel", init, shape, jnp.float32), self.eps, self.form)
        padding = self.padding if isinstance(self.padding, str) else tuple(tuple(p) for p in self.padding)
        y = jax.lax.conv_general_dilated(
            x.astype(self.dtype), kernel.astype(self.dtype), window_strides=self.strides, padding=padding,
            dimension_numbers=("NHWC", "HWIO", "NHWC"))
        if self.use_bias:
            y = y + self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32).astype(self.dtype)
        return y


def std_conv(spec: ModelSpec, features: int, kernel: int, stride: int, padding: Padding, name: str,
             dtype: Any) -> StdConv:
    """A k x k / stride StdConv in the spec's weight-standardisation flavour."""
    fl = spec.flavour
    return StdConv(features, (kernel, kernel), (stride, stride), padding, fl.weight_std_eps, fl.weight_std,
                   dtype=dtype, name=name)


def group_norm(spec: ModelSpec, name: str, **kw) -> nn.GroupNorm:
    """GroupNorm(spec.arch.gn_groups, eps from the flavour) with the exact two-pass variance, like torch's, its
    output float32 whatever the compute dtype (vitbench.models.layers.flax.NORM_DTYPE); `kw` e.g. scale_init."""
    return nn.GroupNorm(num_groups=spec.arch.gn_groups, epsilon=spec.flavour.gn_eps, use_fast_variance=False,
                        dtype=NORM_DTYPE, name=name, **kw)


def mid_channels(out_channels: int) -> int:
    """Bottleneck width: out/4, rounded as timm's make_divisible(out * 0.25, 8) does."""
    v = out_channels * 0.25
    new = max(8, int(v + 4) // 8 * 8)
    return new + 8 if new < 0.9 * v else new


class PreActBottleneck(nn.Module):
    """BiT unit: gn1+relu -> (conv_proj shortcut), conv1 1x1 -> gn2+relu -> conv2 3x3/s -> gn3+relu -> conv3."""

    spec: ModelSpec
    features: int  # output channels (4 x bottleneck width)
    strides: int = 1
    project: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s, mid = self.spec, mid_channels(self.features)

        def conv(f: int, k: int, st: int, pad: Padding, name: str) -> StdConv:
            return std_conv(s, f, k, st, pad, name, self.dtype)

        x_pre = nn.relu(group_norm(s, "gn1")(x))
        shortcut = conv(self.features, 1, self.strides, "VALID", "conv_proj")(x_pre) if self.project else x
        y = conv(mid, 1, 1, "VALID", "conv1")(x_pre)
        y = nn.relu(group_norm(s, "gn2")(y))
        y = conv(mid, 3, self.strides, ((1, 1), (1, 1)), "conv2")(y)  # timm get_padding(3, s) = 1
        y = nn.relu(group_norm(s, "gn3")(y))
        y = conv(self.features, 1, 1, "VALID", "conv3")(y)
        return y + shortcut


class Stage(nn.Module):
    """One ResNet stage ``block{k}`` of `unit` blocks; the first carries the stride and the projection.

    Unit names follow the checkpoint family: ``unit{j:02d}`` for BiT (bit_jax), ``unit{j}`` for the hybrid
    (vit_jax models_resnet.py).
    """

    spec: ModelSpec
    features: int
    blocks: int
    first_stride: int
    dtype: Any = jnp.float32
    unit: Any = None  # the block class: PreActBottleneck (BiT) or hybrid.ResidualUnit
    unit_name: str = "unit{:02d}"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        unit = self.unit or PreActBottleneck
        for j in range(self.blocks):
            x = unit(self.spec, self.features, self.first_stride if j == 0 else 1, project=j == 0,
                     dtype=self.dtype, name=self.unit_name.format(j + 1))(x)
        return x


class RootBlock(nn.Module):
    """BiT 'fixed' root: StdConv 7x7/2 pad 3 -> zero pad 1 -> max-pool 3x3/2 VALID (timm stem_type='fixed')."""

    spec: ModelSpec
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s = self.spec
        x = std_conv(s, s.arch.root_channels, 7, 2, ((3, 3), (3, 3)), "conv_root", self.dtype)(x)
        x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))  # timm nn.ConstantPad2d(1, 0.)
        return nn.max_pool(x, (3, 3), strides=(2, 2), padding="VALID")


class BiTResNet(nn.Module):
    """BiT ResNet-v2 classifier (family 'bit'). NHWC images in; float32 logits (or pre-logits features) out."""

    spec: ModelSpec
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False, pre_logits: bool = False,
                 separate_heads: bool = False) -> jax.Array | tuple[jax.Array, jax.Array]:
        """`separate_heads`: (logits, logits), as a ViT without a distillation token (see vit.py)."""
        s = self.spec
        x = RootBlock(s, self.dtype, name="root_block")(x.astype(self.dtype))
        for k, (blocks, cout) in enumerate(zip(s.arch.layers, s.arch.stage_channels), start=1):
            x = Stage(s, cout, blocks, 1 if k == 1 else 2, self.dtype, name=f"block{k}")(x)
        x = nn.relu(group_norm(s, "norm-pre-head")(x))
        x = jnp.mean(x.astype(jnp.float32), axis=(1, 2))  # global average pool (timm ClassifierHead 'avg')
        if pre_logits:
            return x
        # timm's head is a 1x1 conv after the pool, i.e. this dense layer (kernel = conv weight[:, :, 0, 0].T)
        logits = nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=nn.initializers.zeros,
                          name="head")(x).astype(jnp.float32)
        return (logits, logits) if separate_heads else logits
