"""Creating tensors: constants, ranges, identity and random values (all lazy until read)."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError, ShapeError
from .tensor import Scalar, Tensor, as_tensor

__all__ = [
    "arange", "empty", "empty_like", "eye", "full", "full_like", "key", "linspace",
    "manual_seed", "ones", "ones_like", "rand", "randn", "split_key", "tensor", "zeros",
    "zeros_like",
]

ShapeLike = int | Sequence[int]


def _shape(shape: ShapeLike | tuple[Any, ...]) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    out = tuple(int(d) for d in shape)
    if any(d < 0 for d in out):
        raise ShapeError(f"shape: dimensions must be non-negative (got {out})")
    return out


def _grad(t: Tensor, requires_grad: bool) -> Tensor:
    """`t`, marked as a leaf requiring grad when asked (PyTorch's ``requires_grad=``)."""
    if requires_grad:
        t = t.detach() if t.requires_grad else t
        t.requires_grad = True
    return t


def tensor(data: Any, dtype: Any = None, *, requires_grad: bool = False) -> Tensor:
    """A tensor holding a copy of `data` (nested lists, scalars, arrays or tensors).

    Python floats default to float32 and ints to int32 (DESIGN §3); numpy arrays keep their dtype.

    Args:
        data: the values.
        dtype: convert to this dtype.
        requires_grad: make it a leaf that records operations for `backward`.
    """
    if isinstance(data, Tensor):
        out = data if dtype is None else data.astype(dtype)
        return _grad(out.detach() if requires_grad else out, requires_grad)
    if isinstance(data, np.ndarray):
        data = data.copy()
    return _grad(as_tensor(data, None if dtype is None else dt.as_dtype(dtype), fn="tensor",
                           arg="data"), requires_grad)


def full(shape: ShapeLike, value: Scalar, dtype: Any = None, *,
         requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` filled with `value`.

    It is a broadcast constant: nothing is allocated until it is realized.
    """
    return _grad(_full(shape, value, dtype), requires_grad)


def _full(shape: ShapeLike, value: Scalar, dtype: Any = None) -> Tensor:
    target = dt.as_dtype(dtype) if dtype is not None else dt.result_type(value)
    scalar = Tensor._apply("constant", value=np.asarray(value).astype(target.np))
    dims = _shape(shape)
    if not dims:
        return scalar
    return Tensor._apply("broadcast_in_dim", scalar, shape=dims, dims=())


def zeros(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Zeros of `shape` (float32 unless `dtype`); ``zeros(2, 3)`` or ``zeros((2, 3))``."""
    return full(_shape(shape), 0, dtype or dt.default_float, requires_grad=requires_grad)


def ones(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Ones of `shape` (float32 unless `dtype`)."""
    return full(_shape(shape), 1, dtype or dt.default_float, requires_grad=requires_grad)


def empty(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of `shape` whose values the caller will overwrite (zeros here, lazily)."""
    return zeros(*shape, dtype=dtype, requires_grad=requires_grad)


def full_like(x: Tensor, value: Scalar, dtype: Any = None, *,
              requires_grad: bool = False) -> Tensor:
    """`full` with the shape (and dtype, unless given) of `x`."""
    return full(x.shape, value, dtype or x.dtype, requires_grad=requires_grad)


def zeros_like(x: Tensor, dtype: Any = None, *, requires_grad: bool = False) -> Tensor:
    """Zeros shaped like `x`."""
    return full_like(x, 0, dtype, requires_grad=requires_grad)


def ones_like(x: Tensor, dtype: Any = None, *, requires_grad: bool = False) -> Tensor:
    """Ones shaped like `x`."""
    return full_like(x, 1, dtype, requires_grad=requires_grad)


def empty_like(x: Tensor, dtype: Any = None, *, requires_grad: bool = False) -> Tensor:
    """`empty` shaped like `x`."""
    return full_like(x, 0, dtype, requires_grad=requires_grad)


def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1,
           dtype: Any = None, *, requires_grad: bool = False) -> Tensor:
    """Values ``start, start+step, ...`` below `stop`, as `numpy.arange` (int32/float32 default)."""
    return _grad(_arange(start, stop, step, dtype), requires_grad)


def _arange(start: Scalar, stop: Scalar | None, step: Scalar, dtype: Any) -> Tensor:
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero")
    target = dt.as_dtype(dtype) if dtype is not None else dt.result_type(start, stop, step)
    count = max(0, math.ceil((float(stop) - float(start)) / float(step)))
    index = Tensor._apply("iota", shape=(count,), dimension=0,
                          dtype=target if not target.is_bool else dt.int32)
    if start == 0 and step == 1:
        return index
    return index * step + start if target.is_floating else (index * int(step) + int(start))


def linspace(start: float, stop: float, num: int = 50, dtype: Any = None, *,
             endpoint: bool = True, requires_grad: bool = False) -> Tensor:
    """`num` evenly spaced values from `start` to `stop` (inclusive unless not `endpoint`)."""
    return _grad(_linspace(start, stop, num, dtype, endpoint), requires_grad)


def _linspace(start: float, stop: float, num: int, dtype: Any, endpoint: bool) -> Tensor:
    target = dt.as_dtype(dtype) if dtype is not None else dt.default_float
    if num < 0:
        raise ShapeError(f"linspace: num must be non-negative (got {num})")
    if num == 1:
        return full((1,), start, target)
    index = Tensor._apply("iota", shape=(num,), dimension=0, dtype=dt.float64
                          if target == dt.float64 else dt.float32)
    step = (stop - start) / (max(num - 1, 1) if endpoint else max(num, 1))
    values = index * step + start
    if not endpoint:
        return values.astype(target)
    # NOTE: rounding can miss `stop` by an ulp; the last value is `stop` exactly, as in numpy
    from .math import where

    return where(index == num - 1, stop, values).astype(target)


def eye(n: int, m: int | None = None, k: int = 0, dtype: Any = None, *,
        requires_grad: bool = False) -> Tensor:
    """Identity-like matrix with ones on diagonal `k`."""
    return _grad(_eye(n, m, k, dtype), requires_grad)


def _eye(n: int, m: int | None, k: int, dtype: Any) -> Tensor:
    cols = n if m is None else m
    k = max(-n, min(int(k), cols))  # diagonals beyond the matrix are all zero alike
    rows_i = Tensor._apply("iota", shape=(n, cols), dimension=0, dtype=dt.int32)
    cols_i = Tensor._apply("iota", shape=(n, cols), dimension=1, dtype=dt.int32)
    return ((rows_i + k) == cols_i).astype(dtype or dt.default_float)


# --- randomness ---------------------------------------------------------------------------------

_seed_lock = threading.Lock()
_global = {"seed": 0, "counter": 0}


def manual_seed(seed: int) -> None:
    """Seed the default key sequence used by `rand`/`randn` calls without `seed` or `key`."""
    with _seed_lock:
        _global["seed"], _global["counter"] = int(seed), 0


def key(seed: int) -> Tensor:
    """A uint32[2] RNG key made from an integer seed.

    The generator is counter-based: the same seed gives the same bits on every backend.
    """
    seed = int(seed) & 0xFFFF_FFFF_FFFF_FFFF
    words = np.array([seed & 0xFFFF_FFFF, seed >> 32], dtype=np.uint32)
    return Tensor._apply("constant", value=words)


def split_key(k: Tensor, num: int = 2) -> list[Tensor]:
    """`num` new independent keys derived from `k` (rng ``bits`` on streams 1..num)."""
    return [Tensor._apply("rng", k, shape=(2,), dtype=dt.uint32, distribution="bits",
                          stream=i + 1) for i in range(num)]


def _next_key() -> Tensor:
    with _seed_lock:
        seed, counter = _global["seed"], _global["counter"]
        _global["counter"] += 1
    return split_key(key(seed), counter + 1)[counter]


def _random(distribution: str, shape: tuple[int, ...], seed: int | None, key_: Tensor | None,
            dtype: Any) -> Tensor:
    target = dt.as_dtype(dtype) if dtype is not None else dt.default_float
    if not target.is_floating:
        raise DTypeError(f"rand: dtype must be floating (got {target})")
    if key_ is None:
        key_ = key(seed) if seed is not None else _next_key()
    return Tensor._apply("rng", key_, shape=shape, dtype=target, distribution=distribution,
                         stream=0)


def rand(*shape: Any, seed: int | None = None, key: Tensor | None = None,
         dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Uniform values in [0, 1) from a counter-based generator (`seed` or `key`)."""
    return _grad(_random("uniform", _shape(shape), seed, key, dtype), requires_grad)


def randn(*shape: Any, seed: int | None = None, key: Tensor | None = None,
          dtype: DType | str | None = None, requires_grad: bool = False) -> Tensor:
    """Standard normal values from a counter-based generator (`seed` or `key`)."""
    return _grad(_random("normal", _shape(shape), seed, key, dtype), requires_grad)
