"""ViT (Dosovitskiy et al. 2021) and DeiT (Touvron et al. 2021) as one family plug-in: family `vit`.

Rows: ViT sizes from Table 1 of the ViT paper, Ti/S from DeiT Table 1 (DeiT-Ti/S/B are ViT-Ti/S/B at patch 16: the
same rows, DeiT's names as aliases), DeiT's distilled twins (a distillation token beside the class token), and tiny
variants for tests and CPU studies (not from the paper). The pieces a hybrid reuses (encoder counts, the
transformer's conversion table, its override rules) are the public functions here.
"""

from __future__ import annotations

import math
from dataclasses import replace

from vitbench.errors import ConfigError
from vitbench.models import posemb
from vitbench.models.analytic import Counts
from vitbench.models.arch import TransformerArch
from vitbench.models.families import (
    AttentionMaps,
    FamilyBuild,
    FamilyComputation,
    FamilyName,
    FamilyPlugin,
    FamilyWeights,
    PlotStyle,
    register_family,
)
from vitbench.models.flavours import FLAVOUR_TIMM, FLAVOUR_VIT_JAX, Origin
from vitbench.models.overrides import TRANSFORMER_KEYS
from vitbench.models.param_table import _attention, _conv, _copy, _linear, _norm
from vitbench.models.specs import ModelSpec

VIT = FamilyName("vit")

VIT_SIZES = {  # name: (layers, D, MLP, heads, timm size word) -- ViT paper Table 1, DeiT Table 1 for Ti/S
    "Ti": (12, 192, 768, 3, "tiny"),
    "S": (12, 384, 1536, 6, "small"),
    "B": (12, 768, 3072, 12, "base"),
    "L": (24, 1024, 4096, 16, "large"),
    "H": (32, 1280, 5120, 16, "huge"),
}
# DeiT-Ti/S/B are ViT-Ti/S/B at patch 16 (DeiT Table 1): the same rows, with DeiT's names as aliases
_DEIT_SIZES = ("Ti", "S", "B")
# The fields a transformer reads (vit; a hybrid adds its ResNet root's)
TRANSFORMER_FIELDS = ("patch", "width", "depth", "mlp_dim", "heads", "ln_eps", "distilled", "flavour", "classifier",
                      "rep_size", "posemb", "posemb_at")


def _vit(size: str, patch: int) -> ModelSpec:
    depth, width, mlp, heads, word = VIT_SIZES[size]
    deit = (f"DeiT-{size}/{patch}", f"DeiT-{size}", f"deit_{word}_patch{patch}_224") \
        if size in _DEIT_SIZES and patch == 16 else ()
    return ModelSpec(
        name=f"ViT-{size}/{patch}", family=VIT, timm_id=f"vit_{word}_patch{patch}_224",
        aliases=(f"ViT-{size}_{patch}", *deit),
        arch=TransformerArch(patch=patch, width=width, depth=depth, mlp_dim=mlp, heads=heads),
    )


def _distilled(base: ModelSpec, size: str, timm_id: str | None = None) -> ModelSpec:
    """DeiT's distilled twin of `base` (Touvron et al. 2021, Section 4): + distillation token, pos-embed, head."""
    name = f"DeiT-{size}/{base.arch.patch}-dist"
    return replace(base, name=name, timm_id=timm_id, arch=replace(base.arch, distilled=True),
                   aliases=(f"ViT-{size}/{base.arch.patch}-dist", f"DeiT-{size}-distilled", f"DeiT-{size}-dist"))


def _tiny_vit(size: str, width: int, depth: int, heads: int, patch: int = 4) -> ModelSpec:
    return ModelSpec(
        name=f"ViT-{size}/{patch}", family=VIT, tiny=True, resolution=32, num_classes=10,
        arch=TransformerArch(patch=patch, width=width, depth=depth, mlp_dim=4 * width, heads=heads),
        aliases=(f"DeiT-{size}/{patch}",),
    )


_VITS = {(s, p): _vit(s, p) for s, p in [("Ti", 16), ("S", 16), ("B", 32), ("B", 16), ("B", 8), ("L", 32),
                                          ("L", 16), ("H", 14)]}
# Tiny variants for tests and CPU studies (32 px, 10 classes). Not from the paper.
_TINY_VITS = {"Nano": _tiny_vit("Nano", width=32, depth=2, heads=2),
              "Micro": _tiny_vit("Micro", width=64, depth=4, heads=4),
              "Mini": _tiny_vit("Mini", width=128, depth=6, heads=4)}

ROWS = (
    *_VITS.values(),
    *(_distilled(_VITS[s, 16], s, f"deit_{VIT_SIZES[s][4]}_distilled_patch16_224") for s in _DEIT_SIZES),
    *_TINY_VITS.values(),
    _distilled(_TINY_VITS["Nano"], "Nano"), _distilled(_TINY_VITS["Micro"], "Micro"),
)


