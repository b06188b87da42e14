"""The `timm` family: any of timm's architectures by name, `timm:<timm model name>` (`timm:convnext_tiny`,
`timm:resnet50`, `timm:eva02_small_patch14_224`, a pretrained tag too: `timm:convnext_tiny.fb_in1k`).

An open-ended family: its models are not rows of the table but names its `Catalogue` resolves (`resolve`) and
lists (`names`: timm's `list_models(pattern)`). A spec carries the timm name in `timm_id`, the native input
size and classes of timm's pretrained config (`input_size`, `num_classes`); the model is
`timm.create_model(name, pretrained=False, num_classes=k[, img_size=r])` -- nothing is downloaded (local weights:
`--checkpoint` or timm's `pretrained_cfg_overlay=dict(file=...)`, see docs/models.md). Parameter counts are
timm's own (the built model's parameters); the MACs "analytic" count is torch's FlopCounterMode on the model built
on the meta device (no allocation, nothing computed): timm has no formula per architecture
(`computation.counts_note`). Torch only (timm is a PyTorch library): other backends are refused at parse time, naming the torch backend.

Registering imports nothing of timm or torch; resolving a `timm:` name imports timm (and torch).
"""

from __future__ import annotations

from vitbench.models.families import (
    AttentionMaps,
    Catalogue,
    FamilyBuild,
    FamilyComputation,
    FamilyName,
    FamilyPlugin,
    FamilyWeights,
    PlotStyle,
    register_family,
)
from vitbench.models.flavours import FLAVOUR_TIMM, Origin

TIMM = FamilyName("timm")
PREFIX = "timm:"  # how a model name says it is one of timm's architectures
_TORCH = "vitbench.models.families.timm.torch"


def _lazy(function: str):
    """A function of the torch module, imported by name when called: registering stays free of torch and timm,
    and the torch module may import this one (no import cycle)."""

    def call(*args):
        import importlib

        return getattr(importlib.import_module(_TORCH), function)(*args)

    call.__name__ = function
    return call


def resolve(name: str):
    """The spec of `timm:<name>`; None for a name without the prefix (not this family's)."""
    if not name[: len(PREFIX)].lower() == PREFIX:
        return None
    return _lazy("spec_of")(name[len(PREFIX):].strip().lower())  # timm names are lower case


def catalogue(pattern: str) -> list[str]:
    return [PREFIX + n for n in _lazy("names")(pattern)]


TIMM_PLUGIN = FamilyPlugin(
    name=TIMM, description="any timm architecture by name: timm:<name> (timm.create_model, pretrained=False)",
    rows=(), fields=("timm_id", "resolution", "num_classes"), override_keys=(),
    build=FamilyBuild(torch=f"{_TORCH}:build", backends=("torch",)),
    computation=FamilyComputation(
        counts=_lazy("counts"), param_table=_lazy("param_table"), stride=_lazy("stride"),
        feature_dim=_lazy("feature_dim"), describe=lambda spec: f"timm {spec.timm_id} (timm.create_model)",
        counts_note="params: timm's model (sum of its parameters); MACs: torch FlopCounterMode on the model built "
                    "on the meta device (matmul/conv/attention only; no formula per timm architecture)"),
    model_attention=_lazy("model_attention"),  # per model: a ViT's tokens, a ResNet's none
    # timm's attention, hooked as for ViT (whole-image token maps or none: model_attention says, per model)
    attention_maps=AttentionMaps(torch="vitbench.models.families.vit.torch:attention_maps"),
    plot_style=PlotStyle("X", "Oranges", "timm"), catalogue=Catalogue(resolve=resolve, names=catalogue),
    # its builder reads no flavour (timm's own conventions); a ViT-like model's resolution from its position table
    weights=FamilyWeights(origins={Origin.TIMM.value: FLAVOUR_TIMM}, resolution_of=_lazy("resolution_of"),
                          head_prefixes=_lazy("head_prefixes")),
)

register_family(TIMM_PLUGIN)
