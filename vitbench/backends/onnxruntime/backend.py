"""ONNX Runtime backend: the eager torch model (built and seeded as the torch backend builds it) exported by
torch.onnx.export (the dynamo exporter, opset OPSET, the batch axis dynamic: one graph serves every batch
size), cached (vitbench.backends.graphs), int8 made from it by onnxruntime.quantization.quantize_dynamic, run by
the CPU execution provider with its threads and optimisation level set and recorded.

fp32 means no reduced-precision or approximate math: MLAS's fp32 kernels, the graph optimisation level
GRAPH_OPTIMIZATION (operator fusions that keep fp32; the level is recorded), and the optional tanh approximation
of GELU explicitly off (session option `optimization.enable_gelu_approximation`, off by default:
onnxruntime_session_options_config_keys.h). Everything else: vitbench.backends.runtime.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from vitbench.backends.base import Step
from vitbench.backends.graphs import Graph
from vitbench.backends.onnxruntime import SPEC
from vitbench.backends.runtime import RuntimeBackend, RuntimeWorkload
from vitbench.env import distribution_version
from vitbench.models.torch import build_torch_model

# torch's default ONNX opset for its exporters in the locked torch 2.15 (torch/onnx/_constants.py,
# ONNX_DEFAULT_OPSET): written out so that a torch upgrade changes the graph only through the key's versions
OPSET = 20
GRAPH_OPTIMIZATION = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
SESSION_CONFIG = {"optimization.enable_gelu_approximation": "0"}  # exact (erf) GELU, as torch computes it
FP32_FILE, INT8_FILE = "model.onnx", "model.int8.onnx"
# int8: weights int8 per tensor, activations quantised per batch at run time (onnxruntime.quantization's
# quantize_dynamic with weight_type QInt8, its defaults otherwise: MatMul and Conv quantised, other nodes kept
# fp32: IntegerOpsRegistry in onnxruntime/quantization/registry.py)
QUANTIZATION = "quantize_dynamic weight_type=QInt8"
INPUT, OUTPUT = "images", "logits"


class OrtBackend(RuntimeBackend):
    spec = SPEC

    def cache_subdir(self) -> str:
        return f"onnxruntime-{distribution_version('onnxruntime')}-torch-{distribution_version('torch')}"

    def graph_request(self, step: Step) -> dict:
        return {"opset": OPSET, "dynamic_axes": {INPUT: [0]}, "precision": step.precision,
                "quantization": QUANTIZATION if step.precision == "int8" else None}

    def export(self, step: Step, directory: Path) -> None:
        export_onnx(step, directory / FP32_FILE)
        if step.precision == "int8":
            quantize(directory / FP32_FILE, directory / INT8_FILE)
            (directory / FP32_FILE).unlink()

    def session_options(self) -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        so.inter_op_num_threads = self.interop_threads
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = GRAPH_OPTIMIZATION
        for k, v in SESSION_CONFIG.items():
            so.add_session_config_entry(k, v)
        return so

    def session(self, graph: Graph, precision: str) -> ort.InferenceSession:
        path = graph.path / (INT8_FILE if precision == "int8" else FP32_FILE)
        return ort.InferenceSession(str(path), self.session_options(), providers=["CPUExecutionProvider"])

    def load(self, graph: Graph, step: Step, x: np.ndarray) -> RuntimeWorkload:
        sess = self.session(graph, step.precision)
        feed = {sess.get_inputs()[0].name: x}
        settings = {"matmul_precision": "int8 x int8 -> int32 (dynamic quantization)" if step.precision == "int8"
                    else "fp32 (MLAS)",
                    "framework": f"onnxruntime {ort.__version__} {sess.get_providers()[0]} "
                                 f"graph_optimization_level={GRAPH_OPTIMIZATION.name} "
                                 + " ".join(f"{k}={v}" for k, v in SESSION_CONFIG.items()),
                    "graph_optimization_level": GRAPH_OPTIMIZATION.name, "opset": OPSET}

        name = sess.get_inputs()[0].name

        def run():
            return sess.run(None, feed)[0]

        return RuntimeWorkload(run, x, graph, settings, run_on=lambda images: sess.run(None, {name: images})[0])

    def numerics_in_force(self) -> str | None:
        return f"graph_optimization_level={GRAPH_OPTIMIZATION.name} " + " ".join(
            f"{k}={v}" for k, v in SESSION_CONFIG.items())

    def count_flops(self, spec, resolution: int, num_classes: int) -> dict[str, dict]:
        """MACs of the exported graph's MatMul, Gemm and Conv nodes at batch 1, from ONNX shape inference
        (vitbench.backends.onnxruntime.onnx_count): what the runtime is given to compute."""
        import tempfile

        from vitbench.backends.onnxruntime.onnx_count import graph_macs

        step = Step(spec.name, batch_size=1, resolution=resolution, num_classes=num_classes, spec=spec)
        with tempfile.TemporaryDirectory(prefix="vitbench-onnx-count-") as d:
            path = Path(d) / FP32_FILE
            export_onnx(step, path)
            macs = graph_macs(path, resolution)
        return {"onnx_graph": {"macs": float(macs), "excludes": "everything but MatMul/Gemm/Conv nodes of the "
                               "exported graph (norms, softmax, activations, adds)"}}


def quantize(src: Path, dst: Path) -> None:
    """int8: ONNX Runtime's dynamic quantization of the fp32 graph (QUANTIZATION)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    # quantize_dynamic logs through the root logger that it would rather the graph were pre-processed first
    # (onnxruntime.quantization.shape_inference): advice to the graph's author, printed by Python's last-resort
    # handler as a line of the user's terminal in no format of vitbench's; vitbench quantises as QUANTIZATION says
    logging.disable(logging.WARNING)
    try:
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    finally:
        logging.disable(logging.NOTSET)


def export_onnx(step: Step, path: Path) -> None:
    """The eager model of `step` (seeded as the torch backend seeds it) exported to ONNX at `path`, one file
    (weights inside), batch axis dynamic."""
    spec = step.spec
    res = spec.resolution if step.resolution is None else step.resolution
    torch.manual_seed(step.seed)
    model = build_torch_model(spec, res, step.num_classes or spec.num_classes).eval()
    x = torch.zeros(2, 3, res, res)  # batch 2: a batch of 1 would be specialised to a constant
    batch = torch.export.Dim("batch", min=1, max=2**20)
    with torch.no_grad(), open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        torch.onnx.export(model, (x,), str(path), input_names=[INPUT], output_names=[OUTPUT], dynamo=True,
                          dynamic_shapes=({0: batch},), opset_version=OPSET, external_data=False, verbose=False)
    del model

