"""The Array API functions whose signatures differ from omnitensor's own (or that only it has).

Creation functions take ``device=`` (a backend name or instance); data-type functions work on
`DType`s; searching, set and sorting functions are built from omnitensor's ops. Functions with
data-dependent output shapes (`nonzero`, the ``unique_*`` family) read their input.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import ArgumentTypeError, DTypeError, ShapeError
from ..tensor import creation as _creation
from ..tensor.math import floor_divide, less, pow, where
from ..tensor.reduce import cumsum, normalize_axis
from ..tensor.shape import repeat as _repeat
from ..tensor.shape import reshape as _reshape
from ..tensor.tensor import Tensor, as_tensor

__all__ = [
    "arange", "argsort", "asarray", "astype", "bitwise_left_shift", "bitwise_right_shift",
    "can_cast", "conj", "cumulative_sum", "empty", "empty_like", "eye", "finfo",
    "from_dlpack", "full", "full_like", "iinfo", "imag", "isdtype", "linspace", "meshgrid",
    "nonzero", "ones", "ones_like", "real", "repeat", "reshape", "result_type", "searchsorted",
    "sort",
    "take", "tril", "triu", "unique_all", "unique_counts", "unique_inverse", "unique_values",
    "zeros", "zeros_like",
]


# --- devices --------------------------------------------------------------------------------


@contextlib.contextmanager
def _on(device: Any) -> Iterator[None]:
    """Create inside the `device` backend's scope (None: the current one)."""
    if device is None:
        yield
        return
    from ..backend.registry import use_backend

    with use_backend(device):
        yield


# --- creation -------------------------------------------------------------------------------


def asarray(obj: Any, /, *, dtype: Any = None, device: Any = None, copy: bool | None = None
            ) -> Tensor:
    """A tensor from `obj` (a tensor, a Python scalar or nested sequence, a buffer or array)."""
    target = None if dtype is None else dt.as_dtype(dtype)
    if isinstance(obj, Tensor):
        out = obj if target is None else obj.astype(target)
        if copy and out is obj:
            out = obj.clone()  # a new handle: writing to `obj` later does not change it
        return out if device is None else out.to(device)
    if copy is False and not isinstance(obj, np.ndarray):
        raise ArgumentTypeError("asarray: copy=False needs an array to alias", op="asarray")
    with _on(device):
        if isinstance(obj, (bytes, bytearray, memoryview)):
            obj = np.frombuffer(obj, dtype=np.uint8)
        if isinstance(obj, (list, tuple)) and target is None:
            flat = _flatten(obj)
            if flat and builtins.all(isinstance(v, bool) for v in flat):
                target = dt.bool_
            elif flat and builtins.any(isinstance(v, float) for v in flat):
                target = dt.default_float
        return as_tensor(np.array(obj, copy=True) if copy else obj, target, fn="asarray",
                         arg="obj")


def _flatten(obj: Any) -> list[Any]:
    out: list[Any] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        else:
            out.append(item)
    return out


def arange(start: int | float, /, stop: int | float | None = None, step: int | float = 1, *,
           dtype: Any = None, device: Any = None) -> Tensor:
    """`omnitensor.arange` with ``device=``."""
    with _on(device):
        return _creation.arange(start, stop, step, dtype)


def empty(shape: int | Sequence[int], *, dtype: Any = None, device: Any = None) -> Tensor:
    """`omnitensor.empty` with ``device=``."""
    with _on(device):
        return _creation.empty(shape, dtype=dtype)


def empty_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    """`omnitensor.empty_like` with ``device=``."""
    with _on(device):
        return _creation.empty_like(x, dtype)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype: Any = None,
        device: Any = None) -> Tensor:
    """`omnitensor.eye` with ``device=``."""
    with _on(device):
        return _creation.eye(n_rows, n_cols, k, dtype)


