"""A model family written outside vitbench: `Pooled-Conv`, a p x p patch convolution to D channels, the mean over
the patch grid, a linear head. Not from any paper: the smallest model with a stride, a feature width and a
resolution-dependent cost, to show what a family declares (docs/plugins.md, "Add a model family").

    PYTHONPATH=examples/family VITBENCH_PLUGINS=vitbench_pooled vitbench models --family pooled_conv
    PYTHONPATH=examples/family VITBENCH_PLUGINS=vitbench_pooled vitbench sweep examples/family/pooled.yaml

Registering imports neither torch nor jax: the builders are named as 'module:function' strings and import their
framework when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitbench.models.analytic import Counts
from vitbench.models.families import FamilyBuild, FamilyComputation, FamilyName, FamilyPlugin, register_family
from vitbench.models.param_table import _conv, _copy, _linear
from vitbench.models.specs import ModelSpec

POOLED = FamilyName("pooled_conv")


@dataclass(frozen=True)
class PooledArch:
    """The family's own part of its specs (ModelSpec.arch): patch size P and conv channels D."""

    patch: int
    width: int


ROWS = (
    ModelSpec(name="Pooled-Conv-8/4", family=POOLED, tiny=True, resolution=32, num_classes=10,
              arch=PooledArch(patch=4, width=8)),
    ModelSpec(name="Pooled-Conv-16/8", family=POOLED, tiny=True, resolution=32, num_classes=10,
              arch=PooledArch(patch=8, width=16)),
)


def counts(spec: ModelSpec, resolution: int, num_classes: int) -> Counts:
    """Patch conv (3 p^2 D weights + D biases; one p x p x 3 -> D product per patch) and the head (D k + k)."""
    p, d, cells = spec.arch.patch, spec.arch.width, (resolution // spec.arch.patch) ** 2
    return Counts(params=3 * p * p * d + d + d * num_classes + num_classes,
                  macs=cells * 3 * p * p * d + d * num_classes)


def param_table(spec: ModelSpec, resolution: int) -> list:
    """torch embed.weight (D, 3, p, p) <-> Flax embed/kernel (p, p, 3, D); the head as a dense layer."""
    return [_conv("embed.weight", "embed/kernel"), _copy("embed.bias", "embed/bias"), *_linear("head", "head")]


def build_torch(spec: ModelSpec, resolution: int, num_classes: int):
    import torch

    class PooledConv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Conv2d(3, spec.arch.width, spec.arch.patch, stride=spec.arch.patch)
            self.head = torch.nn.Linear(spec.arch.width, num_classes)

        def forward_features(self, x):
            return self.embed(x)

        def forward_head(self, x, pre_logits: bool = False):
            x = x.mean(dim=(2, 3))
            return x if pre_logits else self.head(x)

        def forward(self, x):
            return self.forward_head(self.forward_features(x))

    return PooledConv()


def build_flax(spec: ModelSpec, num_classes: int, dtype):
    import flax.linen as nn

    class PooledConv(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False, pre_logits: bool = False):
            p = spec.arch.patch
            x = nn.Conv(spec.arch.width, (p, p), strides=p, padding="VALID", dtype=dtype,
                        name="embed")(x.astype(dtype))
            x = x.mean(axis=(1, 2))
            return x if pre_logits else nn.Dense(num_classes, dtype=dtype, name="head")(x)

    return PooledConv()


register_family(FamilyPlugin(
    name=POOLED, description="patch conv -> mean over the grid -> linear head (an outside example)", rows=ROWS,
    fields=("patch", "width"), override_keys=("patch", "width"), arch=PooledArch,
    build=FamilyBuild(torch=f"{__name__}:build_torch", flax=f"{__name__}:build_flax"),
    computation=FamilyComputation(counts=counts, param_table=param_table, stride=lambda spec: spec.arch.patch,
                                  feature_dim=lambda spec: spec.arch.width,
                                  describe=lambda spec: f"patch conv P={spec.arch.patch} D={spec.arch.width}, "
                                                        "mean, linear"),
    attention=False,
))
