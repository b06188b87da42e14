"""Position embeddings beyond the paper's default, backend-free (ViT appendix D.4, Table 8).

Kinds (`TransformerArch.posemb`, vitbench.models.arch):
- learned: one learned table per token, (1, prefix + h*w, D), raster order (the paper's default, timm's pos_embed);
- none: nothing (a bag of patches);
- learned_2d: two learned tables, x (w, D/2) and y (h, D/2); the patch at row i, column j gets the
  concatenation [x_j, y_i] (the paper's 2-D embedding); class/distillation tokens get none;
- sincos2d: fixed, not a parameter: [sin(x w), cos(x w), sin(y w), cos(y w)], w_k = 10000^(-k/(D/4-1)), on the
  patch tokens only (big_vision models/vit.py posemb_sincos_2d, the same formula);
- relative: 1-D relative attention (paper D.4): one learned embedding per offset p_q - p_k in the token sequence
  (2T-1 of them, class token included), per layer, of width D split over the heads like the keys; the query
  attends to these embeddings as keys, and those logits, scaled like the content logits, are added to the
  content logits before the softmax: softmax(q (k_k + r_{q-k})^T / sqrt(d_head)) -- Shaw et al. 2018 eq. 4 without
  their value term, the form the ViT paper's description gives.
Places (`TransformerArch.posemb_at`): input (once, after the stem), every_layer (a table per block, added at its
start), every_layer_shared (one table added at the start of every block). Parameter initialisation: normal
std 0.02, as the paper's 1-D table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec

INIT_STD = 0.02  # the ViT paper's (BERT's) position-embedding init
SINCOS_TEMPERATURE = 10_000.0  # big_vision posemb_sincos_2d (Vaswani et al. 2017)


def grid(spec: ModelSpec, resolution: int) -> tuple[int, int]:
    """(h, w) of the patch grid at `resolution`."""
    side = resolution // spec.stride
    return side, side


@dataclass(frozen=True)
class Table:
    """One position-embedding parameter: its timm key, its Flax path and its shape at some resolution."""

    torch_key: str
    flax_path: str
    shape: tuple[int, ...]


def num_tables(spec: ModelSpec) -> int:
    """How many absolute position-embedding tables the model holds (0 for none, sincos2d and relative)."""
    if spec.arch.posemb not in ("learned", "learned_2d"):
        return 0
    return spec.arch.depth if spec.arch.posemb_at == "every_layer" else 1


def tables(spec: ModelSpec, resolution: int) -> list[Table]:
    """Every learned position-embedding table of `spec` at `resolution` that resizing, identification and the
    grid check read: its family's (`FamilyWeights.posemb_tables`; none for a ResNet)."""
    return family_plugin(spec.family).weights.posemb_tables(spec, resolution)


def transformer_tables(spec: ModelSpec, resolution: int) -> list[Table]:
    """Every learned position-embedding parameter of a ViT-style transformer `spec` at `resolution` (names in
    both frameworks: the one declaration the weight conversion, the resizing and the analytic count use)."""
    h, w = grid(spec, resolution)
    d, t = spec.arch.width, h * w + spec.num_prefix_tokens
    if spec.arch.posemb == "relative":  # one offset table per block, inside its attention
        return [Table(f"blocks.{i}.attn.rel_embedding",
                      f"Transformer/encoderblock_{i}/MultiHeadDotProductAttention_1/rel_embedding",
                      (relative_offsets(t), d)) for i in range(spec.arch.depth)]
    if (spec.arch.posemb, spec.arch.posemb_at) == ("learned", "input"):  # timm's own table: the rows' layout
        return [Table("pos_embed", "Transformer/posembed_input/pos_embedding", (1, t, d))]
    out = []
    for i in range(num_tables(spec)):
        place = {"input": "posembed_input", "every_layer_shared": "posembed_shared"}.get(spec.arch.posemb_at,
                                                                                         f"posembed_{i}")
        leaves = {"pos_embedding": (1, t, d)} if spec.arch.posemb == "learned" else \
            {"pos_embedding_x": (w, d // 2), "pos_embedding_y": (h, d // 2)}
        out += [Table(f"pos_embeds.{i}.{leaf}", f"Transformer/{place}/{leaf}", shape) for leaf, shape in leaves.items()]
    return out


def resolution_of(shapes: dict[str, tuple[int, ...]], spec: ModelSpec, key: str = "torch_key") -> int | None:
    """The resolution whose learned tables have the given shapes ({timm key or Flax path: shape}, `key` says
    which); None when the shapes give no square grid. A family without such tables reads its own grid-sized
    tables (`FamilyWeights.resolution_of`; the native resolution when they say nothing)."""
    ref = tables(spec, spec.resolution)
    if not ref:
        found = family_plugin(spec.family).weights.resolution_of(spec, shapes)
        return spec.resolution if found is None else found
    for t in ref:
        have = shapes.get(getattr(t, key))
        if have is None or len(have) != len(t.shape):
            continue
        if t.torch_key.endswith(("pos_embedding_x", "pos_embedding_y")):
            side = have[0]
        else:  # 1-D tables count prefix + h*w tokens; relative ones 2T - 1 offsets
            tokens = have[-2] if len(have) == 3 else (have[0] + 1) // 2
            n = tokens - spec.num_prefix_tokens
            side = math.isqrt(max(n, 0))
            if n <= 0 or side * side != n:
                return None
        return side * spec.stride
    return None


def relative_offsets(tokens: int) -> int:
    """Offsets p_q - p_k between `tokens` positions: 2T - 1."""
    return 2 * tokens - 1


def relative_index(tokens: int) -> np.ndarray:
    """(T, T) int index into the offset table: q - k + T - 1 (offset -(T-1) at 0, +(T-1) at 2T-2)."""
    pos = np.arange(tokens)
    return (pos[:, None] - pos[None, :] + tokens - 1).astype(np.int64)


def sincos2d(h: int, w: int, dim: int) -> np.ndarray:
    """(h*w, dim) float32 fixed 2-D embedding, raster order (big_vision posemb_sincos_2d)."""
    if dim % 4:
        raise ValueError(f"sincos2d needs a width divisible by 4, got {dim}")
    y, x = np.mgrid[:h, :w]
    q = dim // 4
    omega = 1.0 / SINCOS_TEMPERATURE ** (np.arange(q) / max(q - 1, 1))
    ys = y.reshape(-1)[:, None] * omega[None, :]
    xs = x.reshape(-1)[:, None] * omega[None, :]
    return np.concatenate([np.sin(xs), np.cos(xs), np.sin(ys), np.cos(ys)], axis=1).astype(np.float32)
