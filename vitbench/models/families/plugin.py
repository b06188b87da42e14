"""The family plug-in record (`FamilyPlugin` and its parts: `FamilyBuild`, `FamilyComputation`, `AttentionMaps`,
`FamilyWeights`, `Catalogue`, `PlotStyle`; `Axis`, `AxisLayer`, `ModelAttention`) and the family registry over
vitbench.registry (`register_family`, `family_plugin`, ...). The package vitbench.models.families re-exports every
name; its docstring says how families plug in. Imports no model module."""

from __future__ import annotations

import functools
import importlib
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from dataclasses import replace as with_fields
from enum import Enum
from typing import Any, NewType

from vitbench.errors import ConfigError
from vitbench.registry import Kind, entries, lookup, register, registered, registering

# The typed key of the family registry: ModelSpec.family holds one of these.
FamilyName = NewType("FamilyName", str)


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


@dataclass(frozen=True)
class OverrideKey:
    """An architecture field that a `Row[key=value]` name may change: its name, how a value is read (one of
    `choices`, case-insensitive; else an integer within `bounds`; else `parse(value, model name)`, which returns
    the typed value or raises ConfigError), the field of the spec's `arch` it sets ("": `name`) and other spellings
    accepted. vitbench.models.overrides declares the built-in ones (depth, width, posemb, blocks, ...); a family
    declares only the keys of its own in `FamilyPlugin.new_override_keys`."""

    name: str
    choices: tuple[str, ...] = ()
    bounds: tuple[int, int] | None = None
    parse: Callable[[Any, str], Any] | None = None
    field: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def arch_field(self) -> str:
        return self.field or self.name


@dataclass(frozen=True)
class ModelAttention:
    """What one model's attention is, as its family answers for its spec (FamilyPlugin.attention_of).

    layers: it has attention layers (bench reads the attention kernel torch ran only then); token_maps: its
    attention maps are (tokens x tokens) over the whole image, what the family's AttentionMaps readers
    give and inspection's attention distance reads; prefix_tokens: the tokens before the patches in its sequence
    (class, distillation, register tokens), None when the model has no token sequence over the image (a CNN):
    the flops record's `tokens` is then None; token_width: the width D of its tokens (what a head on single
    tokens reads: masked patch prediction's), None when it has no token sequence."""

    layers: bool
    token_maps: bool = False
    prefix_tokens: int | None = None
    token_width: int | None = None

    def tokens(self, spec, resolution: int) -> int | None:
        """Sequence length at `resolution`: the patches of the spec's grid and the prefix tokens (None: none)."""
        return None if self.prefix_tokens is None else spec.tokens(resolution) + self.prefix_tokens


@dataclass(frozen=True)
class AttentionMaps:
    """How inspection reads a family's attention maps (FamilyPlugin.attention_maps); the default: it reads none.

    token_maps: its maps are (tokens x tokens) over the whole image (what inspection's attention distance reads,
    what masked patch prediction needs); axis_layers(spec, resolution) -> tuple[AxisLayer, ...]: a family whose
    attention runs along one axis at a time (axial) lists its attention layers in forward order; torch / flax:
    'module:function' readers, signatures (model, x_nchw) -> [tensor] and (module, params, x_nhwc) -> [array],
    giving the attention probabilities, one array per layer in forward order: (images, heads, tokens, tokens)
    with token_maps, (images, sequences, heads, length, length) with axis_layers."""

    token_maps: bool = False
    axis_layers: Callable[[Any, int], tuple[AxisLayer, ...]] | None = None
    torch: str = ""
    flax: str = ""


