"""Optimiser settings and learning-rate schedules shared by both backends (one table, so torch == JAX).

Schedule: linear warm-up from 0, then linear or cosine decay over the remaining steps, as in vit_jax
`utils.create_learning_rate_schedule` (paper App. B.1: "linear learning rate warmup and decay";
fine-tuning: cosine decay).
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vitbench.transfer.config import MAX_COUNT


# A peak learning rate, declared once for every config that takes one: the paper's are 1e-3 (Adam) and 0.001 to
# 0.03 (SGD, App. B.1.1); past 1e3 nothing trains, and past float32's range (3e38) a framework cannot even take it.
LearningRate = Annotated[float, Field(gt=0, le=1e3, allow_inf_nan=False)]
# Decoupled weight decay, scaled by the LR (each step multiplies a kernel by 1 - lr x wd): the paper's 0.1 (JFT) and
# 0.03 (ImageNet-21k); at the paper's Adam LR of 1e-3, 1e3 zeroes every kernel each step, and past it flips them.
WeightDecay = Annotated[float, Field(ge=0, le=1e3, allow_inf_nan=False)]


class OptimConfig(BaseModel):
    """One optimisation run: optimiser, peak LR, schedule, regularisation. JSON-able."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    optimizer: Literal["adam", "sgd"] = "adam"
    lr: LearningRate = 1e-3  # peak learning rate, reached at the end of warm-up
    steps: int = Field(100, ge=1, le=MAX_COUNT)
    warmup_steps: int = Field(10, ge=0, le=MAX_COUNT)
    decay: Literal["linear", "cosine"] = "cosine"
    linear_end: float = Field(1e-5, ge=0)  # final LR of the linear decay (vit_jax default)
    weight_decay: WeightDecay = 0.0  # decoupled (AdamW-style, scaled by the LR); kernels only
    b1: float = 0.9  # Adam betas, paper App. B.1
    b2: float = 0.999
    momentum: float = 0.9  # SGD momentum, paper App. B.1.1
    clip_norm: float | None = Field(1.0, gt=0)  # global gradient norm clip (paper: 1)
    label_smoothing: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _warmup_fits(self):
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps ({self.warmup_steps}) must be < steps ({self.steps})")
        return self


def check_warmup(warmup_steps: int | None, info) -> int | None:
    """A config's `warmup_steps` field validator: fewer than its `steps` (validated before it), so that a bad
    warm-up is reported as the warm-up field, by the name its caller gives that field."""
    steps = info.data.get("steps")
    if warmup_steps is not None and isinstance(steps, int) and warmup_steps >= steps:
        raise ValueError(f"the warm-up must be shorter than the steps ({steps})")
    return warmup_steps


def lr_at(step: int, cfg: OptimConfig) -> float:
    """Learning rate used for update number `step` (0-based)."""
    base, total, warm = cfg.lr, cfg.steps, cfg.warmup_steps
    progress = min(max((step - warm) / float(total - warm), 0.0), 1.0)
    if cfg.decay == "cosine":
        lr = base * 0.5 * (1.0 + math.cos(math.pi * progress))
    else:
        lr = cfg.linear_end + (base - cfg.linear_end) * (1.0 - progress)
    if warm:
        lr *= min(1.0, (step + 1) / warm)  # step 0 already gets a small non-zero LR
    return lr


def lr_table(cfg: OptimConfig) -> np.ndarray:
    """LR for every step, float64 (steps,)."""
    return np.array([lr_at(s, cfg) for s in range(cfg.steps)])
