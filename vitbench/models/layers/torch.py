"""PyTorch layers shared by families (vitbench.models.layers)."""

from __future__ import annotations

from functools import partial

import torch

from vitbench.models.flavours import Gelu

# The GELU of a flavour (vitbench.models.flavours): exact erf, timm's nn.GELU(); the tanh approximation,
# nn.GELU(approximate='tanh'), which is flax's nn.gelu default (vit_jax, big_vision).
GELUS = {Gelu.ERF: torch.nn.GELU, Gelu.TANH: partial(torch.nn.GELU, approximate="tanh")}
