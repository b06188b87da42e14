"""Plug-ins: backends, tasks and executors by name, each registered once by the module that owns it.

A plug-in module registers what it provides when it is imported (`register(...)`). vitbench's own plug-ins are
the modules in BUILTIN_MODULES; outside code adds modules without editing vitbench:

- an entry point in the group `vitbench.plugins` whose value names a module (`mypkg.vitbench_plugin`), or
- $VITBENCH_PLUGINS, comma-separated module names (handy for a plug-in that is not installed as a package).

Registration is cheap: a backend is registered by a small descriptor (its name, what it requires, what it can
do) and its implementation is imported only when used, so `vitbench plugins` or parsing a study never imports
torch or jax. Shared code looks plug-ins up here and never names a specific one.

Every kind's built-in modules are imported before the first outside module (when there is one: only then, since a
trial process needs only some kinds): an outside plug-in may register any kind, and a built-in imported after it
would collide with it, blaming vitbench's own module, or clobber a `replace=True` override.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from vitbench.errors import ConfigError, PluginError, VitbenchError, clip, shorten

ENTRY_POINT_GROUP = "vitbench.plugins"
ENV_PLUGINS = "VITBENCH_PLUGINS"
class Kind(enum.Enum):
    BACKEND = "backend"
    TASK = "task"
    EXECUTOR = "executor"
    FAMILY = "family"  # a model family (vitbench.models.families)
    PARALLELISM = "parallelism"  # how a step spreads over devices (vitbench.backends.parallel)


# The package's own plug-in modules by kind, in the order their entries are listed (the first backend is the
# default). Only the kind asked for is imported: a trial process needs the backends and its own task, not the rest.
BUILTIN_MODULES: dict[Kind, tuple[str, ...]] = {
    Kind.BACKEND: ("vitbench.backends.torch", "vitbench.backends.jax", "vitbench.backends.onnxruntime",
                   "vitbench.backends.openvino"),
    Kind.TASK: ("vitbench.tasks.bench", "vitbench.tasks.max_batch", "vitbench.tasks.flops",
                "vitbench.tasks.calibration", "vitbench.tasks.pretrain", "vitbench.tasks.fewshot",
                "vitbench.tasks.finetune", "vitbench.tasks.inspection", "vitbench.tasks.serve"),
    Kind.EXECUTOR: ("vitbench.executors.local", "vitbench.executors.slurm", "vitbench.executors.ray"),
    Kind.FAMILY: ("vitbench.models.families.vit", "vitbench.models.families.bit",
                  "vitbench.models.families.hybrid", "vitbench.models.families.axial",
                  "vitbench.models.families.timm"),
    Kind.PARALLELISM: ("vitbench.backends.parallel",),
}


@dataclass(frozen=True)
class Entry:
    """One registered plug-in.

    obj: the plug-in itself (a Task or Executor class, a backend's descriptor).
    requires: importable modules it needs to run (checked without importing them).
    provides: what it can do (a backend's capabilities), for `vitbench plugins` and study validation.
    source: where the registration came from ('vitbench', 'entry point <name>', '$VITBENCH_PLUGINS').
    """

    kind: Kind
    name: str
    obj: Any
    module: str
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    description: str = ""
    source: str = "vitbench"

    def missing(self) -> list[str]:
        """Required modules that are not importable here (empty: the plug-in can run)."""
        out = []
        for mod in self.requires:
            try:
                found = importlib.util.find_spec(mod) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                out.append(mod)
        return out


@dataclass
class _State:
    entries: dict[Kind, dict[str, Entry]] = field(default_factory=lambda: {k: {} for k in Kind})
    loaded: set[Kind] = field(default_factory=set)  # kinds whose built-in modules were imported
    outside_loaded: bool = False  # entry points and $VITBENCH_PLUGINS imported
    loading: str = "vitbench"  # source label of the module being imported
    plugin: str = ""  # the outside module being imported (named by a clash it causes)
    builtin_depth: int = 0  # built-in imports under way: outside modules wait for them to finish


_STATE = _State()


def register(kind: Kind, name: str, obj: Any, *, requires: tuple[str, ...] = (), provides: tuple[str, ...] = (),
             description: str = "", replace: bool = False, module: str | None = None) -> Entry:
    """Add a plug-in. Registering the same object twice is harmless; another object under a taken name is an
    error unless `replace=True` (an outside plug-in overriding a built-in must say so). `module`: where it lives
    (default: the object's module)."""
    module = module or getattr(obj, "__module__", None) or type(obj).__module__
    entry = Entry(kind, name, obj, module, tuple(requires), tuple(provides), description, _STATE.loading)
    old = _STATE.entries[kind].get(name)
    if old is not None and old.obj is not obj and not replace:
        who = module if _STATE.loading == "vitbench" else registering(module)
        raise ConfigError(f"{kind.value} {name!r} is already registered by {old.module} ({old.source}); "
                          f"{who} must pass replace=True to override it, or register it under another name")
    _STATE.entries[kind][name] = entry
    return entry


def registering(module: str) -> str:
    """Who is registering now, for an error about a clash: the outside plug-in being imported with its source
    ('plug-in mymod ($VITBENCH_PLUGINS)', and `module` where that is another of its modules), else `module`."""
    if _STATE.loading == "vitbench":
        return module
    where = "" if module == _STATE.plugin else f", in {module}"
    return f"plug-in {shorten(_STATE.plugin)} ({_STATE.loading}{where})"


def _import(module: str, source: str) -> None:
    previous = _STATE.loading, _STATE.plugin
    _STATE.loading, _STATE.plugin = source, "" if source == "vitbench" else module
    try:
        importlib.import_module(module)
    finally:
        _STATE.loading, _STATE.plugin = previous


def _load_builtin(kind: Kind) -> None:
    if kind in _STATE.loaded:
        return
    _STATE.loaded.add(kind)  # first: a module being imported may ask for its own kind
    _STATE.builtin_depth += 1
    try:
        for mod in BUILTIN_MODULES[kind]:
            _import(mod, "vitbench")
    except BaseException:
        _STATE.loaded.discard(kind)  # not loaded: the next call tries again (and says why again)
        raise
    finally:
        _STATE.builtin_depth -= 1


def load_plugins(kind: Kind | None = None) -> None:
    """Import the built-in plug-in modules of `kind` (None: every kind), then, once per process, the modules of
    entry points and of $VITBENCH_PLUGINS (which may register any kind), after every kind's built-ins (the module
    docstring says why). Not while a built-in module is being imported: the outermost call imports them."""
    for k in [kind] if kind is not None else list(Kind):
        _load_builtin(k)
    if _STATE.outside_loaded or _STATE.builtin_depth:
        return
    _STATE.outside_loaded = True
    try:
        outside = _outside_modules()
        for k in Kind if outside else ():
            _load_builtin(k)
        _load_outside(outside)
    except BaseException:
        _STATE.outside_loaded = False
        raise


def _outside_modules() -> list[tuple[str, str]]:
    """(module, source) of each entry point, then of each module on $VITBENCH_PLUGINS."""
    from importlib.metadata import entry_points

    outside = [(ep.value.split(":", 1)[0], f"entry point {ep.name}")
               for ep in entry_points(group=ENTRY_POINT_GROUP)]
    env = (m.strip() for m in os.environ.get(ENV_PLUGINS, "").split(","))
    return outside + [(m, f"${ENV_PLUGINS}") for m in env if m]


def _load_outside(outside: list[tuple[str, str]]) -> None:
    """Import the outside plug-in modules; a broken one is a PluginError saying why (one raising vitbench's own
    error, a name it registers clashing with a built-in's, keeps its message, which names it)."""
    for mod, source in outside:
        try:
            _import(mod, source)
        except PluginError:
            raise
        except VitbenchError as e:  # a PluginError: not blamed on a command's option (`models --family: ...`)
            raise PluginError(str(e)) from None
        except ModuleNotFoundError as e:
            if e.name and mod.startswith(e.name):
                raise PluginError(f"plug-in {shorten(mod)} ({source}) cannot be imported: no such module (is it "
                                  "on PYTHONPATH?)") from None
            raise PluginError(f"plug-in {shorten(mod)} ({source}) failed to import: it needs the module "
                              f"{shorten(e.name)}, which is not installed") from None
        except SystemExit as e:  # sys.exit() in a plug-in's import ended every command silently, with its code
            raise PluginError(f"plug-in {shorten(mod)} ({source}) called sys.exit({clip(repr(e.code), 60)}) while "
                              "being imported: a plug-in registers, it never ends the process") from None
        except KeyboardInterrupt:  # the user's, not the plug-in's: it ends the command as everywhere
            raise
        except BaseException as e:  # noqa: BLE001 - a broken plug-in (even one raising a BaseException of its own)
            raise PluginError(f"plug-in {shorten(mod)} ({source}) failed to import: {type(e).__name__}: "
                              f"{clip(str(e), 300)}") from None


def entries(kind: Kind) -> dict[str, Entry]:
    """Every registered plug-in of `kind`: vitbench's own in BUILTIN_MODULES order, then the others as
    registered."""
    load_plugins(kind)
    order = {m: i for i, m in enumerate(BUILTIN_MODULES[kind])}
    ranked = sorted(enumerate(_STATE.entries[kind].items()),
                    key=lambda ie: (order.get(ie[1][1].module, len(order)), ie[0]))
    return dict(item for _, item in ranked)


def registered(kind: Kind) -> dict[str, Entry]:
    """The plug-ins of `kind` registered so far, loading none (for code that runs while plug-ins load)."""
    return dict(_STATE.entries[kind])


def lookup(kind: Kind, name: str) -> Entry | None:
    """The plug-in `name` of `kind` if registered (loading the kind's plug-ins once if it is not yet)."""
    found = _STATE.entries[kind].get(name)
    if found is None and (kind not in _STATE.loaded or not _STATE.outside_loaded):
        load_plugins(kind)
        found = _STATE.entries[kind].get(name)
    return found


def names(kind: Kind) -> tuple[str, ...]:
    return tuple(entries(kind))


def entry(kind: Kind, name: str) -> Entry:
    """The plug-in `name`; an unknown name is a ConfigError listing the registered ones."""
    found = entries(kind).get(name)
    if found is None:
        raise ConfigError(f"unknown {kind.value} {name!r}; allowed: {', '.join(names(kind)) or '(none)'}")
    return found


def get(kind: Kind, name: str) -> Any:
    return entry(kind, name).obj


def all_entries() -> Iterator[Entry]:
    for kind in Kind:
        yield from entries(kind).values()
