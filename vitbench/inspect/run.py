"""`inspect_model`: everything the paper shows about what a ViT learned, from timm-named weights, images and one
framework's attention function (the only framework-specific piece)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from vitbench.errors import ConfigError
from vitbench.inspect.axes import uniform_axis_distance_px
from vitbench.inspect.distance import (
    attention_distance_per_image,
    check_attention,
    prefix_attention_share,
    uniform_attention_distance_px,
)
from vitbench.inspect.filters import FilterComponents, acts_on_pixels, embedding_filter_components, is_grey
from vitbench.inspect.layout import TokenLayout
from vitbench.inspect.posemb import adjacent_similarity, position_table, posemb_similarity, table_grid
from vitbench.inspect.rollout import rollout_maps
from vitbench.models.families import Axis, AxisLayer, family_plugin
from vitbench.models.posemb_resize import resample_pos_embed
from vitbench.models.specs import ModelSpec

# timm parameter names (the checkpoint format, vitbench.transfer.checkpoint) of what inspection reads directly
POS_EMBED, PATCH_KERNEL, HEAD_WEIGHT = "pos_embed", "patch_embed.proj.weight", "head.weight"


class AttentionFn(Protocol):
    """One framework's attention probabilities: (layers, images, heads, tokens, tokens) float32, for a model of
    `spec` at `resolution` with `weights` (timm naming, position embeddings already fitting `resolution`) on
    NHWC float32 `images`; for a family with per-axis layers, one (images, sequences, heads, length, length)
    array per layer (vitbench.models.families.FamilyPlugin.axis_layers)."""

    def __call__(self, weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                 images: np.ndarray) -> np.ndarray | list[np.ndarray]: ...


@dataclass(frozen=True)
class InspectResult:
    """The numbers behind the paper's Fig. 6 and 7 for one model on one set of images."""

    model: str
    layout: TokenLayout
    num_images: int
    attention_distance_px: np.ndarray  # (layers, heads), mean over images and query patches
    attention_distance_std_px: np.ndarray  # (layers, heads), spread over images
    prefix_attention_share: np.ndarray  # (layers, heads), weight on the extra tokens
    posemb_similarity: np.ndarray | None  # (h, w, h, w) cosine similarity; None: no absolute position embeddings
    posemb_grid_trained: tuple[int, int]  # the grid the position embeddings were learned on
    filters: FilterComponents | None  # None: the projection does not act on pixels (hybrid)
    rollout: np.ndarray  # (n, h, w) class-token rollout over the input grid (n = 0: none, see not_applicable)
    rollout_images: np.ndarray  # (n, H, W, C) the matching inputs, float32 in [-1, 1]
    # what was not computed for this model and why ({"posemb_similarity": ..., "rollout": ...}), and what the
    # compared position embeddings are ({"posemb": "learned 1-D, added once at the input"})
    not_applicable: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    # per-axis attention (axial families): each layer's axis, length and pixel step, in the rows' order of
    # attention_distance_px; empty: every layer attends token x token over `layout` (ViT, hybrid)
    axis_layers: tuple[AxisLayer, ...] = ()

    @property
    def resolution_px(self) -> int:
        return self.layout.resolution_px[0]

    @property
    def uniform_distance_px(self) -> np.ndarray:
        """(layers,) the distance uniform attention gives in each layer (the fully global level): over the whole
        grid for token x token layers, along the layer's axis for per-axis ones."""
        if self.axis_layers:
            return np.array([uniform_axis_distance_px(a) for a in self.axis_layers])
        return np.full(len(self.attention_distance_px), uniform_attention_distance_px(self.layout))

    def headline(self) -> dict[str, float]:
        """Headline metrics (units in the names): mean over heads of the first and last layer's distance, the
        first layer's most local and most global head (the paper's point: some heads are global from layer 1),
        the distance uniform attention would give (the 'global' reference), and how alike adjacent patches'
        position embeddings are (Fig. 7 centre: near patches have similar embeddings)."""
        d = self.attention_distance_px
        out = {"attention_distance_first_layer_px": float(d[0].mean()),
               "attention_distance_last_layer_px": float(d[-1].mean()),
               "attention_distance_first_layer_min_px": float(d[0].min()),
               "attention_distance_first_layer_max_px": float(d[0].max()),
               "attention_distance_uniform_px": float(self.uniform_distance_px[0])}
        if self.posemb_similarity is not None:  # a model without position embeddings has no such number
            out["posemb_adjacent_cos_sim"] = adjacent_similarity(self.posemb_similarity)
        return out

    def to_json(self) -> dict:
        """JSON-able numbers (nested lists), for `--json` and the study record."""
        f = self.filters
        return {
            "model": self.model, "resolution_px": self.resolution_px,
            "grid": [self.layout.grid_h, self.layout.grid_w], "token_stride_px": self.layout.stride_px,
            "num_prefix_tokens": self.layout.num_prefix_tokens, "num_images": self.num_images,
            "headline": self.headline(),
            "attention_distance_px": self.attention_distance_px.tolist(),
            "attention_distance_std_px": self.attention_distance_std_px.tolist(),
            "prefix_attention_share": self.prefix_attention_share.tolist(),
            "posemb_similarity": None if self.posemb_similarity is None else self.posemb_similarity.tolist(),
            "posemb_grid_trained": list(self.posemb_grid_trained),
            "embedding_filter_components": None if f is None else f.images.tolist(),
            "embedding_filter_variance_ratio": None if f is None else f.variance_ratio.tolist(),
            "embedding_filter_channels_summed": None if f is None else f.channels_summed,
            "rollout": self.rollout.tolist(),
            "rollout_images": self.rollout_images.tolist(),
            "not_applicable": dict(self.not_applicable), "notes": dict(self.notes),
            "axis_layers": [{"axis": a.axis.value, "length": a.length, "step_px": a.step_px, "where": a.where}
                            for a in self.axis_layers],
            "uniform_distance_px": self.uniform_distance_px.tolist(),
        }

    @classmethod
    def from_json(cls, d: dict) -> InspectResult:
        """The result back from `to_json()` (a study record's raw data), e.g. to draw its pictures."""
        grid_h, grid_w = d["grid"]
        components = d.get("embedding_filter_components")
        filters = None if components is None else FilterComponents(
            np.asarray(components, np.float32), np.asarray(d["embedding_filter_variance_ratio"], np.float64),
            bool(d.get("embedding_filter_channels_summed")))
        rollout = np.asarray(d["rollout"], np.float64)
        return cls(
            model=d["model"], layout=TokenLayout(grid_h, grid_w, d["token_stride_px"], d["num_prefix_tokens"]),
            num_images=d["num_images"], attention_distance_px=np.asarray(d["attention_distance_px"]),
            attention_distance_std_px=np.asarray(d["attention_distance_std_px"]),
            prefix_attention_share=np.asarray(d["prefix_attention_share"]),
            posemb_similarity=None if d["posemb_similarity"] is None else np.asarray(d["posemb_similarity"]),
            posemb_grid_trained=tuple(d["posemb_grid_trained"]), filters=filters,
            rollout=rollout.reshape(-1, grid_h, grid_w),
            rollout_images=np.asarray(d.get("rollout_images", []), np.float32).reshape(
                len(rollout), *(d["resolution_px"],) * 2, -1) if len(rollout) else np.zeros((0, 1, 1, 1)),
            not_applicable=dict(d.get("not_applicable") or {}), notes=dict(d.get("notes") or {}),
            axis_layers=tuple(AxisLayer(Axis(a["axis"]), int(a["length"]), int(a["step_px"]), str(a["where"]))
                              for a in d.get("axis_layers") or ()))

    def write_pictures(self, out_dir, *, label: str | None = None) -> dict:
        """Write the PNGs into `out_dir`; returns {Picture: path}. See vitbench.inspect.pictures."""
        from vitbench.inspect.pictures import write_pictures

        return write_pictures(self, out_dir, label=label)


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
    n = pe.shape[-2] - layout.num_prefix_tokens
    side = math.isqrt(max(n, 0))
    if side * side != n or n == 0:
        raise ConfigError(f"{POS_EMBED} of shape {pe.shape} is not {layout.num_prefix_tokens} extra token(s) + a "
                          "square grid; is num_prefix_tokens right?")
    if (side, side) == (layout.grid_h, layout.grid_w):
        return weights, (side, side)
    new = resample_pos_embed(pe, (layout.grid_h, layout.grid_w), side, layout.num_prefix_tokens)
    return {**weights, POS_EMBED: np.asarray(new, np.float32)}, (side, side)


