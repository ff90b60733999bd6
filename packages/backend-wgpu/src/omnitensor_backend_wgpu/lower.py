"""Lowering a PTIR function to a list of kernel launches (`Step`s) over numbered buffer slots.

Movement ops that are affine (transpose, broadcast, slice, reverse, compatible reshapes) become
views (shape, strides, offset) of a slot and launch nothing. Chains of elementwise ops (with
broadcasts, `iota` and `rng` as leaves) become one generated kernel per chain; a value is
materialized only when it is an output, feeds a non-elementwise op or a view, or is used twice.
Softmax / layer norm / RMS norm decompositions become one row kernel each (see `rows`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, bool_, float16, uint32
from omnitensor.errors import UnsupportedError
from omnitensor.ir.opdef import Trait, get_op
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType, Value

from . import kernels, rows
from .kernels import MAX_RANK, PARAM_WORDS, THREEFRY, prelude
from .wgsl import compute_type, convert_expr, elementwise_expr, load_expr, store_expr

__all__ = ["Lowered", "Step", "View", "lower", "row_major", "storage_nbytes"]

_VIEW_OPS = ("transpose", "broadcast_in_dim", "slice", "reverse", "reshape")


def row_major(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of `shape`."""
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return tuple(reversed(strides))


def storage_nbytes(shape: Sequence[int], dtype: DType) -> int:
    """Bytes a dense buffer of `shape`/`dtype` occupies on the device (bool as u32; >= 4)."""
    item = 4 if dtype == bool_ else dtype.itemsize
    size = math.prod(shape) * item
    return max(4, size + (-size % 4))


@dataclass(frozen=True)
class View:
    """An affine view of slot `slot`: element (i...) lives at offset + sum(i * strides)."""

    slot: int
    dtype: DType
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    def is_dense(self) -> bool:
        """Row-major without gaps (size-1 dims ignored), starting anywhere."""
        want = row_major(self.shape)
        return all(s == w for s, w, d in zip(self.strides, want, self.shape, strict=True) if d != 1)


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


@dataclass(frozen=True)
class Rng:
    """A fused `rng` leaf (threefry of the flat index)."""

    key: View
    dtype: DType
    distribution: str
    stream: int
    shape: tuple[int, ...]


Pending = Node | Iota | Rng


@dataclass
class Step:
    """One kernel launch: its source, bound slots (last written), parameters and grid."""

    kind: str
    source: str
    slots: list[int]
    params: list[int]
    groups: tuple[int, int, int]


@dataclass
class Lowered:
    """The lowering of a function: slots, steps, constants and where each output lives."""

    slot_bytes: list[int] = field(default_factory=list)
    n_inputs: int = 0
    constants: dict[int, np.ndarray[Any, Any]] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    outputs: list[View] = field(default_factory=list)


def _words(values: Sequence[int], size: int = MAX_RANK) -> list[int]:
    out = [int(v) & 0xFFFFFFFF for v in values]
    return out + [0] * (size - len(out))


