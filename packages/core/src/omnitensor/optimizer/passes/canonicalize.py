"""Canonicalization: algebraic identities and movement/convert chain folding, as patterns.

Each pattern matches one root instruction through its op's typed view (looked up by name, so
this module imports before every op family exists) and returns True only when it changed the
IR. Constant folding lives in `fold`; CSE and DCE are separate passes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import DType
from ...ir.program import Instruction
from ...ir.types import TensorType, Value
from ..registry import pattern
from ..rewrite import Rewriter, splat_value, view

__all__ = ["PASS_NAME", "is_lossless_convert"]

PASS_NAME = "canonicalize"


def _forward(rw: Rewriter, inst: Instruction, value: Value) -> bool:
    """Use `value` wherever `inst`'s result is used (same type); always True."""
    rw.replace_all_uses(inst.result, value)
    return True


def _is_splat(rw: Rewriter, value: Value, scalar: Any) -> bool:
    found = splat_value(rw, value)
    # NOTE: `found == scalar` is False for NaN, so a NaN splat never counts as 0 or 1.
    return found is not None and bool(found == scalar)


def _dense(value: Value) -> TensorType | None:
    return value.type if isinstance(value.type, TensorType) else None


# --- arithmetic identities --------------------------------------------------------------------


def _is_zero(rw: Rewriter, value: Value, *, negative: bool) -> bool:
    """`value` is a splat zero that is an exact identity of add (`negative`) or sub.

    For floats only -0.0 is an additive identity (``-0.0 + 0.0`` is ``+0.0``), and only +0.0
    is one of subtraction; integer and bool zeros have no sign.
    """
    found = splat_value(rw, value)
    if found is None or not bool(found == 0):
        return False
    t = _dense(value)
    if t is None or not t.dtype.is_floating:
        return True
    return bool(np.signbit(np.float64(found))) == negative


@pattern("add_zero", pass_name=PASS_NAME, ops=("add",))
def add_zero(rw: Rewriter, inst: Instruction) -> bool:
    """add(x, 0) -> x and add(0, x) -> x (for floats only -0.0, which keeps x = -0.0 exact)."""
    v = view("add", inst)
    if _is_zero(rw, v.rhs, negative=True):
        return _forward(rw, inst, v.lhs)
    if _is_zero(rw, v.lhs, negative=True):
        return _forward(rw, inst, v.rhs)
    return False


@pattern("sub_zero", pass_name=PASS_NAME, ops=("sub",))
def sub_zero(rw: Rewriter, inst: Instruction) -> bool:
    """sub(x, 0) -> x (for floats only +0.0: x - (-0.0) turns -0.0 into +0.0)."""
    v = view("sub", inst)
    return _is_zero(rw, v.rhs, negative=False) and _forward(rw, inst, v.lhs)


@pattern("mul_one", pass_name=PASS_NAME, ops=("mul",))
def mul_one(rw: Rewriter, inst: Instruction) -> bool:
    """mul(x, 1) -> x and mul(1, x) -> x."""
    v = view("mul", inst)
    if _is_splat(rw, v.rhs, 1):
        return _forward(rw, inst, v.lhs)
    if _is_splat(rw, v.lhs, 1):
        return _forward(rw, inst, v.rhs)
    return False


@pattern("div_one", pass_name=PASS_NAME, ops=("div",))
def div_one(rw: Rewriter, inst: Instruction) -> bool:
    """div(x, 1) -> x."""
    v = view("div", inst)
    return _is_splat(rw, v.rhs, 1) and _forward(rw, inst, v.lhs)


def _integer(value: Value) -> TensorType | None:
    t = _dense(value)
    return t if t is not None and t.dtype.is_integer else None


@pattern("mul_zero_int", pass_name=PASS_NAME, ops=("mul",))
def mul_zero_int(rw: Rewriter, inst: Instruction) -> bool:
    """mul(x, 0) -> 0 for integers (for floats NaN * 0 is NaN, so it stays)."""
    v = view("mul", inst)
    if _integer(inst.result) is None:
        return False
    for zero in (v.rhs, v.lhs):
        if _is_splat(rw, zero, 0):
            return _forward(rw, inst, zero)  # the zero operand already has the result's type
    return False


@pattern("sub_self_int", pass_name=PASS_NAME, ops=("sub",))
def sub_self_int(rw: Rewriter, inst: Instruction) -> bool:
    """sub(x, x) -> 0 for integers (for floats inf - inf is NaN, so it stays)."""
    v = view("sub", inst)
    t = _integer(inst.result)
    if t is None or v.lhs is not v.rhs:
        return False
    return _forward(rw, inst, rw.splat(inst, 0, t))