@dataclass(frozen=True)
class FamilyWeights:
    """What a family's weights are (FamilyPlugin.weights): where checkpoints come from and how they are read.

    origins: {Origin value: Flavour} -- the numerical conventions of checkpoints from each code base that has this
    family's models (vitbench.models.flavours; an origin not listed has none); npz_origin: the origin an `.npz`
    of this family comes from unless told; posemb_tables(spec, resolution) -> [posemb.Table]: its learned
    position-embedding tables (what resizing, identification and the grid check read; resolution_of is asked
    only when it has none); resolution_of(spec, shapes) -> int | None: the input size a set of weights was made
    for, from the shapes of its grid-sized tables ({timm key or Flax path: shape}; None: they say nothing, the
    row's native size), what loading a checkpoint checks the weights against; head_prefixes(spec): the
    parameter-name prefixes of its classifier, what transfer replaces (None: timm ViT's `head.`, `head_dist.`;
    vitbench.models.identify.is_head)."""

    origins: dict[str, Any] = field(default_factory=dict)
    npz_origin: str = "vit_jax"
    posemb_tables: Callable[[Any, int], list] = lambda spec, resolution: []
    resolution_of: Callable[[Any, dict], int | None] = lambda spec, shapes: None
    head_prefixes: Callable[[Any], tuple[str, ...]] | None = None


@dataclass(frozen=True)
class FamilyBuild:
    """How a family's models are built (FamilyPlugin.build).

    torch / flax: 'module:function', imported only when a model is built, signatures (spec, resolution,
    num_classes) -> torch nn.Module and (spec, num_classes, dtype) -> Flax module ("": no Flax builder; list the
    `backends` that build it); representation_size: whether the Flax builder takes `representation_size=` (a tanh
    pre-logits layer, vit_jax's pre-training head); channels_last: the torch backends' default memory format
    (NHWC for convolution-heavy families); backends: the backends that can build it (empty: every backend; a trial
    on another is refused naming them); torch_init: 'module:function', (torch model) -> the model with each
    parameter drawn as the family's Flax model draws its twin, for a model trained from scratch (the torch
    backend's init_model: both backends then pre-train from one start; "": the builder's own draws)."""

    torch: str
    flax: str = ""
    representation_size: bool = False
    channels_last: bool = True
    backends: tuple[str, ...] = ()
    torch_init: str = ""


@dataclass(frozen=True)
class FamilyComputation:
    """What a spec's model computes, answered from the spec without building it (FamilyPlugin.computation).

    counts(spec, resolution, num_classes) -> analytic.Counts (params and MACs; 1 MAC = 2 FLOPs, norms not
    counted); param_table(spec, resolution) -> param_table entries (timm-style key <-> Flax path, with their
    layout transforms); stride(spec): input pixels per output cell (every resolution is a multiple of it);
    feature_dim(spec): the width of the pre-logits features; describe(spec): the architecture in one line
    (`vitbench models`); counts_note: how `counts` is made when it is no formula (the flops record says it beside
    the count)."""

    counts: Callable[[Any, int, int], Any]
    param_table: Callable[[Any, int], list]
    stride: Callable[[Any], int]
    feature_dim: Callable[[Any], int]
    describe: Callable[[Any], str]
    counts_note: str = ""


@dataclass(frozen=True)
class Catalogue:
    """The models of an open-ended family, named rather than listed as rows (FamilyPlugin.catalogue; timm's
    `timm:<any timm name>`): resolve(name) -> the spec of a name it owns (None: not its name;
    UnknownModelError: its name, but no such model); names(pattern) -> the names it offers matching a glob (what
    `vitbench models --filter` lists)."""

    resolve: Callable[[str], Any]
    names: Callable[[str], list[str]]


@dataclass(frozen=True)
class PlotStyle:
    """How the report draws a family's models (FamilyPlugin.plot_style): a matplotlib marker, a matplotlib
    colormap (its shades tell the family's models apart, small to large) and the legend's name ("": the family's
    name)."""

    marker: str = "D"
    colormap: str = "Greys"
    legend: str = ""


def norm_name(name: str) -> str:
    """Forgiving key of a model name: case-, separator- and suffix-insensitive ('vit-b/16' == 'ViT-B_16'); the
    model table's index (models.specs) and the registry's taken-name check use this one."""
    s = name.strip().lower()
    s = re.sub(r"\.[a-z0-9_]+$", "", s)  # timm pretrained tag, e.g. '.augreg_in21k'
    return re.sub(r"[^a-z0-9+]", "", s)


