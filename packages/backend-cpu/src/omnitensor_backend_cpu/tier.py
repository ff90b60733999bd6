"""Two tiers of kernel steps: numpy reference kernels for small arrays, numba above.

Loading a compiled kernel costs tens of milliseconds (compiling it, on a cold cache, up to a
second, and numba's own start-up about a second once per process); on arrays of a few thousand
elements it saves microseconds per call, since numba's dispatch itself costs microseconds. So
kernel steps whose results are smaller than `codegen.min_elements` run the instructions'
reference kernels instead (`reference_runner`), for good: a small program (``omnitensor
generate char-gpt``) never imports numba, and no compile ever stalls a running loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from omnitensor.ir.opdef import get_op
from omnitensor.ir.program import Instruction
from omnitensor.ir.types import TensorType

__all__ = ["reference_runner"]

Slots = list[Any]
Step = Callable[[Slots], None]

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
