"""Fused row kernels over the last axis, matched in PTIR: softmax (more patterns to follow).

The match is structural: ``reduce_max -> broadcast -> sub -> exp -> reduce_sum -> broadcast ->
div`` over the last axis, with every intermediate read only inside the pattern. The kernel makes
one pass for the maximum, one for exp and the sum (writing the exponentials) and one to scale,
a row at a time, so a row stays in cache: one read and one write of memory in all.
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
        kind: ``"softmax"``.
        insts: its instructions (all skipped by the plan; the kernel replaces them).
        x: the input value id; out: the result value id.
        shape: the (input and result) shape; the pattern reduces its last axis.
    """

    kind: str
    insts: list[Instruction]
    x: int
    out: int
    shape: tuple[int, ...]


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


def row_step(match: RowMatch, index: int, draft: Any, owned: Any) -> Any:
    """The plan step (a `plan._Draft`) running `match` as one kernel."""
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
