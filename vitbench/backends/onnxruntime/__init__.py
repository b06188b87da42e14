"""The ONNX Runtime backend: the eager torch model exported to ONNX (torch.onnx.export), cached, and run by ONNX
Runtime's CPU execution provider; inference only (fp32, or int8 by ONNX Runtime's dynamic quantization).

This module only registers the backend (nothing of onnxruntime or torch is imported); the implementation is
`vitbench.backends.onnxruntime.backend.OrtBackend`, over the runtime backends' shared code
(vitbench.backends.runtime). docs/runtimes.md says what its numbers include.
"""

from __future__ import annotations

from vitbench.backends.base import BackendSpec, register_backend
from vitbench.backends.runtime_spec import INFERENCE_ONLY, cpu_only_check

NAME = "onnxruntime"

SPEC = register_backend(BackendSpec(
    name=NAME,
    implementation="vitbench.backends.onnxruntime.backend:OrtBackend",
    requires=("onnxruntime", "onnx", "onnxscript", "torch", "timm"),
    capabilities=INFERENCE_ONLY,
    # fp32: MLAS's fp32 kernels, no reduced-precision math; int8: onnxruntime.quantization.quantize_dynamic
    # (int8 weights, activations quantised per batch at run time, int32 accumulation) for the products with a
    # weight; a product of two activations (attention's) stays fp32 (the row counts both)
    precisions=("fp32", "int8"),
    devices="cpu",
    preload=("onnxruntime", "torch", "vitbench.backends.onnxruntime.backend"),
    distributions=("onnxruntime", "onnx", "onnxscript", "torch", "timm"),
    check=cpu_only_check(NAME),
    install="pip install 'vitbench[onnxruntime]'",
    description="ONNX Runtime (CPU execution provider) on the torch model exported to ONNX (export apart, "
                "cached); fp32 or int8 dynamic quantization; inference only",
))
