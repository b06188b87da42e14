"""timm VisionTransformer with the paper's head and position-embedding variants (ViT appendix D.3, D.4).

Used by build_torch_model for a spec whose classifier/rep_size/posemb/posemb_at differ from the rows' defaults
(the rows build plain timm models). What changes (see vitbench.models.posemb for the kinds and places):
- classifier 'gap': timm's class_token=False, global_pool='avg' with the final LayerNorm on the tokens before the
  pool (fc_norm=False), as vit_jax / big_vision; a linear head.
- rep_size > 0: a `pre_logits` Linear(D, rep_size) + tanh before the head (vit_jax's pre-training head).
- posemb other than learned-at-input: timm's pos_embed='none' and `pos_embeds`, a list of PosEmbed tables (one,
  or one per block for every_layer), added after the stem or at the start of every block.
- posemb 'relative': each block's attention is a RelativeAttention (timm's Attention + a `rel_embedding` table).
Parameter names (torch <-> flax in vitbench.models.param_table): pos_embeds.{i}.pos_embedding[_x|_y],
blocks.{i}.attn.rel_embedding, pre_logits.{weight,bias}.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import Attention
from timm.models.vision_transformer import VisionTransformer

from vitbench.models import posemb
from vitbench.models.specs import ModelSpec


def is_plain(spec: ModelSpec) -> bool:
    """True when timm's own VisionTransformer builds `spec` (the rows: class token, 1-D learned input table)."""
    a = spec.arch
    return (a.classifier, a.rep_size, a.posemb, a.posemb_at) == ("token", 0, "learned", "input")


class PosEmbed(torch.nn.Module):
    """One absolute table of kind learned / learned_2d / sincos2d over (prefix tokens +) an h x w grid."""

    def __init__(self, kind: str, grid: tuple[int, int], dim: int, prefix: int):
        super().__init__()
        self.kind, self.grid, self.prefix = kind, grid, prefix
        h, w = grid
        normal = lambda *shape: torch.nn.Parameter(torch.randn(*shape) * posemb.INIT_STD)  # noqa: E731
        if kind == "learned":
            self.pos_embedding = normal(1, prefix + h * w, dim)
        elif kind == "learned_2d":
            self.pos_embedding_x, self.pos_embedding_y = normal(w, dim // 2), normal(h, dim // 2)
        elif kind == "sincos2d":  # fixed: a buffer outside the state dict, rebuilt for any resolution
            self.register_buffer("table", torch.from_numpy(posemb.sincos2d(h, w, dim)), persistent=False)
        else:
            raise ValueError(f"no absolute table for posemb={kind}")

    def patch_table(self) -> torch.Tensor:
        """(h*w, D) embedding of the patch tokens (learned_2d: [x_j, y_i] for row i, column j)."""
        h, w = self.grid
        if self.kind == "sincos2d":
            return self.table
        x = self.pos_embedding_x[None, :, :].expand(h, w, -1)
        y = self.pos_embedding_y[:, None, :].expand(h, w, -1)
        return torch.cat([x, y], dim=-1).reshape(h * w, -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "learned":
            return x + self.pos_embedding
        p = self.prefix
        return torch.cat([x[:, :p], x[:, p:] + self.patch_table().to(x.dtype)], dim=1)


class RelativeAttention(Attention):
    """timm Attention + 1-D relative position logits (vitbench.models.posemb: the paper's D.4 form)."""

    def __init__(self, dim: int, num_heads: int, tokens: int, **kwargs):
        super().__init__(dim, num_heads=num_heads, **kwargs)
        self.rel_embedding = torch.nn.Parameter(torch.randn(posemb.relative_offsets(tokens), dim) * posemb.INIT_STD)
        self.register_buffer("rel_index", torch.from_numpy(posemb.relative_index(tokens)), persistent=False)

    def forward(self, x: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        b, t, c = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        rel = self.rel_embedding.reshape(-1, self.num_heads, self.head_dim).permute(1, 2, 0)  # (H, hd, 2T-1)
        rel_logits = q @ rel  # (B, H, T, 2T-1): the query against every offset's embedding
        bias = rel_logits.gather(-1, self.rel_index.expand(b, self.num_heads, t, t)) * self.scale
        if self.fused_attn:
            x = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:  # explicit softmax through attn_drop, where inspection's hook reads the probabilities
            attn = ((q * self.scale) @ k.transpose(-2, -1) + bias).softmax(dim=-1)
            x = self.attn_drop(attn) @ v
        x = self.norm(x.transpose(1, 2).reshape(b, t, c))
        return self.proj_drop(self.proj(x))


class VariantViT(VisionTransformer):
    """timm VisionTransformer for a spec with a non-default head or position embedding."""

    def __init__(self, spec: ModelSpec, resolution: int, num_classes: int, **kwargs):
        token = spec.arch.classifier == "token"
        super().__init__(img_size=resolution, num_classes=num_classes, class_token=token,
                         global_pool="token" if token else "avg", fc_norm=False,
                         pos_embed="learn" if (spec.arch.posemb, spec.arch.posemb_at) == ("learned", "input")
                         else "none",
                         **kwargs)
        grid, d = posemb.grid(spec, resolution), spec.arch.width
        self.posemb_at = spec.arch.posemb_at
        self.pos_embeds = torch.nn.ModuleList(
            PosEmbed(spec.arch.posemb, grid, d, spec.num_prefix_tokens)
            for _ in range(spec.arch.depth if spec.arch.posemb_at == "every_layer" else 1)
        ) if spec.arch.posemb in ("learned", "learned_2d", "sincos2d") and self.pos_embed is None else None
        if spec.arch.posemb == "relative":
            t = grid[0] * grid[1] + spec.num_prefix_tokens
            for blk in self.blocks:
                blk.attn = RelativeAttention(d, spec.arch.heads, t, qkv_bias=True)
        self.pre_logits = torch.nn.Linear(d, spec.arch.rep_size) if spec.arch.rep_size else None
        if spec.arch.rep_size and num_classes:
            self.head = torch.nn.Linear(spec.arch.rep_size, num_classes)

    def forward_features(self, x: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        x = self._pos_embed(self.patch_embed(x))  # class token (+ timm's own table: learned at input)
        if self.pos_embeds is not None and self.posemb_at == "input":
            x = self.pos_embeds[0](x)
        x = self.norm_pre(self.patch_drop(x))
        for i, blk in enumerate(self.blocks):
            if self.pos_embeds is not None and self.posemb_at != "input":
                x = self.pos_embeds[i if len(self.pos_embeds) > 1 else 0](x)
            x = blk(x)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.head_drop(self.fc_norm(self.pool(x)))
        if self.pre_logits is not None:
            x = torch.tanh(self.pre_logits(x))
        return x if pre_logits else self.head(x)