def _import(target: str) -> Callable:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class FamilyPlugin:
    """Everything shared code needs of a family, one idea per part.

    Its table and overrides: name and description (one line for `vitbench plugins`); rows: its model-table rows
    (ModelSpec with family == name); arch: the class of its specs' own part, `ModelSpec.arch` (a frozen dataclass:
    vitbench.models.arch's TransformerArch, ResNetArch, HybridArch, or its own; None: its specs have none, or any);
    fields: the fields it reads (of its arch and the spec's flavour; the rest are carried with their defaults);
    override_keys: the built-in `Row[key=value]` keys (vitbench.models.overrides) that mean something for it;
    new_override_keys: keys of its own (OverrideKey), which no built-in one is; validate(spec, diff): its
    cross-field rules (raises ConfigError).
    build: how its models are built (FamilyBuild: the torch and Flax builders, `representation_size=`, the
    default memory format, the backends that can build it).
    computation: what a spec's model computes, from the spec (FamilyComputation: counts, conversion table,
    stride, feature width, one-line description, how the counts are made).
    attention: whether its models have attention layers; model_attention(spec) -> ModelAttention: the per-model
    answer of a family whose models differ (timm), instead of `attention` and `attention_maps.token_maps`;
    attention_maps: how inspection reads them (AttentionMaps: whole-image token maps, per-axis layers, the
    torch and Flax readers).
    weights: what its checkpoints are (FamilyWeights: origins and their flavours, the `.npz` origin,
    position-embedding tables, the resolution its weights were made for, its classifier's parameter prefixes).
    catalogue: the models of an open-ended family, named rather than listed as rows (Catalogue: resolve, names;
    None: its rows are all its models).
    plot_style: how the report draws its models (PlotStyle: marker, colormap, legend name).

    The flat fields of the record before issue 52 grouped it (`torch_builder=`, `counts=`, `plot_style=(...)`,
    ...) are still accepted, with a DeprecationWarning: `MOVED` says where each went (docs/plugins.md).
    """

    name: FamilyName
    description: str
    rows: tuple[Any, ...]
    fields: tuple[str, ...]
    override_keys: tuple[str, ...]
    build: FamilyBuild
    computation: FamilyComputation
    validate: Callable[[Any, dict], None] = lambda spec, diff: None
    attention: bool = True
    model_attention: Callable[[Any], ModelAttention] | None = None
    attention_maps: AttentionMaps = AttentionMaps()
    weights: FamilyWeights = field(default_factory=FamilyWeights)
    catalogue: Catalogue | None = None
    plot_style: PlotStyle = PlotStyle()
    arch: type | None = None
    new_override_keys: tuple[OverrideKey, ...] = ()

    @property
    def all_override_keys(self) -> tuple[str, ...]:
        """Every `Row[key=value]` key it takes: the built-in ones it names, then its own."""
        return (*self.override_keys, *(k.name for k in self.new_override_keys))

    def attention_of(self, spec) -> ModelAttention:
        """Whether `spec`'s model has attention layers, whole-image token maps, and its prefix tokens: the
        family's per-spec answer (model_attention), else its family-wide flags with the spec's prefix tokens."""
        if self.model_attention is not None:
            return self.model_attention(spec)
        return ModelAttention(self.attention, self.attention_maps.token_maps,
                              spec.num_prefix_tokens if self.attention else None,
                              self.computation.feature_dim(spec) if self.attention else None)

    def build_torch(self, spec, resolution: int, num_classes: int):
        return _import(self.build.torch)(spec, resolution, num_classes)

    def init_torch(self, model):
        """`model` (built by build_torch) with its parameters drawn as the Flax model's (FamilyBuild.torch_init),
        or as built where the family declares none."""
        return _import(self.build.torch_init)(model) if self.build.torch_init else model

    def build_flax(self, spec, num_classes: int, dtype, **kw):
        """The Flax module; `kw` only `representation_size=` for a family that declares it."""
        if not self.build.flax:
            raise ConfigError(f"{spec.name} (family {self.name}) has no Flax builder; backends that build it: "
                              f"{', '.join(self.build.backends) or '(none)'}")
        return _import(self.build.flax)(spec, num_classes, dtype, **kw)

    def torch_attention_maps(self, model, x) -> list:
        """Attention probabilities of a built torch `model` on NCHW `x`, one per layer (AttentionMaps.torch)."""
        return _import(self.attention_maps.torch)(model, x)

    def flax_attention_maps(self, module, params, x) -> list:
        """Attention probabilities of a Flax `module` with `params` on NHWC `x`, one per layer (traceable: jit
        it; AttentionMaps.flax)."""
        return _import(self.attention_maps.flax)(module, params, x)


