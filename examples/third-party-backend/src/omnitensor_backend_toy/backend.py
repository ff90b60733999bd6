"""`ToyBackend`: straight-line add, mul, exp and the silu composite on float32 with numpy.

Everything it runs is in one lowering table (`LOWERINGS`): its capabilities and `supports` are
derived from the table, and `compile` looks each instruction's kernel up in it. The ``silu``
entry is the route a third party takes to fuse a composite: the functional ``F.silu`` records
one ``silu`` instruction, this backend lowers it to one kernel, and any composite without an
entry here (softmax, layer_norm ...) is expanded into primitives by the optimizer before the
backend sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from omnitensor.backend import Backend, Capabilities, Executable
from omnitensor.backend.lowering import LoweringTable
from omnitensor.dtypes import float32
from omnitensor.ir import Function, Instruction
from omnitensor.ir.opdef import OpView

Array = np.ndarray[Any, Any]
Kernel = Callable[..., Array]

#: op or composite name -> ``(ctx, view) -> kernel`` (the toy needs no lowering context).
LOWERINGS: Final = LoweringTable()


@LOWERINGS.register("add", dtypes=(float32,))
def _add(ctx: None, view: OpView) -> Kernel:
    return np.add


@LOWERINGS.register("mul", dtypes=(float32,))
def _mul(ctx: None, view: OpView) -> Kernel:
    return np.multiply


@LOWERINGS.register("exp", dtypes=(float32,))
def _exp(ctx: None, view: OpView) -> Kernel:
    return np.exp


def _silu_kernel(x: Array) -> Array:
    # one pass instead of the decomposition's two ops; -inf gives NaN (-inf * 0) as there
    return np.asarray(x * (np.float32(1) / (np.float32(1) + np.exp(-x))), dtype=np.float32)


@LOWERINGS.register("silu", dtypes=(float32,))
def _silu(ctx: None, view: OpView) -> Kernel:
    return _silu_kernel


class ToyExecutable(Executable):
    """The function, as a list of (kernel, operand ids, result id) steps."""

    def __init__(self, function: Function) -> None:
        self.function = function
        self.steps = [
            (LOWERINGS.lookup(inst)(None, _view(inst)), [v.id for v in inst.operands],
             inst.result.id)
            for inst in function.body
        ]


def _view(inst: Instruction) -> OpView:
    from omnitensor.ir import get_op

    return get_op(inst.op).view(inst)


class ToyBackend(Backend):
    """Three ops and one composite, one dtype, honestly declared (through its lowering table)."""

    name = "toy"

    def capabilities(self) -> Capabilities:
        """The lowering table's ops in float32; dense buffers (no strided views)."""
        return Capabilities(ops=LOWERINGS.capabilities())

    def supports(self, inst: Instruction) -> str | None:
        """The lowering table's answer, naming this backend."""
        reason = LOWERINGS.supports(inst)
        return None if reason is None else f"{reason} in backend {self.name!r}"

    def upload(self, array: Array) -> Array:
        """A contiguous copy, of the same shape (0-d stays 0-d)."""
        return np.array(array, copy=True, order="C")

    def download(self, buffer: Any) -> Array:
        """A copy the caller owns."""
        return np.array(buffer, copy=True)

    def compile(self, function: Function) -> ToyExecutable:
        """Check every instruction (UnsupportedError otherwise) and plan the kernel calls."""
        self.check(function)
        return ToyExecutable(function)

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Run the steps in order; never writes an input. Results keep their shapes (0-d too)."""
        assert isinstance(executable, ToyExecutable)
        env = {v.id: x for v, x in zip(executable.function.input_values, inputs, strict=True)}
        with np.errstate(all="ignore"):
            for kernel, operands, result in executable.steps:
                env[result] = np.asarray(kernel(*(env[i] for i in operands)))
        return [env[v.id] for v in executable.function.outputs]
