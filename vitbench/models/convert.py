"""Weights across frameworks: timm state dict <-> Flax params, original vit_jax .npz checkpoints, and
position-embedding resampling (one algorithm for numpy, torch and jax arrays).

Layout conventions (PyTorch -> Flax):
- conv weight (O, I, kh, kw) -> kernel (kh, kw, I, O); linear weight (out, in) -> kernel (in, out)
- timm's fused qkv (3D, D) -> query/key/value kernels (D, heads, D/heads), biases (heads, D/heads);
  attention proj (D, D) -> out kernel (heads, D/heads, D)
- BiT head: 1x1 conv (K, C, 1, 1) after the pool -> dense kernel (C, K)
- DeiT distilled: dist_token -> dist, head_dist -> head_dist (as head)
- LayerNorm/GroupNorm weight -> scale; class token, position embeddings: same shape
Every mapping is checked both ways: unused or missing keys and shape mismatches raise, naming the key.

Security: checkpoints are read with np.load(allow_pickle=False); a file that needs pickle is refused.
"""

from __future__ import annotations

import io
import math
import re
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vitbench.errors import ConfigError, UnsafeFileError
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.paths import write_atomic

Array = Any  # numpy, torch or jax array


class WeightsMismatchError(ConfigError, ValueError):
    """Weights of one model offered to another: names the missing / unexpected / mis-shaped keys."""


# ---------------------------------------------------------------------------------------------------
# The name/layout table
# ---------------------------------------------------------------------------------------------------
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


def _vit_entries(spec: ModelSpec, embed: str) -> list[_Entry]:
    d = spec.width
    out = [_copy("cls_token", "cls"), _copy("pos_embed", "Transformer/posembed_input/pos_embedding"),
           _conv(f"{embed}.weight", "embedding/kernel"), _copy(f"{embed}.bias", "embedding/bias")]
    if spec.distilled:  # DeiT: timm VisionTransformerDistilled's dist_token and head_dist
        out += [_copy("dist_token", "dist"), *_linear("head_dist", "head_dist")]
    for i in range(spec.depth):
        t, f = f"blocks.{i}", f"Transformer/encoderblock_{i}"
        out += _norm(f"{t}.norm1", f"{f}/LayerNorm_0")
        out += _attention(f"{t}.attn", f"{f}/MultiHeadDotProductAttention_1", d, spec.heads)
        out += _norm(f"{t}.norm2", f"{f}/LayerNorm_2")
        out += _linear(f"{t}.mlp.fc1", f"{f}/MlpBlock_3/Dense_0")
        out += _linear(f"{t}.mlp.fc2", f"{f}/MlpBlock_3/Dense_1")
    out += _norm("norm", "Transformer/encoder_norm") + _linear("head", "head")
    return out


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


def param_table(spec: ModelSpec | str) -> list[_Entry]:
    """Every (torch key, flax path(s), transform) of `spec`'s models (see the module docstring)."""
    spec = get_spec(spec)
    if spec.family == "vit":
        return _vit_entries(spec, "patch_embed.proj")
    if spec.family == "bit":
        return _bit_entries(spec)
    return _hybrid_resnet_entries(spec) + _vit_entries(spec, "patch_embed.proj")


# ---------------------------------------------------------------------------------------------------
# Flat/nested helpers
# ---------------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------------
# torch <-> flax
# ---------------------------------------------------------------------------------------------------
def torch_to_flax(state_dict: dict[str, Any], spec: ModelSpec | str) -> dict:
    """timm state dict (tensors or arrays) -> nested Flax params of numpy float32 arrays."""
    table = param_table(spec)
    want = {e.torch_key for e in table}
    if want != set(state_dict):
        from vitbench.models.checkpoints import check_weights

        check_weights(state_dict, spec, source="state dict")  # raises, naming keys and what the weights are
    flat: dict[str, np.ndarray] = {}
    for e in table:
        for path, arr in zip(e.flax_paths, e.to_flax(_np(state_dict[e.torch_key]))):
            flat[path] = np.ascontiguousarray(arr, dtype=np.float32)
    return unflatten(flat)


