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


def backward_through(function: Function, operands: Sequence[Tensor],
                     cotangents: Sequence[Tensor | None]) -> tuple[Tensor | None, ...]:
    """Cotangents of `operands` from those of `function`'s outputs, through its replay.

    The replay runs on variables (`Input` nodes) linked to the operands, so when the walk that
    calls this records (``create_graph``, i.e. grad mode is on here) the cotangents stay
    functions of the operands and of `cotangents`: second derivatives go through the
    decomposition too.
    """
    from ...tensor.tensor import Tensor
    from ..engine import Input, run_backward
    from ..mode import is_grad_enabled, set_grad_enabled

    create_graph = is_grad_enabled()
    variables: list[Tensor | None] = []
    for x in operands:
        if not x.dtype.is_floating:
            variables.append(None)
            continue
        variable = Tensor(x._node, x._index)
        variable._grad_fn = Input(x if create_graph else x.detach())
        variables.append(variable)
    args = [x if v is None else v for x, v in zip(operands, variables, strict=True)]
    with set_grad_enabled(True):
        results = replay(function, args)
    roots = [(r, g) for r, g in zip(results, cotangents, strict=True)
             if g is not None and r.requires_grad]
    if not roots:
        return (None,) * len(operands)
    owned = {id(v._grad_fn) for v in variables if v is not None}
    found = run_backward([r for r, _ in roots], [g for _, g in roots], create_graph=create_graph,
                         stop=lambda node: id(node) in owned)
    grads: list[Tensor | None] = []
    for v in variables:
        hit = found.get(id(v._grad_fn)) if v is not None else None
        grads.append(None if hit is None else hit[1])
    return tuple(grads)

