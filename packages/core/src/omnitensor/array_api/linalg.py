"""The Array API ``linalg`` extension.

Products, norms, traces and diagonals are lazy omnitensor ops. The decompositions and solvers
(`svd`, `eigh`, `qr`, `cholesky`, `inv`, `solve`, `det`, `slogdet`, `pinv`, `matrix_rank`) have
no PTIR op: they read their input and run LAPACK through numpy on the host, and their results
are tensors on the input's backend. They are meant for the small matrices array-consuming
libraries decompose (scikit-learn's PCA and LDA), not for work inside compiled programs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NamedTuple

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError, ShapeError
from ..tensor.linalg import matmul as matmul
from ..tensor.linalg import matrix_transpose as matrix_transpose
from ..tensor.linalg import outer as outer
from ..tensor.linalg import tensordot as tensordot
from ..tensor.linalg import vecdot as vecdot
from ..tensor.math import abs as _abs
from ..tensor.math import sqrt as _sqrt
from ..tensor.reduce import max as _max
from ..tensor.reduce import min as _min
from ..tensor.reduce import normalize_axis
from ..tensor.reduce import sum as _sum
from ..tensor.tensor import Tensor, as_tensor

__all__ = [
    "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
    "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve",
    "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
]


class EighResult(NamedTuple):
    """`eigh`'s result."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    """`qr`'s result."""

    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    """`slogdet`'s result."""

    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    """`svd`'s result."""

    U: Tensor
    S: Tensor
    Vh: Tensor


def _matrices(fn: str, x: Tensor) -> np.ndarray[Any, Any]:
    """The value of a stack of float matrices, read from the backend."""
    if not x.dtype.is_floating:
        raise DTypeError(f"linalg.{fn}: needs a floating tensor (got {x.dtype}); convert with "
                         "astype first", op=f"linalg.{fn}", dtype=str(x.dtype))
    if x.ndim < 2:
        raise ShapeError(f"linalg.{fn}: needs a stack of matrices (got shape {x.shape})",
                         op=f"linalg.{fn}")
    array = x.numpy()
    # NOTE: LAPACK has no float16/bfloat16 kernels; compute in float32 and convert back
    return array.astype(np.float32) if x.dtype.bits < 32 else array


def _back(array: Any, like: Tensor) -> Tensor:
    out = as_tensor(np.asarray(array).astype(like.dtype.np))
    return out if like.backend is None else out.to(like.backend)


def cholesky(x: Tensor, /, *, upper: bool = False) -> Tensor:
    """The Cholesky factor of symmetric positive-definite matrices (reads `x`)."""
    lower = np.linalg.cholesky(_matrices("cholesky", x))
    return _back(np.swapaxes(lower, -1, -2) if upper else lower, x)


def det(x: Tensor, /) -> Tensor:
    """Determinants of square matrices (reads `x`)."""
    return _back(np.linalg.det(_matrices("det", x)), x)


def eigh(x: Tensor, /) -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices (reads `x`)."""
    values, vectors = np.linalg.eigh(_matrices("eigh", x))
    return EighResult(_back(values, x), _back(vectors, x))


def eigvalsh(x: Tensor, /) -> Tensor:
    """Eigenvalues (ascending) of symmetric matrices (reads `x`)."""
    return _back(np.linalg.eigvalsh(_matrices("eigvalsh", x)), x)


def inv(x: Tensor, /) -> Tensor:
    """Inverses of square matrices (reads `x`)."""
    return _back(np.linalg.inv(_matrices("inv", x)), x)


def pinv(x: Tensor, /, *, rtol: float | Tensor | None = None) -> Tensor:
    """Moore-Penrose pseudo-inverses (reads `x`)."""
    array = _matrices("pinv", x)
    if rtol is None:
        rtol = max(array.shape[-2:]) * float(np.finfo(array.dtype).eps)
    cutoff = rtol.numpy() if isinstance(rtol, Tensor) else rtol
    return _back(np.linalg.pinv(array, rcond=cutoff), x)


def matrix_rank(x: Tensor, /, *, rtol: float | Tensor | None = None) -> Tensor:
    """Numbers of singular values above ``rtol * largest`` (reads `x`)."""
    array = _matrices("matrix_rank", x)
    s = np.linalg.svd(array, compute_uv=False)
    if rtol is None:
        rtol = max(array.shape[-2:]) * float(np.finfo(array.dtype).eps)
    tol = np.asarray(rtol.numpy() if isinstance(rtol, Tensor) else rtol)
    if s.shape[-1] == 0:
        return as_tensor(np.zeros(s.shape[:-1], np.int32))
    rank = (s > tol[..., None] * s.max(axis=-1, keepdims=True)).sum(axis=-1)
    return as_tensor(rank.astype(np.int32))


def qr(x: Tensor, /, *, mode: Literal["reduced", "complete"] = "reduced") -> QRResult:
    """Q R factorizations (reads `x`)."""
    q, r = np.linalg.qr(_matrices("qr", x), mode=mode)
    return QRResult(_back(q, x), _back(r, x))


def slogdet(x: Tensor, /) -> SlogdetResult:
    """Signs and logs of the absolute determinants (reads `x`)."""
    sign, logabs = np.linalg.slogdet(_matrices("slogdet", x))
    return SlogdetResult(_back(sign, x), _back(logabs, x))


def solve(x1: Tensor, x2: Tensor, /) -> Tensor:
    """The solutions ``x`` of ``x1 @ x = x2`` (reads both)."""
    target = dt.result_type(x1, x2)
    x1, x2 = x1.astype(target), as_tensor(x2).astype(target)
    a = _matrices("solve", x1)
    b = np.asarray(x2.numpy(), dtype=a.dtype)
    if b.ndim == 1:
        return _back(np.linalg.solve(a, b[..., None])[..., 0], x1)
    return _back(np.linalg.solve(a, b), x1)


def svd(x: Tensor, /, *, full_matrices: bool = True) -> SVDResult:
    """Singular value decompositions ``x = U @ diag(S) @ Vh`` (reads `x`)."""
    u, s, vh = np.linalg.svd(_matrices("svd", x), full_matrices=full_matrices)
    return SVDResult(_back(u, x), _back(s, x), _back(vh, x))


def svdvals(x: Tensor, /) -> Tensor:
    """Singular values, descending (reads `x`)."""
    return _back(np.linalg.svd(_matrices("svdvals", x), compute_uv=False), x)


def matrix_power(x: Tensor, n: int, /) -> Tensor:
    """``x @ x @ ... @ x`` (`n` times; the inverse's power for negative `n`)."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.matrix_power: needs square matrices (got {x.shape})",
                         op="linalg.matrix_power")
    base = inv(x) if n < 0 else x
    result: Tensor | None = None
    power = abs(n)
    while power:  # square-and-multiply: log2(n) products
        if power & 1:
            result = base if result is None else result @ base
        power >>= 1
        if power:
            base = base @ base
    if result is None:
        from ..tensor.creation import eye

        return eye(x.shape[-1], dtype=x.dtype).broadcast_to(x.shape)
    return result


