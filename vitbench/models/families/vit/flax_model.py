"""Flax (linen) Vision Transformer, also the transformer half of the hybrid; vit_jax parameter names.

Same function as timm's VisionTransformer built in vitbench/models/families/vit/torch.py (checked by the parity
tests): patch embedding = PxP/P conv; class token prepended; learned position embeddings added; L pre-LN blocks
(LayerNorm eps spec.arch.ln_eps, multi-head attention with scale head_dim**-0.5 and biases on q, k, v and out,
MLP with the GELU of the spec's flavour: exact erf as timm's nn.GELU, or the tanh approximation, flax's
nn.gelu default, which vit_jax and big_vision use); final LayerNorm; the class token's output -> (optional
pre_logits Dense+tanh) -> head. Head and position-embedding variants (classifier gap, rep_size, posemb kinds
and places, relative attention) as torch_variants.py builds them; see vitbench.models.posemb. No dropout:
vitbench measures with dropout off (timm's default rates are 0 too).

Distilled (DeiT, spec.arch.distilled): a distillation token `dist` after `cls` (position embeddings for N+2 tokens)
and a second head `head_dist` on it. ``apply(..., separate_heads=True)`` returns (cls_logits, dist_logits) for
training with distillation; the default output is their mean (timm VisionTransformerDistilled at inference),
and the pre-logits representation is the mean of the two tokens after the final norm (timm's forward_head
with pre_logits=True).

Parameter tree (names as in the original vit_jax .npz checkpoints, pre-linen auto-names included)::

    embedding/{kernel (P,P,C,D), bias}            cls (1,1,D)
    Transformer/posembed_input/pos_embedding (1, N+1, D)
    Transformer/encoderblock_{i}/LayerNorm_0, MultiHeadDotProductAttention_1/{query,key,value,out},
                                 LayerNorm_2, MlpBlock_3/{Dense_0,Dense_1}
    Transformer/encoder_norm    [pre_logits]    head
    distilled only: dist (1,1,D), head_dist
    hybrid only: conv_root, gn_root, block{k}/unit{j}/...  (see vitbench/models/families/hybrid/flax_model.py)
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vitbench.models import posemb
from vitbench.models.flavours import Gelu
from vitbench.models.layers.flax import layer_norm
from vitbench.models.specs import ModelSpec


class MlpBlock(nn.Module):
    mlp_dim: int
    dtype: Any = jnp.float32
    gelu: Gelu = Gelu.ERF

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = x.shape[-1]
        init = dict(kernel_init=nn.initializers.xavier_uniform(), bias_init=nn.initializers.normal(1e-6))
        x = nn.Dense(self.mlp_dim, dtype=self.dtype, name="Dense_0", **init)(x)
        x = nn.gelu(x, approximate=self.gelu is Gelu.TANH)  # ERF: as torch.nn.GELU(); TANH: flax's default
        return nn.Dense(d, dtype=self.dtype, name="Dense_1", **init)(x)


class MultiHeadDotProductAttention(nn.Module):
    """Self-attention with flax's MultiHeadDotProductAttention parameter layout (query/key/value kernels
    (D, H, D/H), out kernel (H, D/H, D)); scores scaled by head_dim**-0.5 (Vaswani et al. 2017).
    `rel_tokens` > 0: 1-D relative position logits over that many tokens (vitbench.models.posemb), from a
    `rel_embedding` table (2T-1, D), added to the content logits before the softmax."""

    num_heads: int
    dtype: Any = jnp.float32
    rel_tokens: int = 0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        d = x.shape[-1]
        hd = d // self.num_heads
        init = nn.initializers.xavier_uniform()
        proj = lambda name: nn.DenseGeneral((self.num_heads, hd), dtype=self.dtype, kernel_init=init,  # noqa: E731
                                            name=name)
        q, k, v = proj("query")(x), proj("key")(x), proj("value")(x)  # (B, T, H, hd)
        bias = None
        if self.rel_tokens:
            t = self.rel_tokens
            table = self.param("rel_embedding", nn.initializers.normal(posemb.INIT_STD),
                               (posemb.relative_offsets(t), d), jnp.float32).astype(self.dtype)
            rel = jnp.einsum("bqhd,rhd->bhqr", q, table.reshape(-1, self.num_heads, hd))  # query vs every offset
            bias = rel[:, :, np.arange(t)[:, None], posemb.relative_index(t)] * hd**-0.5  # (B, H, T, T)
        # jax.nn.dot_product_attention == softmax(q k^T * hd**-0.5 + bias) v, XLA's everywhere: its default
        # implementation (None) is XLA's in jax 0.10-0.11 (a TODO there picks cuDNN one day); cuDNN's fused kernel
        # is asked for by name only, not yet here (docs/gpu.md, the second run: JAX's memory per image)
        o = jax.nn.dot_product_attention(q, k, v, bias=bias, scale=hd**-0.5)
        if self.is_mutable_collection("intermediates"):  # inspection only (vitbench.insight): the probabilities
            logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=jax.lax.Precision.HIGHEST) * hd**-0.5
            logits = logits if bias is None else logits + bias
            self.sow("intermediates", "attention_weights", jax.nn.softmax(logits.astype(jnp.float32), axis=-1))
        return nn.DenseGeneral(d, axis=(-2, -1), dtype=self.dtype, kernel_init=init, name="out")(o)


class Encoder1DBlock(nn.Module):
    """Pre-LN transformer block (ViT eq. 2-3). Names fixed to the checkpoint's (pre-linen) auto-names."""

    spec: ModelSpec
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s = self.spec
        rel = x.shape[1] if s.arch.posemb == "relative" else 0
        y = layer_norm(s.arch.ln_eps, "LayerNorm_0")(x)
        x = x + MultiHeadDotProductAttention(s.arch.heads, self.dtype, rel,
                                             name="MultiHeadDotProductAttention_1")(y)
        y = layer_norm(s.arch.ln_eps, "LayerNorm_2")(x)
        return x + MlpBlock(s.arch.mlp_dim, self.dtype, s.flavour.gelu, name="MlpBlock_3")(y)


