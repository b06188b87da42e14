"""What a backend is: a descriptor registered without importing its framework, and the interface it implements.

A backend is one package, `vitbench/backends/<name>/`: its `__init__` registers a `BackendSpec` (name, the modules
it requires, what it can do, its precisions and devices, parse-time checks) and names the class that implements
`Backend`, which is imported only when a measurement runs. Measurements, tasks and the transfer protocols only
talk to this interface: they never import torch or jax and never name a backend.

The interface is split by concern: `kinds` (modes, precisions, device/timer/memory kinds, capabilities), `spec`
(BackendSpec, registration and lookup), `workload` (Step, Workload, the timers' stopping rule) and this module (the
`Backend` class). Everything is importable from here.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from vitbench import turns
from vitbench.backends.kinds import (
    OPTIMIZERS,
    PRECISIONS,
    AttentionKernel,
    Capability,
    Device,
    DeviceKind,
    MemoryKind,
    Mode,
    TimerKind,
)
from vitbench.backends.spec import (
    BackendName,
    BackendSpec,
    Check,
    backend_names,
    backend_spec,
    default_backend,
    get_backend,
    register_backend,
    transfer_backend,
)
from vitbench.backends.workload import MatmulWorkload, Step, StopRule, Workload
from vitbench.errors import ConfigError, looks_like_oom

MATMUL_WINDOWS = 5  # windows per matmul measurement: enough for a median that one slow window cannot move


TRANSFER_PRECISION = "fp32"  # what the transfer primitives (and a train row's real-input part) compute in


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
    def setup(self, device: str = "cpu", threads: int | None = None, devices: int = 1) -> dict:
        """Select device and thread count; return what was resolved (device name, threads, versions, ...).
        `devices` > 1: the steps will run over that many local devices of `device`'s kind (a backend whose spec
        says `process_per_device` is then called in each rank of the group the trial launched)."""

    def versions(self) -> dict[str, str | None]:
        """Versions of the backend's packages, as installed (one source for every row: package metadata)."""
        from vitbench.env import distribution_version

        return {d: distribution_version(d) for d in self.spec.distributions}

    def compile_cache_counts(self) -> tuple[int, int] | None:
        """(compiled executables read from the persistent compile cache, executables compiled and written to it)
        in this process so far, or None where the backend keeps no such cache. `setup` turns the cache on
        (vitbench.paths.compile_cache_dir) and records its directory as `compile_cache`."""
        return None

    def device_info(self) -> Device:
        """The physical device chosen in `setup` (default: the host CPU)."""
        return Device(DeviceKind.CPU, "cpu")

    def use_device_in_this_thread(self) -> None:
        """Make the device chosen in `setup` the calling thread's current device, where the framework keeps one
        per thread (torch's CUDA device: a new thread starts on device 0, and allocations, streams, events, CUDA
        graphs and an argument-less synchronize follow it). Every thread other than setup's that runs this
        backend's work calls it first (measure/serve.py: its steps thread's initializer). Default: nothing (a
        framework that places work by its arrays' own devices)."""

    # ---- timed steps (INFER, TRAIN) -----------------------------------------------------------------------------
    @abstractmethod
    def prepare(self, step: Step) -> Workload: ...

    @property
    def timer(self) -> TimerKind:
        """What `time_steps` / `time_windows` measure with on the current device."""
        return TimerKind.HOST_CLOCK

    def time_steps(self, work: Workload, stop: StopRule) -> list[float]:
        """Latency: run steps one at a time, each synchronised, until `stop` is done (each step a window of
        one). Returns seconds per step, raw.

        Default: host wall clock around step + sync. Backends with device timers (CUDA events) override.
        """
        times: list[float] = []
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            work.sync(work.step())
            t1 = time.perf_counter()
            times.append(t1 - t0)
            if stop.done(len(times), len(times), t1 - start):  # each step a window of one
                return times
            start += turns.between_windows()  # a wait for the turn is not timed work (vitbench.turns)

    def time_windows(self, work: Workload, window_steps: int, stop: StopRule) -> list[float]:
        """Throughput: windows of `window_steps` steps queued back to back with no sync between them, timed
        between two points at which the device is idle, until `stop` is done. Returns seconds per window, raw.

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
            if stop.done(len(times), steps, t1 - start):
                return times
            start += turns.between_windows()

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

    def group_barrier(self) -> None:
        """Wait until every rank of the group this process is one of gets here (before the timed steps, so that
        the ranks' windows overlap: a data-parallel inference step has no collective that would line them up). A
        backend whose group is one process (a device mesh) or that has no groups: nothing to wait for."""

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
            windows = self.time_windows(work, per_window, StopRule(min_steps=MATMUL_WINDOWS, min_seconds=seconds,
                                                                   max_seconds=10 * seconds,
                                                                   min_windows=MATMUL_WINDOWS))
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
    # Every primitive computes in TRANSFER_PRECISION, set explicitly (not the framework's default, which on an
    # NVIDIA GPU is TF32 for JAX's matmuls and torch's convolutions: accuracy would differ between backends).
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
        opt.steps, seed)`, read in step order from `data.steps(order, resolution)` (decoded ahead by the data's
        workers). `distill` (vitbench.transfer.distill.Distill): follow a teacher (DeiT eq. 2 / 3 on the
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
        timm-named `weights` on NHWC float32 `images` (vitbench.insight.run.AttentionFn); for a plug-in family
        with per-axis layers (`AttentionMaps.axis_layers`), a list of (images, sequences, heads, length, length)
        arrays, one per layer, from the plug-in's own reader."""
        raise NotImplementedError(f"backend {self.name!r} does not give attention maps")


__all__ = ["AttentionKernel", "Backend", "BackendName", "BackendSpec", "Capability", "Check", "Device",
           "DeviceKind", "MatmulWorkload", "MemoryKind", "Mode", "OPTIMIZERS", "PRECISIONS", "Step", "StopRule",
           "TimerKind", "Workload", "backend_names", "backend_spec", "default_backend", "get_backend",
           "register_backend", "transfer_backend"]
