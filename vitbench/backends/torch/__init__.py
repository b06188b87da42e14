"""The PyTorch backend: timm models, eager or torch.compile, autocast precisions, channels_last, CPU or CUDA.

This module only registers the backend (nothing of torch is imported); the implementation is
`vitbench.backends.torch.backend.TorchBackend`, with transfer training in `training.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vitbench.backends.base import BackendSpec, Capability, DeviceKind, register_backend
from vitbench.backends.kinds import TF32_OFF_GPU, Parallelism

NAME = "torch"
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _check(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    device = fields.get("device")
    if device is not None and not _DEVICE.match(str(device)):
        return [("device", f"backend {NAME!r} runs on cpu, cuda or cuda:N")]
    if fields.get("devices", 1) > 1 and ":" in str(device or ""):
        return [("device", "with devices > 1, device names the kind (cpu or cuda): rank r runs on cuda:r")]
    if (fields.get("precision") == "fp16" and fields.get("parallelism") == Parallelism.FSDP.value
            and fields.get("devices", 1) > 1 and "train" in (fields.get("task"), fields.get("mode"))):
        # GradScaler's found-inf is per rank under FSDP2's sharded gradients: ranks could disagree on skipping
        # a step (torch.amp.GradScaler's docs: ShardedGradScaler is FSDP1's), and their weights part
        return [("precision", "fp16 training under fsdp needs a gradient scaler that agrees across ranks, which "
                              "this backend does not have: use bf16 (no loss scaling), or dp")]
    if fields.get("precision") == "tf32" and str(device or "cpu").startswith("cpu"):
        return [("precision", TF32_OFF_GPU)]
    return []


SPEC = register_backend(BackendSpec(
    name=NAME,
    implementation="vitbench.backends.torch.backend:TorchBackend",
    requires=("torch", "timm"),
    capabilities=frozenset(Capability),
    precisions=("fp32", "tf32", "bf16", "fp16"),
    devices="cpu | cuda | cuda:N",
    device_names=((DeviceKind.CPU, "cpu"), (DeviceKind.GPU, "cuda:{index}")),
    # torch.compile's modes (torch.compile docstring): default, CUDA graphs, autotuned kernels (+ graphs), ...
    compile_modes=("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
    memory_formats=True,  # channels_last or contiguous, per trial (backend.py: the model and its input)
    preload=("torch", "timm", "vitbench.backends.torch.backend"),
    distributions=("torch", "timm"),
    counter_distributions=("fvcore",),  # count_flops: fvcore's FlopCountAnalysis beside torch's FlopCounterMode
    # inductor's and Dynamo's configs (torch/_inductor/config.py, torch/_dynamo/config.py); torch.jit tracing and
    # scripting, which fvcore's counter runs (torch/jit/_state.py)
    compiler_env=("TORCHINDUCTOR_", "TORCHDYNAMO_", "PYTORCH_JIT"),
    check=_check,
    # DDP / FSDP2 (fully_shard), one process per device (gloo on CPU, NCCL on CUDA): distributed.py, launch in
    # vitbench.measure.ranks
    parallelisms=(Parallelism.DP, Parallelism.FSDP),
    process_per_device=True,
    install="pip install vitbench (torch and timm are core dependencies)",
    description="PyTorch + timm: eager or torch.compile (modes), fp32/tf32 flags, autocast bf16/fp16, CUDA events",
))
