"""What an ONNX file holds, for ``omnitensor inspect model.onnx``: inputs, outputs, ops, support."""

from __future__ import annotations

from collections import Counter
from typing import Any, TextIO

from ..errors import UnsupportedError
from .model import _onnx, decode_attributes
from .registry import HANDLERS

__all__ = ["describe_onnx", "print_onnx"]


def _dims(value_info: Any) -> list[int | str | None]:
    tensor_type = value_info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return []
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor_type.shape.dim]


def describe_onnx(path: str) -> dict[str, Any]:
    """Format, opsets, producer, inputs/outputs, op counts and whether omnitensor imports it."""
    from .model import OnnxModel

    onnx = _onnx()
    model = onnx.load(path)
    graph = model.graph
    inits = {i.name for i in graph.initializer}

    def io(value_info: Any) -> dict[str, Any]:
        elem = value_info.type.tensor_type.elem_type
        name = onnx.TensorProto.DataType.Name(elem) if elem else "?"
        return {"name": value_info.name, "dtype": name, "shape": _dims(value_info)}

    ops = Counter(n.op_type for n in graph.node)
    try:
        OnnxModel(model, source=path)
        support = "supported"
    except UnsupportedError as exc:
        support = str(exc)
    n_params = sum(int(onnx.helper.tensor_dtype_to_np_dtype(i.data_type).itemsize) *
                   max(1, int(__import__("math").prod(i.dims))) for i in graph.initializer)
    return {
        "format": "onnx",
        "path": path,
        "ir_version": model.ir_version,
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "inputs": [io(i) for i in graph.input if i.name not in inits],
        "outputs": [io(o) for o in graph.output],
        "initializers": len(inits),
        "initializer_bytes": n_params,
        "nodes": len(graph.node),
        "ops": dict(sorted(ops.items())),
        "unclaimed_ops": sorted(op for op in ops if op not in HANDLERS),
        "omnitensor": support,
        "attributes_seen": sorted({a for n in graph.node for a in decode_attributes(n)}),
    }


def print_onnx(info: dict[str, Any], out: TextIO) -> None:
    """The human-readable form of `describe_onnx`."""
    out.write(f"format: onnx (IR {info['ir_version']}, opsets {info['opsets']})\n")
    if info["producer"]:
        out.write(f"producer: {info['producer']}\n")
    for kind in ("inputs", "outputs"):
        out.write(f"{kind}:\n")
        for item in info[kind]:
            shape = "x".join(str(d) for d in item["shape"]) or "scalar"
            out.write(f"  {item['name']}: {item['dtype']} [{shape}]\n")
    out.write(f"initializers: {info['initializers']} ({info['initializer_bytes'] / 1e6:.1f} MB)\n")
    out.write(f"nodes: {info['nodes']}\n")
    for op, count in info["ops"].items():
        mark = "" if op not in info["unclaimed_ops"] else "   (not supported)"
        out.write(f"  {op:24} {count:5d}{mark}\n")
    out.write(f"omnitensor: {info['omnitensor']}\n")
