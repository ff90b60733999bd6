"""LLVM IR pieces shared by the block intrinsics (`intdot`'s dot products, `dequant`'s tiles)."""

from __future__ import annotations

import functools
from typing import Any, Final

from llvmlite import ir
from numba import types as _nb_types

__all__ = ["LANES", "VF", "every_other", "fmuladd", "halves_added", "host_lanes",
           "intrinsic_args", "lane_range", "lane_totals", "load_quants", "load_vector",
           "pair_dot_add", "prefetch", "row_pointer", "splat", "widen_half"]

_I8, _I16, _I32, _I64, _F32 = (ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64),
                               ir.FloatType())

#: Floats per vector of the float32 kernels written in IR (one AVX2 register).
LANES: Final = 8
VF: Final = ir.VectorType(_F32, LANES)


@functools.cache
def host_lanes() -> int:
    """Float32 lanes of this CPU's widest vectors: 16 with AVX-512, else `LANES`."""
    from llvmlite import binding

    features: Any = binding.get_host_cpu_features()
    return 16 if features.get("avx512f", False) else LANES


def prefetch(builder: Any, address: Any) -> None:
    """A read prefetch of `address` into every cache level (a hint: it never faults)."""
    i8p = _I8.as_pointer()
    module = builder.module
    fn = module.globals.get("llvm.prefetch.p0i8") or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [i8p, _I32, _I32, _I32]), "llvm.prefetch.p0i8")
    builder.call(fn, [builder.bitcast(address, i8p), ir.Constant(_I32, 0), ir.Constant(_I32, 3),
                      ir.Constant(_I32, 1)])


def lane_range(builder: Any, vec: Any, lo: int, count: int) -> Any:
    """Lanes ``lo .. lo + count - 1`` of `vec`, as a vector of `count`."""
    return builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(_I32, count),
                                                        list(range(lo, lo + count))))


def every_other(builder: Any, vec: Any, start: int, count: int | None = None) -> Any:
    """Lanes ``start, start + 2, ...`` of `vec` (`count` of them, default half its lanes).

    The even lanes of a product of sign-extended 16-bit vectors plus its odd lanes is the
    pattern LLVM lowers to a 16-bit pair multiply-add (x86 ``vpmaddwd``).
    """
    count = vec.type.count // 2 if count is None else count
    return builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(_I32, count),
                                                        list(range(start, 2 * count, 2))))


@functools.cache
def _pair_dot_instruction() -> bool:
    """Whether pair products go through ``vpdpwssd`` (x86 with AVX-512 VNNI; see below).

    Decided by the features numba compiles for, not the host's alone: an instruction written
    out is not checked by LLVM against them, and a user's ``NUMBA_CPU_NAME`` (say ``generic``,
    for a kernel cache shared by several machines) must not get it.
    """
    import platform

    import numba
    from llvmlite import binding

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    config: Any = numba.config
    if config.CPU_FEATURES is not None:  # (`_compat` sets the host's own on AVX-512 hosts)
        named = set(str(config.CPU_FEATURES).split(","))
        if not {"+avx512vnni", "+avx512vl"} <= named:
            return False
    elif config.CPU_NAME is not None:  # a CPU named without features: not assumed to have it
        return False
    else:
        features: Any = binding.get_host_cpu_features()
        if not (features.get("avx512vnni", False) and features.get("avx512vl", False)):
            return False
    binding.initialize_native_asmparser()  # numba initializes the code generator only
    return True


