"""Architecture overrides: a table row plus changed fields, e.g. ``ViT-B/16[depth=6,posemb=none]``.

The paper's controlled experiments (ViT appendix D.2-D.4: Figure 8, Figure 9, Table 8) vary one dimension of a
row at a time. A derived spec is the row with some fields replaced; its canonical name is the row's name plus the
fields that differ from the row, in the fixed order of `key_table()`, values normalised
(``ViT-B/16[depth=12]`` is ``ViT-B/16``). One parser and one validator for the CLI (`--set`), study axes and the
Python API; every problem is a ConfigError naming the field and the allowed values.

This module declares the built-in override keys (`BUILT_IN`) and reads them; the table lives in specs.py (which
imports this one), and which keys a family takes, keys of its own and its cross-field rules are the family's
(FamilyPlugin.override_keys, .new_override_keys and .validate).
"""

from __future__ import annotations

import re
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from collections.abc import Iterator, Mapping
from typing import Any, Literal, get_args

from vitbench.errors import ConfigError
from vitbench.models.families import OverrideKey, family_names, family_plugin

Classifier = Literal["token", "gap"]  # ViT D.3 / Figure 9: class token + head, or global average pooling
Posemb = Literal["learned", "none", "learned_2d", "sincos2d", "relative"]  # ViT D.4 / Table 8 (+ big_vision sincos)
PosembAt = Literal["input", "every_layer", "every_layer_shared"]  # ViT D.4: the three places of Table 8

CLASSIFIERS: tuple[str, ...] = get_args(Classifier)
POSEMBS: tuple[str, ...] = get_args(Posemb)
POSEMB_ATS: tuple[str, ...] = get_args(PosembAt)

_MAX = 40  # characters of a user value repeated in a message

# BiT's blocks per stage: stages (min, max: the four ResNet stages), blocks per stage (min, max)
BLOCKS_BOUNDS = (1, 4, 1, 256)


def _short(v: Any) -> str:
    s = str(v)
    return s if len(s) <= _MAX else s[:_MAX] + "..."


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*\d{1,7}\s*", value):
        return int(value)
    return None


def _parse_blocks(value: Any, name: str) -> tuple[int, ...]:
    smin, smax, bmin, bmax = BLOCKS_BOUNDS
    if isinstance(value, str):
        parts = [p for p in re.split(r"[x,\-/ ]+", value.strip().lower()) if p]
    elif isinstance(value, list | tuple):
        parts = list(value)
    else:
        parts = [value]
    got = [_int(p) for p in parts]
    if not smin <= len(got) <= smax or any(b is None or not bmin <= b <= bmax for b in got):
        raise ConfigError(f"{name}: blocks={_short(value)!r} must be {smin} to {smax} stages of {bmin} to {bmax} "
                          "blocks each, e.g. blocks=3x4x6x3")
    return tuple(got)  # type: ignore[arg-type]


# The built-in keys, in the order of the canonical name. The integers' upper bounds only catch typos (ViT-H: depth
# 32, D 1280, MLP 5120, 16 heads; Figure 8 goes to 64 layers; BiT-L is x4), far above anything the paper builds.
BUILT_IN: dict[str, OverrideKey] = {k.name: k for k in (
    OverrideKey("depth", bounds=(1, 256)),
    OverrideKey("width", bounds=(1, 16384)),
    OverrideKey("mlp_dim", bounds=(1, 65536), aliases=("mlp",)),
    OverrideKey("heads", bounds=(1, 1024)),
    OverrideKey("patch", bounds=(1, 1024)),
    OverrideKey("classifier", choices=CLASSIFIERS),
    OverrideKey("rep_size", bounds=(0, 16384)),
    OverrideKey("posemb", choices=POSEMBS, aliases=("pos_embed",)),
    OverrideKey("posemb_at", choices=POSEMB_ATS, aliases=("posemb_place",)),
    OverrideKey("width_factor", bounds=(1, 16)),
    OverrideKey("blocks", parse=_parse_blocks, field="layers", aliases=("layers",)),  # BiT's blocks per stage
)}
TRANSFORMER_KEYS = ("depth", "width", "mlp_dim", "heads", "patch", "classifier", "rep_size", "posemb", "posemb_at")
RESNET_KEYS = ("width_factor", "blocks")


def key_table() -> dict[str, OverrideKey]:
    """Every override key there is, in the canonical name's order: the built-in ones, then the registered
    families' own (FamilyPlugin.new_override_keys) in registration order (a family whose declaration is wrong
    adds none: `key_problem`)."""
    return _tables()[0]


