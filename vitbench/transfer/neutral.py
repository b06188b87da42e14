"""`key_neutral`: the one declaration of how a field added after keys existed keeps them (a leaf module, so the
formats table, vitbench.transfer.formats, can declare its formats' options with it; vitbench.transfer.config
re-exports it)."""

from __future__ import annotations

from typing import Any

from pydantic import Field


def key_neutral(default: Any = None, **constraints: Any) -> Any:
    """A field added after keys existed: left out of every dump (and so of trial keys, upstream cache keys and
    records' configs) while it holds its default, so keys made before it stay as they were; any other value is
    dumped and enters the key. `constraints` are pydantic Field's (ge, le, gt, ...). The one declaration of this
    rule for pydantic models: `tfds_name: str | None = key_neutral()`, `workers: int = key_neutral(0, ge=0)`; a
    shared trial field's default slot in vitbench.tasks.fields.SHARED takes it as well (devices, parallelism)."""
    return Field(default, exclude_if=lambda v: v == default, **constraints)