# ---- analytic counts -------------------------------------------------------------------------------------------
def encoder_counts(spec: ModelSpec, tokens: int) -> Counts:
    """Transformer encoder (Vaswani et al.; ViT eq. 2-3): L pre-LN blocks on T = tokens + the class token
    (+ the distillation token of a distilled DeiT)."""
    d, m, t, layers = spec.arch.width, spec.arch.mlp_dim, tokens + spec.num_prefix_tokens, spec.arch.depth
    block_params = (3 * d * d + 3 * d) + (d * d + d) + (d * m + m) + (m * d + d) + 4 * d  # qkv, proj, mlp, 2 LN
    block_macs = 4 * t * d * d + 2 * t * t * d + 2 * t * d * m  # qkv+proj, QK^T and AV, MLP
    return Counts(layers * block_params + 2 * d, layers * block_macs)  # + final LN


def position_counts(spec: ModelSpec, resolution: int, n: int) -> Counts:
    """Position embeddings (vitbench.models.posemb): absolute tables (adds not counted); relative: a table of
    2T-1 offsets per layer and the query against every offset, T(2T-1)D MACs per layer."""
    params = sum(math.prod(t.shape) for t in posemb.transformer_tables(spec, resolution))
    if spec.arch.posemb == "relative":
        t = n + spec.num_prefix_tokens
        return Counts(params, spec.arch.depth * t * posemb.relative_offsets(t) * spec.arch.width)
    return Counts(params, 0)


def head_counts(spec: ModelSpec, k: int) -> Counts:
    """Head(s): one per prefix token (DeiT: class and distillation heads), one after GAP; rep_size adds the
    pre-logits Dense (+ tanh) before it (vit_jax's pre-training head)."""
    d, rep = spec.arch.width, spec.arch.rep_size
    heads = max(spec.num_prefix_tokens, 1)
    pre = Counts(d * rep + rep, d * rep) if rep else Counts(0, 0)
    into = rep or d
    return Counts(pre.params + heads * (into * k + k), pre.macs + heads * into * k)


def transformer_counts(spec: ModelSpec, resolution: int, num_classes: int, embed: Counts) -> Counts:
    """Everything after the patch embedding `embed`: prefix tokens, position embeddings, encoder, head(s)."""
    n = spec.tokens(resolution)
    enc, pos, head = encoder_counts(spec, n), position_counts(spec, resolution, n), head_counts(spec, num_classes)
    prefix = spec.num_prefix_tokens  # class token (+ distillation token); none with GAP
    return Counts(embed.params + prefix * spec.arch.width + pos.params + enc.params + head.params,
                  embed.macs + pos.macs + enc.macs + head.macs)


def counts(spec: ModelSpec, resolution: int, num_classes: int) -> Counts:
    """Patch embedding (a PxP conv with stride P) + the transformer."""
    n, p, d = spec.tokens(resolution), spec.arch.patch, spec.arch.width
    return transformer_counts(spec, resolution, num_classes, Counts(p * p * 3 * d + d, n * p * p * 3 * d))


# ---- conversion table ------------------------------------------------------------------------------------------
def transformer_table(spec: ModelSpec, embed: str, resolution: int) -> list:
    """timm <-> vit_jax names of the patch embedding `embed`, tokens, position embeddings, encoder and head(s)."""
    d = spec.arch.width
    out = [_copy("cls_token", "cls")] if spec.num_prefix_tokens else []  # GAP: no class token
    out += [_conv(f"{embed}.weight", "embedding/kernel"), _copy(f"{embed}.bias", "embedding/bias")]
    # position embeddings of every kind and place, named once in vitbench.models.posemb
    out += [_copy(t.torch_key, t.flax_path) for t in posemb.transformer_tables(spec, resolution)]
    if spec.arch.distilled:  # DeiT: timm VisionTransformerDistilled's dist_token and head_dist
        out += [_copy("dist_token", "dist"), *_linear("head_dist", "head_dist")]
    for i in range(spec.arch.depth):
        t, f = f"blocks.{i}", f"Transformer/encoderblock_{i}"
        out += _norm(f"{t}.norm1", f"{f}/LayerNorm_0")
        out += _attention(f"{t}.attn", f"{f}/MultiHeadDotProductAttention_1", d, spec.arch.heads)
        out += _norm(f"{t}.norm2", f"{f}/LayerNorm_2")
        out += _linear(f"{t}.mlp.fc1", f"{f}/MlpBlock_3/Dense_0")
        out += _linear(f"{t}.mlp.fc2", f"{f}/MlpBlock_3/Dense_1")
    out += _norm("norm", "Transformer/encoder_norm")
    if spec.arch.rep_size:  # the tanh pre-logits layer (vit_jax's pre-training head)
        out += _linear("pre_logits", "pre_logits")
    return out + _linear("head", "head")


