"""Datasheet dense peaks of accelerators, per precision: the MFU denominator wherever a vendor publishes one.

One row per device: a pattern matched against the device name the driver reports (the same string on every
framework: torch.cuda.get_device_name, jax Device.device_kind), its dense peak TFLOP/s per precision, and where
the numbers come from. Dense, never sparse: NVIDIA's datasheets mark the 2:4-sparsity figures with an asterisk
("* with sparsity"; dense is half), and those are halved here with the datasheet's figure kept in the comment.
Reduced precisions are the fp32-accumulate tensor rates (what autocast's matmuls run at); GeForce cards run
fp16/bf16 with fp32 accumulation at half their fp16-accumulate rate, and the table takes the fp32-accumulate one.
A precision a row does not name has no datasheet peak (TPU fp32: bf16 passes, no published rate): vitbench then
measures one (vitbench.measure.peak). Peaks are at boost clock: a device held below it (power cap, heat) cannot
reach them, which `vitbench doctor` shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DatasheetPeak:
    """A device's published dense peaks."""

    device: str  # the table's name for the device
    pattern: str  # regular expression searched (case-insensitively) in the driver's device name
    tflops: dict[str, float]  # precision -> dense TFLOP/s
    source: str


def _sparse(tflops: float) -> float:
    """A datasheet figure marked "with sparsity" -> the dense rate (NVIDIA: "1/2 lower without sparsity")."""
    return tflops / 2


