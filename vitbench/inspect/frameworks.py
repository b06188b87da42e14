"""Backend name -> its `attention_maps` (the one place the inspect package names frameworks; the plug-in
registry takes this over when each module moves into its backend package)."""

from __future__ import annotations

import importlib

from vitbench.errors import BackendUnavailable, ConfigError
from vitbench.inspect.run import AttentionFn

_MODULES = {"torch": "vitbench.inspect.torch_attention", "jax": "vitbench.inspect.flax_attention"}
BACKENDS: tuple[str, ...] = tuple(_MODULES)


def attention_fn(backend: str) -> AttentionFn:
    """The attention function of `backend`."""
    if backend not in _MODULES:
        raise ConfigError(f"unknown backend {backend!r} for inspect; allowed: {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(_MODULES[backend]).attention_maps
    except ImportError as e:
        raise BackendUnavailable(f"inspect on backend {backend!r} needs its framework installed: {e}") from e
