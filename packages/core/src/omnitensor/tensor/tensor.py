"""`Tensor`: an immutable lazy value over PTIR, held by a rebindable handle.

Operations record graph nodes (checked at once by the op's rule); reading a value realizes it.
Indexing lives in `indexing`, creation in `creation`, numpy/DLPack interop in `interop`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError, OmnitensorError, ShapeError
from ..ir.opdef import Trait, get_op
from ..ir.program import Role
from ..ir.types import TensorType
from .graph import Node, Ref, record
from .indexing import TensorIndexing
from .math import TensorMath
from .realize import realize_refs, tracing

__all__ = ["Scalar", "Tensor", "TensorLike", "realize"]

Scalar = bool | int | float
TensorLike = Union["Tensor", bool, int, float, np.ndarray, Sequence[Any]]


def _eager() -> bool:
    return os.environ.get("OMNITENSOR_EAGER", "") not in ("", "0")


class Tensor(TensorMath, TensorIndexing):
    """An n-dimensional lazy array on a backend.

    A Tensor is a handle to an immutable value: ``x[i] = v`` and in-place operators rebind the
    handle to a new value; other handles to the old value are unaffected. Values are computed
    when read (`numpy`, `item`, `tolist`, `repr`, `realize`) or when a compiled function returns.
    """

    __slots__ = ("__weakref__", "_grad", "_grad_fn", "_index", "_node", "_parameter")

    __array_priority__ = 100  # numpy defers binary operators to Tensor

    def __init__(self, node: Node, index: int = 0) -> None:
        self._node = node
        self._index = index
        self._parameter: str | None = None
        self._grad_fn: Any = None  # autograd node when this value requires grad
        self._grad: Tensor | None = None

    @property
    def grad(self) -> Tensor | None:
        """The accumulated gradient (set by `backward`), or None."""
        state = tracing.get()
        if state is not None:  # `compile` replays reads of gradients held before the call
            state.read_grad(self)
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        state = tracing.get()
        if state is not None:  # `compile` turns the new gradient into an output of the call
            state.wrote_grad(self)
        self._grad = value

    def assign(self, value: Tensor) -> Tensor:
        """Rebind this handle to `value`'s value (same shape and dtype); returns self.

        Other handles to the old value keep it. Inside `omnitensor.compile` the rebinding
        becomes an output of the compiled program and is replayed on every call.
        """
        if value.type != self.type:
            raise ShapeError(f"assign: type {value.type} does not match {self.type}")
        self._node, self._index = value._node, value._index
        return self

    def mark_parameter(self, name: str) -> Tensor:
        """Declare this handle a model parameter named `name` (returns self).

        Whatever value the handle holds when it is used enters programs as a `Role.PARAMETER`
        input, so parameter-only work (transposes, dequantization) is hoisted and cached until
        the handle is rebound to a new value (an optimizer step).
        """
        self._parameter = name
        return self

    # --- construction helpers ---------------------------------------------------------------

    @classmethod
    def _apply(cls, op: str, *inputs: Tensor, **attrs: Any) -> Tensor:
        """Record ``op(*inputs, **attrs)`` and return its (single) result."""
        node = record(op, [t._ref() for t in inputs], attrs)
        out = cls(node, 0)
        for t in inputs:  # autograd records only when some operand requires grad
            if t._grad_fn is not None:
                _grad_hook(op, inputs, (out,))
                break
        if _eager() and tracing.get() is None:
            out.realize()
        return out

    @classmethod
    def _apply_multi(cls, op: str, *inputs: Tensor, **attrs: Any) -> tuple[Tensor, ...]:
        node = record(op, [t._ref() for t in inputs], attrs)
        outs = tuple(cls(node, i) for i in range(len(node.types)))
        for t in inputs:
            if t._grad_fn is not None:
                _grad_hook(op, inputs, outs)
                break
        if _eager() and tracing.get() is None:
            realize(*outs)
        return outs

    def _ref(self) -> Ref:
        state = tracing.get()
        if state is not None:
            state.saw(self)
        node = self._node
        if self._parameter is not None and node.is_leaf and node.placeholder is None:
            node.role, node.name = Role.PARAMETER, self._parameter
        return (node, self._index)

    def _view_or_apply(self, op: str, **attrs: Any) -> Tensor:
        """A zero-copy view of a realized value where the backend allows, else a lazy op."""
        node = self._node
        opdef = get_op(op)
        if self._grad_fn is not None:  # recorded for autograd: go through `_apply`
            return Tensor._apply(op, self, **attrs)
        if node.is_leaf and node.placeholder is None and opdef.has(Trait.VIEW):
            full = opdef.attr_defaults(attrs)
            if node.backend is None and node.host is not None:
                from ..ir.builder import infer_types

                (type,) = infer_types(opdef, [node.types[self._index]], full)
                with np.errstate(all="ignore"):
                    array = opdef.reference(node.host[self._index], **full)
                return Tensor(Node.from_host(array, type))
            backend = node.backend
            if backend is not None and node.buffers is not None and (
                backend.capabilities().strided_inputs
            ):
                viewed = backend.view(node.buffers[self._index], opdef, full)
                if viewed is not None:
                    from ..ir.builder import infer_types

                    (type,) = infer_types(opdef, [node.types[self._index]], full)
                    return Tensor(Node.from_buffer(viewed, type, backend))
        return Tensor._apply(op, self, **attrs)

    # --- properties ---------------------------------------------------------------------------

    @property
    def type(self) -> TensorType:
        """The tensor's PTIR type."""
        type = self._node.types[self._index]
        if not isinstance(type, TensorType):
            raise OmnitensorError(f"tensor: holds quantized blocks ({type}); dequantize first")
        return type

    @property
    def shape(self) -> tuple[int, ...]:
        """Dimension sizes."""
        return self._node.types[self._index].shape

    @property
    def dtype(self) -> DType:
        """Element type."""
        return self.type.dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def backend(self) -> Any:
        """The backend holding this tensor's data, or None while it is not bound to one."""
        return self._node.backend

    @property
    def is_realized(self) -> bool:
        """True when the value is computed (or held as a host array)."""
        return self._node.is_leaf

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # --- realization ----------------------------------------------------------------------------

    def realize(self) -> Tensor:
        """Compute the value now (no-op when already realized); returns self."""
        realize(self)
        return self

    def numpy(self) -> np.ndarray[Any, Any]:
        """The value as a new numpy array (a copy the caller owns)."""
        self.realize()
        node = self._node
        if node.deleted:
            raise OmnitensorError("tensor: this tensor was donated to a compiled call")
        if node.host is not None:
            return np.array(node.host[self._index], copy=True)
        assert node.buffers is not None and node.backend is not None
        return np.asarray(node.backend.download(node.buffers[self._index]))

    def item(self) -> Scalar:
        """The value of a one-element tensor as a Python scalar."""
        if self.size != 1:
            raise ShapeError(f"item: tensor has {self.size} elements (expected 1)")
        value: Scalar = self.numpy().reshape(()).item()
        return value

    def tolist(self) -> Any:
        """The value as nested Python lists."""
        return self.numpy().tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def __repr__(self) -> str:
        if tracing.get() is not None or self._node.placeholder is not None:
            return f"Tensor(<traced>, shape={self.shape}, dtype={self.dtype})"
        body = np.array2string(self.numpy(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype})"

    def __bool__(self) -> bool:
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __index__(self) -> int:
        if not self.dtype.is_integer:
            raise DTypeError(f"__index__: tensor of dtype {self.dtype} is not an integer")
        return int(self.item())

    __hash__ = object.__hash__

    # --- dtype ----------------------------------------------------------------------------------

    def astype(self, dtype: Any) -> Tensor:
        """Convert to `dtype` (see the `convert` op for rounding and overflow)."""
        target = dt.as_dtype(dtype)
        if target == self.dtype:
            return self
        return Tensor._apply("convert", self, dtype=target)

    def contiguous(self) -> Tensor:
        """A tensor with the same value that does not alias a view (lazy)."""
        return Tensor._apply("reshape", self, shape=self.shape) if self.is_realized else self

    def to(self, backend: Any) -> Tensor:
        """The same value on another backend (a name or a Backend instance)."""
        from ..backend.registry import get_backend

        target = get_backend(backend) if isinstance(backend, str) else backend
        if self._node.backend is target:
            return self
        node = Node.from_host(self.numpy(), self.type)
        out = Tensor(node)
        out._node.buffers = [target.upload(node.host[0])]  # type: ignore[index]
        out._node.host, out._node.backend = None, target
        return out

    def __dlpack__(self, *, stream: Any = None, **kwargs: Any) -> Any:
        return self.numpy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: exported through a host copy

    def detach(self) -> Tensor:
        """The same value, cut from any gradient tape."""
        return Tensor(self._node, self._index)

    # --- autograd (omnitensor.autograd does the work) -------------------------------------------

    @property
    def requires_grad(self) -> bool:
        """True when operations on this tensor are recorded for `backward`."""
        return self._grad_fn is not None

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        from ..autograd.engine import Leaf

        if not flag:
            if self._grad_fn is not None and not isinstance(self._grad_fn, Leaf):
                raise OmnitensorError(
                    "requires_grad: only leaf tensors can stop requiring grad; use detach()")
            self._grad_fn = None
            return
        if not self.dtype.is_floating:
            raise DTypeError(
                f"requires_grad: only float tensors can require grad (got {self.dtype}); "
                "convert with astype first")
        if self._grad_fn is None:
            self._grad_fn = Leaf(self)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        """Set `requires_grad` in place; returns self."""
        self.requires_grad = flag
        return self

    @property
    def is_leaf(self) -> bool:
        """True unless this tensor was computed by a recorded op."""
        from ..autograd.engine import Leaf

        return self._grad_fn is None or isinstance(self._grad_fn, Leaf)

    @property
    def grad_fn(self) -> Any:
        """The autograd node that produced this tensor (None for leaves and constants)."""
        from ..autograd.engine import Leaf

        return None if isinstance(self._grad_fn, Leaf) else self._grad_fn

    def backward(self, gradient: TensorLike | None = None, *, create_graph: bool = False
                 ) -> None:
        """Accumulate gradients of this tensor into ``.grad`` of the leaves that require grad.

        Args:
            gradient: cotangent of this tensor (default: ones, for a one-element tensor).
            create_graph: record the backward pass too (higher-order gradients).
        """
        from ..autograd.engine import backward

        backward(self, None if gradient is None else as_tensor(gradient),
                 create_graph=create_graph)


