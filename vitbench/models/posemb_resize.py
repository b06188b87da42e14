"""Position embeddings at a new resolution: one resampling algorithm for numpy, torch and jax arrays, and the
resize of every position-embedding kind in a timm state dict or Flax params (vitbench.models.posemb).

Fine-tuning at a higher resolution keeps the patch size, so the grid grows (ViT Section 3.2):
- learned (1-D, at the input or every layer): 2-D interpolation of the grid part, prefix tokens kept;
- learned_2d: each of the x and y tables interpolated along its axis (the same 1-D weights);
- sincos2d, none: nothing to resize (the fixed table is rebuilt for the new grid);
- relative: refused -- a raster-order 1-D offset means another pair of patches on a grid of another width, so
  the learned table does not carry over; fine-tune such a model at its pre-training resolution.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from vitbench.errors import ConfigError
from vitbench.models import posemb
from vitbench.models.families import family_plugin
from vitbench.models.param_table import flatten, unflatten
from vitbench.models.specs import ModelSpec, get_spec

Array = Any  # numpy, torch or jax array


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


def _resample_axis(table: Array, n_out: int, method: str) -> Array:
    """(n, D) table of a learned_2d axis -> (n_out, D), the same 1-D interpolation as the grids'."""
    n_in = table.shape[0]
    if n_in == n_out:
        return table
    m = interp_matrix(n_in, n_out, method)
    kind = _kind(table)
    if kind == "torch":
        import torch

        return torch.as_tensor(m, dtype=table.dtype, device=table.device) @ table
    if kind == "jax":
        import jax
        import jax.numpy as jnp

        return jnp.matmul(jnp.asarray(m, table.dtype), table, precision=jax.lax.Precision.HIGHEST)
    return (m @ np.asarray(table, np.float64)).astype(np.asarray(table).dtype)


def table_prefix_rows(rows: int, prefix: int) -> int | None:
    """The leading rows of a 1-D position table of `rows` rows that belong to a model's `prefix` tokens: all of
    them before a square grid, or none when the table is the grid alone (timm's no_embed_class: DeiT-III,
    register models); None when it is neither."""
    for p in (prefix, 0):
        n = rows - p
        if n > 0 and math.isqrt(n) ** 2 == n:
            return p
    return None


def resize_table(leaf: str, table: Array, new_shape: tuple[int, ...], prefix: int, method: str = "bilinear",
                 source: str = "weights") -> Array:
    """One position-embedding array named `leaf` (its last name part) resized to `new_shape` (`prefix` leading
    tokens kept as they are), or refused (ConfigError)."""
    if tuple(table.shape) == tuple(new_shape):
        return table
    if leaf in ("pos_embed", "pos_embedding") and len(table.shape) == len(new_shape) == 4 \
            and table.shape[-1] == new_shape[-1]:  # a (1, h, w, D) grid table (Axial-ViT): the same 2-D resampling
        (_, h, w, d), (_, h1, w1, _) = table.shape, new_shape
        flat = resample_pos_embed(table.reshape(1, h * w, d), (h1, w1), old_grid=(h, w), num_prefix_tokens=0,
                                  method=method)
        return flat.reshape(1, h1, w1, d)
    if leaf in ("pos_embed", "pos_embedding") and table.shape[-1] == new_shape[-1]:
        rows = (table.shape[-2], new_shape[-2])
        kept = {table_prefix_rows(r, prefix) for r in rows}
        if len(kept) != 1 or None in kept:
            raise ConfigError(f"{source}: {leaf} of {rows[0]} rows for a model of {rows[1]}: not {prefix} prefix "
                              "token(s) + a square grid in both")
        (prefix,) = kept
        return resample_pos_embed(table, math.isqrt(new_shape[-2] - prefix), num_prefix_tokens=prefix,
                                  method=method)
    if leaf in ("pos_embedding_x", "pos_embedding_y") and table.shape[-1] == new_shape[-1]:
        return _resample_axis(table, new_shape[0], method)
    if leaf == "rel_embedding":
        raise ConfigError(f"{source}: relative position embeddings (posemb=relative) for "
                          f"{(table.shape[0] + 1) // 2} tokens; they do not carry to {(new_shape[0] + 1) // 2} "
                          "tokens (1-D raster offsets change meaning with the grid width): use the pre-training "
                          "resolution")
    raise ConfigError(f"{source}: {leaf} has shape {tuple(table.shape)}, the model expects {tuple(new_shape)}")


POSEMB_LEAVES = ("pos_embed", "pos_embedding", "pos_embedding_x", "pos_embedding_y", "rel_embedding")


def _leaf(key: str) -> str:
    return key.replace("/", ".").rsplit(".", 1)[-1]


def is_posemb_key(key: str) -> bool:
    """Whether a timm key or a '/'-joined Flax path holds a position embedding (of any kind)."""
    return _leaf(key) in POSEMB_LEAVES


def resize_pos_embeds(weights: dict, shapes: dict[str, tuple[int, ...]], spec: ModelSpec | str,
                      method: str = "bilinear", source: str = "weights") -> dict:
    """Flat weights (timm keys or '/'-joined Flax paths) whose position embeddings are resized to `shapes`
    (the target model's; other keys untouched)."""
    spec = get_spec(spec)
    prefix = family_plugin(spec.family).attention_of(spec).prefix_tokens or 0  # the model's own (timm's)
    return {k: resize_table(_leaf(k), v, shapes[k], prefix, method, source)
            if is_posemb_key(k) and k in shapes else v for k, v in weights.items()}


def _check_tokens(spec: ModelSpec, resolution: int) -> None:
    spec.check_resolution(resolution)
    if "posemb" not in family_plugin(spec.family).fields:  # a ResNet; an axial model's grid table is its own
        raise ConfigError(f"{spec.name} ({spec.family}) has no position embeddings to resample here: its family "
                          "has no `posemb` field")


def resize_state_dict_pos_embed(state_dict: dict, spec: ModelSpec | str, resolution: int,
                                method: str = "bilinear") -> dict:
    """timm state dict -> a copy whose position embeddings (every kind) fit a model built at `resolution`."""
    spec = get_spec(spec)
    _check_tokens(spec, resolution)
    shapes = {t.torch_key: t.shape for t in posemb.tables(spec, resolution)}
    missing = sorted(set(shapes) - set(state_dict))
    if missing:
        raise ConfigError(f"these weights have no {missing[0]!r} to resample: not a {spec.name} state dict "
                          "(vitbench.models.checkpoints.check_weights names what they are)")
    return resize_pos_embeds(state_dict, shapes, spec, method)


def resize_params_pos_embed(params: dict, spec: ModelSpec | str, resolution: int,
                            method: str = "bilinear") -> dict:
    """Flax params (any resolution) -> a copy whose position embeddings (every kind) fit `resolution`."""
    spec = get_spec(spec)
    _check_tokens(spec, resolution)
    shapes = {t.flax_path: t.shape for t in posemb.tables(spec, resolution)}
    return unflatten(resize_pos_embeds(flatten(dict(params)), shapes, spec, method))