def flax_to_torch(params: dict, spec: ModelSpec | str) -> dict[str, Any]:
    """Nested Flax params -> timm state dict of float32 torch tensors (load with strict=True)."""
    import torch

    table = param_table(spec)
    flat = {k: _np(v) for k, v in flatten(dict(params)).items()}
    want = {p for e in table for p in e.flax_paths}
    missing, extra = sorted(want - set(flat)), sorted(set(flat) - want)
    if missing or extra:
        raise WeightsMismatchError(f"Flax params do not match {get_spec(spec).name}: missing {missing[:8]}, "
                                   f"unexpected {extra[:8]} (pre_logits has no PyTorch counterpart here)")
    # np.array(copy=True): jax-backed arrays are read-only, and the tensors must own their memory
    return {e.torch_key: torch.from_numpy(np.array(e.to_torch(*(flat[p] for p in e.flax_paths)),
                                                   dtype=np.float32, copy=True, order="C"))
            for e in table}


# ---------------------------------------------------------------------------------------------------
# Position-embedding resampling (numpy / torch / jax)
# ---------------------------------------------------------------------------------------------------
_CUBIC_A = -0.75  # PyTorch's bicubic kernel constant (upsample_bicubic2d); Keys (1981) cubic convolution


def _cubic_weights(t: float) -> tuple[float, float, float, float]:
    a = _CUBIC_A

    def near(x: float) -> float:  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x: float) -> float:  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1), near(t), near(1 - t), far(2 - t)


def interp_matrix(n_in: int, n_out: int, method: str = "bilinear") -> np.ndarray:
    """(n_out, n_in) matrix of 1-D interpolation weights, half-pixel centres (align_corners=False), edges
    clamped -- exactly torch.nn.functional.interpolate(mode='bilinear'|'bicubic', antialias=False) per axis."""
    if method not in ("bilinear", "bicubic"):
        raise ConfigError(f"unknown interpolation {method!r}; allowed: bilinear, bicubic")
    m = np.zeros((n_out, n_in), np.float64)
    scale = n_in / n_out
    for i in range(n_out):
        src = (i + 0.5) * scale - 0.5
        if method == "bilinear":
            src = max(src, 0.0)  # torch clamps negative source coordinates for linear modes
            i0 = min(int(math.floor(src)), n_in - 1)
            lam = src - i0
            m[i, i0] += 1 - lam
            m[i, min(i0 + 1, n_in - 1)] += lam
        else:
            i0 = int(math.floor(src))
            for off, w in zip((-1, 0, 1, 2), _cubic_weights(src - i0)):
                m[i, min(max(i0 + off, 0), n_in - 1)] += w
    return m


def _grid(g: int | tuple[int, int]) -> tuple[int, int]:
    return (g, g) if isinstance(g, int) else (int(g[0]), int(g[1]))


def _kind(x: Any) -> str:
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if "jax" in sys.modules and isinstance(x, sys.modules["jax"].Array):
        return "jax"
    return "numpy"


