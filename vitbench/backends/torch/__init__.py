"""The PyTorch backend: timm models, eager or torch.compile, autocast precisions, channels_last, CPU or CUDA.

This module only registers the backend (nothing of torch is imported); the implementation is
`vitbench.backends.torch.backend.TorchBackend`, with transfer training in `training.py`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vitbench.backends.base import BackendSpec, Capability, register_backend

NAME = "torch"
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _check(fields: Mapping[str, Any]) -> list[tuple[str, str]]:
    device = fields.get("device")
    if device is not None and not _DEVICE.match(str(device)):
        return [("device", f"backend {NAME!r} runs on cpu, cuda or cuda:N")]
    return []


SPEC = register_backend(BackendSpec(
    name=NAME,
    implementation="vitbench.backends.torch.backend:TorchBackend",
    requires=("torch", "timm"),
    capabilities=frozenset(Capability),
    precisions=("fp32", "bf16", "fp16"),
    devices="cpu | cuda | cuda:N",
    preload=("torch", "timm", "vitbench.backends.torch.backend"),
    distributions=("torch", "timm"),
    check=_check,
    install="pip install vitbench (torch and timm are core dependencies)",
    description="PyTorch + timm: eager or torch.compile, autocast bf16/fp16, CUDA events for timing",
))
