"""`RefBackend`: runs PTIR with the core's reference interpreter; buffers are numpy arrays.

The definition of every op, not a fast path: it supports every op with every dtype its
declaration allows, never writes a buffer in place and copies only on upload and download.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, final

import numpy as np

from omnitensor.backend import Backend, Capabilities, Executable
from omnitensor.dtypes import DType
from omnitensor.ir import Function, Instruction, OpDef, all_ops
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.verify import verify

__all__ = ["RefBackend", "RefExecutable"]

Array = np.ndarray[Any, Any]


@final
class RefExecutable(Executable):
    """A verified function; running it interprets it."""

    def __init__(self, function: Function) -> None:
        self.function = function


def _read_only(array: Array) -> Array:
    # NOTE: handed-out buffers must never be written (DESIGN §4); numpy enforces it for us.
    array.flags.writeable = False
    return array


@final
class RefBackend(Backend):
    """The reference backend (``ref``): numpy buffers, strided views, the reference interpreter."""

    name = "ref"

    def __init__(self) -> None:
        self._capabilities: Capabilities | None = None

    def capabilities(self) -> Capabilities:
        """Every op x every dtype its declaration allows (operand-specific dtypes included)."""
        if self._capabilities is None:
            ops: dict[str, frozenset[DType]] = {}
            for name, opdef in all_ops().items():
                dtypes = set(opdef.dtypes)
                for spec in opdef.operands:
                    dtypes.update(spec.dtypes or ())
                ops[name] = frozenset(dtypes)
            self._capabilities = Capabilities(
                ops=ops, strided_inputs=True, notes={"kernels": "numpy reference"}
            )
        return self._capabilities

    def supports(self, inst: Instruction) -> str | None:
        """None for every declared op: whatever the verifier accepts, the reference runs."""
        if inst.op in self.capabilities().ops:
            return None
        return f"{inst.op} is not a declared op"

    def upload(self, array: Array) -> Array:
        """A read-only copy of `array` (the caller may keep writing its own)."""
        return _read_only(np.array(array, copy=True))

    def download(self, buffer: Any) -> Array:
        """A writable copy of `buffer` that the caller owns."""
        return np.array(buffer, copy=True)

    def view(self, buffer: Any, op: OpDef, attrs: Mapping[str, Any]) -> Any | None:
        """The op's reference kernel applied to `buffer`, when numpy made it a view (no copy)."""
        with np.errstate(all="ignore"):
            result = np.asarray(op.reference(buffer, **attrs))
        if result.size == 0 or np.shares_memory(result, buffer):
            return result
        return None

    def compile(self, function: Function) -> RefExecutable:
        """Verify `function` (PTIR invariants) and keep it; nothing else to compile."""
        verify(function)
        self.check(function)
        return RefExecutable(function)

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Interpret the function; outputs are read-only (views of inputs where ops allow).

        `donated` is accepted and ignored: the reference never writes in place.
        """
        if not isinstance(executable, RefExecutable):
            raise TypeError(f"ref: cannot run {type(executable).__name__} (expected RefExecutable)")
        arrays = [np.asarray(x) for x in inputs]
        outputs = evaluate(executable.function, arrays)
        input_ids = {id(x) for x in arrays}
        # Outputs that are inputs themselves are returned as they are (they are ours already).
        return [out if id(out) in input_ids else _read_only(out) for out in outputs]

    def device_info(self) -> dict[str, str]:
        """The host."""
        return {"device": "host (numpy reference kernels)"}