def pair_dot_add(builder: Any, acc: Any, a: Any, b: Any) -> Any:
    """`acc` (i32 lanes; None for zeros) plus each lane's two 16-bit products of `a` and `b`.

    `a` and `b` hold twice acc's lanes of i16: lane j adds ``a[2j] b[2j] + a[2j+1] b[2j+1]``
    in 32-bit integer arithmetic (wrapping, as both forms do). Portably: the even lanes of the
    sign-extended products plus the odd lanes, which LLVM lowers to a pair multiply-add (x86
    ``vpmaddwd``, AArch64 ``smlal``) and an add. Where the CPU has AVX-512 VNNI and the vectors
    are 256 or 512 bits, one ``vpdpwssd`` multiplies and adds: `intdot`'s four-blocks-a-vector Q8_0
    products on 2 threads, same process, interleaved medians, 16 rows by 9728 x 896 1.55 ->
    1.38 ms, 1152 x 896 0.176 -> 0.156, 896 x 896 0.149 -> 0.133, 896 x 4864 0.975 -> 0.955;
    128 rows 0.94x and 0.92x the time; the 4-bit pair kernel (256 bits), 9728 x 1024 and 1024 x
    4864, Q4_K 0.93x the time at one row and 0.89-0.95x at 16. Written as the instruction, not
    as its LLVM intrinsic: LLVM's machine combiner split the intrinsic back into ``vpmaddwd``
    and ``vpaddd`` (which shortens a chain of them) for this host's tuning.
    """
    pairs = a.type.count
    wide = ir.VectorType(_I32, pairs // 2)
    if pairs in (16, 32) and _pair_dot_instruction():  # 256 or 512 bits (AVX-512 VL)
        halves = ir.VectorType(_I16, pairs)
        start = ir.Constant(wide, None) if acc is None else acc
        instruction = ir.InlineAsm(ir.FunctionType(wide, [wide, halves, halves]),
                                   "vpdpwssd $3, $2, $0", "=v,0,v,v")
        return builder.call(instruction, [start, a, b])
    chunk = ir.VectorType(_I32, pairs)
    p = builder.mul(builder.sext(a, chunk), builder.sext(b, chunk))
    t = builder.add(every_other(builder, p, 0), every_other(builder, p, 1))
    return t if acc is None else builder.add(acc, t)


def halves_added(builder: Any, vec: Any, lanes: int) -> Any:
    """`vec` folded to `lanes` lanes by adding its halves (integer lanes)."""
    width = vec.type.count
    while width > lanes:
        width //= 2
        vec = builder.add(lane_range(builder, vec, 0, width),
                          lane_range(builder, vec, width, width))
    return vec


def lane_totals(builder: Any, vectors: list[Any]) -> list[Any]:
    """The sum of each vector's lanes (equal widths, a power of two), as scalars in order.

    The vectors are added up together, two at a time: one step takes two vectors whose lanes
    are k segments (one a vector) and gives one of 2k half-length segments, each the lower
    half of a segment plus its upper half (two shuffles and an add for both). A lone vector
    folds its segments the same way. Eight 16-lane sums take 16 shuffles and 8 adds, where one
    scalar add a lane took 120 adds in a chain a vector and as many extractions: that was 30-40
    % of a 16-row product over rows of 896 (`intdot`).
    """
    def halves(a: Any, b: Any, segments: int, upper: bool) -> Any:
        width = a.type.count
        size = width // segments
        picks = [v * width + s * size + upper * size // 2 + j
                 for v in range(1 if a is b else 2) for s in range(segments)
                 for j in range(size // 2)]
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(_I32, len(picks)), picks))

    def folded(a: Any, b: Any, segments: int) -> Any:
        add = builder.fadd if isinstance(a.type.element, ir.FloatType) else builder.add
        return add(halves(a, b, segments, False), halves(a, b, segments, True))

    level = [(v, 1) for v in vectors]  # (vector, segments), each segment one input's lanes
    joined = True
    while joined:  # neighbours with as many segments join (keeping the order)
        joined = False
        after: list[tuple[Any, int, bool]] = []
        for vector, segments in level:
            if (after and after[-1][1] == segments and vector.type.count > segments
                    and not after[-1][2]):
                after[-1] = (folded(after[-1][0], vector, segments), 2 * segments, True)
                joined = True
            else:
                after.append((vector, segments, False))
        level = [(v, k) for v, k, _ in after]
    totals = []
    for vector, segments in level:
        while vector.type.count > segments:
            vector = folded(vector, vector, segments)
        totals += [builder.extract_element(vector, ir.Constant(_I32, i))
                   for i in range(segments)]
    return totals


def fmuladd(builder: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` on float32 vectors (of any width), fused where the CPU can."""
    module = builder.module
    vf = a.type
    name = f"llvm.fmuladd.v{vf.count}f32"
    fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(vf, [vf, vf, vf]),
                                                 name)
    return builder.call(fn, [a, b, c])


def load_vector(builder: Any, address: Any, lanes: int = LANES) -> Any:
    """The `lanes` float32 at `address` (no alignment assumed)."""
    return builder.load(builder.bitcast(address, ir.VectorType(_F32, lanes).as_pointer()),
                        align=4)


def row_pointer(builder: Any, array: Any, index: Any) -> Any:
    """A float pointer to row `index` of a 2-D array (its row stride in bytes, any layout)."""
    stride = builder.extract_value(array.strides, 0)
    start = builder.add(builder.ptrtoint(array.data, _I64), builder.mul(index, stride))
    return builder.inttoptr(start, _F32.as_pointer())


def intrinsic_args(context: Any, builder: Any, signature: Any, args: Any,
                   arrays: int) -> tuple[list[Any], list[Any]]:
    """An intrinsic's first `arrays` arguments as numba array structs, the rest as intp."""
    structs = [context.make_array(signature.args[i])(context, builder, args[i])
               for i in range(arrays)]
    ints = [context.cast(builder, args[i], signature.args[i], _nb_types.intp)
            for i in range(arrays, len(args))]
    return structs, ints


def load_quants(builder: Any, row: Any, start: Any, size: int, nibbles: bool) -> Any:
    """The `size` quants of a weight row from column `start` on, as one ``<size x i8>``.

    `row` points at the row's first byte. With `nibbles` (sub-blocks of 32 only) the row holds
    two quants 0..15 per byte, `quant.nibble_pack`'s layout: in each block, byte i holds quant
    i in its low nibble and quant 16 + i in its high one. Otherwise one int8 per quant.
    """
    if not nibbles:
        return builder.load(builder.bitcast(builder.gep(row, [start]),
                                            ir.VectorType(_I8, size).as_pointer()), align=1)
    half = builder.ashr(start, ir.Constant(start.type, 1))
    raw = builder.load(builder.bitcast(builder.gep(row, [half]),
                                       ir.VectorType(_I8, 16).as_pointer()), align=1)
    low = builder.and_(raw, ir.Constant(ir.VectorType(_I8, 16), [15] * 16))
    high = builder.lshr(raw, ir.Constant(ir.VectorType(_I8, 16), [4] * 16))
    return builder.shuffle_vector(low, high, ir.Constant(ir.VectorType(_I32, 32),
                                                         list(range(32))))


def splat(builder: Any, value: Any, lanes: int) -> Any:
    """A scalar `value` (a float32, an integer) in every one of `lanes` lanes."""
    vf = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vf, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vf, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))


def widen_half(builder: Any, bits: Any) -> Any:
    """The float32 value of IEEE half `bits` (an i16), by the CPU's conversion instruction.

    Only where `_compat.HALF_CONVERSION` (else LLVM would call a library routine).
    """
    return builder.fpext(builder.bitcast(bits, ir.HalfType()), _F32)
