"""BiT's ResNet in Flax: flax_model.BiTResNet (the big_transfer parameter layout)."""

from __future__ import annotations

from typing import Any

from vitbench.models.families.bit.flax_model import BiTResNet
from vitbench.models.specs import ModelSpec


def build(spec: ModelSpec, num_classes: int, dtype: Any):
    return BiTResNet(spec, num_classes, dtype=dtype)