def resample_pos_embed(posemb: Array, new_grid: int | tuple[int, int],
                       old_grid: int | tuple[int, int] | None = None, num_prefix_tokens: int = 1,
                       method: str = "bilinear") -> Array:
    """Resample learned position embeddings (1, prefix + h*w, D) or (prefix + h*w, D) to a new h'*w' grid.

    The paper's recipe for fine-tuning at a higher resolution (ViT Section 3.2): 2-D interpolation of the
    patch-grid embeddings; the class token's (the `num_prefix_tokens` leading ones) kept as they are.
    Works on numpy, torch and jax arrays (returns the same kind, differentiable in torch/jax) with one
    separable matrix formulation, so both backends give the same numbers; identity when the grid is unchanged.
    `old_grid` defaults to a square grid.
    """
    kind = _kind(posemb)
    squeeze = len(posemb.shape) == 2
    x = posemb[None] if squeeze else posemb
    if len(x.shape) != 3 or x.shape[0] != 1:
        raise ValueError(f"position embeddings must be (1, N, D) or (N, D), got {tuple(posemb.shape)}")
    n_grid = x.shape[1] - num_prefix_tokens
    if old_grid is None:
        side = math.isqrt(n_grid)
        if side * side != n_grid:
            raise ValueError(f"{n_grid} grid tokens are not a square grid; pass old_grid=(h, w)")
        old_grid = side
    (h0, w0), (h1, w1) = _grid(old_grid), _grid(new_grid)
    if h0 * w0 != n_grid:
        raise ValueError(f"old_grid {h0}x{w0} does not match {n_grid} grid tokens")
    if (h0, w0) == (h1, w1):
        return posemb
    mh, mw = interp_matrix(h0, h1, method), interp_matrix(w0, w1, method)
    prefix, grid = x[:, :num_prefix_tokens], x[:, num_prefix_tokens:]
    d = x.shape[-1]
    if kind == "torch":
        import torch

        g = grid.reshape(h0, w0, d)
        mh_t, mw_t = (torch.as_tensor(m, dtype=g.dtype, device=g.device) for m in (mh, mw))
        g = torch.einsum("ih,jw,hwd->ijd", mh_t, mw_t, g).reshape(1, h1 * w1, d)
        out = torch.cat([prefix, g], dim=1)
    elif kind == "jax":
        import jax
        import jax.numpy as jnp

        g = grid.reshape(h0, w0, d)
        g = jnp.einsum("ih,jw,hwd->ijd", jnp.asarray(mh, g.dtype), jnp.asarray(mw, g.dtype), g,
                       precision=jax.lax.Precision.HIGHEST).reshape(1, h1 * w1, d)
        out = jnp.concatenate([prefix, g], axis=1)
    else:
        grid = np.asarray(grid)
        g = np.einsum("ih,jw,hwd->ijd", mh, mw, grid.reshape(h0, w0, d).astype(np.float64))
        out = np.concatenate([np.asarray(prefix), g.reshape(1, h1 * w1, d).astype(grid.dtype)], axis=1)
    return out[0] if squeeze else out


def _new_grid(spec: ModelSpec, resolution: int) -> int:
    spec.check_resolution(resolution)
    if spec.family == "bit":
        raise ConfigError(f"{spec.name} is a ResNet: it has no position embeddings to resample")
    return resolution // spec.stride


def resize_params_pos_embed(params: dict, spec: ModelSpec | str, resolution: int,
                            method: str = "bilinear") -> dict:
    """Flax params (any resolution) -> a copy whose position embeddings fit `resolution` (class token kept)."""
    spec = get_spec(spec)
    new = _new_grid(spec, resolution)
    tr = dict(params["Transformer"])
    pe = dict(tr["posembed_input"])
    pe["pos_embedding"] = resample_pos_embed(pe["pos_embedding"], new, num_prefix_tokens=spec.num_prefix_tokens,
                                             method=method)
    tr["posembed_input"] = pe
    return {**params, "Transformer": tr}


def resize_state_dict_pos_embed(state_dict: dict, spec: ModelSpec | str, resolution: int,
                                method: str = "bilinear") -> dict:
    """timm state dict -> a copy whose `pos_embed` fits a model built at `resolution` (class token kept)."""
    spec = get_spec(spec)
    new = _new_grid(spec, resolution)
    if "pos_embed" not in state_dict:
        raise ConfigError(f"these weights have no 'pos_embed' to resample: not a {spec.name} state dict "
                          "(vitbench.models.checkpoints.check_weights names what they are)")
    return {**state_dict, "pos_embed": resample_pos_embed(state_dict["pos_embed"], new,
                                                          num_prefix_tokens=spec.num_prefix_tokens, method=method)}


