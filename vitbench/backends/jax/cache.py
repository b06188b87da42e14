"""JAX's persistent compilation cache under vitbench's cache directory, and how many compiles it answered.

Where: <cache>/compile/jax-<jax>-jaxlib-<jaxlib>-<host> (vitbench.paths.compile_cache_dir), set before the first
compile of a trial process. Every executable is written, however small or quick to compile (minimum compile time 0
s, no minimum entry size): on a CPU most of a tiny model's compiles take under JAX's default threshold of 1 s.

What keeps a wrong executable out (jax/_src/cache_key.py, jax 0.10): JAX's key hashes the StableHLO module (so the
precision of every dot and convolution, the shapes and dtypes, the donated buffers), jaxlib's version, the
platform and its version, $XLA_FLAGS (threads=1 adds --xla_cpu_multi_thread_eigen=false there), the compile
options and the devices' topology. vitbench adds the directory's own name: the versions (a new jax starts an
empty cache instead of growing the old one) and this host's CPU model and architecture, because XLA:CPU compiles
for the host's instruction set and a home directory may be shared by machines with different CPUs.

Counting: JAX records '/jax/compilation_cache/cache_hits' for an executable read from the cache and
'/jax/compilation_cache/cache_misses' for one compiled and written (jax.monitoring events); `counts()` returns the
totals of this process, read by vitbench.measure.throughput around a step's compile.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import jax
from jax import monitoring

from vitbench.env import cpu_model, distribution_version
from vitbench.paths import compile_cache_dir, open_compile_cache

HIT = "/jax/compilation_cache/cache_hits"
MISS = "/jax/compilation_cache/cache_misses"
_counts = {HIT: 0, MISS: 0}
_state: dict = {"listening": False, "dir": None}


def _listen(event: str, **_kwargs) -> None:
    if event in _counts:
        _counts[event] += 1


def subdir() -> str:
    host = hashlib.sha256(f"{cpu_model()}|{platform.machine()}".encode()).hexdigest()[:8]
    return f"jax-{distribution_version('jax')}-jaxlib-{distribution_version('jaxlib')}-{host}"


def enable() -> Path | None:
    """Turn the persistent cache on in this process (once; None when $VITBENCH_COMPILE_CACHE turns it off)."""
    if not _state["listening"]:
        monitoring.register_event_listener(_listen)
        _state["listening"] = True
    path = compile_cache_dir(subdir())
    if path is None or _state["dir"] == path:
        return path
    open_compile_cache(path)
    if _state["dir"] is not None:  # another directory in this process (tests): JAX opens its cache once
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # -1: no size limit (jax's config help)
    _state["dir"] = path
    return path


def counts() -> tuple[int, int]:
    """(executables read from the persistent cache, executables compiled and written to it) in this process."""
    return _counts[HIT], _counts[MISS]
