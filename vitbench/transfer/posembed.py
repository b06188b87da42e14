"""Position-embedding resampling for fine-tuning at another resolution (paper Sec. 3.2, vit_jax checkpoint.py).

The learned embeddings of the N patch positions are reshaped to their sqrt(N) x sqrt(N) grid and linearly
interpolated in 2-D to the new grid; the class token's embedding is kept as is. vit_jax does this with
`scipy.ndimage.zoom(grid, zoom, order=1)` (corner-aligned linear interpolation); this is the same operation
written as two interpolation matrices, in numpy, so both backends resample identically.
"""

from __future__ import annotations

import math

import numpy as np


def _linear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) corner-aligned linear interpolation (== scipy.ndimage.zoom order=1, grid_mode=False)."""
    if n_in == 1 or n_out == 1:
        m = np.zeros((n_out, n_in))
        m[:, 0] = 1.0
        return m
    src = np.arange(n_out) * (n_in - 1) / (n_out - 1)
    lo = np.clip(np.floor(src).astype(int), 0, n_in - 2)
    frac = src - lo
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] = 1.0 - frac
    m[np.arange(n_out), lo + 1] += frac
    return m


def resample_pos_embed(posemb: np.ndarray, new_tokens: int, num_prefix: int = 1) -> np.ndarray:
    """(1, prefix + N, D) -> (1, prefix + new_tokens, D); identity when the grid does not change.

    `num_prefix` leading embeddings (the class token) are copied unchanged.
    """
    posemb = np.asarray(posemb)
    prefix, grid = posemb[:, :num_prefix], posemb[0, num_prefix:]
    n_old, d = grid.shape
    if n_old == new_tokens:
        return posemb
    gs_old, gs_new = math.isqrt(n_old), math.isqrt(new_tokens)
    if gs_old**2 != n_old or gs_new**2 != new_tokens:
        raise ValueError(f"position embeddings must form square grids, got {n_old} -> {new_tokens} tokens")
    m_y = _linear_matrix(gs_old, gs_new)
    g = grid.reshape(gs_old, gs_old, d).astype(np.float64)
    g = np.einsum("ih,hwd,jw->ijd", m_y, g, m_y).reshape(1, gs_new * gs_new, d)
    return np.concatenate([prefix, g.astype(posemb.dtype)], axis=1)
