"""Attention rollout (Abnar & Zuidema 2020; ViT paper Fig. 6 and App. D.8): how much each input token reaches
an output token through all layers, with the residual stream accounted for as an identity path."""

from __future__ import annotations

import numpy as np

from vitbench.insight.distance import check_attention
from vitbench.insight.layout import TokenLayout


def attention_rollout(attn: np.ndarray) -> np.ndarray:
    """(layers, images, heads, T, T) -> (images, T, T) rollout.

    Per layer A' = 0.5 * mean over heads of A + 0.5 * I (the residual connection), rows normalised to sum 1;
    rollout = A'_L @ ... @ A'_1, so row t is how the output token t mixes the input tokens (App. D.8).
    """
    a = np.asarray(attn, np.float64)
    t = a.shape[-1]
    out = np.broadcast_to(np.eye(t), (a.shape[1], t, t)).copy()
    for layer in a:  # input to output
        step = 0.5 * layer.mean(1) + 0.5 * np.eye(t)
        step /= step.sum(-1, keepdims=True)
        out = step @ out
    return out


def rollout_maps(attn: np.ndarray, layout: TokenLayout, token: int = 0) -> np.ndarray:
    """(images, grid_h, grid_w): the rollout row of output token `token` (0 = the class token) over the input
    patches, i.e. which parts of the image the prediction reads (paper Fig. 6)."""
    check_attention(attn, layout)
    if not 0 <= token < layout.num_prefix_tokens:
        raise ValueError(f"token {token} is not one of the {layout.num_prefix_tokens} extra token(s)")
    r = attention_rollout(attn)[:, token, layout.num_prefix_tokens:]
    return r.reshape(-1, layout.grid_h, layout.grid_w)
