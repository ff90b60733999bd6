"""Lowering of the data-dependent ops: gather, scatter_add, dynamic slices, pad, cumsum, sort, rng.

Each handler takes the lowering in progress (`plan.Lowering`), the instruction's operands,
attributes and results, and returns one slot view per result. `dynamic_update_slice` writes
in place whenever nothing live reads its operand (always for a donated KV cache), so a decode
step never copies its cache; `dynamic_slice` with known starts is a view.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from omnitensor.dtypes import bfloat16, float16, float32
from omnitensor.ir.opdef import OpView
from omnitensor.ir.types import TensorType, Value

from . import indexing
from .plan import Lowering, Node, Start, Step, View, row_major, words
from .table import LOWERINGS, declared_dtypes

__all__ = ["register"]

Handler = Callable[[Lowering, Sequence[Value], dict[str, Any], Sequence[Value]], list[View]]


def _type(value: Value) -> TensorType:
    t = value.type
    assert isinstance(t, TensorType)
    return t


def _blocks(shape: tuple[int, ...], index_shape: tuple[int, ...], axis: int,
            batch_dims: int) -> tuple[int, int, int, int, int]:
    """(B, P, n, Q, I): the operand as (B, P, n, Q) blocks and the indices as (B, I)."""
    return (math.prod(shape[:batch_dims]), math.prod(shape[batch_dims:axis]), shape[axis],
            math.prod(shape[axis + 1:]), math.prod(index_shape[batch_dims:]))


def _gather(lw: Lowering, o: Sequence[Value], a: dict[str, Any],
            r: Sequence[Value]) -> list[View]:
    xt, it, rt = _type(o[0]), _type(o[1]), _type(r[0])
    axis = a["axis"] % len(xt.shape)
    b, p, n, q, i = _blocks(xt.shape, it.shape, axis, a["batch_dims"])
    x, ix = lw.dense(o[0]), lw.dense(o[1])
    out = lw.new_slot(rt.shape, rt.dtype)
    name, source = indexing.gather_source(xt.dtype.np.itemsize, it.dtype)
    lw.emit(Step("thread", name, source, [x.slot, ix.slot, out.slot], [p, n, q, i],
                 b * p * i * q))
    return [out]


def _scatter_add(lw: Lowering, o: Sequence[Value], a: dict[str, Any],
                 r: Sequence[Value]) -> list[View]:
    xt, it = _type(o[0]), _type(o[1])
    axis = a["axis"] % len(xt.shape)
    b, p, n, q, i = _blocks(xt.shape, it.shape, axis, a["batch_dims"])
    ix = lw.dense(o[1])
    # NOTE: float16/bfloat16 accumulate in float32 and round once (as the reference): the
    # scatter runs on float32 copies, converted back at the end.
    wide = xt.dtype in (float16, bfloat16)
    if wide:
        updates = lw.materialize(Node("convert", [lw.operand(o[2])], xt.dtype, float32, {},
                                      _type(o[2]).shape))
        base = lw.materialize(Node("convert", [lw.operand(o[0])], xt.dtype, float32, {},
                                   xt.shape))
    else:
        updates = lw.dense(o[2])
        base = lw.writable(o[0], [updates, ix])
    name, source = indexing.scatter_add_source(base.dtype, _type(o[1]).dtype)
    lw.emit(Step("thread", name, source, [ix.slot, updates.slot, base.slot], [p, n, q, i],
                 b * p * q if i else 0))
    if wide:
        return [lw.materialize(Node("convert", [base], float32, xt.dtype, {}, xt.shape))]
    return [base]


def _starts(lw: Lowering, base: View, sizes: Sequence[int],
            values: Sequence[Value]) -> list[Start]:
    return [(base.strides[d], base.shape[d] - sizes[d], lw.start(v))
            for d, v in enumerate(values)]


def _dynamic_slice(lw: Lowering, o: Sequence[Value], a: dict[str, Any],
                   r: Sequence[Value]) -> list[View]:
    x = lw.view(o[0])
    sizes = tuple(a["sizes"])
    starts = _starts(lw, x, sizes, o[1:])
    known = [(st, lim, s) for st, lim, s in starts if isinstance(s, int)]
    if len(known) == len(starts):  # known starts: a view, no copy
        offset = x.offset + sum(min(max(s, 0), lim) * st for st, lim, s in known)
        return [View(x.slot, x.dtype, sizes, x.strides, offset)]
    leaf = View(x.slot, x.dtype, sizes, x.strides, x.offset)
    return [lw.materialize(leaf, leaf_starts=starts)]


def _dynamic_update_slice(lw: Lowering, o: Sequence[Value], a: dict[str, Any],
                          r: Sequence[Value]) -> list[View]:
    update = lw.operand(o[1])
    shape = _type(o[1]).shape
    runtime = [lw.start(v) for v in o[2:]]
    base = lw.writable(o[0], [update, *[s for s in runtime if isinstance(s, View)]])
    starts = [(base.strides[d], base.shape[d] - shape[d], s) for d, s in enumerate(runtime)]
    if math.prod(shape):
        target = View(base.slot, base.dtype, shape, base.strides, base.offset)
        lw.materialize(update, target, out_starts=starts)
    return [base]


def _pad(lw: Lowering, o: Sequence[Value], a: dict[str, Any], r: Sequence[Value]) -> list[View]:
    x, value, rt = lw.view(o[0]), lw.view(o[1]), _type(r[0])
    out = lw.new_slot(rt.shape, rt.dtype)
    params = [len(rt.shape), *words(rt.shape), x.offset, *words(x.strides), value.offset,
              *words(a["low"]), *words(a["interior"]), *words(x.shape)]
    name, source = indexing.pad_source(rt.dtype.np.itemsize)
    lw.emit(Step("thread", name, source, [x.slot, value.slot, out.slot], params,
                 math.prod(rt.shape)))
    return [out]


def _line_params(x: View, y_shape: tuple[int, ...], axis: int, param: int) -> list[int]:
    """The line layout of `indexing` (cumsum, sort, top_k) for x and a dense y."""
    kept = [d for d in range(len(x.shape)) if d != axis]
    ys = row_major(y_shape)
    return [len(kept), x.shape[axis], x.offset, param, *words([x.shape[d] for d in kept]),
            *words([x.strides[d] for d in kept]), x.strides[axis],
            *words([ys[d] for d in kept]), ys[axis], 0]


def _cumsum(lw: Lowering, o: Sequence[Value], a: dict[str, Any],
            r: Sequence[Value]) -> list[View]:
    x, rt = lw.view(o[0]), _type(r[0])
    axis = a["axis"] % len(rt.shape)
    out = lw.new_slot(rt.shape, rt.dtype)
    name, source = indexing.cumsum_source(rt.dtype)
    lines = math.prod(rt.shape) // rt.shape[axis] if rt.shape[axis] else 0
    lw.emit(Step("thread", name, source, [x.slot, out.slot],
                 _line_params(x, rt.shape, axis, int(a["reverse"])), lines))
    return [out]


def _sort_like(lw: Lowering, x: View, results: Sequence[Value], axis: int, param: int,
               top_k: bool) -> list[View]:
    vt = _type(results[0])
    values = lw.new_slot(vt.shape, vt.dtype)
    indices = lw.new_slot(vt.shape, _type(results[1]).dtype)
    name, source = indexing.sort_source(vt.dtype, top_k=top_k)
    count = math.prod(x.shape) if math.prod(vt.shape) else 0
    lw.emit(Step("thread", name, source, [x.slot, values.slot, indices.slot],
                 _line_params(x, vt.shape, axis, param), count))
    return [values, indices]


def _sort(lw: Lowering, o: Sequence[Value], a: dict[str, Any], r: Sequence[Value]) -> list[View]:
    x = lw.view(o[0])
    return _sort_like(lw, x, r, a["axis"] % len(x.shape), int(a["descending"]), False)


def _top_k(lw: Lowering, o: Sequence[Value], a: dict[str, Any], r: Sequence[Value]) -> list[View]:
    x = lw.view(o[0])
    return _sort_like(lw, x, r, len(x.shape) - 1, int(a["k"]), True)


def _rng(lw: Lowering, o: Sequence[Value], a: dict[str, Any], r: Sequence[Value]) -> list[View]:
    key, rt = lw.view(o[0]), _type(r[0])
    out = lw.new_slot(rt.shape, rt.dtype)
    name, source = indexing.rng_source(rt.dtype, a["distribution"])
    lw.emit(Step("thread", name, source, [key.slot, out.slot],
                 [key.offset, key.strides[0], int(a["stream"])], math.prod(rt.shape)))
    return [out]


def _entry(handler: Handler) -> Callable[[Lowering, OpView], list[View]]:
    def lowering(lw: Lowering, view: OpView) -> list[View]:
        inst = view.inst
        return handler(lw, inst.operands, dict(inst.attrs), inst.results)

    return lowering


def register() -> None:
    """Register the data-dependent ops into the CUDA lowering table."""
    handlers: dict[str, Handler] = {
        "gather": _gather, "scatter_add": _scatter_add, "dynamic_slice": _dynamic_slice,
        "dynamic_update_slice": _dynamic_update_slice, "pad": _pad, "cumsum": _cumsum,
        "sort": _sort, "top_k": _top_k, "rng": _rng,
    }
    for name, handler in handlers.items():
        LOWERINGS.register(name, dtypes=declared_dtypes(name))(_entry(handler))
