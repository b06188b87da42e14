"""Backend-free variant table: one row per model, from which both PyTorch and Flax build.

Sources: ViT sizes from Table 1 of Dosovitskiy et al. (2021), Ti/S from DeiT (Touvron et al. 2021);
BiT depths from He et al. (2016) / Kolesnikov et al. (2020); hybrid stage layouts from the ViT paper,
Section 3.1 / Appendix D.4 ("R50+ViT-B/16 removes stage 4 and puts its blocks into stage 3").
"""

from __future__ import annotations

import difflib
import re
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

from vitbench.errors import ConfigError, UnknownModelError

Family = Literal["vit", "bit", "hybrid"]
FAMILIES: tuple[str, ...] = ("vit", "bit", "hybrid")

# ResNet output channels per stage at width factor 1 (bottleneck expansion 4), He et al. 2016.
RESNET_CHANNELS = (256, 512, 1024, 2048)
RESNET_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3), 200: (3, 24, 36, 3)}


@dataclass(frozen=True)
class ModelSpec:
    """One architecture. ViT fields apply to `vit` and `hybrid`; ResNet fields to `bit` and `hybrid`."""

    name: str
    family: Family
    aliases: tuple[str, ...] = ()
    timm_id: str | None = None  # the timm-style name (also accepted as an alias)
    resolution: int = 224  # native/pre-training resolution
    num_classes: int = 1000
    tiny: bool = False  # a test/CPU-study variant, not from the paper
    # --- transformer (vit, hybrid) ---
    patch: int = 0  # patch size in pixels (vit) or in feature-map cells (hybrid: always 1)
    width: int = 0  # hidden size D
    depth: int = 0  # number of encoder blocks L
    mlp_dim: int = 0
    heads: int = 0
    ln_eps: float = 1e-6  # LayerNorm epsilon (vit_jax and timm both use 1e-6)
    # --- ResNet (bit, hybrid) ---
    layers: tuple[int, ...] = ()  # blocks per stage
    width_factor: int = 1
    channels: tuple[int, ...] = RESNET_CHANNELS  # stage output channels at width factor 1
    stem_chs: int = 64  # root conv channels at width factor 1
    gn_groups: int = 32
    gn_eps: float = 1e-5
    std_conv_eps: float = 1e-8  # weight-standardisation epsilon
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    # ---- derived -----------------------------------------------------------------------------
    @property
    def stride(self) -> int:
        """Total downsampling from pixels to tokens (vit: the patch; ResNets: root 4 x 2 per later stage)."""
        if self.family == "vit":
            return self.patch
        resnet_stride = 4 * 2 ** (len(self.layers) - 1)
        return resnet_stride * (self.patch if self.family == "hybrid" else 1)

    @property
    def stage_channels(self) -> tuple[int, ...]:
        return tuple(c * self.width_factor for c in self.channels[: len(self.layers)])

    @property
    def root_channels(self) -> int:
        return self.stem_chs * self.width_factor

    @property
    def feature_dim(self) -> int:
        """Size of the representation fed to the head (pre-logits)."""
        return self.width if self.family in ("vit", "hybrid") else self.stage_channels[-1]

    def tokens(self, resolution: int) -> int:
        """Sequence length N (patches, without the class token) at `resolution`."""
        return (resolution // self.stride) ** 2

    def check_resolution(self, resolution: int) -> None:
        if resolution <= 0 or resolution % self.stride:
            ok = [r for r in range(self.stride, 4 * self.resolution + 1, self.stride)][:6]
            raise ConfigError(
                f"resolution {resolution} is not divisible by {self.name}'s total stride {self.stride}; "
                f"use a multiple of {self.stride}, e.g. {', '.join(map(str, ok))}, ..."
            )

    def describe(self) -> str:
        if self.family == "vit":
            return f"L={self.depth} D={self.width} MLP={self.mlp_dim} H={self.heads} P={self.patch}"
        resnet = f"{'x'.join(map(str, self.layers))} w={self.width_factor}"
        if self.family == "bit":
            return f"stages {resnet}"
        return f"R[{resnet}] + L={self.depth} D={self.width} H={self.heads} /{self.stride}"

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra")
        d["stride"] = self.stride
        return d

    def with_classes(self, num_classes: int) -> ModelSpec:
        return replace(self, num_classes=num_classes)


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------
_VIT_SIZES = {  # name: (layers, D, MLP, heads, timm size word) -- ViT paper Table 1, DeiT for Ti/S
    "Ti": (12, 192, 768, 3, "tiny"),
    "S": (12, 384, 1536, 6, "small"),
    "B": (12, 768, 3072, 12, "base"),
    "L": (24, 1024, 4096, 16, "large"),
    "H": (32, 1280, 5120, 16, "huge"),
}


def _vit(size: str, patch: int) -> ModelSpec:
    depth, width, mlp, heads, word = _VIT_SIZES[size]
    timm_id = f"vit_{word}_patch{patch}_224"
    return ModelSpec(
        name=f"ViT-{size}/{patch}", family="vit", timm_id=timm_id, aliases=(f"ViT-{size}_{patch}",),
        patch=patch, width=width, depth=depth, mlp_dim=mlp, heads=heads,
    )


def _bit(depth: int, wf: int) -> ModelSpec:
    return ModelSpec(
        name=f"R{depth}x{wf}", family="bit", timm_id=f"resnetv2_{depth}x{wf}_bit",
        aliases=(f"BiT-R{depth}x{wf}", f"BiT-M-R{depth}x{wf}", f"ResNet{depth}x{wf}"),
        layers=RESNET_DEPTHS[depth], width_factor=wf,
        gn_eps=1e-5, std_conv_eps=1e-8,  # timm's BiT (resnetv2_*_bit) conventions
    )


def _hybrid(size: str, total_stride: int) -> ModelSpec:
    depth, width, mlp, heads, word = _VIT_SIZES[size]
    # /32 keeps all four R50 stages; /16 drops stage 4 and moves its blocks into stage 3 (paper D.4).
    layers = (3, 4, 6, 3) if total_stride == 32 else (3, 4, 9)
    return ModelSpec(
        name=f"R50+ViT-{size}/{total_stride}", family="hybrid",
        timm_id=f"vit_{word}_r50_s{total_stride}_224", aliases=(f"R50+ViT-{size}_{total_stride}",),
        patch=1, width=width, depth=depth, mlp_dim=mlp, heads=heads, layers=layers,
        gn_eps=1e-6, std_conv_eps=1e-5,  # vit_jax models_resnet.py conventions
    )


def _tiny_vit(name: str, width: int, depth: int, heads: int, patch: int = 4) -> ModelSpec:
    return ModelSpec(
        name=name, family="vit", tiny=True, resolution=32, num_classes=10, patch=patch,
        width=width, depth=depth, mlp_dim=4 * width, heads=heads,
    )


def _tiny_bit(name: str, layers: tuple[int, ...], wf: int = 1) -> ModelSpec:
    return ModelSpec(
        name=name, family="bit", tiny=True, resolution=32, num_classes=10, layers=layers,
        width_factor=wf, channels=(32, 64, 128, 256), stem_chs=16, gn_groups=8,
    )


_TABLE: list[ModelSpec] = [
    _vit("Ti", 16), _vit("S", 16), _vit("B", 32), _vit("B", 16), _vit("B", 8),
    _vit("L", 32), _vit("L", 16), _vit("H", 14),
    _bit(50, 1), _bit(50, 2), _bit(50, 3), _bit(101, 1), _bit(101, 3),
    _bit(152, 1), _bit(152, 2), _bit(152, 4), _bit(200, 3),
    _hybrid("B", 32), _hybrid("B", 16), _hybrid("L", 32), _hybrid("L", 16),
    # Tiny variants for tests and CPU studies (32 px, 10 classes). Not from the paper.
    _tiny_vit("ViT-Nano/4", width=32, depth=2, heads=2),
    _tiny_vit("ViT-Micro/4", width=64, depth=4, heads=4),
    _tiny_vit("ViT-Mini/4", width=128, depth=6, heads=4),
    _tiny_bit("R-Nano", layers=(1, 1, 1, 1)),
    _tiny_bit("R-Micro", layers=(2, 2, 2, 2)),
    ModelSpec(
        name="R-Nano+ViT-Micro/8", family="hybrid", tiny=True, resolution=32, num_classes=10,
        patch=1, width=64, depth=2, mlp_dim=256, heads=4, layers=(1, 1),
        channels=(32, 64, 128, 256), stem_chs=16, gn_groups=8, gn_eps=1e-6, std_conv_eps=1e-5,
    ),
]


def _norm(name: str) -> str:
    """Forgiving key: case-, separator- and suffix-insensitive ('vit-b/16' == 'ViT-B_16')."""
    s = name.strip().lower()
    s = re.sub(r"\.[a-z0-9_]+$", "", s)  # timm pretrained tag, e.g. '.augreg_in21k'
    return re.sub(r"[^a-z0-9+]", "", s)


_INDEX: dict[str, ModelSpec] = {}
for _spec in _TABLE:
    for _n in (_spec.name, _spec.timm_id, *_spec.aliases):
        if _n:
            key = _norm(_n)
            assert _INDEX.get(key, _spec) is _spec, f"model key {key} names two variants"
            _INDEX[key] = _spec


def all_specs(family: str | None = None, include_tiny: bool = True) -> list[ModelSpec]:
    if family is not None and family not in FAMILIES:
        raise UnknownModelError(f"unknown family {family!r}; allowed: {', '.join(FAMILIES)}")
    return [s for s in _TABLE if (family is None or s.family == family) and (include_tiny or not s.tiny)]


def close_matches(name: str, n: int = 5) -> list[str]:
    names = {s.name: s.name for s in _TABLE}
    keys = {_norm(k): s.name for s in _TABLE for k in (s.name, s.timm_id, *s.aliases) if k}
    hits = difflib.get_close_matches(_norm(name), list(keys), n=n * 3, cutoff=0.5)
    out: list[str] = []
    for h in hits:
        if keys[h] not in out:
            out.append(keys[h])
    return out[:n] or list(names)[:n]


def get_spec(name: str | ModelSpec, num_classes: int | None = None) -> ModelSpec:
    """Look up a variant by paper name, timm id or alias; unknown names list close matches."""
    if isinstance(name, ModelSpec):
        spec = name
    else:
        spec = _INDEX.get(_norm(name))
        if spec is None:
            raise UnknownModelError(
                f"unknown model {name!r}. Close matches: {', '.join(close_matches(name))}. "
                "See `vitbench models` for the full list."
            )
    return spec if num_classes is None else spec.with_classes(num_classes)