# ---------------------------------------------------------------------------------------------------
# Original vit_jax / big_vision .npz checkpoints
# ---------------------------------------------------------------------------------------------------
# Keys of a checkpoint converted by flax's convert_pre_linen (linen per-class counters) -> the original
# (pre-linen, global counter) names the files on gs://vit_models use and vitbench's Flax models use.
_LINEN_TO_FILE = {"MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1", "LayerNorm_1": "LayerNorm_2",
                  "MlpBlock_0": "MlpBlock_3"}


def load_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Read a '/'-keyed .npz checkpoint into {key: array} without ever unpickling."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"checkpoint {str(path)!r} does not exist (or is not a file)")
    if not zipfile.is_zipfile(path):  # np.load would take anything else for a pickle
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable .npz file (not a zip archive)")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as e:  # object arrays need pickle
        raise UnsafeFileError(f"checkpoint {str(path)!r} holds pickled objects; refused "
                              f"(only plain numeric arrays are loaded): {e}") from e
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable .npz file: {e}") from e


def save_npz(path: str | Path, params: dict) -> None:
    """Write Flax params as a vit_jax-style .npz (flattened '/'-joined keys, float32 numpy arrays)."""
    flat = {k: np.asarray(v) for k, v in flatten(dict(params)).items()}
    buf = io.BytesIO()
    np.savez(buf, **flat)
    write_atomic(path, buf.getvalue())  # nothing half-written under the final name


# The original BiT files (gs://bit_models/BiT-*.npz) keep big_transfer's TensorFlow names; big_vision's
# bit_paper.maybe_convert_big_transfer_format maps them to the layout vitbench's Flax BiT uses:
# unit groups a/b/c -> gn1+conv1 / gn2+conv2 / gn3+conv3, a/proj -> conv_proj, the final group_norm ->
# norm-pre-head, head/conv2d (1,1,C,K) -> head (C,K).
_BIT_TF_UNIT = re.compile(r"^resnet/(block\d)/(unit\d+)/(a|b|c)/(proj/)?(standardized_conv2d|group_norm)(_\d+)?/"
                          r"(kernel|gamma|beta)$")
_BIT_TF_TOP = {"resnet/root_block/standardized_conv2d/kernel": "root_block/conv_root/kernel",
               "resnet/group_norm/gamma": "norm-pre-head/scale", "resnet/group_norm/beta": "norm-pre-head/bias",
               "resnet/head/conv2d/kernel": "head/kernel", "resnet/head/conv2d/bias": "head/bias"}
_TF_LEAF = {"kernel": "kernel", "gamma": "scale", "beta": "bias"}


