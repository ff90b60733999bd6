"""Linear algebra on tensors: matmul, einsum, tensordot, vecdot, outer, matrix_transpose.

Every product lowers to one `dot_general` per pair of operands (einsum contracts left to
right), after NumPy's broadcasting and omnitensor's dtype promotion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import dtypes as dt
from ..errors import DTypeError, ShapeError, UnsupportedError
from .math import broadcast_shapes, broadcast_to
from .reduce import normalize_axis

if TYPE_CHECKING:
    from .tensor import Tensor, TensorLike

__all__ = ["einsum", "matmul", "matrix_transpose", "outer", "tensordot", "vecdot"]


def _pair(op: str, a: TensorLike, b: TensorLike) -> tuple[Tensor, Tensor]:
    from .tensor import as_tensor

    x1, x2 = as_tensor(a, fn=op, arg="x1"), as_tensor(b, fn=op, arg="x2")
    target = dt.result_type(x1, x2)
    if target.is_bool:
        raise DTypeError(f"{op}: bool operands are not supported (got {x1.dtype} and "
                         f"{x2.dtype}); convert with astype first", op=op, dtype="bool")
    return x1.astype(target), x2.astype(target)


def matmul(x1: TensorLike, x2: TensorLike) -> Tensor:
    """Matrix product with NumPy's rules for 1-D operands and broadcast batch dims.

    Operands of different dtypes are promoted (`omnitensor.dtypes.promote`).
    """
    from .tensor import Tensor

    a, b = _pair("matmul", x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: operands must have at least one dimension "
                         f"(got {a.shape} and {b.shape})", op="matmul")
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


def matrix_transpose(x: Tensor) -> Tensor:
    """Swap the last two axes (``x.mT``)."""
    if x.ndim < 2:
        raise ShapeError(f"matrix_transpose: needs at least 2 dimensions (got {x.shape})",
                         op="matrix_transpose")
    return x.swapaxes(-1, -2)


def tensordot(x1: TensorLike, x2: TensorLike,
              axes: int | tuple[Sequence[int], Sequence[int]] = 2) -> Tensor:
    """Sum products over `axes` (the last n of x1 with the first n of x2, or two axis lists)."""
    from .tensor import Tensor

    a, b = _pair("tensordot", x1, x2)
    if isinstance(axes, int):
        if axes < 0:
            raise ShapeError(f"tensordot: axes must be non-negative (got {axes})",
                             op="tensordot")
        ca, cb = tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    else:
        ca = tuple(normalize_axis("tensordot", i, a.ndim) for i in axes[0])
        cb = tuple(normalize_axis("tensordot", i, b.ndim) for i in axes[1])
    for i, j in zip(ca, cb, strict=True):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"tensordot: axis {i} of {a.shape} does not match axis {j} of "
                             f"{b.shape}", op="tensordot")
    return Tensor._apply("dot_general", a, b, contracting=(ca, cb), batch=((), ()))


def vecdot(x1: TensorLike, x2: TensorLike, axis: int = -1) -> Tensor:
    """Dot product of vectors along `axis`, broadcasting the other axes."""
    a, b = _pair("vecdot", x1, x2)
    shape = broadcast_shapes("vecdot", a.shape, b.shape)
    if not shape:
        raise ShapeError("vecdot: operands must have at least one dimension", op="vecdot")
    ax = normalize_axis("vecdot", axis, len(shape))
    if a.shape[ax - len(shape) + a.ndim] != b.shape[ax - len(shape) + b.ndim]:
        raise ShapeError(f"vecdot: axis {axis} differs in size ({a.shape} and {b.shape})",
                         op="vecdot")
    return (broadcast_to(a, shape) * broadcast_to(b, shape)).sum(axis=ax, dtype=a.dtype)


def outer(x1: TensorLike, x2: TensorLike) -> Tensor:
    """Outer product of two vectors: (n,) and (m,) give (n, m)."""
    a, b = _pair("outer", x1, x2)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"outer: needs two vectors (got {a.shape} and {b.shape})", op="outer")
    return a.reshape(-1, 1) * b.reshape(1, -1)


# --- einsum ----------------------------------------------------------------------------------


def _parse(subscripts: str, ndims: list[int]) -> tuple[list[str], str]:
    """Input label strings (ellipses expanded to private labels) and the output labels."""
    spec = subscripts.replace(" ", "")
    lhs, arrow, rhs = spec.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ndims):
        raise ShapeError(f"einsum: {len(inputs)} operand specs for {len(ndims)} operands",
                         op="einsum")
    ell_rank = 0
    parsed = []
    for spec_i, ndim in zip(inputs, ndims, strict=True):
        explicit = spec_i.replace("...", "")
        if not all(c.isalpha() for c in explicit):
            raise ShapeError(f"einsum: invalid subscripts {subscripts!r}", op="einsum")
        if "..." in spec_i:
            n = ndim - len(explicit)
            if n < 0:
                raise ShapeError(f"einsum: {spec_i!r} has more labels than dimensions "
                                 f"({ndim})", op="einsum")
            ell_rank = max(ell_rank, n)
            # ellipsis dims are right-aligned across operands, as in broadcasting
            spec_i = spec_i.replace("...", "".join(chr(0x3B1 + ell_rank - n + k)
                                                   for k in range(n)))
        elif len(spec_i) != ndim:
            raise ShapeError(f"einsum: {spec_i!r} labels {len(spec_i)} dimensions of an operand "
                             f"with {ndim}", op="einsum")
        parsed.append(spec_i)
    ellipsis = "".join(chr(0x3B1 + k) for k in range(ell_rank))
    if arrow:
        out = rhs.replace("...", ellipsis)
    else:
        counts: dict[str, int] = {}
        for s in inputs:
            for c in s.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        out = ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1))
    if len(set(out)) != len(out) or any(c not in "".join(parsed) for c in out):
        raise ShapeError(f"einsum: invalid output subscripts in {subscripts!r}", op="einsum")
    return parsed, out


def _diagonal(x: Tensor, labels: str) -> tuple[Tensor, str]:
    """Take diagonals for labels repeated within one operand (``ii->i``)."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i, j = labels.index(c), labels.index(c, labels.index(c) + 1)
        n = x.shape[i]
        if x.shape[j] != n:
            raise ShapeError(f"einsum: label {c!r} repeats over sizes {x.shape[i]} and "
                             f"{x.shape[j]}", op="einsum")
        rest = [k for k in range(x.ndim) if k not in (i, j)]
        moved = x.permute_dims(rest + [i, j]).reshape(tuple(x.shape[k] for k in rest) + (n * n,))
        # every (n+1)-th element of the flattened square is its diagonal
        x = moved[..., :: n + 1] if n else moved
        labels = "".join(labels[k] for k in rest) + c
    return x, labels


