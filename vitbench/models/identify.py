"""Which model a set of timm-named weights is: every table row they fit (names and shapes, the resolution their
position embeddings imply, the head's classes), and the check that weights fit a given model, with a message
naming the missing / unexpected / mis-shaped keys and what the weights look like instead."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vitbench.errors import ConfigError
from vitbench.models import posemb
from vitbench.models.param_table import param_table
from vitbench.models.specs import ModelSpec, all_specs, get_spec

HEAD_PREFIXES = ("head.", "head_dist.")  # timm: ViT head / DeiT head_dist / BiT head.fc


class WeightsMismatchError(ConfigError, ValueError):
    """Weights of one model offered to another: names the missing / unexpected / mis-shaped keys."""


@dataclass(frozen=True)
class Fit:
    """How a set of weights fits a table row: at which resolution (position-embedding grid; the row's native
    one for BiT, which has none) and with how many classes (None: no head in the weights)."""

    spec: ModelSpec
    resolution: int
    num_classes: int | None



@functools.cache
def _torch_keys(spec: ModelSpec) -> frozenset[str]:
    return frozenset(e.torch_key for e in param_table(spec))


@functools.cache
def _flax_keys(spec: ModelSpec) -> frozenset[str]:
    return frozenset(p for e in param_table(spec) for p in e.flax_paths)


@functools.lru_cache(maxsize=64)
def _expected_shapes(spec: ModelSpec, resolution: int, num_classes: int) -> dict[str, tuple[int, ...]]:
    """Parameter shapes of `spec` built on the meta device (nothing allocated)."""
    from vitbench.models.torch import build_torch_model

    model = build_torch_model(spec, resolution, num_classes, device="meta")
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _key_order(key: str) -> tuple[int, str]:
    """Top-level names (pos_embed, cls_token, stem...) before the many per-block ones, in messages."""
    return key.count("."), key


def is_head(key: str, spec: ModelSpec | None = None) -> bool:
    """Whether a timm parameter name is a classification head's (both of a distilled DeiT's): what the paper's
    fine-tuning swap drops. A family that names its own classifier (FamilyWeights.head_prefixes, e.g. timm's
    `fc.` of a ResNet, `head.fc.` of a ConvNeXt, whose `head.norm` is part of the features) decides for `spec`."""
    return key.startswith(head_prefixes(spec))


def head_prefixes(spec: ModelSpec | None = None) -> tuple[str, ...]:
    """The parameter-name prefixes of `spec`'s classifier (HEAD_PREFIXES unless its family names its own)."""
    from vitbench.models.families import family_plugin

    declared = None if spec is None else family_plugin(spec.family).weights.head_prefixes
    return HEAD_PREFIXES if declared is None else declared(spec)


def _grid_resolution(spec: ModelSpec, weights: Mapping[str, Any]) -> int | None:
    """Resolution implied by the position embeddings (square grid), or None if they do not give one; the
    native one for a model without learned tables (BiT, posemb none or sincos2d)."""
    return posemb.resolution_of({k: tuple(v.shape) for k, v in weights.items()}, spec, "torch_key")


def _num_classes(weights: Mapping[str, Any], spec: ModelSpec | None = None) -> int | None:
    """The classes of the classifier in `weights`: the rows of its weight under `spec`'s head prefixes (a timm
    ResNet's `fc.`, a ConvNeXt's `head.fc.`), else timm's ViT / BiT names; None without one."""
    for k in (*(p + "weight" for p in head_prefixes(spec)), "head.weight", "head.fc.weight"):
        if k in weights:
            return int(weights[k].shape[0])
    return None


