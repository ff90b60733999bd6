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

        movement = {"broadcast_in_dim", "transpose", "slice", "reverse"}
        ops = {n: frozenset({d.float32}) for n in ("add", "mul", *movement)}
        return Capabilities(ops, loosened={"float32": 2.0, "float16": 1000.0})


# --- stride holes: backends that mishandle one layout, each caught by the suite ----------------


class StridedHonestBackend(HonestBackend):
    """The reference behind a contract that declares strided inputs and makes numpy views."""

    name = "strided_honest"

    def capabilities(self) -> Capabilities:
        caps = super().capabilities()
        return Capabilities(caps.ops, strided_inputs=True)

    def view(self, buffer: Any, op: Any, attrs: Any) -> Any | None:
        result = np.asarray(op.reference(buffer, **attrs))
        return result if result.size == 0 or np.shares_memory(result, buffer) else None


def _misread(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """What a kernel that ignores strides reads: `size` elements from the view's first one.

    Memory-safe emulation of a raw-pointer kernel assuming dense row-major data: the elements
    are taken in memory order from the owning buffer; past its end it reads garbage (here a
    sentinel).
    """
    if x.flags.c_contiguous or x.size == 0:
        return x
    base = x
    while isinstance(base.base, np.ndarray):
        base = base.base
    flat = base.reshape(-1)
    offset = (x.__array_interface__["data"][0] - base.__array_interface__["data"][0])
    start = offset // x.itemsize
    out = np.full(x.size, 1234, dtype=x.dtype)
    taken = flat[start:start + x.size]
    out[: taken.size] = taken
    return out.reshape(x.shape)


class _MisreadsInputs(StridedHonestBackend):
    """Misreads the input buffers that feed operand `position` of an `op` instruction."""

    op = ""
    position = 0

    def misreads(self, x: np.ndarray[Any, Any]) -> bool:
        return not x.flags.c_contiguous

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        fn = executable.function  # type: ignore[attr-defined]
        positions = {spec.value.id: i for i, spec in enumerate(fn.inputs)}
        arrays = [np.asarray(x) for x in inputs]
        for inst in fn.body:
            ops = inst.operands
            if inst.op != self.op or self.position >= len(ops):
                continue
            if ops[self.position].id in positions:
                i = positions[ops[self.position].id]
                if self.misreads(arrays[i]):
                    arrays[i] = _misread(arrays[i])
        return self.outputs(fn, arrays)


class DenseRhsDotBackend(_MisreadsInputs):
    """`dot_general` reads a non-contiguous right operand as if it were dense (issue #19)."""

    name = "dense_rhs_dot"
    op, position = "dot_general", 1


class ZeroStrideBackend(_MisreadsInputs):
    """`mul` reads a broadcast (zero-stride) right operand as if it were dense."""

    name = "zero_stride"
    op, position = "mul", 1

    def misreads(self, x: np.ndarray[Any, Any]) -> bool:
        return 0 in x.strides and x.size > 1


class NegativeStrideReduceBackend(_MisreadsInputs):
    """`reduce_sum` reads an input with negative strides from its first element onwards."""

    name = "negative_stride_reduce"
    op, position = "reduce_sum", 0

    def misreads(self, x: np.ndarray[Any, Any]) -> bool:
        return any(s < 0 for s in x.strides)


class _DropsMovement(HonestBackend):
    """Drops a `movement` op feeding operand `position` of `op` when the shape is unchanged.

    What a fusion pass does when it folds a view into its consumer and forgets to apply it.
    """

    op = ""
    position = 0
    movement = ""

    def outputs(self, fn: Function, inputs: list[Any]) -> list[Any]:
        from omnitensor.ir.interpret import run_instruction

        feeds = {inst.operands[self.position].id for inst in fn.body
                 if inst.op == self.op and self.position < len(inst.operands)}
        env = {spec.value.id: np.asarray(a) for spec, a in zip(fn.inputs, inputs, strict=True)}
        for inst in fn.body:
            operands = [env[v.id] for v in inst.operands]
            result = inst.results[0]
            if (inst.op == self.movement and result.id in feeds
                    and operands[0].shape == tuple(result.type.shape)):  # type: ignore[union-attr]
                env[result.id] = operands[0]
                continue
            for value, out in zip(inst.results, run_instruction(inst, operands), strict=True):
                env[value.id] = out
        return [env[v.id] for v in fn.outputs]


class FoldedTransposeDotBackend(_DropsMovement):
    """Folds a transpose into `dot_general`'s right operand and forgets it (square shapes)."""

    name = "folded_transpose_dot"
    op, position, movement = "dot_general", 1, "transpose"


class FoldedReverseBackend(_DropsMovement):
    """Fuses `add` with a reversed right operand and reads it unreversed."""

    name = "folded_reverse"
    op, position, movement = "add", 1, "reverse"
