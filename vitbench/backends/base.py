"""The Backend interface every framework implements; measurements only talk to this.

A measurement never imports torch or jax: it asks the backend to prepare a `Workload` (model + inputs +
optimizer on the device), to run and time steps with the right synchronisation, and to report memory.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from vitbench.errors import looks_like_oom

Task = Literal["infer", "train"]
Precision = Literal["fp32", "bf16", "fp16"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")
TASKS: tuple[str, ...] = ("infer", "train")
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")


@dataclass
class RunSettings:
    """What one throughput or memory measurement asks for. Plain data: JSON-able, hashable config."""

    model: str
    task: Task = "infer"
    batch_size: int = 8
    resolution: int | None = None  # None: the variant's native resolution
    precision: Precision = "fp32"
    compile: bool = False
    device: str = "cpu"
    threads: int | None = None  # intra-op threads; None: the backend's default (recorded as resolved)
    num_classes: int | None = None
    optimizer: str = "adam"  # train: adam (paper pre-training) or sgd (momentum 0.9, fine-tuning)
    channels_last: bool | None = None  # None: on for conv families (bit, hybrid), off for vit
    seed: int = 0
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class Workload(ABC):
    """A prepared step on the device. `step()` may return before the device is done; `sync()` waits."""

    batch_size: int
    compile_s: float | None = None  # explicit compile time where the backend can separate it (JAX AOT)

    @abstractmethod
    def step(self) -> Any: ...

    @abstractmethod
    def sync(self, out: Any) -> None: ...

    def close(self) -> None:  # free device memory held by the workload
        pass


class Backend(ABC):
    """One framework on one device kind. Stateless apart from the device/threads chosen in `setup`."""

    name: str = "?"

    @abstractmethod
    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        """Select device and thread count; return what was resolved (device name, threads, ...)."""

    @abstractmethod
    def prepare(self, settings: RunSettings) -> Workload: ...

    def time_steps(self, work: Workload, min_steps: int, min_seconds: float, max_seconds: float,
                   max_steps: int = 100_000) -> list[float]:
        """Run timed steps until both `min_steps` and `min_seconds` are reached (or `max_seconds`/`max_steps`).

        Default: host wall clock around step + sync. Backends with device timers (CUDA events) override.
        Returns seconds per step, raw.
        """
        times: list[float] = []
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            work.sync(work.step())
            t1 = time.perf_counter()
            times.append(t1 - t0)
            elapsed = t1 - start
            if len(times) >= max_steps or elapsed >= max_seconds:
                break
            if len(times) >= min_steps and elapsed >= min_seconds:
                break
        return times

    @abstractmethod
    def reset_peak_memory(self) -> None: ...

    @abstractmethod
    def peak_memory_mib(self) -> float:
        """Peak memory since the last reset, MiB: device allocator peak, or process RSS growth on CPU."""

    def is_oom(self, exc: BaseException) -> bool:
        """Did `exc` come from running out of (device or host) memory?"""
        return looks_like_oom(exc)

    @abstractmethod
    def cleanup(self) -> None:
        """Free cached memory after a failure (OOM) so the process can go on."""

    @abstractmethod
    def versions(self) -> dict[str, str]: ...

    def count_flops(self, spec, resolution: int, num_classes: int) -> dict[str, dict]:
        """Forward cost of ONE image by this framework's own counters.

        Returns {counter_name: {"macs": float, "excludes": str}}; an empty dict if the backend has none.
        """
        return {}

    @abstractmethod
    def matmul_flops_per_s(self, precision: str = "fp32", n: int = 2048, seconds: float = 1.0) -> float:
        """Measured dense-matmul throughput of the device (FLOP/s, 2 per MAC): the MFU denominator."""


def get_backend(name: str) -> Backend:
    """Instantiate a backend by name; a missing framework is a clear error, not an ImportError."""
    from vitbench.errors import BackendUnavailable, ConfigError

    if name == "torch":
        try:
            from vitbench.backends.torch import TorchBackend
        except ImportError as e:  # pragma: no cover - torch is a core dependency
            raise BackendUnavailable(f"backend 'torch' needs torch and timm: {e}") from e
        return TorchBackend()
    if name == "jax":
        try:
            from vitbench.backends.jax import JaxBackend
        except ImportError as e:
            raise BackendUnavailable(f"backend 'jax' needs the [jax] extra (jax, flax, optax): {e}") from e
        return JaxBackend()
    raise ConfigError(f"unknown backend {name!r}; allowed: torch, jax")


BACKENDS: tuple[str, ...] = ("torch", "jax")
