"""The architecture parts a family's `ModelSpec.arch` is made of: a transformer (`TransformerArch`), a ResNet
(`ResNetArch`) and both (`HybridArch`, a ResNet root under a transformer). A family declares which it uses
(FamilyPlugin.arch); a family with fields of its own declares its own frozen dataclass (axial_resnet's
`AxialResNetArch`, an outside family's). Shared code reads only a spec's common core; the family's code reads
`spec.arch`.

`FLAT_DEFAULTS` is the flat view's filler: before issue 52 split it, ModelSpec held every field of both parts, so a
ResNet's spec carried the transformer's defaults and the other way round. `ModelSpec.flat()` (what the caches hash
and checkpoint metadata stores) keeps that view: these defaults, then the spec's own arch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from vitbench.models.overrides import Classifier, Posemb, PosembAt

# ResNet output channels per stage at width factor 1 (bottleneck expansion 4), He et al. 2016.
RESNET_CHANNELS = (256, 512, 1024, 2048)


@dataclass(frozen=True)
class TransformerArch:
    """A ViT encoder (vit, hybrid, axial_vit read it; each family's `fields` says which fields)."""

    patch: int = 0  # patch size in pixels (vit) or in feature-map cells (hybrid: always 1)
    width: int = 0  # hidden size D
    depth: int = 0  # number of encoder blocks L
    mlp_dim: int = 0
    heads: int = 0
    ln_eps: float = 1e-6  # LayerNorm epsilon (vit_jax and timm both use 1e-6)
    distilled: bool = False  # DeiT: a distillation token beside the class token, its own head (Touvron et al.)
    # head and position embeddings (ViT appendix D.3, D.4); the defaults are every row's
    classifier: Classifier = "token"  # 'token': class token -> head; 'gap': mean of the patch tokens -> head
    rep_size: int = 0  # width of the tanh pre-logits layer before the head (0: none; the rows have none)
    posemb: Posemb = "learned"  # learned 1-D (the paper's default), none, learned_2d, sincos2d, relative
    posemb_at: PosembAt = "input"  # added once after the stem, or at the start of every block (own/shared table)

    @property
    def num_prefix_tokens(self) -> int:
        return prefix_tokens(self.classifier, self.distilled)


@dataclass(frozen=True)
class ResNetArch:
    """A bottleneck ResNet (bit, hybrid's root, axial_resnet)."""

    layers: tuple[int, ...] = ()  # blocks per stage
    width_factor: int = 1
    channels: tuple[int, ...] = RESNET_CHANNELS  # stage output channels at width factor 1
    stem_chs: int = 64  # root conv channels at width factor 1
    gn_groups: int = 32

    @property
    def stage_channels(self) -> tuple[int, ...]:
        return tuple(c * self.width_factor for c in self.channels[: len(self.layers)])

    @property
    def root_channels(self) -> int:
        return self.stem_chs * self.width_factor


@dataclass(frozen=True)
class HybridArch(ResNetArch, TransformerArch):
    """A ResNet root whose feature map a transformer reads (hybrid): every field of both parts. Also the arch of a
    spec made from the flat fields of before issue 52 (ModelSpec's compatibility path)."""


def prefix_tokens(classifier: str, distilled: bool) -> int:
    """Tokens before the patches: the class token, and the distillation token of a distilled model (none with
    classifier 'gap')."""
    if classifier == "gap":
        return 0
    return 2 if distilled else 1


# The flat view's fields and defaults (ModelSpec.flat), in the order ModelSpec declared them before issue 52
FLAT_DEFAULTS: dict = {f.name: f.default for part in (TransformerArch, ResNetArch) for f in fields(part)}


def arch_value(spec, name: str):
    """Field `name` of `spec.arch`, or its flat default (what the spec held before issue 52 split it) when its arch
    has no such field: for the shared code that still reads a transformer field of any spec (inspection, fine-tuning's
    head; a spec without an arch, timm's, reads the defaults)."""
    return getattr(spec.arch, name, FLAT_DEFAULTS[name])
