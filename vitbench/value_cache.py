"""A persistent cache of small computed values that a warm sweep would otherwise recompute in every trial (issue
34): a backend's FLOP counts (vitbench.measure.flops), JAX's parameter shapes (vitbench.backends.jax.backend).

Where: <cache>/values/<what>/<hash of the key>.json, under the machine's cache directory
(vitbench.paths.cache_dir). The switch of the persistent compile caches ($VITBENCH_COMPILE_CACHE,
vitbench.paths.compile_cache_on) turns this cache off too: its values are what tracing and compiling produce, a
run that asks for cold compiles asks for them recomputed, and `vitbench ab` already gives both sides the same
switch and directory (compare/sides.py::same_cache).

The key is everything a value may depend on, so that a change never reuses a wrong value:
- `source`: a hash of vitbench's own source (every .py file of the package: the modules that compute a value
  and everything they import), of the files that define the objects the caller names in `code` (a plug-in's
  backend lives outside the package), and of every .py file of the top-level packages of the modules it names in
  `modules` (a model family's plug-in outside the package: vitbench.models.families.family_modules);
- `frameworks`: the versions of the distributions the caller names (torch, timm, fvcore; jax, jaxlib, flax);
- `compiler_env`: the environment variables that change what XLA, JAX, inductor, Dynamo or torch.jit do (each
  backend's `BackendSpec.compiler_env`);
- `host`: the CPU model and architecture;
- `request`: what the caller asks (the model spec's fields, resolution, classes, precision, device, ...).
An entry holds its key whole and is used only when that key equals the one asked for. Entries are JSON written
atomically (a temporary file renamed into place; never pickle); one that cannot be read, parsed or decoded
(the caller's `decode` raises ValueError, TypeError or KeyError) is a miss, recomputed and written again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import json
import os
import platform
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from vitbench.env import cpu_model, distribution_version
from vitbench.paths import cache_dir, compile_cache_on, mark_used, write_atomic
from vitbench.record import now

T = TypeVar("T")

SUBDIR = "values"
_DECODE_ERRORS = (ValueError, TypeError, KeyError)


@dataclass(frozen=True)
class Remembered(Generic[T]):
    """A value, whether it came from the cache, and when it was computed (ISO 8601, UTC)."""

    value: T
    cached: bool
    at: str


def values_dir() -> Path | None:
    """<cache>/values, or None when the persistent caches are off ($VITBENCH_COMPILE_CACHE). Not created here."""
    return cache_dir() / SUBDIR if compile_cache_on() else None


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 of vitbench's Python source: every .py file of the package, by relative path and content."""
    root = Path(__file__).resolve().parent  # the package's directory
    return _py_files_hash([(root, p) for p in sorted(root.rglob("*.py"))])


@functools.lru_cache(maxsize=8)
def source_hash_of(subpackages: tuple[str, ...], root: Path | None = None) -> str:
    """sha256 of part of vitbench's source: the package's own top-level .py files and every .py file of the named
    subpackages, by relative path and content. For a value known to be made by that code only (an exported graph:
    the model and backend code; vitbench.backends.graphs), so that a change elsewhere (the report, say) keeps it.
    `root`: the package's directory (tests)."""
    root = root or Path(__file__).resolve().parent
    files = sorted(root.glob("*.py")) + [p for sub in sorted(subpackages) for p in sorted((root / sub).rglob("*.py"))]
    return _py_files_hash([(root, p) for p in files])


def _py_files_hash(files: list[tuple[Path, Path]]) -> str:
    """sha256 of (root, file) pairs, each by its path relative to its root and its content."""
    h = hashlib.sha256()
    for root, p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def code_hash(objs: Iterable[Any]) -> str:
    """sha256 of the source files defining `objs` (classes, functions, modules), by content (not by path: the
    same code in another checkout is the same code)."""
    h = hashlib.sha256()
    for f in sorted({str(Path(inspect.getfile(o)).resolve()) for o in objs}):
        h.update(Path(f).read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=64)
