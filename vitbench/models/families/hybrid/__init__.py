"""R50+ViT hybrids (ViT paper Section 3.1, Appendix D.4) as one family plug-in: family `hybrid`.

The patch embedding is applied to a ResNet feature map with 1x1 patches. R50+ViT-B/32 keeps all four ResNet-50
stages (output stride 32); R50+ViT-B/16 removes stage 4 and puts its blocks into stage 3 (stages 3-4-9, output
stride 16): "the number at the end of a hybrid's name is the total downsampling ratio, not a patch size". The
ResNet root is vit_jax's models_resnet.py (v1 bottlenecks, 'same' root, GroupNorm after every conv); the
transformer is the vit family's.
"""

from __future__ import annotations

from vitbench.models.analytic import Counts
from vitbench.models.arch import HybridArch
from vitbench.models.families import (
    FamilyBuild,
    FamilyComputation,
    FamilyName,
    FamilyPlugin,
    PlotStyle,
    register_family,
)
from vitbench.models.families.bit import RESNET_FIELDS, check_stages, describe_resnet, resnet_counts, resnet_stride
from vitbench.models.families.vit import (
    TOKEN_MAPS,
    TRANSFORMER_FIELDS,
    VIT_SIZES,
    WEIGHTS,
    head_and_position,
    transformer_counts,
    transformer_table,
    validate_transformer,
)
from vitbench.models.flavours import HYBRID_DEFAULT
from vitbench.models.overrides import RESNET_KEYS, TRANSFORMER_KEYS
from vitbench.models.param_table import _conv, _norm
from vitbench.models.specs import ModelSpec

HYBRID = FamilyName("hybrid")


def _hybrid(size: str, total_stride: int) -> ModelSpec:
    depth, width, mlp, heads, word = VIT_SIZES[size]
    # /32 keeps all four R50 stages; /16 drops stage 4 and moves its blocks into stage 3 (paper D.4).
    layers = (3, 4, 6, 3) if total_stride == 32 else (3, 4, 9)
    return ModelSpec(
        name=f"R50+ViT-{size}/{total_stride}", family=HYBRID,
        timm_id=f"vit_{word}_r50_s{total_stride}_224", aliases=(f"R50+ViT-{size}_{total_stride}",),
        arch=HybridArch(patch=1, width=width, depth=depth, mlp_dim=mlp, heads=heads, layers=layers),
        flavour=HYBRID_DEFAULT,
    )


ROWS = (
    _hybrid("B", 32), _hybrid("B", 16), _hybrid("L", 32), _hybrid("L", 16),
    # A tiny variant for tests and CPU studies (32 px, 10 classes). Not from the paper.
    ModelSpec(
        name="R-Nano+ViT-Micro/8", family=HYBRID, tiny=True, resolution=32, num_classes=10,
        arch=HybridArch(patch=1, width=64, depth=2, mlp_dim=256, heads=4, layers=(1, 1),
                        channels=(32, 64, 128, 256), stem_chs=16, gn_groups=8), flavour=HYBRID_DEFAULT,
    ),
)


def stride(spec: ModelSpec) -> int:
    return resnet_stride(spec) * spec.arch.patch


def counts(spec: ModelSpec, resolution: int, num_classes: int) -> Counts:
    """The ResNet root (v1, no pre-activation), a 1x1 "patch" projection, then the transformer."""
    body, _ = resnet_counts(spec, resolution, preact=False)
    c, d, n = spec.arch.stage_channels[-1], spec.arch.width, spec.tokens(resolution)
    return transformer_counts(spec, resolution, num_classes, Counts(body.params + c * d + d, body.macs + n * c * d))


def table(spec: ModelSpec, resolution: int) -> list:
    """timm's HybridEmbed backbone <-> vit_jax's root names, then the transformer's."""
    b = "patch_embed.backbone"
    out = [_conv(f"{b}.stem.conv.weight", "conv_root/kernel")] + _norm(f"{b}.stem.norm", "gn_root")
    for s, blocks in enumerate(spec.arch.layers):
        for j in range(blocks):
            t, f = f"{b}.stages.{s}.blocks.{j}", f"block{s + 1}/unit{j + 1}"
            for n in (1, 2, 3):
                out += [_conv(f"{t}.conv{n}.weight", f"{f}/conv{n}/kernel")] + _norm(f"{t}.norm{n}", f"{f}/gn{n}")
            if j == 0:
                out += [_conv(f"{t}.downsample.conv.weight", f"{f}/conv_proj/kernel")]
                out += _norm(f"{t}.downsample.norm", f"{f}/gn_proj")
    return out + transformer_table(spec, "patch_embed.proj", resolution)


def validate(spec: ModelSpec, diff: dict) -> None:
    validate_transformer(spec, diff)
    check_stages(spec, diff)


def describe(spec: ModelSpec) -> str:
    head, pos = head_and_position(spec)
    a = spec.arch
    return f"R[{describe_resnet(spec)}] + L={a.depth} D={a.width} H={a.heads} /{spec.stride}{head}{pos}"


PLUGIN = register_family(FamilyPlugin(
    name=HYBRID, description="R50+ViT hybrids (ViT paper 3.1, D.4): a ResNet root, 1x1 patches of its feature "
    "map, the ViT encoder", rows=ROWS, fields=tuple(dict.fromkeys(TRANSFORMER_FIELDS + RESNET_FIELDS)),
    override_keys=TRANSFORMER_KEYS + RESNET_KEYS, validate=validate,
    build=FamilyBuild(torch="vitbench.models.families.hybrid.torch:build",
                      flax="vitbench.models.families.hybrid.flax:build", representation_size=True,
                      torch_init="vitbench.models.families.vit.torch:flax_init"),  # its transformer's
    computation=FamilyComputation(counts=counts, param_table=table, stride=stride,
                                  feature_dim=lambda s: s.arch.width,
                                  describe=describe),
    attention_maps=TOKEN_MAPS, weights=WEIGHTS, plot_style=PlotStyle("^", "Greens", "Hybrid"), arch=HybridArch,
))