def _involution(op: str) -> Any:
    def fold(rw: Rewriter, inst: Instruction) -> bool:
        inner = view(op, rw.producer(view(op, inst).x))
        return inner is not None and _forward(rw, inst, inner.x)

    return fold


pattern("neg_neg", pass_name=PASS_NAME, ops=("neg",),
        doc="neg(neg(x)) -> x (integers wrap both ways)")(_involution("neg"))
pattern("not_not", pass_name=PASS_NAME, ops=("not",), doc="not(not(x)) -> x")(_involution("not"))


# --- select -----------------------------------------------------------------------------------


@pattern("select_const_pred", pass_name=PASS_NAME, ops=("select",))
def select_const_pred(rw: Rewriter, inst: Instruction) -> bool:
    """select(true, a, b) -> a and select(false, a, b) -> b for a splat predicate."""
    v = view("select", inst)
    pred = splat_value(rw, v.pred)
    if pred is None:
        return False
    return _forward(rw, inst, v.on_true if bool(pred) else v.on_false)


@pattern("select_same", pass_name=PASS_NAME, ops=("select",))
def select_same(rw: Rewriter, inst: Instruction) -> bool:
    """select(p, x, x) -> x."""
    v = view("select", inst)
    return v.on_true is v.on_false and _forward(rw, inst, v.on_true)


# --- convert ----------------------------------------------------------------------------------

# Every value of the key dtype is exactly representable in each dtype of its set.
_LOSSLESS: dict[str, frozenset[str]] = {
    "bool": frozenset({"int8", "int16", "int32", "int64", "uint8", "uint32", "float16",
                       "bfloat16", "float32", "float64"}),
    "int8": frozenset({"int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"}),
    "uint8": frozenset({"int16", "int32", "int64", "uint32", "float16", "bfloat16", "float32",
                        "float64"}),
    "int16": frozenset({"int32", "int64", "float32", "float64"}),
    "int32": frozenset({"int64", "float64"}),
    "uint32": frozenset({"int64", "float64"}),
    "float16": frozenset({"float32", "float64"}),
    "bfloat16": frozenset({"float32", "float64"}),
    "float32": frozenset({"float64"}),
}


def is_lossless_convert(src: DType, dst: DType) -> bool:
    """True when every `src` value converts to `dst` exactly (so it can be converted back)."""
    return src == dst or dst.name in _LOSSLESS.get(src.name, frozenset())


@pattern("convert_same_dtype", pass_name=PASS_NAME, ops=("convert",))
def convert_same_dtype(rw: Rewriter, inst: Instruction) -> bool:
    """convert(x, dtype=x.dtype) -> x."""
    v = view("convert", inst)
    return v.x.type == inst.result.type and _forward(rw, inst, v.x)


@pattern("convert_convert", pass_name=PASS_NAME, ops=("convert",))
def convert_convert(rw: Rewriter, inst: Instruction) -> bool:
    """convert(convert(x, d1), d2) -> convert(x, d2) when x -> d1 is lossless."""
    outer = view("convert", inst)
    inner = view("convert", rw.producer(outer.x))
    src = _dense(inner.x) if inner is not None else None
    if inner is None or src is None or not is_lossless_convert(src.dtype, inner.dtype):
        return False
    if src == inst.result.type:
        return _forward(rw, inst, inner.x)
    rw.set_operands(inst, [inner.x])
    return True


# --- movement chains ----------------------------------------------------------------------------


@pattern("reshape_same_shape", pass_name=PASS_NAME, ops=("reshape",))
def reshape_same_shape(rw: Rewriter, inst: Instruction) -> bool:
    """reshape(x, shape=x.shape) -> x."""
    v = view("reshape", inst)
    return v.x.type == inst.result.type and _forward(rw, inst, v.x)


@pattern("reshape_reshape", pass_name=PASS_NAME, ops=("reshape",))
def reshape_reshape(rw: Rewriter, inst: Instruction) -> bool:
    """reshape(reshape(x)) -> reshape(x) (row-major order is kept by both)."""
    inner = view("reshape", rw.producer(view("reshape", inst).x))
    if inner is None:
        return False
    rw.set_operands(inst, [inner.x])
    return True