def _bind_grad_hook(op: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
    from ..autograd.engine import record_op

    global _grad_hook
    _grad_hook = record_op
    record_op(op, inputs, outputs)


#: Called by `_apply` when an operand requires grad (only possible once autograd is imported);
#: it binds itself to `omnitensor.autograd.engine.record_op` on first use.
_grad_hook: Any = _bind_grad_hook


def realize(*tensors: Tensor) -> None:
    """Realize several tensors in one program."""
    realize_refs([(t._node, t._index) for t in tensors])


def as_tensor(value: TensorLike, dtype: DType | None = None) -> Tensor:
    """`value` as a Tensor: tensors pass through; arrays and nested lists become host leaves."""
    if isinstance(value, Tensor):
        return value if dtype is None else value.astype(dtype)
    from .interop import from_numpy

    if isinstance(value, (bool, int, float)):
        target = dtype or dt.result_type(value)
        return from_numpy(np.asarray(value, dtype=target.np), copy=False)
    array = np.asarray(value)
    if dtype is not None:
        array = array.astype(dtype.np)
    elif array.dtype == np.float64 and not isinstance(value, np.ndarray):
        array = array.astype(np.float32)  # Python float literals default to float32
    elif array.dtype == np.int64 and not isinstance(value, np.ndarray):
        array = array.astype(np.int32)
    return from_numpy(array, copy=False)
