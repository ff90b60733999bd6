"""Lowering a PTIR function to a list of kernel launches (`Step`s) over numbered buffer slots.

The walk is the core's (`omnitensor.backend.codegen.KernelLowering`: views, fused elementwise
chains with broadcasts, `iota` and `rng` as leaves, slots); this module prints fused chains as
WGSL kernels and lowers the other ops to the kernels of `kernels`. Softmax / layer norm / RMS
norm composites become one row kernel each (see `rows`).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from omnitensor.backend.codegen import (
    Iota,
    KernelLowering,
    Node,
    Plan,
    View,
    reduce_params,
    row_major,
    tensor_type,
    words,
)
from omnitensor.backend.codegen.rows import register_rows
from omnitensor.backend.codegen.wgsl import WGSL
from omnitensor.dtypes import DType, bool_, float16, float32, uint32
from omnitensor.errors import UnsupportedError
from omnitensor.ir.opdef import OpView
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType, Value

from . import kernels, rows
from .kernels import PARAM_WORDS, THREEFRY, prelude
from .table import FLOATS, LOWERINGS, dtypes_for, result_dtype

__all__ = ["Lowered", "Step", "View", "lower", "row_major", "storage_nbytes"]


def storage_nbytes(shape: Sequence[int], dtype: DType) -> int:
    """Bytes a dense buffer of `shape`/`dtype` occupies on the device (bool as u32; >= 4)."""
    item = 4 if dtype == bool_ else dtype.itemsize
    size = math.prod(shape) * item
    return max(4, size + (-size % 4))


@dataclass(frozen=True)
class Rng:
    """A fused `rng` leaf (threefry of the flat index)."""

    key: View
    dtype: DType
    distribution: str
    stream: int
    shape: tuple[int, ...]


@dataclass
class Step:
    """One kernel launch: its source, bound slots (last written), parameters and grid."""

    kind: str
    source: str
    slots: list[int]
    params: list[int]
    groups: tuple[int, int, int]


class Lowered(Plan[Step]):
    """The kernel steps of a function, over slots of `slot_bytes` bytes each."""

    @property
    def slot_bytes(self) -> list[int]:
        """Device bytes of each slot."""
        return [storage_nbytes(shape, dtype) for shape, dtype in self.slot_shapes]


def linear_groups(n: int, limit: int) -> tuple[int, int, int]:
    """Workgroups for `n` threads in 64s, folded into 2-D beyond `limit` per dimension."""
    groups = -(-n // kernels.WORKGROUP)
    x = min(groups, limit)
    y = -(-groups // x) if x else 0
    if y > limit:
        raise UnsupportedError(f"wgpu: {n} elements exceed the dispatch limit", backend="wgpu")
    return (x, y, 1)


def _rows_groups(n: int, limit: int) -> tuple[int, int, int]:
    """One workgroup per row, folded into 2-D beyond `limit`."""
    x = min(n, limit)
    return (x, -(-n // x) if x else 0, 1)


def pack_params(values: Sequence[int]) -> bytes:
    """The uniform block bytes of a parameter list (padded to `PARAM_WORDS`)."""
    if len(values) > PARAM_WORDS:
        raise UnsupportedError(f"wgpu: kernel needs {len(values)} parameters (at most "
                               f"{PARAM_WORDS})", backend="wgpu")
    padded = list(values) + [0] * (PARAM_WORDS - len(values))
    return struct.pack(f"<{PARAM_WORDS}I", *[w & 0xFFFFFFFF for w in padded])


class _Lower(KernelLowering):
    printer = WGSL

    def __init__(self, max_storage: int, max_groups: int) -> None:
        super().__init__(Lowered())
        self.out: Lowered
        self.max_storage = max_storage
        self.max_groups = max_groups

    def emit(self, step: Step) -> None:
        if all(step.groups):
            self.out.steps.append(step)

    def output(self, value: Value) -> View:
        return self.dense(value)

    def materialize(self, expr: Any, target: View | None = None) -> View:
        """One fused kernel computing `expr` into a new slot (or into the view `target`)."""
        expr = self._split(expr)
        shape = expr.shape
        out = target or self.new_slot(shape, expr.dtype)
        leaves = self.leaves(expr)
        slots: list[int] = []
        for leaf in leaves:
            slots += [s for s in _slots_of(leaf) if s not in slots]
        binding = {slot: k for k, slot in enumerate(slots, start=1)}
        dtypes: dict[int, DType] = {slot: uint32 for slot in slots}
        dtypes |= {leaf.slot: leaf.dtype for leaf in leaves if isinstance(leaf, View)}
        bindings = [(dtypes[s], False) for s in slots] + [(out.dtype, True)]
        params = [math.prod(shape), len(shape), *words(shape), out.offset, *words(out.strides)]
        body: list[str] = []
        loop: list[str] = []
        decls: list[str] = []
        names: dict[int, str] = {}
        for k, leaf in enumerate(leaves):
            base = len(params)
            ctype = WGSL.compute_type(leaf.dtype)
            if isinstance(leaf, View):
                params += [leaf.offset, *words(leaf.strides)]
                if leaf.is_dense() and leaf.shape == shape:
                    decls.append(f"  let a{k} = pi({base}u) + i32(gid);")
                else:
                    decls.append(f"  var a{k} = pi({base}u);")
                    loop.append(f"    a{k} = a{k} + i32(c) * pi({base + 1}u + u32(d));")
                code = WGSL.load(leaf.dtype, f"b{binding[leaf.slot]}[u32(a{k})]")
            elif isinstance(leaf, Iota):
                params += [leaf.dimension % max(len(shape), 1)]
                decls.append(f"  var a{k} = 0u;")
                loop.append(f"    if (u32(d) == p({base}u)) {{ a{k} = c; }}")
                code = WGSL.convert(uint32, leaf.dtype, f"a{k}")
            else:
                params += [leaf.stream, leaf.key.offset, leaf.key.strides[0]]
                kb = f"b{binding[leaf.key.slot]}"
                body.append(f"  let w{k} = threefry({kb}[u32(pi({base + 1}u))], "
                            f"{kb}[u32(pi({base + 1}u) + pi({base + 2}u))], gid, p({base}u));")
                code = _rng_value(leaf, f"w{k}")
            body.append(WGSL.declare(f"v{k}", ctype, code))
            names[id(leaf)] = f"v{k}"
        result = self.chain(expr, names, body)
        target_index = "gid"
        if not (out.is_dense() and out.offset == 0):
            decls.append("  var ao = pi(10u);")
            loop.append("    ao = ao + i32(c) * pi(11u + u32(d));")
            target_index = "u32(ao)"
        lines = [kernels._LINEAR, "  if (gid >= p(0u)) { return; }", *decls]
        if loop:
            lines += ["  var rem = gid;",
                      "  for (var d = i32(p(1u)) - 1; d >= 0; d = d - 1) {",
                      "    let sz = p(2u + u32(d));", "    let c = rem % sz;",
                      "    rem = rem / sz;", *loop, "  }"]
        lines += body
        lines.append(f"  b{len(slots) + 1}[{target_index}] = {WGSL.store(out.dtype, result)};")
        header = prelude(bindings, math=True)
        if any(isinstance(leaf, Rng) for leaf in leaves):
            header += THREEFRY
        source = header + "\n".join([*lines, "}"]) + "\n"
        self.emit(Step("elementwise", source, [*slots, out.slot], params,
                       linear_groups(math.prod(shape), self.max_groups)))
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

    # --- kernels --------------------------------------------------------------------------------

    def rows(self, kind: str, x: Value, weight: Value | None, bias: Value | None, eps: float,
             axes: int = 1) -> View:
        """A row composite over the trailing `axes` of x (weight/bias: vectors along a row)."""
        xv = self.view(x) if axes == 1 else self.dense(x)
        outer = xv.shape[:len(xv.shape) - axes]
        length = math.prod(xv.shape[len(outer):])
        flat = View(xv.slot, xv.dtype, (*outer, length), row_major((*outer, length)), xv.offset)
        if axes == 1:  # one normalized axis: any strides (several: rows of a dense copy)
            flat = xv
        extras = []
        for v in (weight, bias):
            if v is not None:
                d = self.dense(v)  # spread along the rows: stride 0 over the leading dims
                extras.append(View(d.slot, d.dtype, flat.shape, (0,) * len(outer) + (1,),
                                   d.offset))
        mean = (float(length), False)
        out = self.row_kernel(kind, flat, extras, (mean, mean), eps, weight=weight is not None,
                              bias=bias is not None)
        return View(out.slot, out.dtype, xv.shape, row_major(xv.shape))

    def row_kernel(self, kind: str, x: View, extras: list[View],
                   scales: tuple[tuple[float, bool], tuple[float, bool]], eps: float, *,
                   weight: bool, bias: bool) -> View:
        """One row kernel (`rows.row_source`) over the last axis of x (extras: x's shape)."""
        out = self.new_slot(x.shape, x.dtype)
        n_rows = math.prod(x.shape[:-1])
        views = [(v.offset, v.strides[-1], v.strides[:-1]) for v in (x, *extras)]
        params = rows.row_params(n_rows, x.shape[-1], x.shape[:-1], scales, eps, views)
        self.emit(Step(kind, rows.row_source(kind, x.dtype, weight=weight, bias=bias),
                       [x.slot, *[v.slot for v in extras], out.slot], params,
                       _rows_groups(n_rows, self.max_groups)))
        return out

    def reduction(self, op: str, x: View, axes: Sequence[int], res: TensorType) -> View:
        out = self.new_slot(res.shape, res.dtype)
        params = reduce_params(x, axes)
        self.emit(Step("reduce", kernels.reduce_source(op, x.dtype), [x.slot, out.slot], params,
                       _rows_groups(params[0], self.max_groups)))
        return out

    def cumsum(self, inst: Instruction) -> list[View]:
        x, r = self.view(inst.operands[0]), tensor_type(inst.result)
        rank = len(x.shape)
        axis = inst.attrs["axis"] % rank
        out = self.new_slot(r.shape, r.dtype)
        outer = [d for d in range(rank) if d != axis]
        n_lines = math.prod(x.shape[d] for d in outer)
        params = [n_lines, x.shape[axis], len(outer), x.offset, x.strides[axis],
                  int(inst.attrs["reverse"]), *words([x.shape[d] for d in outer]),
                  *words([x.strides[d] for d in outer]), *words([out.strides[d] for d in outer]),
                  out.strides[axis]]
        groups = linear_groups(n_lines, self.max_groups) if x.shape[axis] else (0, 0, 0)
        self.emit(Step("cumsum", kernels.cumsum_source(x.dtype), [x.slot, out.slot], params,
                       groups))
        return [out]

    def dot_general(self, inst: Instruction) -> list[View]:
        r = tensor_type(inst.result)
        (bs, m, n, k), lg, rg = self.matmul_layout(inst, self.view(inst.operands[0]),
                                                   self.view(inst.operands[1]))
        out = self.new_slot(r.shape, r.dtype)
        groups = (-(-n // kernels.TILE), -(-m // kernels.TILE), bs)
        if max(groups) > self.max_groups:
            raise UnsupportedError("dot_general: grid exceeds the dispatch limit",
                                   op="dot_general", backend="wgpu")
        self.emit(Step("matmul", kernels.matmul_source(r.dtype), [lg[4], rg[4], out.slot],
                       [bs, m, n, k, *lg[:4], *rg[:4]], groups))
        return [out]

    def _launch(self, kind: str, source: str, inputs: Sequence[View], r: TensorType,
                params: list[int]) -> list[View]:
        """A thread-per-output-element kernel over `inputs` into a new dense slot."""
        out = self.new_slot(r.shape, r.dtype)
        self.emit(Step(kind, source, [*[v.slot for v in inputs], out.slot],
                       [math.prod(r.shape), len(r.shape), *words(r.shape), *params],
                       linear_groups(math.prod(r.shape), self.max_groups)))
        return [out]

    def gather(self, inst: Instruction) -> list[View]:
        x, idx = self.view(inst.operands[0]), self.view(inst.operands[1])
        axis, bd = inst.attrs["axis"] % len(x.shape), inst.attrs["batch_dims"]
        n_idx = len(idx.shape) - bd
        op_strides = (list(x.strides[:axis]) + [0] * n_idx + list(x.strides[axis + 1:]))
        idx_strides = (list(idx.strides[:bd]) + [0] * (axis - bd) + list(idx.strides[bd:])
                       + [0] * (len(x.shape) - axis - 1))
        params = [x.offset, *words(op_strides), idx.offset, *words(idx_strides), x.shape[axis],
                  x.strides[axis]]
        return self._launch("gather", kernels.gather_source(x.dtype, idx.dtype), [x, idx],
                            tensor_type(inst.result), params)

    def dynamic_slice(self, inst: Instruction) -> list[View]:
        x = self.view(inst.operands[0])
        starts = [self.dense(v) for v in inst.operands[1:]]
        source = kernels.dynamic_slice_source(x.dtype, [s.dtype for s in starts])
        return self._launch("dynamic_slice", source, [x, *starts], tensor_type(inst.result),
                            [x.offset, *words(x.strides), *words(x.shape)])

    def dynamic_update_slice(self, inst: Instruction) -> list[View]:
        x, u = self.view(inst.operands[0]), self.view(inst.operands[1])
        starts = [self.dense(v) for v in inst.operands[2:]]
        source = kernels.dynamic_update_slice_source(x.dtype, [s.dtype for s in starts])
        params = [x.offset, *words(x.strides), u.offset, *words(u.strides), *words(u.shape)]
        return self._launch("dynamic_update_slice", source, [x, u, *starts],
                            tensor_type(inst.result), params)

    def pad(self, inst: Instruction) -> list[View]:
        x, value = self.view(inst.operands[0]), self.view(inst.operands[1])
        params = [x.offset, *words(x.strides), *words(x.shape), *words(inst.attrs["low"]),
                  *words(inst.attrs["interior"]), value.offset]
        return self._launch("pad", kernels.pad_source(x.dtype), [x, value],
                            tensor_type(inst.result), params)


_Lower.table = LOWERINGS


def _method(name: str) -> Callable[[_Lower, OpView], list[Any]]:
    method = getattr(_Lower, name)
    return lambda lw, view: method(lw, view.inst)


for _name in ("cumsum", "dot_general", "pad"):
    LOWERINGS.register(_name, dtypes=dtypes_for(_name))(_method(_name))
for _name in ("gather", "dynamic_slice", "dynamic_update_slice"):
    LOWERINGS.register(_name, dtypes=dtypes_for(_name), when=result_dtype)(_method(_name))


def _rng_normal(view: OpView) -> str | None:
    if view.inst.attrs["distribution"] == "normal":
        return "rng: the normal distribution is not supported by backend 'wgpu'"
    return result_dtype(view)


@LOWERINGS.register("rng", dtypes=(uint32,), when=_rng_normal)
def _rng(lw: _Lower, view: OpView) -> list[Any]:
    inst = view.inst
    res = tensor_type(inst.result)
    return [Rng(lw.view(inst.operands[0]), res.dtype, inst.attrs["distribution"],
                inst.attrs["stream"], res.shape)]


register_rows(LOWERINGS, FLOATS, ("softmax", "log_softmax"))
# NOTE: float16 norms are expanded: the decomposition squares in float16 (overflowing to inf
# where the kernel's float32 statistics would not), and the decomposition defines the result.
register_rows(LOWERINGS, (float32,), ("layer_norm", "rms_norm"))


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




def lower(fn: Function, *, max_storage: int, max_groups: int) -> Lowered:
    """Lower a verified, supported function (see `WgpuBackend.supports`) to kernel steps."""
    lw = _Lower(max_storage, max_groups)
    inputs = [lw.new_slot(tensor_type(spec.value).shape, tensor_type(spec.value).dtype)
              for spec in fn.inputs]
    lw.lower(fn, inputs)
    return lw.out
