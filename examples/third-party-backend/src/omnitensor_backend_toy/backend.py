"""`ToyBackend`: runs straight-line programs of add, mul and exp on float32 with numpy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from omnitensor.backend import Backend, Capabilities, Executable
from omnitensor.dtypes import float32
from omnitensor.ir import Function

Array = np.ndarray[Any, Any]

_KERNELS: dict[str, Callable[..., Array]] = {"add": np.add, "mul": np.multiply, "exp": np.exp}


class ToyExecutable(Executable):
    """The function, as a list of (kernel, operand ids, result id) steps."""

    def __init__(self, function: Function) -> None:
        self.function = function
        self.steps = [
            (_KERNELS[inst.op], [v.id for v in inst.operands], inst.result.id)
            for inst in function.body
        ]


class ToyBackend(Backend):
    """Three ops, one dtype, honestly declared."""

    name = "toy"

    def capabilities(self) -> Capabilities:
        """add, mul and exp on float32 only; dense buffers (no strided views)."""
        return Capabilities(ops={op: frozenset({float32}) for op in _KERNELS})

    def upload(self, array: Array) -> Array:
        """A contiguous copy."""
        return np.ascontiguousarray(array).copy()

    def download(self, buffer: Any) -> Array:
        """A copy the caller owns."""
        return np.array(buffer, copy=True)

    def compile(self, function: Function) -> ToyExecutable:
        """Check every instruction (UnsupportedError otherwise) and plan the kernel calls."""
        self.check(function)
        return ToyExecutable(function)

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Run the steps in order; never writes an input."""
        assert isinstance(executable, ToyExecutable)
        env = {v.id: x for v, x in zip(executable.function.input_values, inputs, strict=True)}
        with np.errstate(all="ignore"):
            for kernel, operands, result in executable.steps:
                env[result] = kernel(*(env[i] for i in operands))
        return [env[v.id] for v in executable.function.outputs]
