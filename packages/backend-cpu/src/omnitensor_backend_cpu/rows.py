"""Fused row kernels over the last axis, matched in PTIR: softmax, RMS norm and layer norm.

The matches are structural, with every intermediate read only inside the pattern:

- softmax: ``reduce_max -> broadcast -> sub -> exp -> reduce_sum -> broadcast -> div``; one
  pass for the maximum, one for exp and the sum (writing the exponentials), one to scale.
- RMS norm: ``mul(x, x) -> reduce_sum -> [reshape] -> div/mul by n -> add eps -> rsqrt ->
  broadcast -> mul(x, .)``, with the following ``mul`` by a weight of the same shape taken in
  when it is the only reader; one pass for the sum of squares, one to scale.
- layer norm: ``c = sub(x, mean(x))``, ``mul(c, rsqrt(mean(c * c) + eps))`` with each mean a
  ``reduce_sum -> [reshape] -> div/mul by n`` and row broadcasts anywhere along the chains, then
  the ``mul`` by a weight and the ``add`` of a bias when they are the only readers; one pass for
  the sum, one for the centred sum of squares, one to write.

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

from . import rowops
from ._compat import jit, prange

PARALLEL_THRESHOLD = 1 << 17  # (this matcher goes when the composites' lowerings arrive)

__all__ = ["RowMatch", "match_rows", "row_step"]


@dataclass
class RowMatch:
    """A matched row pattern.

    Attributes:
        kind: ``"softmax"``, ``"rms_norm"`` or ``"layer_norm"``.
        insts: its instructions (all skipped by the plan; the kernel replaces them).
        x: the input value id; out: the result value id.
        shape: the (input and result) shape; the pattern reduces its last axis.
        weight: (norms) the value multiplied in, or None.
        mean_op, n, eps: (norms) ``div`` or ``mul`` by the literal `n`, then ``+ eps`` (for layer
            norm: the mean of the squares).
        bias: (layer norm) the value added last, or None.
        center_op, center_n: (layer norm) the mean of `x`: ``div`` or ``mul`` by `center_n`.
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
    bias: int | None = None
    center_op: str = "div"
    center_n: float = 1.0


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
    if not shape:
        return None
    last = (len(shape) - 1,)
    # NOTE: keepdims through broadcast dims or through a reshape (what F.softmax emits).
    sum_chain: list[Instruction] = []
    s = _strip(sb, producers, shape, sum_chain)
    if not sum_chain or s is None or s.op != "reduce_sum" or s.attrs["axes"] not in (last, (-1,)):
        return None
    if s.operands[0].id != e.results[0].id:
        return None
    d = get(e.operands[0].id)
    if d is None or d.op != "sub":
        return None
    x, mb = d.operands
    max_chain: list[Instruction] = []
    m = _strip(get(mb.id), producers, shape, max_chain)
    if not max_chain or m is None or m.op != "reduce_max" or m.attrs["axes"] not in (last, (-1,)):
        return None
    if m.operands[0].id != x.id:
        return None
    return [m, *reversed(max_chain), d, e, s, *reversed(sum_chain), div]


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


