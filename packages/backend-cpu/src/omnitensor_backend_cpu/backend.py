"""`CpuBackend`: PTIR compiled to plans of fused numba kernels, BLAS calls and numpy kernels.

Buffers are numpy arrays (strided: views are free). Every op and dtype the reference supports
runs: what has no kernel of its own runs the core's numpy reference kernel inside the plan, so
the declared capabilities are the reference's.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any, final

import numpy as np

from omnitensor.backend import Capabilities, Executable
from omnitensor.backend.host import HostArrayBackend, hand_out
from omnitensor.ir import Function
from omnitensor.ir.interpret import check_result_input
from omnitensor.ir.program import Instruction
from omnitensor.ir.types import QTensorType, Type
from omnitensor.ir.verify import verify

from . import threads
from .lowering import LOWERINGS, sync
from .plan import Plan, build_plan
from .quant_more import PACKED_FORMATS

__all__ = ["CpuBackend", "CpuExecutable"]

logger = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]


@final
class CpuExecutable(Executable):
    """A compiled plan and the function it came from.

    Attributes:
        function: the (verified) PTIR function.
        plan: the steps, fused groups and buffer assignment.
        compile_s: seconds spent compiling (numba compiles happen lazily on first run and are
            added to `first_run_s`).
        first_run_s: seconds of the first run (None before it).
    """

    def __init__(self, function: Function, plan: Plan, compile_s: float) -> None:
        self.function = function
        self.plan = plan
        self.compile_s = compile_s
        self.first_run_s: float | None = None



@final
class CpuBackend(HostArrayBackend):
    """The CPU backend (``cpu``): numpy buffers, strided views, fused numba kernels, BLAS."""

    name = "cpu"

    def __init__(self) -> None:
        self._capabilities: Capabilities | None = None
        self.threads = threads.apply_from_env()

    def capabilities(self) -> Capabilities:
        """Derived from the lowering table: every declared op, its kernel or its reference."""
        sync()
        if self._capabilities is None or len(self._capabilities.ops) != len(LOWERINGS.names()):
            self._capabilities = Capabilities(
                ops=LOWERINGS.capabilities(),
                strided_inputs=True,
                notes={"kernels": "numba (fused), BLAS, numpy reference fallback",
                       "threads": str(self.threads)},
            )
        return self._capabilities

    def supports(self, inst: Instruction) -> str | None:
        """The lowering table's answer for `inst`."""
        sync()
        return LOWERINGS.supports(inst)

    def repacks(self, type: Type) -> bool:
        """True for the quantized formats `quant` repacks at load (not the 16-bit ones)."""
        return isinstance(type, QTensorType) and type.format in PACKED_FORMATS

    def compile(self, function: Function) -> CpuExecutable:
        """Verify `function` and compile it into a plan (kernels compile on first run)."""
        start = time.perf_counter()
        verify(function)
        self.check(function)
        plan = build_plan(function)
        return CpuExecutable(function, plan, time.perf_counter() - start)

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Run the plan; outputs are read-only (views of inputs where ops allow).

        Inputs at the `donated` positions may be written in place (a KV cache updated by
        `dynamic_update_slice`); no other input is ever written.
        """
        if not isinstance(executable, CpuExecutable):
            raise TypeError(f"cpu: cannot run {type(executable).__name__} (expected "
                            f"CpuExecutable)")
        function = executable.function
        arrays = [x if type(x) is np.ndarray else np.asarray(x) for x in inputs]
        if executable.first_run_s is None:
            for spec, array in zip(function.inputs, arrays, strict=True):
                check_result_input(spec.value.type, array)
            start = time.perf_counter()
            outputs = executable.plan.run(arrays, donated)
            executable.first_run_s = time.perf_counter() - start
            logger.info("cpu: %s compiled in %.3f s, first run %.3f s (%d steps, %d fused)",
                        function.name, executable.compile_s, executable.first_run_s,
                        len(executable.plan.steps), len(executable.plan.groups))
        else:
            outputs = executable.plan.run(arrays, donated)
        return hand_out(outputs, arrays, donated)

    def device_info(self) -> dict[str, str]:
        """The host and the thread count."""
        return {"device": "host CPU (numba + BLAS)", "threads": str(self.threads)}

    def compile_seconds(self) -> float:
        """Seconds numba has spent compiling kernels (on first use; 0.0 before numba loads)."""
        compat = sys.modules.get("omnitensor_backend_cpu._compat")
        return 0.0 if compat is None else float(compat.compile_seconds())
