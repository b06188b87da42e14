"""timm models for the `timm` family: the spec of a name, the model, its counts and its parameter table.

Everything here asks timm itself (timm.create_model with pretrained=False, its pretrained configs for the
native input size and classes, its list_models for the catalogue); built on the meta device where only shapes
matter, so counting a model allocates nothing.
"""

from __future__ import annotations

import difflib
import functools
import math

import timm
import torch
from timm.models import get_pretrained_cfg, split_model_name_tag

from vitbench.errors import ConfigError, UnknownModelError, shorten
from vitbench.models.analytic import Counts
from vitbench.models.families import ModelAttention
from vitbench.models.families.timm import PREFIX, TIMM
from vitbench.models.param_table import _copy
from vitbench.models.specs import ModelSpec
from vitbench.models.torch import attention_modules, unfused_attention


def names(pattern: str = "") -> list[str]:
    """timm's architectures matching a glob (`convnext*`; empty: all), as timm.list_models lists them."""
    return timm.list_models(pattern or "")


@functools.cache
def spec_of(name: str) -> ModelSpec:
    """The spec of timm model `name` (with an optional pretrained tag): native input size and classes from its
    pretrained config. UnknownModelError with close matches (difflib over timm's names) for an unknown one."""
    arch, tag = split_model_name_tag(name)
    if not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models(), n=5, cutoff=0.6)
        raise UnknownModelError(f"unknown timm model {shorten(name)}. Close matches: "
                                f"{', '.join(PREFIX + c for c in close) or '(none)'}. See `vitbench models "
                                f"--family timm --filter PATTERN` for timm's names.")
    full = f"{arch}.{tag}" if tag else arch
    cfg = get_pretrained_cfg(full) if tag else get_pretrained_cfg(arch)
    if cfg is None:  # a tag timm does not know: its message names the tags it has
        raise UnknownModelError(f"unknown pretrained tag {shorten(tag)} of timm model {arch}; see timm's "
                                f"`timm.list_pretrained('{arch}*')`")
    return ModelSpec(name=PREFIX + full, family=TIMM, timm_id=full, resolution=int(cfg.input_size[-1]),
                     num_classes=int(cfg.num_classes))


def _fixed_size(spec: ModelSpec) -> bool:
    """Whether timm builds the model for one input size (ViT-like: position tables), given as img_size."""
    return bool(get_pretrained_cfg(spec.timm_id).fixed_input_size)


def build(spec: ModelSpec, resolution: int, num_classes: int) -> torch.nn.Module:
    """timm.create_model(name, pretrained=False): random init, nothing downloaded; a fixed-size model (ViT-like)
    is built for `resolution` (img_size), the others take any input size."""
    kwargs = {"img_size": resolution} if resolution != spec.resolution and _fixed_size(spec) else {}
    try:
        return timm.create_model(spec.timm_id, pretrained=False, num_classes=num_classes, **kwargs)
    except TypeError as e:  # an architecture without an img_size argument
        raise ConfigError(f"{spec.name} is built by timm for {spec.resolution} px only ({e})") from None


@functools.lru_cache(maxsize=32)
def _meta(spec: ModelSpec, resolution: int, num_classes: int) -> torch.nn.Module:
    """The model on the meta device, for shapes and counts only: no parameter requires grad, since
    FlopCounterMode's module tracker cannot hook a parameter a model hands a submodule as input under no_grad
    (CaiT's class token, PiT's: "Expected gradient function to be set")."""
    with torch.device("meta"):
        return build(spec, resolution, num_classes).eval().requires_grad_(False)


def stride(spec: ModelSpec) -> int:
    """Pixels per cell of the last feature map (timm's feature_info reduction; a patch embedding's patch), the
    multiple every resolution must be of; 1 when the model says neither."""
    model = _meta(spec, spec.resolution, spec.num_classes)
    info = getattr(model, "feature_info", None)
    if info:
        last = info[-1] if isinstance(info, list) else info.get_dicts()[-1]
        return int(last["reduction"])
    patch = getattr(getattr(model, "patch_embed", None), "patch_size", None)
    return int(patch[0] if isinstance(patch, tuple | list) else patch) if patch else 1


def feature_dim(spec: ModelSpec) -> int:
    """Width of forward_head(pre_logits=True): timm's head_hidden_size (num_features when it has none)."""
    model = _meta(spec, spec.resolution, spec.num_classes)
    return int(getattr(model, "head_hidden_size", None) or model.num_features)


