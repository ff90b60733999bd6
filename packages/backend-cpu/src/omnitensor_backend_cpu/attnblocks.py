"""The inner loops of decode attention in LLVM IR: eight key scores at once, weighted values.

Why IR: written as numba loops, a score ``q . k[s]`` per key ended in a horizontal sum of its
vector accumulator (~6 shuffles and adds for 8 multiply-adds at head size 64), and the
weighted sum ``dst += p[s] * v[s]`` loaded and stored `dst` for every few keys, since numba
cannot tell LLVM that `dst` and the values never overlap. Here `dots8` sums eight keys'
accumulators into one vector of eight scores by a transposing tree (7 shuffle pairs for the
eight), and `weigh` keeps up to 64 floats of `dst` in registers across all the keys. A
(7 heads, 2048 keys, 64) grouped-query attention on one thread: 46-56 against 54-57 us for
the scores and 47-50 against 67-70 us for the values (warm, interleaved).

Both require rows whose elements are contiguous and a row length that is a multiple of 8;
`attention` checks that and runs its numba loops otherwise.
"""

from __future__ import annotations

from typing import Any, Final

from llvmlite import ir
from numba import types as _types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic

from .irblocks import LANES, VF, fmuladd, load_vector, row_pointer, splat

__all__ = ["dots8", "weigh"]

# NOTE: numba's typing helpers are untyped; used through Any (see `_compat`).
types: Any = _types
cgutils: Any = _cgutils
intrinsic: Any = _intrinsic

#: Vectors of `dst` that `weigh` holds in registers in one pass over the keys.
_GROUP: Final = 8

_I32, _I64 = ir.IntType(32), ir.IntType(64)


def _pair_sums(builder: Any, x: Any, y: Any) -> Any:
    """[x0+x1, x2+x3, x4+x5, x6+x7, y0+y1, ..., y6+y7]: one level of the transposing tree."""
    even = ir.Constant(ir.VectorType(_I32, LANES), list(range(0, 2 * LANES, 2)))
    odd = ir.Constant(ir.VectorType(_I32, LANES), list(range(1, 2 * LANES, 2)))
    return builder.fadd(builder.shuffle_vector(x, y, even), builder.shuffle_vector(x, y, odd))


def _float32_arrays(*pairs: tuple[Any, int]) -> bool:
    return all(isinstance(a, types.Array) and a.ndim == ndim and a.dtype == types.float32
               for a, ndim in pairs)


@intrinsic  # type: ignore[untyped-decorator]
def dots8(typingctx: Any, query: Any, keys: Any, row: Any, s: Any) -> Any:
    """``row[s + j] = query . keys[s + j]`` for j in 0..7 (float32; see the module's rules)."""
    if not _float32_arrays((query, 1), (keys, 2), (row, 1)):
        return None
    sig = types.void(query, keys, row, s)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        q_arr, k_arr, r_arr = (context.make_array(signature.args[i])(context, builder, args[i])
                               for i in range(3))
        first = context.cast(builder, args[3], signature.args[3], types.intp)
        chunks = builder.lshr(builder.extract_value(k_arr.shape, 1), ir.Constant(_I64, 3))
        rows = [row_pointer(builder, k_arr, builder.add(first, ir.Constant(_I64, j)))
                for j in range(LANES)]
        accs = [cgutils.alloca_once_value(builder, ir.Constant(VF, None)) for _ in rows]
        with cgutils.for_range(builder, chunks) as loop:
            at = builder.shl(loop.index, ir.Constant(_I64, 3))
            q = load_vector(builder, builder.gep(q_arr.data, [at]))
            for key, acc in zip(rows, accs, strict=True):
                k = load_vector(builder, builder.gep(key, [at]))
                builder.store(fmuladd(builder, k, q, builder.load(acc)), acc)
        level = [builder.load(acc) for acc in accs]
        while len(level) > 1:  # 8 vectors -> 4 -> 2 -> 1 holding the eight scores in order
            level = [_pair_sums(builder, level[i], level[i + 1]) for i in range(0, len(level), 2)]
        out = builder.bitcast(builder.gep(r_arr.data, [first]), VF.as_pointer())
        builder.store(level[0], out, align=4)

    return sig, codegen


def _weigh_pass(builder: Any, p_arr: Any, v_arr: Any, dst: Any, lo: Any, hi: Any, at: Any,
                vectors: int) -> None:
    """``dst[at:at + 8 * vectors] += sum_s p[s] * values[s, same columns]``, in registers."""
    ptrs = [builder.gep(dst, [builder.add(at, ir.Constant(_I64, LANES * c))])
            for c in range(vectors)]
    accs = [cgutils.alloca_once_value(builder, load_vector(builder, p)) for p in ptrs]
    with cgutils.for_range_slice(builder, lo, hi, ir.Constant(_I64, 1)) as (s, _):
        weight = splat(builder, builder.load(builder.gep(p_arr.data, [s])), LANES)
        value_row = row_pointer(builder, v_arr, s)
        for c, acc in enumerate(accs):
            v = load_vector(builder, builder.gep(value_row, [builder.add(at, ir.Constant(_I64,
                                                                                 LANES * c))]))
            builder.store(fmuladd(builder, weight, v, builder.load(acc)), acc)
    for p, acc in zip(ptrs, accs, strict=True):
        builder.store(builder.load(acc), builder.bitcast(p, VF.as_pointer()), align=4)


@intrinsic  # type: ignore[untyped-decorator]
def weigh(typingctx: Any, weights: Any, values: Any, dst: Any, lo: Any, hi: Any) -> Any:
    """``dst += sum_{s in [lo, hi)} weights[s] * values[s]`` (float32; see the module's rules)."""
    if not _float32_arrays((weights, 1), (values, 2), (dst, 1)):
        return None
    sig = types.void(weights, values, dst, lo, hi)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> None:
        p_arr, v_arr, d_arr = (context.make_array(signature.args[i])(context, builder, args[i])
                               for i in range(3))
        s0, s1 = (context.cast(builder, args[i], signature.args[i], types.intp) for i in (3, 4))
        width = builder.extract_value(v_arr.shape, 1)
        group = ir.Constant(_I64, LANES * _GROUP)
        full = builder.udiv(width, group)
        with cgutils.for_range(builder, full) as loop:
            _weigh_pass(builder, p_arr, v_arr, d_arr.data, s0, s1,
                        builder.mul(loop.index, group), _GROUP)
        done = builder.mul(full, group)
        left = builder.lshr(builder.sub(width, done), ir.Constant(_I64, 3))
        with cgutils.for_range(builder, left) as loop:  # (head sizes 80, 96: one vector a pass)
            at = builder.add(done, builder.shl(loop.index, ir.Constant(_I64, 3)))
            _weigh_pass(builder, p_arr, v_arr, d_arr.data, s0, s1, at, 1)

    return sig, codegen

