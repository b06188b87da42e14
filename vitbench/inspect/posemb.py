"""Position-embedding similarity (paper Fig. 7 centre): cosine similarity of each patch's learned position
embedding with every other patch's, as a grid of grids."""

from __future__ import annotations

import numpy as np

from vitbench.errors import ConfigError
from vitbench.inspect.layout import TokenLayout


def posemb_similarity(pos_embed: np.ndarray, layout: TokenLayout) -> np.ndarray:
    """(1, T, D) or (T, D) position embeddings -> (grid_h, grid_w, grid_h, grid_w) cosine similarities:
    out[i, j] is the map of patch (i, j)'s similarity with every patch. Extra tokens' embeddings are left out."""
    pe = np.asarray(pos_embed, np.float64)
    pe = pe[0] if pe.ndim == 3 else pe
    if pe.ndim != 2 or pe.shape[0] != layout.num_tokens:
        raise ConfigError(f"position embeddings of shape {tuple(np.shape(pos_embed))}; expected "
                          f"({layout.num_tokens}, D) for {layout.num_prefix_tokens} extra token(s) + a "
                          f"{layout.grid_h}x{layout.grid_w} grid")
    g = pe[layout.num_prefix_tokens:]
    g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    h, w = layout.grid_h, layout.grid_w
    return (g @ g.T).reshape(h, w, h, w)


def adjacent_similarity(sim: np.ndarray) -> float:
    """Mean cosine similarity between 4-adjacent patches of a (h, w, h, w) similarity grid (nan for one patch)."""
    h, w = sim.shape[:2]
    pairs = [sim[i, j, i + di, j + dj] for i in range(h) for j in range(w) for di, dj in ((0, 1), (1, 0))
             if i + di < h and j + dj < w]
    return float(np.mean(pairs)) if pairs else float("nan")
