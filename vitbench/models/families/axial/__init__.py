"""Axial attention families (ViT paper Appendix D.6, Figure 13): Axial-ViT and Axial-ResNet, as one plug-in each.

Axial-ViT (`axial_vit`): ViT's patch embedding, the patch grid kept 2-D (a learned (h, w, D) position table), each
transformer block replaced by two axial blocks -- row self-attention + MLP, then column self-attention + MLP
(pre-LN, residual after each) -- final LayerNorm, global average pool, linear head. No class token: a class token
has no place in a row or a column (the paper's Axial-ViT has no extra token either; its head follows big_vision's
GAP models).

Axial-ResNet (`axial_resnet`), after Wang et al. 2020, "Axial-DeepLab" (ECCV), Section 3.2 / 4 ("Axial-ResNet"):
ResNet-50's bottleneck blocks with the 3x3 convolution replaced by two multi-head axial-attention layers, height
axis then width axis, global along each axis (span = the axis), stride applied after the attention layers. The
variant built here (stated in every row's description):
- relative positions: the query-dependent relative logits of Axial-DeepLab's Eq. 2 (q_o^T r^q_{p-o}, one learned
  table of 2L-1 offsets x head dim per layer, shared by its heads) -- the key (r^k) and value (r^v) terms of the
  full position-sensitive form are left out (Axial-DeepLab Table 9 ablates them; the q term is the Shaw et al.
  2018 / Ramachandran et al. 2019 form);
- no output projection after an axial layer (the bottleneck's 1x1 convs mix channels), qkv without bias;
- stride: 2x2 average pooling after the width layer (Ramachandran et al. 2019, "Stand-Alone Self-Attention":
  "spatial downsampling ... 2x2 average pooling with stride 2"; Axial-DeepLab: "striding after the attention");
- GroupNorm (as this project's BiT ResNets) instead of BatchNorm, plain (not weight-standardised) convolutions,
  post-activation v1 blocks with projection shortcuts, the ResNet 7x7/2 conv + 3x3/2 max-pool stem, GAP + linear.
"""

from __future__ import annotations

from dataclasses import dataclass

from vitbench.errors import ConfigError
from vitbench.models.analytic import Counts
from vitbench.models.arch import ResNetArch, TransformerArch
from vitbench.models.families import (
    AttentionMaps,
    Axis,
    AxisLayer,
    FamilyBuild,
    FamilyComputation,
    FamilyName,
    FamilyPlugin,
    FamilyWeights,
    PlotStyle,
    register_family,
)
from vitbench.models.overrides import Classifier
from vitbench.models.param_table import _conv, _copy, _linear
from vitbench.models.param_table import _norm as _norm_entry
from vitbench.models.specs import RESNET_DEPTHS, ModelSpec

AXIAL_VIT = FamilyName("axial_vit")
AXIAL_RESNET = FamilyName("axial_resnet")
_TINY = dict(tiny=True, resolution=32, num_classes=10)


# ---- Axial-ViT -------------------------------------------------------------------------------------------------
def _axial_vit(size: str, patch: int, depth: int, width: int, mlp: int, heads: int, **kw) -> ModelSpec:
    return ModelSpec(name=f"Axial-ViT-{size}/{patch}", family=AXIAL_VIT, aliases=(f"Axial-ViT-{size}_{patch}",),
                     arch=TransformerArch(patch=patch, width=width, depth=depth, mlp_dim=mlp, heads=heads,
                                          classifier="gap"), **kw)


VIT_ROWS = (
    _axial_vit("B", 32, 12, 768, 3072, 12),  # ViT-B sizes (Table 1), paper D.6
    _axial_vit("B", 16, 12, 768, 3072, 12),
    _axial_vit("Nano", 4, 2, 32, 128, 2, **_TINY),  # ViT-Nano/4's twin (not from the paper)
    _axial_vit("Micro", 4, 4, 64, 256, 4, **_TINY),  # ViT-Micro/4's twin
)


def grid(spec: ModelSpec, resolution: int) -> int:
    """Patches per side."""
    return resolution // spec.arch.patch


