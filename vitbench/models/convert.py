"""Weights across frameworks: a timm state dict <-> Flax params, through vitbench.models.param_table.

Every mapping is checked both ways: unused or missing keys and shape mismatches raise, naming the key. The
other weight concerns live apart: position-embedding resizing in posemb_resize.py, original vit_jax / big_vision
.npz files in npz.py, identifying and loading checkpoints in checkpoints.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vitbench.models import posemb
from vitbench.models.identify import WeightsMismatchError, check_weights
from vitbench.models.param_table import _np, flatten, param_table, unflatten
from vitbench.models.specs import ModelSpec, get_spec


def _torch_resolution(state_dict: dict, spec: ModelSpec | str) -> int | None:
    return posemb.resolution_of({k: tuple(v.shape) for k, v in state_dict.items()}, get_spec(spec), "torch_key")


def _flax_resolution(flat: dict, spec: ModelSpec | str) -> int | None:
    return posemb.resolution_of({k: tuple(v.shape) for k, v in flat.items()}, get_spec(spec), "flax_path")


def torch_to_flax(state_dict: dict[str, Any], spec: ModelSpec | str) -> dict:
    """timm state dict (tensors or arrays) -> nested Flax params of numpy float32 arrays."""
    table = param_table(spec, _torch_resolution(state_dict, spec))
    want = {e.torch_key for e in table}
    if want != set(state_dict):
        check_weights(state_dict, spec, source="state dict")  # raises, naming keys and what the weights are
    flat: dict[str, np.ndarray] = {}
    for e in table:
        for path, arr in zip(e.flax_paths, e.to_flax(_np(state_dict[e.torch_key]))):
            flat[path] = np.ascontiguousarray(arr, dtype=np.float32)
    return unflatten(flat)


def flax_to_torch(params: dict, spec: ModelSpec | str) -> dict[str, Any]:
    """Nested Flax params -> timm state dict of float32 torch tensors (load with strict=True)."""
    import torch

    flat = {k: _np(v) for k, v in flatten(dict(params)).items()}
    table = param_table(spec, _flax_resolution(flat, spec))
    want = {p for e in table for p in e.flax_paths}
    missing, extra = sorted(want - set(flat)), sorted(set(flat) - want)
    if missing or extra:
        raise WeightsMismatchError(f"Flax params do not match {get_spec(spec).name}: missing {missing[:8]}, "
                                   f"unexpected {extra[:8]}")
    # np.array(copy=True): jax-backed arrays are read-only, and the tensors must own their memory
    return {e.torch_key: torch.from_numpy(np.array(e.to_torch(*(flat[p] for p in e.flax_paths)),
                                                   dtype=np.float32, copy=True, order="C"))
            for e in table}
