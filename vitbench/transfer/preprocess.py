"""The transfer protocols' image preprocessing, backend-free so torch and JAX see identical inputs: the paper's
evaluation pipeline (vit_jax `input_pipeline.py`): resize to the model resolution, then scale values to [-1, 1].
Training batches go through it too, unaugmented: vit_jax's training pipeline adds a random crop and flip, which
vitbench does not (its fine-tuning numbers are of an unaugmented recipe, and the distillation tables rely on it)."""

from __future__ import annotations

import numpy as np


def resize_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) bilinear interpolation matrix, half-pixel centres, antialiased when shrinking.

    Same filter as PIL's BILINEAR resize and torch `interpolate(..., 'bilinear', antialias=True)`: a
    triangle kernel whose support is stretched by the shrink factor; edges renormalised (clamp to edge).
    """
    scale = n_in / n_out
    support = max(scale, 1.0)
    centres = (np.arange(n_out) + 0.5) * scale
    pos = np.arange(n_in) + 0.5
    w = np.maximum(0.0, 1.0 - np.abs(pos[None, :] - centres[:, None]) / support)
    return w / w.sum(axis=1, keepdims=True)


def preprocess(images: np.ndarray, resolution: int) -> np.ndarray:
    """uint8 [0,255] or float [0,1] NHWC (C = 1 or 3) -> float32 (N, r, r, 3) in [-1, 1] (paper pipeline)."""
    x = images.astype(np.float32)
    x = x / 255.0 if images.dtype == np.uint8 else x
    n, h, w, c = x.shape
    if (h, w) != (resolution, resolution):
        wy = resize_weights(h, resolution).astype(np.float32)
        wx = resize_weights(w, resolution).astype(np.float32)
        x = np.einsum("ih,nhwc,jw->nijc", wy, x, wx, optimize=True)
    if c == 1:
        x = np.repeat(x, 3, axis=-1)
    return np.ascontiguousarray(x * 2.0 - 1.0, dtype=np.float32)
