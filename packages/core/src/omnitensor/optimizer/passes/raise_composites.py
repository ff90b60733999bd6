"""`raise_composites`: bare decompositions, in every equivalent form, become composites.

The forms are those users and importers write, so a backend's fused lowering applies.

Patterns are written once, over "row statistics": a reduction over the trailing axes of x, then
any chain of keepdims reshapes, broadcasts and scalar arithmetic, broadcast back to x's shape.
That covers keepdims through a reshape or through broadcast dims, the mean as sum / n or
sum * (1/n), x * rsqrt(v) or x / sqrt(v), softmax with or without the max shift, and a weight
(and bias) broadcast from the normalized shape (a weight given at full shape stays a ``mul``
after the raised norm). The raised instruction keeps the root's result value, so its uses need
no rewriting; the bare intermediates become dead and DCE removes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, final

import numpy as np

from ...errors import OmnitensorError
from ...ir.builder import infer_types
from ...ir.opdef import get_op
from ...ir.program import Function, Instruction
from ...ir.types import TensorType, Value
from ..context import PassContext, PassResult

__all__ = ["RaiseCompositesPass", "raise_composites"]

_MOVES = ("reshape", "broadcast_in_dim")
_UNARY = ("rsqrt", "sqrt", "log", "exp")
_SCALAR_OPS = ("add", "sub", "mul", "div")


@dataclass(frozen=True)
class _Stat:
    """A row statistic: ``reduce(src, axes)`` followed by scalar steps, at x's shape."""

    reduce: str
    src: Value
    axes: tuple[int, ...]
    steps: tuple[tuple[str, float | None], ...]  # (op, scalar) outward from the reduction


class _Graph:
    def __init__(self, fn: Function) -> None:
        self.producer: dict[int, Instruction] = {r.id: i for i in fn.body for r in i.results}
        self.order = fn.body

    def def_of(self, v: Value) -> Instruction | None:
        return self.producer.get(v.id)

    def splat(self, v: Value) -> float | None:
        for _ in range(6):
            inst = self.def_of(v)
            if inst is None:
                return None
            if inst.op == "constant":
                data = np.asarray(inst.attrs["value"])
                if data.size == 0 or not np.all(data == data.reshape(-1)[0]):
                    return None
                return float(data.reshape(-1)[0])
            if inst.op not in _MOVES:
                return None
            v = inst.operands[0]
        return None

    def stat(self, v: Value, shape: tuple[int, ...]) -> _Stat | None:
        """`v` (of `shape`) as a row statistic over trailing axes, or None."""
        chain: list[Instruction] = []
        steps: list[tuple[str, float | None]] = []
        while True:
            inst = self.def_of(v)
            if inst is None or len(inst.results) != 1:
                return None
            if inst.op in ("reduce_sum", "reduce_max"):
                break
            if inst.op in _MOVES or inst.op in _UNARY:
                chain.append(inst)
                if inst.op in _UNARY:
                    steps.append((inst.op, None))
                v = inst.operands[0]
                continue
            if inst.op in _SCALAR_OPS:
                lhs, rhs = inst.operands
                right = self.splat(rhs)
                if right is not None and inst.op in _SCALAR_OPS:
                    steps.append((inst.op, right))
                    v = lhs
                    continue
                left = self.splat(lhs)
                if left is not None and inst.op in ("add", "mul"):
                    steps.append((inst.op, left))
                    v = rhs
                    continue
            return None
        src = inst.operands[0]
        src_shape = _shape(src)
        axes = tuple(sorted(a % max(len(src_shape), 1) for a in inst.attrs["axes"]))
        n = len(src_shape)
        if src_shape != shape or not axes or axes != tuple(range(n - len(axes), n)):
            return None
        if not _aligned(chain, n - len(axes), shape):
            return None
        return _Stat(inst.op, src, axes, tuple(reversed(steps)))


def _shape(v: Value) -> tuple[int, ...]:
    assert isinstance(v.type, TensorType)
    return v.type.shape


