"""Distillation through attention in pre-training (DeiT: Touvron et al. 2021, Sec. 4): what a backend's `train`
needs to follow a teacher, and the teacher itself.

The losses (one definition per backend: `distillation_loss` in vitbench/backends/<name>/training.py), on the
student's class-token logits z_cls, its distillation-token logits z_dist (for a student without a distillation
token, z_dist is z_cls: the same head) and the teacher's logits z_t of the same images:

    soft (eq. 2):  (1 - lam) CE(z_cls, y) + lam tau^2 KL(softmax(z_t / tau) || softmax(z_dist / tau))
    hard (eq. 3):  (1 - lam) CE(z_cls, y) + lam CE(z_dist, argmax z_t)          (the paper's lam = 1/2)

as facebookresearch/deit `losses.py::DistillationLoss` (`base * (1 - alpha) + distill * alpha` for both kinds;
label smoothing only in the CE on the true labels). One difference, deliberate: the KL here is the per-image
KL averaged over the batch (eq. 2), where deit's code divides the summed KL by batch x classes
(`outputs_kd.numel()`, "legacy PyTorch behaviour", its issue 61), i.e. its soft term is 1/K of eq. 2's.

The teacher runs on the student's backend (weights cross as timm-named numpy), in inference mode, at its own
resolution. Without augmentation its logits per training image never change, so pre-training computes them once
over the training set and looks each batch's up; its forward cost still counts per image seen, as in DeiT, where
augmentation makes every seen image new (`teacher_forward_flops`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from vitbench.errors import ConfigError

DEFAULT_LAMBDA = 0.5  # eq. 3's 1/2; deit main.py --distillation-alpha default
DEFAULT_TAU = 1.0  # deit main.py --distillation-tau default
# The ranges, declared once for every place that takes them (study fields, CLI options, TeacherConfig). The
# temperature: Hinton et al. 2015 (distillation) use 1..20, DeiT's soft runs 3; below 0.05 the scaled logits and
# above 100 the tau^2 factor leave float32's useful range.
Lambda = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]  # weight of the teacher's term
Tau = Annotated[float, Field(ge=0.05, le=100, allow_inf_nan=False)]  # temperature (soft only)


class Distillation(str, enum.Enum):
    """How the teacher supervises the distillation head."""

    HARD = "hard"  # the teacher's argmax as a label (DeiT eq. 3)
    SOFT = "soft"  # KL to the teacher's temperature-scaled softmax (DeiT eq. 2)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Distill:
    """What a backend's `train` needs to distil: the loss's kind and weights, and the teacher's logits for the
    training images of a batch (`teacher_logits(indices) -> float32 (B, K)`, indices into the training set as
    `batch_indices` draws them)."""

    kind: Distillation
    lam: float
    tau: float
    teacher_logits: Callable[[np.ndarray], np.ndarray]


@dataclass
class Teacher:
    """A teacher loaded on a backend: its model, row (spec), resolution and what it cost to make."""

    backend: Any
    model: Any
    spec: Any
    resolution: int
    num_classes: int
    pretrain_exaflops: float | None  # its own pre-training compute, when its checkpoint says (not in the row's)

    def forward_flops(self) -> float:
        return teacher_forward_flops(self.spec, self.resolution, self.num_classes)


def teacher_forward_flops(spec, resolution: int, num_classes: int) -> float:
    """FLOPs of one teacher forward per image seen: 2 x analytic MACs (1 MAC = 2 FLOPs; no backward)."""
    from vitbench.models.analytic import FLOPS_PER_MAC, analytic_counts

    return FLOPS_PER_MAC * analytic_counts(spec, resolution, num_classes).macs


def load_teacher(backend, weights: dict, spec, resolution: int, num_classes: int, class_names: list | None,
                 upstream_classes: list, *, pretrain_exaflops: float | None = None, source: str = "") -> Teacher:
    """The teacher on `backend` from timm-named weights; its head must predict the student's upstream classes
    (`upstream_classes`; `class_names`: the teacher's, when its checkpoint records them)."""
    where = f"teacher {source or spec.name}"
    if num_classes != len(upstream_classes):
        raise ConfigError(f"{where}: its head has {num_classes} classes; the student's upstream has "
                          f"{len(upstream_classes)} ({', '.join(map(str, upstream_classes))})")
    if class_names is not None and list(class_names) != list(upstream_classes):
        raise ConfigError(f"{where}: trained on classes {list(class_names)}; the student's upstream has "
                          f"{list(upstream_classes)}")
    model = backend.load_weights(backend.init_model(spec, resolution, num_classes, 0), weights)
    return Teacher(backend, model, spec, resolution, num_classes, pretrain_exaflops)


def agreement(student_logits: np.ndarray, teacher_logits: np.ndarray) -> float:
    """Fraction of images on which student and teacher predict the same class (cf. DeiT's disagreement
    analysis between models)."""
    if len(student_logits) == 0:
        return float("nan")
    return float(np.mean(student_logits.argmax(1) == teacher_logits.argmax(1)))