@pattern("transpose_identity", pass_name=PASS_NAME, ops=("transpose",))
def transpose_identity(rw: Rewriter, inst: Instruction) -> bool:
    """transpose(x, perm=identity) -> x."""
    v = view("transpose", inst)
    return tuple(v.perm) == tuple(range(len(v.perm))) and _forward(rw, inst, v.x)


@pattern("transpose_transpose", pass_name=PASS_NAME, ops=("transpose",))
def transpose_transpose(rw: Rewriter, inst: Instruction) -> bool:
    """transpose(transpose(x, p1), p2) -> transpose(x, p1[p2]) (x itself when that is identity)."""
    outer = view("transpose", inst)
    inner = view("transpose", rw.producer(outer.x))
    if inner is None:
        return False
    # result dim i is inner dim p2[i], which is x dim p1[p2[i]]
    perm = tuple(inner.perm[p] for p in outer.perm)
    if perm == tuple(range(len(perm))):
        return _forward(rw, inst, inner.x)
    rw.set_operands(inst, [inner.x], {"perm": perm})
    return True


@pattern("broadcast_identity", pass_name=PASS_NAME, ops=("broadcast_in_dim",))
def broadcast_identity(rw: Rewriter, inst: Instruction) -> bool:
    """broadcast_in_dim(x, shape=x.shape, dims=(0, 1, ...)) -> x."""
    v = view("broadcast_in_dim", inst)
    identity = tuple(v.dims) == tuple(range(len(v.dims)))
    return identity and v.x.type == inst.result.type and _forward(rw, inst, v.x)


@pattern("broadcast_broadcast", pass_name=PASS_NAME, ops=("broadcast_in_dim",))
def broadcast_broadcast(rw: Rewriter, inst: Instruction) -> bool:
    """broadcast_in_dim(broadcast_in_dim(x, d1), d2) -> broadcast_in_dim(x, d2[d1])."""
    outer = view("broadcast_in_dim", inst)
    inner = view("broadcast_in_dim", rw.producer(outer.x))
    if inner is None:
        return False
    # x dim i -> middle dim d1[i] -> result dim d2[d1[i]]; a size-1 x dim stays stretchable and a
    # full-size one matched the middle, which matched the result.
    dims = tuple(outer.dims[d] for d in inner.dims)
    rw.set_operands(inst, [inner.x], {"shape": tuple(outer.shape), "dims": dims})
    return True


@pattern("slice_full", pass_name=PASS_NAME, ops=("slice",))
def slice_full(rw: Rewriter, inst: Instruction) -> bool:
    """slice(x) covering all of x with stride 1 -> x."""
    v = view("slice", inst)
    t = _dense(v.x)
    if t is None or t != inst.result.type:
        return False
    full = all(a == 0 and s == 1 for a, s in zip(v.start, v.stride, strict=True))
    return full and _forward(rw, inst, v.x)


@pattern("slice_slice", pass_name=PASS_NAME, ops=("slice",))
def slice_slice(rw: Rewriter, inst: Instruction) -> bool:
    """slice(slice(x, a1, l1, s1), a2, l2, s2) -> slice(x, a1 + a2*s1, ..., s1*s2)."""
    outer = view("slice", inst)
    inner = view("slice", rw.producer(outer.x))
    if inner is None:
        return False
    start, limit, stride = [], [], []
    for a1, s1, a2, s2, n in zip(inner.start, inner.stride, outer.start, outer.stride,
                                 inst.result.type.shape, strict=True):
        # outer index k reads middle index a2 + k*s2, which reads x index a1 + (a2 + k*s2)*s1
        begin = a1 + a2 * s1
        step = s1 * s2
        start.append(begin)
        stride.append(step)
        limit.append(begin + (n - 1) * step + 1 if n else begin)
    rw.set_operands(inst, [inner.x],
                    {"start": tuple(start), "limit": tuple(limit), "stride": tuple(stride)})
    return True


@pattern("reshape_of_broadcast_scalar", pass_name=PASS_NAME, ops=("reshape",))
def reshape_of_broadcast_scalar(rw: Rewriter, inst: Instruction) -> bool:
    """reshape(broadcast_in_dim(s, dims=())) -> broadcast_in_dim(s, shape=new shape, dims=())."""
    inner = view("broadcast_in_dim", rw.producer(view("reshape", inst).x))
    if inner is None or tuple(inner.dims) != () or _dense(inner.x) is None:
        return False
    shape = inst.result.type.shape
    new = rw.emit_before(inst, "broadcast_in_dim", inner.x, shape=shape, dims=())
    return _forward(rw, inst, new)
