"""Backends for testing the suite itself: one honest, three deliberately wrong, one partial."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from omnitensor.backend.contract import Backend, Capabilities, Executable
from omnitensor.errors import UnsupportedError
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import all_ops
from omnitensor.ir.program import Function


class _Exe(Executable):
    def __init__(self, function: Function) -> None:
        self.function = function


class HonestBackend(Backend):
    """The reference interpreter behind the contract (what `ref` is)."""

    name = "honest"

    def capabilities(self) -> Capabilities:
        return Capabilities({n: frozenset(op.dtypes) for n, op in all_ops().items()})

    def upload(self, array: np.ndarray[Any, Any]) -> Any:
        return np.array(array, copy=True)

    def download(self, buffer: Any) -> np.ndarray[Any, Any]:
        return np.array(buffer, copy=True)

    def compile(self, function: Function) -> Executable:
        return _Exe(function)

    def run(
        self,
        executable: Executable,
        inputs: Sequence[Any],
        *,
        donated: frozenset[int] = frozenset(),
    ) -> list[Any]:
        return self.outputs(executable.function, list(inputs))

    def outputs(self, fn: Function, inputs: list[Any]) -> list[Any]:
        return evaluate(fn, inputs)


def _produced_by(fn: Function, op: str) -> bool:
    return any(inst.op == op for inst in fn.body)


class PerturbBackend(HonestBackend):
    """Multiplies the results of programs containing `mul` by (1 + 1e-3)."""

    name = "perturb"

    def outputs(self, fn: Function, inputs: list[Any]) -> list[Any]:
        outs = super().outputs(fn, inputs)
        if fn.body and fn.body[-1].op == "mul":
            outs = [o * o.dtype.type(1.001) if o.dtype.kind == "f" else o + 1 for o in outs]
        return outs


class NaNBackend(HonestBackend):
    """Writes a NaN into the first element of every float `exp` result."""

    name = "nan"

    def outputs(self, fn: Function, inputs: list[Any]) -> list[Any]:
        outs = [np.array(o) for o in super().outputs(fn, inputs)]
        if fn.body and fn.body[-1].op == "exp":
            for o in outs:
                if o.size:
                    o.reshape(-1)[0] = np.nan
        return outs


class LiarBackend(HonestBackend):
    """Claims to support `tanh` but raises UnsupportedError when asked to compile it."""

    name = "liar"

    def compile(self, function: Function) -> Executable:
        if _produced_by(function, "tanh"):
            raise UnsupportedError("tanh: not implemented after all", op="tanh")
        return super().compile(function)


class PartialBackend(HonestBackend):
    """Honestly supports only float32 `add` and `mul` (and the movement ops they need)."""

    name = "partial"

    def capabilities(self) -> Capabilities:
        import omnitensor.dtypes as d

        movement = {"broadcast_in_dim", "transpose", "slice"}
        ops = {n: frozenset({d.float32}) for n in ("add", "mul", *movement)}
        return Capabilities(ops, loosened={"float32": 2.0, "float16": 1000.0})
