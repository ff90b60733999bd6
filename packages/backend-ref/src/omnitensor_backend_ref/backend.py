"""`RefBackend`: runs PTIR with the core's reference interpreter; buffers are numpy arrays.

The definition of every op, not a fast path: it supports every op with every dtype its
declaration allows, never writes a buffer in place and copies only on upload and download.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import numpy as np

from omnitensor.backend import Capabilities, Executable
from omnitensor.backend.host import HostArrayBackend, hand_out, reference_op_table
from omnitensor.ir import Function
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

    def capabilities(self) -> Capabilities:
        """Every op x every dtype its declaration allows (operand-specific dtypes included)."""
        if self._capabilities is None:
            self._capabilities = Capabilities(
                ops=reference_op_table(), strided_inputs=True,
                notes={"kernels": "numpy reference"}
            )
        return self._capabilities

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
        return hand_out(outputs, arrays)

    def device_info(self) -> dict[str, str]:
        """The host."""
        return {"device": "host (numpy reference kernels)"}
