"""The lowering algorithm shared by kernel-source backends: values, slots, fusion, plans.

A `KernelLowering` walks a function once. Every value is either a `View` of a numbered slot or
a pending elementwise computation (`Node`, with `Iota` and backend leaves such as views at the
bottom): chains of elementwise ops are grouped into one generated kernel per chain
(`materialize`), and a value is materialized only when it is an output, feeds a non-elementwise
op or a view, or is used twice. Movement ops are views (`views.view_op`). Constants are slots
filled before the first run. Everything else is the backend's: `lower_inst` gives the views of
an instruction's results (its kernels are appended to the `Plan` with `emit`), and
`materialize` prints a chain with the backend's dialect of `CPrinter` (`chain`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from omnitensor.dtypes import DType
from omnitensor.ir.opdef import get_op
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType, Value

from ..lowering import LoweringTable
from .printer import CPrinter
from .views import View, merge_dims, row_major, view_op

__all__ = ["MAX_CHAIN", "Iota", "KernelLowering", "Node", "Plan", "tensor_type"]

StepT = TypeVar("StepT")


@dataclass
class Node:
    """A pending elementwise computation (not yet in any buffer)."""

    op: str
    args: list[Any]
    operand_dtype: DType
    dtype: DType
    attrs: dict[str, Any]
    shape: tuple[int, ...]
    size: int = 1  # pending nodes in this chain, this one included


#: The most pending nodes one generated kernel holds: a longer chain is materialized in parts,
#: so a long chain never becomes one huge kernel (compile time, and the recursive printing).
MAX_CHAIN = 128


@dataclass(frozen=True)
class Iota:
    """A fused `iota` leaf."""

    dimension: int
    dtype: DType
    shape: tuple[int, ...]


@dataclass
class Plan(Generic[StepT]):
    """A lowered function: slots (shape, dtype), steps, constants and where outputs live.

    Slots ``0 .. n_inputs - 1`` are the inputs. `steps` are the backend's launch records.
    `aliases` maps a slot to the input it may alias (when that input is donated).
    """

    slot_shapes: list[tuple[tuple[int, ...], DType]] = field(default_factory=list)
    n_inputs: int = 0
    constants: dict[int, np.ndarray[Any, Any]] = field(default_factory=dict)
    steps: list[StepT] = field(default_factory=list)
    outputs: list[View] = field(default_factory=list)
    aliases: dict[int, int] = field(default_factory=dict)

    def slot_size(self, slot: int) -> int:
        """Elements of slot `slot`."""
        return math.prod(self.slot_shapes[slot][0])


def tensor_type(value: Value) -> TensorType:
    """The tensor type of `value` (verified programs only hold tensors where kernels run)."""
    t = value.type
    assert isinstance(t, TensorType)
    return t


class KernelLowering:
    """One function's lowering in progress (subclassed per backend)."""

    #: The backend's kernel language.
    printer: CPrinter
    #: The backend's lowering table: `fn(lowering, op view) -> [result view or pending value]`.
    table: LoweringTable

    def __init__(self, plan: Plan[Any]) -> None:
        self.out = plan
        self.env: dict[int, Any] = {}
        self.uses: dict[int, int] = {}
        # uses not yet consumed: a slot may be written in place once no live value reads it
        self.left: dict[int, int] = {}

    # --- backend hooks --------------------------------------------------------------------------

    def emit(self, step: Any) -> None:
        """Append a launch (the backend drops empty ones)."""
        raise NotImplementedError

    def materialize(self, expr: Any, target: View | None = None) -> View:
        """One generated kernel computing `expr` into a new slot (or into the view `target`)."""
        raise NotImplementedError

    def rows(self, kind: str, x: Value, weight: Value | None, bias: Value | None, eps: float,
             axes: int = 1) -> View:
        """One row kernel of a row composite (`rows.ROW_KINDS`) over the trailing `axes`."""
        raise NotImplementedError

    # --- slots and values -----------------------------------------------------------------------

    def new_slot(self, shape: Sequence[int], dtype: DType) -> View:
        """A fresh dense slot."""
        self.out.slot_shapes.append((tuple(shape), dtype))
        return View(len(self.out.slot_shapes) - 1, dtype, tuple(shape), row_major(shape), 0)

    def count(self, fn: Function) -> None:
        """Count the uses of every value of `fn` (outputs count twice: they must exist)."""
        for inst in fn.body:
            for v in inst.operands:
                self.uses[id(v)] = self.uses.get(id(v), 0) + 1
                self.left[id(v)] = self.left.get(id(v), 0) + 1
        for v in fn.outputs:
            self.uses[id(v)] = self.uses.get(id(v), 0) + 2
            self.left[id(v)] = self.left.get(id(v), 0) + 2

    def view(self, value: Value) -> View:
        """`value` in a slot (materializing a pending computation)."""
        ref = self.env[id(value)]
        if not isinstance(ref, View):
            ref = self.materialize(ref)
            self.env[id(value)] = ref
        return ref

    def dense(self, value: Value | View) -> View:
        """`value` as a dense row-major view at offset 0 (copying when needed)."""
        ref = self.view(value) if isinstance(value, Value) else value
        return ref if ref.is_dense() and ref.offset == 0 else self.materialize(ref)

    def operand(self, value: Value) -> Any:
        """`value` as a fusable operand: its view or pending computation (shared ones in slots)."""
        ref = self.env[id(value)]
        if isinstance(ref, View) or self.uses.get(id(value), 0) <= 1:
            return ref
        return self.view(value)

    # --- the walk -------------------------------------------------------------------------------

    def lower(self, fn: Function, inputs: Sequence[View]) -> Plan[Any]:
        """Lower `fn` whose inputs live in the views `inputs` (slots ``0 ..``)."""
        self.count(fn)
        for spec, ref in zip(fn.inputs, inputs, strict=True):
            self.env[id(spec.value)] = ref
        self.out.n_inputs = len(fn.inputs)
        self.body(fn)
        self.out.outputs.extend(self.output(v) for v in fn.outputs)
        return self.out

    def output(self, value: Value) -> View:
        """Where output `value` is left (a view; backends may require it dense)."""
        return self.view(value)

    def body(self, fn: Function) -> None:
        """Lower every instruction of `fn` in order."""
        for inst in fn.body:
            for v in inst.operands:
                self.left[id(v)] = self.left.get(id(v), 0) - 1
            self.instruction(inst)

    def instruction(self, inst: Instruction) -> None:
        """Lower one instruction through the backend's lowering table."""
        lowering = self.table.lookup(inst)
        refs = lowering(self, get_op(inst.op).view(inst))
        for value, ref in zip(inst.results, refs, strict=True):
            self.env[id(value)] = ref

    def pending(self, inst: Instruction) -> Node:
        """An elementwise instruction (or elementwise composite) as a pending chain node."""
        res = tensor_type(inst.results[0])
        src = tensor_type(inst.operands[1] if inst.op == "select" else inst.operands[0])
        args = [self.operand(v) for v in inst.operands]
        size = 1 + sum(a.size for a in args if isinstance(a, Node))
        if size > MAX_CHAIN:
            args = [self.materialize(a) if isinstance(a, Node) else a for a in args]
            size = 1
        return Node(inst.op, args, src.dtype, res.dtype, dict(inst.attrs), res.shape, size)

    def movement(self, inst: Instruction) -> View:
        """A movement op as a view (of a dense copy when the view is not affine)."""
        res = tensor_type(inst.results[0])
        x = self.view(inst.operands[0])
        made = view_op(inst.op, x, inst.attrs, res.shape)
        if made is None:
            made = view_op(inst.op, self.materialize(x), inst.attrs, res.shape)
        assert made is not None
        return made

    def constant(self, inst: Instruction) -> View:
        """A constant: a slot filled before the first run."""
        res = tensor_type(inst.results[0])
        out = self.new_slot(res.shape, res.dtype)
        self.out.constants[out.slot] = np.asarray(inst.attrs["value"], dtype=res.dtype.np)
        return out

    def inline(self, operands: Sequence[Value], decomposition: Function) -> list[Any]:
        """Lower a decomposition in place of the instruction that carries it: its results."""
        for spec, value in zip(decomposition.inputs, operands, strict=True):
            self.env[id(spec.value)] = self.env[id(value)]
            self.uses[id(spec.value)] = self.uses.get(id(value), 0)
            self.left[id(spec.value)] = 0
        self.count(decomposition)
        self.body(decomposition)
        for out in decomposition.outputs:
            self.left.pop(id(out), None)
        return [self.env[id(out)] for out in decomposition.outputs]

    # --- fused chains ---------------------------------------------------------------------------

    @staticmethod
    def leaves(expr: Any) -> list[Any]:
        """The distinct leaves (views, iotas, backend leaves) of a pending chain, in order."""
        found: list[Any] = []

        def collect(e: Any) -> None:
            if isinstance(e, Node):
                for a in e.args:
                    collect(a)
            elif e not in found:
                found.append(e)

        collect(expr)
        return found

    def chain(self, expr: Any, names: dict[int, str], body: list[str]) -> str:
        """Print the statements of `expr` into `body` (leaves named by `names`, keyed by id).

        Returns the name of the local holding the result.
        """
        leaves = self.leaves(expr)
        counter = [0]

        def gen(e: Any) -> str:
            if not isinstance(e, Node):
                return names[id(leaves[leaves.index(e)])]
            args = [gen(a) for a in e.args]
            counter[0] += 1
            code = self.printer.expr(e.op, e.operand_dtype, args, e.attrs, e.dtype)
            body.append(self.printer.declare(f"t{counter[0]}", self.printer.compute_type(e.dtype),
                                             code))
            return f"t{counter[0]}"

        return gen(expr)

    # --- shared layouts -------------------------------------------------------------------------

    def reduction(self, op: str, x: View, axes: Sequence[int], res: TensorType) -> View:
        """One reduction kernel (`views.reduce_params` layout) of `x` over `axes`."""
        raise NotImplementedError

    def reduce(self, inst: Instruction) -> list[View]:
        """`reduce_*` over ``axes`` or `argmax`/`argmin` over ``axis``."""
        axes = inst.attrs["axes"] if "axes" in inst.attrs else (inst.attrs["axis"],)
        return [self.reduction(inst.op, self.view(inst.operands[0]), axes,
                               tensor_type(inst.result))]

    def concatenate(self, inst: Instruction) -> list[View]:
        """Each operand copied by one fused kernel into its part of a new slot."""
        r = tensor_type(inst.result)
        out = self.new_slot(r.shape, r.dtype)
        axis = inst.attrs["axis"] % len(r.shape)
        start = 0
        for value in inst.operands:
            x = self.view(value)
            if math.prod(x.shape):
                self.materialize(x, View(out.slot, r.dtype, x.shape, out.strides,
                                         start * out.strides[axis]))
            start += x.shape[axis]
        return [out]

    def grouped(self, x: View, groups: list[list[int]]) -> tuple[list[int], list[int], int, int]:
        """(sizes, strides, offset, slot) of `x` with dim groups merged (copied when needed)."""
        merged = merge_dims(x, groups)
        if merged is None:
            x = self.materialize(x)
            merged = merge_dims(x, groups)
            assert merged is not None
        return merged[0], merged[1], x.offset, x.slot

    def matmul_layout(self, inst: Instruction, lhs: View, rhs: View
                      ) -> tuple[tuple[int, int, int, int], list[int], list[int]]:
        """`dot_general` as a batched (B, M, K) x (B, K, N) product of `lhs` and `rhs`.

        Returns ((B, M, N, K), [offset, stride B, M, K, slot] of lhs, [offset, stride B, K, N,
        slot] of rhs); operands whose dims do not merge are copied first.
        """
        from omnitensor.ir.ops.linalg import dimension_numbers

        lt, rt = tensor_type(inst.operands[0]), tensor_type(inst.operands[1])
        (lc, rc), (lb, rb) = dimension_numbers(lt.shape, rt.shape, inst.attrs["contracting"],
                                               inst.attrs.get("batch", ((), ())))
        lf = [d for d in range(len(lt.shape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rt.shape)) if d not in rc and d not in rb]
        (bs, m, k), ls, loff, lslot = self.grouped(lhs, [list(lb), lf, list(lc)])
        (_, _, n), rs, roff, rslot = self.grouped(rhs, [list(rb), list(rc), rf])
        return (bs, m, n, k), [loff, *ls, lslot], [roff, *rs, rslot]