def full(shape: int | Sequence[int], fill_value: bool | int | float, *, dtype: Any = None,
         device: Any = None) -> Tensor:
    """`omnitensor.full` with ``device=``."""
    with _on(device):
        return _creation.full(shape, fill_value, dtype)


def full_like(x: Tensor, /, fill_value: bool | int | float, *, dtype: Any = None,
              device: Any = None) -> Tensor:
    """`omnitensor.full_like` with ``device=``."""
    with _on(device):
        return _creation.full_like(x, fill_value, dtype)


def linspace(start: int | float, stop: int | float, /, num: int, *, dtype: Any = None,
             device: Any = None, endpoint: bool = True) -> Tensor:
    """`omnitensor.linspace` with ``device=``."""
    with _on(device):
        return _creation.linspace(start, stop, num, dtype, endpoint=endpoint)


def ones(shape: int | Sequence[int], *, dtype: Any = None, device: Any = None) -> Tensor:
    """`omnitensor.ones` with ``device=``."""
    with _on(device):
        return _creation.ones(shape, dtype=dtype)


def ones_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    """`omnitensor.ones_like` with ``device=``."""
    with _on(device):
        return _creation.ones_like(x, dtype)


def zeros(shape: int | Sequence[int], *, dtype: Any = None, device: Any = None) -> Tensor:
    """`omnitensor.zeros` with ``device=``."""
    with _on(device):
        return _creation.zeros(shape, dtype=dtype)


def zeros_like(x: Tensor, /, *, dtype: Any = None, device: Any = None) -> Tensor:
    """`omnitensor.zeros_like` with ``device=``."""
    with _on(device):
        return _creation.zeros_like(x, dtype)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor from any DLPack exporter on the CPU (copied)."""
    from ..tensor.interop import from_dlpack as _from_dlpack

    out = _from_dlpack(x)
    return out if device is None else out.to(device)


def meshgrid(*arrays: Tensor, indexing: str = "xy") -> list[Tensor]:
    """Coordinate grids from 1-D arrays (``"xy"`` Cartesian or ``"ij"`` matrix indexing)."""
    if indexing not in ("xy", "ij"):
        raise ArgumentTypeError(f"meshgrid: indexing must be 'xy' or 'ij' (got {indexing!r})",
                                op="meshgrid")
    n = len(arrays)
    if not n:
        return []
    target = dt.result_type(*arrays)
    sizes = [a.size for a in arrays]
    if indexing == "xy" and n >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, a in enumerate(arrays):
        axis = i
        if indexing == "xy" and n >= 2 and i < 2:
            axis = 1 - i
        shape = [1] * n
        shape[axis] = a.size
        out.append(a.astype(target).reshape(tuple(shape)).broadcast_to(tuple(sizes)))
    return out


def _triangle(fn: str, x: Tensor, k: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"{fn}: needs at least 2 dimensions (got {x.shape})", op=fn)
    rows, cols = x.shape[-2:]
    r = _creation.arange(rows).reshape(-1, 1)
    c = _creation.arange(cols).reshape(1, -1)
    keep = (c - r <= k) if lower else (c - r >= k)
    return where(keep, x, _creation.zeros((), dtype=x.dtype))


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    """Zero the elements above diagonal `k` of the last two axes."""
    return _triangle("tril", x, k, True)


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    """Zero the elements below diagonal `k` of the last two axes."""
    return _triangle("triu", x, k, False)


# --- data types -----------------------------------------------------------------------------


def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """`x` converted to `dtype` (a new handle even when the dtype is the same)."""
    out = x.astype(dtype)
    if out is x and copy:
        out = x.clone()
    return out if device is None else out.to(device)


def _category(d: DType) -> str:
    return "b" if d.is_bool else ("f" if d.is_floating else "i")


def can_cast(from_: DType | Tensor, to: DType, /) -> bool:
    """True when promotion would turn `from_` into `to` (within the same kind of dtype)."""
    src = from_.dtype if isinstance(from_, Tensor) else dt.as_dtype(from_)
    dst = dt.as_dtype(to)
    if _category(src) != _category(dst):
        return False
    return dt.promote(src, dst) == dst


def result_type(*arrays_and_dtypes: Any) -> DType:
    """The promoted dtype of tensors, dtypes and (weak) Python scalars."""
    if not arrays_and_dtypes:
        raise ArgumentTypeError("result_type: needs at least one array or dtype",
                                op="result_type")

    class _Typed:
        def __init__(self, dtype: DType) -> None:
            self.dtype = dtype

    items = [_Typed(a) if isinstance(a, DType) else a for a in arrays_and_dtypes]
    return dt.result_type(*items)


@dataclass(frozen=True)
class finfo_object:  # noqa: N801 (the Array API's name)
    """Machine limits of a floating dtype (`finfo`)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: DType


