"""Parameter names and layouts across frameworks: the timm state dict <-> Flax params table of every model, and
the flat ('a/b/c') <-> nested tree helpers.

Layout conventions (PyTorch -> Flax):
- conv weight (O, I, kh, kw) -> kernel (kh, kw, I, O); linear weight (out, in) -> kernel (in, out)
- timm's fused qkv (3D, D) -> query/key/value kernels (D, heads, D/heads), biases (heads, D/heads);
  attention proj (D, D) -> out kernel (heads, D/heads, D)
- BiT head: 1x1 conv (K, C, 1, 1) after the pool -> dense kernel (C, K)
- DeiT distilled: dist_token -> dist, head_dist -> head_dist (as head)
- LayerNorm/GroupNorm weight -> scale; class token, position embeddings (every kind, vitbench.models.posemb),
  relative offset tables: same shape; pre_logits (rep_size): a dense layer
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vitbench.models import posemb
from vitbench.models.specs import ModelSpec, get_spec


@dataclass(frozen=True)
class _Entry:
    torch_key: str
    flax_paths: tuple[str, ...]  # '/'-joined paths into the Flax params tree
    to_flax: Callable[[np.ndarray], tuple[np.ndarray, ...]]
    to_torch: Callable[..., np.ndarray]


def _copy(t: str, f: str) -> _Entry:
    return _Entry(t, (f,), lambda w: (w,), lambda w: w)


def _conv(t: str, f: str) -> _Entry:  # OIHW <-> HWIO
    return _Entry(t, (f,), lambda w: (w.transpose(2, 3, 1, 0),), lambda k: k.transpose(3, 2, 0, 1))


def _dense(t: str, f: str) -> _Entry:  # (out, in) <-> (in, out)
    return _Entry(t, (f,), lambda w: (w.T,), lambda k: k.T)


def _conv1x1_dense(t: str, f: str) -> _Entry:  # (K, C, 1, 1) <-> (C, K)
    return _Entry(t, (f,), lambda w: (w[:, :, 0, 0].T,), lambda k: k.T[:, :, None, None])


def _norm(t: str, f: str) -> list[_Entry]:
    return [_copy(f"{t}.weight", f"{f}/scale"), _copy(f"{t}.bias", f"{f}/bias")]


def _linear(t: str, f: str) -> list[_Entry]:
    return [_dense(f"{t}.weight", f"{f}/kernel"), _copy(f"{t}.bias", f"{f}/bias")]


def _attention(t: str, f: str, d: int, heads: int) -> list[_Entry]:
    hd = d // heads
    qkv = tuple(f"{f}/{n}" for n in ("query", "key", "value"))
    return [
        _Entry(f"{t}.qkv.weight", tuple(p + "/kernel" for p in qkv),
               lambda w: tuple(w[i * d:(i + 1) * d].T.reshape(d, heads, hd) for i in range(3)),
               lambda *ks: np.concatenate([k.reshape(d, d).T for k in ks], axis=0)),
        _Entry(f"{t}.qkv.bias", tuple(p + "/bias" for p in qkv),
               lambda b: tuple(b[i * d:(i + 1) * d].reshape(heads, hd) for i in range(3)),
               lambda *bs: np.concatenate([b.reshape(d) for b in bs])),
        _Entry(f"{t}.proj.weight", (f"{f}/out/kernel",), lambda w: (w.T.reshape(heads, hd, d),),
               lambda k: k.reshape(d, d).T),
        _copy(f"{t}.proj.bias", f"{f}/out/bias"),
    ]


def _vit_entries(spec: ModelSpec, embed: str, resolution: int) -> list[_Entry]:
    d = spec.width
    out = [_copy("cls_token", "cls")] if spec.num_prefix_tokens else []  # GAP: no class token
    out += [_conv(f"{embed}.weight", "embedding/kernel"), _copy(f"{embed}.bias", "embedding/bias")]
    # position embeddings of every kind and place, named once in vitbench.models.posemb
    out += [_copy(t.torch_key, t.flax_path) for t in posemb.tables(spec, resolution)]
    if spec.distilled:  # DeiT: timm VisionTransformerDistilled's dist_token and head_dist
        out += [_copy("dist_token", "dist"), *_linear("head_dist", "head_dist")]
    for i in range(spec.depth):
        t, f = f"blocks.{i}", f"Transformer/encoderblock_{i}"
        out += _norm(f"{t}.norm1", f"{f}/LayerNorm_0")
        out += _attention(f"{t}.attn", f"{f}/MultiHeadDotProductAttention_1", d, spec.heads)
        out += _norm(f"{t}.norm2", f"{f}/LayerNorm_2")
        out += _linear(f"{t}.mlp.fc1", f"{f}/MlpBlock_3/Dense_0")
        out += _linear(f"{t}.mlp.fc2", f"{f}/MlpBlock_3/Dense_1")
    out += _norm("norm", "Transformer/encoder_norm")
    if spec.rep_size:  # the tanh pre-logits layer (vit_jax's pre-training head)
        out += _linear("pre_logits", "pre_logits")
    return out + _linear("head", "head")


def _hybrid_resnet_entries(spec: ModelSpec) -> list[_Entry]:
    b = "patch_embed.backbone"
    out = [_conv(f"{b}.stem.conv.weight", "conv_root/kernel")] + _norm(f"{b}.stem.norm", "gn_root")
    for s, blocks in enumerate(spec.layers):
        for j in range(blocks):
            t, f = f"{b}.stages.{s}.blocks.{j}", f"block{s + 1}/unit{j + 1}"
            for n in (1, 2, 3):
                out += [_conv(f"{t}.conv{n}.weight", f"{f}/conv{n}/kernel")] + _norm(f"{t}.norm{n}", f"{f}/gn{n}")
            if j == 0:
                out += [_conv(f"{t}.downsample.conv.weight", f"{f}/conv_proj/kernel")]
                out += _norm(f"{t}.downsample.norm", f"{f}/gn_proj")
    return out


def _bit_entries(spec: ModelSpec) -> list[_Entry]:
    out = [_conv("stem.conv.weight", "root_block/conv_root/kernel")]
    for s, blocks in enumerate(spec.layers):
        for j in range(blocks):
            t, f = f"stages.{s}.blocks.{j}", f"block{s + 1}/unit{j + 1:02d}"
            for n in (1, 2, 3):
                out += _norm(f"{t}.norm{n}", f"{f}/gn{n}") + [_conv(f"{t}.conv{n}.weight", f"{f}/conv{n}/kernel")]
            if j == 0:
                out += [_conv(f"{t}.downsample.conv.weight", f"{f}/conv_proj/kernel")]
    out += _norm("norm", "norm-pre-head")
    out += [_conv1x1_dense("head.fc.weight", "head/kernel"), _copy("head.fc.bias", "head/bias")]
    return out


def param_table(spec: ModelSpec | str, resolution: int | None = None) -> list[_Entry]:
    """Every (torch key, flax path(s), transform) of `spec`'s models (see the module docstring); the
    resolution only matters for which position-embedding tables exist (the names do not depend on it)."""
    spec = get_spec(spec)
    r = spec.resolution if resolution is None else resolution
    if spec.family == "vit":
        return _vit_entries(spec, "patch_embed.proj", r)
    if spec.family == "bit":
        return _bit_entries(spec)
    return _hybrid_resnet_entries(spec) + _vit_entries(spec, "patch_embed.proj", r)


def flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {'a/b/c': leaf} (the vit_jax .npz key layout)."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}/{k}" if prefix else str(k)
        if isinstance(v, dict) or (hasattr(v, "items") and not hasattr(v, "shape")):
            out.update(flatten(dict(v), key))
        else:
            out[key] = v
    return out


def unflatten(flat: dict[str, Any]) -> dict:
    tree: dict = {}
    for key, v in flat.items():
        node = tree
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return tree


def _np(x: Any) -> np.ndarray:
    if type(x).__module__.startswith("torch"):
        return x.detach().cpu().float().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
    return np.asarray(x)
