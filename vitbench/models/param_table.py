"""Parameter names and layouts across frameworks: the timm state dict <-> Flax params table of every model (each
family declares its own from the entry helpers here: vitbench.models.families), and the flat ('a/b/c') <-> nested
tree helpers.

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

from vitbench.models.families import family_plugin
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


def param_table(spec: ModelSpec | str, resolution: int | None = None) -> list[_Entry]:
    """Every (torch key, flax path(s), transform) of `spec`'s models (see the module docstring); the
    resolution only matters for which position-embedding tables exist (the names do not depend on it)."""
    spec = get_spec(spec)
    r = spec.resolution if resolution is None else resolution
    return family_plugin(spec.family).computation.param_table(spec, r)  # each family declares its own


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


class NotARealWeight(ValueError):
    """A tensor that is no real number (weight_array)."""


def check_real(a: np.ndarray, key: str, source: str) -> None:
    """NotARealWeight naming `key` in `source` unless `a` holds real numbers (float, integer or bool): a complex
    array cast to float32 lost its imaginary part; text made the cast a traceback."""
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
        raise NotARealWeight(f"{source}: tensor {key!r} is {a.dtype}, not a real number (float, integer or bool)")


def weight_array(x: Any, key: str, source: str) -> np.ndarray:
    """A weight as vitbench holds it: a float of any width as float32 (what the models compute in; fp16 and bf16
    widen exactly); an integer or boolean buffer (BatchNorm's num_batches_tracked, a relative position index) in
    its own dtype, as the model declares it (as float32 an int64 rounded above 2**24). A complex or other
    array is refused (NotARealWeight naming `key` in `source`): cast to float32 it lost its imaginary part."""
    a = _np(x)
    check_real(a, key, source)
    return a.astype(np.float32, copy=False) if np.issubdtype(a.dtype, np.floating) else a
