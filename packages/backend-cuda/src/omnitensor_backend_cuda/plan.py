"""The data of a launch list: views of numbered buffer slots, pending fused values, steps.

`lower` builds a `Lowered` from a function; `backend` (on a GPU) and `nvcc.run_on_host` (the
tests) replay it. Nothing here generates code or touches CuPy.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from omnitensor.dtypes import DType
from omnitensor.ir.types import Value

from .kernels import MAX_RANK
from .source import WARP

__all__ = ["BLOCK", "Iota", "Lowered", "Lowering", "Node", "Start", "Step", "View", "kernel_name",
           "row_major", "words"]

#: Threads per block of thread kernels; warps per block of warp kernels are in the source.
BLOCK = 256


def row_major(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return tuple(reversed(strides))


def words(values: Sequence[int], size: int = MAX_RANK) -> list[int]:
    """`values` as ints padded with zeros to `size` parameter words."""
    return [int(v) for v in values] + [0] * (size - len(values))


def kernel_name(kind: str, body: str) -> str:
    """A generated kernel's name: its kind and a hash of its text (equal text, equal name)."""
    return f"ot_{kind}_{hashlib.sha256(body.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class View:
    """An affine view of slot `slot`: element (i...) lives at offset + sum(i * strides)."""

    slot: int
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    def is_dense(self) -> bool:
        """Row-major without gaps (size-1 dims ignored)."""
        want = row_major(self.shape)
        return all(s == w for s, w, d in zip(self.strides, want, self.shape, strict=True) if d != 1)


#: A runtime start of `dynamic_slice`/`dynamic_update_slice` along one dim: (element stride,
#: largest start, source), the source a 0-d view of an integer slot or a known constant.
Start = tuple[int, int, "View | int"]


@dataclass
class Node:
    """A pending elementwise computation (not yet in any buffer)."""

    op: str
    args: list[Any]
    operand_dtype: DType
    dtype: DType
    attrs: dict[str, Any]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Iota:
    """A fused `iota` leaf."""

    dimension: int
    dtype: DType
    shape: tuple[int, ...]


@dataclass
class Step:
    """One launch of a kernel (or of cuBLAS) over bound slots.

    ``kind``: ``thread``/``warp`` (a CUDA C kernel over `n` threads or rows) or ``matmul``
    (cuBLAS through cupy.matmul; params = [batch, m, n, k, then offset and 3 strides per
    operand and the output]). `slots` lists bound buffers, the written one(s) last.
    `donor`: the input whose copy this step makes; skipped when that input is donated (the
    copy's slot then *is* the input buffer, updated in place).
    """

    kind: str
    name: str
    source: str
    slots: list[int]
    params: list[int]
    n: int
    warps: int = 4
    donor: int | None = None

    def grid(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block) of the launch."""
        if self.kind == "warp":
            return (-(-self.n // self.warps), 1, 1), (self.warps * WARP, 1, 1)
        return (min(-(-self.n // BLOCK), 65535), 1, 1), (BLOCK, 1, 1)


@dataclass
class Lowered:
    """The launch list of a function: slots, steps, constants and where each output lives.

    `aliases` maps a slot to the input it may alias: when that input is donated, the slot is
    bound to the input's buffer and the copy step whose `donor` it is is skipped.
    """

    slot_shapes: list[tuple[tuple[int, ...], DType]] = field(default_factory=list)
    n_inputs: int = 0
    constants: dict[int, np.ndarray[Any, Any]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    outputs: list[View] = field(default_factory=list)
    aliases: dict[int, int] = field(default_factory=dict)

    def plan(self, donated: frozenset[int]) -> tuple[list[Step], dict[int, int]]:
        """The steps to run and the slot -> input bindings when inputs `donated` are donated."""
        bound = {slot: k for slot, k in self.aliases.items() if k in donated}
        return [s for s in self.steps if s.donor is None or s.donor not in donated], bound

    def slot_size(self, slot: int) -> int:
        """Elements of slot `slot`."""
        return math.prod(self.slot_shapes[slot][0])


class Lowering(Protocol):
    """What the op handlers of `lower_ops` use of the lowering in progress."""

    out: Lowered

    def new_slot(self, shape: Sequence[int], dtype: DType) -> View:
        """A fresh dense slot."""

    def emit(self, step: Step) -> None:
        """Append a launch (empty ones are dropped)."""

    def view(self, value: Value) -> View:
        """`value` as a view of a slot (materializing pending work)."""

    def dense(self, value: Value | View) -> View:
        """`value` as a dense, offset-0 view (copying when it is not)."""

    def operand(self, value: Value) -> Any:
        """`value` as a fusable operand (View, pending Node or Iota)."""

    def materialize(self, expr: Any, target: View | None = None, *,
                    out_starts: Sequence[Start] = (),
                    leaf_starts: Sequence[Start] = ()) -> View:
        """One generated kernel computing `expr` into a new slot (or the view `target`)."""

    def start(self, value: Value) -> View | int:
        """A 0-d start index: its value when it is a known constant, else its view."""

    def writable(self, value: Value, reads: Any) -> View:
        """A dense whole-slot view holding `value` that may be written (in place when safe)."""