# Order matters: the first row whose pattern matches wins (variants before their family name).
TABLE: tuple[DatasheetPeak, ...] = (
    # NVIDIA H100 Tensor Core GPU datasheet (nvidia.com, 2023): SXM / PCIe / NVL columns;
    # TF32 989* / 756* / 835*, BF16 and FP16 1979* / 1513* / 1671* (* with sparsity), FP32 67 / 51 / 60.
    DatasheetPeak("H100 PCIe", r"\bH100\b.*\bPCIe\b", {"fp32": 51.0, "tf32": _sparse(756), "bf16": _sparse(1513),
                                                       "fp16": _sparse(1513)}, "NVIDIA H100 datasheet (PCIe)"),
    DatasheetPeak("H100 NVL", r"\bH100 NVL\b", {"fp32": 60.0, "tf32": _sparse(835), "bf16": _sparse(1671),
                                                "fp16": _sparse(1671)}, "NVIDIA H100 datasheet (NVL)"),
    # The SXM5 part reports itself as "NVIDIA H100 80GB HBM3" (or "H100 SXM5 ...").
    DatasheetPeak("H100 SXM", r"\bH100\b", {"fp32": 67.0, "tf32": _sparse(989), "bf16": _sparse(1979),
                                            "fp16": _sparse(1979)}, "NVIDIA H100 datasheet (SXM)"),
    # NVIDIA GH200 Grace Hopper Superchip datasheet: the Hopper GPU's rates are the H100 SXM's.
    DatasheetPeak("GH200", r"\bGH200\b", {"fp32": 67.0, "tf32": _sparse(989), "bf16": _sparse(1979),
                                          "fp16": _sparse(1979)}, "NVIDIA GH200 datasheet"),
    # NVIDIA H200 Tensor Core GPU datasheet (2024): SXM / NVL columns, TF32 989* / 835*, BF16 and FP16
    # 1979* / 1671*, FP32 67 / 60.
    DatasheetPeak("H200 NVL", r"\bH200 NVL\b", {"fp32": 60.0, "tf32": _sparse(835), "bf16": _sparse(1671),
                                                "fp16": _sparse(1671)}, "NVIDIA H200 datasheet (NVL)"),
    DatasheetPeak("H200 SXM", r"\bH200\b", {"fp32": 67.0, "tf32": _sparse(989), "bf16": _sparse(1979),
                                            "fp16": _sparse(1979)}, "NVIDIA H200 datasheet (SXM)"),
    # NVIDIA A100 Tensor Core GPU datasheet (2021): FP32 19.5, TF32 156 (312*), BF16 and FP16 312 (624*);
    # the same for the 40 and 80 GB, SXM4 and PCIe parts.
    DatasheetPeak("A100", r"\bA100\b", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
                  "NVIDIA A100 datasheet"),
    # NVIDIA A10 datasheet: FP32 31.2, TF32 62.5 (125*), BF16 and FP16 125 (250*). (Not the A10G.)
    DatasheetPeak("A10", r"\bA10\b", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
                  "NVIDIA A10 datasheet"),
    # NVIDIA L40S datasheet: FP32 91.6, TF32 183 (366*), BF16 and FP16 362.05 (733*).
    DatasheetPeak("L40S", r"\bL40S\b", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05},
                  "NVIDIA L40S datasheet"),
    # NVIDIA L40 datasheet: FP32 90.5, TF32 90.5 (181*), BF16 and FP16 181.05 (362.1*).
    DatasheetPeak("L40", r"\bL40\b", {"fp32": 90.5, "tf32": 90.5, "bf16": 181.05, "fp16": 181.05},
                  "NVIDIA L40 datasheet"),
    # NVIDIA L4 datasheet: FP32 30.3, TF32 120*, BF16 and FP16 242* (* with sparsity).
    DatasheetPeak("L4", r"\bL4\b", {"fp32": 30.3, "tf32": _sparse(120), "bf16": _sparse(242),
                                    "fp16": _sparse(242)}, "NVIDIA L4 datasheet"),
    # NVIDIA V100 datasheet: SXM2 FP32 15.7, tensor (FP16, fp32 accumulate) 125; PCIe 14 / 112. No TF32/BF16.
    DatasheetPeak("V100 SXM2", r"\bV100-SXM2\b", {"fp32": 15.7, "fp16": 125.0}, "NVIDIA V100 datasheet (SXM2)"),
    DatasheetPeak("V100 PCIe", r"\bV100-PCIE\b", {"fp32": 14.0, "fp16": 112.0}, "NVIDIA V100 datasheet (PCIe)"),
    # NVIDIA T4 datasheet: FP32 8.1, mixed precision (FP16/FP32) 65.
    DatasheetPeak("T4", r"\bT4\b", {"fp32": 8.1, "fp16": 65.0}, "NVIDIA T4 datasheet"),
    # NVIDIA Ada GPU architecture whitepaper, appendix table (GeForce RTX 4090): FP32 82.6, TF32 tensor 82.6,
    # FP16/BF16 tensor with FP32 accumulate 165.2 (dense).
    DatasheetPeak("RTX 4090", r"\bRTX 4090\b(?! D)", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2},
                  "NVIDIA Ada Lovelace architecture whitepaper (RTX 4090)"),
    # Same whitepaper (GeForce RTX 4080): FP32 48.7, TF32 48.7, FP16/BF16 with FP32 accumulate 97.5 (dense).
    DatasheetPeak("RTX 4080", r"\bRTX 4080\b(?! SUPER)", {"fp32": 48.7, "tf32": 48.7, "bf16": 97.5, "fp16": 97.5},
                  "NVIDIA Ada Lovelace architecture whitepaper (RTX 4080)"),
    # NVIDIA Ampere GA102 GPU architecture whitepaper, table (GeForce RTX 3090): FP32 35.6, TF32 tensor 35.6,
    # FP16/BF16 tensor with FP32 accumulate 71 (dense).
    DatasheetPeak("RTX 3090", r"\bRTX 3090\b(?! Ti)", {"fp32": 35.6, "tf32": 35.6, "bf16": 71.0, "fp16": 71.0},
                  "NVIDIA Ampere GA102 architecture whitepaper (RTX 3090)"),
    # Google Cloud TPU documentation, system architecture pages, "peak compute per chip (bf16)". JAX names the
    # chips "TPU v4", "TPU v5 lite" (v5e), "TPU v5" / "TPU v5p", "TPU v6 lite" (v6e, Trillium).
    DatasheetPeak("TPU v4", r"^TPU v4$", {"bf16": 275.0}, "cloud.google.com/tpu/docs/v4"),
    DatasheetPeak("TPU v5e", r"^TPU v5( lite|e)$", {"bf16": 197.0}, "cloud.google.com/tpu/docs/v5e"),
    DatasheetPeak("TPU v5p", r"^TPU v5p?$", {"bf16": 459.0}, "cloud.google.com/tpu/docs/v5p"),
    DatasheetPeak("TPU v6e", r"^TPU v6( lite|e)$", {"bf16": 918.0}, "cloud.google.com/tpu/docs/v6e"),
)


def lookup(device_name: str) -> DatasheetPeak | None:
    """The datasheet row of a device, by the name its driver reports; None for devices without one (CPUs) and
    for a MIG slice ("NVIDIA A100-SXM4-40GB MIG 1g.5gb": a fraction of the chip's SMs, which the whole chip's
    peak would overstate up to 7x; NVIDIA's MIG user guide), whose peak is measured instead."""
    if re.search(r"\bMIG\b", device_name):
        return None
    for row in TABLE:
        if re.search(row.pattern, device_name.strip(), re.IGNORECASE):
            return row
    return None


def datasheet_tflops(device_name: str, precision: str) -> tuple[float, DatasheetPeak] | None:
    """(dense TFLOP/s, its row) for a device and precision, or None when the datasheet has no such figure."""
    row = lookup(device_name)
    if row is None or precision not in row.tflops:
        return None
    return row.tflops[precision], row
