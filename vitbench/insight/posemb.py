"""Position-embedding similarity (paper Fig. 7 centre): cosine similarity of each patch's learned position
embedding with every other patch's, as a grid of grids."""

from __future__ import annotations

import numpy as np

from vitbench.errors import ConfigError
from vitbench.insight.layout import TokenLayout
from vitbench.models.arch import arch_value


def posemb_similarity(pos_embed: np.ndarray, layout: TokenLayout) -> np.ndarray:
    """(1, T, D) or (T, D) position embeddings (T: extra tokens + patches, or the patches alone) ->
    (grid_h, grid_w, grid_h, grid_w) cosine similarities:
    out[i, j] is the map of patch (i, j)'s similarity with every patch. Extra tokens' embeddings are left out."""
    pe = np.asarray(pos_embed, np.float64)
    pe = pe[0] if pe.ndim == 3 else pe
    if pe.ndim != 2 or pe.shape[0] not in (layout.num_tokens, layout.num_patches):
        raise ConfigError(f"position embeddings of shape {tuple(np.shape(pos_embed))}; expected "
                          f"({layout.num_tokens}, D) for {layout.num_prefix_tokens} extra token(s) + a "
                          f"{layout.grid_h}x{layout.grid_w} grid, or the grid's alone")
    g = pe[pe.shape[0] - layout.num_patches:]
    g = g / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-12)
    h, w = layout.grid_h, layout.grid_w
    return (g @ g.T).reshape(h, w, h, w)


def no_adjacent_patch(layout: TokenLayout) -> str | None:
    """Why `adjacent_similarity` does not apply to `layout`'s grid (None: it does): a one-patch grid has no pair of
    4-adjacent patches (its InspectResult lists it under not_applicable; no NaN is reported)."""
    if layout.num_patches > 1:
        return None
    return ("a one-patch grid (1x1) has no adjacent patch to compare; inspect at a resolution of at least two "
            "patches")


def adjacent_similarity(sim: np.ndarray) -> float:
    """Mean cosine similarity between 4-adjacent patches of a (h, w, h, w) similarity grid (nan for one patch:
    see `no_adjacent_patch`)."""
    h, w = sim.shape[:2]
    pairs = [sim[i, j, i + di, j + dj] for i in range(h) for j in range(w) for di, dj in ((0, 1), (1, 0))
             if i + di < h and j + dj < w]
    return float(np.mean(pairs)) if pairs else float("nan")


# timm-style names of the variant tables (vitbench.models.families.vit.torch_variants; the same in every
# backend's weights)
TABLE_1D = "pos_embeds.{i}.pos_embedding"
TABLE_X, TABLE_Y = "pos_embeds.{i}.pos_embedding_x", "pos_embeds.{i}.pos_embedding_y"


def position_table(weights: dict[str, np.ndarray], spec, layout: TokenLayout,
                   pos_embed: str = "pos_embed") -> tuple[np.ndarray | None, str]:
    """The absolute position embeddings to compare (Fig. 7 centre) as (tokens or patches, D), and what they are;
    None and the reason when the model has none (posemb none or relative: ViT appendix D.4, Table 8).

    learned at the input: the one table (`pos_embed`); learned in every layer: the first block's table (each block
    has its own); shared in every layer: the one table; learned_2d: the concatenation [x_j, y_i] of the two tables
    per patch (row i, column j); sincos2d: the fixed table (its similarity is the formula's, not learned)."""
    kind, at = arch_value(spec, "posemb"), arch_value(spec, "posemb_at")
    if kind == "none":
        return None, "posemb=none: the model has no position embeddings (a bag of patches) to compare"
    if kind == "relative":
        return None, ("posemb=relative: no absolute position embeddings to compare (a learned bias per token "
                      "offset in each layer's attention)")
    where = {"input": "added once at the input", "every_layer": "the first block's own table (one per block)",
             "every_layer_shared": "one table added at the start of every block"}[at]
    if kind == "learned":
        table = weights[pos_embed] if pos_embed in weights else weights[TABLE_1D.format(i=0)]
        return np.asarray(table), f"learned 1-D, {where}"
    h, w = layout.grid_h, layout.grid_w
    if kind == "learned_2d":
        x = np.asarray(weights[TABLE_X.format(i=0)])
        y = np.asarray(weights[TABLE_Y.format(i=0)])
        if (len(y), len(x)) != (h, w):
            raise ConfigError(f"learned 2-D position tables of {len(y)}x{len(x)} for a {h}x{w} grid: resize them "
                              "first (vitbench.insight.run.fit_pos_embed)")
        grid = np.concatenate([np.broadcast_to(x[None], (h, w, x.shape[-1])),
                               np.broadcast_to(y[:, None], (h, w, y.shape[-1]))], axis=-1)
        return grid.reshape(h * w, -1), f"learned 2-D (x and y tables concatenated), {where}"
    from vitbench.models.posemb import sincos2d

    return sincos2d(h, w, spec.arch.width), f"fixed 2-D sin-cos (not learned), {where}"


def table_grid(weights: dict[str, np.ndarray], spec, layout: TokenLayout) -> tuple[int, int] | None:
    """The grid a variant's learned position tables were made for (None: nothing learned per position, or the
    1-D input table, which `fit_pos_embed` resamples)."""
    if arch_value(spec, "posemb") == "learned_2d":
        return len(weights[TABLE_Y.format(i=0)]), len(weights[TABLE_X.format(i=0)])
    if arch_value(spec, "posemb") == "learned" and arch_value(spec, "posemb_at") != "input":
        n = np.asarray(weights[TABLE_1D.format(i=0)]).shape[-2] - layout.num_prefix_tokens
    elif arch_value(spec, "posemb") == "relative":
        key = next(k for k in weights if k.endswith("attn.rel_embedding"))
        n = (np.asarray(weights[key]).shape[0] + 1) // 2 - layout.num_prefix_tokens
    else:
        return None
    side = int(round(n ** 0.5))
    return side, side
