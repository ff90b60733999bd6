"""Fused row kernels over the last axis, matched in PTIR: softmax and RMS norm.

The matches are structural, with every intermediate read only inside the pattern:

- softmax: ``reduce_max -> broadcast -> sub -> exp -> reduce_sum -> broadcast -> div``; one
  pass for the maximum, one for exp and the sum (writing the exponentials), one to scale.
- RMS norm: ``mul(x, x) -> reduce_sum -> [reshape] -> div/mul by n -> add eps -> rsqrt ->
  broadcast -> mul(x, .)``, with the following ``mul`` by a weight of the same shape taken in
  when it is the only reader; one pass for the sum of squares, one to scale.

A row at a time, so a row stays in cache: one read and one write of memory in all.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from omnitensor.dtypes import float32, float64
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType

from ._compat import jit, prange
from .codegen import PARALLEL_THRESHOLD
from .mathlib import exp32

__all__ = ["RowMatch", "match_rows", "row_step"]


@dataclass
class RowMatch:
    """A matched row pattern.

    Attributes:
        kind: ``"softmax"`` or ``"rms_norm"``.
        insts: its instructions (all skipped by the plan; the kernel replaces them).
        x: the input value id; out: the result value id.
        shape: the (input and result) shape; the pattern reduces its last axis.
        weight: (RMS norm) the value multiplied in last, or None.
        mean_op, n, eps: (RMS norm) ``div`` or ``mul`` by the literal `n`, then ``+ eps``.
    """

    kind: str
    insts: list[Instruction]
    x: int
    out: int
    shape: tuple[int, ...]
    weight: int | None = None
    mean_op: str = "div"
    n: float = 1.0
    eps: float = 0.0


def _is_row_broadcast(inst: Instruction, shape: tuple[int, ...]) -> bool:
    return (inst.op == "broadcast_in_dim" and inst.attrs["shape"] == shape
            and inst.attrs["dims"] == tuple(range(len(shape) - 1)))


def _match_softmax(div: Instruction, producers: dict[int, Instruction]) -> list[
        Instruction] | None:
    get = producers.get
    e, sb = (get(v.id) for v in div.operands)
    if e is None or sb is None or e.op != "exp":
        return None
    result = div.results[0].type
    assert isinstance(result, TensorType)
    shape = result.shape
    if not shape or not _is_row_broadcast(sb, shape):
        return None
    s = get(sb.operands[0].id)
    last = (len(shape) - 1,)
    if s is None or s.op != "reduce_sum" or s.attrs["axes"] not in (last, (-1,)):
        return None
    if s.operands[0].id != e.results[0].id:
        return None
    d = get(e.operands[0].id)
    if d is None or d.op != "sub":
        return None
    x, mb = d.operands
    mb_inst = get(mb.id)
    if mb_inst is None or not _is_row_broadcast(mb_inst, shape):
        return None
    m = get(mb_inst.operands[0].id)
    if m is None or m.op != "reduce_max" or m.attrs["axes"] not in (last, (-1,)):
        return None
    if m.operands[0].id != x.id:
        return None
    return [m, mb_inst, d, e, s, sb, div]


def _literal(inst: Instruction | None, producers: dict[int, Instruction]) -> float | None:
    """The scalar of a (broadcast) one-element constant, else None."""
    if inst is not None and inst.op == "broadcast_in_dim":
        inst = producers.get(inst.operands[0].id)
    if inst is None or inst.op != "constant" or inst.attrs["value"].size != 1:
        return None
    return float(inst.attrs["value"].reshape(-1)[0])


def _match_rms(mul: Instruction, producers: dict[int, Instruction]) -> tuple[
        list[Instruction], int, str, float, float] | None:
    """``mul(x, broadcast(rsqrt(add(div(sum(x*x), n), eps))))``: (insts, x, op, n, eps)."""
    get = producers.get
    result = mul.results[0].type
    assert isinstance(result, TensorType)
    shape = result.shape
    for x, b in (mul.operands, mul.operands[::-1]):
        bc = get(b.id)
        if bc is None or bc.op != "broadcast_in_dim" or bc.attrs["shape"] != shape:
            continue
        if bc.attrs["dims"] != tuple(range(len(shape))):
            if not _is_row_broadcast(bc, shape):
                continue
        rs = get(bc.operands[0].id)
        if rs is None or rs.op != "rsqrt":
            continue
        add = get(rs.operands[0].id)
        if add is None or add.op != "add":
            continue
        first, second = (get(v.id) for v in add.operands)
        eps, mean = _literal(second, producers), first
        if eps is None:
            eps, mean = _literal(first, producers), second
        if eps is None or mean is None or mean.op not in ("div", "mul"):
            continue
        inner, count = (get(v.id) for v in mean.operands)
        n = _literal(count, producers)
        if n is None or inner is None:
            continue
        chain = [bc, rs, add, mean]
        if inner.op == "reshape":
            chain.append(inner)
            inner = get(inner.operands[0].id)
        last = (len(shape) - 1,)
        if inner is None or inner.op != "reduce_sum" or inner.attrs["axes"] not in (last, (-1,)):
            continue
        sq = get(inner.operands[0].id)
        if sq is None or sq.op != "mul" or sq.operands[0].id != x.id or sq.operands[1].id != x.id:
            continue
        return [sq, inner, *reversed(chain), mul], x.id, mean.op, n, eps
    return None


def match_rows(function: Function) -> dict[int, RowMatch]:
    """Matched patterns keyed by the body index of their last instruction."""
    producers = {v.id: inst for inst in function.body for v in inst.results}
    index = {id(inst): i for i, inst in enumerate(function.body)}
    users: dict[int, list[Instruction]] = {}
    for inst in function.body:
        for v in inst.operands:
            users.setdefault(v.id, []).append(inst)
    outputs = {v.id for v in function.outputs}
    matches: dict[int, RowMatch] = {}
    claimed: set[int] = set()
    for inst in function.body:
        result = inst.results[0].type
        if inst.op != "div" or not isinstance(result, TensorType):
            continue
        if result.dtype not in (float32, float64):
            continue
        insts = _match_softmax(inst, producers)
        if insts is None:
            continue
        members = {id(i) for i in insts}
        inner = [v.id for i in insts[:-1] for v in i.results]
        if any(v in outputs or any(id(u) not in members for u in users.get(v, ()))
               for v in inner):
            continue
        x = insts[0].operands[0].id
        matches[index[id(inst)]] = RowMatch("softmax", insts, x, inst.results[0].id,
                                            result.shape)
    for inst in function.body:
        result = inst.results[0].type
        if inst.op != "mul" or not isinstance(result, TensorType) or not result.shape:
            continue
        if result.dtype not in (float32, float64):
            continue
        found = _match_rms(inst, producers)
        if found is None:
            continue
        insts, x, mean_op, n, eps = found
        # NOTE: the broadcast constants (n, eps) may be shared with other norms: they stay.
        weight = None
        readers = users.get(inst.results[0].id, [])
        if len(readers) == 1 and inst.results[0].id not in outputs:
            nxt = readers[0]
            other = [v for v in nxt.operands if v.id != inst.results[0].id]
            if (nxt.op == "mul" and len(other) == 1 and other[0].type == result
                    and nxt.results[0].type == result):
                insts = [*insts, nxt]
                weight = other[0].id
        members = {id(i) for i in insts}
        if any(id(i) in claimed for i in insts):
            continue
        inner = [v.id for i in insts[:-1] for v in i.results]
        if any(v in outputs or any(id(u) not in members for u in users.get(v, ()))
               for v in inner):
            continue
        claimed.update(members)
        last = insts[-1]
        matches[index[id(last)]] = RowMatch("rms_norm", insts, x, last.results[0].id,
                                            result.shape, weight, mean_op, n, eps)
    return matches


# --- kernels ------------------------------------------------------------------------------------


@jit(inline=True)
def _softmax_row_f32(x: Any, out: Any) -> None:
    n = x.shape[0]
    m = -np.inf
    nan = False
    for j in range(n):
        v = x[j]
        nan |= v != v
        m = v if v > m else m
    if nan:
        m = np.nan
    total = 0.0
    for j in range(n):
        e: Any = np.float32(exp32(np.float64(x[j] - m)))
        out[j] = e
        total += e
    for j in range(n):
        out[j] = out[j] / np.float32(total)


@jit(inline=True)
def _softmax_row_f64(x: Any, out: Any) -> None:
    n = x.shape[0]
    m = -np.inf
    nan = False
    for j in range(n):
        v = x[j]
        nan |= v != v
        m = v if v > m else m
    if nan:
        m = np.nan
    total = 0.0
    for j in range(n):
        e = math.exp(x[j] - m)
        out[j] = e
        total += e
    for j in range(n):
        out[j] = out[j] / total


@jit()
def _softmax_f32(x: Any, out: Any) -> None:
    for r in range(x.shape[0]):
        _softmax_row_f32(x[r], out[r])


@jit(parallel=True)
def _softmax_f32_par(x: Any, out: Any) -> None:
    for r in prange(x.shape[0]):
        _softmax_row_f32(x[r], out[r])


@jit()
def _softmax_f64(x: Any, out: Any) -> None:
    for r in range(x.shape[0]):
        _softmax_row_f64(x[r], out[r])


@jit(parallel=True)
def _softmax_f64_par(x: Any, out: Any) -> None:
    for r in prange(x.shape[0]):
        _softmax_row_f64(x[r], out[r])


@jit()
def _rms_f32(x: Any, w: Any, out: Any, weighted: bool, div: bool, n: float, eps: float) -> None:
    cols = x.shape[1]
    for r in range(x.shape[0]):
        total = 0.0
        for j in range(cols):
            v = np.float64(x[r, j])
            total += v * v
        mean = np.float32(total) / np.float32(n) if div else np.float32(total) * np.float32(n)
        scale = np.float32(1.0 / math.sqrt(np.float64(np.float32(mean + np.float32(eps)))))
        if weighted:
            for j in range(cols):
                out[r, j] = (x[r, j] * scale) * w[r, j]
        else:
            for j in range(cols):
                out[r, j] = x[r, j] * scale


@jit()
def _rms_f64(x: Any, w: Any, out: Any, weighted: bool, div: bool, n: float, eps: float) -> None:
    cols = x.shape[1]
    for r in range(x.shape[0]):
        total = 0.0
        for j in range(cols):
            total += x[r, j] * x[r, j]
        mean = total / n if div else total * n
        scale = 1.0 / math.sqrt(mean + eps)
        if weighted:
            for j in range(cols):
                out[r, j] = (x[r, j] * scale) * w[r, j]
        else:
            for j in range(cols):
                out[r, j] = x[r, j] * scale


@jit(parallel=True)
def _rms_f32_par(x: Any, w: Any, out: Any, weighted: bool, div: bool, n: float,
                 eps: float) -> None:
    for r in prange(x.shape[0]):
        _rms_f32(x[r:r + 1], w[r:r + 1], out[r:r + 1], weighted, div, n, eps)


def _rms_step(match: RowMatch, index: int, draft: Any, owned: Any) -> Any:
    result = match.insts[-1].results[0].type
    assert isinstance(result, TensorType)
    f32 = result.dtype == float32
    cols = match.shape[-1]
    rows = math.prod(match.shape[:-1])
    big = rows * cols >= PARALLEL_THRESHOLD and rows > 1
    kernel = (_rms_f32_par if big else _rms_f32) if f32 else _rms_f64
    x, out, w = match.x, match.out, match.weight
    div, n, eps = match.mean_op == "div", float(match.n), float(match.eps)
    empty = rows * cols == 0
    reads = [x] if w is None else [x, w]

    def make(getters: dict[int, Callable[[list[Any]], Any]]) -> Callable[[list[Any]], None]:
        get = getters[out]

        def step(slots: list[Any]) -> None:
            result = get(slots)
            if not empty:
                xs = slots[x].reshape(rows, cols)
                ws = xs if w is None else slots[w].reshape(rows, cols)
                kernel(xs, ws, result.reshape(rows, cols), w is not None, div, n, eps)
            slots[out] = result

        return step

    dtype = np.dtype(result.dtype.np)
    return draft(reads, [out], make, [owned(out, match.shape, dtype, index)], "rows")


def row_step(match: RowMatch, index: int, draft: Any, owned: Any) -> Any:
    """The plan step (a `plan._Draft`) running `match` as one kernel."""
    if match.kind == "rms_norm":
        return _rms_step(match, index, draft, owned)
    result = match.insts[-1].results[0].type
    assert isinstance(result, TensorType)
    dtype = float32.np if result.dtype == float32 else float64.np
    cols = match.shape[-1]
    rows = math.prod(match.shape[:-1])
    big = rows * cols >= PARALLEL_THRESHOLD and rows > 1
    kernel: Callable[..., Any]
    if dtype == float32.np:
        kernel = _softmax_f32_par if big else _softmax_f32
    else:
        kernel = _softmax_f64_par if big else _softmax_f64
    x, out = match.x, match.out
    empty = rows * cols == 0

    def make(getters: dict[int, Callable[[list[Any]], Any]]) -> Callable[[list[Any]], None]:
        get = getters[out]

        def step(slots: list[Any]) -> None:
            result = get(slots)
            if not empty:
                kernel(slots[x].reshape(rows, cols), result.reshape(rows, cols))
            slots[out] = result

        return step

    return draft([x], [out], make, [owned(out, match.shape, np.dtype(dtype), index)], "rows")
