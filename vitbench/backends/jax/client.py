"""JAX's platform clients, created once per process: GPU memory on demand, CPU thread pools sized by request.

- GPU memory: XLA_PYTHON_CLIENT_PREALLOCATE=false and XLA_CLIENT_MEM_FRACTION=0.95 are set (unless the user set
  them; GPU_MEMORY_ENV, declared in vitbench.models.flax) before JAX creates its GPU client, in forked trials too,
  so JAX neither grabs 75 % of the device up front nor stops at 75 % of it: peaks and the largest batch are then
  the model's, not the allocator's. Out-of-memory surfaces as RESOURCE_EXHAUSTED and is caught as an OOM.
- CPU threads: XLA's CPU client sizes its thread pools from the CPUs the process may run on when JAX first
  initialises; there is no runtime setting. `threads=N` therefore restricts the process's CPU affinity to N CPUs
  while the client is created (plus --xla_cpu_multi_thread_eigen=false for N=1) and then gives every thread its
  CPUs back, so the pools have N threads that the OS schedules freely. Once JAX is initialised the count is
  fixed: asking for another raises ConfigError. Without os.sched_setaffinity (macOS) the pools can be sized to 1
  (the flag) or all CPUs only: another count raises ConfigError too, rather than a row recording threads XLA never
  ran. threads=None leaves JAX's default (all allowed CPUs): XLA's pools were measured not to stall under other
  load as torch's OpenMP pool does (docs/measurement.md, "Threads on a busy machine"), so an unset count is not
  lowered to the free cores.
- CPU devices: `devices=N` > 1 on the CPU platform adds --xla_force_host_platform_device_count=N to XLA_FLAGS
  before the client starts (N host devices sharing the process's cores); after start the count is fixed too.
"""

from __future__ import annotations

import os
from typing import Any

from vitbench.errors import BackendUnavailable, ConfigError
from vitbench.models.flax import GPU_MEMORY_ENV  # noqa: F401 - set on import, before jax makes a GPU client

PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}
_state: dict[str, Any] = {"cpu_threads": None}  # what this module initialised the CPU client with
HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def _allowed_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count()))


def _jax_initialised() -> bool:
    """Has JAX already created its platform clients (after which thread pools and allocators are fixed)?"""
    try:
        from jax._src import xla_bridge

        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:  # noqa: BLE001 - private API moved: assume the worst
        return True


def _add_host_devices(devices: int) -> None:
    """Ask XLA for `devices` CPU devices (before JAX starts; a count already in XLA_FLAGS is the user's)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if devices > 1 and HOST_DEVICES_FLAG not in flags and not _jax_initialised():
        os.environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICES_FLAG}={devices}".strip()


def _init_cpu_client(threads: int | None) -> int:
    """Create JAX's clients, with the CPU pools sized to `threads` CPUs if JAX is not initialised yet.

    Returns the CPU thread count the client was created with (best knowledge)."""
    if _state["cpu_threads"] is not None:
        return _state["cpu_threads"]
    allowed = _allowed_cpus()
    if _jax_initialised():  # someone else created the client: it uses the CPUs allowed back then
        _state["cpu_threads"] = len(allowed)
        return len(allowed)
    n = len(allowed) if threads is None else min(threads, len(allowed))
    if threads == 1 and "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    restrict = n < len(allowed) and hasattr(os, "sched_setaffinity")
    if restrict:
        os.sched_setaffinity(0, allowed[:n])
    try:
        import jax

        jax.devices()  # creates the clients (and their thread pools) now
    finally:
        if restrict:
            _restore_affinity(allowed)
    _state["cpu_threads"] = n
    return n


def _restore_affinity(cpus: list[int]) -> None:
    """Give every thread of the process (XLA's new pool threads inherited the restricted mask) its CPUs back:
    the pools keep their size, the OS schedules them freely (as torch.set_num_threads would)."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:  # a thread that ended meanwhile
            pass


def select_device(device: str, threads: int | None, allowed: str, devices: int = 1) -> tuple[Any, str, int | None]:
    """(jax device, platform, CPU threads or None) for `device` ('cpu', 'gpu:1', ...), starting the clients
    with `threads` CPU threads (and `devices` host devices on CPU) if JAX has not started yet. `allowed`
    describes valid devices for messages."""
    from vitbench.backends.spec import device_index

    platform, index = PLATFORMS.get(device.partition(":")[0]), device_index(device)
    if platform is None or index is None:
        raise ConfigError(f"unknown device {device!r}; allowed: {allowed}")
    if threads is not None and threads < 1:
        raise ConfigError(f"threads must be >= 1, got {threads}")
    n_cpus = len(_allowed_cpus())
    if platform == "cpu" and threads is not None and threads > n_cpus:
        raise ConfigError(f"threads={threads}, but this process may use {n_cpus} CPU(s); XLA sizes its CPU "
                          f"pools by the CPUs available, so use threads <= {n_cpus}")
    if platform == "cpu" and threads is not None and 1 < threads < n_cpus and not hasattr(os, "sched_setaffinity"):
        raise ConfigError(f"threads={threads}: XLA sizes its CPU pools by the CPUs this process may use, which "
                          "this OS cannot restrict (no os.sched_setaffinity), so JAX here takes threads=1 or "
                          f"threads={n_cpus} (all CPUs), or none (its default: all)")
    if platform == "cpu":
        _add_host_devices(devices)
    cpu_threads = _init_cpu_client(threads if platform == "cpu" else None)
    if platform == "cpu" and threads is not None and threads != cpu_threads:
        raise ConfigError(
            f"threads={threads} requested, but JAX's CPU client was already created with {cpu_threads} "
            "threads in this process (XLA fixes its pools at start-up); run in a fresh process or use "
            f"threads={cpu_threads}")
    import jax

    try:
        present = jax.devices(platform)
    except RuntimeError as e:
        raise BackendUnavailable(f"device {device!r} requested but JAX has no {platform} backend here "
                                 f"({e}); use --device cpu") from e
    i = index
    if i >= len(present):
        raise BackendUnavailable(f"device {device!r}: only {len(present)} {platform} device(s) present")
    if devices > len(present):
        how = (f" (XLA fixes the number of CPU devices when JAX starts: run in a fresh process, or set "
               f"XLA_FLAGS={HOST_DEVICES_FLAG}={devices})" if platform == "cpu" else "")
        raise ConfigError(f"devices={devices} but JAX has {len(present)} {platform} device(s) in this process{how}")
    return present[i], platform, (cpu_threads if platform == "cpu" else None)
