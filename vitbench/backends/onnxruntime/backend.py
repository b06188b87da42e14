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
import json
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from vitbench.backends.base import Step
from vitbench.backends.graphs import Graph
from vitbench.backends.onnxruntime import SPEC
from vitbench.backends.runtime import RuntimeBackend, RuntimeWorkload, export_refused
from vitbench.env import distribution_version
from vitbench.errors import looks_like_oom
from vitbench.models.torch import build_torch_model

# torch's default ONNX opset for its exporters in the locked torch 2.15 (torch/onnx/_constants.py,
# ONNX_DEFAULT_OPSET): written out so that a torch upgrade changes the graph only through the key's versions
OPSET = 20
GRAPH_OPTIMIZATION = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
SESSION_CONFIG = {"optimization.enable_gelu_approximation": "0"}  # exact (erf) GELU, as torch computes it
FP32_FILE, INT8_FILE = "model.onnx", "model.int8.onnx"
# What the export found in the graph it wrote (graph_facts), kept beside it (hashed with it by the graph cache)
FACTS_FILE = "graph_facts.json"
# int8: weights int8 per tensor, activations quantised per batch at run time (onnxruntime.quantization's
# quantize_dynamic with weight_type QInt8, its defaults otherwise: MatMul and Conv quantised, other nodes kept
# fp32: IntegerOpsRegistry in onnxruntime/quantization/registry.py). A MatMul of two activations (a ViT's
# attention: q.k^T and attn.v) has no weight to quantise and stays fp32: the row counts both kinds (graph_facts)
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
        name = FP32_FILE
        if step.precision == "int8":
            quantize(directory / FP32_FILE, directory / INT8_FILE)
            (directory / FP32_FILE).unlink()
            name = INT8_FILE
        (directory / FACTS_FILE).write_text(json.dumps(graph_facts(directory / name, _resolution(step))))

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
        path = graph.path / (INT8_FILE if step.precision == "int8" else FP32_FILE)
        try:
            facts = json.loads((graph.path / FACTS_FILE).read_text())
        except (OSError, ValueError):  # not written by this export: read from the graph itself
            facts = graph_facts(path, _resolution(step))
        ops = op_counts(facts["ops"])
        settings = {"matmul_precision": precision_label(step.precision, ops),
                    "framework": f"onnxruntime {ort.__version__} {sess.get_providers()[0]} "
                                 f"graph_optimization_level={GRAPH_OPTIMIZATION.name} "
                                 + " ".join(f"{k}={v}" for k, v in SESSION_CONFIG.items()),
                    "graph_optimization_level": GRAPH_OPTIMIZATION.name, "opset": OPSET, **ops}

        name = sess.get_inputs()[0].name

        def run():
            return sess.run(None, feed)[0]

        return RuntimeWorkload(run, x, graph, settings, run_on=lambda images: sess.run(None, {name: images})[0],
                               weight_bytes=facts["weight_bytes"])

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


def _resolution(step: Step) -> int:
    return step.spec.resolution if step.resolution is None else step.resolution


def graph_facts(path: Path, resolution: int) -> dict:
    """What the ONNX graph at `path` holds: its constants' bytes (`weight_bytes`, the state a row counts) and its
    matrix products and convolutions per operator type (nodes, MACs of one image, nodes with a weight operand)."""
    from vitbench.backends.onnxruntime.onnx_count import macs_by_op, weight_bytes

    return {"weight_bytes": weight_bytes(path), "ops": macs_by_op(path, resolution)}


def op_counts(ops: dict[str, dict[str, int]]) -> dict:
    """What a row records of a graph's matrix products and convolutions (graph_facts' `ops`): the nodes that run
    on int8 (MatMulInteger, ConvInteger) and on fp32 (MatMul and Gemm, Conv), each as matmuls and convolutions;
    the fp32 products that take two activations (no weight: left fp32 by dynamic quantization); the share of the
    MACs the int8 nodes compute."""
    from vitbench.backends.onnxruntime.onnx_count import COUNTED_OPS, INTEGER_OPS

    def nodes(*kinds: str, key: str = "nodes") -> int:
        return sum(ops.get(k, {}).get(key, 0) for k in kinds)

    total = sum(e["macs"] for e in ops.values())
    fp32 = tuple(k for k in COUNTED_OPS if k not in INTEGER_OPS)
    return {"graph_int8_matmul_nodes": nodes("MatMulInteger"), "graph_int8_conv_nodes": nodes("ConvInteger"),
            "graph_fp32_matmul_nodes": nodes("MatMul", "Gemm"), "graph_fp32_conv_nodes": nodes("Conv"),
            "graph_fp32_activation_product_nodes": nodes(*fp32) - nodes(*fp32, key="weight_nodes"),
            "graph_int8_macs_fraction": nodes(*INTEGER_OPS, key="macs") / total if total else None}


def precision_label(precision: str, ops: dict) -> str:
    """The row's matmul_precision: fp32, or for int8 what runs on int8 and what stays fp32, from the graph's counts
    (op_counts): dynamic quantization makes int8 only the products with a weight (MatMul, Conv); a product of two
    activations (attention's q.k^T and attn.v) stays an fp32 MatMul."""
    if precision != "int8":
        return "fp32 (MLAS)"
    share = ops["graph_int8_macs_fraction"]
    int8 = (f"int8 x int8 -> int32 for {ops['graph_int8_matmul_nodes']} MatMulInteger and "
            f"{ops['graph_int8_conv_nodes']} ConvInteger (weight x activation"
            + (f": {share:.0%} of the MACs)" if share is not None else ")"))
    fp32_nodes = ops["graph_fp32_matmul_nodes"] + ops["graph_fp32_conv_nodes"]
    if not fp32_nodes:
        return f"{int8}, dynamic quantization"
    act = ops["graph_fp32_activation_product_nodes"]
    which = ("activation x activation, as attention's q.k^T and attn.v" if act == fp32_nodes
             else f"{act} of them activation x activation")
    rest = f"fp32 for {fp32_nodes} MatMul/Gemm/Conv ({which}" + (
        f": {1 - share:.0%} of the MACs)" if share is not None else ")")
    return f"{int8}; {rest}, dynamic quantization"


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
    try:
        with torch.no_grad(), open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            torch.onnx.export(model, (x,), str(path), input_names=[INPUT], output_names=[OUTPUT], dynamo=True,
                              dynamic_shapes=({0: batch},), opset_version=OPSET, external_data=False,
                              verbose=False)
    except Exception as e:  # torch.export's refusal: two tracebacks, an FX graph and colour codes (19 KB)
        if looks_like_oom(e):
            raise
        raise export_refused("onnxruntime", spec.name, "to ONNX", e) from None
    del model
