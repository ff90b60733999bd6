"""`Tensor`: an immutable lazy value over PTIR, held by a rebindable handle.

Operations record graph nodes (checked at once by the op's rule); reading a value realizes it.
Indexing lives in `indexing`, creation in `creation`, numpy/DLPack interop in `interop`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, Union

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import ArgumentTypeError, DTypeError, OmnitensorError, ShapeError
from ..ir.opdef import Trait, get_op
from ..ir.program import Role
from ..ir.types import TensorType
from . import indexing as _index
from . import linalg as _linalg
from . import math as _math
from . import reduce as _reduce
from . import shape as _shape
from .graph import Node, Ref, rebind, record
from .realize import realize_refs, tracing

__all__ = ["AutogradHooks", "Scalar", "Tensor", "TensorLike", "as_tensor", "realize",
           "register_autograd"]

Scalar = bool | int | float
TensorLike = Union["Tensor", bool, int, float, np.ndarray, Sequence[Any]]


_DTYPE_NAMES = frozenset(d.name for d in dt.ALL) | frozenset(d.short for d in dt.ALL)
_NUMPY_DTYPES = frozenset(d.np for d in dt.ALL)


def _eager() -> bool:
    return os.environ.get("OMNITENSOR_EAGER", "") not in ("", "0")


class Tensor:
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
        self._rebind_to(value)
        return self

    def _rebind_to(self, value: Tensor) -> None:
        state = tracing.get()
        if state is not None:
            # NOTE: a handle the traced function rebinds without having read it is an output
            # of the call too (else it would keep the traced value, a placeholder's)
            state.saw(self)
        rebind(self, value._node, value._index)

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
                _autograd().record_op(op, inputs, (out,))
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
                _autograd().record_op(op, inputs, outs)
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
        if node.is_leaf and node.placeholder is None and not node.deleted and opdef.has(
                Trait.VIEW):
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
        """The backend this tensor belongs to, or None while it belongs to none yet.

        A tensor belongs to the backend that holds its data, else the one its operands belong
        to, else the ``use_backend`` scope it was created in; one made outside any scope from
        host data runs wherever it is first combined or read (the selected backend).
        """
        return self._node.owner

    @property
    def device(self) -> str:
        """Name of the backend this tensor runs on (PyTorch's ``x.device``)."""
        owner = self._node.owner
        if owner is not None:
            return str(owner.name)
        from ..backend.registry import current_backend_name

        return current_backend_name()

    @property
    def is_realized(self) -> bool:
        """True when the value is computed (or held as a host array)."""
        return self._node.is_leaf

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    def __array_namespace__(self, *, api_version: str | None = None) -> Any:
        """The Array API namespace (`omnitensor.array_api`, the 2023.12 revision)."""
        from .. import array_api

        if api_version not in (None, "2023.12", "2022.12", "2021.12"):
            from ..errors import UnsupportedError

            raise UnsupportedError(f"__array_namespace__: api_version {api_version!r} is not "
                                   "supported (2023.12 is)")
        return array_api

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

    def to(self, target: Any) -> Tensor:
        """The same value on another backend (a name or a `Backend`), or converted to a dtype.

        ``x.to("ref")`` copies the value to the ref backend; ``x.to(omnitensor.float64)`` (or
        ``"float64"``) is `astype`, as in PyTorch.
        """
        from ..backend.contract import Backend
        from ..backend.registry import get_backend

        if not isinstance(target, (str, Backend)) or (
                isinstance(target, str) and target in _DTYPE_NAMES):
            return self.astype(target)
        backend = get_backend(target) if isinstance(target, str) else target
        if self._node.owner is backend:
            return self
        array = self.numpy()
        return Tensor(Node.from_buffer(backend.upload(array), self.type, backend))

    def to_device(self, device: Any, /, *, stream: Any = None) -> Tensor:
        """The Array API's `to` for backends: the same value on `device` (a backend name)."""
        return self.to(device)

    def __complex__(self) -> complex:
        return complex(self.item())

    def __lshift__(self, other: TensorLike) -> Tensor:
        from ..array_api._functions import bitwise_left_shift

        return bitwise_left_shift(self, as_tensor(other) if not isinstance(other, int) else
                                  _math.full_like_scalar(self, other))

    def __rshift__(self, other: TensorLike) -> Tensor:
        from ..array_api._functions import bitwise_right_shift

        return bitwise_right_shift(self, as_tensor(other) if not isinstance(other, int) else
                                   _math.full_like_scalar(self, other))

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """Export through DLPack (a host copy: the value is realized and downloaded)."""
        if copy is False:
            raise BufferError("__dlpack__: omnitensor exports a host copy; copy=False is "
                              "not possible")
        array = self.numpy()
        if max_version is None:
            return array.__dlpack__()
        return array.__dlpack__(max_version=max_version)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU: exported through a host copy

    def detach(self) -> Tensor:
        """The same value, cut from any gradient tape."""
        return Tensor(self._node, self._index)

    # --- autograd (omnitensor.autograd registers itself, see `register_autograd`) ------------

    @property
    def requires_grad(self) -> bool:
        """True when operations on this tensor are recorded for `backward`."""
        return self._grad_fn is not None

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        hooks = _autograd()
        if not flag:
            if self._grad_fn is not None and not hooks.is_leaf_node(self._grad_fn):
                raise OmnitensorError(
                    "requires_grad: only leaf tensors can stop requiring grad; use detach()")
            self._grad_fn = None
            return
        if not self.dtype.is_floating:
            raise DTypeError(
                f"requires_grad: only float tensors can require grad (got {self.dtype}); "
                "convert with astype first")
        if self._grad_fn is None:
            self._grad_fn = hooks.make_leaf(self)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        """Set `requires_grad` in place; returns self."""
        self.requires_grad = flag
        return self

    @property
    def is_leaf(self) -> bool:
        """True unless this tensor was computed by a recorded op."""
        return self._grad_fn is None or _autograd().is_leaf_node(self._grad_fn)

    @property
    def grad_fn(self) -> Any:
        """The autograd node that produced this tensor (None for leaves and constants)."""
        return None if self.is_leaf else self._grad_fn

    def backward(self, gradient: TensorLike | None = None, *, create_graph: bool = False
                 ) -> None:
        """Accumulate gradients of this tensor into ``.grad`` of the leaves that require grad.

        Args:
            gradient: cotangent of this tensor (default: ones, for a one-element tensor).
            create_graph: record the backward pass too (higher-order gradients).
        """
        _autograd().backward(self, None if gradient is None else as_tensor(gradient),
                             create_graph=create_graph)

    # --- math, shared with the top-level functions (tensor/math.py, reduce.py, shape.py) -------

    __add__ = _math.add
    __radd__ = _math._radd
    __sub__ = _math.subtract
    __rsub__ = _math._rsub
    __mul__ = _math.multiply
    __rmul__ = _math._rmul
    __truediv__ = _math.divide
    __rtruediv__ = _math._rtruediv
    __floordiv__ = _math.floor_divide
    __rfloordiv__ = _math._rfloordiv
    __mod__ = _math.remainder
    __rmod__ = _math._rmod
    __pow__ = _math.pow
    __rpow__ = _math._rpow
    __matmul__ = _linalg.matmul
    __neg__ = _math.negative
    __pos__ = _math.positive
    __abs__ = _math.abs
    __invert__ = _math._invert
    __and__ = _math._and
    __rand__ = _math._rand
    __or__ = _math._or
    __ror__ = _math._ror
    __xor__ = _math._xor
    __rxor__ = _math._rxor
    __lt__ = _math.less
    __le__ = _math.less_equal
    __gt__ = _math.greater
    __ge__ = _math.greater_equal
    __eq__ = _math._eq  # type: ignore[assignment]  # elementwise, as in NumPy
    __ne__ = _math._ne  # type: ignore[assignment]  # elementwise, as in NumPy
    __hash__ = object.__hash__

    def __rmatmul__(self, other: TensorLike) -> Tensor:
        return _linalg.matmul(other, self)

    __getitem__ = _index.getitem
    __setitem__ = _index.setitem

    exp = _math.exp
    expm1 = _math.expm1
    log = _math.log
    log1p = _math.log1p
    log2 = _math.log2
    log10 = _math.log10
    sqrt = _math.sqrt
    rsqrt = _math.rsqrt
    square = _math.square
    sin = _math.sin
    cos = _math.cos
    tan = _math.tan
    tanh = _math.tanh
    sigmoid = _math.sigmoid
    erf = _math.erf
    abs = _math.abs
    sign = _math.sign
    floor = _math.floor
    ceil = _math.ceil
    round = _math.round
    trunc = _math.trunc
    reciprocal = _math.reciprocal
    clip = _math.clip
    clamp = _math.clip
    isnan = _math.isnan
    isinf = _math.isinf
    isfinite = _math.isfinite

    sum = _reduce.sum
    prod = _reduce.prod
    max = _reduce.max
    min = _reduce.min
    amax = _reduce.max
    amin = _reduce.min
    mean = _reduce.mean
    var = _reduce.var
    std = _reduce.std
    all = _reduce.all
    any = _reduce.any
    argmax = _reduce.argmax
    argmin = _reduce.argmin
    cumsum = _reduce.cumsum
    logsumexp = _reduce.logsumexp

    matmul = _linalg.matmul

    reshape = _shape.reshape
    view = _shape.view
    clone = _shape.clone
    transpose = _shape.transpose
    permute = _shape.permute
    permute_dims = _shape.permute_dims
    swapaxes = _shape.swapaxes
    moveaxis = _shape.moveaxis
    expand = _shape.expand
    squeeze = _shape.squeeze
    unsqueeze = _shape.unsqueeze
    expand_dims = _shape.expand_dims
    flip = _shape.flip
    narrow = _shape.narrow
    flatten = _shape.flatten
    split = _shape.split
    repeat = _shape.repeat
    broadcast_to = _math.broadcast_to

    @property
    def T(self) -> Tensor:  # noqa: N802 (NumPy's name)
        """Axes reversed."""
        return _shape.transpose(self)

    @property
    def mT(self) -> Tensor:  # noqa: N802 (NumPy's name)
        """The last two axes swapped (a stack of matrices transposed)."""
        return _linalg.matrix_transpose(self)

    def t(self) -> Tensor:
        """PyTorch's transpose of a matrix (a vector is returned as is)."""
        if self.ndim > 2:
            raise ShapeError(f"t: expects a tensor with at most 2 dimensions (got {self.ndim}); "
                             "use transpose(dim0, dim1) or mT", op="t")
        return _shape.transpose(self)


class AutogradHooks(Protocol):
    """What `omnitensor.autograd` provides to tensors (it registers itself on import)."""

    def record_op(self, op: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
        """Record one op application whose operands require grad."""

    def make_leaf(self, tensor: Tensor) -> Any:
        """The autograd node of a tensor that starts requiring grad."""

    def is_leaf_node(self, node: Any) -> bool:
        """True for nodes made by `make_leaf`."""

    def backward(self, tensor: Tensor, gradient: Tensor | None, *, create_graph: bool) -> None:
        """Accumulate gradients of `tensor` into the leaves' ``.grad``."""


_hooks: list[AutogradHooks] = []


def register_autograd(hooks: AutogradHooks) -> None:
    """Install the autograd engine (called once by `omnitensor.autograd` when it is imported).

    The tensor layer sits below autograd: it calls these hooks and never imports autograd.
    """
    _hooks[:] = [hooks]


def _autograd() -> AutogradHooks:
    if not _hooks:  # `import omnitensor` always imports autograd, so this is a broken install
        raise OmnitensorError("tensor: omnitensor.autograd is not loaded; import omnitensor")
    return _hooks[0]


def realize(*tensors: Tensor) -> None:
    """Realize several tensors in one program."""
    realize_refs([(t._node, t._index) for t in tensors])


def as_tensor(value: Any, dtype: DType | None = None, *, fn: str | None = None,
              arg: str | None = None) -> Tensor:
    """`value` as a Tensor: tensors pass through; arrays, scalars and nested lists become leaves.

    Args:
        value: a Tensor, a Python scalar, a numpy array or scalar, a (nested) list or tuple, or
            any object numpy converts (``__array__``, DLPack exporters on the CPU).
        dtype: convert to this dtype.
        fn: the user-level function asking (for the error message).
        arg: the argument's name (for the error message).

    Raises:
        ArgumentTypeError: (a TypeError) for values that are not numbers, naming `fn` and `arg`.
    """
    if isinstance(value, Tensor):
        return value if dtype is None else value.astype(dtype)
    from .interop import from_numpy

    if isinstance(value, (bool, int, float)):
        target = dtype or dt.result_type(value)
        return from_numpy(np.asarray(value, dtype=target.np), copy=False)
    array = _to_array(value, fn, arg)
    if dtype is not None:
        array = array.astype(dtype.np)
    elif array.dtype == np.float64 and not isinstance(value, (np.ndarray, np.generic)):
        array = array.astype(np.float32)  # Python float literals default to float32
    elif array.dtype == np.int64 and not isinstance(value, (np.ndarray, np.generic)):
        array = array.astype(np.int32)
    return from_numpy(array, copy=False)


def _to_array(value: Any, fn: str | None, arg: str | None) -> np.ndarray[Any, Any]:
    where = f"{fn or 'tensor'}: argument {arg!r}" if arg else f"{fn or 'tensor'}: value"
    if value is None or isinstance(value, (str, bytes, dict, set)):
        raise ArgumentTypeError(
            f"{where} must be a Tensor, a number, a list or a numpy array (got "
            f"{type(value).__name__})", op=fn)
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        value = [v.numpy() if isinstance(v, Tensor) else v for v in value]
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"{where} cannot be converted to a tensor ({exc})",
                                op=fn) from None
    if array.dtype in _NUMPY_DTYPES:
        return array
    if array.dtype == object or array.dtype.kind in "USVOMm":
        raise ArgumentTypeError(
            f"{where} must hold numbers (got {type(value).__name__} of {array.dtype})", op=fn)
    if array.dtype.kind == "c":
        raise DTypeError(f"{where} is complex ({array.dtype}); omnitensor has no complex "
                         "dtypes", op=fn, dtype=str(array.dtype))
    dt.as_dtype(array.dtype)  # DTypeError naming the supported dtypes
    return array