@dataclass(frozen=True)
class iinfo_object:  # noqa: N801 (the Array API's name)
    """Limits of an integer dtype (`iinfo`)."""

    bits: int
    max: int
    min: int
    dtype: DType


def finfo(type: DType | Tensor, /) -> finfo_object:
    """Machine limits of a floating dtype."""
    d = type.dtype if isinstance(type, Tensor) else dt.as_dtype(type)
    if not d.is_floating:
        raise DTypeError(f"finfo: {d} is not a floating dtype", op="finfo", dtype=str(d))
    info: Any = ml_dtypes.finfo(d.np)  # type: ignore[no-untyped-call]
    return finfo_object(d.bits, float(info.eps), float(info.max), float(info.min),
                        float(info.smallest_normal), d)


def iinfo(type: DType | Tensor, /) -> iinfo_object:
    """Limits of an integer dtype."""
    d = type.dtype if isinstance(type, Tensor) else dt.as_dtype(type)
    if not d.is_integer:
        raise DTypeError(f"iinfo: {d} is not an integer dtype", op="iinfo", dtype=str(d))
    info = np.iinfo(d.np)
    return iinfo_object(d.bits, int(info.max), int(info.min), d)


_KINDS: dict[str, Callable[[DType], bool]] = {
    "bool": lambda d: d.is_bool,
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.is_integer,
    "real floating": lambda d: d.is_floating,
    "complex floating": lambda d: False,
    "numeric": lambda d: not d.is_bool,
}


def isdtype(dtype: DType, kind: Any) -> bool:
    """True when `dtype` is of `kind` (a dtype, a kind name, or a tuple of either)."""
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ArgumentTypeError(f"isdtype: unknown kind {kind!r} (expected one of "
                                    f"{sorted(_KINDS)})", op="isdtype")
        return bool(_KINDS[kind](dt.as_dtype(dtype)))
    return dt.as_dtype(dtype) == dt.as_dtype(kind)


# --- elementwise extras ---------------------------------------------------------------------


