"""BiT ResNets (Kolesnikov et al. 2020, "Big Transfer") as one family plug-in: family `bit`.

ResNet v2 (He et al. 2016): pre-activation bottlenecks, GroupNorm (32 groups), weight-standardised convs. Depths
from He et al. 2016 (R50 3-4-6-3, R101 3-4-23-3, R152 3-8-36-3, R200 3-24-36-3), width factors of BiT. The pieces
a hybrid's ResNet root reuses (`resnet_counts`, `check_stages`) are public here.
"""

from __future__ import annotations

from vitbench.errors import ConfigError
from vitbench.models.analytic import Counts
from vitbench.models.arch import ResNetArch
from vitbench.models.families import (
    FamilyBuild,
    FamilyComputation,
    FamilyName,
    FamilyPlugin,
    FamilyWeights,
    PlotStyle,
    register_family,
)
from vitbench.models.flavours import FLAVOUR_BIT, FLAVOUR_TIMM, Origin
from vitbench.models.overrides import RESNET_KEYS
from vitbench.models.param_table import _conv, _conv1x1_dense, _copy, _norm
from vitbench.models.specs import RESNET_DEPTHS, ModelSpec

BIT = FamilyName("bit")
# The fields a ResNet reads (bit; a hybrid adds its transformer's)
RESNET_FIELDS = ("layers", "width_factor", "channels", "stem_chs", "gn_groups", "flavour")


def _bit(depth: int, wf: int) -> ModelSpec:
    return ModelSpec(
        name=f"R{depth}x{wf}", family=BIT, timm_id=f"resnetv2_{depth}x{wf}_bit",
        aliases=(f"BiT-R{depth}x{wf}", f"BiT-M-R{depth}x{wf}", f"ResNet{depth}x{wf}"),
        arch=ResNetArch(layers=RESNET_DEPTHS[depth], width_factor=wf),
    )


def _tiny_bit(name: str, layers: tuple[int, ...], wf: int = 1) -> ModelSpec:
    return ModelSpec(
        name=name, family=BIT, tiny=True, resolution=32, num_classes=10,
        arch=ResNetArch(layers=layers, width_factor=wf, channels=(32, 64, 128, 256), stem_chs=16, gn_groups=8),
    )


ROWS = (
    _bit(50, 1), _bit(50, 2), _bit(50, 3), _bit(101, 1), _bit(101, 3),
    _bit(152, 1), _bit(152, 2), _bit(152, 4), _bit(200, 3),
    # Tiny variants for tests and CPU studies (32 px, 10 classes). Not from the paper.
    _tiny_bit("R-Nano", layers=(1, 1, 1, 1)),
    _tiny_bit("R-Micro", layers=(2, 2, 2, 2)),
)


def resnet_stride(spec: ModelSpec) -> int:
    """Root 4 (7x7/2 conv, 3x3/2 max-pool) x 2 per later stage."""
    return 4 * 2 ** (len(spec.arch.layers) - 1)


def resnet_counts(spec: ModelSpec, resolution: int, *, preact: bool) -> tuple[Counts, int]:
    """Bottleneck ResNet (v2 pre-activation for BiT, v1.5 for hybrid stems). Returns counts and final H."""
    c0 = spec.arch.root_channels
    h = resolution // 2  # 7x7/2 root conv
    params = 49 * 3 * c0 + (0 if preact else 2 * c0)  # root GN only in the non-preact (vit_jax) root
    macs = h * h * 49 * 3 * c0
    h //= 2  # 3x3/2 max-pool
    cin = c0
    for s, (blocks, cout) in enumerate(zip(spec.arch.layers, spec.arch.stage_channels)):
        mid = cout // 4
        for b in range(blocks):
            stride = 2 if (b == 0 and s > 0) else 1
            hout = h // stride
            params += cin * mid + 9 * mid * mid + mid * cout  # conv1 1x1, conv2 3x3, conv3 1x1 (no bias)
            params += 2 * (cin if preact else mid) + 2 * mid + 2 * (mid if preact else cout)  # three GNs
            macs += h * h * cin * mid + hout * hout * (9 * mid * mid + mid * cout)
            if b == 0:  # projection shortcut (1x1, stride); non-preact adds a GN after it
                params += cin * cout + (0 if preact else 2 * cout)
                macs += hout * hout * cin * cout
            cin, h = cout, hout
    if preact:
        params += 2 * cin  # final GN before the head
    return Counts(params, macs), h


def counts(spec: ModelSpec, resolution: int, num_classes: int) -> Counts:
    body, _ = resnet_counts(spec, resolution, preact=True)
    c = spec.arch.stage_channels[-1]
    return Counts(body.params + c * num_classes + num_classes, body.macs + c * num_classes)


def table(spec: ModelSpec, resolution: int) -> list:
    """timm resnetv2 <-> big_transfer names; the head is a 1x1 conv after the pool in timm, a dense in BiT."""
    out = [_conv("stem.conv.weight", "root_block/conv_root/kernel")]
    for s, blocks in enumerate(spec.arch.layers):
        for j in range(blocks):
            t, f = f"stages.{s}.blocks.{j}", f"block{s + 1}/unit{j + 1:02d}"
            for n in (1, 2, 3):
                out += _norm(f"{t}.norm{n}", f"{f}/gn{n}") + [_conv(f"{t}.conv{n}.weight", f"{f}/conv{n}/kernel")]
            if j == 0:
                out += [_conv(f"{t}.downsample.conv.weight", f"{f}/conv_proj/kernel")]
    out += _norm("norm", "norm-pre-head")
    out += [_conv1x1_dense("head.fc.weight", "head/kernel"), _copy("head.fc.bias", "head/bias")]
    return out


def check_stages(spec: ModelSpec, diff: dict) -> None:
    if len(spec.arch.layers) > len(spec.arch.channels):
        raise ConfigError(f"{spec.name}: blocks has {len(spec.arch.layers)} stages; allowed: 1 to "
                          f"{len(spec.arch.channels)}")


def describe_resnet(spec: ModelSpec) -> str:
    return f"{'x'.join(map(str, spec.arch.layers))} w={spec.arch.width_factor}"


# BiT's origins: timm's code, big_transfer and big_vision's bit_paper.py (vitbench.models.flavours)
ORIGINS = {Origin.TIMM.value: FLAVOUR_TIMM, Origin.BIG_VISION.value: FLAVOUR_BIT,
           Origin.BIG_TRANSFER.value: FLAVOUR_BIT}

PLUGIN = register_family(FamilyPlugin(
    name=BIT, description="BiT ResNet v2 (Kolesnikov et al. 2020): pre-activation bottlenecks, GroupNorm, "
    "weight-standardised convolutions", rows=ROWS, fields=RESNET_FIELDS, override_keys=RESNET_KEYS,
    validate=check_stages,
    build=FamilyBuild(torch="vitbench.models.families.bit.torch:build",
                      flax="vitbench.models.families.bit.flax:build",
                      torch_init="vitbench.models.families.bit.torch:zero_head"),
    computation=FamilyComputation(counts=counts, param_table=table, stride=resnet_stride,
                                  feature_dim=lambda s: s.arch.stage_channels[-1],
                                  describe=lambda s: f"stages {describe_resnet(s)}"),
    attention=False, weights=FamilyWeights(origins=ORIGINS, npz_origin=Origin.BIG_TRANSFER.value),
    plot_style=PlotStyle("s", "Oranges", "BiT ResNet"), arch=ResNetArch,
))
