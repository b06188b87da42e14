"""Flax (linen) Axial-ViT and Axial-ResNet: the twins of axial/torch.py, parameter paths named as in
vitbench.models.families.axial's conversion tables. NHWC images in; float32 logits (or `pre_logits`) out."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from vitbench.models.families import Axis
from vitbench.models.families.axial import resnet_plan
from vitbench.models.flavours import Gelu
from vitbench.models.layers.flax import NORM_DTYPE, layer_norm
from vitbench.models.posemb import relative_index
from vitbench.models.specs import ModelSpec


class AxialAttention(nn.Module):
    """Self-attention along one axis of (B, H, W, C): Axis.ROW mixes along W, Axis.COLUMN along H; `relative`: the
    query-dependent relative logits of Axial-DeepLab (a (2L-1, head dim) table sized by the axis at init)."""

    heads: int
    along: Axis
    bias: bool = True
    proj: bool = True
    relative: bool = False
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        if self.along is Axis.COLUMN:
            x = jnp.swapaxes(x, 1, 2)
        b, n, length, c = x.shape
        h, dh = self.heads, c // self.heads
        qkv = nn.Dense(3 * c, use_bias=self.bias, dtype=self.dtype, name="qkv")(x).reshape(b, n, length, 3, h, dh)
        q, k, v = qkv[:, :, :, 0] * dh ** -0.5, qkv[:, :, :, 1], qkv[:, :, :, 2]  # (b, n, L, heads, dh)
        logits = jnp.einsum("bnlhd,bnmhd->bnhlm", q, k)
        if self.relative:
            rel = self.param("rel_embedding", nn.initializers.normal(0.02), (2 * length - 1, dh))
            logits = logits + jnp.einsum("bnlhd,lmd->bnhlm", q, rel[relative_index(length)].astype(q.dtype))
        attn = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(v.dtype)
        self.sow("intermediates", "attention", attn)
        out = jnp.einsum("bnhlm,bnmhd->bnlhd", attn, v).reshape(b, n, length, c)
        if self.proj:
            out = nn.Dense(c, use_bias=self.bias, dtype=self.dtype, name="proj")(out)
        return jnp.swapaxes(out, 1, 2) if self.along is Axis.COLUMN else out


class AxialBlock(nn.Module):
    spec: ModelSpec
    along: Axis
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        s = self.spec
        y = layer_norm(s.arch.ln_eps, "norm1")(x)
        x = x + AxialAttention(s.arch.heads, self.along, dtype=self.dtype, name="attn")(y)
        y = layer_norm(s.arch.ln_eps, "norm2")(x)
        mlp = _Mlp(s.arch.width, s.arch.mlp_dim, s.flavour.gelu == Gelu.TANH, self.dtype, name="mlp")
        return x + mlp(y)


class _Mlp(nn.Module):
    dim: int
    hidden: int
    tanh: bool
    dtype: Any

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(self.hidden, dtype=self.dtype, name="fc1")(x)
        return nn.Dense(self.dim, dtype=self.dtype, name="fc2")(jax.nn.gelu(x, approximate=self.tanh))


class AxialViT(nn.Module):
    spec: ModelSpec
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = False, pre_logits: bool = False, separate_heads: bool = False):
        s = self.spec
        x = _Patch(s, self.dtype, name="patch_embed")(x)
        pos = self.param("pos_embed", nn.initializers.normal(0.02), (1, *x.shape[1:]))
        x = x.astype(jnp.float32) + pos  # the residual stream in float32, as torch's autocast keeps it
        for k in range(2 * s.arch.depth):
            x = AxialBlock(s, (Axis.ROW, Axis.COLUMN)[k % 2], self.dtype, name=f"blocks_{k}")(x)
        x = layer_norm(s.arch.ln_eps, "norm")(x)
        x = x.mean(axis=(1, 2))
        if pre_logits:
            return x.astype(jnp.float32)
        logits = nn.Dense(self.num_classes, dtype=self.dtype, name="head")(x).astype(jnp.float32)
        return (logits, logits) if separate_heads else logits


class _Patch(nn.Module):
    spec: ModelSpec
    dtype: Any

    @nn.compact
    def __call__(self, x):
        p = self.spec.arch.patch
        return nn.Conv(self.spec.arch.width, (p, p), strides=p, padding="VALID", dtype=self.dtype,
                       name="proj")(x.astype(self.dtype))


class Bottleneck(nn.Module):
    spec: ModelSpec
    mid: int
    cout: int
    stride: int
    project: bool
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        s, g, eps = self.spec, self.spec.arch.gn_groups, self.spec.flavour.gn_eps
        gn = lambda name: nn.GroupNorm(num_groups=g, epsilon=eps, use_fast_variance=False,  # noqa: E731
                                       dtype=NORM_DTYPE, name=name)
        conv = lambda c, name, stride=1: nn.Conv(c, (1, 1), strides=stride, padding="VALID",  # noqa: E731
                                                 use_bias=False, dtype=self.dtype, name=name)
        y = nn.relu(gn("norm1")(conv(self.mid, "conv1")(x)))
        axial = dict(bias=False, proj=False, relative=True, dtype=self.dtype)
        y = AxialAttention(s.arch.heads, Axis.COLUMN, name="attn_h", **axial)(y)
        y = AxialAttention(s.arch.heads, Axis.ROW, name="attn_w", **axial)(y)
        if self.stride == 2:
            y = nn.avg_pool(y, (2, 2), strides=(2, 2))
        y = gn("norm3")(conv(self.cout, "conv3")(nn.relu(gn("norm2")(y))))
        if self.project:
            x = _Downsample(self.cout, self.stride, g, eps, self.dtype, name="downsample")(x)
        return nn.relu(y + x)


class _Downsample(nn.Module):
    cout: int
    stride: int
    groups: int
    eps: float
    dtype: Any

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.cout, (1, 1), strides=self.stride, padding="VALID", use_bias=False, dtype=self.dtype,
                    name="conv")(x)
        return nn.GroupNorm(num_groups=self.groups, epsilon=self.eps, use_fast_variance=False, dtype=NORM_DTYPE,
                            name="norm")(x)


class _Stage(nn.Module):
    spec: ModelSpec
    index: int
    dtype: Any

    @nn.compact
    def __call__(self, x):
        s, i = self.spec, self.index
        cout = s.arch.stage_channels[i]
        for j in range(s.arch.layers[i]):
            x = Bottleneck(s, cout // 4, cout, 2 if (j == 0 and i > 0) else 1, j == 0, self.dtype,
                           name=f"blocks_{j}")(x)
        return x


class _Stem(nn.Module):
    spec: ModelSpec
    dtype: Any

    @nn.compact
    def __call__(self, x):
        s = self.spec
        x = nn.Conv(s.arch.root_channels, (7, 7), strides=2, padding=((3, 3), (3, 3)), use_bias=False,
                    dtype=self.dtype,
                    name="conv")(x.astype(self.dtype))
        x = nn.relu(nn.GroupNorm(num_groups=s.arch.gn_groups, epsilon=s.flavour.gn_eps, use_fast_variance=False,
                                 dtype=NORM_DTYPE, name="norm")(x))
        return nn.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))


class AxialResNet(nn.Module):
    spec: ModelSpec
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = False, pre_logits: bool = False, separate_heads: bool = False):
        x = _Stem(self.spec, self.dtype, name="stem")(x)
        for i in range(len(self.spec.arch.layers)):
            x = _Stage(self.spec, i, self.dtype, name=f"stages_{i}")(x)
        x = x.mean(axis=(1, 2))
        if pre_logits:
            return x.astype(jnp.float32)
        logits = nn.Dense(self.num_classes, dtype=self.dtype, name="head")(x).astype(jnp.float32)
        return (logits, logits) if separate_heads else logits


def build_axial_vit(spec: ModelSpec, num_classes: int, dtype: Any = jnp.float32) -> nn.Module:
    return AxialViT(spec, num_classes, dtype=dtype)


def build_axial_resnet(spec: ModelSpec, num_classes: int, dtype: Any = jnp.float32) -> nn.Module:
    return AxialResNet(spec, num_classes, dtype=dtype)


def _sown(module: nn.Module, params, x) -> dict:
    _, state = module.apply({"params": params}, x, mutable=["intermediates"])
    return state["intermediates"]


def vit_attention_maps(module: AxialViT, params, x) -> list:
    """Every axial block's attention probabilities (the row layer of block k, then its column layer), each
    (images, sequences, heads, length, length): the family's `axis_layers` order. Traceable (jit it)."""
    sown = _sown(module, params, x)
    return [sown[f"blocks_{k}"]["attn"]["attention"][0] for k in range(2 * module.spec.arch.depth)]


def resnet_attention_maps(module: AxialResNet, params, x) -> list:
    """Per bottleneck its height then its width layer's attention probabilities, in the `axis_layers` order."""
    sown = _sown(module, params, x)
    blocks, _ = resnet_plan(module.spec, x.shape[1])
    return [sown[f"stages_{b.s}"][f"blocks_{b.j}"][a]["attention"][0]
            for b in blocks for a in ("attn_h", "attn_w")]
