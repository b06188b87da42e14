"""PyTorch backend: timm models, eager or torch.compile, autocast precisions, channels_last, CPU or CUDA.

Numerics: numerics.py (fp32 = full IEEE fp32 matmuls and convolutions, tf32, bf16/fp16 under autocast).
Timing: on CUDA a latency step is bracketed by CUDA events and a throughput window by one event before its first
and one after its last step, the end event synchronised: device time, never the launch. On CPU eager execution is
synchronous and the host clock is exact.
Memory: on CUDA the allocator's peak (allocated) and, apart, its reserved peak; on CPU the growth of the process's
peak resident set (vitbench.procmem).
Threads: a trial's count, capped at the usable CPUs; none asked for on the CPU: the count in force, lowered to the
cores other processes leave free (vitbench.cpus.unset_threads), unless OMP_NUM_THREADS is set.
Steps: workload.py. Transfer: models in timm naming, trained by `training.py` (masked patch prediction:
`masked_patch.py`), fp32.
"""

from __future__ import annotations

import contextlib
import gc
import os
import time
import warnings

import numpy as np
import torch

from vitbench import turns
from vitbench.backends.base import (
    AttentionKernel,
    Backend,
    Device,
    DeviceKind,
    MatmulWorkload,
    MemoryKind,
    Step,
    StopRule,
    TRANSFER_PRECISION,
    TimerKind,
    Workload,
)
from vitbench.backends.torch import SPEC, cache
from vitbench.backends.torch.numerics import DTYPES, numerics, set_matmul_precision
from vitbench.backends.torch import training
from vitbench.backends.torch.workload import Matmul, TorchWorkload
from vitbench.cpus import capped_threads, unset_threads
from vitbench.errors import BackendUnavailable, ConfigError
from vitbench.models.families import family_plugin
from vitbench.models.specs import ModelSpec
from vitbench.models.torch import build_torch_model, feature_forward, unfused_attention
from vitbench.procmem import PeakRSS
from vitbench.transfer.distill import Distill
from vitbench.transfer.schedules import OptimConfig

# torch's SDPA kernels by the name of the op that runs them (aten native_functions.yaml); the composite op
# `aten::scaled_dot_product_attention` dispatches to exactly one of them.
_SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention": AttentionKernel.FLASH,
    "aten::_scaled_dot_product_flash_attention_for_cpu": AttentionKernel.FLASH,
    "aten::_scaled_dot_product_efficient_attention": AttentionKernel.MEMORY_EFFICIENT,
    "aten::_scaled_dot_product_cudnn_attention": AttentionKernel.CUDNN,
    "aten::_scaled_dot_product_attention_math": AttentionKernel.MATH,
}


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the profiler's C++ start/stop chatter) for the duration."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def uses_cuda_graphs(mode: str | None) -> bool:
    """Does torch.compile's `mode` replay CUDA graphs (Inductor's own table: reduce-overhead and max-autotune set
    triton.cudagraphs; max-autotune-no-cudagraphs does not), whose outputs live only until the next replay?"""
    if mode is None:
        return False
    from torch._inductor import list_mode_options

    return bool(list_mode_options(mode).get("triton.cudagraphs"))


