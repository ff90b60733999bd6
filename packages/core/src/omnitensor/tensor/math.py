"""Tensor arithmetic: broadcasting, promotion, operators, reductions, matmul, movement.

Everything here lowers to PTIR primitives through `Tensor._apply`; broadcasting and dtype
promotion (weak Python scalars, DESIGN §3) are made explicit in the recorded graph.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError, ShapeError

if TYPE_CHECKING:
    from .tensor import Tensor, TensorLike

__all__ = [
    "broadcast_shapes", "broadcast_to", "concatenate", "maximum", "minimum", "stack", "where",
]


def broadcast_shapes(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of `shapes`.

    Raises:
        ShapeError: ``"<op>: cannot broadcast (2, 3) with (4,)"``.
    """
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for shape in shapes:
        for i, d in enumerate(shape, start=ndim - len(shape)):
            if out[i] == 1:
                out[i] = d
            elif d not in (1, out[i]):
                listed = " with ".join(str(s) for s in shapes)
                raise ShapeError(f"{op}: cannot broadcast {listed}", op=op, shapes=list(shapes))
    return tuple(out)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """`x` broadcast to `shape` (NumPy rules); a view where the backend allows."""
    shape = tuple(shape)
    if x.shape == shape:
        return x
    broadcast_shapes("broadcast_to", x.shape, shape)
    if len(shape) < x.ndim:
        raise ShapeError(f"broadcast_to: cannot broadcast {x.shape} to {shape}")
    offset = len(shape) - x.ndim
    if broadcast_shapes("broadcast_to", x.shape, shape) != shape:
        raise ShapeError(f"broadcast_to: cannot broadcast {x.shape} to {shape}")
    return x._view_or_apply(
        "broadcast_in_dim", shape=shape, dims=tuple(range(offset, offset + x.ndim))
    )


def _operands(op: str, values: Sequence[TensorLike], dtype: DType | None = None
              ) -> list[Tensor]:
    """Promote and broadcast a mix of tensors and Python scalars to one dtype and shape."""
    from .creation import full
    from .tensor import Tensor, as_tensor

    target = dtype or dt.result_type(*values)
    tensors = [v for v in values if isinstance(v, Tensor)]
    shape = broadcast_shapes(op, *(t.shape for t in tensors)) if tensors else ()
    out = []
    for v in values:
        if isinstance(v, Tensor):
            t = v.astype(target)
        elif isinstance(v, (bool, int, float)):
            t = full((), v, dtype=target)
        else:
            t = as_tensor(v).astype(target)
            shape = broadcast_shapes(op, shape, t.shape)
        out.append(t)
    return [broadcast_to(t, shape) for t in out]


def binary(op: str, lhs: TensorLike, rhs: TensorLike, dtype: DType | None = None) -> Tensor:
    """``op(lhs, rhs)`` with NumPy broadcasting and omnitensor's promotion."""
    from .tensor import Tensor

    a, b = _operands(op, [lhs, rhs], dtype)
    return Tensor._apply(op, a, b)


def unary(op: str, x: TensorLike) -> Tensor:
    """``op(x)``; integer inputs of float-only ops are converted to the default float first."""
    from ..ir.opdef import get_op
    from .tensor import Tensor, as_tensor

    t = as_tensor(x)
    allowed = get_op(op).dtypes
    if t.dtype not in allowed and dt.default_float in allowed and not t.dtype.is_floating:
        t = t.astype(dt.default_float)
    return Tensor._apply(op, t)


def where(cond: TensorLike, x: TensorLike, y: TensorLike) -> Tensor:
    """`x` where `cond` else `y`, broadcasting all three."""
    from .tensor import Tensor, as_tensor

    c = as_tensor(cond)
    if not c.dtype.is_bool:
        c = c.astype(dt.bool_)
    a, b = _operands("select", [x, y])
    shape = broadcast_shapes("select", c.shape, a.shape)
    return Tensor._apply("select", broadcast_to(c, shape), broadcast_to(a, shape),
                         broadcast_to(b, shape))


def maximum(x: TensorLike, y: TensorLike) -> Tensor:
    """Elementwise maximum (NaN propagates)."""
    return binary("max", x, y)


def minimum(x: TensorLike, y: TensorLike) -> Tensor:
    """Elementwise minimum (NaN propagates)."""
    return binary("min", x, y)