def _aligned(chain: list[Instruction], kept: int, shape: tuple[int, ...]) -> bool:
    """True when the moves keep each kept dim j of the reduction at axis j of `shape`."""
    pos: list[int | None] = list(range(kept))
    for inst in reversed(chain):  # outward from the reduction
        before, after = _shape(inst.operands[0]), _shape(inst.results[0])
        if inst.op == "reshape":
            nonunit_in = [i for i, d in enumerate(before) if d != 1]
            nonunit_out = [i for i, d in enumerate(after) if d != 1]
            if [before[i] for i in nonunit_in] != [after[i] for i in nonunit_out]:
                return False
            where = dict(zip(nonunit_in, nonunit_out, strict=True))
            pos = [None if p is None else where.get(p) for p in pos]
        elif inst.op == "broadcast_in_dim":
            dims = inst.attrs["dims"]
            pos = [None if p is None else dims[p] for p in pos]
    return bool(chain) and all(p == j or shape[j] == 1 for j, p in enumerate(pos))


def _is_mean(steps: tuple[tuple[str, float | None], ...], n: int) -> int:
    """How many leading steps make sum -> mean (0 when they do not)."""
    if steps and steps[0][0] == "div" and steps[0][1] == n:
        return 1
    if steps and steps[0][0] == "mul" and steps[0][1] is not None and n and math.isclose(
            steps[0][1], 1.0 / n, rel_tol=1e-6):
        return 1
    return 0


def _count(x: Value, axes: tuple[int, ...]) -> int:
    return math.prod(_shape(x)[a] for a in axes)


Match = tuple[str, tuple[Value, ...], dict[str, Any]]


def _softmax(g: _Graph, root: Instruction) -> Match | None:
    if root.op != "div":
        return None
    e, denom = root.operands
    s = g.stat(denom, _shape(e))
    exp = g.def_of(e)
    if s is None or s.reduce != "reduce_sum" or s.steps or s.src.id != e.id or exp is None or (
            exp.op != "exp"):
        return None
    x = exp.operands[0]
    shift = g.def_of(x)
    if shift is not None and shift.op == "sub":
        m = g.stat(shift.operands[1], _shape(x))
        if m is not None and m.reduce == "reduce_max" and not m.steps and (
                m.src.id == shift.operands[0].id) and m.axes == s.axes:
            x = shift.operands[0]
    return "softmax", (x,), {"axes": s.axes}


def _norm_scale(g: _Graph, root: Instruction) -> tuple[Value, _Stat, float] | None:
    """``x * rsqrt(mean(v) + eps)`` or ``x / sqrt(mean(v) + eps)`` -> (x, stat, eps)."""
    if root.op not in ("mul", "div"):
        return None
    lhs, rhs = root.operands
    for x, other in ((lhs, rhs), (rhs, lhs)) if root.op == "mul" else ((lhs, rhs),):
        s = g.stat(other, _shape(x))
        want = "rsqrt" if root.op == "mul" else "sqrt"
        if s is None or s.reduce != "reduce_sum":
            continue
        mean = _is_mean(s.steps, _count(s.src, s.axes))
        rest = s.steps[mean:]
        if mean and len(rest) == 2 and rest[0][0] == "add" and rest[1] == (want, None):
            return x, s, float(rest[0][1] or 0.0)
    return None


def _squares(g: _Graph, v: Value) -> Value | None:
    inst = g.def_of(v)
    if inst is not None and inst.op == "mul" and inst.operands[0].id == inst.operands[1].id:
        return inst.operands[0]
    return None


def _rms_norm(g: _Graph, root: Instruction) -> Match | None:
    found = _norm_scale(g, root)
    if found is None:
        return None
    x, s, eps = found
    base = _squares(g, s.src)
    if base is None or base.id != x.id:
        return None
    return "rms_norm", (x,), {"axes": s.axes, "eps": eps}


def _layer_norm(g: _Graph, root: Instruction) -> Match | None:
    found = _norm_scale(g, root)
    if found is None:
        return None
    c, s, eps = found
    squared = _squares(g, s.src)
    if squared is None or squared.id != c.id:
        return None
    centre = g.def_of(c)
    if centre is None or centre.op != "sub":
        return None
    x, mean = centre.operands
    m = g.stat(mean, _shape(x))
    if m is None or m.reduce != "reduce_sum" or m.src.id != x.id or m.axes != s.axes or (
            _is_mean(m.steps, _count(x, m.axes)) != len(m.steps) or not m.steps):
        return None
    return "layer_norm", (x,), {"axes": s.axes, "eps": eps}


