"""A report section for one inspected model: headline numbers, the per-layer distance table, the pictures."""

from __future__ import annotations

from collections.abc import Mapping

from vitbench.inspect.pictures import Picture
from vitbench.inspect.run import InspectResult

_CAPTIONS = {  # paper figure each picture reproduces
    Picture.FILTERS: "RGB embedding filters, top principal components (paper Fig. 7 left)",
    Picture.POSEMB: "position-embedding cosine similarity (Fig. 7 centre)",
    Picture.DISTANCE: "mean attention distance per head against depth (Fig. 7 right, Fig. 11)",
    Picture.ROLLOUT: "attention rollout of the class token (Fig. 6)",
}


def to_markdown(result: InspectResult, pictures: Mapping[Picture, str] | None = None, level: int = 3) -> str:
    """Markdown for `result`; `pictures` maps each picture kind to the path the report links (relative to it)."""
    r, hashes = result, "#" * level
    lay = r.layout
    lines = [f"{hashes} Inspection: {r.model} @ {r.resolution_px} px", "",
             f"{lay.grid_h}x{lay.grid_w} tokens of {lay.stride_px} px (+{lay.num_prefix_tokens} extra), "
             f"{r.num_images} images; position embeddings trained on a "
             f"{r.posemb_grid_trained[0]}x{r.posemb_grid_trained[1]} grid.", "",
             "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in r.headline().items()]
    lines += ["", "| layer | min over heads (px) | mean (px) | max (px) | weight on extra tokens |",
              "|---|---|---|---|---|"]
    for i, (d, s) in enumerate(zip(r.attention_distance_px, r.prefix_attention_share), start=1):
        lines.append(f"| {i} | {d.min():.2f} | {d.mean():.2f} | {d.max():.2f} | {s.mean():.2f} |")
    if r.filters is None:
        lines += ["", "No embedding-filter picture: this model's patch projection is 1x1 on CNN features, not a "
                      "filter on pixels."]
    for what, why in r.not_applicable.items():
        lines += ["", f"Not applicable, {what}: {why}."]
    if "posemb" in r.notes:
        lines += ["", f"Position embeddings compared: {r.notes['posemb']}."]
    for kind, path in (pictures or {}).items():
        lines += ["", f"![{_CAPTIONS[kind]}]({path})", f"*{_CAPTIONS[kind]}*"]
    return "\n".join(lines) + "\n"
