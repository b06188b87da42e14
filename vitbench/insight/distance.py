"""Mean attention distance (paper Sec. 4.5, Fig. 7 right, Fig. 11): the attention analogue of a CNN's receptive
field size, per layer and head, in pixels of the input.

For one query patch: sum over key patches of attention weight x pixel distance between the two patch centres.
Extra tokens (class / distillation) have no position, so
- queries: only patch tokens are averaged (the class token's own row is left out);
- keys: the weights on patch keys are renormalised to sum to 1, i.e. the distance is that of where a query looks
  *within the image*; the mass a head puts on the extra tokens is reported apart (`prefix_attention_share`), so
  a head that mostly reads the class token is not mistaken for a local one.
Uniform attention then gives the mean pairwise patch distance, and any attention whatever its class-token share.
"""

from __future__ import annotations

import numpy as np

from vitbench.errors import ConfigError
from vitbench.insight.layout import TokenLayout


def check_attention(attn: np.ndarray, layout: TokenLayout) -> None:
    """`attn` must be (layers, images, heads, tokens, tokens) with tokens = layout.num_tokens."""
    t = layout.num_tokens
    if attn.ndim != 5 or attn.shape[-2:] != (t, t):
        raise ConfigError(f"attention maps of shape {tuple(attn.shape)}; expected (layers, images, heads, {t}, "
                          f"{t}) for {layout.num_prefix_tokens} extra token(s) + a "
                          f"{layout.grid_h}x{layout.grid_w} grid (is num_prefix_tokens right?)")


def attention_distance_per_image(attn: np.ndarray, layout: TokenLayout) -> np.ndarray:
    """(layers, images, heads) mean attention distance in px of each image, averaged over its query patches."""
    check_attention(attn, layout)
    p = layout.num_prefix_tokens
    a = np.asarray(attn[..., p:, p:], np.float64)  # patch queries x patch keys (sliced first: less memory)
    mass = a.sum(-1)  # (L, B, H, N): weight on patch keys, for renormalising
    with np.errstate(invalid="ignore", divide="ignore"):  # no weight on any patch: NaN, refused by name after
        per_query = np.einsum("lbhqk,qk->lbhq", a, layout.distance_matrix_px()) / mass  # (insight.result)
    return per_query.mean(-1)


def mean_attention_distance(attn: np.ndarray, layout: TokenLayout) -> np.ndarray:
    """(layers, heads) mean attention distance in px, averaged over query patches and images."""
    return attention_distance_per_image(attn, layout).mean(1)


def prefix_attention_share(attn: np.ndarray, layout: TokenLayout) -> np.ndarray:
    """(layers, heads) mean attention weight that patch queries put on the extra tokens (0 = none, 1 = all)."""
    check_attention(attn, layout)
    p = layout.num_prefix_tokens
    return np.asarray(attn[..., p:, :p], np.float64).sum(-1).mean((1, 3))


def uniform_attention_distance_px(layout: TokenLayout) -> float:
    """The distance of uniform attention over all patches: the mean pairwise patch-centre distance in px (the
    level of a fully global head)."""
    return float(layout.distance_matrix_px().mean())
