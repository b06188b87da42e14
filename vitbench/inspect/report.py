"""The report's section for `inspect` rows: a table of the headline numbers and the attention-distance comparison
(each row's InspectResult rebuilt from its record's raw data)."""

from __future__ import annotations

import pandas as pd

from vitbench.inspect.pictures import distance_figure
from vitbench.inspect.run import InspectResult

_HEADLINE = ("attention_distance_first_layer_px", "attention_distance_first_layer_min_px",
             "attention_distance_first_layer_max_px", "attention_distance_last_layer_px",
             "attention_distance_uniform_px", "posemb_adjacent_cos_sim")
_KEYS = ("model", "family", "backend", "pretrain_steps", "resolution")


def _label(row: pd.Series, varying: list[str]) -> str:
    parts = [str(row["model"])] + [f"{k}={row[k]}" for k in varying if k != "model" and k in row]
    return " ".join(parts)


def table(ok: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in (*_KEYS, *_HEADLINE, "upstream_accuracy") if c in ok.columns]
    return ok[cols].sort_values([c for c in _KEYS if c in cols]).reset_index(drop=True) if cols else ok


def distance_comparison(ok: pd.DataFrame):
    """One figure: every inspected model's per-head distance against depth (labels name what differs)."""
    if ok.empty or "raw" not in ok.columns:
        return None
    keys = [k for k in _KEYS if k in ok.columns]
    varying = [k for k in keys if ok[k].astype(str).nunique() > 1]
    results = {}
    for _, row in ok.sort_values(keys).iterrows():
        if isinstance(row["raw"], dict) and row["raw"].get("attention_distance_px"):
            results[_label(row, varying)] = InspectResult.from_json(row["raw"])
    return distance_figure(results) if results else None
