"""OpenVINO backend: the eager torch model (built and seeded as the torch backend builds it) exported by
torch.export (batch axis dynamic: one IR serves every batch size) and converted by openvino.convert_model from
that ExportedProgram, saved as IR with fp32 weights (save_model's default compresses them to fp16: turned off),
cached (vitbench.backends.graphs), reshaped to the step's static batch and compiled for the CPU plug-in.

Why torch.export first: convert_model on the torch module traces it (TorchScript), and a forward that branches on
its data (`if x.mean() > 0`, a loop over a tensor's value) had the branch the example input took baked into the
IR without a word: the runtime then computed another function than the torch model. torch.export refuses such a
forward (a guard on a data-dependent value); the refusal is one ConfigError line (exit 2), as the ONNX Runtime
backend's. An exported program with an operation OpenVINO's torch.export front end cannot convert (timm's ViTs
with dynamic_img_size: aten._upsample_bicubic2d_aa, exported because timm skips its same-size early-out while
exporting) is converted by the tracing front end instead: torch.export has shown the forward takes no branch on
its data and none on the batch size, so the trace on the same example follows the one path the export found.

fp32 means no reduced precision: INFERENCE_PRECISION_HINT f32 and EXECUTION_MODE_HINT ACCURACY, set explicitly
(the CPU plug-in picks bf16 by itself on CPUs with AMX or avx512_bf16: OpenVINO's CPU device docs, "Inference
precision") and read back from the compiled model into the row. Threads: INFERENCE_NUM_THREADS = intra-op;
NUM_STREAMS = 1 (one inference at a time: the inter-op count), hyper-threading off, no core pinning.
Everything else: vitbench.backends.runtime.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from pathlib import Path

import numpy as np
import openvino as ov
import torch
from openvino.frontend import OpConversionFailure

from vitbench.backends.base import Step
from vitbench.backends.graphs import Graph
from vitbench.backends.openvino import SPEC
from vitbench.backends.runtime import RuntimeBackend, RuntimeWorkload, export_refused
from vitbench.env import distribution_version
from vitbench.errors import looks_like_oom
from vitbench.models.torch import build_torch_model

IR_FILE, WEIGHTS_FILE = "model.xml", "model.bin"  # the IR's graph, and its constants (the weights) beside it
DEVICE = "CPU"
PRECISION_HINT = {"fp32": "f32"}  # vitbench's precision -> INFERENCE_PRECISION_HINT
# What the compiled model is asked for besides threads, and read back into the row (CPU plug-in properties).
FIXED = {"EXECUTION_MODE_HINT": "ACCURACY", "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
         "ENABLE_HYPER_THREADING": "NO", "ENABLE_CPU_PINNING": "NO"}
READ_BACK = ("INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS",
             "PERFORMANCE_HINT")
# What the graph key records of the conversion (vitbench.backends.graphs hashes graph_request into the key): an IR
# converted the old way (convert_model tracing the module, unchecked) is not found under the new key
CONVERTER = ("torch.export.export(dynamic batch) -> openvino.convert_model(ExportedProgram), "
             "or convert_model(torch.nn.Module) where OpenVINO cannot convert the exported program")


class OpenVinoBackend(RuntimeBackend):
    spec = SPEC

    def __init__(self) -> None:
        super().__init__()
        self.core = ov.Core()

    def cache_subdir(self) -> str:
        return f"openvino-{distribution_version('openvino')}-torch-{distribution_version('torch')}"

    def graph_request(self, step: Step) -> dict:
        # the IR is fp32 whatever the precision asked: the inference precision is a compile-time property
        return {"converter": CONVERTER, "dynamic_axes": {"images": [0]},
                "compress_to_fp16": False}

    def export(self, step: Step, directory: Path) -> None:
        ov.save_model(convert(step), str(directory / IR_FILE), compress_to_fp16=False)

    def config(self, precision: str) -> dict:
        return {"INFERENCE_PRECISION_HINT": PRECISION_HINT[precision], "INFERENCE_NUM_THREADS": str(self.threads),
                **FIXED}

    def compiled(self, graph: Graph, step: Step, batch: int) -> ov.CompiledModel:
        spec = step.spec
        res = spec.resolution if step.resolution is None else step.resolution
        model = self.core.read_model(str(graph.path / IR_FILE))
        model.reshape({0: [batch, 3, res, res]})
        return self.core.compile_model(model, DEVICE, self.config(step.precision))

    def load(self, graph: Graph, step: Step, x: np.ndarray) -> RuntimeWorkload:
        compiled = self.compiled(graph, step, x.shape[0])
        request = compiled.create_infer_request()
        request.set_input_tensor(ov.Tensor(x))  # shares x's memory
        props = {k: _word(compiled.get_property(k)) for k in READ_BACK}
        settings = {"matmul_precision": props["INFERENCE_PRECISION_HINT"],
                    "framework": f"openvino {ov.get_version()} {DEVICE} "
                                 + " ".join(f"{k}={v}" for k, v in props.items()),
                    **{f"openvino_{k.lower()}": v for k, v in props.items()}}

        def run():
            request.infer()
            return request.get_output_tensor(0).data

        other = compiled.create_infer_request()  # the timed request's input stays as it is

        def run_on(images: np.ndarray) -> np.ndarray:
            return other.infer({0: images})[0]

        # the state: the IR's constants (model.bin, fp32 weights), not its graph's XML
        return RuntimeWorkload(run, x, graph, settings, run_on=run_on,
                               weight_bytes=(graph.path / WEIGHTS_FILE).stat().st_size)

    def count_flops(self, spec, resolution: int, num_classes: int) -> dict[str, dict]:
        """MACs of the converted model's MatMul and (group) convolution operations at batch 1, from the shapes
        OpenVINO's model carries (before the CPU plug-in's own transformations): what the runtime is given."""
        step = Step(spec.name, batch_size=1, resolution=resolution, num_classes=num_classes, spec=spec)
        model = convert(step)
        model.reshape({0: [1, 3, resolution, resolution]})
        return {"openvino_model": {"macs": float(model_macs(model)), "excludes": "everything but MatMul, "
                                   "attention and (group) convolution operations (norms, softmax, activations, "
                                   "adds)"}}

    def numerics_in_force(self) -> str | None:
        return (f"INFERENCE_PRECISION_HINT={PRECISION_HINT['fp32']} "
                f"EXECUTION_MODE_HINT={FIXED['EXECUTION_MODE_HINT']}")


def _word(value) -> str:
    """A property as OpenVINO spells it in a config: an element type's name (f32), an enum member's (ACCURACY)."""
    if hasattr(value, "to_string"):
        return value.to_string()
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else str(value)


def convert(step: Step) -> ov.Model:
    """The eager model of `step` (seeded as the torch backend seeds it) exported by torch.export with the batch
    axis dynamic and converted from the exported program (the module docstring says why, and when the converter
    traces the module instead)."""
    spec = step.spec
    res = spec.resolution if step.resolution is None else step.resolution
    torch.manual_seed(step.seed)
    model = build_torch_model(spec, res, step.num_classes or spec.num_classes).eval()
    x = torch.zeros(2, 3, res, res)  # batch 2: a batch of 1 would be specialised to a constant
    shape = [ov.PartialShape([-1, 3, res, res])]
    program = export_program(model, x, spec.name)
    try:
        return ov.convert_model(program, input=shape)
    except OpConversionFailure:  # an operation of the exported program the front end lacks: trace (docstring)
        pass
    with torch.no_grad(), warnings.catch_warnings():
        # the converter's torch.jit.trace chatter (its deprecation, python bools of shapes at this resolution):
        # the converted model's logits are checked against torch's (tests/test_runtimes.py), not the noise
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return ov.convert_model(model, example_input=x, input=shape)


def export_program(model: torch.nn.Module, x: torch.Tensor, name: str) -> torch.export.ExportedProgram:
    """torch.export of `model` on `x`, the batch axis dynamic; its refusal (a forward that branches on its data,
    or on the batch size) as one ConfigError line naming the model and the backend to use instead."""
    batch = torch.export.Dim("batch", min=1, max=2**20)
    try:
        # torch.export prints the FX graph it failed on (kilobytes) before raising: kept off the terminal
        with torch.no_grad(), open(os.devnull, "w") as null, contextlib.redirect_stdout(null), \
                contextlib.redirect_stderr(null):
            return torch.export.export(model, (x,), dynamic_shapes=({0: batch},))
    except Exception as e:
        if looks_like_oom(e):
            raise
        raise export_refused("openvino", name, "with torch.export", e) from None


def model_macs(model: ov.Model) -> int:
    """Multiply-accumulates of `model` (static shapes): MatMul (output elements x the reduced dimension, by its
    transpose_a flag), ScaledDotProductAttention (its two products: L x S x d and L x S x dv per head),
    Convolution (output elements x the weight's C_in x kernel), GroupConvolution (output elements x the group
    weight's C_in / group x kernel)."""
    total = 0
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind not in ("MatMul", "Convolution", "GroupConvolution", "ScaledDotProductAttention"):
            continue
        out = math.prod(op.get_output_shape(0))
        a, w = list(op.get_input_shape(0)), list(op.get_input_shape(1))
        if kind == "MatMul":
            total += out * (a[-2] if op.get_attributes().get("transpose_a") else a[-1])
        elif kind == "ScaledDotProductAttention":  # q (..., L, d) k^T (..., d, S), then (..., L, S) v (..., S, dv)
            total += (math.prod(a) + out) * w[-2]  # w: k, (..., S, d)
        elif kind == "Convolution":
            total += out * math.prod(w[1:])  # (C_out, C_in, kH, kW)
        else:
            total += out * math.prod(w[2:])  # (groups, C_out / groups, C_in / groups, kH, kW)
    return total
