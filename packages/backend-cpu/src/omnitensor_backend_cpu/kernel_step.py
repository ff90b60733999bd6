"""The plan step of one instruction run by a compiled kernel (the composites' lowerings use it).

The kernel writes the instruction's single result into the buffer the memory planner gives it.
Small instances (fewer result elements than `codegen.min_elements`) run the instruction's
reference kernel instead (for a composite, its decomposition; see `tier`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from omnitensor.ir.program import Instruction
from omnitensor.ir.types import TensorType

from . import codegen
from .drafts import Array, Draft, Owned, Slots, Step
from .tier import reference_runner

__all__ = ["Kernel", "kernel_draft"]

#: ``kernel(operands, out)``: operands in the order of `kernel_draft`'s `reads` (None where an
#: optional operand is absent), `out` the result buffer (C-contiguous) to write.
Kernel = Callable[[list[Array | None], Array], None]


def kernel_draft(inst: Instruction, index: int, reads: Sequence[int | None],
                 kernel: Callable[[], Kernel], kind: str, work: int | None = None,
                 large: bool = False) -> Draft:
    """A `Draft` running `kernel()` (built, and numba loaded, on first use) for `inst`.

    Args:
        inst: the instruction (single result).
        index: the step's position in the plan.
        reads: value ids the kernel reads, None for absent optional operands.
        kernel: makes the kernel function (imports the numba module then).
        kind: the step kind in `Plan.kinds` and labels; a small instance, which runs the
            reference kernels, is kind ``ref`` instead, so profiles say what really runs.
        work: the size compared with `codegen.min_elements` (default: the result's elements;
            attention passes its score count, which grows with the KV cache while its result
            does not).
        large: the program is large (`lowering.Lower.large`): the kernel runs at any size. Such
            a program loads numba anyway, and a decode step's composites are small (a (1, 896)
            rms_norm): a compiled kernel costs microseconds where the numpy decomposition costs
            0.1 ms, 49 times per token for a 24-layer model.
    """
    result = inst.results[0]
    assert isinstance(result.type, TensorType)
    out = result.id
    owned = [Owned(out, result.type.shape, result.type.dtype.np, index)]
    small = not large and (result.type.size if work is None else work) < codegen.min_elements()
    ids = list(reads)

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[out]

        def compiled() -> Step:
            run = kernel()

            def step(slots: Slots) -> None:
                buffer = get(slots)
                if buffer.size:
                    run([None if i is None else slots[i] for i in ids], buffer)
                slots[out] = buffer

            return step

        if small:
            return reference_runner([inst], {}, [out], [get])
        return compiled()

    return Draft([i for i in ids if i is not None], [out], make, owned, "ref" if small else kind)
