"""Lowering a PTIR function to a pre-planned launch list over numbered buffer slots (no CuPy here).

Movement ops that are affine (transpose, broadcast, slice, reverse, compatible reshapes) become
views (shape, strides, offset) of a slot and launch nothing. Chains of elementwise ops (with
broadcasts and `iota` leaves) become one generated CUDA C kernel each; a value is materialized
only when it is an output, feeds a non-elementwise op, or is used twice. Everything about a
launch (kernel, grid, slots, int64 parameters) is decided here, once per program; running is a
loop over `Step`s. The same `Lowered` runs on a GPU (`backend`) and on the host (the tests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, bfloat16, float16, float32, uint8
from omnitensor.errors import UnsupportedError
from omnitensor.ir.opdef import Trait, get_op
from omnitensor.ir.program import Function
from omnitensor.ir.types import QTensorType, TensorType, Value

from . import fusion, kernels, lower_ops
from .kernels import MAX_RANK, QUANT_BLOCKS
from .plan import Iota, Lowered, Node, Start, Step, View, kernel_name, row_major, words
from .source import (
    PRELUDE,
    Arg,
    compute_type,
    elementwise_expr,
    load_expr,
    storage_type,
    store_expr,
    thread_kernel,
)

__all__ = ["Lowered", "Step", "View", "lower", "row_major"]

_VIEW_OPS = ("transpose", "broadcast_in_dim", "slice", "reverse", "reshape")


class _Lower:
    def __init__(self) -> None:
        self.out = Lowered()
        self.env: dict[int, View | Node | Iota] = {}
        self.uses: dict[int, int] = {}
        # uses not yet consumed: a slot may be written in place once no live value reads it
        self.left: dict[int, int] = {}
        self.skip: set[int] = set()
        self.fused: dict[int, fusion.Match] = {}

    def new_slot(self, shape: Sequence[int], dtype: DType) -> View:
        self.out.slot_shapes.append((tuple(shape), dtype))
        return View(len(self.out.slot_shapes) - 1, dtype, tuple(shape), row_major(shape), 0)

    def emit(self, step: Step) -> None:
        if step.n > 0:
            self.out.steps.append(step)

    def count(self, fn: Function) -> None:
        for inst in fn.body:
            for v in inst.operands:
                self.uses[id(v)] = self.uses.get(id(v), 0) + 1
                self.left[id(v)] = self.left.get(id(v), 0) + 1
        for v in fn.outputs:
            self.uses[id(v)] = self.uses.get(id(v), 0) + 2
            self.left[id(v)] = self.left.get(id(v), 0) + 2
        for match in fusion.find(fn):
            self.fused[id(match.root)] = match
            self.skip.update(id(inst) for inst in match.inner)

    # --- values -----------------------------------------------------------------------------

    def view(self, value: Value) -> View:
        ref = self.env[id(value)]
        if not isinstance(ref, View):
            ref = self.materialize(ref)
            self.env[id(value)] = ref
        return ref

    def dense(self, value: Value | View) -> View:
        ref = self.view(value) if isinstance(value, Value) else value
        return ref if ref.is_dense() and ref.offset == 0 else self.materialize(ref)

    def operand(self, value: Value) -> Any:
        ref = self.env[id(value)]
        if isinstance(ref, View) or self.uses.get(id(value), 0) <= 1:
            return ref
        return self.view(value)

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
        leaves: list[View | Iota] = []

        def collect(e: Any) -> None:
            if isinstance(e, Node):
                for a in e.args:
                    collect(a)
            elif e not in leaves:
                leaves.append(e)

        collect(expr)
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
                body.append(f"  {compute_type(leaf.dtype)} v{k} = {load_expr(leaf.dtype, raw)};")
            else:
                params += [leaf.dimension % max(rank, 1)]
                body.append(f"  long long c{k} = t;\n  for (int d = {rank} - 1; d > (int)P[{base}];"
                            f" --d) c{k} /= P[1 + d];\n  c{k} %= P[1 + P[{base}]];")
                ctype = compute_type(leaf.dtype)
                body.append(f"  {ctype} v{k} = ({ctype})c{k};")
            names[id(leaf)] = f"v{k}"
        counter = [0]

        def gen(e: Any) -> str:
            if not isinstance(e, Node):
                return names[id(leaves[leaves.index(e)])]
            args = [gen(a) for a in e.args]
            counter[0] += 1
            code = elementwise_expr(e.op, e.operand_dtype, args, e.attrs, e.dtype)
            body.append(f"  {compute_type(e.dtype)} t{counter[0]} = {code};")
            return f"t{counter[0]}"

        result = gen(expr)
        args = [Arg(f"b{i}", f"const {storage_type(dtypes[s])}*") for i, s in enumerate(slots)]
        args.append(Arg("y", f"{storage_type(out.dtype)}*"))
        body.append(f"  y[ot_offset(t, P, {rank}, 1, {1 + MAX_RANK}, {2 + MAX_RANK}) + dy] = "
                    f"{store_expr(out.dtype, result)};")
        text = "\n".join(body)
        signature = text + "|" + ",".join(a.ctype for a in args)
        name = kernel_name("fused", signature)
        self.emit(Step("thread", name, PRELUDE + thread_kernel(name, args, text),
                       [*slots, out.slot], params, math.prod(shape)))
        return out

    # --- instructions -----------------------------------------------------------------------

    def run(self, fn: Function, layouts: Sequence[tuple[tuple[int, ...], int] | None]) -> Lowered:
        self.count(fn)
        for k, spec in enumerate(fn.inputs):
            t = spec.value.type
            if isinstance(t, QTensorType):
                nbytes = QUANT_BLOCKS[t.format][1]
                rows = math.prod(t.logical_shape[:-1])
                raw = (rows, t.logical_shape[-1] // QUANT_BLOCKS[t.format][0] * nbytes)
                self.env[id(spec.value)] = self.new_slot(raw, uint8)
                continue
            assert isinstance(t, TensorType)
            view = self.new_slot(t.shape, t.dtype)
            layout = layouts[k] if k < len(layouts) else None
            if layout is not None:
                view = View(view.slot, t.dtype, t.shape, layout[0], layout[1])
            self.env[id(spec.value)] = view
        self.out.n_inputs = len(fn.inputs)
        self.body(fn)
        for value in fn.outputs:
            self.out.outputs.append(self.view(value))
        return self.out

    def body(self, fn: Function) -> None:
        for inst in fn.body:
            for v in inst.operands:
                self.left[id(v)] = self.left.get(id(v), 0) - 1
            if id(inst) in self.skip:
                continue
            match = self.fused.get(id(inst))
            if match is not None:
                self.env[id(inst.result)] = fusion.lower_match(self, match)
                continue
            opdef = get_op(inst.op)
            res = inst.results[0].type
            assert isinstance(res, TensorType)
            attrs = dict(inst.attrs)
            if inst.op == "custom_call":
                self.inline(inst.operands, attrs["decomposition"], inst.results)
            elif opdef.has(Trait.ELEMENTWISE):
                args = [self.operand(v) for v in inst.operands]
                src = inst.operands[1].type if inst.op == "select" else inst.operands[0].type
                assert isinstance(src, TensorType)
                self.env[id(inst.result)] = Node(inst.op, args, src.dtype, res.dtype, attrs,
                                                 res.shape)
            elif inst.op in _VIEW_OPS:
                x = self.view(inst.operands[0])
                made = view_op(inst.op, x, attrs, res.shape)
                if made is None:
                    made = view_op(inst.op, self.materialize(x), attrs, res.shape)
                assert made is not None
                self.env[id(inst.result)] = made
            elif inst.op == "iota":
                self.env[id(inst.result)] = Iota(attrs["dimension"], res.dtype, res.shape)
            elif inst.op == "constant":
                out = self.new_slot(res.shape, res.dtype)
                self.out.constants[out.slot] = np.asarray(attrs["value"], dtype=res.dtype.np)
                self.env[id(inst.result)] = out
            elif inst.op in lower_ops.HANDLERS:
                refs = lower_ops.HANDLERS[inst.op](self, inst.operands, attrs, inst.results)
                for value, ref in zip(inst.results, refs, strict=True):
                    self.env[id(value)] = ref
            else:
                handler = getattr(self, "op_" + inst.op, None)
                if handler is None:
                    raise UnsupportedError(f"{inst.op}: no CUDA kernel (backend 'cuda')",
                                           op=inst.op, backend="cuda")
                self.env[id(inst.result)] = handler(inst.operands, attrs, res)

    def inline(self, operands: Sequence[Value], decomposition: Function,
               results: Sequence[Value]) -> None:
        for spec, value in zip(decomposition.inputs, operands, strict=True):
            self.env[id(spec.value)] = self.env[id(value)]
            self.uses[id(spec.value)] = self.uses.get(id(value), 0)
            self.left[id(spec.value)] = 0
        self.count(decomposition)
        self.body(decomposition)
        for value, out in zip(results, decomposition.outputs, strict=True):
            self.env[id(value)] = self.env[id(out)]
            self.left.pop(id(out), None)

    # --- kernels ----------------------------------------------------------------------------

    def _reduce(self, op: str, x: View, axes: Sequence[int], res: TensorType) -> View:
        rank = len(x.shape)
        red = sorted(a % rank for a in axes) if rank else []
        kept = [d for d in range(rank) if d not in red]
        out = self.new_slot(res.shape, res.dtype)
        rows = math.prod(res.shape)
        params = [rows, math.prod(x.shape[d] for d in red), len(kept), len(red), x.offset,
                  *words([x.shape[d] for d in kept]), *words([x.strides[d] for d in kept]),
                  *words([x.shape[d] for d in red]), *words([x.strides[d] for d in red])]
        name, source = kernels.reduce_source(op, x.dtype)
        self.emit(Step("warp", name, source, [x.slot, out.slot], params, rows))
        return out

    def op_reduce_sum(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("reduce_sum", self.view(o[0]), a["axes"], r)

    def op_reduce_prod(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("reduce_prod", self.view(o[0]), a["axes"], r)

    def op_reduce_max(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("reduce_max", self.view(o[0]), a["axes"], r)

    def op_reduce_min(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("reduce_min", self.view(o[0]), a["axes"], r)

    def op_argmax(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("argmax", self.view(o[0]), (a["axis"],), r)

    def op_argmin(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("argmin", self.view(o[0]), (a["axis"],), r)

    def op_concatenate(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        out = self.new_slot(r.shape, r.dtype)
        axis = a["axis"] % len(r.shape)
        start = 0
        for value in o:
            x = self.view(value)
            if math.prod(x.shape):
                self.materialize(x, View(out.slot, r.dtype, x.shape, out.strides,
                                         start * out.strides[axis]))
            start += x.shape[axis]
        return out

    def op_dot_general(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        from omnitensor.ir.ops.linalg import dimension_numbers

        lt, rt = o[0].type, o[1].type
        assert isinstance(lt, TensorType) and isinstance(rt, TensorType)
        (lc, rc), (lb, rb) = dimension_numbers(lt.shape, rt.shape, a["contracting"],
                                               a.get("batch", ((), ())))
        lf = [d for d in range(len(lt.shape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rt.shape)) if d not in rc and d not in rb]
        # NOTE: cuBLAS has no bfloat16 path in CuPy and float16 must accumulate in float32:
        # both are widened to float32 once, multiplied, and rounded once (as the reference).
        wide = r.dtype in (float16, bfloat16)
        lhs, rhs = self.view(o[0]), self.view(o[1])
        if wide:
            lhs = self.materialize(Node("convert", [lhs], lt.dtype, float32, {}, lt.shape))
            rhs = self.materialize(Node("convert", [rhs], rt.dtype, float32, {}, rt.shape))
        lg = self._grouped(lhs, [list(lb), lf, list(lc)])
        rg = self._grouped(rhs, [list(rb), list(rc), rf])
        (bs, m, k), (lsb, lsm, lsk), loff, lslot = lg
        (_, _, n), (rsb, rsk, rsn), roff, rslot = rg
        out = self.new_slot(r.shape, float32 if wide else r.dtype)
        params = [bs, m, n, k, loff, lsb, lsm, lsk, roff, rsb, rsk, rsn, 0, m * n, n, 1]
        self.emit(Step("matmul", "matmul", "", [lslot, rslot, out.slot], params, bs * m * n))
        if wide:
            return self.materialize(Node("convert", [out], float32, r.dtype, {}, r.shape))
        return out

    def _grouped(self, x: View, groups: list[list[int]]) -> tuple[list[int], list[int], int, int]:
        merged = _merge(x, groups)
        if merged is None:
            x = self.materialize(x)
            merged = _merge(x, groups)
            assert merged is not None
        return merged[0], merged[1], x.offset, x.slot

    def op_dequantize(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        q = self.view(o[0])
        out = self.new_slot(r.shape, r.dtype)
        name, source = kernels.dequantize_source(a["format"], r.dtype)
        self.emit(Step("thread", name, source, [q.slot, out.slot],
                       list(QUANT_BLOCKS[a["format"]]), math.prod(r.shape)))
        return out

    def op_qmatmul(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        x = self.dense(o[0])
        w = self.view(o[1])
        wt = o[1].type
        assert isinstance(wt, QTensorType)
        n_out, k = wt.logical_shape
        rows = math.prod(r.shape)
        out = self.new_slot(r.shape, r.dtype)
        name, source = kernels.qmatmul_source(a["format"], r.dtype)
        params = [rows, n_out, k, *QUANT_BLOCKS[a["format"]]]
        self.emit(Step("warp", name, source, [x.slot, w.slot, out.slot], params, rows))
        return out


def _merge(view: View, groups: Sequence[Sequence[int]]) -> tuple[list[int], list[int]] | None:
    """(sizes, strides) of `view` with each group of consecutive dims merged, or None."""
    sizes, strides = [], []
    for group in groups:
        dims = [d for d in group if view.shape[d] != 1]
        size = math.prod(view.shape[d] for d in group)
        if not dims:
            sizes.append(size)
            strides.append(0)
            continue
        for a, b in zip(dims, dims[1:], strict=False):
            if view.strides[a] != view.strides[b] * view.shape[b]:
                return None
        sizes.append(size)
        strides.append(view.strides[dims[-1]])
    return sizes, strides


def view_op(op: str, x: View, attrs: dict[str, Any], shape: tuple[int, ...]) -> View | None:
    """The view `op` makes of `x`, or None when it is not affine (a reshape of a strided view)."""
    if op == "transpose":
        return View(x.slot, x.dtype, shape, tuple(x.strides[p] for p in attrs["perm"]), x.offset)
    if op == "broadcast_in_dim":
        spread = [0] * len(shape)
        for i, d in enumerate(attrs["dims"]):
            spread[d] = x.strides[i] if x.shape[i] == shape[d] else 0
        return View(x.slot, x.dtype, shape, tuple(spread), x.offset)
    if op == "slice":
        offset = x.offset + sum(s * st for s, st in zip(attrs["start"], x.strides, strict=True))
        stepped = tuple(st * k for st, k in zip(x.strides, attrs["stride"], strict=True))
        return View(x.slot, x.dtype, shape, stepped, offset)
    if op == "reverse":
        flipped, offset = list(x.strides), x.offset
        for a in attrs["axes"]:
            a %= len(x.shape)
            if x.shape[a] > 0:
                offset += (x.shape[a] - 1) * flipped[a]
            flipped[a] = -flipped[a]
        return View(x.slot, x.dtype, shape, tuple(flipped), offset)
    if op == "reshape":
        return View(x.slot, x.dtype, shape, row_major(shape), x.offset) if x.is_dense() else None
    raise AssertionError(op)


def lower(fn: Function, layouts: Sequence[tuple[tuple[int, ...], int] | None] = ()) -> Lowered:
    """Lower a verified, supported function to its launch list.

    Args:
        fn: the function.
        layouts: per input, (element strides, element offset) of a strided input buffer, or
            None for a dense one.
    """
    return _Lower().run(fn, layouts)
