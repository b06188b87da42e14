"""Backend-free variant table: one row per model, from which both PyTorch and Flax build.

Sources: ViT sizes from Table 1 of Dosovitskiy et al. (2021), Ti/S from DeiT (Touvron et al. 2021);
BiT depths from He et al. (2016) / Kolesnikov et al. (2020); hybrid stage layouts from the ViT paper,
Section 3.1 / Appendix D.4 ("R50+ViT-B/16 removes stage 4 and puts its blocks into stage 3").
"""

from __future__ import annotations

import difflib
import operator
import re
from dataclasses import asdict, dataclass, replace
from typing import Literal

from vitbench.errors import ConfigError, UnknownModelError, shorten
from vitbench.models.flavours import DEFAULT, HYBRID_DEFAULT, Flavour, Origin, flavour_for
from vitbench.models.overrides import (
    FAMILY_KEYS,
    Classifier,
    Posemb,
    PosembAt,
    apply_overrides,
    overrides_of,
    parse_override_text,
    split_name,
)

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
    distilled: bool = False  # DeiT: a distillation token beside the class token, its own head (Touvron et al.)
    # --- ResNet (bit, hybrid) ---
    layers: tuple[int, ...] = ()  # blocks per stage
    width_factor: int = 1
    channels: tuple[int, ...] = RESNET_CHANNELS  # stage output channels at width factor 1
    stem_chs: int = 64  # root conv channels at width factor 1
    gn_groups: int = 32
    # --- numerical conventions (GELU form, weight standardisation, GroupNorm eps), set from a checkpoint's origin
    flavour: Flavour = DEFAULT
    # --- transformer head and position embeddings (ViT appendix D.3, D.4); the defaults are every row's
    classifier: Classifier = "token"  # 'token': class token -> head; 'gap': mean of the patch tokens -> head
    rep_size: int = 0  # width of the tanh pre-logits layer before the head (0: none; the rows have none)
    posemb: Posemb = "learned"  # learned 1-D (the paper's default), none, learned_2d, sincos2d, relative
    posemb_at: PosembAt = "input"  # added once after the stem, or at the start of every block (own/shared table)

    def __post_init__(self) -> None:
        if self.distilled and self.family == "bit":
            raise ValueError(f"{self.name}: a distillation token needs a transformer (family vit or hybrid)")

    # ---- derived -----------------------------------------------------------------------------
    @property
    def stride(self) -> int:
        """Total downsampling from pixels to tokens (vit: the patch; ResNets: root 4 x 2 per later stage)."""
        if self.family not in FAMILIES:
            return _plugin(self.family).stride(self)
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
        if self.family not in FAMILIES:
            return _plugin(self.family).feature_dim(self)
        return self.width if self.family in ("vit", "hybrid") else self.stage_channels[-1]

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token, and the distillation token of a distilled model
        (none with classifier 'gap')."""
        if self.classifier == "gap":
            return 0
        return 2 if self.distilled else 1

    # ---- overrides (vitbench.models.overrides) ----------------------------------------------------
    def base_row(self) -> ModelSpec:
        """The table's row this spec derives from (itself for a row)."""
        return _INDEX.get(_norm(split_name(self.name)[0]), self)

    @property
    def overrides(self) -> dict:
        """{override key: value} where this spec differs from its row, in canonical order ({} for a row)."""
        return overrides_of(self, self.base_row())

    @property
    def override_keys(self) -> tuple[str, ...]:
        """The override keys this spec's family accepts."""
        return FAMILY_KEYS[self.family]

    def with_overrides(self, **overrides) -> ModelSpec:
        """This spec with architecture fields replaced (values or strings), canonically renamed, validated."""
        return apply_overrides(self, overrides)

    def tokens(self, resolution: int) -> int:
        """Sequence length N (patches, without the class/distillation tokens) at `resolution`."""
        return (resolution // self.stride) ** 2

    def check_resolution(self, resolution: int) -> None:
        """ConfigError unless `resolution` (pixels) is a positive multiple of the total stride."""
        try:
            r = None if isinstance(resolution, bool) else operator.index(resolution)
        except TypeError:
            r = None
        if r is None or r <= 0 or r % self.stride:
            ok = [r for r in range(self.stride, 4 * self.resolution + 1, self.stride)][:6]
            raise ConfigError(
                f"resolution {str(resolution)[:20]} for {self.name} must be a positive multiple of {self.stride} "
                f"(its total stride), e.g. {', '.join(map(str, ok))}, ..."
            )

    def describe(self) -> str:
        dist = " +dist token" if self.distilled else ""
        head = "" if self.classifier == "token" else f" {self.classifier}"
        head += f" rep={self.rep_size}" if self.rep_size else ""
        if self.family not in FAMILIES:
            return _plugin(self.family).describe(self)
        pos = "" if (self.posemb, self.posemb_at) == ("learned", "input") else f" pos={self.posemb}@{self.posemb_at}"
        if self.family == "vit":
            return f"L={self.depth} D={self.width} MLP={self.mlp_dim} H={self.heads} P={self.patch}{dist}{head}{pos}"
        resnet = f"{'x'.join(map(str, self.layers))} w={self.width_factor}"
        if self.family == "bit":
            return f"stages {resnet}"
        return f"R[{resnet}] + L={self.depth} D={self.width} H={self.heads} /{self.stride}{dist}{head}{pos}"

    def to_dict(self) -> dict:
        """Every field (the flavour as plain strings and numbers) plus the derived stride: JSON-ready."""
        d = asdict(self)
        d["flavour"] = self.flavour.to_dict()
        d["stride"] = self.stride
        return d

    def with_classes(self, num_classes: int) -> ModelSpec:
        return replace(self, num_classes=num_classes)

    def with_origin(self, origin: Origin | str) -> ModelSpec:
        """This architecture in the conventions of checkpoints from `origin` (vit_jax, timm, ...)."""
        if self.family not in FAMILIES and "flavour" not in _plugin(self.family).fields:
            return self  # its builder reads no flavour: weights of any origin compute the same function
        return replace(self, flavour=flavour_for(origin, self.family))

    def with_flavour(self, flavour: Flavour) -> ModelSpec:
        return replace(self, flavour=flavour)


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------
_VIT_SIZES = {  # name: (layers, D, MLP, heads, timm size word) -- ViT paper Table 1, DeiT Table 1 for Ti/S
    "Ti": (12, 192, 768, 3, "tiny"),
    "S": (12, 384, 1536, 6, "small"),
    "B": (12, 768, 3072, 12, "base"),
    "L": (24, 1024, 4096, 16, "large"),
    "H": (32, 1280, 5120, 16, "huge"),
}
# DeiT-Ti/S/B are ViT-Ti/S/B at patch 16 (DeiT Table 1): the same rows, with DeiT's names as aliases
_DEIT_SIZES = ("Ti", "S", "B")


def _vit(size: str, patch: int) -> ModelSpec:
    depth, width, mlp, heads, word = _VIT_SIZES[size]
    deit = (f"DeiT-{size}/{patch}", f"DeiT-{size}", f"deit_{word}_patch{patch}_224") \
        if size in _DEIT_SIZES and patch == 16 else ()
    return ModelSpec(
        name=f"ViT-{size}/{patch}", family="vit", timm_id=f"vit_{word}_patch{patch}_224",
        aliases=(f"ViT-{size}_{patch}", *deit), patch=patch, width=width, depth=depth, mlp_dim=mlp, heads=heads,
    )


def _distilled(base: ModelSpec, size: str, timm_id: str | None = None) -> ModelSpec:
    """DeiT's distilled twin of `base` (Touvron et al. 2021, Section 4): + distillation token, pos-embed, head."""
    name = f"DeiT-{size}/{base.patch}-dist"
    return replace(base, name=name, timm_id=timm_id, distilled=True,
                   aliases=(f"ViT-{size}/{base.patch}-dist", f"DeiT-{size}-distilled", f"DeiT-{size}-dist"))


def _bit(depth: int, wf: int) -> ModelSpec:
    return ModelSpec(
        name=f"R{depth}x{wf}", family="bit", timm_id=f"resnetv2_{depth}x{wf}_bit",
        aliases=(f"BiT-R{depth}x{wf}", f"BiT-M-R{depth}x{wf}", f"ResNet{depth}x{wf}"),
        layers=RESNET_DEPTHS[depth], width_factor=wf,
    )


def _hybrid(size: str, total_stride: int) -> ModelSpec:
    depth, width, mlp, heads, word = _VIT_SIZES[size]
    # /32 keeps all four R50 stages; /16 drops stage 4 and moves its blocks into stage 3 (paper D.4).
    layers = (3, 4, 6, 3) if total_stride == 32 else (3, 4, 9)
    return ModelSpec(
        name=f"R50+ViT-{size}/{total_stride}", family="hybrid",
        timm_id=f"vit_{word}_r50_s{total_stride}_224", aliases=(f"R50+ViT-{size}_{total_stride}",),
        patch=1, width=width, depth=depth, mlp_dim=mlp, heads=heads, layers=layers, flavour=HYBRID_DEFAULT,
    )


def _tiny_vit(size: str, width: int, depth: int, heads: int, patch: int = 4) -> ModelSpec:
    return ModelSpec(
        name=f"ViT-{size}/{patch}", family="vit", tiny=True, resolution=32, num_classes=10, patch=patch,
        width=width, depth=depth, mlp_dim=4 * width, heads=heads, aliases=(f"DeiT-{size}/{patch}",),
    )


def _tiny_bit(name: str, layers: tuple[int, ...], wf: int = 1) -> ModelSpec:
    return ModelSpec(
        name=name, family="bit", tiny=True, resolution=32, num_classes=10, layers=layers,
        width_factor=wf, channels=(32, 64, 128, 256), stem_chs=16, gn_groups=8,
    )


_VITS = {(s, p): _vit(s, p) for s, p in [("Ti", 16), ("S", 16), ("B", 32), ("B", 16), ("B", 8), ("L", 32),
                                          ("L", 16), ("H", 14)]}
_TINY_VITS = {"Nano": _tiny_vit("Nano", width=32, depth=2, heads=2),
              "Micro": _tiny_vit("Micro", width=64, depth=4, heads=4),
              "Mini": _tiny_vit("Mini", width=128, depth=6, heads=4)}

_TABLE: list[ModelSpec] = [
    *_VITS.values(),
    *(_distilled(_VITS[s, 16], s, f"deit_{_VIT_SIZES[s][4]}_distilled_patch16_224") for s in _DEIT_SIZES),
    _bit(50, 1), _bit(50, 2), _bit(50, 3), _bit(101, 1), _bit(101, 3),
    _bit(152, 1), _bit(152, 2), _bit(152, 4), _bit(200, 3),
    _hybrid("B", 32), _hybrid("B", 16), _hybrid("L", 32), _hybrid("L", 16),
    # Tiny variants for tests and CPU studies (32 px, 10 classes). Not from the paper.
    *_TINY_VITS.values(),
    _distilled(_TINY_VITS["Nano"], "Nano"), _distilled(_TINY_VITS["Micro"], "Micro"),
    _tiny_bit("R-Nano", layers=(1, 1, 1, 1)),
    _tiny_bit("R-Micro", layers=(2, 2, 2, 2)),
    ModelSpec(
        name="R-Nano+ViT-Micro/8", family="hybrid", tiny=True, resolution=32, num_classes=10,
        patch=1, width=64, depth=2, mlp_dim=256, heads=4, layers=(1, 1),
        channels=(32, 64, 128, 256), stem_chs=16, gn_groups=8, flavour=HYBRID_DEFAULT,
    ),
]


def _plugin(family: str):
    from vitbench.models.families import family_plugin  # the family registry imports this module

    return family_plugin(family)


def _load_families() -> None:
    """Import the family plug-ins once (they add their rows with `add_rows`)."""
    from vitbench.registry import Kind, load_plugins

    load_plugins(Kind.FAMILY)


def add_rows(rows) -> None:
    """Rows of a plug-in family (vitbench.models.families.register_family): into the table and the name index."""
    for spec in rows:
        keys = {_norm(n) for n in (spec.name, spec.timm_id, *spec.aliases) if n}
        taken = [k for k in keys if _INDEX.get(k, spec) != spec]
        if taken:
            raise ConfigError(f"model {spec.name}: the name {taken[0]!r} is taken by {_INDEX[taken[0]].name}")
        if spec not in _TABLE:
            _TABLE.append(spec)
        for k in keys:
            _INDEX[k] = spec


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
    """The table's rows, optionally of one family (any case: 'VIT' == 'vit')."""
    _load_families()
    if family is not None:
        from vitbench.models.families import family_names

        key = family.strip().lower() if isinstance(family, str) else family
        if key not in family_names():
            raise UnknownModelError(f"unknown family {str(family)[:40]!r}; allowed: {', '.join(family_names())}")
        family = key
    return [s for s in _TABLE if (family is None or s.family == family) and (include_tiny or not s.tiny)]


def close_matches(name: str, n: int = 5) -> list[str]:
    _load_families()
    names = {s.name: s.name for s in _TABLE}
    keys = {_norm(k): s.name for s in _TABLE for k in (s.name, s.timm_id, *s.aliases) if k}
    hits = difflib.get_close_matches(_norm(name), list(keys), n=n * 3, cutoff=0.5)
    out: list[str] = []
    for h in hits:
        if keys[h] not in out:
            out.append(keys[h])
    return out[:n] or list(names)[:n]


def get_spec(name: str | ModelSpec, num_classes: int | None = None) -> ModelSpec:
    """Look up a variant by paper name, timm id or alias, optionally with overrides in brackets
    (``ViT-B/16[depth=6,posemb=none]``); unknown names list close matches, bad overrides name the field."""
    if isinstance(name, ModelSpec):
        spec = name
    else:
        if not isinstance(name, str):
            raise UnknownModelError(f"a model name must be a string, got {str(name)[:40]!r}")
        base, text = split_name(name)
        spec = _INDEX.get(_norm(base))
        if spec is None:
            _load_families()
            spec = _INDEX.get(_norm(base))
        if spec is None:  # a name of an open-ended family (timm:<name>): the family resolves it
            from vitbench.models.families import resolve_open

            spec = resolve_open(base.strip())
        if spec is None:
            raise UnknownModelError(
                f"unknown model {shorten(base)}. Close matches: {', '.join(close_matches(base))}. "
                "See `vitbench models` for the full list."
            )
        if text is not None:
            spec = apply_overrides(spec, parse_override_text(text, spec.name))
    return spec if num_classes is None else spec.with_classes(num_classes)


_ARCHITECTURE_FIELDS = ("family", "patch", "width", "depth", "mlp_dim", "heads", "ln_eps", "distilled", "layers",
                        "width_factor", "channels", "stem_chs", "gn_groups", "classifier", "rep_size", "posemb",
                        "posemb_at")


def spec_from_dict(d: dict, source: str = "spec") -> ModelSpec:
    """Inverse of `ModelSpec.to_dict` (e.g. a checkpoint's metadata): the table's row of that name (a derived
    name's overrides applied) with the stored classes and flavour (specs stored before flavours existed get the row's default flavour).
    ConfigError if the stored architecture differs from the row's, naming the fields."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise ConfigError(f"{source}: expected a model spec with a 'name', got {str(d)[:60]!r}")
    spec = get_spec(d["name"], num_classes=d.get("num_classes"))
    row = spec.to_dict()
    differ = [f for f in _ARCHITECTURE_FIELDS if f in d and _same(d[f]) != _same(row[f])]
    if differ:
        detail = ", ".join(f"{f}={str(d[f])[:20]} (table: {row[f]})" for f in differ[:6])
        raise ConfigError(f"{source}: the stored architecture of {spec.name} differs from the model table: "
                          f"{detail}")
    if "flavour" in d:
        spec = spec.with_flavour(Flavour.from_dict(d["flavour"], f"{source}.flavour"))
    return spec


def _same(v):
    return tuple(v) if isinstance(v, list | tuple) else v
