"""`load(path)`: an ONNX model as an omnitensor function, checked at load, traced per signature.

Initializers become parameter tensors (`Role.PARAMETER` inputs of the compiled program, so
parameter-only work is hoisted); graph inputs become the function's data inputs. A dimension the
model leaves symbolic (``batch``, ``sequence``) is bound by the arrays of each call, checked for
consistency across inputs, and each new binding is one more trace of the same `ot.compile`d
function. Values the graph computes from shapes alone (`Shape`, `Gather` of a shape, `Concat`
of those, ...) are evaluated while tracing by onnx's reference implementation, so `Reshape`
and `Expand` see concrete sizes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError, FormatError, OmnitensorError, ShapeError, UnsupportedError
from ..tensor.interop import from_numpy
from ..tensor.jit import compile as ot_compile
from ..tensor.tensor import Tensor
from . import ops as _ops  # noqa: F401  (registers the handlers)
from .registry import HANDLERS, Value, is_static

__all__ = ["OnnxModel", "load", "supported_ops"]

#: Results of shape-only computation folded while tracing stay numpy up to this many elements.
FOLD_LIMIT = 4096

# ONNX TensorProto data types omnitensor has, by their enum value.
_DTYPES = {1: dt.float32, 2: dt.uint8, 3: dt.int8, 5: dt.int16, 6: dt.int32, 7: dt.int64,
           9: dt.bool_, 10: dt.float16, 11: dt.float64, 12: dt.uint32, 16: dt.bfloat16}


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise UnsupportedError(
            "omnitensor.onnx needs the onnx package: pip install 'omnitensor[onnx]' (or "
            "pip install ./packages/core[onnx] from a checkout)") from exc
    return onnx


def supported_ops() -> list[str]:
    """The ONNX op types (default domain) the importer claims, sorted."""
    return sorted(HANDLERS)


def dtype_of(elem_type: int, what: str) -> dt.DType:
    """The omnitensor dtype of an ONNX element type, or UnsupportedError naming `what`."""
    if elem_type not in _DTYPES:
        onnx = _onnx()
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type else "undefined"
        raise UnsupportedError(
            f"onnx: {what} has element type {name}, which omnitensor does not have (supported: "
            f"{', '.join(sorted(d.name for d in _DTYPES.values()))})", op="onnx")
    return _DTYPES[elem_type]


@dataclass(frozen=True)
class InputSpec:
    """A graph input: its name, dtype and dims (ints, or str for a symbolic dim, None unknown)."""

    name: str
    dtype: dt.DType
    dims: tuple[int | str | None, ...] | None


class Context:
    """What a handler sees of the model being traced."""

    def __init__(self, model: OnnxModel, node: Any) -> None:
        self.model = model
        self.node = node
        self.opset = model.opset

    def where(self) -> str:
        """`node 'name' (Op)` for error messages."""
        return f"node {self.node.name or self.node.output[0]!r} ({self.node.op_type})"

    def tensor(self, value: Value) -> Tensor:
        """`value` as a Tensor (a known array becomes a constant, or its parameter tensor)."""
        if isinstance(value, Tensor):
            return value
        param = self.model.param_for(value)
        return param if param is not None else from_numpy(np.asarray(value))

    def ints(self, value: Value, what: str) -> tuple[int, ...]:
        """A known integer list (shapes, axes, pads); a traced value is refused."""
        if not is_static(value):
            raise UnsupportedError(
                f"onnx: {self.where()}: {what} must be known while tracing (it is computed from "
                "data here); omnitensor traces fixed shapes", op="onnx")
        return tuple(int(v) for v in np.asarray(value).reshape(-1))


class OnnxModel:
    """An imported ONNX model: call it with arrays or tensors, get its outputs.

    Attributes:
        inputs: the data inputs (initializers excluded), in graph order.
        outputs: the output names, in graph order.
        opset: the default-domain opset the model was saved with.
        parameters: initializer name -> parameter tensor.
    """

    def __init__(self, model: Any, *, source: str = "<model>") -> None:
        onnx = _onnx()
        self.source = source
        self.graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          0)
        self._arrays: dict[str, np.ndarray[Any, Any]] = {}
        self.parameters: dict[str, Tensor] = {}
        self._param_by_id: dict[int, Tensor] = {}
        for init in self.graph.initializer:
            dtype_of(init.data_type, f"initializer {init.name!r}")
            array = onnx.numpy_helper.to_array(init)
            self._arrays[init.name] = array
            tensor = from_numpy(array)
            tensor.mark_parameter(init.name)
            self.parameters[init.name] = tensor
            self._param_by_id[id(array)] = tensor
        inits = set(self._arrays)
        self.inputs = [self._input_spec(i) for i in self.graph.input if i.name not in inits]
        self.outputs = [o.name for o in self.graph.output]
        self._check_nodes(self.graph.node)
        self.shape_inputs = self._inputs_needed_statically()
        self._fn = ot_compile(self._trace)

    # -- load-time checks --------------------------------------------------------------------

    def _input_spec(self, info: Any) -> InputSpec:
        kind = info.type.WhichOneof("value")
        if kind != "tensor_type":
            raise UnsupportedError(f"onnx: input {info.name!r} is a {kind}; omnitensor imports "
                                   "tensor inputs only", op="onnx")
        ttype = info.type.tensor_type
        dtype = dtype_of(ttype.elem_type, f"input {info.name!r}")
        dims: tuple[int | str | None, ...] | None = None
        if ttype.HasField("shape"):
            dims = tuple(d.dim_value if d.HasField("dim_value") else
                         (d.dim_param or None) for d in ttype.shape.dim)
        return InputSpec(info.name, dtype, dims)

    def _check_nodes(self, nodes: Sequence[Any]) -> None:
        problems = []
        for node in nodes:
            reason = self._unsupported(node)
            if reason:
                problems.append(f"node {node.name or node.output[0]!r} ({node.op_type}, opset "
                                f"{self.opset}): {reason}")
        if problems:
            listed = "\n  ".join(problems[:20])
            more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
            raise UnsupportedError(
                f"onnx: {self.source} uses what omnitensor cannot import:\n  {listed}{more}\n"
                f"Supported ops: {', '.join(supported_ops())}", op="onnx")

    def _unsupported(self, node: Any) -> str | None:
        if node.domain not in ("", "ai.onnx"):
            return f"domain {node.domain!r} is not supported (only the default domain)"
        spec = HANDLERS.get(node.op_type)
        if spec is None:
            return "op not supported"
        if self.opset < spec.since:
            return f"supported from opset {spec.since}"
        attrs = decode_attributes(node)
        extra = sorted(set(attrs) - spec.attributes)
        if extra:
            known = ", ".join(sorted(spec.attributes)) or "none"
            return f"attribute(s) {', '.join(extra)} not supported (supported: {known})"
        for name, value in attrs.items():
            if isinstance(value, _Unsupported):
                return f"attribute {name!r}: {value.reason}"
        return spec.check(attrs) if spec.check is not None else None

    def _inputs_needed_statically(self) -> frozenset[str]:
        """Graph inputs whose values decide shapes (a Reshape's shape fed by the caller).

        The model is specialized on their values, as `jax.jit` does with static arguments:
        each new value is a new trace, and the program keeps fixed shapes.
        """
        producer = {out: node for node in self.graph.node for out in node.output}
        needed: set[str] = set()
        stack: list[str] = []
        for node in self.graph.node:
            spec = HANDLERS[node.op_type]
            stack += [node.input[i] for i in spec.static_inputs if i < len(node.input)]
        while stack:
            name = stack.pop()
            if not name or name in needed:
                continue
            needed.add(name)
            node = producer.get(name)
            if node is not None and node.op_type not in ("Shape", "Size"):
                stack.extend(node.input)
        return frozenset(i.name for i in self.inputs if i.name in needed)

    # -- running -----------------------------------------------------------------------------

    def param_for(self, array: Any) -> Tensor | None:
        """The parameter tensor of an initializer array (None for other arrays)."""
        return self._param_by_id.get(id(array))

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[Any]:
        if len(args) > len(self.inputs):
            raise TypeError(f"onnx model {self.source}: {len(args)} positional inputs given, it "
                            f"takes {len(self.inputs)} ({', '.join(i.name for i in self.inputs)})")
        values: dict[str, Any] = {spec.name: a for spec, a in zip(self.inputs, args, strict=False)}
        for name, value in kwargs.items():
            if name not in {i.name for i in self.inputs}:
                raise TypeError(f"onnx model {self.source}: no input named {name!r} (inputs: "
                                f"{', '.join(i.name for i in self.inputs)})")
            if name in values:
                raise TypeError(f"onnx model {self.source}: input {name!r} given twice")
            values[name] = value
        symbols: dict[str, tuple[int, str]] = {}
        bound: list[Any] = []
        for spec in self.inputs:
            if spec.name not in values:
                raise TypeError(f"onnx model {self.source}: missing input {spec.name!r}")
            value = values[spec.name]
            if spec.name in self.shape_inputs:
                array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
                bound.append(_Static(array.astype(spec.dtype.np, copy=False)))
                continue
            tensor = value if isinstance(value, Tensor) else from_numpy(np.asarray(value))
            if tensor.dtype != spec.dtype:
                raise DTypeError(f"onnx model {self.source}: input {spec.name!r} has dtype "
                                 f"{tensor.dtype} (the model declares {spec.dtype}); convert "
                                 f"it with .astype({spec.dtype.name!r})", op="onnx")
            if spec.dims is not None:
                self._check_dims(spec, tuple(tensor.shape), symbols)
            bound.append(tensor)
        return bound

    def _check_dims(self, spec: InputSpec, shape: tuple[int, ...],
                    symbols: dict[str, tuple[int, str]]) -> None:
        assert spec.dims is not None
        if len(shape) != len(spec.dims):
            raise ShapeError(f"onnx model {self.source}: input {spec.name!r} has shape {shape}; "
                             f"the model declares rank {len(spec.dims)} {spec.dims}", op="onnx",
                             shapes=[shape])
        for axis, (dim, size) in enumerate(zip(spec.dims, shape, strict=True)):
            if isinstance(dim, int) and dim > 0 and dim != size:
                raise ShapeError(f"onnx model {self.source}: input {spec.name!r} dim {axis} is "
                                 f"{size}; the model fixes it to {dim}", op="onnx",
                                 shapes=[shape])
            if isinstance(dim, str):
                seen = symbols.setdefault(dim, (size, spec.name))
                if seen[0] != size:
                    raise ShapeError(
                        f"onnx model {self.source}: symbolic dim {dim!r} is {seen[0]} in input "
                        f"{seen[1]!r} but {size} in input {spec.name!r}", op="onnx",
                        shapes=[shape])

    def __call__(self, *args: Any, **kwargs: Any) -> list[Tensor]:
        """Run the model: inputs positionally (graph order) or by name; outputs in graph order."""
        return list(self._fn(*self._bind(args, kwargs)))

    def run(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray[Any, Any]]:
        """Run with name -> array feeds (as onnxruntime does); returns name -> array."""
        outs = self(**dict(feeds))
        return {name: out.numpy() for name, out in zip(self.outputs, outs, strict=True)}

    def _trace(self, *inputs: Any) -> tuple[Tensor, ...]:
        env: dict[str, Value] = dict(self._arrays)
        env[""] = None
        for spec, value in zip(self.inputs, inputs, strict=True):
            env[spec.name] = value.array if isinstance(value, _Static) else value
        for node in self.graph.node:
            self._run_node(node, env)
        results = []
        for name in self.outputs:
            value = env[name]
            results.append(value if isinstance(value, Tensor) else from_numpy(np.asarray(value)))
        return tuple(results)

    def _run_node(self, node: Any, env: dict[str, Value]) -> None:
        try:
            args = [env[name] for name in node.input]
        except KeyError as exc:
            raise FormatError(f"onnx: {self.source}: node {node.name!r} reads {exc.args[0]!r}, "
                              "which no earlier node or input defines", path=self.source) from None
        spec = HANDLERS[node.op_type]
        attrs = decode_attributes(node)
        for i in spec.static_inputs:
            if i < len(args) and args[i] is not None and not is_static(args[i]):
                raise UnsupportedError(
                    f"onnx: {self.source}: node {node.name or node.output[0]!r} "
                    f"({node.op_type}): input {i} ({node.input[i]!r}) decides a shape but is "
                    "computed from data; omnitensor traces fixed shapes", op="onnx")
        if self._foldable(node, args):
            outs = fold(node, args, self.opset)
        else:
            ctx = Context(self, node)
            try:
                result = spec.fn(ctx, attrs, *args)
            except OmnitensorError as exc:
                if "onnx:" in str(exc):
                    raise
                raise type(exc)(f"onnx: {ctx.where()}: {exc}") from exc
            outs = list(result) if isinstance(result, (list, tuple)) else [result]
        for name, value in zip(node.output, outs, strict=False):
            if name:
                env[name] = value

    def _foldable(self, node: Any, args: Sequence[Value]) -> bool:
        present = [a for a in args if a is not None]
        if node.op_type in _NEVER_FOLD or not all(is_static(a) for a in present):
            return False
        if any(self.param_for(a) is not None and a.size > FOLD_LIMIT for a in present):
            return False  # keep weight math in the program, where hoisting caches it
        return sum(int(a.size) for a in present) <= 16 * FOLD_LIMIT


# Ops whose result may be large or random: always traced.
_NEVER_FOLD = frozenset({"ConstantOfShape", "RandomNormal", "RandomUniform", "RandomNormalLike",
                         "RandomUniformLike", "Bernoulli", "Dropout"})


def fold(node: Any, args: Sequence[Value], opset: int) -> list[np.ndarray[Any, Any]]:
    """Evaluate a node whose inputs are all known with onnx's reference implementation."""
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if name else "" for i, name in enumerate(node.input)]
    onnx = _onnx()
    clone = onnx.NodeProto()
    clone.CopyFrom(node)
    del clone.input[:]
    clone.input.extend(names)
    del clone.output[:]
    clone.output.extend(f"out{i}" if name else "" for i, name in enumerate(node.output))
    feeds = {n: a for n, a in zip(names, args, strict=True) if n}
    helper = onnx.helper
    graph = helper.make_graph(
        [clone], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_empty_tensor_value_info(o) for o in clone.output if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    outs = ReferenceEvaluator(model).run(None, feeds)
    return [np.asarray(o) for o in outs]


class _Static:
    """A caller's array the model specializes on (hashable by value: part of the trace key)."""

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array
        self._key = (array.dtype.str, array.shape, array.tobytes())

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and self._key == other._key


class _Unsupported:
    def __init__(self, reason: str) -> None:
        self.reason = reason


def decode_attributes(node: Any) -> dict[str, Any]:
    """Node attributes as Python values (tensors as numpy arrays)."""
    onnx = _onnx()
    out: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.ref_attr_name:
            out[attr.name] = _Unsupported("attribute references (functions) are not supported")
            continue
        kind = attr.type
        if kind == onnx.AttributeProto.TENSOR:
            out[attr.name] = onnx.numpy_helper.to_array(attr.t)
        elif kind in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS,
                      onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TYPE_PROTO):
            out[attr.name] = _Unsupported(f"{onnx.AttributeProto.AttributeType.Name(kind)} "
                                          "attributes are not supported")
        else:
            value = onnx.helper.get_attribute_value(attr)
            if isinstance(value, bytes):
                value = value.decode()
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode() for v in value]
            out[attr.name] = value
    return out


def load(path: str | os.PathLike[str] | bytes) -> OnnxModel:
    """Load an ONNX model file (or its serialized bytes) as an `OnnxModel`.

    Raises:
        FormatError: the file is not a valid ONNX model.
        UnsupportedError: an op, attribute or element type the importer does not support,
            naming each node, its op and the opset, with the list of supported ops.
    """
    onnx = _onnx()
    source = "<bytes>" if isinstance(path, bytes) else os.fspath(path)
    try:
        model = (onnx.load_from_string(path) if isinstance(path, bytes)
                 else onnx.load(source))
    except FileNotFoundError:
        raise
    except Exception as exc:  # protobuf raises DecodeError and others: all mean "not ONNX"
        raise FormatError(f"onnx: {source} is not a valid ONNX model ({exc})",
                          path=source) from exc
    return OnnxModel(model, source=source)
