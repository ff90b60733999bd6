"""CUDA C sources of the non-fused kernels: reductions, row kernels, quantized ops, decode attention.

Each function returns ``(kernel name, source)``; the source is the prelude plus one kernel built
with `source.thread_kernel` or `source.warp_kernel`, so its logic is host-checkable. Shapes,
strides and scalars travel in the int64 parameter array ``P`` (layouts documented per kernel):
a source depends only on op, dtypes (and the head size of attention), never on shapes.
"""

from __future__ import annotations

from typing import Final

from omnitensor.dtypes import DType, bool_, float32, float64, int32

from .source import CUDA, PRELUDE, WARP, Arg, is_float, thread_kernel, warp_kernel

__all__ = [
    "MAX_RANK",
    "QUANT_BLOCKS",
    "attention_source",
    "dequantize_source",
    "qmatmul_source",
    "reduce_source",
    "row_source",
]

#: Largest rank a strided kernel handles (shapes live in fixed-size parameter slots).
MAX_RANK: Final = 8
#: ggml format -> (elements, bytes) per block.
QUANT_BLOCKS: Final = {"q8_0": (32, 34), "q4_0": (32, 18), "q4_k": (256, 144), "q6_k": (256, 210)}

_QUANT_DECODERS: Final = r"""
#ifndef OT_QUANT
#define OT_QUANT
OT_HD float ot_f16_at(const unsigned char* p) { return ot_h2f((unsigned short)(p[0] | (p[1] << 8))); }
// One element e of one ggml block, decoded exactly as ggml does in float32.
OT_HD float ot_q8_0(const unsigned char* b, int e) { return (float)(signed char)b[2 + e] * ot_f16_at(b); }
OT_HD float ot_q4_0(const unsigned char* b, int e) {
  int nib = e < 16 ? (b[2 + e] & 0xF) : (b[2 + e - 16] >> 4);
  return (float)(nib - 8) * ot_f16_at(b);
}
OT_HD float ot_q4_k(const unsigned char* b, int e) {
  int j = e / 32, l = e % 32;
  const unsigned char* q = b + 4;
  int sc, mn;
  if (j < 4) { sc = q[j] & 63; mn = q[j + 4] & 63; }
  else { sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
  int nib = (b[16 + (j / 2) * 32 + l] >> (4 * (j % 2))) & 0xF;
  return ot_f16_at(b) * (float)sc * (float)nib - ot_f16_at(b + 2) * (float)mn;
}
OT_HD float ot_q6_k(const unsigned char* b, int e) {
  int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
  int low = (b[h * 64 + (k % 2) * 32 + l] >> (4 * (k / 2))) & 0xF;
  int high = (b[128 + h * 32 + l] >> (2 * k)) & 3;
  return ot_f16_at(b + 208) * (float)(signed char)b[192 + e / 16] * (float)((low | (high << 4)) - 32);
}
#endif
"""


def _tag(dtype: DType) -> str:
    return dtype.name


def _acc_type(op: str, dtype: DType) -> str:
    """Accumulator type: float16/bfloat16 in float (as the reference); float32 sums in double."""
    if dtype == float32 and op in ("reduce_sum", "reduce_prod"):
        return "double"
    return CUDA.compute_type(dtype)


def _ident(op: str, dtype: DType, acc: str) -> str:
    if op == "reduce_sum":
        return f"({acc})0"
    if op == "reduce_prod":
        return f"({acc})1"
    largest = op in ("reduce_min", "argmin")
    if dtype == bool_:
        return "true" if largest else "false"
    if is_float(dtype):
        return f"({acc})(1.0 / 0.0)" if largest else f"({acc})(-1.0 / 0.0)"
    bits = dtype.bits
    if dtype.name.startswith("uint"):
        return f"({acc}){(1 << bits) - 1}ull" if largest else f"({acc})0"
    return f"({acc}){(1 << (bits - 1)) - 1}ll" if largest else f"({acc})(-{1 << (bits - 1)}ll)"


def _fold(op: str, dtype: DType, acc: str, a: str, b: str) -> str:
    if op in ("reduce_sum", "reduce_prod"):
        symbol = "+" if op == "reduce_sum" else "*"
        if acc in ("float", "double"):
            return f"{a} = {a} {symbol} {b};"
        unsigned = "unsigned long long"  # integers wrap: sum in 64-bit unsigned, narrow on store
        return f"{a} = ({acc})(({unsigned}){a} {symbol} ({unsigned}){b});"
    name = "max" if op == "reduce_max" else "min"
    if dtype == bool_:
        return f"{a} = {a} {'||' if name == 'max' else '&&'} {b};"
    if is_float(dtype):
        return f"{a} = ot_f{name}({a}, {b});"
    return f"{a} = ot_i{name}<{acc}>({a}, {b});"


