"""Mean attention distance of per-axis attention layers (axial attention: ViT paper App. D.6; Ho et al. 2019;
Wang et al. 2020): the paper's Fig. 7 (right) measure for a layer that attends within one row or one column.

A row layer's query at column i attends to the keys of its own row, at columns j: the distance between the two
token centres is |i - j| * step along x (their y is the same); a column layer's, |i - j| * step along y. The step
is the input pixels between two adjacent tokens of the map the layer attends over (the patch of an Axial-ViT,
the feature map's stride at an Axial-ResNet's stage). Per head: the sum over keys of weight x distance, averaged
over the query positions of every row (column) and over images. The model's layers come from its family's
declaration (vitbench.models.families.AxisLayer); no extra tokens take part (an axial model has none).
"""

from __future__ import annotations

import numpy as np

from vitbench.errors import ConfigError
from vitbench.models.families import AxisLayer


def axis_offsets_px(layer: AxisLayer) -> np.ndarray:
    """(length, length) distance in px along the layer's axis between query position i and key position j."""
    pos = np.arange(layer.length)
    return np.abs(pos[:, None] - pos[None, :]).astype(np.float64) * layer.step_px


def check_axis_attention(attn: np.ndarray, layer: AxisLayer, index: int) -> None:
    """`attn` must be (images, sequences, heads, length, length) with sequences = length (a square grid)."""
    n = layer.length
    if attn.ndim != 5 or attn.shape[1] != n or attn.shape[-2:] != (n, n):
        raise ConfigError(f"attention maps of layer {index + 1} ({layer.axis.value}, {layer.where}) of shape "
                          f"{tuple(attn.shape)}; expected (images, {n}, heads, {n}, {n}) on a {n}x{n} grid")


def axis_distance_per_image(attn: np.ndarray, layer: AxisLayer, index: int = 0) -> np.ndarray:
    """(images, heads) mean attention distance in px along the layer's axis, averaged over its query positions
    (every position of every row or column) of each image."""
    check_axis_attention(attn, layer, index)
    a = np.asarray(attn, np.float64)
    per_query = np.einsum("bshqk,qk->bshq", a, axis_offsets_px(layer)) / a.sum(-1)
    return per_query.mean((1, 3))


def uniform_axis_distance_px(layer: AxisLayer) -> float:
    """The distance of uniform attention along the axis: the mean |i - j| * step over all ordered pairs of
    positions, (length^2 - 1) / (3 length) steps (the level of a head global along its axis)."""
    return float(axis_offsets_px(layer).mean())
