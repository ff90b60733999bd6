"""Lowering a PTIR function to a pre-planned launch list over numbered buffer slots (no CuPy here).

The walk is the core's (`omnitensor.backend.codegen.KernelLowering`: views, fused elementwise
chains, slots); this module prints fused chains as CUDA C thread kernels and lowers the other
ops to warp/thread kernels and cuBLAS products. Everything about a launch (kernel, grid, slots,
int64 parameters) is decided here, once per program; running is a loop over `Step`s. The same
`Lowered` runs on a GPU (`backend`) and on the host (the tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from omnitensor.backend.codegen import KernelLowering, reduce_params, tensor_type
from omnitensor.backend.codegen.rows import register_rows
from omnitensor.dtypes import DType, bfloat16, float16, float32, float64, uint8
from omnitensor.ir.opdef import OpView
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import QTensorType, TensorType, Value

from . import kernels, lower_ops
from .kernels import MAX_RANK, QUANT_BLOCKS
from .plan import Iota, Lowered, Node, Start, Step, View, kernel_name, row_major, words
from .source import CUDA, PRELUDE, Arg, thread_kernel
from .table import LOWERINGS, declared_dtypes

__all__ = ["Lowered", "Step", "View", "lower", "row_major"]


class _Lower(KernelLowering):
    printer = CUDA

    def __init__(self) -> None:
        super().__init__(Lowered())
        self.out: Lowered

    def emit(self, step: Step) -> None:
        if step.n > 0:
            self.out.steps.append(step)

    # --- values -----------------------------------------------------------------------------

    def start(self, value: Value) -> View | int:
        ref = self.view(value)
        known = self.out.constants.get(ref.slot)
        if known is not None:
            return int(known.reshape(-1)[ref.offset])
        return ref

    def _slot_read(self, slot: int, expr: Any) -> bool:
        if isinstance(expr, Node):
            return any(self._slot_read(slot, a) for a in expr.args)
        if isinstance(expr, list | tuple):
            return any(self._slot_read(slot, a) for a in expr)
        return isinstance(expr, View) and expr.slot == slot

    def writable(self, value: Value, reads: Any) -> View:
        """A dense whole-slot view of `value` to write into, in place when that is safe.

        In place when nothing live (nor `reads`) reads its slot; otherwise a copy, marked as
        skippable when the slot is an input's (a donated input is then written in place).
        """
        ref = self.view(value)
        slot = ref.slot
        whole = (ref.offset == 0 and ref.strides == row_major(ref.shape)
                 and math.prod(ref.shape) == self.out.slot_size(slot))
        free = (whole and slot not in self.out.constants and not self._slot_read(slot, reads)
                and not any(self.left.get(k, 0) > 0 and self._slot_read(slot, e)
                            for k, e in self.env.items()))
        if free and slot >= self.out.n_inputs:
            return ref
        copy = self.materialize(ref)
        if free and self.out.steps and self.out.steps[-1].slots[-1] == copy.slot:
            self.out.steps[-1].donor = slot
            self.out.aliases[copy.slot] = slot
        return copy

    # --- fused elementwise kernels ----------------------------------------------------------

    def _starts(self, starts: Sequence[Start], var: str, params: list[int], slots: list[int],
                dtypes: dict[int, DType], body: list[str]) -> int:
        """C code adding the clamped runtime starts to `var`; returns the constant part."""
        fixed = 0
        body.append(f"  long long {var} = 0;")
        for stride, limit, source in starts:
            if isinstance(source, int):
                fixed += min(max(source, 0), limit) * stride
                continue
            if source.slot not in slots:
                slots.append(source.slot)
            dtypes[source.slot] = source.dtype
            base = len(params)
            params += [source.offset, limit, stride]
            body.append(f"  {{ long long s = (long long)b{slots.index(source.slot)}[P[{base}]]; "
                        f"s = s < 0 ? 0 : (s > P[{base + 1}] ? P[{base + 1}] : s); "
                        f"{var} += s * P[{base + 2}]; }}")
        return fixed

    def materialize(self, expr: View | Node | Iota, target: View | None = None, *,
                    out_starts: Sequence[Start] = (),
                    leaf_starts: Sequence[Start] = ()) -> View:
        """One generated kernel computing `expr` into a new slot (or into the view `target`).

        `out_starts` shift the written view by runtime start indices (dynamic_update_slice);
        `leaf_starts` shift the view `expr` itself (dynamic_slice). Both are clamped in-kernel.
        """
        shape = expr.shape
        out = target or self.new_slot(shape, expr.dtype)
        leaves = self.leaves(expr)
        slots: list[int] = []
        dtypes: dict[int, DType] = {}
        for leaf in leaves:
            if isinstance(leaf, View) and leaf.slot not in slots:
                slots.append(leaf.slot)
                dtypes[leaf.slot] = leaf.dtype
        rank = len(shape)
        # P: [rank, shape[8], out offset, out strides[8], then per leaf offset + strides[8],
        # then per runtime start (offset, largest start, stride)]
        params = [rank, *words(shape), out.offset, *words(out.strides)]
        body: list[str] = []
        params[1 + MAX_RANK] += self._starts(out_starts, "dy", params, slots, dtypes, body)
        leaf_shift = 0
        if leaf_starts:
            leaf_shift = self._starts(leaf_starts, "dx", params, slots, dtypes, body)
        names: dict[int, str] = {}
        for k, leaf in enumerate(leaves):
            base = len(params)
            if isinstance(leaf, View):
                params += [leaf.offset + leaf_shift, *words(leaf.strides)]
                shift = " + dx" if leaf_starts else ""
                raw = (f"b{slots.index(leaf.slot)}[ot_offset(t, P, {rank}, 1, {base}, {base + 1})"
                       f"{shift}]")
                body.append(CUDA.declare(f"v{k}", CUDA.compute_type(leaf.dtype),
                                         CUDA.load(leaf.dtype, raw)))
            else:
                params += [leaf.dimension % max(rank, 1)]
                body.append(f"  long long c{k} = t;\n  for (int d = {rank} - 1; d > (int)P[{base}];"
                            f" --d) c{k} /= P[1 + d];\n  c{k} %= P[1 + P[{base}]];")
                ctype = CUDA.compute_type(leaf.dtype)
                body.append(f"  {ctype} v{k} = ({ctype})c{k};")
            names[id(leaf)] = f"v{k}"
        result = self.chain(expr, names, body)
        args = [Arg(f"b{i}", f"const {CUDA.storage_type(dtypes[s])}*") for i, s in enumerate(slots)]
        args.append(Arg("y", f"{CUDA.storage_type(out.dtype)}*"))
        body.append(f"  y[ot_offset(t, P, {rank}, 1, {1 + MAX_RANK}, {2 + MAX_RANK}) + dy] = "
                    f"{CUDA.store(out.dtype, result)};")
        text = "\n".join(body)
        signature = text + "|" + ",".join(a.ctype for a in args)
        name = kernel_name("fused", signature)
        self.emit(Step("thread", name, PRELUDE + thread_kernel(name, args, text),
                       [*slots, out.slot], params, math.prod(shape)))
        return out

    # --- instructions -----------------------------------------------------------------------

    def run(self, fn: Function, layouts: Sequence[tuple[tuple[int, ...], int] | None]) -> Lowered:
        inputs = []
        for k, spec in enumerate(fn.inputs):
            t = spec.value.type
            if isinstance(t, QTensorType):
                nbytes = QUANT_BLOCKS[t.format][1]
                rows = math.prod(t.logical_shape[:-1])
                raw = (rows, t.logical_shape[-1] // QUANT_BLOCKS[t.format][0] * nbytes)
                inputs.append(self.new_slot(raw, uint8))
                continue
            assert isinstance(t, TensorType)
            view = self.new_slot(t.shape, t.dtype)
            layout = layouts[k] if k < len(layouts) else None
            if layout is not None:
                view = View(view.slot, t.dtype, t.shape, layout[0], layout[1])
            inputs.append(view)
        self.lower(fn, inputs)
        return self.out

    # --- kernels ----------------------------------------------------------------------------

    def reduction(self, op: str, x: View, axes: Sequence[int], res: TensorType) -> View:
        out = self.new_slot(res.shape, res.dtype)
        params = reduce_params(x, axes)
        name, source = kernels.reduce_source(op, x.dtype)
        self.emit(Step("warp", name, source, [x.slot, out.slot], params, params[0]))
        return out

    def dot_general(self, inst: Instruction) -> list[View]:
        lt, rt, r = (tensor_type(v) for v in (*inst.operands, inst.result))
        # NOTE: cuBLAS has no bfloat16 path in CuPy and float16 must accumulate in float32:
        # both are widened to float32 once, multiplied, and rounded once (as the reference).
        wide = r.dtype in (float16, bfloat16)
        lhs, rhs = self.view(inst.operands[0]), self.view(inst.operands[1])
        if wide:
            lhs = self.materialize(Node("convert", [lhs], lt.dtype, float32, {}, lt.shape))
            rhs = self.materialize(Node("convert", [rhs], rt.dtype, float32, {}, rt.shape))
        (bs, m, n, k), lg, rg = self.matmul_layout(inst, lhs, rhs)
        out = self.new_slot(r.shape, float32 if wide else r.dtype)
        params = [bs, m, n, k, *lg[:4], *rg[:4], 0, m * n, n, 1]
        self.emit(Step("matmul", "matmul", "", [lg[4], rg[4], out.slot], params, bs * m * n))
        if wide:
            return [self.materialize(Node("convert", [out], float32, r.dtype, {}, r.shape))]
        return [out]

    def dequantize(self, inst: Instruction) -> list[View]:
        q, r, fmt = self.view(inst.operands[0]), tensor_type(inst.result), inst.attrs["format"]
        out = self.new_slot(r.shape, r.dtype)
        name, source = kernels.dequantize_source(fmt, r.dtype)
        self.emit(Step("thread", name, source, [q.slot, out.slot], list(QUANT_BLOCKS[fmt]),
                       math.prod(r.shape)))
        return [out]

    def qmatmul(self, inst: Instruction) -> list[View]:
        x, w = self.dense(inst.operands[0]), self.view(inst.operands[1])
        r, wt, fmt = tensor_type(inst.result), inst.operands[1].type, inst.attrs["format"]
        assert isinstance(wt, QTensorType)
        n_out, k = wt.logical_shape
        rows = math.prod(r.shape)
        out = self.new_slot(r.shape, r.dtype)
        name, source = kernels.qmatmul_source(fmt, r.dtype)
        params = [rows, n_out, k, *QUANT_BLOCKS[fmt]]
        self.emit(Step("warp", name, source, [x.slot, w.slot, out.slot], params, rows))
        return [out]


    def rows(self, kind: str, x: Value, weight: Value | None, bias: Value | None, eps: float,
             axes: int = 1) -> View:
        """One warp-per-row kernel (`kernels.row_source`) over the trailing `axes` of x."""
        xv = self.dense(x)
        shape = xv.shape
        length = math.prod(shape[len(shape) - axes:])
        rows = math.prod(shape) // length if length else 0
        out = self.new_slot(shape, xv.dtype)
        w = self.dense(weight) if weight is not None else xv
        b = self.dense(bias) if bias is not None else xv
        name, source = kernels.row_source(kind, xv.dtype)
        params = [rows, length, int(np.float64(eps).view(np.int64)), int(weight is not None),
                  int(bias is not None)]
        self.emit(Step("warp", name, source, [xv.slot, w.slot, b.slot, out.slot], params, rows))
        return out


_Lower.table = LOWERINGS
lower_ops.register()
_ROW_DTYPES: Final = (float16, bfloat16, float32, float64)


@LOWERINGS.register("dot_general", dtypes=declared_dtypes("dot_general"))
def _dot_general(lw: _Lower, view: OpView) -> list[View]:
    return lw.dot_general(view.inst)


def _known_format(view: OpView) -> str | None:
    fmt = view.inst.attrs["format"]
    if fmt not in QUANT_BLOCKS:
        return (f"{view.inst.op}: format {fmt!r} has no CUDA kernel in backend 'cuda' (it has "
                f"{', '.join(QUANT_BLOCKS)})")
    return None


@LOWERINGS.register("dequantize", dtypes=declared_dtypes("dequantize"), when=_known_format)
def _dequantize(lw: _Lower, view: OpView) -> list[View]:
    return lw.dequantize(view.inst)


@LOWERINGS.register("qmatmul", dtypes=declared_dtypes("qmatmul"), when=_known_format)
def _qmatmul(lw: _Lower, view: OpView) -> list[View]:
    return lw.qmatmul(view.inst)


register_rows(LOWERINGS, _ROW_DTYPES)


def lower(fn: Function, layouts: Sequence[tuple[tuple[int, ...], int] | None] = ()) -> Lowered:
    """Lower a verified, supported function to its launch list.

    Args:
        fn: the function.
        layouts: per input, (element strides, element offset) of a strided input buffer, or
            None for a dense one.
    """
    return _Lower().run(fn, layouts)
