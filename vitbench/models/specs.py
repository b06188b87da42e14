"""Backend-free model table: one row per model, from which both PyTorch and Flax build.

`ModelSpec` is one architecture; the rows live with their families (vitbench.models.families: vit, bit, hybrid,
axial, and any registered from outside), and this module indexes every registered family's rows by name, timm id
and alias. A spec's family-dependent properties (stride, feature size, description) ask its family's plug-in.
"""

from __future__ import annotations

import difflib
import functools
import operator
import warnings
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from vitbench.errors import ConfigError, UnknownModelError, shorten
from vitbench.models.families import (
    FamilyName,
    all_families,
    family_if_registered,
    family_names,
    family_plugin,
    norm_name,
)
from vitbench.models.arch import FLAT_DEFAULTS, HybridArch, arch_value, prefix_tokens
from vitbench.models.flavours import DEFAULT, Flavour, Origin, flavour_for
from vitbench.models.overrides import (
    FAMILY_KEYS,
    apply_overrides,
    overrides_of,
    parse_override_text,
    split_name,
)

RESNET_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3), 200: (3, 24, 36, 3)}  # He et al. 2016


@dataclass(frozen=True)
class ModelSpec:
    """One architecture: a common core (what shared code reads) and `arch`, the family's own part (a frozen
    dataclass of the class its FamilyPlugin names: vitbench.models.arch's TransformerArch, ResNetArch, HybridArch,
    or the family's own; None for a family whose models have none, timm's). The fields of before issue 52 split
    it (`ModelSpec(width=...)`, `spec.width`) still work, with a DeprecationWarning (docs/plugins.md, "Moved
    fields")."""

    name: str
    family: FamilyName
    aliases: tuple[str, ...] = ()
    timm_id: str | None = None  # the timm-style name (also accepted as an alias)
    resolution: int = 224  # native/pre-training resolution
    num_classes: int = 1000
    tiny: bool = False  # a test/CPU-study variant, not from the paper
    # numerical conventions (GELU form, weight standardisation, GroupNorm eps), set from a checkpoint's origin
    flavour: Flavour = DEFAULT
    arch: Any = None  # the family's own part (its FamilyPlugin.arch)

    def __post_init__(self) -> None:
        plugin = family_if_registered(self.family) if getattr(self.arch, "distilled", False) else None
        if plugin is not None and "distilled" not in plugin.fields:  # (rows: checked at registration)
            raise ValueError(f"{self.name}: a distillation token needs a transformer family that reads `distilled` "
                             f"(family {self.family} does not)")

    def __getattr__(self, name: str):
        """The flat fields of before issue 52 (`spec.width`): read from `arch`, with a DeprecationWarning."""
        if name in _FLAT_READS and "arch" in self.__dict__ and hasattr(self.arch, name):
            warnings.warn(f"ModelSpec.{name} moved to ModelSpec.arch.{name} (issue 52; docs/plugins.md, 'Moved "
                          "fields')", DeprecationWarning, stacklevel=2)
            return getattr(self.arch, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ---- derived -----------------------------------------------------------------------------
    @property
    def stride(self) -> int:
        """Total downsampling from pixels to tokens (vit: the patch; ResNets: root 4 x 2 per later stage)."""
        return family_plugin(self.family).computation.stride(self)

    @property
    def feature_dim(self) -> int:
        """Size of the representation fed to the head (pre-logits)."""
        return family_plugin(self.family).computation.feature_dim(self)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches (class, distillation; arch.prefix_tokens) from its arch's classifier and
        distillation token, their flat defaults for an arch without them (a ResNet's 1, as before issue 52)."""
        return prefix_tokens(arch_value(self, "classifier"), arch_value(self, "distilled"))

    # ---- overrides (vitbench.models.overrides) ----------------------------------------------------
    def base_row(self) -> ModelSpec:
        """The table's row this spec derives from (itself for a row)."""
        return _index().get(norm_name(split_name(self.name)[0]), self)

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
        return family_plugin(self.family).computation.describe(self)

    def flat(self) -> dict:
        """Every field by its name, one level (the flavour a dict of its fields): the one view of a spec that the
        value and graph caches hash into their keys (the flops, jax parameter-shape and runtime graph caches) and
        that `to_dict` writes into checkpoint metadata. tests/test_specs.py pins it: a change of how ModelSpec holds
        its fields (issue 52: a common core plus the family's own part) must keep this view, or the caches'
        entries are rebuilt and old checkpoints' metadata no longer reads back."""
        core = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("arch", "flavour")}
        arch = {} if self.arch is None else asdict(self.arch)
        return {**core, **FLAT_DEFAULTS, **arch, "flavour": asdict(self.flavour)}

    def to_dict(self) -> dict:
        """`flat()` with the flavour as plain strings and numbers, plus the derived stride: JSON-ready."""
        d = self.flat()
        d["flavour"] = self.flavour.to_dict()
        d["stride"] = self.stride
        return d

    def with_classes(self, num_classes: int) -> ModelSpec:
        return replace(self, num_classes=num_classes)

    def with_origin(self, origin: Origin | str) -> ModelSpec:
        """This architecture in the conventions of checkpoints from `origin` (vit_jax, timm, ...)."""
        return replace(self, flavour=flavour_for(origin, self.family))

    def with_flavour(self, flavour: Flavour) -> ModelSpec:
        return replace(self, flavour=flavour)


# Compatibility for code written against the flat fields (before issue 52 split ModelSpec; docs/plugins.md, "Moved
# fields"): `ModelSpec(width=...)` builds a HybridArch (every field of both parts; the flat view is the same), or
# replaces those fields of the `arch` given; `spec.width` reads `spec.arch.width` (ModelSpec.__getattr__).
_FLAT_READS = frozenset(FLAT_DEFAULTS) | {"stage_channels", "root_channels"}
_core_init = ModelSpec.__init__


@functools.wraps(_core_init)
def _init_accepting_flat_fields(self, *args, **kw):
    flat = {k: kw.pop(k) for k in [k for k in kw if k in FLAT_DEFAULTS]}
    if flat:
        warnings.warn(f"ModelSpec: flat fields of before issue 52 ({', '.join(flat)}) go in `arch=` (e.g. "
                      "vitbench.models.arch.TransformerArch(...); docs/plugins.md, 'Moved fields')",
                      DeprecationWarning, stacklevel=2)
        arch = kw.get("arch")
        kw["arch"] = HybridArch(**flat) if arch is None else replace(arch, **flat)
    _core_init(self, *args, **kw)


ModelSpec.__init__ = _init_accepting_flat_fields


# ---------------------------------------------------------------------------------------------
# The table: every registered family's rows, in registration order
# ---------------------------------------------------------------------------------------------
_CACHE: dict = {}


def _table() -> list[ModelSpec]:
    return _built()[0]


def _index() -> dict[str, ModelSpec]:
    return _built()[1]


def _built() -> tuple[list[ModelSpec], dict[str, ModelSpec]]:
    """(rows, {normalised name: row}) of the registered families; rebuilt when the registry changes."""
    families = all_families()
    key = tuple(id(f) for f in families)
    if _CACHE.get("key") != key:
        table = [row for f in families for row in f.rows]
        index: dict[str, ModelSpec] = {}
        for spec in table:
            for n in (spec.name, spec.timm_id, *spec.aliases):
                if n:
                    index.setdefault(norm_name(n), spec)  # (register_family refuses a name taken twice)
        _CACHE.update(key=key, table=table, index=index)
    return _CACHE["table"], _CACHE["index"]


def all_specs(family: str | None = None, include_tiny: bool = True) -> list[ModelSpec]:
    """The table's rows, optionally of one family (any case: 'VIT' == 'vit')."""
    key = family.strip().lower() if isinstance(family, str) else family
    if key is not None and key not in family_names():
        raise UnknownModelError(f"unknown family {str(family)[:40]!r}; allowed: {', '.join(family_names())}")
    return [s for s in _table() if key in (None, s.family) and (include_tiny or not s.tiny)]


def close_matches(name: str, n: int = 5) -> list[str]:
    names = {s.name: s.name for s in _table()}
    keys = {norm_name(k): s.name for s in _table() for k in (s.name, s.timm_id, *s.aliases) if k}
    hits = difflib.get_close_matches(norm_name(name), list(keys), n=n * 3, cutoff=0.5)
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
        spec = _index().get(norm_name(base))
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


def spec_from_dict(d: dict, source: str = "spec") -> ModelSpec:
    """Inverse of `ModelSpec.to_dict` (e.g. a checkpoint's metadata): the table's row of that name (a derived
    name's overrides applied) with the stored classes and flavour (specs stored before flavours existed get the row's default flavour).
    ConfigError if the stored architecture differs from the row's, naming the fields."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        raise ConfigError(f"{source}: expected a model spec with a 'name', got {str(d)[:60]!r}")
    spec = get_spec(d["name"], num_classes=d.get("num_classes"))
    row = spec.to_dict()
    # the architecture: the family and the flat view's arch fields (not the name, classes, flavour, stride, ...)
    kept = {f.name for f in fields(ModelSpec)} - {"family"} | {"stride"}
    differ = [f for f in row if f not in kept and f in d and _same(d[f]) != _same(row[f])]
    if differ:
        detail = ", ".join(f"{f}={str(d[f])[:20]} (table: {row[f]})" for f in differ[:6])
        raise ConfigError(f"{source}: the stored architecture of {spec.name} differs from the model table: "
                          f"{detail}")
    if "flavour" in d:
        spec = spec.with_flavour(Flavour.from_dict(d["flavour"], f"{source}.flavour"))
    return spec


def _same(v):
    return tuple(v) if isinstance(v, list | tuple) else v