def vit_counts(spec: ModelSpec, resolution: int, num_classes: int) -> Counts:
    """Patch embedding, 2 axial blocks per layer (row, column: each attention + MLP), final LN, GAP head.
    Per axial block on T = g*g tokens in g sequences of g: qkv + proj 4TD^2, scores and weighted sum 2*T*g*D,
    MLP 2*T*D*M (ViT eq. 2-3 per axis; Ho et al. 2019 axial attention)."""
    d, m, g, p = spec.arch.width, spec.arch.mlp_dim, grid(spec, resolution), spec.arch.patch
    t = g * g
    block_params = (3 * d * d + 3 * d) + (d * d + d) + (d * m + m) + (m * d + d) + 4 * d
    block_macs = 4 * t * d * d + 2 * t * g * d + 2 * t * d * m
    params = ((p * p * 3 * d + d) + t * d + 2 * spec.arch.depth * block_params + 2 * d
              + (d * num_classes + num_classes))
    macs = t * p * p * 3 * d + 2 * spec.arch.depth * block_macs + d * num_classes
    return Counts(params, macs)


def vit_table(spec: ModelSpec, resolution: int) -> list:
    out = [_conv("patch_embed.proj.weight", "patch_embed/proj/kernel"),
           _copy("patch_embed.proj.bias", "patch_embed/proj/bias"), _copy("pos_embed", "pos_embed")]
    for k in range(2 * spec.arch.depth):
        t, f = f"blocks.{k}", f"blocks_{k}"
        out += _norm_entry(f"{t}.norm1", f"{f}/norm1") + _linear(f"{t}.attn.qkv", f"{f}/attn/qkv")
        out += _linear(f"{t}.attn.proj", f"{f}/attn/proj") + _norm_entry(f"{t}.norm2", f"{f}/norm2")
        out += _linear(f"{t}.mlp.fc1", f"{f}/mlp/fc1") + _linear(f"{t}.mlp.fc2", f"{f}/mlp/fc2")
    return out + _norm_entry("norm", "norm") + _linear("head", "head")


def _heads_divide(spec: ModelSpec, channels: int, what: str) -> None:
    if channels % spec.arch.heads:
        ok = [h for h in range(1, min(channels, 64) + 1) if channels % h == 0]
        raise ConfigError(f"{spec.name}: heads={spec.arch.heads} must divide {what}={channels}; allowed heads: "
                          f"{', '.join(map(str, ok[:12]))}")


def vit_validate(spec: ModelSpec, diff: dict) -> None:
    _heads_divide(spec, spec.arch.width, "width")


def vit_axis_layers(spec: ModelSpec, resolution: int) -> tuple[AxisLayer, ...]:
    """Block k's row layer, then its column layer, on the g x g patch grid (tokens `patch` px apart)."""
    g = grid(spec, resolution)
    return tuple(AxisLayer(axis, g, spec.arch.patch, f"block {k + 1}") for k in range(spec.arch.depth)
                 for axis in (Axis.ROW, Axis.COLUMN))


def vit_resolution_of(spec: ModelSpec, shapes: dict) -> int | None:
    """The (1, h, w, D) position table (named `pos_embed` in both frameworks) gives the grid: h x patch px."""
    have = shapes.get("pos_embed")
    return have[1] * spec.arch.patch if have is not None and len(have) == 4 else None


def vit_describe(spec: ModelSpec) -> str:
    a = spec.arch
    return f"axial L={a.depth}x(row+col) D={a.width} MLP={a.mlp_dim} H={a.heads} P={a.patch} gap"


_FLAX = "vitbench.models.families.axial.flax"
_TORCH_MAPS = "vitbench.models.families.axial.torch:attention_maps"  # both axial families' torch reader

AXIAL_VIT_PLUGIN = FamilyPlugin(
    name=AXIAL_VIT, description="Axial-ViT (ViT paper D.6): row + column attention blocks on the 2-D patch grid",
    rows=VIT_ROWS, fields=("patch", "width", "depth", "mlp_dim", "heads", "ln_eps", "flavour", "classifier"),
    override_keys=("depth", "width", "mlp_dim", "heads", "patch"), validate=vit_validate,
    build=FamilyBuild(torch="vitbench.models.families.axial.torch:build_axial_vit",
                      flax="vitbench.models.families.axial.flax:build_axial_vit",
                      torch_init="vitbench.models.families.axial.torch:flax_defaults_init"),
    computation=FamilyComputation(counts=vit_counts, param_table=vit_table, stride=lambda s: s.arch.patch,
                                  feature_dim=lambda s: s.arch.width, describe=vit_describe),
    plot_style=PlotStyle("h", "Purples", "Axial-ViT"),
    attention_maps=AttentionMaps(axis_layers=vit_axis_layers, torch=_TORCH_MAPS,
                                 flax=f"{_FLAX}:vit_attention_maps"),
    weights=FamilyWeights(resolution_of=vit_resolution_of), arch=TransformerArch,
)


