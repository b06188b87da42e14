"""How the PyTorch backend computes each precision (set by the backend's `prepare` and `matmul_workload`, read back
from torch and recorded with every step):
- fp32: full IEEE fp32 matmuls AND convolutions. torch's defaults are not that on NVIDIA GPUs: cuDNN convolutions
  run in TF32 by default (`torch.backends.cudnn.allow_tf32` is True), so both cuBLAS and cuDNN flags are set
  (`torch.backends.cuda.matmul.allow_tf32 = False`, `torch.backends.cudnn.allow_tf32 = False`,
  `torch.set_float32_matmul_precision("highest")`; PyTorch docs, "TensorFloat-32 (TF32) on Ampere (and later)
  devices"). The legacy flags are used, not the newer `fp32_precision` ones: torch refuses a mix of the two and
  Inductor still reads the legacy ones.
- tf32: the same three flags the other way ("high"): fp32 storage, TF32 tensor-core matmuls and convolutions.
  Not on CPU (no TF32 there: refused when a study is parsed).
- bf16 / fp16: autocast to that dtype (weights stay fp32, as in AMP training); what autocast leaves in fp32 runs
  in full fp32 (the fp32 flags above).
"""

from __future__ import annotations

import contextlib

import torch

from vitbench.errors import ConfigError

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}  # precisions computed under autocast


def set_matmul_precision(precision: str) -> dict:
    """Set how torch computes fp32 matmuls and convolutions for `precision` (see the module docstring) and
    return the numerics in force, read back from torch."""
    if precision not in DTYPES:
        raise ConfigError(f"unknown precision {precision!r}; allowed: {', '.join(DTYPES)}")
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    return numerics(precision)


def numerics(precision: str) -> dict:
    """The numerics torch reports now, for a step of `precision`."""
    fp32 = torch.get_float32_matmul_precision()
    cublas, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    autocast_dtype = _AUTOCAST.get(precision)
    return {
        # what fp32 matmuls compute in: TF32 if either library may use it
        "matmul_precision": "tf32" if (cublas or cudnn or fp32 != "highest") else "fp32",
        "autocast": str(autocast_dtype).removeprefix("torch.") if autocast_dtype is not None else None,
        "framework": f"float32_matmul_precision={fp32} cuda.matmul.allow_tf32={cublas} "
                     f"cudnn.allow_tf32={cudnn} autocast={autocast_dtype or 'off'}",
    }


def autocast(device: torch.device, precision: str):
    """Mixed precision by autocast (weights stay fp32, as in standard AMP training); fp32 and tf32: a no-op."""
    if precision not in _AUTOCAST:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=_AUTOCAST[precision])
