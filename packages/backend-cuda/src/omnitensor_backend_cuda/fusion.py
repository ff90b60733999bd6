"""Pattern-matching the portable softmax / layer norm / RMS norm into the row kernels.

`find` recognizes, over the last axis, the decompositions of `omnitensor.functional`
(``softmax``: max-shift, exp, sum, divide; ``rms_norm``: ``x * rsqrt(mean(x*x) + eps)``;
``layer_norm``: centre, ``rsqrt(mean(c*c) + eps)``; each with an optional weight multiply and,
for layer norm, bias add). A match replaces its instructions by one warp-per-row kernel
(`kernels.row_source`) when none of its intermediate values is used elsewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from omnitensor.dtypes import bfloat16, float16, float32, float64
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType, Value

from . import kernels
from .plan import Lowering, Step, View

__all__ = ["Match", "find", "lower_match"]

_FLOATS = (float16, bfloat16, float32, float64)


@dataclass
class Match:
    """One recognized row computation: `root` computes it; `inner` are the replaced others."""

    kind: str
    root: Instruction
    x: Value
    inner: list[Instruction] = field(default_factory=list)
    eps: float = 0.0
    weight: Value | None = None
    bias: Value | None = None


class _Graph:
    def __init__(self, fn: Function) -> None:
        self.producer: dict[int, Instruction] = {}
        self.consumers: dict[int, list[Instruction]] = {}
        for inst in fn.body:
            for value in inst.results:
                self.producer[id(value)] = inst
            for value in inst.operands:
                self.consumers.setdefault(id(value), []).append(inst)
        self.outputs = {id(v) for v in fn.outputs}

    def op(self, value: Value, *names: str) -> Instruction | None:
        inst = self.producer.get(id(value))
        return inst if inst is not None and inst.op in names else None

    def strip(self, value: Value, chain: list[Instruction]) -> Value:
        """Through reshapes that only add or drop a trailing 1 (keepdims)."""
        inst = self.op(value, "reshape")
        while inst is not None:
            src, dst = _shape(inst.operands[0]), _shape(inst.result)
            if not (src == dst + (1,) or dst == src + (1,)):
                break
            chain.append(inst)
            value = inst.operands[0]
            inst = self.op(value, "reshape")
        return value

    def scalar(self, value: Value) -> float | None:
        """The value of a constant (or a broadcast constant) whose elements are all equal."""
        inst = self.op(value, "broadcast_in_dim")
        if inst is not None:
            value = inst.operands[0]
        const = self.op(value, "constant")
        if const is None:
            return None
        array = np.asarray(const.attrs["value"], dtype=np.float64).reshape(-1)
        if array.size == 0 or not np.all(array == array[0]):
            return None
        return float(array[0])

    def stat(self, value: Value, x: Value, chain: list[Instruction]) -> Value | None:
        """`value` = broadcast_in_dim of a per-row statistic to x's shape: the statistic."""
        inst = self.op(value, "broadcast_in_dim")
        xs = _shape(x)
        if inst is None or _shape(inst.result) != xs:
            return None
        rank = len(xs)
        src = _shape(inst.operands[0])
        keep = src == xs[:-1] + (1,) and inst.attrs["dims"] == tuple(range(rank))
        drop = src == xs[:-1] and inst.attrs["dims"] == tuple(range(rank - 1))
        if not (keep or drop):
            return None
        chain.append(inst)
        return self.strip(inst.operands[0], chain)

    def mean(self, value: Value, of: Value, chain: list[Instruction]) -> bool:
        """`value` is the mean of `of` over its last axis (sum, then divide or scale by L)."""
        length = _shape(of)[-1]
        inst = self.op(value, "div", "mul")
        if inst is None:
            return False
        a, b = inst.operands
        if inst.op == "mul" and self.scalar(a) is not None:
            a, b = b, a
        factor = self.scalar(b)
        want = length if inst.op == "div" else 1.0 / length
        if factor is None or not math.isclose(factor, want, rel_tol=1e-6):
            return False
        chain.append(inst)
        return self.reduced(self.strip(a, chain), "reduce_sum", of, chain)

    def reduced(self, value: Value, op: str, of: Value, chain: list[Instruction]) -> bool:
        inst = self.op(value, op)
        if inst is None or inst.operands[0] is not of:
            return False
        rank = len(_shape(of))
        if tuple(a % rank for a in inst.attrs["axes"]) != (rank - 1,):
            return False
        chain.append(inst)
        return True

    def inv_std(self, value: Value, of: Value, chain: list[Instruction]) -> float | None:
        """`value` = broadcast rsqrt(mean(of * of) + eps): eps."""
        stat = self.stat(value, of, chain)
        rsqrt = None if stat is None else self.op(stat, "rsqrt")
        if rsqrt is None:
            return None
        chain.append(rsqrt)
        add = self.op(self.strip(rsqrt.operands[0], chain), "add")
        if add is None:
            return None
        chain.append(add)
        a, b = add.operands
        if self.scalar(a) is not None:
            a, b = b, a
        eps = self.scalar(b)
        if eps is None or not self._mean_of_square(self.strip(a, chain), of, chain):
            return None
        return eps

    def _mean_of_square(self, value: Value, of: Value, chain: list[Instruction]) -> bool:
        inst = self.op(value, "div", "mul")
        if inst is None:
            return False
        for operand in inst.operands:
            red = self.op(self.strip(operand, []), "reduce_sum")
            square = None if red is None else self.op(red.operands[0], "mul")
            if square is not None and square.operands[0] is of and square.operands[1] is of:
                if self.mean(value, square.result, chain):
                    chain.append(square)
                    return True
        return False

    def private(self, match: Match) -> bool:
        """True when every inner value is used only inside the match."""
        inside = {id(i) for i in match.inner} | {id(match.root)}
        for inst in match.inner:
            for value in inst.results:
                if id(value) in self.outputs:
                    return False
                if any(id(c) not in inside for c in self.consumers.get(id(value), [])):
                    return False
        return True

    def affine(self, match: Match) -> None:
        """Extend `match` over a following weight multiply (and, for layer norm, bias add)."""
        for op, attr in (("mul", "weight"), ("add", "bias")):
            if attr == "bias" and match.kind != "layer_norm":
                return
            users = self.consumers.get(id(match.root.result), [])
            if len(users) != 1 or id(match.root.result) in self.outputs or users[0].op != op:
                return
            nxt = users[0]
            other = nxt.operands[1] if nxt.operands[0] is match.root.result else nxt.operands[0]
            bcast = self.op(other, "broadcast_in_dim")
            xs = _shape(match.x)
            if (bcast is None or _shape(bcast.result) != xs or _shape(bcast.operands[0]) !=
                    xs[-1:] or bcast.attrs["dims"] != (len(xs) - 1,)
                    or len(self.consumers.get(id(other), [])) != 1):
                return
            match.inner += [match.root, bcast]
            match.root = nxt
            setattr(match, attr, bcast.operands[0])


