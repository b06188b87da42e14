"""What a backend is: a descriptor registered without importing its framework, and the interface it implements.

A backend is one package, `vitbench/backends/<name>/`: its `__init__` registers a `BackendSpec` (name, the modules
it requires, what it can do, its precisions and devices, parse-time checks) and names the class that implements
`Backend`, which is imported only when a measurement runs. Measurements, tasks and the transfer protocols only
talk to this interface: they never import torch or jax and never name a backend.
"""

from __future__ import annotations

import enum
import importlib
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator

from vitbench.errors import BackendUnavailable, looks_like_oom

Mode = Literal["infer", "train"]
PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16")  # compute precisions a study may ask for
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")  # adam: the paper's pre-training; sgd: momentum 0.9, fine-tuning


class Capability(str, enum.Enum):
    """What a backend can do; tasks declare the capabilities they need (checked when a study is parsed)."""

    INFER = "infer"  # timed forward steps
    TRAIN = "train"  # timed training steps
    MEMORY = "memory"  # peak memory of a step
    MAX_BATCH = "max_batch"  # steps in a probe process, out-of-memory detected
    FLOPS = "flops"  # its own FLOP counters
    MATMUL_PEAK = "matmul_peak"  # a dense-matmul throughput measurement (MFU denominator, calibration)
    COMPILE = "compile"  # an optional graph compiler for eager models (the `compile` field)
    TRANSFER = "transfer"  # pre-training, features, fine-tuning (vitbench.transfer protocols)

    def __str__(self) -> str:
        return self.value


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
    check: Check | None = None
    install: str = ""  # how to get what `requires` names, e.g. "pip install 'vitbench[jax]'"
    description: str = ""

    def problems(self, fields: Mapping[str, Any], needs: frozenset[Capability] = frozenset()) -> list[tuple[str, str]]:
        """Why this backend cannot run a trial with these fields (empty: it can)."""
        out = [("task", f"backend {self.name!r} cannot {c.value} (it provides: "
                        f"{', '.join(sorted(c.value for c in self.capabilities))})")
               for c in sorted(needs - self.capabilities, key=str)]
        if "precision" in fields and fields["precision"] not in self.precisions:
            out.append(("precision", f"backend {self.name!r} runs {', '.join(self.precisions)}"))
        if fields.get("compile") and Capability.COMPILE not in self.capabilities:
            out.append(("compile", f"backend {self.name!r} has no optional compiler (it always compiles, or "
                                   "never): leave `compile` false"))
        if self.check is not None:
            out += self.check(fields)
        return out

    def load(self) -> type[Backend]:
        module, _, cls = self.implementation.partition(":")
        try:
            return getattr(importlib.import_module(module), cls)
        except ImportError as e:
            raise BackendUnavailable(f"backend {self.name!r} needs {', '.join(self.requires)}: {e}") from e


@dataclass(frozen=True)
class Step:
    """What one timed step computes: a model at an input size, forward (infer) or a training update (train)."""

    model: str
    mode: Mode = "infer"
    batch_size: int = 1
    resolution: int | None = None  # None: the variant's native resolution
    num_classes: int | None = None  # None: the variant's default
    precision: str = "fp32"
    compile: bool = False
    channels_last: bool | None = None  # None: on for conv families (bit, hybrid), off for vit
    optimizer: str = "adam"  # train only
    seed: int = 0

    def __post_init__(self) -> None:
        from vitbench.errors import ConfigError

        for name, value, allowed in (("mode", self.mode, ("infer", "train")), ("precision", self.precision, PRECISIONS),
                                     ("optimizer", self.optimizer, OPTIMIZERS)):
            if value not in allowed:
                raise ConfigError(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")

    @classmethod
    def of(cls, fields: Mapping[str, Any], **override) -> Step:
        """The step a trial's (or command's) fields describe; fields a step does not use are ignored."""
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in {**fields, **override}.items() if k in names and v is not None})

    def to_dict(self) -> dict:
        return asdict(self)


class Workload(ABC):
    """A prepared step on the device. `step()` may return before the device is done; `sync()` waits."""

    batch_size: int
    compile_s: float | None = None  # explicit compile time where the backend separates it (ahead-of-time)

    @abstractmethod
    def step(self) -> Any: ...

    @abstractmethod
    def sync(self, out: Any) -> None: ...

    def close(self) -> None:  # free device memory held by the workload
        pass


