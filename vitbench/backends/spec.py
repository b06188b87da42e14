"""A backend as the registry knows it before anything heavy is imported (`BackendSpec`), and how backends are
registered and looked up (`register_backend`, `backend_names`, `get_backend`, `BackendName` for pydantic
models)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator

from vitbench.backends.kinds import DEFAULT_DEVICES, DEFAULT_PARALLELISM, Capability, DeviceKind, Parallelism
from vitbench.backends.parallel import runs_on
from vitbench.errors import BackendUnavailable, ConfigError

if TYPE_CHECKING:
    from vitbench.backends.base import Backend

def study_setting(field: str, value: Any) -> str:
    """How a message names a field's setting in a study: `compile: true`."""
    import json

    return f"`{field}: {json.dumps(value)}`"


# A parse-time check of a trial's fields: {field: value} -> [(field, problem)]; no framework imported.
Check = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


@dataclass(frozen=True)
class BackendSpec:
    """A backend as the registry knows it before anything heavy is imported."""

    name: str
    implementation: str  # "module:Class" of the Backend subclass
    requires: tuple[str, ...]  # modules that must be importable
    capabilities: frozenset[Capability]
    precisions: tuple[str, ...]
    devices: str  # human description of the device names it takes, for messages and `vitbench plugins`
    preload: tuple[str, ...] = ()  # modules a fork server may import once ahead of trials (no device touched)
    distributions: tuple[str, ...] = ()  # packages whose versions every row of this backend records
    # packages its FLOP counters use beyond `distributions`: their versions key its cached counts (value_cache)
    counter_distributions: tuple[str, ...] = ()
    # prefixes of the environment variables its compilers and tracers read: they key every cached value
    # (vitbench.value_cache.compiler_env), so that a changed flag never reuses a value computed under another
    compiler_env: tuple[str, ...] = ()
    check: Check | None = None
    install: str = ""  # how to get what `requires` names, e.g. "pip install 'vitbench[jax]'"
    description: str = ""
    # The backend's device string per device kind ("{index}" filled in): how a peak measured on one backend is
    # measured on another for the same physical device. Pairs, so that a spec stays hashable.
    device_names: tuple[tuple[DeviceKind, str], ...] = ((DeviceKind.CPU, "cpu"),)
    compile_modes: tuple[str, ...] = ()  # modes of the optional compiler (`compile_mode`), first = its default
    # It lays a step's input and weights out in either memory format on request (the `channels_last` field);
    # False: its layout is its own (XLA's, a runtime's), and a trial asking for one is refused.
    memory_formats: bool = False
    # How it spreads a step over several local devices (`devices` > 1); none: one device only.
    parallelisms: tuple[Parallelism, ...] = ()
    # True: one process per device, launched by the trial (vitbench.measure.ranks); False: one process drives
    # every device (e.g. a sharded XLA computation).
    process_per_device: bool = False

    def device_string(self, kind: DeviceKind, index: int = 0) -> str | None:
        """This backend's name for device `index` of `kind`, or None when it cannot run on that kind."""
        template = dict(self.device_names).get(kind)
        return template.format(index=index) if template is not None else None

    def device_kind(self, device: str) -> DeviceKind | None:
        """The kind of device this backend's `device` string names ('cuda:1' -> GPU for torch; the inverse of
        device_string, the index aside), or None when it names none of this backend's devices."""
        name = device.partition(":")[0]
        return next((kind for kind, template in self.device_names if template.partition(":")[0] == name), None)

    def problems(self, fields: Mapping[str, Any], needs: frozenset[Capability] = frozenset(),
                 setting: Callable[[str, Any], str] | None = None) -> list[tuple[str, str]]:
        """Why this backend cannot run a trial with these fields (empty: it can). A message that names another
        field's setting says it as `setting(field, value)` does: a study's `compile: true` by default, the
        command line's --compile from the CLI."""
        setting = setting or study_setting
        out = [("task", f"backend {self.name!r} cannot {c.does} (it provides: "
                        f"{', '.join(sorted(c.value for c in self.capabilities))}); backends that can "
                        f"{c.does}: {', '.join(backends_that(c)) or '(none registered)'}")
               for c in sorted(needs - self.capabilities, key=str)]
        if "precision" in fields and fields["precision"] not in self.precisions:
            out.append(("precision", f"backend {self.name!r} runs {', '.join(self.precisions)}"))
        if fields.get("compile") and Capability.COMPILE not in self.capabilities:
            out.append(("compile", f"backend {self.name!r} has no optional compiler (it always compiles, or "
                                   f"never): leave out {setting('compile', True)}"))
        mode = fields.get("compile_mode")
        if mode is not None:
            if not fields.get("compile"):
                out.append(("compile_mode", f"a compile mode needs {setting('compile', True)}"))
            elif Capability.COMPILE in self.capabilities and mode not in self.compile_modes:
                out.append(("compile_mode", f"backend {self.name!r} compiles in modes "
                                            f"{', '.join(self.compile_modes) or '(none)'}"))
        if fields.get("channels_last") is not None and not self.memory_formats:
            out.append(("channels_last", f"backend {self.name!r} chooses its own memory layout: leave out "
                                         f"{setting('channels_last', fields['channels_last'])}"))
        out += self._group_problems(fields)
        if self.check is not None:
            out += self.check(fields)
        return out

    def _group_problems(self, fields: Mapping[str, Any]) -> list[tuple[str, str]]:
        """`devices` and `parallelism` against what this backend can spread a step with (absent: the defaults)."""
        devices = fields.get("devices", DEFAULT_DEVICES)
        parallelism = fields.get("parallelism", DEFAULT_PARALLELISM.value)
        if devices == DEFAULT_DEVICES and parallelism == DEFAULT_PARALLELISM.value:
            return []
        if not self.parallelisms:
            return [("devices", f"backend {self.name!r} runs a step on one device only")]
        if not runs_on(parallelism, self.name, tuple(p.value for p in self.parallelisms)):
            return [("parallelism", f"backend {self.name!r} runs parallelisms "
                                    f"{', '.join(p.value for p in self.parallelisms)} (and any registered one "
                                    "with a placement for it)")]
        batch = fields.get("batch_size")
        if isinstance(batch, int) and isinstance(devices, int) and batch % devices:
            return [("batch_size", f"the global batch {batch} does not split evenly over {devices} devices: "
                                   f"use a multiple of {devices}")]
        return []

    def load(self) -> type[Backend]:
        module, _, cls = self.implementation.partition(":")
        try:
            return getattr(importlib.import_module(module), cls)
        except ImportError as e:
            raise BackendUnavailable(f"backend {self.name!r} needs {', '.join(self.requires)}: {e}") from e


