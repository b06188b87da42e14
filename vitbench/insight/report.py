"""The report's section for `inspect` rows: a table of the headline numbers and the attention-distance comparison
(each row's InspectResult rebuilt from its record's raw data)."""

from __future__ import annotations

import json

import pandas as pd

from vitbench.insight.pictures import distance_panels
from vitbench.insight.result import InspectResult

_HEADLINE = ("attention_distance_first_layer_px", "attention_distance_first_layer_min_px",
             "attention_distance_first_layer_max_px", "attention_distance_last_layer_px",
             "attention_distance_uniform_px", "posemb_adjacent_cos_sim")
_KEYS = ("model", "family", "backend", "pretrain_steps", "resolution")
_PANEL = ("model", "backend", "resolution")  # one panel each; the other keys that vary are its series


def table(ok: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in (*_KEYS, *_HEADLINE, "upstream_accuracy") if c in ok.columns]
    return ok[cols].sort_values([c for c in _KEYS if c in cols]).reset_index(drop=True) if cols else ok


def distance_comparison(ok: pd.DataFrame):
    """One panel per inspected model (and backend, resolution), one series per what else varies (the
    pre-training budget, ...): how attention distance differs between budgets and between models."""
    if ok.empty or "raw" not in ok.columns:
        return None
    panel_keys = [k for k in _PANEL if k in ok.columns]
    within = ok.astype({k: str for k in _KEYS if k in ok.columns}).groupby(panel_keys, dropna=False)
    series_keys = [k for k in _KEYS if k in ok.columns and k not in panel_keys and within[k].nunique().max() > 1]
    panels: dict[str, dict[str, InspectResult]] = {}
    for _, row in ok.sort_values(panel_keys + series_keys).iterrows():
        # the report loads raw as JSON text (tidy.load_each's raw_json); a caller's frame may hold dicts
        raw = json.loads(row["raw"]) if isinstance(row["raw"], str) else row["raw"]
        if isinstance(raw, dict) and raw.get("attention_distance_px"):
            title = " ".join(str(row[k]) for k in panel_keys if k != "resolution" and pd.notna(row[k]))
            label = ", ".join(f"{k}={row[k]}" for k in series_keys) or str(row["model"])
            panels.setdefault(title, {})[label] = InspectResult.from_json(raw)
    return distance_panels(panels) if panels else None
