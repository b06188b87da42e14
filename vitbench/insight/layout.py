"""Where each token sits on the input image: the patch grid, its pitch in pixels, and the leading extra tokens.

A ViT's token (i, j) covers pixels [i*s, (i+1)*s) x [j*s, (j+1)*s) with s = the patch size; a hybrid's covers
s = the ResNet's total stride (`ModelSpec.stride`: 1x1 "patches" on a stride-s feature map, paper Sec. 3.1).
Extra tokens (the class token, DeiT's distillation token) come first in the sequence and have no position.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vitbench.errors import ConfigError
from vitbench.models.specs import ModelSpec


@dataclass(frozen=True)
class TokenLayout:
    """The token sequence of one model at one input size: `num_prefix_tokens` extra tokens, then the patch grid
    row-major (timm's flatten(2) and the Flax reshape order)."""

    grid_h: int
    grid_w: int
    stride_px: int  # pixels per token side
    num_prefix_tokens: int = 1  # class token (+ distillation token, ...)

    @classmethod
    def of(cls, spec: ModelSpec, resolution: int, num_prefix_tokens: int = 1) -> TokenLayout:
        spec.check_resolution(resolution)
        if num_prefix_tokens < 0:
            raise ConfigError(f"num_prefix_tokens must be >= 0, got {num_prefix_tokens}")
        g = resolution // spec.stride
        return cls(g, g, spec.stride, num_prefix_tokens)

    @property
    def num_patches(self) -> int:
        return self.grid_h * self.grid_w

    @property
    def num_tokens(self) -> int:
        return self.num_prefix_tokens + self.num_patches

    @property
    def resolution_px(self) -> tuple[int, int]:
        return self.grid_h * self.stride_px, self.grid_w * self.stride_px

    def patch_centres_px(self) -> np.ndarray:
        """(num_patches, 2) (y, x) pixel coordinates of every patch centre, row-major."""
        ys, xs = np.meshgrid(np.arange(self.grid_h), np.arange(self.grid_w), indexing="ij")
        return (np.stack([ys.ravel(), xs.ravel()], axis=1) + 0.5) * self.stride_px

    def distance_matrix_px(self) -> np.ndarray:
        """(num_patches, num_patches) Euclidean distance in pixels between patch centres (paper Sec. 4.5)."""
        c = self.patch_centres_px()
        return np.sqrt(((c[:, None, :] - c[None, :, :]) ** 2).sum(-1))
