"""Model flavours: the numerical conventions a checkpoint was trained with, set from its origin.

The same architecture computes a slightly different function in different code bases. A checkpoint computes
the function it was trained with only when it is run in its origin's conventions, so these are properties of a
model (`ModelSpec.flavour`), applied by both backends and recorded in `spec.to_dict()`:

- GELU form: exact erf (timm / torch ``nn.GELU()``) or the tanh approximation (flax ``nn.gelu`` default,
  used by vit_jax `models_vit.MlpBlock` and big_vision `models/vit.py`).
- Weight standardisation of the ResNet convolutions: ``(w - mean) / sqrt(var + eps)`` (timm `StdConv2d`,
  big_transfer `bit_jax/models.py` `standardize`, big_vision `models/bit_paper.py`) or ``(w - mean) / (std + eps)``
  (vit_jax `models_resnet.weight_standardize`, big_vision `models/bit.py`), with the origin's epsilon.
- GroupNorm epsilon: 1e-5 (timm `GroupNormAct`, big_transfer) or 1e-6 (flax `nn.GroupNorm` default, vit_jax).

Default specs (no checkpoint) keep vitbench's own conventions (`DEFAULT` for ViT and BiT; `HYBRID_DEFAULT`),
which are what every number before flavours existed was measured with.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitbench.choices import Choice, not_allowed
from vitbench.errors import ConfigError
from vitbench.models.families import all_families, family_plugin


class Gelu(Choice):
    """The MLP's GELU: exact x*Phi(x), or 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (Hendrycks & Gimpel 2016)."""

    ERF = "erf"
    TANH = "tanh"


class WeightStd(Choice):
    """Weight standardisation (Qiao et al. 2019) of a conv kernel per output filter, biased variance."""

    SQRT_VAR = "sqrt_var"  # (w - mean) / sqrt(var + eps)
    STD_PLUS_EPS = "std_plus_eps"  # (w - mean) / (std + eps)


@dataclass(frozen=True)
class Flavour:
    """How a model computes: GELU form (ViT/hybrid MLPs), weight-standardisation form and epsilon, GroupNorm
    epsilon (BiT/hybrid ResNets). Fields a family does not use are carried but have no effect."""

    gelu: Gelu = Gelu.ERF
    weight_std: WeightStd = WeightStd.SQRT_VAR
    weight_std_eps: float = 1e-8  # timm resnetv2 `_create_resnetv2_bit`: partial(StdConv2d, eps=1e-8)
    gn_eps: float = 1e-5  # timm `GroupNormAct` default eps

    def to_dict(self) -> dict:
        return {"gelu": self.gelu.value, "weight_std": self.weight_std.value,
                "weight_std_eps": self.weight_std_eps, "gn_eps": self.gn_eps}

    @classmethod
    def from_dict(cls, d: dict, source: str = "flavour") -> Flavour:
        """Inverse of `to_dict`; unknown or missing fields and values are a ConfigError naming them."""
        fields = {"gelu": Gelu, "weight_std": WeightStd, "weight_std_eps": float, "gn_eps": float}
        if not isinstance(d, dict) or set(d) != set(fields):
            got = sorted(d) if isinstance(d, dict) else type(d).__name__
            raise ConfigError(f"{source}: expected the fields {sorted(fields)}, got {got}")
        out = {}
        for k, typ in fields.items():
            if issubclass(typ, Choice):
                out[k] = typ.parse(d[k], f"{source}.{k}")
                continue
            try:
                out[k] = typ(d[k])
            except (TypeError, ValueError):
                raise ConfigError(not_allowed(f"{source}.{k}", d[k], ["a number"])) from None
        return cls(**out)


# vitbench's conventions before flavours: timm's for ViT and BiT ...
DEFAULT = Flavour()
# ... and for hybrids timm's formula with vit_jax's epsilons (models_resnet.StdConv eps=1e-5, nn.GroupNorm 1e-6)
HYBRID_DEFAULT = Flavour(weight_std_eps=1e-5, gn_eps=1e-6)


class Origin(Choice):
    """Where a checkpoint comes from; decides its flavour (`flavour_for`)."""

    TIMM = "timm"  # timm / DeiT PyTorch state dicts (.safetensors)
    VIT_JAX = "vit_jax"  # google-research/vision_transformer .npz (ViT, R50 hybrids)
    BIG_VISION = "big_vision"  # google-research/big_vision .npz in the vit_jax layout
    BIG_TRANSFER = "big_transfer"  # google-research/big_transfer BiT .npz (gs://bit_models)
    VITBENCH = "vitbench"  # vitbench's own checkpoints: the flavour is stored with the spec


# The flavours of the code bases; each family says which origins have its models (FamilyWeights.origins).
FLAVOUR_TIMM = Flavour(Gelu.ERF, WeightStd.SQRT_VAR, 1e-8, 1e-5)  # timm vision_transformer*.py, resnetv2.py
# vit_jax models_vit.MlpBlock: nn.gelu (approximate=True default); models_resnet.StdConv: std + 1e-5;
# nn.GroupNorm default epsilon 1e-6
FLAVOUR_VIT_JAX = Flavour(Gelu.TANH, WeightStd.STD_PLUS_EPS, 1e-5, 1e-6)
# big_transfer bit_jax/models.py and big_vision bit_paper.py: standardize(..., eps=1e-10) = sqrt(var + 1e-10),
# their own GroupNorm with eps 1e-5
FLAVOUR_BIT = Flavour(Gelu.ERF, WeightStd.SQRT_VAR, 1e-10, 1e-5)
# (vit_jax's vit and hybrid: FLAVOUR_VIT_JAX; big_vision vit.py uses nn.gelu like vit_jax and its bit.py ResNet
# (v1, the hybrid's kind) std + 1e-5: FLAVOUR_VIT_JAX; big_transfer and big_vision's bit_paper.py: FLAVOUR_BIT)


def flavour_for(origin: Origin | str, family: str) -> Flavour:
    """The flavour a checkpoint of `origin` needs for a model of `family` (ConfigError where it has none)."""
    origin = Origin.parse(origin, "origin")
    if origin is Origin.VITBENCH:
        raise ConfigError("a vitbench checkpoint stores its flavour with its spec (Flavour.from_dict)")
    flavour = family_plugin(family).weights.origins.get(origin.value)
    if flavour is None:
        has = [f.name for f in all_families() if origin.value in f.weights.origins]
        raise ConfigError(f"origin {origin.value!r} has no {family!r} models (it has: {', '.join(has)})")
    return flavour
