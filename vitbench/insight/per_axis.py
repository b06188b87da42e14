"""`inspect_axes`: inspection of a model whose attention runs along one axis at a time (its family plug-in lists
the layers, vitbench.models.families.AttentionMaps.axis_layers): mean attention distance per layer, head and
axis (vitbench.insight.axes), and what else of the paper's Sec. 4.5 applies to it, the rest said so."""

from __future__ import annotations

import numpy as np

from vitbench.errors import ConfigError
from vitbench.insight.axes import axis_distance_per_image
from vitbench.insight.filters import acts_on_pixels, embedding_filter_components, is_grey
from vitbench.insight.layout import TokenLayout
from vitbench.insight.posemb import no_adjacent_patch, posemb_similarity
from vitbench.insight.result import (ADJACENT_COS_SIM, HEAD_WEIGHT, PATCH_KERNEL, POS_EMBED, AttentionFn,
                                     InspectResult, require_finite_maps)
from vitbench.models.families import FamilyPlugin
from vitbench.models.specs import ModelSpec

NO_ROLLOUT = ("per-axis attention: each layer mixes tokens within one row or one column, and the model has no "
              "class token (its head reads the mean of the grid), so there is no class-token rollout")


def inspect_axes(plugin: FamilyPlugin, weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                 images: np.ndarray, attention_fn: AttentionFn, *, batch_size: int = 32) -> InspectResult:
    """Inspect `spec` (timm-named `weights` made for `resolution`: per-axis models are inspected at the
    resolution they were built for) on NHWC float32 `images` at `resolution`. `attention_fn` gives one
    (images, sequences, heads, length, length) array per layer of
    `plugin.attention_maps.axis_layers(spec, resolution)`.

    `layout` of the result: the grid of the first attention layer (its tokens, their pitch), no extra tokens.
    Position-embedding similarity where the weights hold an absolute grid table (`pos_embed`, (1, h, w, D)),
    embedding filters where a patch projection acts on one token's pixels; no rollout (no class token)."""
    spec.check_resolution(resolution)
    layers = plugin.attention_maps.axis_layers(spec, resolution)
    if not layers:
        raise ConfigError(f"{spec.name} has no attention layers at {resolution} px to inspect")
    first = layers[0]
    layout = TokenLayout(first.length, first.length, first.step_px, 0)
    if HEAD_WEIGHT in weights:  # build the model with the checkpoint's own head
        spec = spec.with_classes(int(weights[HEAD_WEIGHT].shape[0]))
    per_layer: list[list[np.ndarray]] = [[] for _ in layers]
    for start in range(0, len(images), batch_size):
        maps = attention_fn(weights, spec, resolution, images[start:start + batch_size])
        if len(maps) != len(layers):
            raise ConfigError(f"{len(maps)} attention maps for the {len(layers)} attention layers of {spec.name}")
        for i, (attn, layer) in enumerate(zip(maps, layers)):
            attn = np.asarray(attn)
            require_finite_maps(attn, spec)
            per_layer[i].append(axis_distance_per_image(attn, layer, i))
    dist = np.stack([np.concatenate(d) for d in per_layer])  # (layers, images, heads)
    not_applicable: dict[str, str] = {}
    notes: dict[str, str] = {}
    filters = None
    if PATCH_KERNEL in weights and acts_on_pixels(spec):
        filters = embedding_filter_components(weights[PATCH_KERNEL], sum_channels=is_grey(images))
    else:
        not_applicable["embedding_filters"] = ("no patch projection acting on one token's pixels (a convolution "
                                               "stem), so no embedding filters to decompose")
    similarity, trained = None, (layout.grid_h, layout.grid_w)
    table = weights.get(POS_EMBED)
    if table is not None and np.ndim(table) == 4:  # (1, h, w, D): an absolute table over the 2-D grid
        trained = tuple(np.shape(table)[1:3])
        if trained != (layout.grid_h, layout.grid_w):
            raise ConfigError(f"{POS_EMBED} of a {trained[0]}x{trained[1]} grid for a {layout.grid_h}x"
                              f"{layout.grid_w} grid at {resolution} px: inspect at the resolution it was "
                              "trained at")
        similarity = posemb_similarity(np.asarray(table).reshape(layout.num_patches, -1), layout)
        notes["posemb"] = "learned 2-D grid table (h, w, D), added once at the input"
        if why := no_adjacent_patch(layout):
            not_applicable[ADJACENT_COS_SIM] = why
    else:
        not_applicable["posemb_similarity"] = f"no absolute position embeddings to compare ({plugin.description})"
    not_applicable["rollout"] = NO_ROLLOUT
    return InspectResult(
        model=spec.name, layout=layout, num_images=len(images),
        attention_distance_px=dist.mean(1), attention_distance_std_px=dist.std(1),
        prefix_attention_share=np.zeros(dist.mean(1).shape), posemb_similarity=similarity,
        posemb_grid_trained=trained, filters=filters, rollout=np.zeros((0, layout.grid_h, layout.grid_w)),
        rollout_images=np.zeros((0, 1, 1, 1), np.float32), not_applicable=not_applicable, notes=notes,
        axis_layers=tuple(layers))
