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
    from ..engine import run_backward
    from ..mode import set_grad_enabled
    from .replay import replay

    leaves = []
    for x in operands:
        leaf = x.detach()
        if x.dtype.is_floating:
            leaf.requires_grad = True
        leaves.append(leaf)
    with set_grad_enabled(True):
        results = replay(decomposition, leaves)
    roots = [(r, gi) for r, gi in zip(results, g, strict=True)
             if gi is not None and r.requires_grad]
    if not roots:
        return (None,) * len(operands)
    found = run_backward([r for r, _ in roots], [gi for _, gi in roots])
    grads: list[Tensor | None] = []
    for leaf in leaves:
        hit = found.get(id(leaf._grad_fn)) if leaf._grad_fn is not None else None
        grads.append(None if hit is None else hit[1])
    return tuple(grads)