class Encoder(nn.Module):
    """`Transformer` in the checkpoint: position embeddings, blocks, final LayerNorm.

    Absolute tables (vitbench.models.posemb) at `posembed_input` (once, the default), `posembed_{i}` (every
    layer, its own) or `posembed_shared` (every layer, one table); `grid` is the (h, w) patch grid."""

    spec: ModelSpec
    grid: tuple[int, int]
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s = self.spec
        table = lambda name: AddPositionEmbs(s.arch.posemb, self.grid, s.num_prefix_tokens,  # noqa: E731
                                             name=name)
        absolute = posemb.num_tables(s) > 0 or s.arch.posemb == "sincos2d"
        if absolute and s.arch.posemb_at == "input":
            x = table("posembed_input")(x)
        shared = table("posembed_shared") if absolute and s.arch.posemb_at == "every_layer_shared" else None
        for i in range(s.arch.depth):
            if absolute and s.arch.posemb_at == "every_layer":
                x = table(f"posembed_{i}")(x)
            elif shared is not None:
                x = shared(x)  # one module called at every block: one table
            x = Encoder1DBlock(s, self.dtype, name=f"encoderblock_{i}")(x)
        return layer_norm(s.arch.ln_eps, "encoder_norm")(x)


class AddPositionEmbs(nn.Module):
    """An absolute position embedding added to the tokens (vitbench.models.posemb): `learned` 1-D
    (1, prefix + h*w, D) over every token (the ViT paper's, init normal std 0.02); `learned_2d` x (w, D/2) and
    y (h, D/2) tables; fixed `sincos2d`; the last two on the patch tokens only."""

    kind: str = "learned"
    grid: tuple[int, int] = (0, 0)
    prefix: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        init = nn.initializers.normal(posemb.INIT_STD)
        if self.kind == "learned":
            pe = self.param("pos_embedding", init, (1, *x.shape[1:]), jnp.float32)
            return x + pe.astype(x.dtype)
        (h, w), d, p = self.grid, x.shape[-1], self.prefix
        if self.kind == "sincos2d":
            pe = jnp.asarray(posemb.sincos2d(h, w, d))
        else:
            px = self.param("pos_embedding_x", init, (w, d // 2), jnp.float32)
            py = self.param("pos_embedding_y", init, (h, d // 2), jnp.float32)
            pe = jnp.concatenate([jnp.broadcast_to(px[None], (h, w, d // 2)),
                                  jnp.broadcast_to(py[:, None], (h, w, d // 2))], axis=-1).reshape(h * w, d)
        return jnp.concatenate([x[:, :p], x[:, p:] + pe.astype(x.dtype)], axis=1)


class VisionTransformer(nn.Module):
    """ViT, or with a `root` (a function (images, spec, dtype) -> feature map, run in this module's scope: the
    hybrid family's ResNet) R50+ViT. NHWC images in; float32 logits out.

    `representation_size` adds the pre-training `pre_logits` Dense+tanh (the paper's pre-training head); by
    default spec.arch.rep_size decides (0: none), as in the PyTorch model.
    """

    spec: ModelSpec
    num_classes: int
    representation_size: int | None = None
    dtype: Any = jnp.float32
    root: Any = None

    @nn.compact
    def __call__(self, x: jax.Array, *, train: bool = False, pre_logits: bool = False,
                 separate_heads: bool = False) -> jax.Array | tuple[jax.Array, jax.Array]:
        """Logits (B, K) float32; `pre_logits`: the representation fed to the head; `separate_heads`: the pair
        (class-token logits, distillation-token logits) -- for a model without a distillation token, its
        logits twice (a distillation loss then goes through the class token)."""
        s = self.spec
        x = x.astype(self.dtype)
        if self.root is not None:
            x = self.root(x, s, self.dtype)
        p = s.arch.patch
        x = nn.Conv(s.arch.width, (p, p), strides=(p, p), padding="VALID", dtype=self.dtype,
                    name="embedding")(x)
        n, h, w, c = x.shape
        # row-major over (h, w): the same token order as timm's flatten(2); the residual stream in float32 whatever
        # the compute dtype, as torch's autocast keeps it (a bf16 patch embedding + the float32 class token and
        # position embeddings: float32; vitbench.models.layers.flax.NORM_DTYPE)
        x = x.reshape(n, h * w, c).astype(jnp.float32)
        prefix = [self.param("cls", nn.initializers.zeros, (1, 1, c), jnp.float32)] if s.num_prefix_tokens else []
        if s.arch.distilled:  # DeiT: trunc-normal(0.02) init in timm; normal(0.02) here, as the position embeddings
            prefix.append(self.param("dist", nn.initializers.normal(0.02), (1, 1, c), jnp.float32))
        x = jnp.concatenate([jnp.broadcast_to(t.astype(x.dtype), (n, 1, c)) for t in prefix] + [x], axis=1)
        x = Encoder(s, (h, w), self.dtype, name="Transformer")(x)
        # class token (, distillation token); GAP: the mean of the patch tokens after the final norm (vit_jax)
        tokens = [x[:, i] for i in range(len(prefix))] if prefix else [jnp.mean(x, axis=1)]
        rep = self.representation_size if self.representation_size is not None else (s.arch.rep_size or None)
        if rep is not None:  # (build_flax_model refuses it for distilled models)
            tokens = [jnp.tanh(nn.Dense(rep, dtype=self.dtype, name="pre_logits")(tokens[0]))]
        if pre_logits:  # distilled: the mean of the two tokens (timm forward_head(pre_logits=True))
            rep = tokens[0] if len(tokens) == 1 else (tokens[0] + tokens[1]) / 2
            return rep.astype(jnp.float32)
        # the paper zero-initialises the (fine-tuning) head; the parity tests overwrite it with random weights
        logits = [nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=nn.initializers.zeros,
                           name=name)(t).astype(jnp.float32) for name, t in zip(("head", "head_dist"), tokens)]
        if separate_heads:  # (class-token logits, distillation-token logits); the same array twice if undistilled
            return logits[0], logits[-1]
        return logits[0] if len(logits) == 1 else (logits[0] + logits[1]) / 2  # DeiT inference: the heads' mean
