"""Linear algebra ops: `dot_general`, StableHLO's general contraction (matmul, bmm, einsum-like).

Only dense operands live here; the quantized matrix product `qmatmul` is in `ops.quant`, and
composite products (attention, conv) are functionals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...dtypes import NUMERIC, accumulator, as_dtype
from ...errors import DTypeError, OmnitensorError, ShapeError
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..types import TensorType

__all__ = ["DotGeneralView", "dimension_numbers", "match_dot_general"]

Array = np.ndarray[Any, Any]
DimPair = tuple[tuple[int, ...], tuple[int, ...]]


def _pair(op: str, what: str, value: Any) -> DimPair:
    """An attribute ``(lhs_dims, rhs_dims)`` as two tuples of ints of equal length."""
    ok = (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(
            isinstance(side, (tuple, list))
            and all(isinstance(d, int) and not isinstance(d, bool) for d in side)
            for side in value
        )
    )
    if not ok:
        raise OmnitensorError(
            f"{op}: attribute {what!r} must be a pair of tuples of ints (got {value!r}, expected "
            f"((lhs dims...), (rhs dims...)))",
            op=op,
        )
    lhs, rhs = (tuple(int(d) for d in side) for side in value)
    if len(lhs) != len(rhs):
        raise ShapeError(
            f"{op}: {what} dims pair up one to one (got {len(lhs)} lhs and {len(rhs)} rhs dims "
            f"in {value!r})",
            op=op,
        )
    return lhs, rhs


def _normalize(op: str, side: str, ndim: int, dims: Sequence[int]) -> tuple[int, ...]:
    out = []
    for d in dims:
        if not -ndim <= d < ndim:
            raise ShapeError(
                f"{op}: {side} dimension {d} is out of range (got rank {ndim}, expected a "
                f"dimension in [{-ndim}, {ndim}))",
                op=op,
            )
        out.append(d % ndim)
    return tuple(out)


def dimension_numbers(
    lhs_shape: tuple[int, ...],
    rhs_shape: tuple[int, ...],
    contracting: Any,
    batch: Any,
    op: str = "dot_general",
) -> tuple[DimPair, DimPair]:
    """Checked, non-negative ``(contracting, batch)`` dimension numbers for two shapes.

    Args:
        lhs_shape: shape of the left operand.
        rhs_shape: shape of the right operand.
        contracting: ``((lhs dims), (rhs dims))`` summed over.
        batch: ``((lhs dims), (rhs dims))`` carried through, first in the result.
        op: the op name for messages.

    Raises:
        ShapeError: for out-of-range or repeated dimensions, or paired dimensions whose sizes
            differ.
        OmnitensorError: for attributes that are not pairs of int tuples.
    """
    lc, rc = _pair(op, "contracting", contracting)
    lb, rb = _pair(op, "batch", batch)
    lc, lb = _normalize(op, "lhs", len(lhs_shape), lc), _normalize(op, "lhs", len(lhs_shape), lb)
    rc, rb = _normalize(op, "rhs", len(rhs_shape), rc), _normalize(op, "rhs", len(rhs_shape), rb)
    for side, dims in (("lhs", lb + lc), ("rhs", rb + rc)):
        if len(set(dims)) != len(dims):
            raise ShapeError(
                f"{op}: {side} dimension used twice in batch/contracting (got batch "
                f"{batch!r}, contracting {contracting!r})",
                op=op,
            )
    for kind, ldims, rdims in (("contracting", lc, rc), ("batch", lb, rb)):
        for ld, rd in zip(ldims, rdims, strict=True):
            if lhs_shape[ld] != rhs_shape[rd]:
                raise ShapeError(
                    f"{op}: {kind} dimension sizes differ (got lhs dim {ld} of size "
                    f"{lhs_shape[ld]} in {lhs_shape} and rhs dim {rd} of size {rhs_shape[rd]} in "
                    f"{rhs_shape}, expected equal sizes)",
                    op=op,
                    shapes=[lhs_shape, rhs_shape],
                )
    return (lc, rc), (lb, rb)


def _free(ndim: int, *used: tuple[int, ...]) -> tuple[int, ...]:
    taken = {d for dims in used for d in dims}
    return tuple(d for d in range(ndim) if d not in taken)


@primitive("dot_general", traits=Trait.LINALG, dtypes=NUMERIC)
class DotGeneralView(OpView):
    """General tensor contraction with StableHLO's dimension numbers.

    ``out[b..., i..., j...] = sum_k lhs[b..., i..., k...] * rhs[b..., k..., j...]`` where the
    batch dims `b` are ``batch``, the summed dims `k` are ``contracting``, and `i`/`j` are the
    remaining (free) dims of lhs and rhs in their original order. The result's dims are the batch
    dims (in ``batch`` order), then lhs's free dims, then rhs's free dims. Dimension numbers
    may be negative (counted from the end). Both operands have one dtype, which the result keeps.

    Numerics: float16/bfloat16 products accumulate in float32 and are rounded once; float32 and
    float64 accumulate in their own dtype; the summation order is unspecified (backends may use
    blocked or pairwise sums, checked with a K-scaled tolerance). NaN propagates and
    ``0 * inf = NaN``. Integers wrap (the exact sum modulo 2**bits). A contraction over size-0
    dims gives zeros.
    """

    lhs = operand()
    rhs = operand()
    contracting: DimPair = attribute()
    batch: DimPair = attribute(((), ()))

    @staticmethod
    def infer(
        lhs: TensorType, rhs: TensorType, *, contracting: DimPair, batch: DimPair
    ) -> TensorType:
        """The shape/dtype rule (see the class docstring)."""
        if lhs.dtype != rhs.dtype:
            raise DTypeError(
                f"dot_general: operand dtypes differ (got {lhs.dtype} and {rhs.dtype}, expected "
                f"equal dtypes; insert a convert)",
                op="dot_general",
                dtype=rhs.dtype.name,
            )
        (lc, rc), (lb, rb) = dimension_numbers(lhs.shape, rhs.shape, contracting, batch)
        shape = (
            tuple(lhs.shape[d] for d in lb)
            + tuple(lhs.shape[d] for d in _free(lhs.ndim, lb, lc))
            + tuple(rhs.shape[d] for d in _free(rhs.ndim, rb, rc))
        )
        return TensorType(shape, lhs.dtype)

    @staticmethod
    def reference(lhs: Array, rhs: Array, *, contracting: DimPair, batch: DimPair) -> Array:
        """The numpy reference kernel."""
        (lc, rc), (lb, rb) = dimension_numbers(lhs.shape, rhs.shape, contracting, batch)
        lf, rf = _free(lhs.ndim, lb, lc), _free(rhs.ndim, rb, rc)
        batch_shape = tuple(lhs.shape[d] for d in lb)
        lhs_free = tuple(lhs.shape[d] for d in lf)
        rhs_free = tuple(rhs.shape[d] for d in rf)
        b, m, n = math.prod(batch_shape), math.prod(lhs_free), math.prod(rhs_free)
        k = math.prod(lhs.shape[d] for d in lc)
        dtype = lhs.dtype
        # Integers are multiplied in 64 bits and wrapped once at the end: modular arithmetic
        # makes that equal to wrapping at every step, without numpy overflow surprises.
        if dtype.kind == "u":
            work: np.dtype[Any] = np.dtype(np.uint64)
        elif dtype.kind == "i":
            work = np.dtype(np.int64)
        else:
            work = accumulator(as_dtype(dtype)).np
        a = np.transpose(lhs, lb + lf + lc).astype(work).reshape(b, m, k)  # (B, M, K)
        c = np.transpose(rhs, rb + rc + rf).astype(work).reshape(b, k, n)  # (B, K, N)
        out = np.matmul(a, c)  # (B, M, N)
        result: Array = out.reshape(batch_shape + lhs_free + rhs_free).astype(dtype)
        return result


match_dot_general = DotGeneralView.match
