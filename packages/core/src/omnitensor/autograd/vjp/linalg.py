"""Gradient rules of `dot_general` and the quantized matrix product."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...ir.ops.linalg import dimension_numbers
from . import vjp
from ._util import op

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor

DimPair = tuple[tuple[int, ...], tuple[int, ...]]


def _free(ndim: int, *used: tuple[int, ...]) -> tuple[int, ...]:
    taken = {d for dims in used for d in dims}
    return tuple(d for d in range(ndim) if d not in taken)


def _side(g: Tensor, other: Tensor, *, n_batch: int, g_other_free: tuple[int, ...],
          other_free: tuple[int, ...], other_batch: tuple[int, ...],
          other_contract: tuple[int, ...], mine_batch: tuple[int, ...],
          mine_free: tuple[int, ...], mine_contract: tuple[int, ...], ndim: int) -> Tensor:
    """Cotangent of one operand: contract g with the other operand over the other's free dims.

    The product's dims come out as (batch, my free dims, my contracting dims in the order of
    the other's contracting dims sorted); a transpose puts them back in my order.
    """
    res = op("dot_general", g, other, contracting=(g_other_free, other_free),
             batch=(tuple(range(n_batch)), other_batch))
    pairs = sorted(range(len(other_contract)), key=lambda j: other_contract[j])
    produced = list(mine_batch) + list(mine_free) + [mine_contract[j] for j in pairs]
    perm = tuple(produced.index(d) for d in range(ndim))
    return res if perm == tuple(range(ndim)) else op("transpose", res, perm=perm)


@vjp("dot_general")
def _dot_general(g: Tensor, out: Tensor, lhs: Tensor, rhs: Tensor, *, contracting: DimPair,
                 batch: DimPair) -> tuple[Tensor, Tensor]:
    (lc, rc), (lb, rb) = dimension_numbers(lhs.shape, rhs.shape, contracting, batch)
    lf, rf = _free(lhs.ndim, lb, lc), _free(rhs.ndim, rb, rc)
    nb = len(lb)
    g_lf = tuple(range(nb, nb + len(lf)))
    g_rf = tuple(range(nb + len(lf), nb + len(lf) + len(rf)))
    glhs = _side(g, rhs, n_batch=nb, g_other_free=g_rf, other_free=rf, other_batch=rb,
                 other_contract=rc, mine_batch=lb, mine_free=lf, mine_contract=lc,
                 ndim=lhs.ndim)
    grhs = _side(g, lhs, n_batch=nb, g_other_free=g_lf, other_free=lf, other_batch=lb,
                 other_contract=lc, mine_batch=rb, mine_free=rf, mine_contract=rc,
                 ndim=rhs.ndim)
    return glhs, grhs


@vjp("qmatmul")
def _qmatmul(g: Tensor, out: Tensor, x: Tensor, w: Any, *, format: str) -> tuple[Tensor, None]:
    # out = x @ dequantize(w).T, so dx = g @ dequantize(w); quantized weights get no gradient.
    dense = op("dequantize", w, format=format, dtype=g.dtype)
    return op("dot_general", g, dense, contracting=((g.ndim - 1,), (0,))), None