# Compatibility for a family written against the flat record (before issue 52 grouped it; docs/plugins.md, "Moved
# fields"): where each flat field lives now, (part, its field). Two kept their names and changed their form:
# `catalogue=` a function (now Catalogue.names) and `plot_style=` a (marker, colormap, legend) tuple (PlotStyle).
MOVED: dict[str, tuple[str, str]] = {
    "torch_builder": ("build", "torch"), "flax_builder": ("build", "flax"),
    **{k: ("build", k) for k in ("representation_size", "channels_last", "backends")},
    **{k: ("computation", k) for k in ("counts", "param_table", "stride", "feature_dim", "describe",
                                       "counts_note")},
    "resolve": ("catalogue", "resolve"),
    "token_attention_maps": ("attention_maps", "token_maps"), "axis_layers": ("attention_maps", "axis_layers"),
    "torch_attention": ("attention_maps", "torch"), "flax_attention": ("attention_maps", "flax"),
    **{k: ("weights", k) for k in ("origins", "npz_origin", "posemb_tables", "resolution_of", "head_prefixes")},
}
_PARTS = {"build": FamilyBuild, "computation": FamilyComputation, "catalogue": Catalogue,
          "attention_maps": AttentionMaps, "weights": FamilyWeights}


def _regroup(kw: dict) -> dict:
    """`kw` with the flat record's fields moved into their parts (MOVED), a DeprecationWarning naming them."""
    flat = [k for k, v in kw.items() if k in MOVED or k == "extra" or (k == "catalogue" and callable(v))
            or (k == "plot_style" and isinstance(v, tuple))]
    if not flat:
        return kw
    warnings.warn("FamilyPlugin: flat fields of the record before issue 52: " + ", ".join(
        f"{k} -> {'.'.join(MOVED.get(k, ('catalogue', 'names') if k == 'catalogue' else (k,)))}"
        for k in flat if k != "extra") + " (docs/plugins.md, 'Moved fields')", DeprecationWarning, stacklevel=3)
    kw, parts = dict(kw), {}
    for k in flat:
        value = kw.pop(k)
        if k == "plot_style":
            kw[k] = PlotStyle(*value)
        elif k != "extra":  # (`extra` was never read)
            part, name = MOVED.get(k, ("catalogue", "names"))
            parts.setdefault(part, {})[name] = value
    for part, values in parts.items():
        kw[part] = _PARTS[part](**values) if kw.get(part) is None else with_fields(kw[part], **values)
    return kw


_grouped_init = FamilyPlugin.__init__


@functools.wraps(_grouped_init)
def _init_accepting_flat_fields(self, *args, **kw):
    _grouped_init(self, *args, **_regroup(kw))


FamilyPlugin.__init__ = _init_accepting_flat_fields