def _affine(g: _Graph, root: Instruction, uses: dict[int, int]) -> Match | None:
    """``norm(x) * w`` (+ ``b`` for layer_norm), w and b broadcast from the normalized shape."""
    if root.op not in ("mul", "add"):
        return None
    for inner_v, p in (root.operands, tuple(reversed(root.operands))):
        inner = g.def_of(inner_v)
        if inner is None or uses.get(inner_v.id, 0) != 1:
            continue
        if root.op == "mul" and inner.op in ("rms_norm", "layer_norm") and len(
                inner.operands) == 1:
            pass
        elif root.op == "add" and inner.op == "layer_norm" and len(inner.operands) == 2:
            pass
        else:
            continue
        x = inner.operands[0]
        axes = inner.attrs["axes"]
        row = tuple(_shape(x)[a] for a in axes)
        src = _row_param(g, p, row, _shape(x))
        if src is not None and _dtype(src) == _dtype(x):
            return inner.op, (*inner.operands, src), dict(inner.attrs)
    return None


def _dtype(v: Value) -> Any:
    assert isinstance(v.type, TensorType)
    return v.type.dtype


def _row_param(g: _Graph, p: Value, row: tuple[int, ...], shape: tuple[int, ...]) -> Value | None:
    """The (row,)-shaped source of `p` when p broadcasts it along the trailing dims."""
    inst = g.def_of(p)
    if inst is None or inst.op != "broadcast_in_dim":
        return None
    src = inst.operands[0]
    n, k = len(shape), len(row)
    if _shape(src) == row and tuple(inst.attrs["dims"]) == tuple(range(n - k, n)):
        return src
    return None


def _log_softmax(g: _Graph, root: Instruction) -> Match | None:
    """``t - log(sum(exp(t)))`` with t = x - max(x) (or t = x, unshifted)."""
    if root.op != "sub":
        return None
    t, lse = root.operands
    s = g.stat(lse, _shape(t))
    if s is None or s.reduce != "reduce_sum" or s.steps != (("log", None),):
        return None
    exp = g.def_of(s.src)
    if exp is None or exp.op != "exp" or exp.operands[0].id != t.id:
        return None
    x = t
    shift = g.def_of(t)
    if shift is not None and shift.op == "sub":
        m = g.stat(shift.operands[1], _shape(t))
        if m is not None and m.reduce == "reduce_max" and not m.steps and (
                m.src.id == shift.operands[0].id) and m.axes == s.axes:
            x = shift.operands[0]
    return "log_softmax", (x,), {"axes": s.axes}


# --- elementwise activations, recognized by their values ----------------------------------------
# NOTE: gelu and silu have too many algebraic spellings for structural patterns (0.5 x (1 +
# erf(x / sqrt 2)), x * 0.5 * (1 + erf(x * 0.7071)), x * Phi(x), x^3 as x*x*x or pow, silu as
# x * logistic(x) or x / (1 + exp(-x)), ...). A small single-input elementwise expression that
# contains the characteristic transcendental is evaluated at probe points in float64 and
# compared with each activation; the probes span both tails and the knee, so a different
# function (erf- vs tanh-GELU differ by up to 1e-3) cannot pass the 1e-5 tolerance.

_ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "neg", "tanh", "erf", "exp", "logistic",
                          "sqrt", "rsqrt", "pow", "reciprocal"})
_MARKERS = frozenset({"tanh", "erf", "exp", "logistic"})
_MAX_NODES = 24
_PROBES = np.concatenate([np.linspace(-6.0, 6.0, 49), [-0.01, 0.003, 9.5, -9.5]])
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_erf(x: Any) -> Any:
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x: Any) -> Any:
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x**3)))


def _silu(x: Any) -> Any:
    return x / (1.0 + np.exp(-x))


_ACTIVATIONS: tuple[tuple[str, dict[str, Any], Callable[[Any], Any]], ...] = (
    ("gelu", {"approximate": "none"}, _gelu_erf),
    ("gelu", {"approximate": "tanh"}, _gelu_tanh),
    ("silu", {}, _silu),
)


def _expression(g: _Graph, root: Instruction) -> list[Instruction] | None:
    """The elementwise instructions (same shape as root) feeding `root`, root last."""
    shape = _shape(root.results[0])
    seen: dict[int, Instruction] = {}
    stack = [root]
    while stack:
        inst = stack.pop()
        if inst.id in seen:
            continue
        seen[inst.id] = inst
        if len(seen) > _MAX_NODES:
            return None
        for v in inst.operands:
            prod = g.def_of(v)
            if (prod is not None and prod.op in _ELEMENTWISE and len(prod.results) == 1
                    and _shape(prod.results[0]) == shape and g.splat(v) is None):
                stack.append(prod)
    order = {id(i): n for n, i in enumerate(g.order)}
    return sorted(seen.values(), key=lambda i: order.get(id(i), -1))