def concatenate(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis (dtypes promoted)."""
    from .tensor import Tensor

    if not tensors:
        raise ShapeError("concatenate: needs at least one tensor")
    target = dt.result_type(*tensors)
    axis = _axis("concatenate", axis, tensors[0].ndim)
    return Tensor._apply("concatenate", *(t.astype(target) for t in tensors), axis=axis)


def stack(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along a new axis."""
    if not tensors:
        raise ShapeError("stack: needs at least one tensor")
    axis = _axis("stack", axis, tensors[0].ndim + 1)
    return concatenate([t.unsqueeze(axis) for t in tensors], axis=axis)


def _axis(op: str, axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ShapeError(f"{op}: axis {axis} is out of range for rank {ndim}", op=op)
    return axis % max(ndim, 1)


def _axes(op: str, axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = tuple(sorted(_axis(op, a, ndim) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axes}", op=op)
    return out


class TensorMath:
    """Arithmetic, reductions and movement methods of `Tensor` (mixed into it)."""

    __slots__ = ()

    # --- operators ------------------------------------------------------------------------------

    def __add__(self, other: TensorLike) -> Tensor:
        return binary("add", self, other)  # type: ignore[arg-type]

    def __radd__(self, other: TensorLike) -> Tensor:
        return binary("add", other, self)  # type: ignore[arg-type]

    def __sub__(self, other: TensorLike) -> Tensor:
        return binary("sub", self, other)  # type: ignore[arg-type]

    def __rsub__(self, other: TensorLike) -> Tensor:
        return binary("sub", other, self)  # type: ignore[arg-type]

    def __mul__(self, other: TensorLike) -> Tensor:
        return binary("mul", self, other)  # type: ignore[arg-type]

    def __rmul__(self, other: TensorLike) -> Tensor:
        return binary("mul", other, self)  # type: ignore[arg-type]

    def __truediv__(self, other: TensorLike) -> Tensor:
        return _true_divide(self, other)  # type: ignore[arg-type]

    def __rtruediv__(self, other: TensorLike) -> Tensor:
        return _true_divide(other, self)  # type: ignore[arg-type]

    def __floordiv__(self, other: TensorLike) -> Tensor:
        return _floor_divide(self, other)  # type: ignore[arg-type]

    def __rfloordiv__(self, other: TensorLike) -> Tensor:
        return _floor_divide(other, self)  # type: ignore[arg-type]

    def __mod__(self, other: TensorLike) -> Tensor:
        return _floor_mod(self, other)  # type: ignore[arg-type]

    def __pow__(self, other: TensorLike) -> Tensor:
        return binary("pow", self, other)  # type: ignore[arg-type]

    def __rpow__(self, other: TensorLike) -> Tensor:
        return binary("pow", other, self)  # type: ignore[arg-type]

    def __matmul__(self, other: Tensor) -> Tensor:
        return matmul(self, other)  # type: ignore[arg-type]

    def __rmatmul__(self, other: Tensor) -> Tensor:
        return matmul(other, self)  # type: ignore[arg-type]

    def __neg__(self) -> Tensor:
        return unary("neg", self)  # type: ignore[arg-type]

    def __pos__(self) -> Tensor:
        return self  # type: ignore[return-value]

    def __abs__(self) -> Tensor:
        return unary("abs", self)  # type: ignore[arg-type]

    def __invert__(self) -> Tensor:
        return unary("not", self)  # type: ignore[arg-type]

    def __and__(self, other: TensorLike) -> Tensor:
        return binary("and", self, other)  # type: ignore[arg-type]

    def __or__(self, other: TensorLike) -> Tensor:
        return binary("or", self, other)  # type: ignore[arg-type]

    def __xor__(self, other: TensorLike) -> Tensor:
        return binary("xor", self, other)  # type: ignore[arg-type]

    def __lt__(self, other: TensorLike) -> Tensor:
        return binary("lt", self, other)  # type: ignore[arg-type]

    def __le__(self, other: TensorLike) -> Tensor:
        return binary("le", self, other)  # type: ignore[arg-type]

    def __gt__(self, other: TensorLike) -> Tensor:
        return binary("gt", self, other)  # type: ignore[arg-type]

    def __ge__(self, other: TensorLike) -> Tensor:
        return binary("ge", self, other)  # type: ignore[arg-type]

    def __eq__(self, other: object) -> Tensor:  # type: ignore[override]
        return binary("eq", self, other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]
        return binary("ne", self, other)  # type: ignore[arg-type]

    # --- elementwise methods --------------------------------------------------------------------

    def exp(self) -> Tensor:
        """e**x."""
        return unary("exp", self)  # type: ignore[arg-type]

    def log(self) -> Tensor:
        """Natural logarithm."""
        return unary("log", self)  # type: ignore[arg-type]

    def sqrt(self) -> Tensor:
        """Square root."""
        return unary("sqrt", self)  # type: ignore[arg-type]

    def tanh(self) -> Tensor:
        """Hyperbolic tangent."""
        return unary("tanh", self)  # type: ignore[arg-type]

    def sigmoid(self) -> Tensor:
        """Logistic sigmoid."""
        return unary("logistic", self)  # type: ignore[arg-type]

    def abs(self) -> Tensor:
        """|x|."""
        return unary("abs", self)  # type: ignore[arg-type]

    def clip(self, lo: TensorLike | None = None, hi: TensorLike | None = None) -> Tensor:
        """Clamp into [lo, hi] (either may be None)."""
        out: Tensor = self  # type: ignore[assignment]
        if lo is not None:
            out = maximum(out, lo)
        if hi is not None:
            out = minimum(out, hi)
        return out

    # --- reductions -----------------------------------------------------------------------------

    def _reduce(self, op: str, axis: int | Sequence[int] | None, keepdims: bool) -> Tensor:
        from .tensor import Tensor

        me: Tensor = self  # type: ignore[assignment]
        axes = _axes(op, axis, me.ndim)
        out = Tensor._apply(op, me, axes=axes)
        if keepdims:
            out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(me.shape)))
        return out

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Sum over `axis` (all axes when None); bool sums count as int32."""
        me: Tensor = self  # type: ignore[assignment]
        if me.dtype.is_bool:
            me = me.astype(dt.int32)
        return me._reduce("reduce_sum", axis, keepdims)

    def prod(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Product over `axis`."""
        return self._reduce("reduce_prod", axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Maximum over `axis` (NaN propagates)."""
        return self._reduce("reduce_max", axis, keepdims)

    def min(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Minimum over `axis` (NaN propagates)."""
        return self._reduce("reduce_min", axis, keepdims)

    def mean(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Arithmetic mean over `axis`; integers give the default float dtype."""
        me: Tensor = self  # type: ignore[assignment]
        if not me.dtype.is_floating:
            me = me.astype(dt.default_float)
        count = math.prod(me.shape[a] for a in _axes("mean", axis, me.ndim))
        return me.sum(axis, keepdims) / float(count)

    def var(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        """Population variance over `axis`."""
        me: Tensor = self  # type: ignore[assignment]
        centered = me - me.mean(axis, keepdims=True)
        return (centered * centered).mean(axis, keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index (int32) of the maximum along `axis` (flattened when None)."""
        return _arg("argmax", self, axis, keepdims)  # type: ignore[arg-type]

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index (int32) of the minimum along `axis` (flattened when None)."""
        return _arg("argmin", self, axis, keepdims)  # type: ignore[arg-type]

    def cumsum(self, axis: int = 0) -> Tensor:
        """Inclusive running sum along `axis`."""
        from .tensor import Tensor

        me: Tensor = self  # type: ignore[assignment]
        return Tensor._apply("cumsum", me, axis=_axis("cumsum", axis, me.ndim))

    # --- linear algebra -------------------------------------------------------------------------

    def matmul(self, other: Tensor) -> Tensor:
        """Matrix product with NumPy's rules for 1-D operands and broadcast batch dims."""
        return matmul(self, other)  # type: ignore[arg-type]

    # --- movement -------------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> Tensor:
        """The same elements in row-major order with a new shape (one -1 is inferred)."""
        me: Tensor = self  # type: ignore[assignment]
        dims = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        dims = _infer_reshape(me.shape, tuple(int(d) for d in dims))
        if dims == me.shape:
            return me
        return me._view_or_apply("reshape", shape=dims)

    def transpose(self, *perm: int | Sequence[int]) -> Tensor:
        """Permute axes (reverse them when no permutation is given)."""
        me: Tensor = self  # type: ignore[assignment]
        first = perm[0] if len(perm) == 1 else None
        order: tuple[Any, ...] = tuple(first) if isinstance(first, (tuple, list)) else perm
        if not order:
            order = tuple(reversed(range(me.ndim)))
        order = tuple(_axis("transpose", a, me.ndim) for a in order)
        if sorted(order) != list(range(me.ndim)):
            raise ShapeError(f"transpose: {order} is not a permutation of {me.ndim} axes")
        if order == tuple(range(me.ndim)):
            return me
        return me._view_or_apply("transpose", perm=order)

    def permute(self, *perm: int | Sequence[int]) -> Tensor:
        """Alias of `transpose` with an explicit permutation."""
        return self.transpose(*perm)

    @property
    def T(self) -> Tensor:  # noqa: N802 (NumPy's name)
        """Axes reversed."""
        return self.transpose()

    def expand(self, *shape: Any) -> Tensor:
        """Broadcast to `shape` (-1 keeps a dimension), as a view where possible."""
        me: Tensor = self  # type: ignore[assignment]
        dims = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        offset = len(dims) - me.ndim
        full_shape = tuple(
            me.shape[i - offset] if d == -1 and i >= offset else int(d) for i, d in enumerate(dims)
        )
        return broadcast_to(me, full_shape)

    def squeeze(self, axis: int | Sequence[int] | None = None) -> Tensor:
        """Drop size-1 axes (all of them, or those in `axis`)."""
        me: Tensor = self  # type: ignore[assignment]
        axes = tuple(i for i, d in enumerate(me.shape) if d == 1) if axis is None else _axes(
            "squeeze", axis, me.ndim)
        for a in axes:
            if me.shape[a] != 1:
                raise ShapeError(f"squeeze: axis {a} has size {me.shape[a]} (expected 1)")
        return me.reshape(tuple(d for i, d in enumerate(me.shape) if i not in axes))

    def unsqueeze(self, axis: int) -> Tensor:
        """Insert a size-1 axis at `axis`."""
        me: Tensor = self  # type: ignore[assignment]
        axis = _axis("unsqueeze", axis, me.ndim + 1)
        return me.reshape(me.shape[:axis] + (1,) + me.shape[axis:])

    def flip(self, axis: int | Sequence[int] | None = None) -> Tensor:
        """Reverse the order of elements along `axis` (all axes when None)."""
        me: Tensor = self  # type: ignore[assignment]
        return me._view_or_apply("reverse", axes=_axes("flip", axis, me.ndim))

    def narrow(self, axis: int, start: int, length: int) -> Tensor:
        """Elements ``start:start+length`` along `axis`."""
        me: Tensor = self  # type: ignore[assignment]
        axis = _axis("narrow", axis, me.ndim)
        if start < 0:
            start += me.shape[axis]
        if not (0 <= start and length >= 0 and start + length <= me.shape[axis]):
            raise ShapeError(
                f"narrow: [{start}, {start + length}) is out of range for axis {axis} of size "
                f"{me.shape[axis]}")
        begin = [0] * me.ndim
        limit = list(me.shape)
        begin[axis], limit[axis] = start, start + length
        return me._view_or_apply("slice", start=tuple(begin), limit=tuple(limit),
                                 stride=(1,) * me.ndim)

    def flatten(self) -> Tensor:
        """A 1-D tensor of all elements in row-major order."""
        return self.reshape(-1)


def _infer_reshape(old: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...]:
    size = math.prod(old)
    if new.count(-1) > 1:
        raise ShapeError(f"reshape: only one -1 is allowed (got {new})")
    if -1 in new:
        known = math.prod(d for d in new if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"reshape: cannot reshape {old} into {new}")
        new = tuple(size // known if d == -1 else d for d in new)
    if math.prod(new) != size or any(d < 0 for d in new):
        raise ShapeError(f"reshape: cannot reshape {old} ({size} elements) into {new}")
    return new


def _true_divide(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    target = dt.result_type(lhs, rhs)
    if not target.is_floating:
        target = dt.default_float
    return binary("div", lhs, rhs, dtype=target)


def _floor_divide(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    target = dt.result_type(lhs, rhs)
    if target.is_floating:
        return unary("floor", binary("div", lhs, rhs))
    a, b = _operands("div", [lhs, rhs])
    q = binary("div", a, b)
    adjust = (binary("rem", a, b) != 0) & ((a < 0) != (b < 0))
    return q - adjust.astype(target)


def _floor_mod(lhs: TensorLike, rhs: TensorLike) -> Tensor:
    a, b = _operands("rem", [lhs, rhs])
    r = binary("rem", a, b)
    return where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


def _arg(op: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    from .tensor import Tensor

    if axis is None:
        out = Tensor._apply(op, x.reshape(-1), axis=0)
        return out.reshape((1,) * x.ndim) if keepdims else out
    axis = _axis(op, axis, x.ndim)
    out = Tensor._apply(op, x, axis=axis)
    return out.unsqueeze(axis) if keepdims else out


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """NumPy matmul semantics lowered to one `dot_general`."""
    from .tensor import Tensor, as_tensor

    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: operands must have at least one dimension "
                         f"(got {a.shape} and {b.shape})", op="matmul")
    target = dt.result_type(a, b)
    if target.is_bool:
        raise DTypeError("matmul: bool operands are not supported; convert first", op="matmul")
    a, b = a.astype(target), b.astype(target)
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise ShapeError(f"matmul: contracting dimensions differ (got {a.shape} @ {b.shape})",
                         op="matmul", shapes=[a.shape, b.shape])
    if b.ndim <= 2:
        return Tensor._apply("dot_general", a, b, contracting=((a.ndim - 1,), (0,)),
                             batch=((), ()))
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    batch = broadcast_shapes("matmul", a2.shape[:-2], b.shape[:-2])
    a2 = broadcast_to(a2, batch + a2.shape[-2:])
    b2 = broadcast_to(b, batch + b.shape[-2:])
    nb = len(batch)
    out = Tensor._apply("dot_general", a2, b2, contracting=((nb + 1,), (nb,)),
                        batch=(tuple(range(nb)), tuple(range(nb))))
    return out.squeeze(nb) if a.ndim == 1 else out


def _unused(_: Any) -> np.ndarray[Any, Any]:  # keeps numpy imported for type aliases
    return np.asarray(_)
