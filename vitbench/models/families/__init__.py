"""Model families as plug-ins: one module declares a family's rows, the ModelSpec fields it reads, its override
keys, its torch and Flax builders, its analytic counts and its weight-conversion table, and registers itself.

Shared code (models.specs, models.torch, models.flax, models.analytic, models.param_table, models.overrides)
looks a family up here by the spec's `family` value and never names one. The families written this way are the
axial ones (vitbench.models.families.axial); vit, bit and hybrid keep their hand-written code paths in those
modules (listed in BUILTIN). Outside code registers a family exactly as vitbench's own module does (see
docs/plugins.md): a module on $VITBENCH_PLUGINS or an entry point that calls `register_family(FamilyPlugin(...))`.

Registering is cheap: the builders are named as 'module:function' strings and imported only when a model is
built, so listing models or parsing a study never imports torch or jax.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NewType

from vitbench.errors import ConfigError
from vitbench.registry import Kind, entries, register

# The typed key of the family registry: ModelSpec.family holds one of these.
FamilyName = NewType("FamilyName", str)

# Families with hand-written paths in the shared model modules (not plug-ins).
BUILTIN: tuple[FamilyName, ...] = (FamilyName("vit"), FamilyName("bit"), FamilyName("hybrid"))


class Axis(Enum):
    """The one axis of the token grid an axial attention layer mixes along."""

    ROW = "row"  # within each row: along x (the grid's width)
    COLUMN = "column"  # within each column: along y (the grid's height)


@dataclass(frozen=True)
class AxisLayer:
    """One per-axis attention layer as inspection reads it: its axis, its sequence length (tokens along the axis),
    the input pixels between two adjacent tokens (the stride of the feature map it attends over) and where it
    sits ("block 1", "stage 2 block 1")."""

    axis: Axis
    length: int
    step_px: int
    where: str


def _import(target: str) -> Callable:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class FamilyPlugin:
    """Everything shared code needs of a family.

    rows: its model-table rows (ModelSpec with family == name); fields: the ModelSpec fields it reads (the rest
    are carried with their defaults); override_keys: the `Row[key=value]` keys that mean something for it;
    torch_builder / flax_builder: 'module:function' with signatures (spec, resolution, num_classes) -> nn.Module
    and (spec, num_classes, dtype) -> flax module; counts(spec, resolution, num_classes) -> analytic.Counts;
    param_table(spec, resolution) -> param_table entries (timm-style key <-> Flax path); stride(spec) pixels per
    output cell; feature_dim(spec); describe(spec) one line; validate(spec, diff) raises ConfigError;
    attention: whether the model has attention layers; token_attention_maps: whether its attention maps are
    (tokens x tokens) over the whole image (what inspection's attention distance reads); axis_layers(spec,
    resolution) -> tuple[AxisLayer, ...]: a family whose attention runs along one axis at a time (axial) lists
    its attention layers in forward order, and torch_attention / flax_attention ('module:function', signatures
    (model, x_nchw) -> [tensor] and (module, params, x_nhwc) -> [array]) give their probabilities, one
    (images, sequences, heads, length, length) array per layer in that order (inspection's attention distance
    per axis); resolution_of(spec, shapes) -> int | None: the input size a set of weights was made for, from
    the shapes of its grid-sized tables ({timm key or Flax path: shape}; None: they say nothing, the row's
    native size), what loading a checkpoint checks the weights against; plot_style: the report's (marker,
    matplotlib colormap, name) for the family.

    An open-ended family (models named, not listed as rows: `timm:<any timm name>`) gives `resolve(name)` -> the
    spec of a name it owns (None: not its name; UnknownModelError: its name, but no such model) and
    `catalogue(pattern)` -> the names it offers matching a glob (what `vitbench models --filter` lists).
    backends: the backends that can build it (empty: every backend; a trial on another is refused naming them).
    counts_note: how `counts` is made when it is no formula (the flops record says it beside the analytic count).
    head_prefixes(spec): the parameter-name prefixes of its classifier, what transfer replaces (default: timm ViT's
    `head.`, `head_dist.`; vitbench.models.identify.is_head).
    """

    name: FamilyName
    description: str
    rows: tuple[Any, ...]
    fields: tuple[str, ...]
    override_keys: tuple[str, ...]
    torch_builder: str
    flax_builder: str
    counts: Callable[..., Any]
    param_table: Callable[..., list]
    stride: Callable[[Any], int]
    feature_dim: Callable[[Any], int]
    describe: Callable[[Any], str]
    validate: Callable[[Any, dict], None] = lambda spec, diff: None
    attention: bool = True
    token_attention_maps: bool = False
    axis_layers: Callable[[Any, int], tuple[AxisLayer, ...]] | None = None
    torch_attention: str = ""
    flax_attention: str = ""
    resolution_of: Callable[[Any, dict], int | None] = lambda spec, shapes: None
    plot_style: tuple[str, str, str] = ("D", "Greys", "")  # report marker, colormap, legend name
    resolve: Callable[[str], Any] | None = None
    catalogue: Callable[[str], list[str]] | None = None
    backends: tuple[str, ...] = ()
    counts_note: str = ""
    head_prefixes: Callable[[Any], tuple[str, ...]] | None = None
    extra: dict = field(default_factory=dict)

    def build_torch(self, spec, resolution: int, num_classes: int):
        return _import(self.torch_builder)(spec, resolution, num_classes)

    def build_flax(self, spec, num_classes: int, dtype):
        if not self.flax_builder:
            raise ConfigError(f"{spec.name} (family {self.name}) has no Flax builder; backends that build it: "
                              f"{', '.join(self.backends) or '(none)'}")
        return _import(self.flax_builder)(spec, num_classes, dtype)

    def torch_attention_maps(self, model, x) -> list:
        """Per-axis attention probabilities of a built torch `model` on NCHW `x` (see `axis_layers`)."""
        return _import(self.torch_attention)(model, x)

    def flax_attention_maps(self, module, params, x) -> list:
        """Per-axis attention probabilities of a Flax `module` with `params` on NHWC `x` (traceable: jit it)."""
        return _import(self.flax_attention)(module, params, x)


def register_family(plugin: FamilyPlugin, *, replace: bool = False) -> FamilyPlugin:
    """Add a family: its registry entry, its rows in the model table and its override keys."""
    from vitbench.models import overrides, specs

    if plugin.name in BUILTIN:
        raise ConfigError(f"family {plugin.name!r} is built in; choose another name")
    bad = [r.name for r in plugin.rows if r.family != plugin.name]
    if bad:
        raise ConfigError(f"family {plugin.name!r}: rows {bad[:3]} have another family")
    register(Kind.FAMILY, plugin.name, plugin, provides=plugin.override_keys, description=plugin.description,
             replace=replace, module=sys._getframe(1).f_globals.get("__name__", plugin.torch_builder))
    overrides.FAMILY_KEYS[plugin.name] = plugin.override_keys
    overrides.VALIDATORS[plugin.name] = plugin.validate
    specs.add_rows(plugin.rows)
    return plugin


def family_plugin(name: str) -> FamilyPlugin | None:
    """The registered plug-in of family `name`; None for a built-in family."""
    if name in BUILTIN:
        return None
    found = entries(Kind.FAMILY).get(name)
    if found is None:
        raise ConfigError(f"unknown model family {str(name)[:40]!r}; allowed: {', '.join(family_names())}")
    return found.obj


def has_attention_layers(spec) -> bool:
    """Whether inspection has attention layers to read: a transformer (depth > 0) or a plug-in family that lists
    per-axis attention layers."""
    plugin = family_plugin(spec.family)
    return bool(spec.depth) if plugin is None else plugin.token_attention_maps or plugin.axis_layers is not None


def resolve_open(name: str):
    """The spec of `name` from the open-ended families (FamilyPlugin.resolve), or None when none owns it."""
    for e in entries(Kind.FAMILY).values():
        if e.obj.resolve is not None:
            spec = e.obj.resolve(name)
            if spec is not None:
                return spec
    return None


def backend_problem(spec, backend: str) -> str | None:
    """Why `backend` cannot build `spec` (its family lists the backends that can), or None when it can."""
    plugin = family_plugin(spec.family)
    if plugin is None or not plugin.backends or backend in plugin.backends:
        return None
    return (f"{spec.name} (family {plugin.name}) is built by backend {', '.join(plugin.backends)} only, "
            f"not {backend!r}")


def family_names() -> tuple[str, ...]:
    return (*BUILTIN, *entries(Kind.FAMILY))