def _probe(g: _Graph, insts: list[Instruction], leaf: Value) -> Any | None:
    """The expression's values at the probes with `leaf` as its only input (None otherwise)."""
    from ...ir.opdef import get_op

    env: dict[int, Any] = {leaf.id: _PROBES}
    with np.errstate(all="ignore"):
        for inst in insts:
            if inst.results[0].id in env:
                continue
            args = []
            for v in inst.operands:
                if v.id in env:
                    args.append(env[v.id])
                    continue
                value = g.splat(v)
                if value is None:
                    return None  # a second input
                args.append(np.float64(value))
            attrs = dict(inst.attrs)
            env[inst.results[0].id] = np.asarray(get_op(inst.op).reference(*args, **attrs),
                                                 np.float64)
    return env.get(insts[-1].results[0].id)


def _activation(g: _Graph, root: Instruction) -> Match | None:
    if root.op not in ("mul", "div") or not isinstance(root.results[0].type, TensorType):
        return None
    insts = _expression(g, root)
    if insts is None or not any(i.op in _MARKERS for i in insts):
        return None
    inside = {r.id for i in insts for r in i.results}
    leaves: list[Value] = []
    for inst in insts:
        for v in inst.operands:
            if v.id not in inside and g.splat(v) is None and all(v.id != u.id for u in leaves):
                leaves.append(v)
    # NOTE: x may itself be computed elementwise (gelu(a + b)): then the expression reaches
    # past it, and the cut is made at each inner value in turn.
    candidates = leaves if len(leaves) == 1 else []
    candidates += [r for i in reversed(insts[:-1]) for r in i.results]
    for leaf in candidates:
        if _dtype(leaf) != _dtype(root.results[0]) or _shape(leaf) != _shape(root.results[0]):
            continue
        values = _probe(g, [i for i in insts if _depends(g, i, leaf, inside)], leaf)
        if values is None:
            continue
        for name, attrs, fn in _ACTIVATIONS:
            want = fn(_PROBES)
            if np.allclose(values, want, rtol=1e-5, atol=1e-6):
                return name, (leaf,), dict(attrs)
    return None


def _depends(g: _Graph, inst: Instruction, leaf: Value, inside: set[int]) -> bool:
    """Whether `inst` lies above `leaf` (reads it, directly or through the expression)."""
    stack = [inst]
    seen: set[int] = set()
    while stack:
        cur = stack.pop()
        if id(cur) in seen:
            continue
        seen.add(id(cur))
        for v in cur.operands:
            if v.id == leaf.id:
                return True
            prod = g.def_of(v)
            if prod is not None and v.id in inside:
                stack.append(prod)
    return False


def _gated(g: _Graph, root: Instruction, uses: dict[int, int]) -> Match | None:
    """``silu(gate) * up`` -> swiglu, ``gelu(gate) * up`` -> geglu (up of gate's type)."""
    if root.op != "mul":
        return None
    for act_v, up in (root.operands, tuple(reversed(root.operands))):
        act = g.def_of(act_v)
        if act is None or act.op not in ("silu", "gelu") or uses.get(act_v.id, 0) != 1:
            continue
        gate = act.operands[0]
        if up.type != gate.type or up.id == gate.id:
            continue
        return ("swiglu" if act.op == "silu" else "geglu"), (gate, up), dict(act.attrs)
    return None


_QK: Final = {((3,), (3,)): False, ((3,), (2,)): True}  # contracting -> k given transposed


