"""The paper's inspection pictures as matplotlib Figures (no pyplot state), and writing them as PNGs.

- embedding filters: top principal components of the patch projection (Fig. 7 left)
- position-embedding similarity: one small map per patch (Fig. 7 centre)
- mean attention distance per head against depth (Fig. 7 right, Fig. 11), one or several models, or one
  panel per model
- attention rollout of the class token over a few inputs (Fig. 6)
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from vitbench.models.families import Axis
from vitbench.paths import write_atomic

if TYPE_CHECKING:
    from vitbench.insight.result import InspectResult


class Picture(Enum):
    """Each picture kind; the value is its file stem."""

    FILTERS = "embedding_filters"
    POSEMB = "posemb_similarity"
    DISTANCE = "attention_distance"
    ROLLOUT = "attention_rollout"


def _unit(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.zeros_like(x)


def filters_figure(result: InspectResult, cols: int = 7) -> Figure | None:
    """Fig. 7 left: each principal component scaled to [0, 1] on its own (grey for channel-summed filters);
    None for a hybrid."""
    f = result.filters
    if f is None:
        return None
    k = len(f.images)
    rows = -(-k // cols)
    fig = Figure(figsize=(1.1 * cols, 1.1 * rows + 0.6), layout="constrained")
    what = "embedding filters summed over R, G, B (grey inputs)" if f.channels_summed else "RGB embedding filters"
    fig.suptitle(f"{result.model}: {what}, top {k} principal components", fontsize=9)
    for i, ax in enumerate(fig.subplots(rows, cols, squeeze=False).ravel()):
        ax.set_axis_off()
        if i < k:
            img = _unit(f.images[i])
            ax.imshow(img[..., 0] if f.channels_summed else img, cmap="gray", interpolation="nearest")
            ax.set_title(f"{100 * f.variance_ratio[i]:.0f}%", fontsize=6)
    return fig


def posemb_figure(result: InspectResult) -> Figure | None:
    """Fig. 7 centre: tile (i, j) = cosine similarity of patch (i, j)'s position embedding with every patch's;
    None for a model without absolute position embeddings (result.not_applicable says why)."""
    sim = result.posemb_similarity
    if sim is None:
        return None
    h, w = sim.shape[:2]
    size = min(max(0.5 * max(h, w), 4.0), 9.0)
    fig = Figure(figsize=(size + 1.2, size + 0.8), layout="constrained")
    axes = fig.subplots(h, w, squeeze=False)
    im = None
    for i in range(h):
        for j in range(w):
            ax = axes[i, j]
            im = ax.imshow(sim[i, j], vmin=-1, vmax=1, cmap="viridis", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(str(i + 1), fontsize=6, rotation=0, labelpad=6)
            if i == h - 1:
                ax.set_xlabel(str(j + 1), fontsize=6)
    fig.supxlabel("input patch column", fontsize=8)
    fig.supylabel("input patch row", fontsize=8)
    what = result.notes.get("posemb")
    fig.suptitle(f"{result.model}: position embedding similarity\n({h}x{w} grid, trained on "
                 f"{result.posemb_grid_trained[0]}x{result.posemb_grid_trained[1]}"
                 + (f"; {what})" if what else ")"), fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6, label="cosine similarity")
    return fig


_MARKER = {Axis.ROW: ">", Axis.COLUMN: "^"}  # per-axis layers: the direction the layer attends along


def _uniform_line(ax, r: InspectResult, x: np.ndarray, colour, label: str | None) -> None:
    """Dotted: the distance of uniform attention (the fully global level), one level or one per layer."""
    u = r.uniform_distance_px
    if np.allclose(u, u[0]):
        ax.axhline(u[0], color=colour, lw=0.8, ls=":", label=label)
    else:
        ax.plot(x, u, color=colour, lw=0.8, ls=":", drawstyle="steps-mid", label=label)


def distance_figure(results: Mapping[str, InspectResult]) -> Figure:
    """Fig. 7 right / Fig. 11: one dot per head at its layer (dashed: mean over heads; dotted: uniform attention,
    the fully global level); one model: coloured by head; several: by model. Per-axis layers (axial models):
    '>' a row layer (distance along x), '^' a column layer (along y)."""
    fig = Figure(figsize=(5.4, 4.0), layout="constrained")
    ax = fig.subplots()
    many = len(results) > 1
    cmap = matplotlib.colormaps["tab10"]
    for m, (label, r) in enumerate(results.items()):
        d = r.attention_distance_px
        layers = np.arange(1, d.shape[0] + 1)
        offset = (m - (len(results) - 1) / 2) * 0.12 if many else 0.0
        markers = [_MARKER[a.axis] for a in r.axis_layers] or ["o"] * len(layers)
        for h in range(d.shape[1]):
            colour = cmap(m if many else h)
            for i, mk in enumerate(markers):
                ax.scatter(layers[i] + offset, d[i, h], s=14, color=colour, marker=mk,
                           label=((label if h == 0 else None) if many else f"head {h + 1}") if i == 0 else None)
        ax.plot(layers + offset, d.mean(1), color=cmap(m) if many else "0.4", lw=0.8, ls="--")
        _uniform_line(ax, r, layers + offset, cmap(m) if many else "0.4",
                      "uniform attention" + (f" ({label})" if many else ""))
    first = next(iter(results.values()))
    ax.set_xlabel("network depth (layer)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.set_xticks(np.arange(1, first.attention_distance_px.shape[0] + 1))
    top = max(max(float(r.attention_distance_px.max()), float(r.uniform_distance_px.max()))
              for r in results.values())
    ax.set_ylim(0, 1.1 * top or 1.0)  # a one-patch grid: every distance 0 (an empty range warns)
    ax.set_title(", ".join(f"{k} @ {r.resolution_px}px" for k, r in results.items()) if many else
                 f"{first.model} @ {first.resolution_px}px ({first.num_images} images)"
                 + ("\n> row layer (along x), ^ column layer (along y)" if first.axis_layers else ""), fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def distance_panels(panels: Mapping[str, Mapping[str, InspectResult]]) -> Figure:
    """Fig. 7 right / Fig. 11 for many models: one panel per model (its title), one series per what varies
    within it (e.g. the pre-training budget; light to dark in the given order): each head a dot at its layer,
    the mean over heads a line; dotted, the panel's uniform-attention level (the fully global distance)."""
    n = len(panels)
    cols = min(n, 4)
    rows = -(-n // cols)
    fig = Figure(figsize=(3.4 * cols, 2.9 * rows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    for ax, (title, series) in zip(axes, panels.items()):
        shades = matplotlib.colormaps["viridis_r"](np.linspace(0.2, 0.95, max(len(series), 2)))
        top = 0.0
        for m, (label, r) in enumerate(series.items()):
            d = r.attention_distance_px
            layers = np.arange(1, d.shape[0] + 1)
            offset = (m - (len(series) - 1) / 2) * 0.08
            markers = [_MARKER[a.axis] for a in r.axis_layers] or ["o"] * len(layers)
            for i, mk in enumerate(markers):
                ax.scatter(np.full(d.shape[1], layers[i] + offset), d[i], s=8, color=shades[m], alpha=0.7,
                           marker=mk)
            ax.plot(layers + offset, d.mean(1), color=shades[m], lw=1.2, label=label)
            top = max(top, float(d.max()))
        first = next(iter(series.values()))
        ticks = np.arange(1, first.attention_distance_px.shape[0] + 1)
        _uniform_line(ax, first, ticks, "0.4", "uniform attention")
        ax.set_ylim(0, 1.1 * max(top, float(first.uniform_distance_px.max())))
        ax.set_xticks(ticks)
        ax.set_title(f"{title} @ {first.resolution_px}px"
                     + ("\n> row layer (along x), ^ column layer (along y)" if first.axis_layers else ""),
                     fontsize=9)
        ax.set_xlabel("network depth (layer)", fontsize=8)
        ax.set_ylabel("mean attention distance (px)", fontsize=8)
        ax.legend(fontsize=6, loc="lower right")
        ax.grid(alpha=0.3)
    for ax in axes[n:]:
        ax.set_axis_off()
    return fig


def rollout_figure(result: InspectResult) -> Figure | None:
    """Fig. 6: per image, the input, the class token's rollout over the patches in multiples of uniform attention
    (1 = every patch alike; one colour scale for all images), and the input masked by rollout / its maximum."""
    n = len(result.rollout)
    if n == 0:
        return None
    s = result.layout.stride_px
    rel = result.rollout / result.rollout.sum((1, 2), keepdims=True) * result.layout.num_patches
    fig = Figure(figsize=(1.6 * n + 1.4, 5.0), layout="constrained")
    axes = fig.subplots(3, n, squeeze=False)
    im = None
    for i in range(n):
        img = np.clip((result.rollout_images[i] + 1) / 2, 0, 1)  # [-1, 1] -> [0, 1]
        mask = np.repeat(np.repeat(rel[i] / rel[i].max(), s, 0), s, 1)[..., None]
        axes[0, i].imshow(img, interpolation="nearest")
        im = axes[1, i].imshow(rel[i], cmap="inferno", vmin=0, vmax=float(rel.max()), interpolation="nearest")
        axes[2, i].imshow(img * mask, interpolation="nearest")
        for ax in axes[:, i]:
            ax.set_axis_off()
    for row, title in enumerate(["input", "rollout", "input x rollout / max"]):
        axes[row, 0].set_title(title, fontsize=7, loc="left")
    fig.colorbar(im, ax=axes[1, :], shrink=0.9, label="x uniform")
    fig.suptitle(f"{result.model}: attention rollout of the class token", fontsize=9)
    return fig


def figures(result: InspectResult) -> dict[Picture, Figure]:
    """Every picture that applies to `result` (no filters for a hybrid, no rollout without rollout images or
    class token, no position-embedding similarity without absolute position embeddings)."""
    out = {Picture.FILTERS: filters_figure(result), Picture.POSEMB: posemb_figure(result),
           Picture.DISTANCE: distance_figure({result.model: result}), Picture.ROLLOUT: rollout_figure(result)}
    return {k: v for k, v in out.items() if v is not None}


def png_bytes(fig: Figure, dpi: int = 150) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def render_pictures(result: InspectResult, *, label: str | None = None) -> dict[Picture, tuple[str, bytes]]:
    """Every picture as (file name `<label>_<stem>.png` or `<stem>.png`, PNG bytes)."""
    return {k: (f"{label + '_' if label else ''}{k.value}.png", png_bytes(fig))
            for k, fig in figures(result).items()}


def write_pictures(result: InspectResult, out_dir: str | Path, *, label: str | None = None) -> dict[Picture, Path]:
    """Render every picture first, then write each into `out_dir` (render_pictures' names)."""
    out_dir = Path(out_dir)
    return {k: write_atomic(out_dir / name, data)
            for k, (name, data) in render_pictures(result, label=label).items()}
