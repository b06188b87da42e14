"""How model names are compared: one normalisation for the table's index and the family registry's checks."""

from __future__ import annotations

import re


def norm_name(name: str) -> str:
    """Forgiving key: case-, separator- and suffix-insensitive ('vit-b/16' == 'ViT-B_16')."""
    s = name.strip().lower()
    s = re.sub(r"\.[a-z0-9_]+$", "", s)  # timm pretrained tag, e.g. '.augreg_in21k'
    return re.sub(r"[^a-z0-9+]", "", s)