# P layout of reductions: [rows, n_red, n_kept, rank_red, x_off, kept shape[8], kept strides[8],
# red shape[8], red strides[8]]; the output is dense, one row per output element.
_RED_INDEX: Final = f"""
  long long base = ot_offset(row, P, (int)P[2], 5, 4, {5 + MAX_RANK});
  long long n = P[1];
"""


def reduce_source(op: str, dtype: DType) -> tuple[str, str]:
    """`reduce_sum/prod/max/min` or `argmax/argmin` over arbitrary strided axes: a warp per output.

    The result dtype is `dtype` (int32 indices for arg-reductions).
    """
    name = f"ot_{op}_{_tag(dtype)}"
    arg = op in ("argmax", "argmin")
    out_t = CUDA.storage_type(int32) if arg else CUDA.storage_type(dtype)
    args = [Arg("x", f"const {CUDA.storage_type(dtype)}*"), Arg("y", f"{out_t}*")]
    acc = CUDA.compute_type(dtype) if arg else _acc_type(op, dtype)
    red = (f"    long long off = base; long long r = j;\n"
           f"    for (int d = (int)P[3] - 1; d >= 0; --d) {{ long long sz = P[{5 + 2 * MAX_RANK} + d];"
           f" off += (r % sz) * P[{5 + 3 * MAX_RANK} + d]; r /= sz; }}\n")
    value = CUDA.load(dtype, "x[off]")
    if not arg:
        partial = (f"  s.acc = {_ident(op, dtype, acc)};{_RED_INDEX}"
                   f"  for (long long j = lane; j < n; j += {WARP}) {{\n{red}"
                   f"    {acc} v = ({acc}){value};\n    {_fold(op, dtype, acc, 's.acc', 'v')}\n  }}")
        combine = f"  {_fold(op, dtype, acc, 'a.acc', 'b.acc')}"
        finish = f"  if (lane == 0) y[row] = {CUDA.store(dtype, f'({CUDA.compute_type(dtype)})s.acc')};"
        state = [(acc, "acc", 1)]
    else:
        better = ">" if op == "argmax" else "<"
        nan = "(v != v)" if is_float(dtype) else "false"
        partial = (f"  s.val = {_ident(op, dtype, acc)}; s.idx = -1;{_RED_INDEX}"
                   f"  for (long long j = lane; j < n; j += {WARP}) {{\n{red}"
                   f"    {acc} v = {value};\n"
                   f"    if (s.idx < 0 || ({nan} && s.val == s.val) || "
                   f"(s.val == s.val && v {better} s.val)) {{ s.val = v; s.idx = j; }}\n  }}")
        a_nan = "(a.val != a.val)" if is_float(dtype) else "false"
        b_nan = "(b.val != b.val)" if is_float(dtype) else "false"
        combine = (f"  if (b.idx < 0) return;\n"
                   f"  bool take = a.idx < 0;\n"
                   f"  if (!take) {{\n"
                   f"    if ({a_nan} && {b_nan}) take = b.idx < a.idx;\n"
                   f"    else if ({b_nan}) take = true;\n"
                   f"    else if (!{a_nan}) take = (b.val {better} a.val) || "
                   f"(b.val == a.val && b.idx < a.idx);\n  }}\n"
                   f"  if (take) {{ a.val = b.val; a.idx = b.idx; }}")
        finish = "  if (lane == 0) y[row] = (int)(s.idx < 0 ? 0 : s.idx);"
        state = [(acc, "val", 1), ("long long", "idx", 1)]
    return name, PRELUDE + warp_kernel(name, args, state, partial, combine, finish)