def diagonal(x: Tensor, /, *, offset: int = 0) -> Tensor:
    """Diagonal `offset` of each matrix (the last two axes)."""
    if x.ndim < 2:
        raise ShapeError(f"linalg.diagonal: needs a stack of matrices (got {x.shape})",
                         op="linalg.diagonal")
    rows, cols = x.shape[-2:]
    start_row, start_col = max(-offset, 0), max(offset, 0)
    count = max(0, min(rows - start_row, cols - start_col))
    index = np.arange(count)
    return x[..., index + start_row, index + start_col]


def trace(x: Tensor, /, *, offset: int = 0, dtype: Any = None) -> Tensor:
    """Sum along diagonal `offset` of each matrix."""
    d = diagonal(x, offset=offset)
    return _sum(d, axis=-1, dtype=dtype)


def cross(x1: Tensor, x2: Tensor, /, *, axis: int = -1) -> Tensor:
    """Cross products of 3-vectors along `axis`."""
    from ..tensor.shape import broadcast_arrays, stack

    a, b = as_tensor(x1), as_tensor(x2)
    if not a.ndim or not b.ndim or a.shape[axis] != 3 or b.shape[axis] != 3:
        raise ShapeError(f"linalg.cross: axis {axis} must have size 3 (got {a.shape} and "
                         f"{b.shape})", op="linalg.cross")
    target = dt.result_type(a, b)
    a, b = broadcast_arrays(a.astype(target), b.astype(target))
    ax = normalize_axis("linalg.cross", axis, a.ndim)
    a0, a1, a2 = (a.narrow(ax, i, 1) for i in range(3))
    b0, b1, b2 = (b.narrow(ax, i, 1) for i in range(3))
    parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    return stack([p.squeeze(ax) for p in parts], axis=ax)


def vector_norm(x: Tensor, /, *, axis: int | Sequence[int] | None = None,
                keepdims: bool = False, ord: float = 2) -> Tensor:  # noqa: A002
    """The `ord`-norm of vectors along `axis` (all elements when None)."""
    t = x if x.dtype.is_floating else x.astype(dt.default_float)
    a = _abs(t)
    if ord == float("inf"):
        return _max(a, axis, keepdims)
    if ord == float("-inf"):
        return _min(a, axis, keepdims)
    if ord == 0:
        return _sum((a != 0).astype(t.dtype), axis, keepdims)
    if ord == 1:
        return _sum(a, axis, keepdims)
    if ord == 2:
        return _sqrt(_sum(a * a, axis, keepdims))
    return _sum(a ** ord, axis, keepdims) ** (1.0 / ord)


def matrix_norm(x: Tensor, /, *, keepdims: bool = False,
                ord: float | str = "fro") -> Tensor:  # noqa: A002
    """Norms of matrices: ``"fro"`` (lazy), ``"nuc"``, 1, 2, inf and their negatives."""
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims, ord=2)
    array = _matrices("matrix_norm", x)
    kind: Any = ord  # "nuc" or a number; numpy checks the value
    out = np.linalg.norm(array, ord=kind, axis=(-2, -1), keepdims=keepdims)
    return _back(out, x)