def _attention(g: _Graph, root: Instruction, uses: dict[int, int]) -> Match | None:
    """``softmax(q k^T [* s | / s] [+ mask]) v`` over 4-D heads -> scaled_dot_product_attention.

    q (B, H, T, D), k (B, H, S, D) (or k^T (B, H, D, S) by a transpose), v (B, H, S, Dv), one
    dtype; an additive mask of the scores' shape is carried as the composite's mask.
    """
    if root.op != "dot_general" or len(root.operands) != 2:
        return None
    probs_v, v = root.operands
    if (root.attrs.get("contracting") != ((3,), (2,)) or root.attrs.get("batch") != (
            (0, 1), (0, 1)) or uses.get(probs_v.id, 0) != 1):
        return None
    probs = g.def_of(probs_v)
    if probs is None or probs.op != "softmax" or tuple(probs.attrs["axes"]) != (3,):
        return None
    scores = probs.operands[0]
    mask: Value | None = None
    inst = g.def_of(scores)
    if inst is not None and inst.op == "add" and uses.get(scores.id, 0) == 1:
        for s_v, m_v in (inst.operands, tuple(reversed(inst.operands))):
            below = g.def_of(s_v)
            if below is not None and below.op in ("mul", "div", "dot_general"):
                scores, mask = s_v, m_v
                break
        inst = g.def_of(scores)
    scale = 1.0
    if inst is not None and inst.op in ("mul", "div") and uses.get(scores.id, 0) == 1:
        lhs, rhs = inst.operands
        factor, qk_v = g.splat(rhs), lhs
        if factor is None and inst.op == "mul":
            factor, qk_v = g.splat(lhs), rhs
        if factor is None or factor == 0.0:
            return None
        scale = factor if inst.op == "mul" else 1.0 / factor
        inst = g.def_of(qk_v)
    if inst is None or inst.op != "dot_general" or inst.attrs.get("batch") != ((0, 1), (0, 1)):
        return None
    transposed = _QK.get(inst.attrs.get("contracting"))  # type: ignore[arg-type]
    if transposed is None:
        return None
    q, k = inst.operands
    if transposed:
        t = g.def_of(k)
        if t is None or t.op != "transpose" or tuple(t.attrs["perm"]) != (0, 1, 3, 2):
            return None
        k = t.operands[0]
    shapes = [_shape(x) for x in (q, k, v)]
    if any(len(s) != 4 for s in shapes) or shapes[0][:2] != shapes[1][:2] or (
            shapes[1][:3] != shapes[2][:3]) or len({_dtype(x) for x in (q, k, v)}) != 1:
        return None
    attrs: dict[str, Any] = {"scale": float(scale), "is_causal": False}
    if mask is None:
        return "scaled_dot_product_attention", (q, k, v), attrs
    if _dtype(mask) != _dtype(q) or _shape(mask) != (*shapes[0][:3], shapes[1][2]):
        return None
    attrs["mask_kind"] = "additive"
    return "scaled_dot_product_attention", (q, k, v, mask), attrs


_PATTERNS: tuple[Callable[..., Match | None], ...] = (_softmax, _log_softmax, _layer_norm,
                                                      _rms_norm, _activation)


def raise_composites(fn: Function) -> int:
    """Raise every matched decomposition in `fn` in place; return how many were raised."""
    raised = 0
    for _ in range(3):  # norms first, then their weights and biases
        g = _Graph(fn)
        uses: dict[int, int] = {}
        for inst in fn.body:
            for v in inst.operands:
                uses[v.id] = uses.get(v.id, 0) + 1
        for v in fn.outputs:
            uses[v.id] = uses.get(v.id, 0) + 1
        changed = 0
        for i, inst in enumerate(fn.body):
            match = None
            for pattern in _PATTERNS:
                match = pattern(g, inst)
                if match is not None:
                    break
            if match is None:
                match = (_affine(g, inst, uses) or _gated(g, inst, uses)
                         or _attention(g, inst, uses))
            if match is None:
                continue
            op, operands, attrs = match
            if not all(isinstance(v.type, TensorType) for v in operands) or not all(
                    _dtype(v).is_floating for v in operands[:1]):
                continue
            # NOTE: the composite must type-check and give exactly the root's result type.
            opdef = get_op(op)
            attrs = opdef.attr_defaults(attrs)
            try:
                types = infer_types(opdef, [v.type for v in operands], attrs)
            except OmnitensorError:
                continue
            if types != tuple(r.type for r in inst.results):
                continue
            new = Instruction(inst.id, op, operands, attrs, inst.results)
            fn.body[i] = new
            g.producer[inst.results[0].id] = new
            changed += 1
        raised += changed
        if not changed:
            break
    return raised


@final
class RaiseCompositesPass:
    """The pipeline's raising step (see the module doc)."""

    name = "raise_composites"

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        """Raise matched decompositions in `fn` in place."""
        count = raise_composites(fn)
        return PassResult(changed=count > 0, rewrites=count, counts={"raised": count})
