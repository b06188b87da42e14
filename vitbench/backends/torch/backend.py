"""PyTorch backend: timm models, eager or torch.compile, autocast precisions, channels_last, CPU or CUDA.

Timing: on CUDA each step is bracketed by CUDA events and the end event is synchronised, so the time is the
device's and never just the launch; on CPU eager execution is synchronous and the host clock is exact.
Transfer: models in timm naming, trained with the optimiser of `training.py`, fp32.
"""

from __future__ import annotations

import contextlib
import gc
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from vitbench.backends.base import Backend, Step, Workload
from vitbench.backends.torch import SPEC
from vitbench.backends.torch.training import distillation_loss, make_optimizer, update
from vitbench.errors import BackendUnavailable, ConfigError
from vitbench.models.specs import ModelSpec, get_spec
from vitbench.models.torch import build_torch_model, feature_forward, forward_heads, unfused_attention
from vitbench.procmem import PeakRSS
from vitbench.transfer.distill import Distill
from vitbench.transfer.schedules import OptimConfig, lr_table

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str):
    """Mixed precision by autocast (weights stay fp32, as in standard AMP training); fp32 is a no-op."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_DTYPES[precision])


class TorchWorkload(Workload):
    def __init__(self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, mode: str, precision: str,
                 opt: OptimConfig | None, device: torch.device):
        self.model, self.x, self.y, self.mode, self.precision = model, x, y, mode, precision
        self.device, self.opt = device, opt
        self.batch_size = x.shape[0]
        if mode == "train":
            self.optim, self.decay, self.params = make_optimizer(opt, model)
        # fp16 training needs loss scaling; bf16 has fp32's range and does not.
        self.scaler = torch.amp.GradScaler(device.type) if (mode == "train" and precision == "fp16") else None

    def step(self):
        if self.mode == "infer":
            with torch.inference_mode(), autocast(self.device, self.precision):
                return self.model(self.x)
        with autocast(self.device, self.precision):
            loss = F.cross_entropy(self.model(self.x), self.y)
        self.optim.zero_grad(set_to_none=True)
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
        update(self.optim, self.params, self.decay, self.opt, self.opt.lr, self.scaler)
        return loss

    def sync(self, out) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        self.model = self.x = self.y = self.optim = self.params = self.decay = None


class TorchBackend(Backend):
    spec = SPEC

    def __init__(self) -> None:
        self.device = torch.device("cpu")
        self._rss = PeakRSS()
        self.compile_s = 0.0

    # -- setup -------------------------------------------------------------------------------------
    def setup(self, device: str = "cpu", threads: int | None = None) -> dict:
        try:
            dev = torch.device(device)
        except RuntimeError:
            dev = None
        if dev is None or dev.type not in ("cpu", "cuda"):
            raise ConfigError(f"unknown device {device!r}; allowed: {self.spec.devices}")
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise BackendUnavailable(f"device {device!r} requested but CUDA is not available here; use --device cpu")
        self.device = dev
        if threads is not None:
            if threads < 1:
                raise ConfigError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        return {
            "backend": self.name,
            "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            **self.versions(),
        }

    def versions(self) -> dict[str, str | None]:
        v = super().versions()
        if self.device.type == "cuda":
            v["cuda"] = torch.version.cuda or ""
            v["cudnn"] = str(torch.backends.cudnn.version())
        return v

    # -- model + step --------------------------------------------------------------------------------
    def prepare(self, step: Step) -> TorchWorkload:
        if step.precision not in _DTYPES:
            raise ConfigError(f"unknown precision {step.precision!r}; allowed: {', '.join(_DTYPES)}")
        if step.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {step.batch_size}")
        spec = get_spec(step.model)
        res = spec.resolution if step.resolution is None else step.resolution
        k = step.num_classes or spec.num_classes
        torch.manual_seed(step.seed)
        model = build_torch_model(spec, res, k, device=self.device)
        channels_last = step.channels_last if step.channels_last is not None else spec.family != "vit"
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        model = model.to(memory_format=fmt)
        model.train(step.mode == "train")
        gen = torch.Generator().manual_seed(step.seed)
        x = torch.randn(step.batch_size, 3, res, res, generator=gen).to(self.device, memory_format=fmt)
        y = torch.randint(0, k, (step.batch_size,), generator=gen).to(self.device)
        opt = OptimConfig(optimizer=step.optimizer) if step.mode == "train" else None
        if step.compile:
            model = torch.compile(model)
        return TorchWorkload(model, x, y, step.mode, step.precision, opt, self.device)

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

    # -- transfer ------------------------------------------------------------------------------------------
    def init_model(self, spec: ModelSpec, resolution: int, num_classes: int, seed: int) -> torch.nn.Module:
        torch.manual_seed(seed)
        return build_torch_model(spec, resolution, num_classes, device=self.device)

    def weights(self, model: torch.nn.Module) -> dict[str, np.ndarray]:
        return {k: v.detach().float().cpu().numpy().copy() for k, v in model.state_dict().items()}

    def load_weights(self, model: torch.nn.Module, weights: dict[str, np.ndarray]) -> torch.nn.Module:
        state = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in weights.items()}
        model.load_state_dict(state, strict=True)
        return model

    def _tensor(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous().to(self.device)  # NHWC -> NCHW

    def train(self, model: torch.nn.Module, data, resolution: int, opt: OptimConfig, batch_size: int,
              seed: int, distill: Distill | None = None) -> tuple[torch.nn.Module, list[float]]:
        from vitbench.transfer.data import batch_indices

        optim, decay, params = make_optimizer(opt, model)
        lrs = lr_table(opt)
        loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=opt.label_smoothing)
        order = batch_indices(len(data), batch_size, opt.steps, seed)
        losses = []
        model.train()
        for step in range(opt.steps):
            x, y = data.batch(order[step], resolution)
            x, y = self._tensor(x), torch.from_numpy(y).to(self.device)
            if distill is None:
                loss = loss_fn(model(x), y)
            else:  # DeiT: class head on the labels, distillation head on the teacher (same head if no token)
                teacher = torch.from_numpy(distill.teacher_logits(order[step])).to(self.device)
                loss = distillation_loss(*forward_heads(model, x), y, teacher, distill, opt.label_smoothing)
            optim.zero_grad(set_to_none=True)
            loss.backward()
            update(optim, params, decay, opt, float(lrs[step]))
            losses.append(loss.detach())
        model.eval()
        return model, [float(v) for v in torch.stack(losses).cpu()] if losses else []

    @torch.inference_mode()
    def features(self, model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
        model.eval()
        return feature_forward(model, self._tensor(x)).float().cpu().numpy()

    @torch.inference_mode()
    def logits(self, model: torch.nn.Module, x: np.ndarray) -> np.ndarray:
        model.eval()
        return model(self._tensor(x)).float().cpu().numpy()