def inspect_model(weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int, images: np.ndarray,
                  attention_fn: AttentionFn, *, num_prefix_tokens: int | None = None, num_rollout: int = 4,
                  batch_size: int = 32) -> InspectResult:
    """Inspect a ViT or hybrid given as timm-named `weights` (any resolution: position embeddings are resampled
    to `resolution`) on NHWC float32 `images` (already at `resolution`, values as the model was trained on).

    Attention maps come from `attention_fn` in chunks of `batch_size` images (memory: layers x heads x tokens^2
    per image); rollout maps for the first `num_rollout` images. `num_prefix_tokens`: extra tokens before the
    patches (1: class token; DeiT's distillation token makes 2; None: the spec's). On grey images (R = G = B) the
    filter components are of the channel-summed filters (see vitbench.inspect.filters).
    """
    plugin = family_plugin(spec.family)
    if not plugin.token_attention_maps and plugin.axis_layers is None:
        raise ConfigError(f"inspection does not apply to {spec.name} (family {spec.family}: "
                          f"{plugin.description}): its family declares no attention maps to read; use a ViT, a "
                          "hybrid or an axial model")
    images = np.asarray(images, np.float32)
    if images.ndim != 4 or images.shape[1:3] != (resolution, resolution) or len(images) == 0:
        raise ConfigError(f"images of shape {images.shape}; expected (N >= 1, {resolution}, {resolution}, C)")
    if plugin.axis_layers is not None:
        from vitbench.inspect.per_axis import inspect_axes

        return inspect_axes(plugin, weights, spec, resolution, images, attention_fn, batch_size=batch_size)
    if num_prefix_tokens is None:
        num_prefix_tokens = spec.num_prefix_tokens
    layout = TokenLayout.of(spec, resolution, num_prefix_tokens)
    weights, trained_grid = fit_pos_embed(weights, layout, spec)
    if HEAD_WEIGHT in weights:  # build the model with the checkpoint's own head
        spec = spec.with_classes(int(weights[HEAD_WEIGHT].shape[0]))
    per_image, share, maps = [], [], []
    n = len(images)
    for start in range(0, n, batch_size):
        attn = np.asarray(attention_fn(weights, spec, resolution, images[start:start + batch_size]))
        check_attention(attn, layout)
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
    if not layout.num_prefix_tokens:
        not_applicable["rollout"] = ("classifier=gap: no class token, so no class-token rollout (the head reads "
                                     "the mean of the patch tokens)")
    return InspectResult(
        model=spec.name, layout=layout, num_images=n,
        attention_distance_px=dist.mean(1), attention_distance_std_px=dist.std(1),
        prefix_attention_share=np.sum(share, axis=0) / n,
        posemb_similarity=None if table is None else posemb_similarity(table, layout),
        posemb_grid_trained=trained_grid,
        filters=filters, rollout_images=images[:num_rollout if maps else 0].copy(),
        rollout=np.concatenate(maps) if maps else np.zeros((0, layout.grid_h, layout.grid_w)),
        not_applicable=not_applicable, notes=notes,
    )
