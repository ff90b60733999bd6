"""The data of a launch list: views of numbered buffer slots, pending fused values, steps.

`lower` builds a `Lowered` from a function; `backend` (on a GPU) and `nvcc.run_on_host` (the
tests) replay it. Nothing here generates code or touches CuPy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from omnitensor.backend.codegen import Iota, Node, Plan, View, row_major, words
from omnitensor.dtypes import DType
from omnitensor.ir.types import Value

from .source import WARP

__all__ = ["BLOCK", "Iota", "Lowered", "Lowering", "Node", "Start", "Step", "View", "kernel_name",
           "row_major", "words"]

#: Threads per block of thread kernels; warps per block of warp kernels are in the source.
BLOCK = 256


def kernel_name(kind: str, body: str) -> str:
    """A generated kernel's name: its kind and a hash of its text (equal text, equal name)."""
    return f"ot_{kind}_{hashlib.sha256(body.encode()).hexdigest()[:12]}"


#: A runtime start of `dynamic_slice`/`dynamic_update_slice` along one dim: (element stride,
#: largest start, source), the source a 0-d view of an integer slot or a known constant.
Start = tuple[int, int, "View | int"]


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


class Lowered(Plan[Step]):
    """The launch list of a function (`Step`s); a donated input's copy step may be skipped."""

    def plan(self, donated: frozenset[int]) -> tuple[list[Step], dict[int, int]]:
        """The steps to run and the slot -> input bindings when inputs `donated` are donated."""
        bound = {slot: k for slot, k in self.aliases.items() if k in donated}
        return [s for s in self.steps if s.donor is None or s.donor not in donated], bound


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
