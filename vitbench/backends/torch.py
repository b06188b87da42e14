"""PyTorch backend: timm models, eager or torch.compile, autocast precisions, channels_last, CPU or CUDA.

Timing: on CUDA each step is bracketed by CUDA events and the end event is synchronised, so the time is the
device's and never just the launch; on CPU eager execution is synchronous and the host clock is exact.
"""

from __future__ import annotations

import contextlib
import gc
import time
import warnings

import torch
import torch.nn.functional as F

from vitbench.backends.base import Backend, RunSettings, Workload
from vitbench.errors import BackendUnavailable, ConfigError
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.models.torch import build_torch_model, unfused_attention
from vitbench.procmem import PeakRSS

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CLIP_NORM = 1.0  # global-norm gradient clipping, as in the paper's training and the JAX backend's step


def autocast(device: torch.device, precision: str):
    """Mixed precision by autocast (weights stay fp32, as in standard AMP training); fp32 is a no-op."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


def make_optimizer(name: str, params, lr: float = 1e-3, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """adam: the paper's pre-training optimiser (beta 0.9/0.999); sgd: momentum 0.9, the fine-tuning one."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    raise ConfigError(f"unknown optimizer {name!r}; allowed: adam, sgd")


class TorchWorkload(Workload):
    def __init__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, task: str, precision: str,
                 optimizer: torch.optim.Optimizer | None, device: torch.device):
        self.model, self.x, self.y, self.task, self.precision = model, x, y, task, precision
        self.opt, self.device = optimizer, device
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.batch_size = x.shape[0]
        # fp16 training needs loss scaling; bf16 has fp32's range and does not.
        self.scaler = torch.amp.GradScaler(device.type) if (task == "train" and precision == "fp16") else None

    def step(self):
        if self.task == "infer":
            with torch.inference_mode(), autocast(self.device, self.precision):
                return self.model(self.x)
        with autocast(self.device, self.precision):
            loss = F.cross_entropy(self.model(self.x), self.y)
        self.opt.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.opt)  # clip the true gradients, not the scaled ones
            torch.nn.utils.clip_grad_norm_(self.params, CLIP_NORM)
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.params, CLIP_NORM)
            self.opt.step()
        return loss

    def sync(self, out) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        self.model = self.x = self.y = self.opt = self.params = None


class TorchBackend(Backend):
    name = "torch"

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self._rss = PeakRSS()

    # -- setup -------------------------------------------------------------------------------------
    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable(f"device {device!r} requested but CUDA is not available here; use --device cpu")
        if dev.type not in ("cpu", "cuda"):
            raise ConfigError(f"unknown device {device!r}; allowed: cpu, cuda, cuda:N")
        self.device = dev
        if threads is not None:
            if threads < 1:
                raise ConfigError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        return {
            "backend": "torch",
            "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            **self.versions(),
        }

    def versions(self) -> dict[str, str]:
        import timm

        v = {"torch": torch.__version__, "timm": timm.__version__}
        if self.device.type == "cuda":
            v["cuda"] = torch.version.cuda or ""
            v["cudnn"] = str(torch.backends.cudnn.version())
        return v

    # -- model + step --------------------------------------------------------------------------------
    def build(self, spec: ModelSpec, resolution: int, num_classes: int) -> torch.nn.Module:
        return build_torch_model(spec, resolution, num_classes, device=self.device)

    def prepare(self, settings: RunSettings) -> TorchWorkload:
        if settings.precision not in _DTYPES:
            raise ConfigError(f"unknown precision {settings.precision!r}; allowed: {', '.join(_DTYPES)}")
        if settings.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {settings.batch_size}")
        spec = get_spec(settings.model)
        res = settings.resolution or spec.resolution
        k = settings.num_classes or spec.num_classes
        torch.manual_seed(settings.seed)
        model = self.build(spec, res, k)
        channels_last = settings.channels_last if settings.channels_last is not None else spec.family != "vit"
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt)
        model.train(settings.task == "train")
        gen = torch.Generator().manual_seed(settings.seed)
        x = torch.randn(settings.batch_size, 3, res, res, generator=gen).to(self.device, memory_format=fmt)
        y = torch.randint(0, k, (settings.batch_size,), generator=gen).to(self.device)
        opt = make_optimizer(settings.optimizer, model.parameters()) if settings.task == "train" else None
        if settings.compile:
            model = torch.compile(model)
        return TorchWorkload(model, x, y, settings.task, settings.precision, opt, self.device)

    def time_steps(self, work: Workload, min_steps: int, min_seconds: float, max_seconds: float,
                   max_steps: int = 100_000) -> list[float]:
        if self.device.type != "cuda":
            return super().time_steps(work, min_steps, min_seconds, max_seconds, max_steps)
        times: list[float] = []
        start = time.perf_counter()
        while True:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            work.step()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) / 1000.0)  # ms -> s, device time
            elapsed = time.perf_counter() - start
            if len(times) >= max_steps or elapsed >= max_seconds or (len(times) >= min_steps
                                                                    and elapsed >= min_seconds):
                return times

    # -- memory ----------------------------------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        gc.collect()
        self._rss.reset()

    def peak_memory_mib(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        return self._rss.growth_mib()

    def process_peak_mib(self) -> float:
        """Whole-process peak (device allocator on CUDA; peak RSS on CPU): what a memory budget compares to."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_reserved(self.device) / 2**20
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

    def matmul_flops_per_s(self, precision: str = "fp32", n: int = 2048, seconds: float = 1.0) -> float:
        dtype = _DTYPES[precision]
        if self.device.type == "cpu" and precision == "fp16":
            dtype = torch.bfloat16  # CPU fp16 GEMM is emulated; bf16 is what autocast would use well
        a = torch.randn(n, n, device=self.device, dtype=dtype)
        b = torch.randn(n, n, device=self.device, dtype=dtype)

        class _MM(Workload):
            batch_size = 1

            def step(self_):
                return a @ b

            def sync(self_, out):
                if a.is_cuda:
                    torch.cuda.synchronize(a.device)

        work = _MM()
        for _ in range(2):
            work.sync(work.step())
        times = self.time_steps(work, min_steps=5, min_seconds=seconds, max_seconds=10 * seconds)
        times.sort()
        return 2 * n**3 / times[len(times) // 2]  # 2 FLOPs per MAC, median step