def key_problem(family: str) -> str | None:
    """What is wrong with `family`'s override keys (None: nothing): a key it names that is neither built in nor
    its own, an own key that shadows a built-in one or one another family declares otherwise, or one setting a
    field its `arch` lacks. Only that family's overrides are refused for it."""
    return _tables()[1].get(family)


def _tables() -> tuple[dict[str, OverrideKey], dict[str, str]]:
    plugins = tuple(family_plugin(n) for n in family_names())
    cached = _TABLE.get(tuple(map(id, plugins)))
    if cached is not None:
        return cached[1]
    table, owner, problems = dict(BUILT_IN), {}, {}
    for p in plugins:
        problem, own = _problem(p, table, owner), {}
        for k in p.new_override_keys if problem is None else ():
            own[k.name] = k
        if problem is None:
            table.update(own)
            owner.update(dict.fromkeys(own, f"family {p.name!r}"))
        else:
            problems[p.name] = problem
    _TABLE.clear()
    _TABLE[tuple(map(id, plugins))] = plugins, (table, problems)  # (the plug-ins held, so that no id is reused)
    return table, problems


def _problem(p, table: dict[str, OverrideKey], owner: dict[str, str]) -> str | None:
    unknown = [k for k in p.override_keys if k not in BUILT_IN]
    if unknown:
        return (f"family {p.name!r}: override keys {', '.join(map(repr, unknown))} are not built in "
                f"({', '.join(BUILT_IN)}); declare a key of its own as an OverrideKey in `new_override_keys`")
    have = {f.name for f in dataclass_fields(p.arch)} if p.arch is not None else None
    for k in p.new_override_keys:
        other = owner.get(k.name, "vitbench's built-in keys" if k.name in BUILT_IN else None)
        if other is not None and table[k.name] != k:
            return (f"family {p.name!r}: override key {k.name!r} is already declared otherwise by {other}; name "
                    "it differently, or name that one in `override_keys`")
        if have is not None and k.arch_field not in have:
            return (f"family {p.name!r}: override key {k.name!r} sets {k.arch_field!r}, which its arch "
                    f"{p.arch.__name__} has not; its fields: {', '.join(sorted(have))}")
    return None


# the latest tables, by their registered plug-ins (their ids: a registry entry is replaced, never changed)
_TABLE: dict[tuple, tuple[tuple, tuple[dict[str, OverrideKey], dict[str, str]]]] = {}


def override_order() -> tuple[str, ...]:
    """Every override key, in the canonical name's order."""
    return tuple(key_table())


class _FamilyKeys(Mapping):
    """{family: the override keys it takes}, read from the family registry (FamilyPlugin.all_override_keys)."""

    def __getitem__(self, family: str) -> tuple[str, ...]:
        return family_plugin(family).all_override_keys

    def __iter__(self) -> Iterator[str]:
        return iter(family_names())

    def __len__(self) -> int:
        return len(family_names())


FAMILY_KEYS: Mapping[str, tuple[str, ...]] = _FamilyKeys()
# A distilled DeiT keeps its two tokens, two heads and 1-D input position embeddings: shape overrides only.
DISTILLED_KEYS = ("depth", "width", "mlp_dim", "heads", "patch")


def field_of(key: str) -> str:
    """The arch field override key `key` sets."""
    k = BUILT_IN.get(key) or key_table().get(key)
    return k.arch_field if k is not None else key


def canonical_key(key: Any, family: str, name: str) -> str:
    """The override key for `key` (aliases accepted); ConfigError if unknown or not one of `family`'s."""
    problem = key_problem(family)
    if problem is not None:
        raise ConfigError(f"{name}: {problem}")
    table = key_table()
    k = str(key).strip().lower().replace("-", "_")
    k = next((o.name for o in table.values() if k in o.aliases), k)
    allowed = FAMILY_KEYS[family]
    none = f"a {family} model takes no architecture field (name another model for another architecture)"
    if k not in table:
        raise ConfigError(f"{name}: unknown architecture field {_short(key)!r}; "
                          + (f"allowed for {family}: {', '.join(allowed)}" if allowed else none))
    if k not in allowed:
        raise ConfigError(f"{name}: field {k!r} does not apply to a {family} model; "
                          + (f"allowed: {', '.join(allowed)}" if allowed else none))
    return k