def _row_shapes(shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Shapes a per-row value takes on its way to `shape`: (rows...), (rows..., 1), full."""
    return (shape[:-1], (*shape[:-1], 1), shape)


def _strip(inst: Instruction | None, producers: dict[int, Instruction], shape: tuple[int, ...],
           chain: list[Instruction]) -> Instruction | None:
    """Skip row broadcasts and reshapes of per-row values (appended to `chain`)."""
    shapes = _row_shapes(shape)
    while inst is not None and inst.op in ("broadcast_in_dim", "reshape"):
        src = inst.operands[0].type
        dst = inst.results[0].type
        if not isinstance(src, TensorType) or not isinstance(dst, TensorType):
            return None
        if src.shape not in shapes[:2] or dst.shape not in shapes:
            return None
        if inst.op == "broadcast_in_dim" and inst.attrs["dims"] != tuple(range(len(src.shape))):
            return None
        chain.append(inst)
        inst = producers.get(inst.operands[0].id)
    return inst


def _mean_of(inst: Instruction | None, producers: dict[int, Instruction],
             shape: tuple[int, ...], chain: list[Instruction]) -> tuple[int, str, float] | None:
    """``[bcast] div/mul(reduce_sum(v, last), n)``: (v, op, n), its instructions into `chain`."""
    mean = _strip(inst, producers, shape, chain)
    if mean is None or mean.op not in ("div", "mul"):
        return None
    first, second = (producers.get(v.id) for v in mean.operands)
    n = _literal(second, producers)
    if n is None:
        return None
    chain.append(mean)
    total = _strip(first, producers, shape, chain)
    last = (len(shape) - 1,)
    if total is None or total.op != "reduce_sum" or total.attrs["axes"] not in (last, (-1,)):
        return None
    chain.append(total)
    return total.operands[0].id, mean.op, n


def _match_layer_norm(mul: Instruction, producers: dict[int, Instruction]) -> tuple[
        list[Instruction], int, str, float, float, str, float] | None:
    """``mul(c, rsqrt(mean(c*c) + eps))`` with ``c = x - mean(x)``.

    Returns:
        (insts, x, mean_op, n, eps, center_op, center_n), or None.
    """
    get = producers.get
    result = mul.results[0].type
    assert isinstance(result, TensorType)
    shape = result.shape
    for c, b in (mul.operands, mul.operands[::-1]):
        chain: list[Instruction] = [mul]
        rs = _strip(get(b.id), producers, shape, chain)
        if rs is None or rs.op != "rsqrt":
            continue
        chain.append(rs)
        add = _strip(get(rs.operands[0].id), producers, shape, chain)
        if add is None or add.op != "add":
            continue
        chain.append(add)
        first, second = (get(v.id) for v in add.operands)
        eps, var = _literal(second, producers), first
        if eps is None:
            eps, var = _literal(first, producers), second
        if eps is None:
            continue
        found = _mean_of(var, producers, shape, chain)
        if found is None:
            continue
        sq_id, mean_op, n = found
        sq = get(sq_id)
        if sq is None or sq.op != "mul" or any(v.id != c.id for v in sq.operands):
            continue
        chain.append(sq)
        sub = get(c.id)
        if sub is None or sub.op != "sub" or sub.operands[0].type != result:
            continue
        chain.append(sub)
        x = sub.operands[0].id
        centre = _mean_of(get(sub.operands[1].id), producers, shape, chain)
        if centre is None or centre[0] != x:
            continue
        return chain, x, mean_op, n, eps, centre[1], centre[2]
    return None


def _take_elementwise(inst: Instruction, op: str, users: dict[int, list[Instruction]],
                      outputs: set[int]) -> tuple[Instruction, int] | None:
    """The only reader of `inst`'s result when it is `op` with another operand of its type."""
    result = inst.results[0]
    readers = users.get(result.id, [])
    if len(readers) != 1 or result.id in outputs:
        return None
    nxt = readers[0]
    other = [v for v in nxt.operands if v.id != result.id]
    if (nxt.op == op and len(other) == 1 and other[0].type == result.type
            and nxt.results[0].type == result.type):
        return nxt, other[0].id
    return None


def _internal_only(insts: list[Instruction], users: dict[int, list[Instruction]],
                   outputs: set[int]) -> bool:
    """True when every result but the last instruction's is read only inside `insts`."""
    members = {id(i) for i in insts}
    inner = [v.id for i in insts[:-1] for v in i.results]
    return not any(v in outputs or any(id(u) not in members for u in users.get(v, ()))
                   for v in inner)


def _match_layer_norms(function: Function, users: dict[int, list[Instruction]],
                       outputs: set[int], index: dict[int, int]) -> dict[int, RowMatch]:
    producers = {v.id: inst for inst in function.body for v in inst.results}
    matches: dict[int, RowMatch] = {}
    claimed: set[int] = set()
    for inst in function.body:
        result = inst.results[0].type
        if inst.op != "mul" or not isinstance(result, TensorType) or not result.shape:
            continue
        if result.dtype not in (float32, float64):
            continue
        found = _match_layer_norm(inst, producers)
        if found is None:
            continue
        chain, x, mean_op, n, eps, center_op, center_n = found
        weight = bias = None
        last = inst
        taken = _take_elementwise(last, "mul", users, outputs)
        if taken is not None:
            last, weight = taken
            chain.append(last)
        taken = _take_elementwise(last, "add", users, outputs)
        if taken is not None:
            last, bias = taken
            chain.append(last)
        insts = sorted({id(i): i for i in chain}.values(), key=lambda i: index[id(i)])
        if insts[-1] is not last or any(id(i) in claimed for i in insts):
            continue
        if not _internal_only(insts, users, outputs):
            continue
        claimed.update(id(i) for i in insts)
        matches[index[id(last)]] = RowMatch(
            "layer_norm", insts, x, last.results[0].id, result.shape, weight, mean_op, n, eps,
            bias, center_op, center_n)
    return matches


def match_rows(function: Function) -> dict[int, RowMatch]:
    """Matched patterns keyed by the body index of their last instruction."""
    producers = {v.id: inst for inst in function.body for v in inst.results}
    index = {id(inst): i for i, inst in enumerate(function.body)}
    users: dict[int, list[Instruction]] = {}
    for inst in function.body:
        for v in inst.operands:
            users.setdefault(v.id, []).append(inst)
    outputs = {v.id for v in function.outputs}
    matches = _match_layer_norms(function, users, outputs, index)
    claimed = {id(i) for m in matches.values() for i in m.insts}
    for inst in function.body:
        result = inst.results[0].type
        if inst.op != "div" or not isinstance(result, TensorType):
            continue
        if result.dtype not in (float32, float64):
            continue
        insts = _match_softmax(inst, producers)
        if insts is None or any(id(i) in claimed for i in insts):
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


@jit()
def _ln_f32(x: Any, w: Any, b: Any, out: Any, flags: int, n: float, eps: float, n2: float) -> None:
    # flags: 1 weighted, 2 biased, 4 mean by division (else by multiplication), 8 the same for
    # the variance. Sums in float64, everything the reference rounds to float32 rounded here too.
    cols = x.shape[1]
    weighted, biased = (flags & 1) != 0, (flags & 2) != 0
    f32n, f32n2 = np.float32(n), np.float32(n2)
    for r in range(x.shape[0]):
        total = 0.0
        for j in range(cols):
            total += np.float64(x[r, j])
        mean = np.float32(total) / f32n if flags & 4 else np.float32(total) * f32n
        squares = 0.0
        for j in range(cols):
            c = x[r, j] - mean
            squares += np.float64(c * c)
        var = np.float32(squares) / f32n2 if flags & 8 else np.float32(squares) * f32n2
        scale = np.float32(1.0 / math.sqrt(np.float64(np.float32(var + np.float32(eps)))))
        if weighted and biased:
            for j in range(cols):
                out[r, j] = ((x[r, j] - mean) * scale) * w[r, j] + b[r, j]
        elif weighted:
            for j in range(cols):
                out[r, j] = ((x[r, j] - mean) * scale) * w[r, j]
        elif biased:
            for j in range(cols):
                out[r, j] = ((x[r, j] - mean) * scale) + b[r, j]
        else:
            for j in range(cols):
                out[r, j] = (x[r, j] - mean) * scale


@jit()
def _ln_f64(x: Any, w: Any, b: Any, out: Any, flags: int, n: float, eps: float, n2: float) -> None:
    cols = x.shape[1]
    weighted, biased = (flags & 1) != 0, (flags & 2) != 0
    for r in range(x.shape[0]):
        total = 0.0
        for j in range(cols):
            total += x[r, j]
        mean = total / n if flags & 4 else total * n
        squares = 0.0
        for j in range(cols):
            c = x[r, j] - mean
            squares += c * c
        var = squares / n2 if flags & 8 else squares * n2
        scale = 1.0 / math.sqrt(var + eps)
        for j in range(cols):
            y = (x[r, j] - mean) * scale
            y = y * w[r, j] if weighted else y
            out[r, j] = y + b[r, j] if biased else y


@jit(parallel=True)
def _ln_f32_par(x: Any, w: Any, b: Any, out: Any, flags: int, n: float, eps: float,
                n2: float) -> None:
    for r in prange(x.shape[0]):
        _ln_f32(x[r:r + 1], w[r:r + 1], b[r:r + 1], out[r:r + 1], flags, n, eps, n2)


@jit(parallel=True)
def _ln_f64_par(x: Any, w: Any, b: Any, out: Any, flags: int, n: float, eps: float,
                n2: float) -> None:
    for r in prange(x.shape[0]):
        _ln_f64(x[r:r + 1], w[r:r + 1], b[r:r + 1], out[r:r + 1], flags, n, eps, n2)


def _ln_step(match: RowMatch, index: int, draft: Any, owned: Any) -> Any:
    result = match.insts[-1].results[0].type
    assert isinstance(result, TensorType)
    f32 = result.dtype == float32
    cols = match.shape[-1]
    rows = math.prod(match.shape[:-1])
    big = rows * cols >= PARALLEL_THRESHOLD and rows > 1
    kernel: Callable[..., Any]
    if f32:
        kernel = _ln_f32_par if big else _ln_f32
    else:
        kernel = _ln_f64_par if big else _ln_f64
    x, out, w, b = match.x, match.out, match.weight, match.bias
    flags = ((w is not None) | (b is not None) << 1 | (match.center_op == "div") << 2
             | (match.mean_op == "div") << 3)
    n, eps, n2 = float(match.center_n), float(match.eps), float(match.n)
    empty = rows * cols == 0
    reads = [x] + [v for v in (w, b) if v is not None]

    def make(getters: dict[int, Callable[[list[Any]], Any]]) -> Callable[[list[Any]], None]:
        get = getters[out]

        def step(slots: list[Any]) -> None:
            result = get(slots)
            if not empty:
                xs = slots[x].reshape(rows, cols)
                ws = xs if w is None else slots[w].reshape(rows, cols)
                bs = xs if b is None else slots[b].reshape(rows, cols)
                kernel(xs, ws, bs, result.reshape(rows, cols), flags, n, eps, n2)
            slots[out] = result

        return step

    dtype = np.dtype(result.dtype.np)
    return draft(reads, [out], make, [owned(out, match.shape, dtype, index)], "rows")


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
    if match.kind == "layer_norm":
        return _ln_step(match, index, draft, owned)
    result = match.insts[-1].results[0].type
    assert isinstance(result, TensorType)
    dtype = float32.np if result.dtype == float32 else float64.np
    cols = match.shape[-1]
    rows = math.prod(match.shape[:-1])
    x, out = match.x, match.out
    empty = rows * cols == 0

    def make(getters: dict[int, Callable[[list[Any]], Any]]) -> Callable[[list[Any]], None]:
        get = getters[out]

        def step(slots: list[Any]) -> None:
            result = get(slots)
            if not empty:
                rowops.softmax(slots[x].reshape(rows, cols), result.reshape(rows, cols))
            slots[out] = result

        return step

    return draft([x], [out], make, [owned(out, match.shape, np.dtype(dtype), index)], "rows")
