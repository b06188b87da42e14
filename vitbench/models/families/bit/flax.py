"""BiT's ResNet in Flax: vitbench.models.flax.resnet.BiTResNet (the big_transfer parameter layout)."""

from __future__ import annotations

from typing import Any

from vitbench.models.flax.resnet import BiTResNet
from vitbench.models.specs import ModelSpec


def build(spec: ModelSpec, num_classes: int, dtype: Any):
    return BiTResNet(spec, num_classes, dtype=dtype)
