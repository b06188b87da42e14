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

from vitbench.errors import BackendUnavailable, ConfigError, looks_like_oom

Mode = Literal["infer", "train"]
# Compute precisions a study may ask for. fp32 = full IEEE fp32 matmuls and convolutions on every backend; tf32 =
# fp32 storage with TF32 tensor-core matmuls (NVIDIA Ampere and later); bf16/fp16 = mixed precision (autocast).
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16")
OPTIMIZERS: tuple[str, ...] = ("adam", "sgd")  # adam: the paper's pre-training; sgd: momentum 0.9, fine-tuning


class DeviceKind(str, enum.Enum):
    """What kind of processor a device is: decides where a peak comes from and what a measured peak is keyed by."""

    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Device:
    """The physical device a backend runs on, named as the driver names it (the same on every framework)."""

    kind: DeviceKind
    name: str  # "cpu", "NVIDIA H100 80GB HBM3", "TPU v5 lite": what a datasheet peak is matched against
    index: int = 0
    uuid: str | None = None  # GPU UUID where the framework tells (finds the NVML handle)
    pci_bus_id: str | None = None


class TimerKind(str, enum.Enum):
    """What a backend's timed steps are measured with."""

    DEVICE_EVENTS = "device_events"  # events recorded on the device's stream (CUDA events): device time
    HOST_CLOCK = "host_clock"  # host wall clock around step(s) + sync: exact for synchronous devices (CPU)

    def __str__(self) -> str:
        return self.value


class MemoryKind(str, enum.Enum):
    """What a backend's peak memory number is; numbers of different kinds do not compare."""

    ALLOCATOR = "allocator"  # the device allocator's peak of allocated bytes (torch.cuda.max_memory_allocated)
    # the process's resident set on a CPU: before the steady phase, growth of its peak over the RSS before the
    # model was built (compilation included); in it, the step's state (its arrays' bytes) + the growth of the
    # peak during the steps (activations, workspace)
    HOST_RSS = "host_rss"
    XLA_PLANNED = "xla_resident_plus_temp"  # bytes in use on the device + XLA's planned temp buffers of the step

    def __str__(self) -> str:
        return self.value


class AttentionKernel(str, enum.Enum):
    """Which attention implementation ran, as the framework reports it."""

    FLASH = "flash"
    MEMORY_EFFICIENT = "memory_efficient"
    CUDNN = "cudnn"
    MATH = "math"  # the framework's reference composition (matmul, softmax, matmul) inside its SDPA op
    UNFUSED = "unfused"  # the model computes attention itself (no fused op called)
    XLA = "xla"  # XLA fusions of dot + softmax (no fused attention custom call)
    NONE = "none"  # the model has no attention (BiT)
    NOT_VISIBLE = "not_visible"  # the framework does not tell (a replayed CUDA graph; compiled code calling no
    # attention kernel of the framework's)

    def __str__(self) -> str:
        return self.value


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
    ATTENTION = "attention"  # attention probabilities of a ViT/hybrid, for inspection (vitbench.inspect)

    def __str__(self) -> str:
        return self.value