def row_source(kind: str, dtype: DType) -> tuple[str, str]:
    """Row kernels over the last axis of a dense [rows, L] input: a warp per row.

    kinds: ``softmax`` and ``log_softmax`` (online max/sum), ``layer_norm`` (Welford mean/variance, optional
    weight/bias) and ``rms_norm`` (optional weight). P layout: [rows, L, eps as double bits,
    has_weight, has_bias]. Statistics are kept in float (double for float64).
    """
    name = f"ot_{kind}_{_tag(dtype)}"
    st = CUDA.storage_type(dtype)
    acc = "double" if dtype == float64 else "float"
    x = f"({acc}){CUDA.load(dtype, 'x[row * L + j]')}"
    head = f"  long long L = P[1];\n  {acc} eps = ({acc})ot_bitcast<double>(P[2]);\n"
    loop = f"  for (long long j = lane; j < L; j += {WARP}) {{\n"
    exp = "exp" if acc == "double" else "expf"
    sqrt = "sqrt" if acc == "double" else "sqrtf"
    args = [Arg("x", f"const {st}*"), Arg("w", f"const {st}*"), Arg("b", f"const {st}*"),
            Arg("y", f"{st}*")]
    if kind in ("softmax", "log_softmax"):
        state = [(acc, "m", 1), (acc, "s", 1)]
        partial = (f"{head}  s.m = -({acc})INFINITY; s.s = 0;\n{loop}    {acc} v = {x};\n"
                   f"    if (v > s.m) {{ s.s = s.s * {exp}(s.m - v) + 1; s.m = v; }}\n"
                   f"    else s.s += {exp}(v - s.m);\n  }}")
        combine = (f"  {acc} m = ot_fmax(a.m, b.m);\n"
                   f"  {acc} sa = a.s == 0 ? 0 : a.s * {exp}(a.m - m);\n"
                   f"  {acc} sb = b.s == 0 ? 0 : b.s * {exp}(b.m - m);\n"
                   f"  a.m = m; a.s = sa + sb;")
        log = "log" if acc == "double" else "logf"
        value = f"({x} - s.m) - {log}(s.s)" if kind == "log_softmax" else f"{exp}({x} - s.m) / s.s"
        finish = f"{head}{loop}    y[row * L + j] = {CUDA.store(dtype, value)};\n  }}"
    elif kind == "layer_norm":
        state = [(acc, "n", 1), (acc, "mean", 1), (acc, "m2", 1)]
        partial = (f"{head}  s.n = 0; s.mean = 0; s.m2 = 0;\n{loop}    {acc} v = {x};\n"
                   f"    s.n += 1; {acc} dl = v - s.mean; s.mean += dl / s.n; "
                   f"s.m2 += dl * (v - s.mean);\n  }}")
        combine = (f"  if (b.n == 0) return;\n  if (a.n == 0) {{ a = b; return; }}\n"
                   f"  {acc} n = a.n + b.n, dl = b.mean - a.mean;\n"
                   f"  a.mean += dl * (b.n / n); a.m2 += b.m2 + dl * dl * (a.n * b.n / n); a.n = n;")
        finish = (f"{head}  {acc} inv = 1 / {sqrt}(s.m2 / ({acc})L + eps);\n{loop}"
                  f"    {acc} v = ({x} - s.mean) * inv;\n"
                  f"    if (P[3]) v = v * ({acc}){CUDA.load(dtype, 'w[j]')};\n"
                  f"    if (P[4]) v = v + ({acc}){CUDA.load(dtype, 'b[j]')};\n"
                  f"    y[row * L + j] = {CUDA.store(dtype, 'v')};\n  }}")
    elif kind == "rms_norm":
        state = [(acc, "ss", 1)]
        partial = f"{head}  s.ss = 0;\n{loop}    {acc} v = {x};\n    s.ss += v * v;\n  }}"
        combine = "  a.ss += b.ss;"
        finish = (f"{head}  {acc} inv = 1 / {sqrt}(s.ss / ({acc})L + eps);\n{loop}"
                  f"    {acc} v = {x} * inv;\n"
                  f"    if (P[3]) v = v * ({acc}){CUDA.load(dtype, 'w[j]')};\n"
                  f"    y[row * L + j] = {CUDA.store(dtype, 'v')};\n  }}")
    else:
        raise ValueError(f"row_source: unknown kind {kind!r}")
    return name, PRELUDE + warp_kernel(name, args, state, partial, combine, finish)


def dequantize_source(format: str, dtype: DType) -> tuple[str, str]:
    """``dequantize``: thread t decodes element t. P layout: [elements per block, bytes per block]."""
    name = f"ot_dequantize_{format}_{_tag(dtype)}"
    args = [Arg("q", "const unsigned char*"), Arg("y", f"{CUDA.storage_type(dtype)}*")]
    body = (f"  long long blk = t / P[0]; int e = (int)(t % P[0]);\n"
            f"  float v = ot_{format}(q + blk * P[1], e);\n"
            f"  y[t] = {CUDA.store(dtype, f'({CUDA.compute_type(dtype)})v')};")
    return name, PRELUDE + _QUANT_DECODERS + thread_kernel(name, args, body)


