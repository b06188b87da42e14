"""MACs of an ONNX graph's matrix products and convolutions at batch 1, from ONNX shape inference: the exported
graph's own count, beside the analytic one (vitbench.measure.flops)."""

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


def graph_macs(path: Path, resolution: int) -> int:
    """Multiply-accumulates of one image: MatMul (output elements x the reduced dimension), Gemm (the same, with
    its transpose flags) and Conv (output elements x input channels per group x kernel size). Raises ValueError
    where a shape stays unknown (a count that skipped a node would be silently low)."""
    model = onnx.load(str(path))
    first = model.graph.input[0].type.tensor_type.shape.dim
    for d, v in zip(first, (1, 3, resolution, resolution)):
        d.Clear()
        d.dim_value = v
    del model.graph.value_info[:]
    model = shape_inference.infer_shapes(model, data_prop=True)
    shapes = _shapes(model)
    total = 0
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm", "Conv"):
            continue
        try:
            a, b, y = shapes[node.input[0]], shapes[node.input[1]], shapes[node.output[0]]
        except KeyError as e:
            raise ValueError(f"ONNX count: no static shape for {e} ({node.op_type} {node.name})") from None
        if node.op_type == "MatMul":
            total += math.prod(y) * a[-1]
        elif node.op_type == "Gemm":
            trans_a = next((at.i for at in node.attribute if at.name == "transA"), 0)
            total += math.prod(y) * (a[0] if trans_a else a[-1])
        else:
            total += math.prod(y) * math.prod(b[1:])  # weight (C_out, C_in / group, kH, kW)
    return total