def table(spec: ModelSpec, resolution: int) -> list:
    return transformer_table(spec, "patch_embed.proj", resolution)


# ---- override rules, description -------------------------------------------------------------------------------
def validate_transformer(spec: ModelSpec, diff: dict) -> None:
    """Cross-field rules of a transformer's head and position embeddings (ViT appendix D.3, D.4)."""
    n = spec.name
    if spec.arch.width % spec.arch.heads:
        ok = [h for h in range(1, min(spec.arch.width, 64) + 1) if spec.arch.width % h == 0]
        raise ConfigError(f"{n}: heads={spec.arch.heads} must divide width={spec.arch.width}; allowed heads: "
                          f"{', '.join(map(str, ok[:12]))}{' ...' if len(ok) > 12 else ''}")
    if spec.arch.posemb == "learned_2d" and spec.arch.width % 2:
        raise ConfigError(f"{n}: posemb=learned_2d concatenates x and y tables of width/2: "
                          f"width={spec.arch.width} "
                          "must be even")
    if spec.arch.posemb == "sincos2d" and spec.arch.width % 4:
        raise ConfigError(f"{n}: posemb=sincos2d uses sin and cos of x and y, width/4 each: "
                          f"width={spec.arch.width} "
                          "must be a multiple of 4")
    if spec.arch.posemb in ("none", "relative") and spec.arch.posemb_at != "input":
        raise ConfigError(f"{n}: posemb_at={spec.arch.posemb_at} does not apply to posemb={spec.arch.posemb} "
                          "(Table 8: "
                          "N/A); allowed: posemb_at=input")
    if spec.arch.posemb == "sincos2d" and spec.arch.posemb_at == "every_layer":
        raise ConfigError(f"{n}: posemb_at=every_layer gives each layer its own learned table; sincos2d is "
                          "fixed: allowed posemb_at: input, every_layer_shared")
    if spec.arch.classifier == "gap" and spec.arch.rep_size:
        raise ConfigError(f"{n}: rep_size={spec.arch.rep_size} (the tanh pre-logits layer) goes with "
                          "classifier=token; with classifier=gap the head is linear: allowed rep_size: 0")


def head_and_position(spec: ModelSpec) -> tuple[str, str]:
    """The description's tails: (distillation token, head kind, pre-logits; position embeddings if not default)."""
    out = " +dist token" if spec.arch.distilled else ""
    out += "" if spec.arch.classifier == "token" else f" {spec.arch.classifier}"
    out += f" rep={spec.arch.rep_size}" if spec.arch.rep_size else ""
    kind, at = spec.arch.posemb, spec.arch.posemb_at
    return out, "" if (kind, at) == ("learned", "input") else f" pos={kind}@{at}"


def describe(spec: ModelSpec) -> str:
    head, pos = head_and_position(spec)
    a = spec.arch
    return f"L={a.depth} D={a.width} MLP={a.mlp_dim} H={a.heads} P={a.patch}{head}{pos}"


# ViT's origins: timm's code and vit_jax / big_vision (vitbench.models.flavours)
ORIGINS = {Origin.TIMM.value: FLAVOUR_TIMM, Origin.VIT_JAX.value: FLAVOUR_VIT_JAX,
           Origin.BIG_VISION.value: FLAVOUR_VIT_JAX}

# whole-image token maps, read by hooks on timm's attention (torch) and sown by the Flax attention (hybrid's too)
TOKEN_MAPS = AttentionMaps(token_maps=True, torch="vitbench.models.families.vit.torch:attention_maps",
                           flax="vitbench.models.families.vit.flax:attention_maps")

# checkpoints of every origin in ORIGINS, .npz from vit_jax; the transformer's position tables (the hybrid's too)
WEIGHTS = FamilyWeights(origins=ORIGINS, npz_origin=Origin.VIT_JAX.value, posemb_tables=posemb.transformer_tables)

PLUGIN = register_family(FamilyPlugin(
    name=VIT, description="ViT (Dosovitskiy et al. 2021) and DeiT (Touvron et al. 2021): patch embedding, class "
    "token (+ distillation token), pre-LN transformer encoder", rows=ROWS, fields=TRANSFORMER_FIELDS,
    override_keys=TRANSFORMER_KEYS, validate=validate_transformer,
    build=FamilyBuild(torch="vitbench.models.families.vit.torch:build",
                      flax="vitbench.models.families.vit.flax:build", representation_size=True,
                      channels_last=False, torch_init="vitbench.models.families.vit.torch:flax_init"),
    computation=FamilyComputation(counts=counts, param_table=table, stride=lambda s: s.arch.patch,
                                  feature_dim=lambda s: s.arch.width, describe=describe),
    attention_maps=TOKEN_MAPS, weights=WEIGHTS, plot_style=PlotStyle("o", "Blues", "ViT"), arch=TransformerArch,
))