def _sum_out(x: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    drop = tuple(i for i, c in enumerate(labels) if c not in keep)
    if drop:
        x = x.sum(axis=drop)
        labels = "".join(c for c in labels if c in keep)
    return x, labels


def einsum(subscripts: str, *operands: TensorLike) -> Tensor:
    """Einstein summation, as `numpy.einsum` (explicit ``->`` or implicit output, ``...``).

    Pairs are contracted left to right, each with one `dot_general`; labels that appear in a
    single operand and not in the output are summed first; repeated labels in one operand take
    its diagonal.
    """
    from .tensor import Tensor, as_tensor

    if not operands:
        raise ShapeError("einsum: needs at least one operand", op="einsum")
    xs = [as_tensor(x, fn="einsum", arg=f"operands[{i}]") for i, x in enumerate(operands)]
    target = dt.result_type(*xs)
    if target.is_bool:
        raise UnsupportedError("einsum: bool operands are not supported; convert first",
                               op="einsum")
    xs = [x.astype(target) for x in xs]
    specs, out = _parse(subscripts, [x.ndim for x in xs])
    items = [_diagonal(x, s) for x, s in zip(xs, specs, strict=True)]
    sizes: dict[str, int] = {}
    for x, s in items:
        for c, d in zip(s, x.shape, strict=True):
            if sizes.get(c, 1) not in (1, d) and d != 1:
                raise ShapeError(f"einsum: label {c!r} has sizes {sizes[c]} and {d}",
                                 op="einsum")
            sizes[c] = d if sizes.get(c, 1) == 1 else sizes[c]

    def needed(rest: list[tuple[Tensor, str]]) -> set[str]:
        return set(out).union(*(set(s) for _, s in rest))

    acc, acc_labels = _sum_out(*items[0], needed(items[1:]))
    for k in range(1, len(items)):
        keep = needed(items[k + 1:])
        x, labels = items[k]
        acc, acc_labels = _sum_out(acc, acc_labels, keep | set(labels))
        x, labels = _sum_out(x, labels, keep | set(acc_labels))
        # shared labels of size 1 on one side broadcast to the other's size
        acc = broadcast_to(acc, tuple(sizes[c] if c in labels else d
                                      for c, d in zip(acc_labels, acc.shape, strict=True)))
        x = broadcast_to(x, tuple(sizes[c] if c in acc_labels else d
                                  for c, d in zip(labels, x.shape, strict=True)))
        shared = [c for c in acc_labels if c in labels]
        batch = [c for c in shared if c in keep]
        contract = [c for c in shared if c not in keep]
        acc = Tensor._apply(
            "dot_general", acc, x,
            contracting=(tuple(acc_labels.index(c) for c in contract),
                         tuple(labels.index(c) for c in contract)),
            batch=(tuple(acc_labels.index(c) for c in batch),
                   tuple(labels.index(c) for c in batch)))
        acc_labels = ("".join(batch) + "".join(c for c in acc_labels if c not in shared)
                      + "".join(c for c in labels if c not in shared))
    acc, acc_labels = _sum_out(acc, acc_labels, set(out))
    acc = broadcast_to(acc, tuple(sizes[c] for c in acc_labels))
    return acc.permute_dims([acc_labels.index(c) for c in out]) if out else acc
