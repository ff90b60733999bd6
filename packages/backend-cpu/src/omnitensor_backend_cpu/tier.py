"""Compiled kernels only once a plan has shown they pay: numpy first, numba when it is worth it.

Loading a compiled kernel costs tens of milliseconds (and numba's own start-up about a second,
once per process); on small arrays it saves microseconds per call. So the kernel steps of a plan
whose arrays are small (below `codegen.min_elements`) start as numpy reference kernels, timed;
once the plan has spent `budget_s` seconds in them, every such step switches to its compiled
kernel for good. A program run a few times (``omnitensor generate char-gpt``,
`examples/train_mlp.py`) never pays for numba; a decode loop switches after a few tokens.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from omnitensor.ir.opdef import get_op
from omnitensor.ir.program import Instruction
from omnitensor.ir.types import TensorType

__all__ = ["BUDGET_ENV", "Tier", "reference_runner"]

Slots = list[Any]
Step = Callable[[Slots], None]

#: ``OMNITENSOR_CPU_TIER_BUDGET_MS``: milliseconds a plan spends in numpy forms of its small
#: kernel steps before compiling them (default 50).
BUDGET_ENV: Final = "OMNITENSOR_CPU_TIER_BUDGET_MS"


#: Seconds per call under which a step's numpy form is kept even after the plan switched.
MIN_CALL_S: Final = 30e-6


class Tier:
    """The numpy time of one plan's small kernel steps, and whether they switched.

    Attributes:
        budget_s: seconds of numpy time after which the steps switch to compiled kernels.
        spent_s: seconds spent so far.
        up: True once switched.
        eager: True when the budget is zero (every step compiles on its first call).
    """

    def __init__(self, budget_s: float | None = None) -> None:
        if budget_s is None:
            raw = os.environ.get(BUDGET_ENV, "").strip()
            budget_s = float(raw) / 1e3 if raw.replace(".", "", 1).isdigit() else 0.05
        self.budget_s = budget_s
        self.spent_s = 0.0
        self.up = self.eager = budget_s <= 0  # eager: compile at once, whatever a step costs

    def step(self, numpy_form: Step, compiled: Callable[[], Step]) -> Step:
        """A step running `numpy_form` (timed) until the plan switches, then `compiled()`'s.

        A step whose numpy form takes under `MIN_CALL_S` per call stays numpy for good: a
        compiled kernel would not be faster there (numba's dispatch costs microseconds too),
        and compiling it in the middle of a decode loop would only stall it.
        """
        chosen: list[Step] = []
        mine = [0.0, 0]

        def run(slots: Slots) -> None:
            if chosen:
                chosen[0](slots)
            elif self.up and (self.eager or mine[0] > MIN_CALL_S * mine[1]):
                chosen.append(compiled())
                chosen[0](slots)
            else:
                start = time.perf_counter()
                numpy_form(slots)
                spent = time.perf_counter() - start
                self.spent_s += spent
                mine[0] += spent
                mine[1] += 1
                if self.spent_s > self.budget_s:
                    self.up = True

        return run


def reference_runner(insts: Sequence[Instruction], literals: dict[int, Any],
                     outputs: Sequence[int],
                     getters: Sequence[Callable[[Slots], Any]]) -> Step:
    """A step running `insts` through the reference kernels, results into the given buffers.

    Args:
        insts: instructions in program order (single-result).
        literals: value id -> scalar for operands inlined as constants.
        outputs: value ids written out, each into the buffer its getter returns.
        getters: one per output (the plan's buffer for it).
    """
    kernels = [(get_op(i.op).reference, dict(i.attrs), [v.id for v in i.operands],
                i.results[0].id) for i in insts]
    consts = {vid: np.asarray(value, dtype=_dtype(insts, vid)) for vid, value in literals.items()}

    def step(slots: Slots) -> None:
        env: dict[int, Any] = dict(consts)
        for kernel, attrs, reads, write in kernels:
            env[write] = kernel(*[env[r] if r in env else slots[r] for r in reads], **attrs)
        for vid, get in zip(outputs, getters, strict=True):
            buffer = get(slots)
            np.copyto(buffer, env[vid], casting="unsafe")
            slots[vid] = buffer

    return step


def _dtype(insts: Sequence[Instruction], value: int) -> Any:
    for inst in insts:
        for v in inst.operands:
            if v.id == value:
                assert isinstance(v.type, TensorType)
                return v.type.dtype.np
    raise AssertionError(value)