def _shift_amount(x1: Tensor, x2: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    a, b = as_tensor(x1), as_tensor(x2)
    target = dt.result_type(a, b)
    if not target.is_integer:
        raise DTypeError(f"bitwise shift: needs integer operands (got {target})",
                         op="bitwise_shift", dtype=str(target))
    a, b = a.astype(target), b.astype(target)
    too_far = b >= target.bits
    return a, where(too_far, 0, b), too_far


def bitwise_left_shift(x1: Tensor, x2: Tensor, /) -> Tensor:
    """x1 << x2 (zeros shifted in; shifts past the width give 0)."""
    a, b, too_far = _shift_amount(x1, x2)
    return where(too_far, 0, a * pow(2, b).astype(a.dtype))


def bitwise_right_shift(x1: Tensor, x2: Tensor, /) -> Tensor:
    """x1 >> x2, arithmetic for signed integers (floor division by 2**x2)."""
    a, b, too_far = _shift_amount(x1, x2)
    # NOTE: 2**b overflows a signed type at b = bits - 1 (int16: 2**15 wraps to -32768, and
    # 1 >> 15 gave -1); floor(floor(a / 2**(b-1)) / 2) is the same quotient within range.
    half = pow(2, where(b > 0, b - 1, 0)).astype(a.dtype)
    shifted = where(b > 0, floor_divide(floor_divide(a, half), 2), a)
    sign_fill = where(less(a, 0), -1, 0).astype(a.dtype)  # what shifting out every bit leaves
    return where(too_far, sign_fill, shifted)


def conj(x: Tensor, /) -> Tensor:
    """The complex conjugate (real tensors are returned as is)."""
    return x


def real(x: Tensor, /) -> Tensor:
    """The real part (real tensors are returned as is)."""
    return x


def imag(x: Tensor, /) -> Tensor:
    """The imaginary part (zeros for real tensors)."""
    return _creation.zeros_like(x)


# --- indexing, searching, sorting, sets -----------------------------------------------------


def take(x: Tensor, indices: Tensor, /, *, axis: int | None = None) -> Tensor:
    """Elements of `x` at the 1-D integer `indices` along `axis` (a 1-D `x` needs none)."""
    if axis is None:
        if x.ndim != 1:
            raise ShapeError(f"take: axis is required for a {x.ndim}-d tensor", op="take")
        axis = 0
    axis = normalize_axis("take", axis, x.ndim)
    return x[(slice(None),) * axis + (indices,)]


def nonzero(x: Tensor, /) -> tuple[Tensor, ...]:
    """Indices of the nonzero elements, one int32 tensor per axis (reads `x`)."""
    if x.ndim == 0:
        raise ShapeError("nonzero: a 0-d tensor has no indices", op="nonzero")
    return tuple(as_tensor(i.astype(np.int32)) for i in np.nonzero(x.numpy()))


def searchsorted(x1: Tensor, x2: Tensor, /, *, side: str = "left",
                 sorter: Tensor | None = None) -> Tensor:
    """Insertion points of `x2` into the sorted 1-D `x1` that keep it sorted (int32)."""
    if side not in ("left", "right"):
        raise ArgumentTypeError(f"searchsorted: side must be 'left' or 'right' (got {side!r})",
                                op="searchsorted")
    if x1.ndim != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-D (got {x1.shape})", op="searchsorted")
    if sorter is not None:
        x1 = take(x1, sorter)
    target = dt.result_type(x1, x2)
    a, v = x1.astype(target), as_tensor(x2).astype(target)
    column = v.reshape(v.shape + (1,))
    # NaN sorts last: it is greater than every number and, on the right side, than itself
    if target.is_floating:
        a_nan, v_nan = a.isnan(), column.isnan()
        before = (a < column) | (~a_nan & v_nan) if side == "left" else (
            (a <= column) | ~a_nan & v_nan | (a_nan & v_nan))
    else:
        before = (a < column) if side == "left" else (a <= column)
    return before.sum(axis=-1).astype(dt.int32)


def sort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True
         ) -> Tensor:
    """`x` sorted along `axis` (stable; NaN sorts last ascending)."""
    if x.ndim == 0:
        raise ShapeError("sort: a 0-d tensor cannot be sorted", op="sort")
    values, _ = Tensor._apply_multi("sort", _sortable(x), axis=normalize_axis("sort", axis,
                                                                                x.ndim),
                                    descending=descending)
    return values.astype(x.dtype)


def argsort(x: Tensor, /, *, axis: int = -1, descending: bool = False, stable: bool = True
            ) -> Tensor:
    """Indices (int32) that sort `x` along `axis` (stable)."""
    if x.ndim == 0:
        raise ShapeError("argsort: a 0-d tensor cannot be sorted", op="argsort")
    _, indices = Tensor._apply_multi("sort", _sortable(x), axis=normalize_axis(
        "argsort", axis, x.ndim), descending=descending)
    return indices