@functools.lru_cache(maxsize=64)
def counts(spec: ModelSpec, resolution: int, num_classes: int) -> Counts:
    """timm's parameter count; MACs of one image by FlopCounterMode on the meta device (FLOPs / 2), attention
    unfused so that its matmuls are counted (see vitbench.models.torch.unfused_attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    model = _meta(spec, resolution, num_classes)
    params = sum(p.numel() for p in model.parameters())
    with torch.no_grad(), unfused_attention(model), FlopCounterMode(display=False) as fc:
        model(torch.empty(1, 3, resolution, resolution, device="meta"))
    return Counts(int(params), int(fc.get_total_flops()) // 2)  # FlopCounterMode: 2 FLOPs per MAC


def param_table(spec: ModelSpec, resolution: int) -> list:
    """timm's own state-dict keys (what a timm .safetensors holds); the Flax side is the key '/'-joined (no Flax
    model exists for this family: the table serves weight checks and loading)."""
    model = _meta(spec, resolution, spec.num_classes)
    return [_copy(k, k.replace(".", "/")) for k in model.state_dict()]


def head_prefixes(spec: ModelSpec) -> tuple[str, ...]:
    """The classifier's parameter prefixes as timm's pretrained config names them (`fc`, `head.fc`, `head`,
    a distilled model's `head_dist` too): what transfer replaces; a ConvNeXt's `head.norm` stays with the body."""
    names = get_pretrained_cfg(spec.timm_id).classifier or "head"
    return tuple(f"{n}." for n in ((names,) if isinstance(names, str) else names))


# The aten ops attention shows itself by (their overload packets' names): a softmax, a batched matmul, and the
# fused SDPA kernels (the forward ones this torch has; on the meta device SDPA runs its math, softmax and bmm).
_ATTENTION_OPS = ("_softmax", "bmm", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
                  "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
                  "_scaled_dot_product_attention_math_for_mps")


def _seen(*args, **kwargs) -> int:
    return 1  # a count of 1 per call: whether the op ran, not its FLOPs


def _ops_run(model: torch.nn.Module, resolution: int) -> set[str]:
    """Which of _ATTENTION_OPS one forward of `model` (meta device, attention unfused) runs: torch's public
    FlopCounterMode, each op given a formula that counts its calls (custom_mapping), read from its per-op counts."""
    from torch.utils.flop_counter import FlopCounterMode

    ops = [getattr(torch.ops.aten, n) for n in _ATTENTION_OPS if hasattr(torch.ops.aten, n)]
    with torch.no_grad(), unfused_attention(model), \
            FlopCounterMode(display=False, custom_mapping=dict.fromkeys(ops, _seen)) as fc:
        model(torch.empty(1, 3, resolution, resolution, device="meta"))
    return {op.__name__ for op, n in fc.get_flop_counts()["Global"].items() if n and op in ops}


def _self_attention(ops: set[str]) -> bool:
    """Self-attention as the ops show it, whatever a timm module is called (Attention, EvaAttention,
    WindowAttention, LeViT's and CoaT's own, BoTNet's BottleneckAttn): a softmax and a batched matmul (scores and
    their weighted sum), or an SDPA op. Channel attention is not (SE, ECA, CBAM: sigmoid gates; selective kernel:
    a softmax over branches, no batched matmul)."""
    return {"_softmax", "bmm"} <= ops or any("scaled_dot_product" in op for op in ops)


@functools.cache
def model_attention(spec: ModelSpec) -> ModelAttention:
    """Whether timm's model of `spec` has self-attention (from the ops of one forward on the meta device, attention
    unfused: a softmax and a batched matmul, or SDPA), and whether it is ViT-like -- one token sequence over the
    whole image (a patch embedding, timm's `num_prefix_tokens`, every attention module timm's kind with its
    `attn_drop` after the softmax, one per block): then its maps are tokens x tokens and inspection reads them."""
    model = _meta(spec, spec.resolution, spec.num_classes)
    layers = _self_attention(_ops_run(model, spec.resolution))
    mods = attention_modules(model)
    prefix = getattr(model, "num_prefix_tokens", None)
    vit_like = (layers and hasattr(model, "patch_embed") and isinstance(prefix, int) and bool(mods)
                and all(hasattr(m, "attn_drop") for m in mods) and len(mods) == len(getattr(model, "blocks", ())))
    width = int(getattr(model, "embed_dim", None) or model.num_features) if vit_like else None  # the tokens' D
    return ModelAttention(layers, token_maps=vit_like, prefix_tokens=prefix if vit_like else None,
                          token_width=width)


def _grid(spec: ModelSpec) -> tuple[int, int]:
    """(h, w) patch grid of timm's model at its native size (timm's `patch_embed.grid_size`)."""
    grid = _meta(spec, spec.resolution, spec.num_classes).patch_embed.grid_size
    return int(grid[0]), int(grid[-1])


def _table_prefix(spec: ModelSpec) -> int:
    """Rows of a ViT-like timm model's pos_embed before its patches: its prefix tokens, none with timm's
    `no_embed_class` (DeiT-III, register models: the prefix tokens get no position embedding)."""
    model = _meta(spec, spec.resolution, spec.num_classes)
    return 0 if getattr(model, "no_embed_class", False) else model_attention(spec).prefix_tokens


def resolution_of(spec: ModelSpec, shapes: dict) -> int | None:
    """The input size a ViT-like timm model's weights were made for, from the rows of its position table
    (`pos_embed`, (1, rows, D): timm's prefix rows and a square grid of patches, or the grid alone with
    `no_embed_class`); None without such a table (any input size).

    A table of another grid is a ConfigError naming the model and the rows: vitbench builds timm's models for
    square inputs (img_size=r), and a rectangular grid cannot be told from a row count (2 x 4 or 4 x 2?). No timm
    architecture builds a rectangular learned table at its native size (timm 1.0.31: the only non-square native
    inputs, sapiens2's, have rotary embeddings and no table), so timm's model never says one."""
    shape = shapes.get("pos_embed")
    if shape is None or len(shape) != 3 or not model_attention(spec).token_maps:
        return None
    extra = _table_prefix(spec)
    n = shape[-2] - extra
    side = math.isqrt(max(n, 0))
    if side and side * side == n:
        return side * spec.stride
    h, w = _grid(spec)
    raise ConfigError(f"{spec.name}: its position table pos_embed {tuple(shape)} holds {extra} prefix row(s) and "
                      f"{n} patch rows, not a square grid of patches (timm's grid of this model: {h} x {w} at "
                      f"{spec.resolution} px; vitbench builds it for square inputs). A grid of another shape "
                      f"cannot be told from its row count (h x w or w x h?): resample the table to a square grid "
                      f"(timm.layers.resample_abs_pos_embed, from the grid it was made for) and save the file "
                      f"again")