def register_family(plugin: FamilyPlugin, *, replace: bool = False) -> FamilyPlugin:
    """Add a family: its registry entry (its rows, override keys and rules with it; the model table and the
    override parser read them from here). A row name taken by another family is a ConfigError."""
    bad = [r.name for r in plugin.rows if r.family != plugin.name]
    if bad:
        raise ConfigError(f"family {plugin.name!r}: rows {bad[:3]} have another family")
    if plugin.arch is not None:
        bad = [r.name for r in plugin.rows if not isinstance(r.arch, plugin.arch)]
        if bad:
            raise ConfigError(f"family {plugin.name!r}: rows {bad[:3]} have no {plugin.arch.__name__} in `arch`")
    distilled = [r.name for r in plugin.rows
                 if getattr(r.arch, "distilled", False) and "distilled" not in plugin.fields]
    if distilled:
        raise ConfigError(f"family {plugin.name!r}: rows {distilled[:3]} have a distillation token, a field the "
                          "family does not read")
    module = sys._getframe(1).f_globals.get("__name__", plugin.build.torch)  # the module registering it
    # named as a task clash is (registry.register): both modules, and the outside plug-in with its source (the
    # built-ins register first, so a clash with one is the plug-in's; registry's docstring)
    who = registering(module)
    taken = {norm_name(n): (r.name, e) for e in registered(Kind.FAMILY).values() if e.obj.name != plugin.name
             for r in e.obj.rows for n in (r.name, r.timm_id, *r.aliases) if n}
    own: dict[str, Any] = {}  # its own rows' names: two rows under one name would leave one of them unreachable
    for r in plugin.rows:
        for n in (r.name, r.timm_id, *r.aliases):
            if n and own.setdefault(norm_name(n), r) is not r:
                raise ConfigError(f"model {r.name} of family {plugin.name!r} (registered by {who}): its name "
                                  f"{n!r} is also model {own[norm_name(n)].name}'s (case and separators aside), a "
                                  f"row of the same family; a model name names one row: rename one in {module}")
        for n in (r.name, r.timm_id, *r.aliases):
            if n and norm_name(n) in taken:
                owner, e = taken[norm_name(n)]
                raise ConfigError(f"model {r.name} of family {plugin.name!r} (registered by {who}): the name "
                                  f"{n!r} is taken by {owner} of family {e.name!r}, registered by {e.module} "
                                  f"({e.source}); a model name belongs to one family: rename the row in {module} "
                                  "(replace=True replaces a family of the same name only)")
    register(Kind.FAMILY, plugin.name, plugin, provides=plugin.all_override_keys, description=plugin.description,
             replace=replace, module=module)
    return plugin


def family_plugin(name: str) -> FamilyPlugin:
    """The registered plug-in of family `name` (ConfigError naming the families if there is none)."""
    found = lookup(Kind.FAMILY, name)  # (hot: every spec.stride asks)
    if found is None:
        raise ConfigError(f"unknown model family {str(name)[:40]!r}; allowed: {', '.join(family_names())}")
    return found.obj


def family_modules(name: str) -> tuple[str, ...]:
    """The modules that define family `name`, by name (none imported): the one that registered it, those its
    'module:function' targets name and those that define its functions (counts, param_table, ...). What the value
    cache hashes beside vitbench's own source, so that a family plug-in outside the package that changes is
    counted afresh (vitbench.value_cache.module_sources_hash)."""
    found = lookup(Kind.FAMILY, name)
    if found is None:
        family_plugin(name)  # raises, naming the families
    plugin = found.obj
    maps = plugin.attention_maps
    targets = (plugin.build.torch, plugin.build.flax, maps.torch, maps.flax)
    parts = (plugin, maps, plugin.weights, plugin.computation, *([plugin.catalogue] if plugin.catalogue else []))
    functions = [getattr(obj, f.name) for obj in parts for f in fields(obj)]
    return tuple(sorted({found.module, *(t.partition(":")[0] for t in targets if t),
                         *(getattr(f, "__module__", None) or "" for f in functions if callable(f))} - {""}))


def family_if_registered(name: str) -> FamilyPlugin | None:
    """The plug-in of family `name` if it is registered already (loads nothing: safe while families load)."""
    found = registered(Kind.FAMILY).get(name)
    return None if found is None else found.obj


def resolve_open(name: str):
    """The spec of `name` from the open-ended families (FamilyPlugin.catalogue), or None when none owns it."""
    for e in entries(Kind.FAMILY).values():
        if e.obj.catalogue is not None:
            spec = e.obj.catalogue.resolve(name)
            if spec is not None:
                return spec
    return None


def backend_problem(spec, backend: str) -> str | None:
    """Why `backend` cannot build `spec` (its family lists the backends that can), or None when it can."""
    plugin = family_plugin(spec.family)
    backends = plugin.build.backends
    if not backends or backend in backends:
        return None
    return (f"{spec.name} (family {plugin.name}) is built by backend {', '.join(backends)} only, "
            f"not {backend!r}")


def family_names() -> tuple[str, ...]:
    return tuple(entries(Kind.FAMILY))


def all_families() -> tuple[FamilyPlugin, ...]:
    """Every registered family, vitbench's own first (in registry.BUILTIN_MODULES order)."""
    return tuple(e.obj for e in entries(Kind.FAMILY).values())
