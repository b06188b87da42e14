"""The OpenVINO backend: the eager torch model exported by torch.export and converted by OpenVINO's converter
(openvino.convert_model from the exported program: a forward that branches on its data is refused, not traced
down one branch), saved as IR (fp32 weights), cached, and compiled for OpenVINO's CPU plug-in with an explicit
f32 inference precision; inference only.

This module only registers the backend (nothing of openvino or torch is imported); the implementation is
`vitbench.backends.openvino.backend.OpenVinoBackend`, over the runtime backends' shared code
(vitbench.backends.runtime). docs/runtimes.md says what its numbers include.
"""

from __future__ import annotations

from vitbench.backends.base import BackendSpec, register_backend
from vitbench.backends.runtime_spec import INFERENCE_ONLY, cpu_only_check

NAME = "openvino"

SPEC = register_backend(BackendSpec(
    name=NAME,
    implementation="vitbench.backends.openvino.backend:OpenVinoBackend",
    requires=("openvino", "torch", "timm"),
    capabilities=INFERENCE_ONLY,
    # fp32: INFERENCE_PRECISION_HINT f32 and EXECUTION_MODE_HINT ACCURACY, set explicitly (the CPU plug-in
    # defaults to bf16 on CPUs with AMX or avx512_bf16: OpenVINO's CPU device docs, "Inference precision")
    precisions=("fp32",),
    devices="cpu",
    preload=("openvino", "torch", "vitbench.backends.openvino.backend"),
    distributions=("openvino", "torch", "timm"),
    check=cpu_only_check(NAME),
    install="pip install 'vitbench[openvino]'",
    description="OpenVINO (CPU plug-in) on the torch model converted to IR (conversion apart, cached); f32 "
                "inference precision set explicitly; inference only",
))