def linear_groups(n: int, limit: int) -> tuple[int, int, int]:
    """Workgroups for `n` threads in 64s, folded into 2-D beyond `limit` per dimension."""
    groups = -(-n // kernels.WORKGROUP)
    x = min(groups, limit)
    y = -(-groups // x) if x else 0
    if y > limit:
        raise UnsupportedError(f"wgpu: {n} elements exceed the dispatch limit", backend="wgpu")
    return (x, y, 1)


def pack_params(words: Sequence[int]) -> bytes:
    """The uniform block bytes of a parameter list (padded to `PARAM_WORDS`)."""
    if len(words) > PARAM_WORDS:
        raise UnsupportedError(f"wgpu: kernel needs {len(words)} parameters (at most "
                               f"{PARAM_WORDS})", backend="wgpu")
    padded = list(words) + [0] * (PARAM_WORDS - len(words))
    return struct.pack(f"<{PARAM_WORDS}I", *[w & 0xFFFFFFFF for w in padded])


class _Lowering:
    def __init__(self, max_storage: int, max_groups: int) -> None:
        self.out = Lowered()
        self.env: dict[int, View | Pending] = {}
        self.uses: dict[int, int] = {}
        self.max_storage = max_storage
        self.max_groups = max_groups

    # --- slots ----------------------------------------------------------------------------------

    def new_slot(self, shape: Sequence[int], dtype: DType) -> View:
        self.out.slot_bytes.append(storage_nbytes(shape, dtype))
        slot = len(self.out.slot_bytes) - 1
        return View(slot, dtype, tuple(shape), row_major(shape), 0)

    def emit(self, kind: str, source: str, slots: list[int], params: list[int],
             groups: tuple[int, int, int]) -> None:
        if all(groups):
            self.out.steps.append(Step(kind, source, slots, params, groups))

    # --- values ---------------------------------------------------------------------------------

    def count_uses(self, fn: Function) -> None:
        for inst in fn.body:
            for v in inst.operands:
                self.uses[id(v)] = self.uses.get(id(v), 0) + 1
        for v in fn.outputs:
            self.uses[id(v)] = self.uses.get(id(v), 0) + 2

    def view(self, value: Value) -> View:
        """`value` in a slot (materializing a pending computation)."""
        ref = self.env[id(value)]
        if not isinstance(ref, View):
            ref = self.materialize(ref)
            self.env[id(value)] = ref
        return ref

    def dense(self, value: Value) -> View:
        """`value` as a dense row-major view at offset 0 (copying when needed)."""
        ref = self.view(value)
        if ref.is_dense() and ref.offset == 0:
            return ref
        return self.materialize(ref)

    def operand(self, value: Value) -> Any:
        ref = self.env[id(value)]
        if isinstance(ref, View):
            return ref
        if self.uses.get(id(value), 0) > 1:
            return self.view(value)
        return ref

    # --- fused elementwise kernels --------------------------------------------------------------

    def materialize(self, expr: View | Pending, target: View | None = None) -> View:
        """One fused kernel computing `expr` into a new slot (or into the view `target`)."""
        expr = self._split(expr)
        shape = expr.shape
        out = target or self.new_slot(shape, expr.dtype)
        leaves: list[Any] = []
        slots: list[int] = []

        def collect(e: Any) -> None:
            if isinstance(e, Node):
                for a in e.args:
                    collect(a)
                return
            if e not in leaves:
                leaves.append(e)
            for slot in _slots_of(e):
                if slot not in slots:
                    slots.append(slot)

        collect(expr)
        binding = {slot: k for k, slot in enumerate(slots, start=1)}
        out_binding = len(slots) + 1
        dtypes: dict[int, DType] = {slot: uint32 for slot in slots}
        for leaf in leaves:
            if isinstance(leaf, View):
                dtypes[leaf.slot] = leaf.dtype
            elif isinstance(leaf, Rng):
                dtypes[leaf.key.slot] = uint32
        bindings = [(dtypes[s], False) for s in slots] + [(out.dtype, True)]
        out_dense = out.is_dense() and out.offset == 0
        params = [math.prod(shape), len(shape), *_words(shape), out.offset, *_words(out.strides)]
        body: list[str] = []
        loop: list[str] = []
        decls: list[str] = []
        names: dict[int, str] = {}
        for k, leaf in enumerate(leaves):
            base = len(params)
            if isinstance(leaf, View):
                params += [leaf.offset, *_words(leaf.strides)]
                raw = f"b{binding[leaf.slot]}[u32(a{k})]"
                if leaf.is_dense() and leaf.shape == shape:
                    decls.append(f"  let a{k} = pi({base}u) + i32(gid);")
                else:
                    decls.append(f"  var a{k} = pi({base}u);")
                    loop.append(f"    a{k} = a{k} + i32(c) * pi({base + 1}u + u32(d));")
                body.append(f"  let v{k} = {load_expr(leaf.dtype, raw)};")
            elif isinstance(leaf, Iota):
                params += [leaf.dimension % max(len(shape), 1)]
                decls.append(f"  var a{k} = 0u;")
                loop.append(f"    if (u32(d) == p({base}u)) {{ a{k} = c; }}")
                body.append(f"  let v{k} = {convert_expr(uint32, leaf.dtype, f'a{k}')};")
            else:
                params += [leaf.stream, leaf.key.offset, leaf.key.strides[0]]
                kb = f"b{binding[leaf.key.slot]}"
                body.append(f"  let w{k} = threefry({kb}[u32(pi({base + 1}u))], "
                            f"{kb}[u32(pi({base + 1}u) + pi({base + 2}u))], gid, p({base}u));")
                body.append(f"  let v{k} = {_rng_value(leaf, f'w{k}')};")
            names[id(leaf)] = f"v{k}"
        counter = [0]

        def gen(e: Any) -> str:
            if not isinstance(e, Node):
                return names[id(e)] if id(e) in names else names[id(leaves[leaves.index(e)])]
            args = [gen(a) for a in e.args]
            counter[0] += 1
            name = f"t{counter[0]}"
            code = elementwise_expr(e.op, e.operand_dtype, args, e.attrs, e.dtype)
            body.append(f"  let {name}: {compute_type(e.dtype)} = {code};")
            return name

        result = gen(expr)
        if not out_dense:
            decls.append("  var ao = pi(10u);")
            loop.append("    ao = ao + i32(c) * pi(11u + u32(d));")
            target_index = "u32(ao)"
        else:
            target_index = "gid"
        lines = [kernels._LINEAR, "  if (gid >= p(0u)) { return; }", *decls]
        if loop:
            lines += ["  var rem = gid;",
                      "  for (var d = i32(p(1u)) - 1; d >= 0; d = d - 1) {",
                      "    let sz = p(2u + u32(d));", "    let c = rem % sz;",
                      "    rem = rem / sz;", *loop, "  }"]
        lines += body
        lines.append(f"  b{out_binding}[{target_index}] = {store_expr(out.dtype, result)};")
        lines.append("}")
        header = prelude(bindings, math=True)
        if any(isinstance(leaf, Rng) for leaf in leaves):
            header += THREEFRY
        source = header + "\n".join(lines) + "\n"
        self.emit("elementwise", source, [*slots, out.slot], params,
                  linear_groups(math.prod(shape), self.max_groups))
        return out

    def _split(self, expr: Any) -> Any:
        """Materialize sub-chains until the kernel fits the storage-buffer limit."""
        if not isinstance(expr, Node):
            return expr
        while len(_all_slots(expr)) + 1 > self.max_storage:
            widest = max((a for a in expr.args if isinstance(a, Node)),
                         key=lambda a: len(_all_slots(a)), default=None)
            if widest is None:
                raise UnsupportedError(f"{expr.op}: too many operands for one kernel "
                                       f"(limit {self.max_storage} buffers)", backend="wgpu")
            index = next(i for i, a in enumerate(expr.args) if a is widest)
            expr.args[index] = self.materialize(widest)
        return expr


def _slots_of(leaf: Any) -> list[int]:
    if isinstance(leaf, View):
        return [leaf.slot]
    if isinstance(leaf, Rng):
        return [leaf.key.slot]
    return []


def _all_slots(expr: Any) -> set[int]:
    if isinstance(expr, Node):
        out: set[int] = set()
        for a in expr.args:
            out |= _all_slots(a)
        return out
    return set(_slots_of(expr))


def _rng_value(leaf: Rng, words: str) -> str:
    if leaf.distribution == "bits":
        return f"{words}.x"
    mantissa = 10 if leaf.dtype == float16 else 23
    return f"f32({words}.x >> {32 - mantissa}u) * {2.0 ** -mantissa!r}"


# --- views -------------------------------------------------------------------------------------


def view_op(op: str, x: View, attrs: dict[str, Any], shape: tuple[int, ...]) -> View | None:
    """The view `op` makes of `x`, or None when it is not affine (a reshape of a strided view)."""
    if op == "transpose":
        perm = attrs["perm"]
        return View(x.slot, x.dtype, shape, tuple(x.strides[p] for p in perm), x.offset)
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
        if x.is_dense():
            return View(x.slot, x.dtype, shape, row_major(shape), x.offset)
        return None
    raise AssertionError(op)


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


class _Lower(_Lowering):
    def run(self, fn: Function) -> Lowered:
        self.count_uses(fn)
        for spec in fn.inputs:
            assert isinstance(spec.value.type, TensorType)
            self.env[id(spec.value)] = self.new_slot(spec.value.type.shape, spec.value.type.dtype)
        self.out.n_inputs = len(fn.inputs)
        self.body(fn)
        for value in fn.outputs:
            ref = self.view(value)
            if not (ref.is_dense() and ref.offset == 0):
                ref = self.materialize(ref)
            self.out.outputs.append(ref)
        return self.out

    def body(self, fn: Function) -> None:
        fused = rows.match_rows(fn.body, fn.outputs)
        skipped = {i for pattern in fused.values() for i in pattern.covered[:-1]}
        for index, inst in enumerate(fn.body):
            if index in skipped:
                continue
            opdef = get_op(inst.op)
            res = inst.results[0].type
            assert isinstance(res, TensorType)
            attrs = dict(inst.attrs)
            if index in fused:
                self.env[id(inst.result)] = self.row_kernel(fused[index])
            elif inst.op == "custom_call":
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
            elif inst.op == "rng":
                key = self.view(inst.operands[0])
                self.env[id(inst.result)] = Rng(key, res.dtype, attrs["distribution"],
                                                attrs["stream"], res.shape)
            elif inst.op == "constant":
                out = self.new_slot(res.shape, res.dtype)
                self.out.constants[out.slot] = np.asarray(attrs["value"])
                self.env[id(inst.result)] = out
            else:
                handler = getattr(self, "op_" + inst.op)
                self.env[id(inst.result)] = handler(inst.operands, attrs, res)

    def inline(self, operands: Sequence[Value], decomposition: Function,
               results: Sequence[Value]) -> None:
        for spec, value in zip(decomposition.inputs, operands, strict=True):
            self.env[id(spec.value)] = self.env[id(value)]
            self.uses[id(spec.value)] = self.uses.get(id(value), 0)
        inner = _Lower(self.max_storage, self.max_groups)
        inner.count_uses(decomposition)
        for key, count in inner.uses.items():
            self.uses[key] = self.uses.get(key, 0) + count
        self.body(decomposition)
        for value, out in zip(results, decomposition.outputs, strict=True):
            self.env[id(value)] = self.env[id(out)]

    # --- kernels --------------------------------------------------------------------------------

    def row_kernel(self, pattern: rows.RowPattern) -> View:
        """One fused softmax / layer norm / RMS norm kernel (see `rows`)."""
        x = self.view(pattern.x)
        extras = [self.view(v) for v in (pattern.weight, pattern.bias) if v is not None]
        out = self.new_slot(x.shape, x.dtype)
        n_rows = math.prod(x.shape[:-1])
        views = [(v.offset, v.strides[-1], v.strides[:-1]) for v in (x, *extras)]
        params = rows.row_params(n_rows, x.shape[-1], x.shape[:-1], pattern.scales,
                                 pattern.eps, views)
        source = rows.row_source(pattern.kind, x.dtype, weight=pattern.weight is not None,
                                 bias=pattern.bias is not None)
        x_groups = min(n_rows, self.max_groups)
        groups = (x_groups, -(-n_rows // x_groups) if x_groups else 0, 1)
        self.emit(pattern.kind, source, [x.slot, *[v.slot for v in extras], out.slot], params,
                  groups)
        return out

    def _reduce(self, op: str, x: View, axes: Sequence[int], res: TensorType) -> View:
        rank = len(x.shape)
        red = sorted(a % rank for a in axes) if rank else []
        kept = [d for d in range(rank) if d not in red]
        out = self.new_slot(res.shape, res.dtype)
        n_out = math.prod(res.shape)
        params = [n_out, math.prod(x.shape[d] for d in red), len(kept), len(red), x.offset,
                  *_words([x.shape[d] for d in kept]), *_words([x.strides[d] for d in kept]),
                  *_words([x.shape[d] for d in red]), *_words([x.strides[d] for d in red])]
        x_groups = min(n_out, self.max_groups)
        groups = (x_groups, -(-n_out // x_groups) if x_groups else 0, 1)
        self.emit("reduce", kernels.reduce_source(op, x.dtype), [x.slot, out.slot], params,
                  groups)
        return out

    def _reduce_op(self, operands: Sequence[Value], attrs: dict[str, Any],
                   res: TensorType, op: str) -> View:
        return self._reduce(op, self.view(operands[0]), attrs["axes"], res)

    def op_reduce_sum(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce_op(o, a, r, "reduce_sum")

    def op_reduce_prod(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce_op(o, a, r, "reduce_prod")

    def op_reduce_max(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce_op(o, a, r, "reduce_max")

    def op_reduce_min(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce_op(o, a, r, "reduce_min")

    def op_argmax(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("argmax", self.view(o[0]), (a["axis"],), r)

    def op_argmin(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        return self._reduce("argmin", self.view(o[0]), (a["axis"],), r)

    def op_cumsum(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        x = self.view(o[0])
        rank = len(x.shape)
        axis = a["axis"] % rank
        out = self.new_slot(r.shape, r.dtype)
        outer = [d for d in range(rank) if d != axis]
        n_lines = math.prod(x.shape[d] for d in outer)
        params = [n_lines, x.shape[axis], len(outer), x.offset, x.strides[axis],
                  int(a["reverse"]), *_words([x.shape[d] for d in outer]),
                  *_words([x.strides[d] for d in outer]), *_words([out.strides[d] for d in outer]),
                  out.strides[axis]]
        groups = linear_groups(n_lines, self.max_groups) if x.shape[axis] else (0, 0, 0)
        self.emit("cumsum", kernels.cumsum_source(x.dtype), [x.slot, out.slot], params, groups)
        return out

    def op_dot_general(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        from omnitensor.ir.ops.linalg import dimension_numbers

        lt, rt = o[0].type, o[1].type
        assert isinstance(lt, TensorType) and isinstance(rt, TensorType)
        (lc, rc), (lb, rb) = dimension_numbers(lt.shape, rt.shape, a["contracting"],
                                               a.get("batch", ((), ())))
        lf = [d for d in range(len(lt.shape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rt.shape)) if d not in rc and d not in rb]
        lhs = self._grouped(o[0], [list(lb), lf, list(lc)])
        rhs = self._grouped(o[1], [list(rb), list(rc), rf])
        (bs, m, k), (lsb, lsm, lsk), loff, _ = lhs
        (_, _, n), (rsb, rsk, rsn), roff, _ = rhs
        out = self.new_slot(r.shape, r.dtype)
        params = [bs, m, n, k, loff, lsb, lsm, lsk, roff, rsb, rsk, rsn]
        groups = (-(-n // kernels.TILE), -(-m // kernels.TILE), bs)
        if max(groups) > self.max_groups:
            raise UnsupportedError("dot_general: grid exceeds the dispatch limit",
                                   op="dot_general", backend="wgpu")
        self.emit("matmul", kernels.matmul_source(r.dtype),
                  [lhs[3], rhs[3], out.slot], params, groups)
        return out

    def _grouped(self, value: Value, groups: list[list[int]]
                 ) -> tuple[list[int], list[int], int, int]:
        x = self.view(value)
        merged = _merge(x, groups)
        if merged is None:
            x = self.materialize(x)
            merged = _merge(x, groups)
            assert merged is not None
        return merged[0], merged[1], x.offset, x.slot

    def op_gather(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        x, idx = self.view(o[0]), self.view(o[1])
        axis, bd = a["axis"] % len(x.shape), a["batch_dims"]
        n_idx = len(idx.shape) - bd
        op_strides = (list(x.strides[:axis]) + [0] * n_idx + list(x.strides[axis + 1:]))
        idx_strides = (list(idx.strides[:bd]) + [0] * (axis - bd) + list(idx.strides[bd:])
                       + [0] * (len(x.shape) - axis - 1))
        out = self.new_slot(r.shape, r.dtype)
        params = [math.prod(r.shape), len(r.shape), *_words(r.shape), x.offset,
                  *_words(op_strides), idx.offset, *_words(idx_strides), x.shape[axis],
                  x.strides[axis]]
        self.emit("gather", kernels.gather_source(x.dtype, idx.dtype),
                  [x.slot, idx.slot, out.slot], params,
                  linear_groups(math.prod(r.shape), self.max_groups))
        return out

    def _starts(self, values: Sequence[Value]) -> list[View]:
        return [self.dense(v) for v in values]

    def op_dynamic_slice(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        x = self.view(o[0])
        starts = self._starts(o[1:])
        out = self.new_slot(r.shape, r.dtype)
        params = [math.prod(r.shape), len(r.shape), *_words(r.shape), x.offset,
                  *_words(x.strides), *_words(x.shape)]
        self.emit("dynamic_slice",
                  kernels.dynamic_slice_source(x.dtype, [s.dtype for s in starts]),
                  [x.slot, *[s.slot for s in starts], out.slot], params,
                  linear_groups(math.prod(r.shape), self.max_groups))
        return out

    def op_dynamic_update_slice(self, o: Sequence[Value], a: dict[str, Any],
                                r: TensorType) -> View:
        x, u = self.view(o[0]), self.view(o[1])
        starts = self._starts(o[2:])
        out = self.new_slot(r.shape, r.dtype)
        params = [math.prod(r.shape), len(r.shape), *_words(r.shape), x.offset,
                  *_words(x.strides), u.offset, *_words(u.strides), *_words(u.shape)]
        self.emit("dynamic_update_slice",
                  kernels.dynamic_update_slice_source(x.dtype, [s.dtype for s in starts]),
                  [x.slot, u.slot, *[s.slot for s in starts], out.slot], params,
                  linear_groups(math.prod(r.shape), self.max_groups))
        return out

    def op_pad(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        x, value = self.view(o[0]), self.view(o[1])
        out = self.new_slot(r.shape, r.dtype)
        params = [math.prod(r.shape), len(r.shape), *_words(r.shape), x.offset,
                  *_words(x.strides), *_words(x.shape), *_words(a["low"]),
                  *_words(a["interior"]), value.offset]
        self.emit("pad", kernels.pad_source(x.dtype), [x.slot, value.slot, out.slot], params,
                  linear_groups(math.prod(r.shape), self.max_groups))
        return out

    def op_concatenate(self, o: Sequence[Value], a: dict[str, Any], r: TensorType) -> View:
        out = self.new_slot(r.shape, r.dtype)
        axis = a["axis"] % len(r.shape)
        start = 0
        for value in o:
            x = self.view(value)
            if math.prod(x.shape):
                target = View(out.slot, r.dtype, x.shape, out.strides,
                              start * out.strides[axis])
                self.materialize(x, target)
            start += x.shape[axis]
        return out


def lower(fn: Function, *, max_storage: int, max_groups: int) -> Lowered:
    """Lower a verified, supported function (see `WgpuBackend.supports`) to kernel steps."""
    return _Lower(max_storage, max_groups).run(fn)