MATMUL_WINDOWS = 5  # windows per matmul measurement: enough for a median that one slow window cannot move

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
    check: Check | None = None
    install: str = ""  # how to get what `requires` names, e.g. "pip install 'vitbench[jax]'"
    description: str = ""
    # The backend's device string per device kind ("{index}" filled in): how a peak measured on one backend is
    # measured on another for the same physical device. Pairs, so that a spec stays hashable.
    device_names: tuple[tuple[DeviceKind, str], ...] = ((DeviceKind.CPU, "cpu"),)
    compile_modes: tuple[str, ...] = ()  # modes of the optional compiler (`compile_mode`), first = its default

    def device_string(self, kind: DeviceKind, index: int = 0) -> str | None:
        """This backend's name for device `index` of `kind`, or None when it cannot run on that kind."""
        template = dict(self.device_names).get(kind)
        return template.format(index=index) if template is not None else None

    def problems(self, fields: Mapping[str, Any], needs: frozenset[Capability] = frozenset(),
                 setting: Callable[[str, Any], str] | None = None) -> list[tuple[str, str]]:
        """Why this backend cannot run a trial with these fields (empty: it can). A message that names another
        field's setting says it as `setting(field, value)` does: a study's `compile: true` by default, the
        command line's --compile from the CLI."""
        setting = setting or study_setting
        out = [("task", f"backend {self.name!r} cannot {c.value} (it provides: "
                        f"{', '.join(sorted(c.value for c in self.capabilities))})")
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
    compile_mode: str | None = None  # None: the compiler's default mode
    channels_last: bool | None = None  # None: on for conv families (bit, hybrid), off for vit
    optimizer: str = "adam"  # train only
    seed: int = 0

    def __post_init__(self) -> None:
        for name, value, allowed in (("mode", self.mode, ("infer", "train")),
                                     ("precision", self.precision, PRECISIONS),
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
    # The numerics in force for this step, as the framework reports them after the backend set them (matmul
    # precision, TF32 flags, autocast dtype, compile mode): recorded in every row.
    settings: Mapping[str, Any] = {}

    @abstractmethod
    def step(self) -> Any: ...

    @abstractmethod
    def sync(self, out: Any) -> None: ...

    def state_bytes(self) -> int | None:
        """Bytes the step keeps on the device between steps (weights, gradients, optimizer state, inputs), counted
        from the arrays themselves; None where unknown."""
        return None

    def sync_window(self, outs: list[Any]) -> None:
        """Wait for every step of a window (outputs in order). Default: sync each; a backend whose steps run in
        order on one queue may wait for the last only."""
        for out in outs:
            self.sync(out)

    def close(self) -> None:  # free device memory held by the workload
        pass


class MatmulWorkload(Workload):
    """One a @ b per step (the matmul peak, `vitbench doctor`): its operands and result readable on the host."""

    batch_size = 1
    a: Any  # the operands, on the device
    b: Any

    def operands_host(self) -> tuple[Any, Any]:
        """(a, b) as float32 numpy arrays."""
        return self.result_host(self.a), self.result_host(self.b)

    @abstractmethod
    def result_host(self, out: Any) -> Any:
        """A step's result as a float32 numpy array."""


class Backend(ABC):
    """One framework on one device kind. Stateless apart from the device/threads chosen in `setup`."""

    spec: ClassVar[BackendSpec]

    @property
    def name(self) -> str:
        return self.spec.name

    def _refuse(self, **fields: Any) -> None:
        """Raise ConfigError with every reason this backend's spec gives for not running `fields` (if any)."""
        problems = self.spec.problems(fields)
        if problems:
            raise ConfigError("; ".join(p for _, p in problems))

    # ---- setup ------------------------------------------------------------------------------------------------
    @abstractmethod
    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        """Select device and thread count; return what was resolved (device name, threads, versions, ...)."""

    def versions(self) -> dict[str, str | None]:
        """Versions of the backend's packages, as installed (one source for every row: package metadata)."""
        from vitbench.env import distribution_version

        return {d: distribution_version(d) for d in self.spec.distributions}

    def device_info(self) -> Device:
        """The physical device chosen in `setup` (default: the host CPU)."""
        return Device(DeviceKind.CPU, "cpu")

    # ---- timed steps (INFER, TRAIN) -----------------------------------------------------------------------------
    @abstractmethod
    def prepare(self, step: Step) -> Workload: ...

    @property
    def timer(self) -> TimerKind:
        """What `time_steps` / `time_windows` measure with on the current device."""
        return TimerKind.HOST_CLOCK

    def time_steps(self, work: Workload, min_steps: int, min_seconds: float, max_seconds: float,
                   max_steps: int = 100_000) -> list[float]:
        """Latency: run steps one at a time, each synchronised, until both `min_steps` and `min_seconds` are
        reached (or `max_seconds`/`max_steps`). Returns seconds per step, raw.

        Default: host wall clock around step + sync. Backends with device timers (CUDA events) override.
        """
        times: list[float] = []
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            work.sync(work.step())
            t1 = time.perf_counter()
            times.append(t1 - t0)
            # time_windows' rule, each step a window of one
            if window_done(len(times), len(times), t1 - start, min_steps, min_seconds, max_seconds,
                           min_windows=1, max_steps=max_steps):
                return times

    def time_windows(self, work: Workload, window_steps: int, min_steps: int, min_seconds: float,
                     max_seconds: float, min_windows: int = 1, max_steps: int = 100_000) -> list[float]:
        """Throughput: windows of `window_steps` steps queued back to back with no sync between them, timed
        between two points at which the device is idle, until `min_steps` steps, `min_seconds` and `min_windows`
        windows are reached (or `max_seconds`/`max_steps`). Returns seconds per window, raw.

        Default: host wall clock from an idle device to the sync after the window's last step (a device that
        runs ahead of the host is kept busy; exact for synchronous devices). Backends with device timers
        override with events recorded before the first and after the last step.
        """
        times: list[float] = []
        start = time.perf_counter()
        steps = 0
        while True:
            t0 = time.perf_counter()
            work.sync_window([work.step() for _ in range(window_steps)])
            t1 = time.perf_counter()
            times.append(t1 - t0)
            steps += window_steps
            if window_done(len(times), steps, t1 - start, min_steps, min_seconds, max_seconds, min_windows,
                           max_steps):
                return times

    # ---- memory (MEMORY, MAX_BATCH) -----------------------------------------------------------------------------
    @abstractmethod
    def reset_peak_memory(self) -> None: ...

    @abstractmethod
    def peak_memory_mib(self) -> float:
        """Peak memory since the last reset, MiB, of the kind `memory_kind()` says (device allocator peak, or
        process RSS growth over the RSS at the last `reset_peak_memory` on CPU)."""

    def restart_peak_memory(self, work: Workload | None = None) -> None:
        """Start the steady phase of `work` for `peak_memory_mib`: from now on it is the memory the steps keep
        (weights, optimizer state, inputs: `work.state_bytes()`, or the allocator's count) plus the transient
        peak of the steps (activations, workspace); what compilation used and freed does not count.
        Default: `reset_peak_memory`."""
        self.reset_peak_memory()

    def memory_kind(self) -> MemoryKind:
        """What `peak_memory_mib` measures on the current device."""
        return MemoryKind.HOST_RSS

    def reserved_peak_mib(self) -> float | None:
        """Peak memory reserved by the device allocator since the last (re)start (cached, not necessarily in
        use), MiB; None where there is no such allocator."""
        return None

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

    def matmul_workload(self, precision: str = "fp32", n: int = 2048) -> MatmulWorkload:
        """One n x n @ n x n matmul per step, in `precision` exactly as a model step of that precision computes
        its matmuls (the matmul peak and `vitbench doctor`'s timing check run it)."""
        raise NotImplementedError(f"backend {self.name!r} has no matmul workload")

    def matmul_flops_per_s(self, precision: str = "fp32", n: int = 2048, seconds: float = 1.0) -> float:
        """Measured dense-matmul throughput of the device (FLOP/s, 2 per MAC): the median over windows of
        queued matmuls (throughput timing: the device never idles for a sync inside a window), at least
        `seconds` long, after two warm-up steps. Default: on `matmul_workload`."""
        work = self.matmul_workload(precision, n)
        try:
            for _ in range(2):
                work.sync(work.step())
            t0 = time.perf_counter()
            work.sync(work.step())
            one = max(time.perf_counter() - t0, 1e-9)
            per_window = max(1, min(256, int(seconds / MATMUL_WINDOWS / one)))
            windows = self.time_windows(work, per_window, min_steps=MATMUL_WINDOWS, min_seconds=seconds,
                                        max_seconds=10 * seconds, min_windows=MATMUL_WINDOWS)
        finally:
            work.close()
        per_step = sorted(w / per_window for w in windows)
        return 2 * n**3 / per_step[len(per_step) // 2]  # 2 FLOPs per MAC, median window

    def numerics_in_force(self) -> str | None:
        """The framework's matmul precision settings as they are now in this process (before or after vitbench
        set them for a step), in the framework's own words; None where there is nothing to say."""
        return None

    def attention_kernel(self, work: Workload) -> AttentionKernel | None:
        """Which attention implementation `work`'s step runs, where the framework tells (None: not asked).
        Called after the timed steps: it may run one more step under a profiler."""
        return None

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

    def train_masked_patch(self, model: Any, batches, opt, mp, init: dict, prefix: int) -> tuple[Any, dict, list]:
        """Masked patch prediction (vitbench.transfer.masked_patch): `opt.steps` updates of `model`'s encoder and
        the objective's parameters (`init`: [mask] embedding, head; numpy) over `batches` (masked_patch.Batch:
        images, corruption, targets); `prefix`: tokens before the patches. Returns (model, the objective's final
        parameters as numpy in `init`'s layout, loss per step)."""
        raise NotImplementedError(f"backend {self.name!r} does not implement masked patch pre-training")

    def features(self, model: Any, x) -> Any:
        """Pre-logits representation (class token after the final norm / pooled ResNet features), (N, D)."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")

    def logits(self, model: Any, x) -> Any:
        """(N, num_classes) float32."""
        raise NotImplementedError(f"backend {self.name!r} does not implement transfer")

    # ---- inspection (ATTENTION) ---------------------------------------------------------------------------------
    def attention_maps(self, weights: dict, spec, resolution: int, images) -> Any:
        """(layers, images, heads, tokens, tokens) float32 attention probabilities of `spec` at `resolution` with
        timm-named `weights` on NHWC float32 `images` (vitbench.inspect.run.AttentionFn)."""
        raise NotImplementedError(f"backend {self.name!r} does not give attention maps")


def window_done(windows: int, steps: int, elapsed_s: float, min_steps: int, min_seconds: float,
                max_seconds: float, min_windows: int, max_steps: int) -> bool:
    """The stopping rule of `time_windows` (shared by every backend's timer)."""
    if steps >= max_steps or elapsed_s >= max_seconds:
        return True
    return steps >= min_steps and elapsed_s >= min_seconds and windows >= min_windows


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


__all__ = ["AttentionKernel", "Backend", "BackendName", "BackendSpec", "Capability", "Check", "Device",
           "DeviceKind", "MatmulWorkload", "MemoryKind", "Mode", "OPTIMIZERS", "PRECISIONS", "Step", "TimerKind",
           "Workload", "backend_names", "backend_spec", "default_backend", "get_backend", "register_backend",
           "window_done"]


def _known_backend(name: str) -> str:
    if name not in backend_names():
        raise ValueError(f"unknown backend {name!r}; allowed: {', '.join(backend_names())}")
    return name


# A backend name in a pydantic model: validated against the registry (so no list of names is written anywhere).
BackendName = Annotated[str, AfterValidator(_known_backend)]


def backend_distributions() -> tuple[str, ...]:
    """Every registered backend's packages (e.g. torch, jax, flax), in backend order: what the environment
    records and what a report or comparison shows of it."""
    from vitbench.registry import Kind, entries

    return tuple(d for e in entries(Kind.BACKEND).values() for d in e.obj.distributions)