class TorchBackend(Backend):
    spec = SPEC

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self._cuda_index: int | None = None
        self._rss = PeakRSS()
        self._state_mib = 0.0
        self._graph_pools = False  # the steady phase replays CUDA graphs (restart_peak_memory)
        self.compile_s = 0.0

    # -- setup -------------------------------------------------------------------------------------
    def setup(self, device: str = "cpu", threads: int | None = None, devices: int = 1) -> dict:
        try:
            dev = torch.device(device)
        except RuntimeError:
            dev = None
        if dev is None or dev.type not in ("cpu", "cuda"):
            raise ConfigError(f"unknown device {device!r}; allowed: {self.spec.devices}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable(f"device {device!r} requested but CUDA is not available here; "
                                     "use --device cpu")
        self.device = dev
        group = {}
        if devices > 1:  # this process is one rank of the group the trial launched (distributed.py)
            from vitbench.backends.torch import distributed

            self.device = distributed.init(dev, devices)
            group = {"collective_backend": distributed.collective_backend(dev.type),
                     "rank": distributed.rank_and_world()[0]}
        if self.device.type == "cuda" and self.device.index is not None:
            # the current device: events recorded without a stream (the timer's), the peak matmuls and the
            # allocator's statistics use it; left at cuda:0 they time an idle GPU while cuda:N works
            torch.cuda.set_device(self.device)
        # "cuda" without an index: this thread's current device, the one `_named` and another thread then use
        self._cuda_index = torch.cuda.current_device() if self.device == torch.device("cuda") else None
        # the transfer primitives' numerics (Backend: TRANSFER_PRECISION); a bench step's prepare sets its own
        set_matmul_precision(TRANSFER_PRECISION)
        if threads is None and dev.type == "cpu":  # the free cores, unless OMP_NUM_THREADS says (cpus)
            threads, chosen = unset_threads(torch.get_num_threads(), devices)
        else:
            threads, chosen = capped_threads(threads)
        if threads is not None:
            torch.set_num_threads(threads)
        cache_path = cache.enable()  # before anything is compiled
        return {
            "backend": self.name,
            "device": str(self.device),
            "device_name": self.device_info().name,
            **group,
            "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "compile_cache": str(cache_path) if cache_path else None,
            **chosen,
            **self.versions(),
        }

    def compile_cache_counts(self) -> tuple[int, int]:
        return cache.counts()

    def device_info(self) -> Device:
        if self.device.type != "cuda":
            return Device(DeviceKind.CPU, "cpu")
        index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)
        return Device(DeviceKind.GPU, props.name, index, uuid=str(uuid) if uuid is not None else None,
                      pci_bus_id=_pci_bus_id(props))

    def use_device_in_this_thread(self) -> None:
        # torch's current CUDA device is per thread, and setup's set_device held only for setup's thread
        if self._named.type == "cuda" and self._named.index is not None:
            torch.cuda.set_device(self._named)

    @property
    def _named(self) -> torch.device:
        """The trial's device with its index (`cuda` as setup resolved it): what every synchronize, timer and
        allocator statistic names, so that none follows the calling thread's current device."""
        if self.device.type == "cuda" and self.device.index is None and self._cuda_index is not None:
            return torch.device("cuda", self._cuda_index)
        return self.device

    def versions(self) -> dict[str, str | None]:
        v = super().versions()
        if self.device.type == "cuda":
            v["cuda"] = torch.version.cuda or ""
            v["cudnn"] = str(torch.backends.cudnn.version())
        return v

    # -- model + step --------------------------------------------------------------------------------
    def _check_precision(self, precision: str) -> None:
        if precision not in DTYPES:
            raise ConfigError(f"unknown precision {precision!r}; allowed: {', '.join(DTYPES)}")
        self._refuse(precision=precision, device=str(self.device))

    def prepare(self, step: Step) -> TorchWorkload:
        mode = (step.compile_mode or self.spec.compile_modes[0]) if step.compile else None  # None: eager
        # a group's field names the device kind (its ranks run on cuda:r): as the user's trial said it
        self._refuse(precision=step.precision, device=self.device.type if step.devices > 1 else str(self.device),
                     compile=step.compile, compile_mode=mode, devices=step.devices, parallelism=step.parallelism,
                     mode=step.mode)
        spec = step.spec
        res = spec.resolution if step.resolution is None else step.resolution
        k = step.num_classes or spec.num_classes
        settings = set_matmul_precision(step.precision)
        torch.manual_seed(step.seed)
        model = build_torch_model(spec, res, k, device=self.device)
        family = family_plugin(spec.family)  # its default memory format; whether this model has attention layers
        channels_last = step.channels_last if step.channels_last is not None else family.build.channels_last
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt)
        model.train(step.mode == "train")
        gen = torch.Generator().manual_seed(step.seed)
        x = torch.randn(step.batch_size, 3, res, res, generator=gen)
        y = torch.randint(0, k, (step.batch_size,), generator=gen)
        opt = OptimConfig(optimizer=step.optimizer) if step.mode == "train" else None
        if step.devices > 1:  # a rank: its slice of the global batch, the model spread over the group
            from vitbench.backends.torch import distributed

            # sliced on the host: a slice of a device tensor keeps the whole global batch in this rank's memory
            x, y = distributed.local_slice(x, y)
            model = distributed.wrap(model, step.parallelism, self.device)
        x, y = x.to(self.device, memory_format=fmt), y.to(self.device)
        if mode is not None:
            model = torch.compile(model, mode=mode)
        if self.device.type == "cuda":
            # each convolution's fastest cuDNN algorithm, timed at its first call (the first step, outside the
            # timer): as timm's benchmark.py sets it, and as XLA autotunes the JAX side's convolutions
            torch.backends.cudnn.benchmark = True
        settings = {**settings, "compile_mode": mode, "cudnn_benchmark": torch.backends.cudnn.benchmark}
        work = TorchWorkload(model, x, y, step.mode, step.precision, opt, self._named, settings,
                             has_attention=family.attention_of(spec).layers,
                             cuda_graphs=uses_cuda_graphs(mode) and self.device.type == "cuda")
        work.batch_size = step.batch_size  # the group's global batch (this rank runs batch_size / devices)
        return work

    def numerics_in_force(self) -> str | None:
        return numerics("fp32")["framework"].removesuffix(" autocast=off")

    @property
    def timer(self) -> TimerKind:
        return TimerKind.DEVICE_EVENTS if self.device.type == "cuda" else TimerKind.HOST_CLOCK

    def group_barrier(self) -> None:
        from vitbench.backends.torch import distributed

        distributed.barrier(self.device)

    def time_steps(self, work: Workload, stop: StopRule) -> list[float]:
        if self.device.type != "cuda":
            return super().time_steps(work, stop)
        return self._time_events(work, 1, stop)  # each step a window of one, device time

    def time_windows(self, work: Workload, window_steps: int, stop: StopRule) -> list[float]:
        if self.device.type != "cuda":
            return super().time_windows(work, window_steps, stop)
        return self._time_events(work, window_steps, stop)

    def _time_events(self, work: Workload, window_steps: int, stop: StopRule) -> list[float]:
        """Windows of `window_steps` steps queued back to back, each timed by CUDA events recorded before its
        first and after its last step, from an idle device; seconds of device time per window, raw."""
        # events record on the current device's stream, and setup's set_device holds only for the thread that
        # called it: serve times on a thread of its own, whose current device was cuda:0, and events recorded
        # there timed an idle cuda:0 while cuda:N worked
        with torch.cuda.device(self._named):
            times: list[float] = []
            start = time.perf_counter()
            steps = 0
            while True:
                torch.cuda.synchronize(self._named)  # the window starts on an idle device
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                for _ in range(window_steps):
                    work.step()  # queued: the host runs ahead, the device never waits for a sync
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) / 1000.0)  # ms -> s
                steps += window_steps
                if stop.done(len(times), steps, time.perf_counter() - start):
                    return times
                start += turns.between_windows()  # a wait for the turn is not timed work (vitbench.turns)

    def attention_kernel(self, work: Workload) -> AttentionKernel | None:
        """The SDPA kernel torch ran in one more step, from the profiler's op names (eager and compiled: Inductor
        calls the same aten kernels); not visible inside a replayed CUDA graph."""
        if not isinstance(work, TorchWorkload):
            return None
        if not work.has_attention:
            return AttentionKernel.NONE
        if work.cuda_graphs:
            return AttentionKernel.NOT_VISIBLE
        from torch.profiler import ProfilerActivity, profile

        with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            work.sync(work.step())
        names = {e.name for e in prof.events()}
        found = {kernel for op, kernel in _SDPA_OPS.items() if op in names}
        if len(found) == 1:
            return found.pop()
        if not found:  # no kernel op: the composite's math fallback, no SDPA call at all, or compiled code
            if "aten::scaled_dot_product_attention" in names:
                return AttentionKernel.MATH
            return AttentionKernel.NOT_VISIBLE if work.settings.get("compile_mode") else AttentionKernel.UNFUSED
        return AttentionKernel.NOT_VISIBLE  # several kernels in one step: no single answer

    # -- memory ----------------------------------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self._named)
            torch.cuda.reset_peak_memory_stats(self._named)
        gc.collect()
        self._state_mib = 0.0  # in the steady phase: the step's state, counted from its tensors
        self._graph_pools = False
        self._rss.reset()

    def restart_peak_memory(self, work: Workload | None = None) -> None:
        gc.collect()
        # the steady steps replay CUDA graphs: their buffers are reserved in the graphs' pools, not allocated
        self._graph_pools = bool(getattr(work, "cuda_graphs", False))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self._named)
            if self._graph_pools:  # the reserved peak is the row's: compilation's cached blocks go back first
                torch.cuda.empty_cache()  # (the live graphs' pools stay: empty_cache frees no block in use)
            torch.cuda.reset_peak_memory_stats(self._named)  # peaks restart from what is allocated now
        else:
            state = work.state_bytes() if work is not None else None
            self._state_mib = (state or 0) / 2**20
            self._rss.restart()

    def memory_kind(self) -> MemoryKind:
        if self.device.type != "cuda":
            return MemoryKind.HOST_RSS
        return MemoryKind.RESERVED if self._graph_pools else MemoryKind.ALLOCATOR

    def peak_memory_mib(self) -> float:
        if self.device.type == "cuda":
            if self._graph_pools:
                return torch.cuda.max_memory_reserved(self._named) / 2**20
            return torch.cuda.max_memory_allocated(self._named) / 2**20
        return self._state_mib + self._rss.growth_mib()

    def reserved_peak_mib(self) -> float | None:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_reserved(self._named) / 2**20
        return None

    def process_peak_mib(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_reserved(self._named) / 2**20
        return self._rss.peak_mib()

    def cleanup(self) -> None:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # -- FLOPs & peak --------------------------------------------------------------------------------------
    def count_flops(self, spec: ModelSpec, resolution: int, num_classes: int) -> dict[str, dict]:
        """fvcore and torch.utils.flop_counter on one image, with attention unfused so both see it."""
        from torch.utils.flop_counter import FlopCounterMode

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # fvcore imports the deprecated torch.jit.script
            from fvcore.nn import FlopCountAnalysis

        model = build_torch_model(spec, resolution, num_classes).eval()
        x = torch.randn(1, 3, resolution, resolution)
        out: dict[str, dict] = {}
        with torch.no_grad(), unfused_attention(model), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jit-trace chatter from fvcore; counts are checked, not the noise
            fca = FlopCountAnalysis(model, x)
            fca.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
            out["fvcore"] = {
                "macs": float(fca.total()),  # fvcore counts one per MAC (its "flops" are MACs)
                "excludes": "softmax, GELU/ReLU, adds; counts norms (incl. weight standardisation) ~elementwise",
            }
            with FlopCounterMode(display=False) as fc:
                model(x)
            out["torch_flop_counter"] = {
                "macs": fc.get_total_flops() / 2,  # FlopCounterMode counts 2 FLOPs per MAC
                "excludes": "everything but matmul/conv/attention kernels (norms, softmax, activations)",
            }
        return out

    def matmul_workload(self, precision: str = "fp32", n: int = 2048) -> MatmulWorkload:
        """n x n @ n x n in the precision's dtype: fp32/tf32 by the matmul flags (set here, as for a model step),
        bf16/fp16 as the tensor-core matmuls autocast runs (also on CPU: the peak of the precision asked for)."""
        self._check_precision(precision)
        settings = set_matmul_precision(precision)
        dtype = DTYPES[precision]
        gen = torch.Generator().manual_seed(0)
        a = torch.randn(n, n, generator=gen).to(self.device, dtype)
        b = torch.randn(n, n, generator=gen).to(self.device, dtype)
        return Matmul(a, b, settings)

    # -- transfer ------------------------------------------------------------------------------------------
    def init_model(self, spec: ModelSpec, resolution: int, num_classes: int, seed: int) -> torch.nn.Module:
        """A model to train from scratch: its parameters drawn as the Flax model draws them (the family's
        FamilyBuild.torch_init), so both backends start alike."""
        torch.manual_seed(seed)
        model = build_torch_model(spec, resolution, num_classes, device=self.device)
        with torch.device(self.device):
            return family_plugin(spec.family).init_torch(model)

    def weights(self, model: torch.nn.Module) -> dict[str, np.ndarray]:
        from vitbench.models.param_table import weight_array

        return {k: weight_array(v, k, "the model").copy() for k, v in model.state_dict().items()}

    def load_weights(self, model: torch.nn.Module, weights: dict[str, np.ndarray]) -> torch.nn.Module:
        # np.require keeps a 0-d buffer 0-d (np.ascontiguousarray makes it 1-d; load_state_dict forgives that)
        state = {k: torch.from_numpy(np.require(v, requirements="C")) for k, v in weights.items()}
        model.load_state_dict(state, strict=True)
        return model

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW
        if self.device.type == "cuda":  # pinned, copied asynchronously (as a DataLoader with pin_memory, and as
            return t.pin_memory().to(self.device, non_blocking=True)  # JAX's device_put): the host goes on
        return t

    def train(self, model: torch.nn.Module, data, resolution: int, opt: OptimConfig, batch_size: int,
              seed: int, distill: Distill | None = None) -> tuple[torch.nn.Module, list[float]]:
        return training.train(self, model, data, resolution, opt, batch_size, seed, distill)

    def train_masked_patch(self, model: torch.nn.Module, batches, opt: OptimConfig, mp, init: dict,
                           prefix: int) -> tuple[torch.nn.Module, dict, list[float]]:
        from vitbench.backends.torch import masked_patch

        return masked_patch.train(self, model, batches, opt, mp, init, prefix)

    @torch.inference_mode()
    def features(self, model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
        model.eval()
        return feature_forward(model, self._tensor(x)).float().cpu().numpy()

    @torch.inference_mode()
    def logits(self, model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
        model.eval()
        return model(self._tensor(x)).float().cpu().numpy()

    # -- inspection ---------------------------------------------------------------------------------------------
    def attention_maps(self, weights: dict[str, np.ndarray], spec: ModelSpec, resolution: int,
                       images: np.ndarray) -> np.ndarray:
        from vitbench.backends.torch.attention import attention_maps

        return attention_maps(weights, spec, resolution, images)


def _pci_bus_id(props) -> str | None:
    """'0000:3b:00.0'-style PCI bus id from torch's device properties, where torch has the fields."""
    try:
        return f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except (AttributeError, TypeError, ValueError):
        return None
