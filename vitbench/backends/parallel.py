"""The parallelism modes (how one step spreads over `devices`), one registry like the model families' (issue 52):
the names the trial field `parallelism` takes, `--parallelism` of bench and max-batch, `Step`'s check and the
backends' parse-time refusal all read it.

A mode is a `ParallelMode`: its name, what it does, and its placement in each backend that runs it
(`placements`: backend name -> 'module:function', imported when a step is placed, so registering imports no
framework). What a placement is, is the backend's: torch's `(model, device) -> model` wraps the model of one rank
(vitbench.backends.torch.distributed.wrap), JAX's `(mesh, shape) -> NamedSharding` places one parameter on the
mesh (vitbench.backends.jax.mesh.param_sharding). The built-in modes, dp and fsdp (backends.kinds.Parallelism),
are placed by each backend's own code and listed in its spec's `parallelisms`; a mode written outside vitbench
is one module calling `register_parallelism` (through an entry point or $VITBENCH_PLUGINS), and runs on every
backend it names a placement for (tests/test_additions.py adds one).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from vitbench.backends.kinds import Parallelism
from vitbench.errors import ConfigError
from vitbench.registry import Kind, entries, lookup, register


@dataclass(frozen=True)
class ParallelMode:
    """One parallelism mode.

    name: what the trial field `parallelism` (`--parallelism`) says.
    description: one line, for `vitbench plugins` and the field's help.
    placements: backend name -> 'module:function' of its placement there (the built-in modes: none, each
        backend places them itself).
    """

    name: str
    description: str
    placements: Mapping[str, str] = field(default_factory=dict)


def register_parallelism(mode: ParallelMode, replace: bool = False) -> ParallelMode:
    """Add a mode (its module's import registers it; see vitbench.registry for where outside modules come from)."""
    register(Kind.PARALLELISM, mode.name, mode, description=mode.description, replace=replace,
             provides=tuple(mode.placements), module=sys._getframe(1).f_globals.get("__name__"))
    return mode


def parallelism_names() -> tuple[str, ...]:
    """Every registered mode's name: the built-in ones first."""
    return tuple(entries(Kind.PARALLELISM))


def known_parallelism(value: str) -> str:
    """`value` if it names a registered mode, else a ValueError listing them (a pydantic validator)."""
    if value not in parallelism_names():
        raise ValueError(f"unknown parallelism {value!r}; allowed: {', '.join(parallelism_names())}")
    return value


def parallelism_help() -> str:
    """`--parallelism`'s help: the built-in modes and where to see every mode (reading the registry here would
    import the plug-ins as the command line is made, and a broken one would stop every command)."""
    return ("With --devices N: " + " | ".join(p.value for p in Parallelism)
            + " or a mode from a plug-in (`vitbench plugins` lists every mode and what it does).")


def runs_on(mode: str, backend: str, built_in: tuple[str, ...]) -> bool:
    """Whether backend `backend`, whose spec lists the built-in modes `built_in`, runs `mode`: one of those, or a
    registered mode that names a placement for it."""
    if mode in built_in:
        return True
    found = lookup(Kind.PARALLELISM, mode)
    return found is not None and backend in found.obj.placements


def placement(mode: str, backend: str) -> Callable:
    """The function that places a step of `mode` on `backend` (a mode from outside vitbench; the built-in ones
    are each backend's own code)."""
    found = lookup(Kind.PARALLELISM, mode)
    target = found.obj.placements.get(backend) if found is not None else None
    if target is None:
        raise ConfigError(f"parallelism {mode!r} has no placement on backend {backend!r}")
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


for _mode, _what in ((Parallelism.DP, "data parallel: the batch split, parameters replicated, gradients "
                                      "all-reduced"),
                     (Parallelism.FSDP, "fully sharded data parallel: the batch split, parameters, gradients and "
                                        "optimizer state sharded")):
    register_parallelism(ParallelMode(_mode.value, _what))