def reshape(x: Tensor, /, shape: Sequence[int], *, copy: bool | None = None) -> Tensor:
    """`x` with a new `shape` (one -1 is inferred); the standard's signature of `reshape`."""
    return _reshape(x, tuple(shape), copy=copy)


def repeat(x: Tensor, repeats: int | Tensor, /, *, axis: int | None = None) -> Tensor:
    """Each element repeated `repeats` times along `axis` (per-element counts read `repeats`)."""
    if isinstance(repeats, int):
        return _repeat(x, repeats, axis)
    counts = as_tensor(repeats).numpy()
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = normalize_axis("repeat", axis, x.ndim)
    index = np.repeat(np.arange(x.shape[axis]), np.broadcast_to(counts, (x.shape[axis],)))
    return x[(slice(None),) * axis + (index.astype(np.int32),)]


def _sortable(x: Tensor) -> Tensor:
    return x.astype(dt.uint8) if x.dtype.is_bool else x


def cumulative_sum(x: Tensor, /, *, axis: int | None = None, dtype: Any = None,
                   include_initial: bool = False) -> Tensor:
    """Running sum along `axis` (`omnitensor.cumsum` with ``include_initial``)."""
    return cumsum(x, axis, dtype=dtype, include_initial=include_initial)


class UniqueAll(NamedTuple):
    """`unique_all`'s result."""

    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCounts(NamedTuple):
    """`unique_counts`'s result."""

    values: Tensor
    counts: Tensor


class UniqueInverse(NamedTuple):
    """`unique_inverse`'s result."""

    values: Tensor
    inverse_indices: Tensor


def _unique(x: Tensor) -> tuple[np.ndarray[Any, Any], ...]:
    """The `numpy.unique` results with every NaN distinct, as the standard asks (reads `x`)."""
    flat = x.numpy().reshape(-1)
    nan = np.isnan(flat) if x.dtype.is_floating else np.zeros(flat.shape, np.bool_)
    values, index, inverse, counts = np.unique(flat[~nan], return_index=True,
                                               return_inverse=True, return_counts=True)
    positions = np.nonzero(~nan)[0]
    nan_positions = np.nonzero(nan)[0]
    all_values = np.concatenate([values, flat[nan_positions]])
    all_index = np.concatenate([positions[index], nan_positions])
    full_inverse = np.empty(flat.shape, np.int64)
    full_inverse[positions] = inverse.reshape(-1)
    full_inverse[nan_positions] = len(values) + np.arange(len(nan_positions))
    all_counts = np.concatenate([counts, np.ones(len(nan_positions), np.int64)])
    return all_values, all_index, full_inverse.reshape(x.shape), all_counts


def _out(array: np.ndarray[Any, Any], dtype: DType) -> Tensor:
    return as_tensor(np.array(array, dtype=dtype.np))


def unique_values(x: Tensor, /) -> Tensor:
    """The distinct values of `x`, sorted (each NaN is distinct)."""
    return _out(_unique(x)[0], x.dtype)


def unique_counts(x: Tensor, /) -> UniqueCounts:
    """Distinct values and how often each occurs."""
    values, _, _, counts = _unique(x)
    return UniqueCounts(_out(values, x.dtype), _out(counts, dt.int32))


def unique_inverse(x: Tensor, /) -> UniqueInverse:
    """Distinct values and, per element of `x`, the index of its value."""
    values, _, inverse, _ = _unique(x)
    return UniqueInverse(_out(values, x.dtype), _out(inverse, dt.int32))


def unique_all(x: Tensor, /) -> UniqueAll:
    """Distinct values, first indices, inverse indices and counts."""
    values, index, inverse, counts = _unique(x)
    return UniqueAll(_out(values, x.dtype), _out(index, dt.int32), _out(inverse, dt.int32),
                     _out(counts, dt.int32))
