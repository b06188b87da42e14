"""Principal components of the patch-embedding filters (paper Fig. 7 left): the basis a ViT's linear patch
projection has learned, shown as small RGB images.

Only where the projection acts on pixels (a P x P conv with stride P = the token pitch, i.e. a ViT). A hybrid's
"patch" projection is 1x1 on ResNet features: it has no pixel-space filters, and nothing is computed for it.

Grey inputs (R = G = B, e.g. the digits) only ever train the channel sum of each filter: the differences between a
filter's R, G and B weights keep their random initialisation, and the RGB components would show that noise. For
such inputs the components are taken of the channel-summed filters (the filter the model applies to a grey
image), as grey images.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vitbench.models.arch import arch_value
from vitbench.models.specs import ModelSpec

NUM_COMPONENTS = 28  # the paper's Fig. 7 (left) shows the top 28 components


@dataclass(frozen=True)
class FilterComponents:
    images: np.ndarray  # (k, P, P, C) principal components as images, sign fixed (largest |entry| > 0)
    variance_ratio: np.ndarray  # (k,) share of the filters' variance each component explains
    channels_summed: bool = False  # True: components of the channel-summed filters (C = 1), for grey inputs


def acts_on_pixels(spec: ModelSpec) -> bool:
    """True when the patch projection's kernel covers exactly one token's pixels (ViT), False for a hybrid."""
    return arch_value(spec, "patch") == spec.stride


def is_grey(images: np.ndarray) -> bool:
    """True when every NHWC image has identical channels (a grey image repeated to RGB)."""
    return bool(np.all(images == images[..., :1]))


def embedding_filter_components(kernel: np.ndarray, k: int = NUM_COMPONENTS, *,
                                sum_channels: bool = False) -> FilterComponents:
    """Top-`k` principal components (at most D - 1 and C*P*P) of the D filters of a conv kernel (D, C, P, P)
    (torch layout): each filter flattened to C*P*P values, centred over the D filters, SVD. `sum_channels`:
    of the channel-summed filters instead (what acts on grey inputs)."""
    w = np.asarray(kernel, np.float64)
    if sum_channels:
        w = w.sum(1, keepdims=True)
    d, c, ph, pw = w.shape
    x = w.reshape(d, c * ph * pw)
    x = x - x.mean(0, keepdims=True)
    _, s, vt = np.linalg.svd(x, full_matrices=False)
    k = min(k, len(s), max(d - 1, 1))  # centring D filters leaves at most D - 1 directions
    comps = vt[:k]
    sign = np.sign(comps[np.arange(k), np.abs(comps).argmax(1)])  # SVD signs are arbitrary: fix them
    comps = comps * sign[:, None]
    var = s**2
    ratio = var[:k] / var.sum() if var.sum() > 0 else np.zeros(k)
    return FilterComponents(comps.reshape(k, c, ph, pw).transpose(0, 2, 3, 1), ratio, sum_channels)