def _shape(value: Value) -> tuple[int, ...]:
    t = value.type
    assert isinstance(t, TensorType)
    return t.shape


def _dtype_ok(value: Value) -> bool:
    t = value.type
    return isinstance(t, TensorType) and t.dtype in _FLOATS and len(t.shape) >= 1 and \
        t.shape[-1] > 1 and math.prod(t.shape) > 0


def _softmax(g: _Graph, root: Instruction) -> Match | None:
    if root.op != "div":
        return None
    e, denominator = root.operands
    chain: list[Instruction] = []
    exp = g.op(e, "exp")
    total = g.stat(denominator, e, chain)
    if exp is None or total is None or not g.reduced(total, "reduce_sum", e, chain):
        return None
    sub = g.op(exp.operands[0], "sub")
    if sub is None:
        return None
    x, shift = sub.operands
    peak = g.stat(shift, x, chain)
    if peak is None or not g.reduced(peak, "reduce_max", x, chain):
        return None
    return Match("softmax", root, x, [*chain, exp, sub])


def _norm(g: _Graph, root: Instruction) -> Match | None:
    if root.op != "mul":
        return None
    for x, other in (root.operands, root.operands[::-1]):
        chain: list[Instruction] = []
        eps = g.inv_std(other, x, chain)
        if eps is None:
            continue
        centre = g.op(x, "sub")
        if centre is not None:
            inner = [centre]
            mean = g.stat(centre.operands[1], centre.operands[0], inner)
            if mean is not None and g.mean(mean, centre.operands[0], inner):
                return Match("layer_norm", root, centre.operands[0], chain + inner, eps)
        return Match("rms_norm", root, x, chain, eps)
    return None


def find(fn: Function) -> list[Match]:
    """The row computations of `fn` that can run as row kernels (non-overlapping)."""
    g = _Graph(fn)
    found: list[Match] = []
    taken: set[int] = set()
    for inst in reversed(fn.body):
        if id(inst) in taken or len(inst.results) != 1 or not _dtype_ok(inst.result):
            continue
        match = _softmax(g, inst) or _norm(g, inst)
        if match is None or not _dtype_ok(match.x) or not g.private(match):
            continue
        g.affine(match)
        ids = {id(i) for i in match.inner} | {id(match.root)}
        if ids & taken:
            continue
        taken |= ids
        found.append(match)
    return found


def lower_match(lw: Lowering, match: Match) -> View:
    """Launch the row kernel of `match`; returns the view of its result."""
    x = lw.dense(match.x)
    shape = _shape(match.x)
    rows, length = math.prod(shape[:-1]), shape[-1]
    out = lw.new_slot(shape, x.dtype)
    weight = lw.dense(match.weight) if match.weight is not None else x
    bias = lw.dense(match.bias) if match.bias is not None else x
    name, source = kernels.row_source(match.kind, x.dtype)
    eps = int(np.float64(match.eps).view(np.int64))
    params = [rows, length, eps, int(match.weight is not None), int(match.bias is not None)]
    lw.emit(Step("warp", name, source, [x.slot, weight.slot, bias.slot, out.slot], params, rows))
    return out
