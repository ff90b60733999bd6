"""The plan step of one instruction run by a compiled kernel (the composites' lowerings use it).

The kernel writes the instruction's results into the buffers the memory planner gives them.
Small instances (fewer result elements than `codegen.min_elements`) run the instruction's
reference kernel instead (for a composite, its decomposition; see `tier`).

A kernel is prepared for its arrays (views made, the compiled function and its split chosen)
and the prepared call kept while the step sees the same array objects (`prepared`): a decode
step's norms, rotary embeddings and activations skip their Python wrappers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np

from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType

from . import codegen
from .drafts import Array, Draft, Owned, Slots, Step
from .prepared import Kept
from .tier import reference_runner

__all__ = ["Kernel", "kernel_draft", "once", "result_layout"]

#: ``kernel(operands, *outs) -> (call, reusable)``: the kernel's call on operands in the order of
#: `kernel_draft`'s `reads` (None where an optional operand is absent) into `outs`, the result
#: buffers (C-contiguous; one per result of the instruction), and whether the call may run
#: again for the same array objects (it holds views of them only, no copies). The last
#: `dynamic` reads are not among the operands: the call takes them, at every run.
Kernel = Callable[..., tuple[Callable[..., None], bool]]


def once(run: Callable[[list[Array | None], Array], None]) -> Kernel:
    """A `Kernel` of `run(operands, out)`, prepared again at every call (never reused)."""
    return lambda args, out: (functools.partial(run, args, out), False)


def kernel_draft(inst: Instruction, index: int, reads: Sequence[int | None],
                 kernel: Callable[[], Kernel], kind: str, work: int | None = None,
                 large: bool = False, dynamic: int = 0,
                 layouts: Sequence[tuple[int, ...] | None] = ()) -> Draft:
    """A `Draft` running `kernel()` (built, and numba loaded, on first use) for `inst`.

    Args:
        inst: the instruction (its results all tensors, written by the kernel).
        index: the step's position in the plan.
        reads: value ids the kernel reads, None for absent optional operands.
        kernel: makes the kernel function (imports the numba module then).
        kind: the step kind in `Plan.kinds` and labels; a small instance, which runs the
            reference kernels, is kind ``ref`` instead, so profiles say what really runs.
        work: the size compared with `codegen.min_elements` (default: the first result's elements;
            attention passes its score count, which grows with the KV cache while its result
            does not).
        large: the program is large (`lowering.Lower.large`): the kernel runs at any size. Such
            a program loads numba anyway, and a decode step's composites are small (a (1, 896)
            rms_norm): a compiled kernel costs microseconds where the numpy decomposition costs
            0.1 ms, 49 times per token for a 24-layer model.
        dynamic: how many of the last `reads` the prepared call takes at every run (values
            that change from run to run, such as attention's mask and cache length).
        layouts: per result, None or the order of its axes in memory (`result_layout`): the
            buffer holds the result's axes in that order, and the kernel writes, and the plan
            reads, a transposed view of it (attention's (B, H, T, D) heads stored as (B, T,
            H, D), so that the usual transpose and reshape into (B, T, H * D) are views).
    """
    types = [r.type for r in inst.results]
    assert all(isinstance(t, TensorType) for t in types)
    outs = [r.id for r in inst.results]
    orders = [layouts[i] if i < len(layouts) else None for i in range(len(outs))]
    owned = [Owned(r.id, r.type.shape if order is None else tuple(r.type.shape[a] for a in order),
                   r.type.dtype.np, index)
             for r, order in zip(inst.results, orders, strict=True)
             if isinstance(r.type, TensorType)]
    size = math.prod(owned[0].shape)
    small = not large and (size if work is None else work) < codegen.min_elements()
    count = len(outs)
    ids = list(reads)
    # the operands the call is prepared for, and the values it takes at every run
    statics, dynamics = ids[:len(ids) - dynamic], ids[len(ids) - dynamic:]

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        gets = [getters[out] if order is None else _Transposed(getters[out], order)
                for out, order in zip(outs, orders, strict=True)]

        def compiled() -> Step:
            prepare = kernel()
            kept = Kept()
            # NOTE: an escaping result's buffer is fresh per run: keeping a call for it would
            # only hold the last run's output alive
            fresh = any(getattr(get, "fresh", False) for get in gets)

            def prepare_all(arrays: Sequence[Array | None]) -> tuple[Callable[..., None], bool]:
                return prepare(list(arrays[:-count]), *arrays[-count:])

            if count == 1:  # (the common case: no list of buffers made per run)
                get, out = gets[0], outs[0]

                def step(slots: Slots) -> None:
                    buffer = get(slots)
                    if buffer.size:
                        args = [None if i is None else slots[i] for i in statics]
                        values = [None if i is None else slots[i] for i in dynamics]
                        if fresh:
                            prepare(args, buffer)[0](*values)
                        else:
                            args.append(buffer)
                            kept.run(args, prepare_all, values)
                    slots[out] = buffer

                return step

            def step_many(slots: Slots) -> None:
                buffers = [get(slots) for get in gets]
                args = [None if i is None else slots[i] for i in statics]
                values = [None if i is None else slots[i] for i in dynamics]
                if fresh:
                    prepare(args, *buffers)[0](*values)
                else:
                    kept.run(args + buffers, prepare_all, values)
                for out, buffer in zip(outs, buffers, strict=True):
                    slots[out] = buffer

            return step_many

        if small:
            return reference_runner([inst], {}, outs, gets)
        return compiled()

    return Draft([i for i in ids if i is not None], outs, make, owned, "ref" if small else kind)


class _Transposed:
    """A buffer getter's result seen with its axes back in the result's order (`layouts`).

    The same view object for the same buffer, run after run: a prepared call is kept for the
    array objects it saw (`prepared.Kept`).
    """

    def __init__(self, get: Callable[[Slots], Array], order: tuple[int, ...]) -> None:
        self.get, self.axes = get, tuple(int(a) for a in np.argsort(order))
        self.fresh = getattr(get, "fresh", False)
        self.seen: tuple[Array, Array] | None = None

    def __call__(self, slots: Slots) -> Array:
        buffer = self.get(slots)
        seen = self.seen
        if seen is not None and seen[0] is buffer:
            return seen[1]
        view = buffer.transpose(self.axes)
        self.seen = (buffer, view)
        return view


def result_layout(function: Function, value: int, order: tuple[int, ...]) -> bool:
    """Whether every reader of `value` transposes it by `order` (and it is no output).

    Stored in that order, the value's readers get contiguous views.
    """
    if any(v.id == value for v in function.outputs):
        return False
    readers = [i for i in function.body if any(v.id == value for v in i.operands)]
    return bool(readers) and all(
        i.op == "transpose" and tuple(i.attrs.get("perm", ())) == order for i in readers)
