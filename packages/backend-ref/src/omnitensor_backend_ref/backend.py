"""`RefBackend`: runs PTIR with the core's reference interpreter; buffers are numpy arrays.

The definition of every op, not a fast path: its lowering table is the core's shared table of
reference kernels (`omnitensor.backend.host.reference_lowerings`), every primitive with every
dtype its declaration allows; composites are expanded into primitives before it runs them. It
never writes a buffer in place and copies only on upload and download.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import numpy as np

from omnitensor.backend import Capabilities, Executable
from omnitensor.backend.host import HostArrayBackend, hand_out, reference_lowerings
from omnitensor.backend.lowering import LoweringTable
from omnitensor.ir import Function, Instruction, all_ops
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.verify import verify

__all__ = ["RefBackend", "RefExecutable"]

Array = np.ndarray[Any, Any]


@final
class RefExecutable(Executable):
    """A verified function; running it interprets it."""

    def __init__(self, function: Function) -> None:
        self.function = function



@final
class RefBackend(HostArrayBackend):
    """The reference backend (``ref``): numpy buffers, strided views, the reference interpreter."""

    name = "ref"

    def __init__(self) -> None:
        self._capabilities: Capabilities | None = None
        self._table: tuple[int, LoweringTable] | None = None

    def lowerings(self) -> LoweringTable:
        """The reference-kernel table (rebuilt when ops were declared since, e.g. by plugins)."""
        declared = len(all_ops())
        if self._table is None or self._table[0] != declared:
            self._table = (declared, reference_lowerings())
            self._capabilities = None
        return self._table[1]

    def capabilities(self) -> Capabilities:
        """Derived from the lowering table: every primitive x every dtype it declares."""
        table = self.lowerings()
        if self._capabilities is None:
            self._capabilities = Capabilities(
                ops=table.capabilities(), strided_inputs=True,
                notes={"kernels": "numpy reference"}
            )
        return self._capabilities

    def supports(self, inst: Instruction) -> str | None:
        """The lowering table's answer, naming this backend."""
        reason = self.lowerings().supports(inst)
        return None if reason is None else f"{reason} in backend {self.name!r}"

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
        return hand_out(outputs, arrays, donated)

    def device_info(self) -> dict[str, str]:
        """The host."""
        return {"device": "host (numpy reference kernels)"}
