"""Analytic parameter and MAC counts from the architecture alone (no framework, no allocation); each family
counts its own (`FamilyPlugin.computation.counts`, vitbench.models.families) in this convention.

Convention: 1 MAC = 2 FLOPs. Counted: every matmul/conv MAC (patch embedding, qkv, attention scores and
weighted sum, projections, MLP, head; ResNet convs incl. projection shortcuts). Not counted: LayerNorm,
GroupNorm, weight standardisation, softmax, GELU/ReLU, residual adds, pooling, biases — the usual convention
(fvcore and timm's published GMACs do the same, up to small norm terms).
"""

from __future__ import annotations

from dataclasses import dataclass

from vitbench.errors import ConfigError
from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec, get_spec

# A multiply-accumulate is a multiply and an add: 2 FLOPs (the convention above; fvcore's and timm's GMACs, the ViT
# paper's exaFLOPs). Every FLOP count vitbench derives from a MAC count uses it.
FLOPS_PER_MAC = 2
# A training step's FLOPs in forward FLOPs: forward + backward, the backward ~ 2x the forward (the gradients of
# the activations and of the weights, each one matmul per forward matmul; Kaplan et al. 2020, "Scaling Laws for
# Neural Language Models", Sec. 2.1: C = 6N per token against the forward's 2N). Pre-training compute, model
# FLOP/s of a training step and the report's reference lines of a training panel all use it.
TRAIN_FLOPS_PER_FORWARD = 3


@dataclass(frozen=True)
class Counts:
    params: int
    macs: int

    @property
    def gmacs(self) -> float:
        return self.macs / 1e9

    @property
    def gflops(self) -> float:
        return FLOPS_PER_MAC * self.macs / 1e9


def analytic_counts(spec: ModelSpec, resolution: int | None = None, num_classes: int | None = None) -> Counts:
    """Params and forward MACs of one image at `resolution` (default: native)."""
    r = spec.resolution if resolution is None else resolution
    k = spec.num_classes if num_classes is None else num_classes
    spec.check_resolution(r)
    return family_plugin(spec.family).computation.counts(spec, r, k)  # each family counts its own


def train_flops_per_image(spec: ModelSpec, resolution: int | None = None, num_classes: int | None = None) -> float:
    """Training FLOPs per image: forward + backward = 3x forward (backward ~ 2x forward), 2 FLOPs per MAC."""
    return TRAIN_FLOPS_PER_FORWARD * FLOPS_PER_MAC * analytic_counts(spec, resolution, num_classes).macs


def pretrain_exaflops(model: str | ModelSpec, images: float, epochs: float = 1.0, resolution: int | None = None,
                      num_classes: int | None = None) -> float:
    """Pre-training compute in exaFLOPs: 3 x forward FLOPs per image x images x epochs."""
    if images <= 0 or epochs <= 0:
        raise ConfigError(f"--images and --epochs must be positive, got {images} and {epochs}")
    spec = get_spec(model)
    return train_flops_per_image(spec, resolution, num_classes) * images * epochs / 1e18
