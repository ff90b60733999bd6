"""Gradient rules of the remaining ops: constants (no operands) and `custom_call`.

`custom_call` is differentiated through its portable decomposition: the decomposition is replayed
with Tensor ops on fresh leaves and the ordinary rules run on that replay, so a fused kernel
never needs a hand-written gradient.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...ir.program import Function
from . import vjp

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


@vjp("constant")
def _constant(g: Tensor, out: Tensor, *, value: Any) -> tuple[()]:
    return ()


@vjp("custom_call")
def _custom_call(g: tuple[Tensor | None, ...], out: tuple[Tensor, ...], *operands: Tensor,
                 name: str, decomposition: Function) -> tuple[Tensor | None, ...]:
    from .replay import backward_through

    return backward_through(decomposition, operands, g)