def _mismatch(spec: ModelSpec, weights: Mapping[str, Any], ignore_head: bool) -> tuple[list, list, list, Fit]:
    """(missing, unexpected, mis-shaped) keys of `weights` against `spec`, and the fit they would have."""
    want = {k for k in _torch_keys(spec) if not (ignore_head and is_head(k, spec))}
    have = {k for k in weights if not (ignore_head and is_head(k, spec))}
    missing, unexpected = sorted(want - have, key=_key_order), sorted(have - want, key=_key_order)
    k = _num_classes(weights, spec)
    res = _grid_resolution(spec, weights)
    fit = Fit(spec if k is None else spec.with_classes(k), res or spec.resolution, None if ignore_head else k)
    shaped: list[str] = []
    pos_keys = {t.torch_key for t in posemb.tables(spec, spec.resolution)}
    if res is None:
        shaped += [f"{key} {tuple(weights[key].shape)} (no square grid of {spec.name}'s position embeddings)"
                   for key in sorted(pos_keys & set(weights))[:2]]
    shapes = _expected_shapes(spec, fit.resolution, k or spec.num_classes)
    for key in sorted(want & have):
        got = tuple(weights[key].shape)
        if key in shapes and got != shapes[key] and not (res is None and key in pos_keys):
            shaped.append(f"{key} {got} (expected {shapes[key]})")
    return missing, unexpected, shaped, fit


def identify(weights: Mapping[str, Any], *, ignore_head: bool = False) -> list[Fit]:
    """Every table row the timm-named `weights` fit exactly (names and shapes), with resolution and classes."""
    out = []
    for spec in all_specs():
        want = {k for k in _torch_keys(spec) if not (ignore_head and is_head(k, spec))}
        if want != {k for k in weights if not (ignore_head and is_head(k, spec))}:
            continue
        missing, unexpected, shaped, fit = _mismatch(spec, weights, ignore_head)
        if not (missing or unexpected or shaped):
            out.append(fit)
    return out


def _closest(weights: Mapping[str, Any], ignore_head: bool) -> list[str]:
    """Names of the rows whose parameter names overlap the weights' most (for messages)."""
    have = {k for k in weights if not (ignore_head and is_head(k))}
    score = [(len(_torch_keys(s) ^ have), s.name) for s in all_specs()]
    return [n for _, n in sorted(score)[:3]]


def _looks_like(weights: Mapping[str, Any], ignore_head: bool) -> str:
    fits = identify(weights, ignore_head=ignore_head)
    if fits:
        return "They look like " + " or ".join(
            f"{f.spec.name} ({f.resolution} px, {f.num_classes if f.num_classes is not None else 'no'} classes)"
            for f in fits)
    return ("They fit no model in the table; the closest by parameter names: " + ", ".join(
        _closest(weights, ignore_head)) + ". Weights of a model outside the table (one an open-ended family names, "
            "see `vitbench models --family`) do not say their model: name it beside the file (--model NAME; in a "
            "study, the trial's model)")


def _more(items: list[str], n: int = 6) -> str:
    return "[" + ", ".join(items[:n]) + (f", ... {len(items) - n} more" if len(items) > n else "") + "]"


def check_weights(weights: Mapping[str, Any], spec: ModelSpec | str, *, source: str = "weights",
                  ignore_head: bool = False) -> Fit:
    """The fit of timm-named `weights` to `spec` (resolution from the position embeddings, classes from the
    head), or a ConfigError naming the missing / unexpected / mis-shaped keys and what the weights look like."""
    spec = get_spec(spec)
    try:
        missing, unexpected, shaped, fit = _mismatch(spec, weights, ignore_head)
    except ConfigError as e:  # what the model's family says of these weights (a grid it cannot read): their source
        raise WeightsMismatchError(f"{source}: {e}") from None
    if missing or unexpected or shaped:
        parts = [f"missing {_more(missing)}" if missing else "", f"unexpected {_more(unexpected)}" if unexpected
                 else "", f"mis-shaped {_more(shaped, 4)}" if shaped else ""]
        raise WeightsMismatchError(f"{source} do not fit {spec.name}: {'; '.join(p for p in parts if p)}. "
                                   f"{_looks_like(weights, ignore_head)}.")
    return fit
