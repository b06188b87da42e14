"""MACs of an ONNX graph's matrix products and convolutions at batch 1, from ONNX shape inference: the exported
graph's own count, beside the analytic one (vitbench.measure.flops), and per operator type (what of an int8 graph
runs on integers); the bytes of a graph's constants (its weights: the state a row counts)."""

from __future__ import annotations

import math
from pathlib import Path

import onnx
from onnx import shape_inference


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Every value's static shape (initializers, inputs, inferred intermediates and outputs)."""
    out = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for v in (*model.graph.input, *model.graph.value_info, *model.graph.output):
        dims = v.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out[v.name] = tuple(d.dim_value for d in dims)
    return out


# The nodes whose multiply-accumulates are counted, by how: a matrix product (MatMul, and MatMulInteger: int8 x
# int8 -> int32, what dynamic quantization makes of a MatMul with a constant weight), Gemm, a convolution (Conv,
# and its integer form ConvInteger)
MATMUL_OPS = ("MatMul", "MatMulInteger")
CONV_OPS = ("Conv", "ConvInteger")
COUNTED_OPS = (*MATMUL_OPS, "Gemm", *CONV_OPS)
INTEGER_OPS = ("MatMulInteger", "ConvInteger")  # the int8 ones; the others of COUNTED_OPS compute in fp32


def macs_by_op(path: Path, resolution: int) -> dict[str, dict[str, int]]:
    """Per operator type of COUNTED_OPS that the graph holds: its nodes, their multiply-accumulates for one image
    and how many of them have a constant operand (`weight_nodes`: a weight x activation product; the others take
    two activations, as attention's q.k^T and attn.v do). MACs: MatMul and MatMulInteger output elements x the
    reduced dimension; Gemm the same, with its transpose flags; Conv and ConvInteger output elements x input
    channels per group x kernel size. Raises ValueError where a shape stays unknown (a count that skipped a node
    would be silently low)."""
    model = onnx.load(str(path))
    first = model.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(first, (1, 3, resolution, resolution)):
        d.Clear()
        d.dim_value = v
    del model.graph.value_info[:]
    model = shape_inference.infer_shapes(model, data_prop=True)
    shapes = _shapes(model)
    weights = {t.name for t in model.graph.initializer}
    out: dict[str, dict[str, int]] = {}
    for node in model.graph.node:
        if node.op_type not in COUNTED_OPS:
            continue
        try:
            a, b, y = shapes[node.input[0]], shapes[node.input[1]], shapes[node.output[0]]
        except KeyError as e:
            raise ValueError(f"ONNX count: no static shape for {e} ({node.op_type} {node.name})") from None
        if node.op_type in MATMUL_OPS:
            macs = math.prod(y) * a[-1]
        elif node.op_type == "Gemm":
            trans_a = next((at.i for at in node.attribute if at.name == "transA"), 0)
            macs = math.prod(y) * (a[0] if trans_a else a[-1])
        else:
            macs = math.prod(y) * math.prod(b[1:])  # weight (C_out, C_in / group, kH, kW)
        entry = out.setdefault(node.op_type, {"nodes": 0, "macs": 0, "weight_nodes": 0})
        entry["nodes"] += 1
        entry["macs"] += macs
        entry["weight_nodes"] += any(i in weights for i in node.input[:2])  # an operand is a constant
    return out


def graph_macs(path: Path, resolution: int) -> int:
    """Multiply-accumulates of one image over every node of COUNTED_OPS (macs_by_op)."""
    return sum(e["macs"] for e in macs_by_op(path, resolution).values())


def weight_bytes(path: Path) -> int:
    """Bytes of the graph's constants: its initializers (the weights; those kept as external data too, counted from
    their shapes, never read) and the tensors of its Constant nodes. What the graph holds as state, as a torch
    model's parameters and buffers are: not the file's size, which adds the exporter's node metadata."""
    model = onnx.load(str(path), load_external_data=False)

    def size(t: onnx.TensorProto) -> int:
        if t.data_type in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
            return 0
        return math.prod(t.dims) * onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize

    total = sum(size(t) for t in model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "Constant":
            total += sum(size(a.t) for a in node.attribute if a.name == "value")
    return total
