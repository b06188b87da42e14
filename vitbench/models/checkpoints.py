"""One loader for pretrained weights of every origin on local disk, and the check that weights fit a model.

    load_pretrained(path, model=None, *, origin=None, new_head=False) -> Pretrained

reads a timm/DeiT state dict (``.safetensors``), an original vit_jax / big_vision / big_transfer checkpoint
(``.npz`` with '/'-joined keys, read with ``allow_pickle=False``) or a vitbench checkpoint (``.safetensors`` with
vitbench metadata), and returns the model it is (the table's row, inferred from the weights' names and shapes
when `model` is not given), its weights in timm naming as float32 numpy arrays, its origin, and the resolution
its position embeddings were trained at. The spec carries the origin's flavour (vitbench.models.flavours), so
a model built from it computes the function the checkpoint was trained with, on either backend:

    p = load_pretrained("ViT-B_16.npz")                 # origin vit_jax: tanh GELU
    model = build_torch_model(p.spec, p.resolution); model.load_state_dict(p.state_dict())
    params = p.flax_params()                            # for build_flax_model(p.spec, p.resolution)

Weights that do not fit the named model are a ConfigError naming the missing, unexpected and mis-shaped keys
and the model(s) they do fit. Pickle-based files (.pt, .pth, .bin, .ckpt, .pkl) are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vitbench.errors import ConfigError, UnsafeFileError
from vitbench.models.convert import torch_to_flax
from vitbench.models.families import family_plugin
from vitbench.models.flavours import Origin
from vitbench.models.identify import (
    HEAD_PREFIXES,
    Fit,
    _flax_keys,
    _looks_like,
    _mismatch,
    _more,
    check_weights,
    identify,
    is_head,
)
from vitbench.models.npz import _canonical_keys, load_npz
from vitbench.models.param_table import NotARealWeight, check_real, param_table, unflatten, weight_array
from vitbench.models.arch import arch_value
from vitbench.models.specs import ModelSpec, all_specs, get_spec, spec_from_dict

__all__ = ["Fit", "Pretrained", "check_weights", "identify", "is_head", "load_pretrained", "pretrained_from_weights"]

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".pickle")
SUFFIXES = (".safetensors", ".npz")


@dataclass(frozen=True)
class Pretrained:
    """Pretrained weights, ready for `build_torch_model(spec, resolution)` / `build_flax_model(spec, resolution)`.

    `spec` is the table's row with the head's number of classes and the origin's flavour; `weights` are in
    timm naming, float32 numpy, integer and boolean buffers in their own dtype (param_table.weight_array; the
    same layout as vitbench's own checkpoints); `num_classes` is None when the
    head was dropped (`new_head=True`).
    """

    spec: ModelSpec
    weights: dict[str, np.ndarray]
    origin: Origin
    resolution: int
    num_classes: int | None
    path: Path | None = None

    def state_dict(self) -> dict[str, Any]:
        """The weights as torch tensors (for `load_state_dict`; strict unless the head was dropped): float32, and
        an integer or boolean buffer in its own dtype (param_table.weight_array)."""
        import torch

        return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in self.weights.items()}

    def flax_params(self) -> dict:
        """The weights as nested Flax params (vit_jax names); without a head if it was dropped."""
        if self.num_classes is not None:
            return torch_to_flax(self.weights, self.spec)
        table = [e for e in param_table(self.spec) if not e.torch_key.startswith(HEAD_PREFIXES)]
        flat: dict[str, np.ndarray] = {}
        for e in table:
            for p, arr in zip(e.flax_paths, e.to_flax(self.weights[e.torch_key])):
                flat[p] = np.ascontiguousarray(arr, dtype=np.float32)
        return unflatten(flat)

    def meta(self) -> dict:
        """What a vitbench checkpoint's metadata needs (model, spec with flavour, resolution, classes) and
        where the weights came from; `save_checkpoint(path, p.weights, {**p.meta(), ...})` writes one."""
        return {"model": self.spec.name, "spec": self.spec.to_dict(), "resolution": self.resolution,
                "num_classes": self.num_classes, "origin": self.origin.value,
                "source": None if self.path is None else str(self.path)}


# ---------------------------------------------------------------------------------------------------
# Which model do weights belong to?
# ---------------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------------------------------
def _read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:  # torch reads bf16/fp16 too; numpy float32 out
            header = f.metadata() or {}
            weights = {k: weight_array(f.get_tensor(k), k, str(path)) for k in f.keys()}  # noqa: SIM118
    except NotARealWeight as e:
        raise ConfigError(str(e)) from None
    except Exception as e:  # safetensors raises its own error types for corrupt headers
        raise ConfigError(f"{path}: not a readable safetensors file ({str(e)[:200]})") from e
    return weights, header


def _npz_to_timm(flat: dict[str, np.ndarray], source: str, new_head: bool,
                 model: str | ModelSpec | None) -> tuple[ModelSpec, dict]:
    """vit_jax-layout arrays -> (the row they are, timm-named weights). Rows with the same parameter names
    (ViT-Ti/S/B at depth 12, ...) are told apart by converting and checking shapes; `model` is tried first."""
    flat = _canonical_keys(flat)
    if any(k.startswith("pre_logits/") for k in flat):
        width = flat.get("pre_logits/bias", np.zeros(0)).shape[-1]
        if model is not None and arch_value(get_spec(model), "rep_size") == width:
            pass  # the model asked for has this tanh pre-logits layer: kept
        elif not new_head:
            raise ConfigError(f"{source} has a pre_logits layer (the pre-training representation head, {width} "
                              f"wide): load it as a model with rep_size={width} (e.g. ViT-B/16[rep_size={width}]) "
                              "to keep it, or with new_head=True (the paper's fine-tuning head swap: head and "
                              "pre_logits dropped)")
        else:
            flat = {k: v for k, v in flat.items() if not k.startswith("pre_logits/")}
    heads = ("head/", "head_dist/")
    if new_head:
        flat = {k: v for k, v in flat.items() if not k.startswith(heads)}
    have = set(flat)

    def names(spec: ModelSpec) -> set[str]:
        return {p for p in _flax_keys(spec) if not (new_head and p.startswith(heads))}

    rows = ([get_spec(model)] if model is not None else []) + all_specs()
    candidates = [s for s in rows if names(s) == have]
    if not candidates:
        close = rows[0] if model is not None else min(all_specs(), key=lambda s: len(names(s) ^ have))
        raise ConfigError(f"{source}: its parameter names do not fit {close.name}"
                          f"{'' if model is not None else ' (the closest row)'}: missing "
                          f"{_more(sorted(names(close) - have))}, unexpected {_more(sorted(have - names(close)))}")
    try:  # (an npz array of text was a ValueError traceback in the cast, a complex one cast in silence)
        for k, v in flat.items():
            check_real(v, k, source)
    except NotARealWeight as e:
        raise ConfigError(str(e)) from None
    converted: list[tuple[ModelSpec, dict]] = []
    for spec in candidates:
        weights = _convert_npz(flat, spec)
        if weights is None:
            continue
        if not any(_mismatch(spec, weights, new_head)[:3]):
            return spec, weights
        converted.append((spec, weights))
    if converted:  # none fits exactly: the caller's check names the mis-shaped keys
        return converted[0]
    shapes = {k: tuple(v.shape) for k, v in flat.items() if k in ("cls", "embedding/kernel")}
    raise ConfigError(f"{source}: its arrays fit none of {', '.join(s.name for s in candidates[:5])} ({shapes})")


def _convert_npz(flat: dict[str, np.ndarray], spec: ModelSpec) -> dict[str, np.ndarray] | None:
    """Flax-named arrays -> timm-named float32 arrays through `spec`'s table; None if the shapes do not allow."""
    weights: dict[str, np.ndarray] = {}
    for e in param_table(spec):
        if not all(p in flat for p in e.flax_paths):
            continue  # the dropped head
        arrays = []
        for p in e.flax_paths:
            a = np.asarray(flat[p], dtype=np.float32)
            if p.endswith(("/scale", "/bias")) and a.ndim == 4 and a.shape[:3] == (1, 1, 1):
                a = a.reshape(-1)  # GroupNorm stored as (1,1,1,C) by big_transfer / big_vision
            arrays.append(a)
        try:
            weights[e.torch_key] = np.ascontiguousarray(e.to_torch(*arrays), dtype=np.float32)
        except ValueError:  # a reshape the shapes do not allow: another row's arrays
            return None
    return weights


def _infer(weights: dict, fits: list[Fit], model: str | ModelSpec | None, source: str, ignore_head: bool) -> Fit:
    if model is not None:
        return check_weights(weights, model, source=source, ignore_head=ignore_head)
    if len(fits) == 1:
        return fits[0]
    # what the caller can do about it is the caller's to say: not every command takes a model name
    if not fits:
        raise ConfigError(f"{source}: {_looks_like(weights, ignore_head)}")
    raise ConfigError(f"{source}: the weights fit several models ({', '.join(f.spec.name for f in fits)}) and "
                      "the file does not say which")


def pretrained_from_weights(weights: Mapping[str, Any], model: str | ModelSpec | None = None, *,
                            origin: Origin | str = Origin.TIMM, new_head: bool = False,
                            source: str = "weights", path: Path | None = None) -> Pretrained:
    """`Pretrained` from an in-memory timm-named state dict (tensors or arrays) made by `origin`'s code."""
    try:
        weights = {k: weight_array(v, k, source) for k, v in weights.items()}
    except NotARealWeight as e:
        raise ConfigError(str(e)) from None
    if new_head:
        named = None if model is None else get_spec(model)  # a named model's family may name its own head
        weights = {k: v for k, v in weights.items() if not is_head(k, named)}
    fits = [] if model is not None else identify(weights, ignore_head=new_head)
    fit = _infer(weights, fits, model, source, new_head)
    spec = fit.spec.with_origin(origin)
    return Pretrained(spec, weights, Origin(origin), fit.resolution, fit.num_classes, path)


def load_pretrained(path: str | Path, model: str | ModelSpec | None = None, *, origin: Origin | str | None = None,
                    new_head: bool = False) -> Pretrained:
    """Load pretrained weights of any origin from local disk (see the module docstring).

    `model`: the table's name (checked against the weights); None infers it from names and shapes.
    `origin`: overrides the origin inferred from the file (.npz: vit_jax, or big_transfer for BiT; .safetensors:
    timm, or vitbench with vitbench metadata) -- e.g. "vit_jax" for a timm state dict converted from a vit_jax
    checkpoint, which was trained with the tanh GELU. `new_head`: drop the head (and a pre_logits layer).
    """
    path = Path(path).expanduser()
    source = str(path)
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise UnsafeFileError(f"{source}: pickle-based checkpoints are not loaded (they can run code); convert "
                              f"it to .safetensors (timm state dict) or .npz")
    if path.suffix.lower() not in SUFFIXES:
        raise ConfigError(f"{source}: unknown checkpoint format {path.suffix!r}; allowed: {', '.join(SUFFIXES)}")
    if not path.is_file():
        raise ConfigError(f"checkpoint {source!r} does not exist (or is not a file)")
    if path.suffix.lower() == ".npz":
        row, weights = _npz_to_timm(load_npz(path), source, new_head, model)
        found = Origin(family_plugin(row.family).weights.npz_origin)  # big_transfer for BiT, vit_jax for the others
        return pretrained_from_weights(weights, model, origin=origin or found, new_head=new_head, source=source,
                                       path=path)
    weights, header = _read_safetensors(path)
    if "vitbench" not in header:
        return pretrained_from_weights(weights, model, origin=origin or Origin.TIMM, new_head=new_head,
                                       source=source, path=path)
    return _vitbench_checkpoint(weights, header, model, origin, new_head, path)


# torch's BatchNorm step count, a 0-d buffer: vitbench before 2026-12-02 wrote it as (1,) (np.ascontiguousarray
# makes a 0-d array 1-d), and those checkpoints did not fit their model
BN_COUNT = ".num_batches_tracked"


def written_shapes(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A vitbench checkpoint's weights as written, read as their model holds them (BN_COUNT (1,) -> 0-d)."""
    return {k: v.reshape(()) if k.endswith(BN_COUNT) and v.shape == (1,) else v for k, v in weights.items()}


def _vitbench_checkpoint(weights: dict, header: dict, model: str | ModelSpec | None, origin: Origin | str | None,
                         new_head: bool, path: Path) -> Pretrained:
    """A vitbench checkpoint: the stored spec (with its flavour) decides, and the weights must fit it."""
    import json

    source = str(path)
    try:
        meta = json.loads(header["vitbench"])
        stored = spec_from_dict(meta["spec"], f"{source}: spec") if "spec" in meta else get_spec(meta["model"])
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{source}: unreadable vitbench metadata ({str(e)[:100]})") from None
    if model is not None and get_spec(model).name != stored.name:
        raise ConfigError(f"{source} is a {stored.name} checkpoint (its metadata says so), "
                          f"not {get_spec(model).name}")
    weights = written_shapes(weights)
    if new_head:
        weights = {k: v for k, v in weights.items() if not is_head(k, stored)}
    fit = check_weights(weights, stored, source=f"{source}: the weights", ignore_head=new_head)
    spec = fit.spec if origin is None else fit.spec.with_origin(origin)  # fit.spec is `stored`'s, flavour included
    return Pretrained(spec, weights, Origin(origin or Origin.VITBENCH), fit.resolution, fit.num_classes, path)

