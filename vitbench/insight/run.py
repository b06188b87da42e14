"""`inspect_model`: everything the paper shows about what a ViT learned, from timm-named weights, images and one
framework's attention function (the only framework-specific piece)."""

from __future__ import annotations

import math

import numpy as np

from vitbench.errors import ConfigError
from vitbench.insight.applies import require_inspectable
from vitbench.insight.distance import (
    attention_distance_per_image,
    check_attention,
    prefix_attention_share,
)
from vitbench.insight.filters import acts_on_pixels, embedding_filter_components, is_grey
from vitbench.insight.layout import TokenLayout
from vitbench.insight.posemb import no_adjacent_patch, position_table, posemb_similarity, table_grid
from vitbench.insight.result import (ADJACENT_COS_SIM, HEAD_WEIGHT, PATCH_KERNEL, POS_EMBED, AttentionFn,
                                     InspectResult, require_finite, require_finite_maps)
from vitbench.insight.rollout import rollout_maps
from vitbench.models.families import family_plugin
from vitbench.models.posemb_resize import resample_pos_embed, table_prefix_rows
from vitbench.models.specs import ModelSpec

def fit_pos_embed(weights: dict[str, np.ndarray], layout: TokenLayout, spec: ModelSpec | None = None
                  ) -> tuple[dict[str, np.ndarray], tuple[int, int]]:
    """Weights whose position embeddings fit `layout`'s grid (2-D interpolated as for fine-tuning, ViT Sec. 3.2;
    extra tokens kept), and the (square) grid they were trained on. A variant's tables (ViT appendix D.4) are
    resized as for fine-tuning too (vitbench.models.posemb_resize; a relative-attention table is refused there:
    inspect such a model at its trained resolution)."""
    if POS_EMBED not in weights:
        trained = table_grid(weights, spec, layout) if spec is not None else None
        if trained is not None and trained != (layout.grid_h, layout.grid_w):
            from vitbench.models.posemb_resize import resize_state_dict_pos_embed

            weights = resize_state_dict_pos_embed(weights, spec, layout.resolution_px[0])
        return weights, trained or (layout.grid_h, layout.grid_w)
    pe = np.asarray(weights[POS_EMBED])
    extra = table_prefix_rows(pe.shape[-2], layout.num_prefix_tokens)  # 0: the patches' alone (no_embed_class)
    extra = layout.num_prefix_tokens if extra is None else extra
    n = pe.shape[-2] - extra
    side = math.isqrt(max(n, 0))
    if side * side != n or n == 0:
        raise ConfigError(f"{POS_EMBED} of shape {pe.shape} is not {layout.num_prefix_tokens} extra token(s) + a "
                          "square grid; is num_prefix_tokens right?")
    if (side, side) == (layout.grid_h, layout.grid_w):
        return weights, (side, side)
    new = resample_pos_embed(pe, (layout.grid_h, layout.grid_w), side, extra)
    return {**weights, POS_EMBED: np.asarray(new, np.float32)}, (side, side)


def inspect_model(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int, images: np.ndarray,
                  attention_fn: AttentionFn, *, num_prefix_tokens: int | None = None, num_rollout: int = 4,
                  batch_size: int = 32) -> InspectResult:
    """Inspect a ViT or hybrid given as timm-named `weights` (any resolution: position embeddings are resampled
    to `resolution`) on NHWC float32 `images` (already at `resolution`, values as the model was trained on).

    Attention maps come from `attention_fn` in chunks of `batch_size` images (memory: layers x heads x tokens^2
    per image); rollout maps for the first `num_rollout` images. `num_prefix_tokens`: extra tokens before the
    patches (1: class token; DeiT's distillation token makes 2; None: the model's, as its family says). On grey
    images (R = G = B) the filter components are of the channel-summed filters (see vitbench.insight.filters).
    """
    require_inspectable(spec)
    plugin = family_plugin(spec.family)
    images = np.asarray(images, np.float32)
    if images.ndim != 4 or images.shape[1:3] != (resolution, resolution) or len(images) == 0:
        raise ConfigError(f"images of shape {images.shape}; expected (N >= 1, {resolution}, {resolution}, C)")
    if plugin.attention_maps.axis_layers is not None:
        from vitbench.insight.per_axis import inspect_axes

        return require_finite(inspect_axes(plugin, weights, spec, resolution, images, attention_fn,
                                           batch_size=batch_size))
    if num_prefix_tokens is None:  # the model's own (a timm model's: its num_prefix_tokens)
        num_prefix_tokens = plugin.attention_of(spec).prefix_tokens
    layout = TokenLayout.of(spec, resolution, num_prefix_tokens)
    weights, trained_grid = fit_pos_embed(weights, layout, spec)
    if HEAD_WEIGHT in weights:  # build the model with the checkpoint's own head
        spec = spec.with_classes(int(weights[HEAD_WEIGHT].shape[0]))
    per_image, share, maps = [], [], []
    n = len(images)
    for start in range(0, n, batch_size):
        attn = np.asarray(attention_fn(weights, spec, resolution, images[start:start + batch_size]))
        check_attention(attn, layout)
        require_finite_maps(attn, spec)
        per_image.append(attention_distance_per_image(attn, layout))
        share.append(prefix_attention_share(attn, layout) * attn.shape[1])
        if start < num_rollout and layout.num_prefix_tokens:
            maps.append(rollout_maps(attn[:, : num_rollout - start], layout))
    dist = np.concatenate(per_image, axis=1)  # (L, images, H)
    filters = (embedding_filter_components(weights[PATCH_KERNEL], sum_channels=is_grey(images))
               if acts_on_pixels(spec) else None)
    not_applicable, notes = {}, {}
    table, what = position_table(weights, spec, layout, POS_EMBED)
    if table is None:
        not_applicable["posemb_similarity"] = what
    else:
        notes["posemb"] = what
        if why := no_adjacent_patch(layout):
            not_applicable[ADJACENT_COS_SIM] = why
    if not layout.num_prefix_tokens:
        not_applicable["rollout"] = ("classifier=gap: no class token, so no class-token rollout (the head reads "
                                     "the mean of the patch tokens)")
    return require_finite(InspectResult(
        model=spec.name, layout=layout, num_images=n,
        attention_distance_px=dist.mean(1), attention_distance_std_px=dist.std(1),
        prefix_attention_share=np.sum(share, axis=0) / n,
        posemb_similarity=None if table is None else posemb_similarity(table, layout),
        posemb_grid_trained=trained_grid,
        filters=filters, rollout_images=images[:num_rollout if maps else 0].copy(),
        rollout=np.concatenate(maps) if maps else np.zeros((0, layout.grid_h, layout.grid_w)),
        not_applicable=not_applicable, notes=notes,
    ))
