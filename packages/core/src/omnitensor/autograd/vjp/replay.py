"""Replay a PTIR `Function` with Tensor operations (so that autograd records it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...ir.program import Function

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


def replay(function: Function, args: Sequence[Tensor]) -> list[Tensor]:
    """The outputs of `function` applied to `args`, recorded op by op through `Tensor._apply`."""
    from ...tensor.tensor import Tensor

    env: dict[int, Tensor] = {
        id(v): a for v, a in zip(function.input_values, args, strict=True)
    }
    for inst in function.instructions():
        operands = [env[id(v)] for v in inst.operands]
        if len(inst.results) == 1:
            env[id(inst.results[0])] = Tensor._apply(inst.op, *operands, **inst.attrs)
        else:
            outs = Tensor._apply_multi(inst.op, *operands, **inst.attrs)
            for value, t in zip(inst.results, outs, strict=True):
                env[id(value)] = t
    return [env[id(v)] for v in function.outputs]