def parse_value(key: str, value: Any, name: str) -> Any:
    """`value` (a string from a name/CLI/study, or a Python value) -> the field's typed value. No eval."""
    k = key_table()[key]
    if k.choices:
        v = value.strip().lower() if isinstance(value, str) else value
        if v not in k.choices:
            raise ConfigError(f"{name}: {key}={_short(value)!r} is not allowed; allowed: {', '.join(k.choices)}")
        return v
    if k.parse is not None:
        return k.parse(value, name)
    lo, hi = k.bounds or (0, 10**7)
    v = _int(value)
    if v is None or not lo <= v <= hi:
        raise ConfigError(f"{name}: {key}={_short(value)!r} must be an integer from {lo} to {hi}")
    return v


def render_value(v: Any) -> str:
    return "x".join(map(str, v)) if isinstance(v, tuple) else str(v)


def parse_override_text(text: str, name: str) -> dict[str, str]:
    """'depth=6,posemb=none' -> {'depth': '6', 'posemb': 'none'} (keys not yet checked)."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise ConfigError(f"{name}: override {_short(item)!r} must be field=value, e.g. depth=6")
        k, v = (s.strip() for s in item.split("=", 1))
        if k in out:
            raise ConfigError(f"{name}: field {_short(k)!r} is set twice")
        out[k] = v
    return out


_NAME = re.compile(r"\s*([^\[\]]+?)\s*\[([^\[\]]*)\]\s*")


def split_name(name: str) -> tuple[str, str | None]:
    """'ViT-B/16[depth=6]' -> ('ViT-B/16', 'depth=6'); a plain name -> (name, None)."""
    m = _NAME.fullmatch(name)
    if m is None:
        if "[" in name or "]" in name:
            raise ConfigError(f"model {_short(name)!r}: overrides go in one pair of brackets at the end, "
                              "e.g. ViT-B/16[depth=6,posemb=none]")
        return name, None
    return m.group(1), m.group(2)


def overrides_of(spec: Any, base: Any) -> dict[str, Any]:
    """{key: value} of the override fields where `spec` differs from its row `base`, in canonical order."""
    return {k: getattr(spec.arch, field_of(k)) for k in FAMILY_KEYS[base.family]
            if getattr(spec.arch, field_of(k)) != getattr(base.arch, field_of(k))}


def canonical_name(base_name: str, diff: dict[str, Any]) -> str:
    if not diff:
        return base_name
    return f"{base_name}[{','.join(f'{k}={render_value(v)}' for k, v in diff.items())}]"


def apply_overrides(spec: Any, overrides: dict[str, Any]) -> Any:
    """`spec` (a row or a derived spec) with `overrides` ({key: value or string}) applied, renamed canonically
    and validated. The spec's classes, resolution and flavour are kept."""
    base = spec.base_row()
    name = spec.name
    parsed = {}
    for key, value in overrides.items():
        k = canonical_key(key, base.family, name)
        if k in parsed:
            raise ConfigError(f"{name}: field {k!r} is set twice")
        parsed[k] = parse_value(k, value, name)
    new = replace(spec, arch=replace(spec.arch, **{field_of(k): v for k, v in parsed.items()}))
    diff = overrides_of(new, base)
    if diff:
        new = replace(new, name=canonical_name(base.name, diff), aliases=(), timm_id=None)
    else:
        new = replace(new, name=base.name, aliases=base.aliases, timm_id=base.timm_id)
    validate(new, diff)
    return new


def validate(spec: Any, diff: dict[str, Any]) -> None:
    """Cross-field rules of a derived spec; ConfigError naming the field and what is allowed."""
    n = spec.name
    if getattr(spec.arch, "distilled", False):
        bad = [k for k in diff if k not in DISTILLED_KEYS]
        if bad:
            raise ConfigError(f"{n}: {bad[0]} cannot be changed on a distilled model (class + distillation tokens, "
                              f"two heads, 1-D input position embeddings); allowed: {', '.join(DISTILLED_KEYS)}")
    family_plugin(spec.family).validate(spec, diff)  # the family's own cross-field rules
    if spec.resolution % spec.stride:
        what = "patch" if "patch" in diff else ("blocks" if "blocks" in diff else "architecture")
        ok = [p for p in range(1, spec.resolution + 1) if spec.resolution % p == 0][:10]
        raise ConfigError(f"{n}: {what} gives a total stride of {spec.stride} that does not divide the native "
                          f"resolution {spec.resolution}; total strides allowed: {', '.join(map(str, ok))}")