def _tree_hash(top: str) -> str:
    """sha256 of the .py files of top-level module or package `top` (located, not imported), by relative path and
    content; "" where it has no source files (a built-in or extension module, or none found)."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    roots = [Path(p) for p in spec.submodule_search_locations or ()]  # a package (namespace ones too)
    files = [(r, p) for r in roots for p in sorted(r.rglob("*.py"))]
    if not roots and spec.origin and spec.origin.endswith(".py"):
        files = [(Path(spec.origin).parent, Path(spec.origin))]
    return _py_files_hash(files) if files else ""


def module_sources_hash(modules: Iterable[str]) -> str:
    """sha256 of the source of the top-level packages that hold `modules` (names), vitbench's own left to
    source_hash: once per process, like source_hash (a trial's process sees the plug-in as it is when it
    starts)."""
    own = __name__.partition(".")[0]
    h = hashlib.sha256()
    for top in sorted({m.partition(".")[0] for m in modules} - {own}):
        h.update(top.encode() + b"\0" + _tree_hash(top).encode() + b"\0")
    return h.hexdigest()


def compiler_env_prefixes() -> tuple[str, ...]:
    """The prefixes of the environment variables read by the compilers and tracers a cached value comes from:
    every registered backend's `compiler_env` (vitbench.backends.spec.BackendSpec), read from the registry as
    env.backend_distributions reads their packages, so this module imports nothing above it."""
    from vitbench.registry import Kind, entries

    return tuple(dict.fromkeys(p for e in entries(Kind.BACKEND).values() for p in e.obj.compiler_env))


def compiler_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(compiler_env_prefixes())}


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str, allow_nan=False, separators=(",", ":"))


def key(what: str, request: dict, frameworks: Iterable[str], code: Iterable[Any] = (),
        modules: Iterable[str] = ()) -> dict:
    """The whole key of a value (see the module docstring), as JSON would give it back."""
    k = {"what": what, "source": source_hash(), "code": code_hash(code), "modules": module_sources_hash(modules),
         "frameworks": {d: distribution_version(d) for d in sorted(set(frameworks))},
         "compiler_env": compiler_env(), "host": {"cpu": cpu_model(), "machine": platform.machine()},
         "request": request}
    return json.loads(_canonical(k))


def entry_path(root: Path, k: dict) -> Path:
    return root / k["what"] / f"{hashlib.sha256(_canonical(k).encode()).hexdigest()[:32]}.json"


def _no_constant(name: str):
    raise ValueError(f"non-finite number {name} in a cached value")


def _read(path: Path, k: dict, decode: Callable[[Any], T]) -> Remembered[T] | None:
    try:
        d = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
        if not isinstance(d, dict) or d.get("key") != k or not isinstance(d.get("at"), str):
            return None
        hit = Remembered(decode(d["value"]), True, d["at"])
    except (OSError, UnicodeDecodeError, *_DECODE_ERRORS):  # json.JSONDecodeError is a ValueError
        return None
    mark_used(path)
    return hit


def remembered(what: str, request: dict, frameworks: Iterable[str], compute: Callable[[], Any],
               decode: Callable[[Any], T] = lambda v: v, code: Iterable[Any] = (),
               modules: Iterable[str] = ()) -> Remembered[T]:
    """The value of `compute()` for this key: read from the cache when an entry with exactly this key is there,
    else computed now and written (a value JSON cannot hold, or a cache that cannot be written, is not kept; the
    value is returned either way). `compute` returns JSON data (dicts, lists, str, int, finite float: JSON keeps
    a float exactly); `decode` turns it, or the cached copy, into what the caller uses (so both are the same
    type: a tuple comes back from JSON as a list) and raises ValueError, TypeError or KeyError on anything
    malformed."""
    root = values_dir()
    k = key(what, request, frameworks, code, modules) if root is not None else None
    if root is not None:
        hit = _read(entry_path(root, k), k, decode)
        if hit is not None:
            return hit
    at = now()
    value = compute()
    if root is not None:
        try:
            entry = json.dumps({"key": k, "value": value, "at": at}, sort_keys=True, allow_nan=False)
            write_atomic(entry_path(root, k), entry)
        except (OSError, TypeError, ValueError):  # a read-only cache; not JSON, a non-finite number: not kept
            pass
    return Remembered(decode(value), False, at)
