"""A report section for one inspected model: headline numbers, the per-layer distance table, the pictures."""

from __future__ import annotations

from collections.abc import Mapping

from vitbench.insight.pictures import Picture
from vitbench.insight.result import InspectResult

_CAPTIONS = {  # paper figure each picture reproduces
    Picture.FILTERS: "RGB embedding filters, top principal components (paper Fig. 7 left)",
    Picture.POSEMB: "position-embedding cosine similarity (Fig. 7 centre)",
    Picture.DISTANCE: "mean attention distance per head against depth (Fig. 7 right, Fig. 11)",
    Picture.ROLLOUT: "attention rollout of the class token (Fig. 6)",
}


def to_markdown(result: InspectResult, pictures: Mapping[Picture, str] | None = None, level: int = 3) -> str:
    """Markdown for `result`; `pictures` maps each picture kind to the path the report links (relative to it)."""
    r, hashes = result, "#" * level
    lay, axes = r.layout, r.axis_layers
    grid = (f"{len(axes)} per-axis attention layers (row: along x, column: along y) on grids from "
            f"{axes[0].length}x{axes[0].length} tokens of {axes[0].step_px} px to {axes[-1].length}x"
            f"{axes[-1].length} of {axes[-1].step_px} px, no extra tokens" if axes else
            f"{lay.grid_h}x{lay.grid_w} tokens of {lay.stride_px} px (+{lay.num_prefix_tokens} extra)")
    lines = [f"{hashes} Inspection: {r.model} @ {r.resolution_px} px", "",
             f"{grid}, {r.num_images} images"
             + ("." if r.posemb_similarity is None else f"; position embeddings trained on a "
                f"{r.posemb_grid_trained[0]}x{r.posemb_grid_trained[1]} grid."), "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in r.headline().items()]
    if axes:
        lines += ["", "| layer | axis | where | step (px) | min over heads (px) | mean (px) | max (px) | "
                      "uniform (px) |", "|---|---|---|---|---|---|---|---|"]
        for i, (a, d, u) in enumerate(zip(axes, r.attention_distance_px, r.uniform_distance_px), start=1):
            lines.append(f"| {i} | {a.axis.value} | {a.where} | {a.step_px} | {d.min():.2f} | {d.mean():.2f} | "
                         f"{d.max():.2f} | {u:.2f} |")
    else:
        lines += ["", "| layer | min over heads (px) | mean (px) | max (px) | weight on extra tokens |",
                  "|---|---|---|---|---|"]
        for i, (d, s) in enumerate(zip(r.attention_distance_px, r.prefix_attention_share), start=1):
            lines.append(f"| {i} | {d.min():.2f} | {d.mean():.2f} | {d.max():.2f} | {s.mean():.2f} |")
    if r.filters is None and "embedding_filters" not in r.not_applicable:
        lines += ["", "No embedding-filter picture: this model's patch projection is 1x1 on CNN features, not a "
                      "filter on pixels."]
    for what, why in r.not_applicable.items():
        lines += ["", f"Not applicable, {what}: {why}."]
    if "posemb" in r.notes:
        lines += ["", f"Position embeddings compared: {r.notes['posemb']}."]
    for kind, path in (pictures or {}).items():
        lines += ["", f"![{_CAPTIONS[kind]}]({path})", f"*{_CAPTIONS[kind]}*"]
    return "\n".join(lines) + "\n"