class Backend(ABC):
    """One framework on one device kind. Stateless apart from the device/threads chosen in `setup`."""

    spec: ClassVar[BackendSpec]

    @property
    def name(self) -> str:
        return self.spec.name

    # ---- setup ------------------------------------------------------------------------------------------------
    @abstractmethod
    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        """Select device and thread count; return what was resolved (device name, threads, versions, ...)."""

    def versions(self) -> dict[str, str | None]:
        """Versions of the backend's packages, as installed (one source for every row: package metadata)."""
        from vitbench.env import distribution_version

        return {d: distribution_version(d) for d in self.spec.distributions}

    # ---- timed steps (INFER, TRAIN) -----------------------------------------------------------------------------
    @abstractmethod
    def prepare(self, step: Step) -> Workload: ...

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

    # ---- memory (MEMORY, MAX_BATCH) -----------------------------------------------------------------------------
    @abstractmethod
    def reset_peak_memory(self) -> None: ...

    @abstractmethod
    def peak_memory_mib(self) -> float:
        """Peak memory since the last reset, MiB: device allocator peak, or process RSS growth on CPU."""

    @abstractmethod
    def process_peak_mib(self) -> float:
        """Whole-process peak (what a max-batch memory budget is compared with), MiB."""

    def is_oom(self, exc: BaseException) -> bool:
        """Did `exc` come from running out of (device or host) memory?"""
        return looks_like_oom(exc)

    @abstractmethod
    def cleanup(self) -> None:
        """Free cached memory after a failure (OOM) so the process can go on."""

    # ---- FLOPs and the matmul peak (FLOPS, MATMUL_PEAK) ---------------------------------------------------------
    def count_flops(self, spec, resolution: int, num_classes: int) -> dict[str, dict]:
        """Forward cost of ONE image by this framework's own counters.

        Returns {counter_name: {"macs": float, "excludes": str}}; an empty dict if the backend has none.
        """
        return {}

    @abstractmethod
    def matmul_flops_per_s(self, precision: str = "fp32", n: int = 2048, seconds: float = 1.0) -> float:
        """Measured dense-matmul throughput of the device (FLOP/s, 2 per MAC)."""

    # ---- transfer (TRANSFER): the primitives the protocols in vitbench.transfer are written against ------------
    # Data crosses as numpy: images float32 NHWC in [-1, 1], labels int64, weights {timm parameter name: float32}.
    compile_s: float = 0.0  # seconds spent compiling training/eval steps since setup, never inside a train time

    def init_model(self, spec, resolution: int, num_classes: int, seed: int) -> Any:
        """A freshly initialised model (the framework's own init, seeded)."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")

    def weights(self, model: Any) -> dict:
        """All parameters (and buffers) in timm naming, float32 numpy."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")

    def load_weights(self, model: Any, weights: dict) -> Any:
        """Return `model` with `weights` (timm naming) loaded; every model parameter must be given."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")

    def train(self, model: Any, data, resolution: int, opt, batch_size: int, seed: int,
              distill=None) -> tuple[Any, list[float]]:
        """Run `opt.steps` updates (vitbench.transfer.schedules.OptimConfig) on batches of `data` (an ImageSet);
        return (model, loss per step). Batches: `vitbench.transfer.data.batch_indices(len(data), batch_size,
        opt.steps, seed)`. `distill` (vitbench.transfer.distill.Distill): follow a teacher (DeiT eq. 2 / 3 on the
        model's class and distillation heads; the teacher's logits come from `distill.teacher_logits(indices)`);
        None: softmax cross-entropy on the labels."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")

    def features(self, model: Any, x) -> Any:
        """Pre-logits representation (class token after the final norm / pooled ResNet features), (N, D)."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")

    def logits(self, model: Any, x) -> Any:
        """(N, num_classes) float32."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")


# ------------------------------------------------------------------------------------------------------------------
# Registration and lookup
# ------------------------------------------------------------------------------------------------------------------
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


__all__ = ["Backend", "BackendName", "BackendSpec", "Capability", "Check", "Mode", "OPTIMIZERS", "PRECISIONS", "Step", "Workload",
           "backend_names", "backend_spec", "default_backend", "get_backend", "register_backend"]


def _known_backend(name: str) -> str:
    if name not in backend_names():
        raise ValueError(f"unknown backend {name!r}; allowed: {', '.join(backend_names())}")
    return name


# A backend name in a pydantic model: validated against the registry (so no list of names is written anywhere).
BackendName = Annotated[str, AfterValidator(_known_backend)]