# -----------------------------------------------------------------------------------------------------------------
# Registration and lookup
# -----------------------------------------------------------------------------------------------------------------
def register_backend(spec: BackendSpec) -> BackendSpec:
    """Called by a backend package's __init__: the registry learns the backend without importing it."""
    from vitbench.registry import Kind, register

    caller = sys._getframe(1).f_globals.get("__name__")  # the backend package that registers itself
    register(Kind.BACKEND, spec.name, spec, requires=spec.requires,
             provides=tuple(sorted(c.value for c in spec.capabilities)), description=spec.description,
             module=caller)
    return spec


def backend_spec(name: str) -> BackendSpec:
    from vitbench.registry import Kind, get

    return get(Kind.BACKEND, name)


def backend_names() -> tuple[str, ...]:
    from vitbench.registry import Kind, names

    return names(Kind.BACKEND)


def backends_that(capability: Capability) -> tuple[str, ...]:
    """The registered backends whose spec provides `capability`, in registration order."""
    return tuple(n for n in backend_names() if capability in backend_spec(n).capabilities)


def device_kind(device: str) -> DeviceKind | None:
    """The kind of device `device` names in any registered backend's spelling (torch's 'cuda:0', JAX's 'gpu'),
    or None when none spells a device so."""
    return next((k for n in backend_names() if (k := backend_spec(n).device_kind(device)) is not None), None)


def device_index(device: str) -> int | None:
    """The device number after a device name's ':' ('cuda:1' -> 1; 'cpu' -> 0), or None when what follows the
    ':' is not a number: the one reading of a device string's index."""
    _, colon, index = device.partition(":")
    if not colon:
        return 0
    return int(index) if index.isdigit() else None


def device_spellings() -> list[str]:
    """Every registered backend's names of a device kind ('cpu', 'cuda', 'gpu', 'tpu'), in registration order."""
    return list(dict.fromkeys(t.partition(":")[0] for n in backend_names() for _, t in backend_spec(n).device_names))


def default_backend() -> str:
    """The first registered backend: what a study or command uses when it names none."""
    names = backend_names()
    if not names:
        raise BackendUnavailable("no backend is registered")
    return names[0]


def get_backend(name: str) -> Backend:
    """A fresh backend instance; an unknown name lists the registered ones, a missing framework says which."""
    from vitbench.registry import Kind, entry

    e = entry(Kind.BACKEND, name)
    missing = e.missing()
    if missing:
        raise BackendUnavailable(f"backend {name!r} is not available here: missing {', '.join(missing)}"
                                 + (f" ({e.obj.install})" if e.obj.install else ""))
    return e.obj.load()()


def transfer_backend(name: str) -> Backend:
    """A fresh instance of the named backend for the transfer protocols (init, weights, train, features, logits);
    a backend without Capability.TRANSFER is a ConfigError."""
    if Capability.TRANSFER not in backend_spec(name).capabilities:
        raise ConfigError(f"backend {name!r} does not implement transfer (pre-training, features, fine-tuning)")
    return get_backend(name)


def _known_backend(name: str) -> str:
    if name not in backend_names():
        raise ValueError(f"unknown backend {name!r}; allowed: {', '.join(backend_names())}")
    return name


# A backend name in a pydantic model: validated against the registry (so no list of names is written anywhere).
BackendName = Annotated[str, AfterValidator(_known_backend)]