def qmatmul_source(format: str, dtype: DType) -> tuple[str, str]:
    """``qmatmul`` y[m, n] = sum_k x[m, k] * w[n, k]: a warp per output, lanes over blocks.

    x is dense [M, K] of `dtype`, w is ggml rows [N, K / block * bytes]. P layout: [rows = M * N,
    N, K, elements per block, bytes per block]. float32 accumulation (float64 for float64).
    """
    name = f"ot_qmatmul_{format}_{_tag(dtype)}"
    acc = "double" if dtype == float64 else "float"
    args = [Arg("x", f"const {CUDA.storage_type(dtype)}*"), Arg("w", "const unsigned char*"),
            Arg("y", f"{CUDA.storage_type(dtype)}*")]
    partial = (f"  long long N = P[1], K = P[2], QK = P[3], QB = P[4];\n"
               f"  long long m = row / N, n = row % N, nb = K / QK;\n"
               f"  const unsigned char* wr = w + n * nb * QB;\n  s.acc = 0;\n"
               f"  for (long long b = lane; b < nb; b += {WARP}) {{\n"
               f"    for (int e = 0; e < (int)QK; ++e) {{\n"
               f"      {acc} wv = ({acc})ot_{format}(wr + b * QB, e);\n"
               f"      s.acc += wv * ({acc}){CUDA.load(dtype, 'x[m * K + b * QK + e]')};\n"
               f"    }}\n  }}")
    combine = "  a.acc += b.acc;"
    finish = f"  if (lane == 0) y[row] = {CUDA.store(dtype, f'({CUDA.compute_type(dtype)})s.acc')};"
    return name, PRELUDE + _QUANT_DECODERS + warp_kernel(
        name, args, [(acc, "acc", 1)], partial, combine, finish)


def attention_source(dtype: DType, head_dim: int) -> tuple[str, str]:
    """Decode attention: one query per (batch, head) against the first `len` cached keys.

    q [B * Hq, D], k/v caches [B * Hkv, S, D] (dense), the valid length read from the device
    (int32 `length`, so one launch list serves every step), y [B * Hq, D]. A warp per query
    row; lanes split the keys and keep an online softmax state (max, sum, D accumulators).
    P layout: [rows, Hq, Hkv, S, scale as double bits].
    """
    name = f"ot_decode_attention_{_tag(dtype)}_d{head_dim}"
    st = CUDA.storage_type(dtype)
    d = head_dim
    args = [Arg("q", f"const {st}*"), Arg("k", f"const {st}*"), Arg("v", f"const {st}*"),
            Arg("length", "const int*"), Arg("y", f"{st}*")]
    partial = (f"  long long Hq = P[1], Hkv = P[2], S = P[3];\n"
               f"  float scale = (float)ot_bitcast<double>(P[4]);\n"
               f"  long long kv = (row / Hq) * Hkv + (row % Hq) / (Hq / Hkv);\n"
               f"  long long len = length[0] < S ? length[0] : S;\n"
               f"  s.m = -INFINITY; s.s = 0;\n"
               f"  for (int i = 0; i < {d}; ++i) s.acc[i] = 0;\n"
               f"  for (long long j = lane; j < len; j += {WARP}) {{\n"
               f"    const {st}* kr = k + (kv * S + j) * {d};\n"
               f"    const {st}* vr = v + (kv * S + j) * {d};\n"
               f"    float score = 0;\n"
               f"    for (int i = 0; i < {d}; ++i) score += {CUDA.load(dtype, 'q[row * ' + str(d) + ' + i]')} * {CUDA.load(dtype, 'kr[i]')};\n"
               f"    score *= scale;\n"
               f"    float m = ot_fmax(s.m, score);\n"
               f"    float c = s.s == 0 ? 0.0f : expf(s.m - m), p = expf(score - m);\n"
               f"    for (int i = 0; i < {d}; ++i) s.acc[i] = s.acc[i] * c + p * {CUDA.load(dtype, 'vr[i]')};\n"
               f"    s.s = s.s * c + p; s.m = m;\n  }}")
    combine = ("  float m = ot_fmax(a.m, b.m);\n"
               "  float ca = a.s == 0 ? 0.0f : expf(a.m - m), cb = b.s == 0 ? 0.0f : expf(b.m - m);\n"
               f"  for (int i = 0; i < {d}; ++i) a.acc[i] = a.acc[i] * ca + b.acc[i] * cb;\n"
               "  a.s = a.s * ca + b.s * cb; a.m = m;")
    finish = (f"  for (int i = lane; i < {d}; i += {WARP}) y[row * {d} + i] = "
              f"{CUDA.store(dtype, 's.acc[i] / s.s')};")
    state = [("float", "m", 1), ("float", "s", 1), ("float", "acc", d)]
    return name, PRELUDE + warp_kernel(name, args, state, partial, combine, finish, warps=2)