# ---- Axial-ResNet ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """One bottleneck: stage s, block j, channels in / mid / out, stride, input side h (attention length)."""

    s: int
    j: int
    cin: int
    mid: int
    cout: int
    stride: int
    h: int


def resnet_plan(spec: ModelSpec, resolution: int) -> tuple[list[Block], int]:
    """The bottlenecks in order and the side of the final feature map (root: /2 conv, /2 max-pool)."""
    h, cin, out = resolution // 4, spec.arch.root_channels, []
    for s, (blocks, cout) in enumerate(zip(spec.arch.layers, spec.arch.stage_channels)):
        for j in range(blocks):
            stride = 2 if (j == 0 and s > 0) else 1
            out.append(Block(s, j, cin, cout // 4, cout, stride, h))
            cin, h = cout, h // stride
    return out, h


@dataclass(frozen=True)
class AxialResNetArch(ResNetArch):
    """A ResNet whose 3x3 convolutions are axial attention layers: the ResNet's fields, the heads of each axial
    layer, and the head's pooling (always a global average: the flat view of before issue 52 recorded it)."""

    heads: int = 0
    classifier: Classifier = "gap"


def _axial_resnet(name: str, layers: tuple[int, ...], heads: int, arch: dict | None = None, **kw) -> ModelSpec:
    return ModelSpec(name=name, family=AXIAL_RESNET,
                     arch=AxialResNetArch(layers=layers, heads=heads, **(arch or {})), **kw)


RESNET_ROWS = (
    # ResNet-50 stages (He et al. 2016); 8 heads per axial layer (Axial-DeepLab Section 4)
    _axial_resnet("Axial-ResNet-50", RESNET_DEPTHS[50], 8, aliases=("Axial-R50", "AxialResNet50")),
    # R-Nano's twin (not from the paper)
    _axial_resnet("Axial-R-Nano", (1, 1, 1, 1), 2, dict(channels=(32, 64, 128, 256), stem_chs=16, gn_groups=8),
                  **_TINY),
)


def resnet_counts(spec: ModelSpec, resolution: int, num_classes: int) -> Counts:
    """Stem conv, per bottleneck: 1x1 convs, two axial layers (qkv 3*h^2*mid^2; per layer h sequences of h:
    scores, relative logits, weighted sum 3*h^3*mid), projection shortcut; GAP + linear head. GroupNorm: 2 per
    channel (not counted in MACs, with pooling and softmax)."""
    c0, h0 = spec.arch.root_channels, resolution // 2
    params, macs = 49 * 3 * c0 + 2 * c0, h0 * h0 * 49 * 3 * c0
    blocks, _ = resnet_plan(spec, resolution)
    for b in blocks:
        dh, ho = b.mid // spec.arch.heads, b.h // b.stride
        params += b.cin * b.mid + 2 * b.mid  # conv1 + GN
        params += 2 * (3 * b.mid * b.mid + (2 * b.h - 1) * dh) + 2 * b.mid  # two axial layers + GN
        params += b.mid * b.cout + 2 * b.cout  # conv3 + GN
        macs += b.h * b.h * b.cin * b.mid + 2 * (3 * b.h * b.h * b.mid * b.mid + 3 * b.h ** 3 * b.mid)
        macs += ho * ho * b.mid * b.cout
        if b.j == 0:
            params += b.cin * b.cout + 2 * b.cout
            macs += ho * ho * b.cin * b.cout
    c = spec.arch.stage_channels[-1]
    return Counts(params + c * num_classes + num_classes, macs + c * num_classes)


def resnet_table(spec: ModelSpec, resolution: int) -> list:
    out = [_conv("stem.conv.weight", "stem/conv/kernel"), *_norm_entry("stem.norm", "stem/norm")]
    for b in resnet_plan(spec, resolution)[0]:
        t, f = f"stages.{b.s}.blocks.{b.j}", f"stages_{b.s}/blocks_{b.j}"
        out += [_conv(f"{t}.conv1.weight", f"{f}/conv1/kernel"), *_norm_entry(f"{t}.norm1", f"{f}/norm1")]
        for a in ("attn_h", "attn_w"):
            out += [_dense_nobias(f"{t}.{a}.qkv.weight", f"{f}/{a}/qkv/kernel"),
                    _copy(f"{t}.{a}.rel_embedding", f"{f}/{a}/rel_embedding")]
        out += _norm_entry(f"{t}.norm2", f"{f}/norm2")
        out += [_conv(f"{t}.conv3.weight", f"{f}/conv3/kernel"), *_norm_entry(f"{t}.norm3", f"{f}/norm3")]
        if b.j == 0:
            out += [_conv(f"{t}.downsample.conv.weight", f"{f}/downsample/conv/kernel"),
                    *_norm_entry(f"{t}.downsample.norm", f"{f}/downsample/norm")]
    return out + _linear("head", "head")


def _dense_nobias(t: str, f: str):
    return _linear(t.removesuffix(".weight"), f.removesuffix("/kernel"))[0]


def resnet_validate(spec: ModelSpec, diff: dict) -> None:
    if len(spec.arch.layers) > len(spec.arch.channels):
        raise ConfigError(f"{spec.name}: blocks has {len(spec.arch.layers)} stages; allowed: 1 to "
                          f"{len(spec.arch.channels)}")
    for c in spec.arch.stage_channels:
        _heads_divide(spec, c // 4, "the bottleneck width")


def resnet_axis_layers(spec: ModelSpec, resolution: int) -> tuple[AxisLayer, ...]:
    """Per bottleneck its height (column) layer, then its width (row) layer, on the block's input map: side b.h,
    cells resolution / b.h px apart (4 px in stage 1, x2 per later stage; a block's stride comes after them)."""
    return tuple(AxisLayer(axis, b.h, resolution // b.h, f"stage {b.s + 1} block {b.j + 1}")
                 for b in resnet_plan(spec, resolution)[0] for axis in (Axis.COLUMN, Axis.ROW))


def resnet_resolution_of(spec: ModelSpec, shapes: dict) -> int | None:
    """The first block's relative table spans 2L - 1 offsets of its L = resolution / 4 side (either naming)."""
    have = shapes.get("stages.0.blocks.0.attn_h.rel_embedding",
                      shapes.get("stages_0/blocks_0/attn_h/rel_embedding"))
    return 4 * (have[0] + 1) // 2 if have is not None and len(have) == 2 else None


def resnet_describe(spec: ModelSpec) -> str:
    return (f"stages {'x'.join(map(str, spec.arch.layers))} w={spec.arch.width_factor}, 3x3 -> axial h+w "
            "attention "
            f"H={spec.arch.heads}, relative q-logits (Axial-DeepLab)")


AXIAL_RESNET_PLUGIN = FamilyPlugin(
    name=AXIAL_RESNET, description="Axial-ResNet (Axial-DeepLab, Wang et al. 2020): every 3x3 conv -> height + "
    "width axial attention with relative query logits", rows=RESNET_ROWS,
    fields=("layers", "width_factor", "channels", "stem_chs", "gn_groups", "heads", "flavour"),
    override_keys=("width_factor", "blocks", "heads"), validate=resnet_validate,
    build=FamilyBuild(torch="vitbench.models.families.axial.torch:build_axial_resnet",
                      flax="vitbench.models.families.axial.flax:build_axial_resnet",
                      torch_init="vitbench.models.families.axial.torch:flax_defaults_init"),
    computation=FamilyComputation(counts=resnet_counts, param_table=resnet_table,
                                  stride=lambda s: 4 * 2 ** (len(s.arch.layers) - 1),
                                  feature_dim=lambda s: s.arch.stage_channels[-1], describe=resnet_describe),
    plot_style=PlotStyle("P", "RdPu", "Axial-ResNet"),
    attention_maps=AttentionMaps(axis_layers=resnet_axis_layers, torch=_TORCH_MAPS,
                                 flax=f"{_FLAX}:resnet_attention_maps"),
    weights=FamilyWeights(resolution_of=resnet_resolution_of), arch=AxialResNetArch,
)

register_family(AXIAL_VIT_PLUGIN)
register_family(AXIAL_RESNET_PLUGIN)
