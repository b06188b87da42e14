"""What inspection returns (`InspectResult`: the numbers behind the paper's Fig. 6 and 7), the attention function
it is given (`AttentionFn`) and the parameter names it reads: shared by the token inspection (inspect.run) and the
per-axis one (inspect.per_axis)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from vitbench.insight.axes import uniform_axis_distance_px
from vitbench.insight.distance import uniform_attention_distance_px
from vitbench.insight.filters import FilterComponents
from vitbench.insight.layout import TokenLayout
from vitbench.insight.posemb import adjacent_similarity
from vitbench.models.families import Axis, AxisLayer
from vitbench.models.specs import ModelSpec

# timm parameter names (the checkpoint format, vitbench.transfer.checkpoint) of what inspection reads directly
POS_EMBED, PATCH_KERNEL, HEAD_WEIGHT = "pos_embed", "patch_embed.proj.weight", "head.weight"
# the headline number of Fig. 7 centre, and its key in not_applicable where it does not apply (one patch)
ADJACENT_COS_SIM = "posemb_adjacent_cos_sim"


class AttentionFn(Protocol):
    """One framework's attention probabilities: (layers, images, heads, tokens, tokens) float32, for a model of
    `spec` at `resolution` with `weights` (timm naming, position embeddings already fitting `resolution`) on
    NHWC float32 `images`; for a family with per-axis layers, one (images, sequences, heads, length, length)
    array per layer (vitbench.models.families.AttentionMaps.axis_layers)."""

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
        # a model without position embeddings, or a one-patch grid (not_applicable says why), has no such number
        if self.posemb_similarity is not None and ADJACENT_COS_SIM not in self.not_applicable:
            out[ADJACENT_COS_SIM] = adjacent_similarity(self.posemb_similarity)
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
        """Write the PNGs into `out_dir`; returns {Picture: path}. See vitbench.insight.pictures."""
        from vitbench.insight.pictures import write_pictures

        return write_pictures(self, out_dir, label=label)


def require_finite_maps(attn: np.ndarray, spec: ModelSpec) -> None:
    """NonFiniteResult (exit 1, as fewshot's non-finite features) unless every attention probability of `attn`
    is finite: weights that overflow make NaN maps, and NaN distances would be reported as null (a study's row
    without its headline: an error row, vitbench.trial) or crash the table and the pictures."""
    from vitbench.transfer.ops import check_finite

    check_finite(attn, f"{spec.name}'s attention probabilities")


def require_finite(result: InspectResult) -> InspectResult:
    """`result` when the numbers its headline comes from are finite, else NonFiniteResult naming the first that is
    not (finite maps can still put no weight on any patch: 0/0 distances). Quantities that do not apply are
    absent (not_applicable), never NaN."""
    from vitbench.transfer.ops import check_finite

    check_finite(result.attention_distance_px, f"{result.model}'s mean attention distance per layer and head (px)")
    if result.posemb_similarity is not None:
        check_finite(result.posemb_similarity, f"{result.model}'s position-embedding cosine similarity")
    return result