def _from_big_transfer_names(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {}
    for k, v in flat.items():
        if k in _BIT_TF_TOP:
            out[_BIT_TF_TOP[k]] = v[0, 0] if k == "resnet/head/conv2d/kernel" and v.ndim == 4 else v
            continue
        m = _BIT_TF_UNIT.match(k)
        if m is None:
            out[k] = v  # left as is: the fit check names it
            continue
        block, unit, group, proj, kind, _, leaf = m.groups()
        n = "abc".index(group) + 1
        layer = "conv_proj" if proj else (f"conv{n}" if kind == "standardized_conv2d" else f"gn{n}")
        out[f"{block}/{unit}/{layer}/{_TF_LEAF[leaf]}"] = v
    return out


def _canonical_keys(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Keys of every known file layout -> the original vit_jax / big_vision names vitbench's Flax models use."""
    if any(k.startswith("resnet/") for k in flat):
        return _from_big_transfer_names(flat)
    if not any("MultiHeadDotProductAttention_0" in k for k in flat):
        return flat
    out = {}
    for k, v in flat.items():
        parts = k.split("/")
        out["/".join(_LINEN_TO_FILE.get(p, p) if "encoderblock_" in k else p for p in parts)] = v
    return out


def params_from_checkpoint(flat: dict[str, np.ndarray], template: dict, *, new_head: bool = False,
                           source: str = "checkpoint", method: str = "bilinear") -> dict:
    """Fit a flat checkpoint to `template` (the target model's params, or just their shapes from
    jax.eval_shape) and return nested float32 numpy params.

    - GroupNorm scale/bias stored as (1,1,1,C) are squeezed; position embeddings of another grid are resampled
      (class token kept); names from linen-converted files are mapped back to the original ones.
    - new_head=True: the paper's fine-tuning head swap -- drop `pre_logits` (if the target has none) and take
      a zero-initialised `head` of the template's shape (the paper's fine-tuning head); otherwise the head
      must match.
    Anything else that does not match raises ConfigError naming the keys.
    """
    flat = _canonical_keys({k: np.asarray(v) for k, v in flat.items()})
    want = {k: v for k, v in flatten(dict(template)).items()}
    if new_head:
        flat = {k: v for k, v in flat.items() if not k.startswith("head/")}
        if not any(k.startswith("pre_logits/") for k in want):
            flat = {k: v for k, v in flat.items() if not k.startswith("pre_logits/")}
    missing = sorted(k for k in want if k not in flat and not (new_head and k.startswith("head/")))
    extra = sorted(k for k in flat if k not in want)
    if missing or extra:
        more = lambda ks: f"{ks[:6]}{' ...' if len(ks) > 6 else ''}"  # noqa: E731
        raise ConfigError(f"{source} does not fit the model: missing {more(missing)}, unexpected {more(extra)}. "
                          "Check the model name (e.g. ViT-B/16 vs ViT-B/32), or use new_head for a checkpoint "
                          "with another head.")
    out: dict[str, np.ndarray] = {}
    for k, ref in want.items():
        if k not in flat:  # the new head, zero-initialised (ViT paper, fine-tuning)
            out[k] = np.zeros(ref.shape, np.float32)
            continue
        v = flat[k]
        if v.shape != ref.shape:
            if k.endswith("pos_embedding") and v.shape[-1] == ref.shape[-1]:
                prefix = 2 if "dist" in want else 1  # class (+ distillation) token embeddings, kept as they are
                v = resample_pos_embed(v, math.isqrt(ref.shape[1] - prefix), num_prefix_tokens=prefix,
                                       method=method)
            elif v.size == math.prod(ref.shape):  # e.g. GroupNorm (1,1,1,C) -> (C,)
                v = v.reshape(ref.shape)
            else:
                raise ConfigError(f"{source}: {k} has shape {v.shape}, the model expects {ref.shape}")
        out[k] = v.astype(np.float32)
    return unflatten(out)


def load_vit_jax_npz(path: str | Path, spec: ModelSpec | str, resolution: int | None = None,
                     num_classes: int | None = None, *, new_head: bool = False,
                     representation_size: int | None = None, method: str = "bilinear") -> dict:
    """Load an original vit_jax (or big_vision / big_transfer BiT) .npz into params for
    `build_flax_model(spec, resolution, num_classes)`; see `params_from_checkpoint` for what is adapted.

    The params compute the checkpoint's function only in a model of the origin's flavour, e.g.
    `spec.with_origin("vit_jax")`; `vitbench.models.checkpoints.load_pretrained` returns that spec with them."""
    import jax
    import jax.numpy as jnp

    from vitbench.models.flax import build_flax_model

    spec = get_spec(spec)
    resolution = spec.resolution if resolution is None else resolution
    model = build_flax_model(spec, resolution, num_classes, representation_size=representation_size)
    x = jax.ShapeDtypeStruct((1, resolution, resolution, 3), jnp.float32)
    template = jax.eval_shape(model.init, jax.random.PRNGKey(0), x)["params"]  # shapes only: no compile
    return params_from_checkpoint(load_npz(path), template, new_head=new_head, source=str(path), method=method)

