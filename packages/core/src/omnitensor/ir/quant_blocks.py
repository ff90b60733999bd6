"""numpy codecs for ggml's block-quantization layouts (Q8_0, Q4_0, Q4_K, Q6_K; more in CODECS).

The other common formats (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS) live in
`quant_codecs` and are registered in `CODECS` too.

Byte layouts, element orders and the dequantization arithmetic are ggml's own (ggml-quants.c), so
`dequantize` agrees bit for bit with ggml and with the `gguf` package. The quantizers reimplement
ggml's reference quantizers (``quantize_row_*_ref``). Everything is vectorized over blocks; the
only Python loops run over a block's few elements or over ggml's fixed search steps.
File parsing lives in `io`; the PTIR ops that use these codecs live in `ir.ops.quant`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, final

import ml_dtypes
import numpy as np

from ..errors import FormatError, ShapeError
from .types import QTENSOR_FORMATS

__all__ = ["CODECS", "Codec", "dequantize", "quantize", "take_rows"]

Array = np.ndarray[Any, Any]

_F32 = np.float32
# ggml's GROUP_MAX_EPS: a group whose largest magnitude is below it quantizes to all zeros.
_GROUP_MAX_EPS: Final = _F32(1e-15)
_CHUNK: Final = 4096  # blocks quantized per vectorized step


# --- helpers ------------------------------------------------------------------------------------


def _f16_bytes(values: Array) -> Array:
    """float32 [..., 1] -> the little-endian float16 bytes [..., 2] ggml stores (RNE rounding)."""
    return np.ascontiguousarray(values.astype("<f2")).view(np.uint8)


def _f16_value(raw: Array) -> Array:
    """uint8 [..., 2] little-endian float16 bytes -> float32 [..., 1]."""
    return np.ascontiguousarray(raw).view("<f2").astype(_F32)


def _nearest_int(values: Array) -> Array:
    """Ggml's `nearest_int`: round half to even in float32 (its 1.5 * 2**23 trick), as int32."""
    return np.rint(values.astype(_F32)).astype(np.int32)


def _seq_sum(values: Array) -> Array:
    """Sum over axis 0 in element order, in the array's dtype, as ggml's C loops add.

    NOTE: `np.sum` over a contiguous axis adds pairwise; adding rows one after another is
    strictly sequential, which keeps the quantizers' search decisions (and so their bytes)
    equal to ggml's. Callers keep data element-major, ``(elements, rows)``, so each add is a
    contiguous vector operation.
    """
    total: Array = values[0].copy()
    for row in values[1:]:
        total += row
    return total


def _first_absmax(x: Array) -> Array:
    """The signed value of largest magnitude per row; the first on ties, as ggml's `ax > amax`."""
    index = np.argmax(np.abs(x), axis=-1)[..., None]
    out: Array = np.take_along_axis(x, index, axis=-1)[..., 0]
    return out


def _blocks(op: str, x: Array, block: int) -> Array:
    """float32 [..., K] -> [n_blocks, block], checking K."""
    x = np.asarray(x)
    if x.ndim == 0 or x.shape[-1] % block:
        raise ShapeError(
            f"{op}: last axis must be a multiple of {block} (got shape {x.shape})", op=op
        )
    return np.ascontiguousarray(x, dtype=_F32).reshape(-1, block)


def _raw_blocks(op: str, blocks: Array, block_bytes: int) -> Array:
    """uint8 [..., K/block*block_bytes] -> [n_blocks, block_bytes], checking dtype and size."""
    blocks = np.asarray(blocks)
    if blocks.dtype != np.uint8 or blocks.ndim == 0 or blocks.shape[-1] % block_bytes:
        raise FormatError(
            f"{op}: expected uint8 blocks whose last axis is a multiple of {block_bytes} bytes "
            f"(got {blocks.dtype}{list(blocks.shape)})",
            op=op,
        )
    return np.ascontiguousarray(blocks).reshape(-1, block_bytes)


# --- Q8_0: f16 d, 32 x int8; x = q * d ---------------------------------------------------------


def _quantize_q8_0(blocks: Array) -> Array:
    # quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d) (round half away from zero).
    amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    d = amax / _F32(127)
    inv = np.where(d == 0, _F32(0), _F32(1) / np.where(d == 0, _F32(1), d))
    scaled = blocks * inv
    # C roundf (half away from zero) without the double rounding of `floor(|s| + 0.5)`.
    magnitude = np.abs(scaled)
    whole = np.floor(magnitude)
    q = np.sign(scaled) * (whole + np.floor(_F32(2) * (magnitude - whole)))
    return np.concatenate([_f16_bytes(d), q.astype(np.int8).view(np.uint8)], axis=-1)


def _dequantize_q8_0(raw: Array) -> Array:
    d = _f16_value(raw[:, :2])
    return raw[:, 2:].view(np.int8).astype(_F32) * d


# --- Q4_0: f16 d, 16 bytes; element j < 16 is the low nibble of byte j, j >= 16 the high nibble of
# byte j - 16; x = (nibble - 8) * d ---------------------------------------------------------------


def _quantize_q4_0(blocks: Array) -> Array:
    # quantize_row_q4_0_ref: d = max / -8 with max the signed value of largest magnitude, so max
    # maps to -8 exactly; q = min(15, (int8)(x / d + 8.5)).
    d = (_first_absmax(blocks) / _F32(-8))[:, None]
    inv = np.where(d == 0, _F32(0), _F32(1) / np.where(d == 0, _F32(1), d))
    q = np.clip(np.trunc(blocks * inv + _F32(8.5)), 0, 15).astype(np.uint8)
    packed = q[:, :16] | (q[:, 16:] << np.uint8(4))
    return np.concatenate([_f16_bytes(d), packed], axis=-1)


def _dequantize_q4_0(raw: Array) -> Array:
    d = _f16_value(raw[:, :2])
    qs = raw[:, 2:]
    nibbles = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1)
    return d * (nibbles.astype(np.int8) - np.int8(8)).astype(_F32)


# --- Q4_K: super-block of 256 = 8 sub-blocks of 32 -----------------------------------------------
# bytes: f16 d | f16 dmin | 12 bytes of 6-bit (scale, min) pairs | 128 bytes of nibbles.
# Bytes 32g..32g+31 of the nibbles hold elements 64g..64g+31 (low) and 64g+32..64g+63 (high);
# x = d * scale_j * nibble - dmin * min_j.


def _make_qkx2_quants(
    x: Array, weights: Array, nmax: int, rmin: float, rdelta: float, nstep: int
) -> tuple[Array, Array, Array]:
    """Ggml's `make_qkx2_quants` (use_mad=false) over rows of `x`: (scale, -min, L) per row.

    A weighted least-squares search over `nstep + 1` candidate scales for an asymmetric
    quantization ``x ~ scale * L + min`` with ``0 <= L <= nmax`` and ``min <= 0``.
    """
    x = np.ascontiguousarray(x.T)  # (n, rows): element-major, see _seq_sum
    weights = np.ascontiguousarray(weights.T)
    nmax_f = _F32(nmax)
    lo = np.minimum(np.min(x, axis=0), _F32(0))
    hi = np.max(x, axis=0)
    flat = hi == lo
    sum_w = _seq_sum(weights)
    sum_x = _seq_sum(weights * x)
    iscale = nmax_f / np.where(flat, _F32(1), hi - lo)
    scale = _F32(1) / iscale
    levels = np.clip(_nearest_int(iscale * (x - lo)), 0, nmax)
    diff = (scale * levels.astype(_F32) + lo) - x
    best_error = _seq_sum(weights * (diff * diff))
    for step in range(nstep + 1):
        # NOTE: ggml updates `min` inside this loop, so later candidates (their span and their
        # offset) are measured from the best minimum found so far; `lo` follows it.
        span = np.where(flat, _F32(1), hi - lo)
        iscale = (_F32(rmin) + _F32(rdelta) * _F32(step) + nmax_f) / span
        aux = np.clip(_nearest_int(iscale * (x - lo)), 0, nmax).astype(_F32)
        weighted = weights * aux
        sum_l = _seq_sum(weighted)
        sum_l2 = _seq_sum(weighted * aux)
        sum_xl = _seq_sum(weighted * x)
        det = sum_w * sum_l2 - sum_l * sum_l
        safe_det = np.where(det > 0, det, _F32(1))
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / safe_det
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / safe_det
        positive = this_min > 0
        this_min = np.where(positive, _F32(0), this_min)
        this_scale = np.where(positive, sum_xl / np.where(sum_l2 == 0, _F32(1), sum_l2), this_scale)
        diff = (this_scale * aux + this_min) - x
        error = _seq_sum(weights * (diff * diff))
        better = (det > 0) & (error < best_error) & ~flat
        levels = np.where(better, aux.astype(np.int32), levels)
        best_error = np.where(better, error, best_error)
        scale = np.where(better, this_scale, scale)
        lo = np.where(better, this_min, lo)
    scale = np.where(flat, _F32(0), scale)
    levels = np.where(flat, 0, levels)
    return scale.astype(_F32), (-lo).astype(_F32), levels.T


def _pack_k4_scales(ls: Array, lm: Array) -> Array:
    """8 six-bit scales and mins per block -> ggml's 12-byte packing (read by get_scale_min_k4)."""
    low = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    mid = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    high = (ls[:, 4:] & 0x0F) | ((lm[:, 4:] & 0x0F) << 4)
    return np.concatenate([low, mid, high], axis=-1).astype(np.uint8)


def _unpack_k4_scales(packed: Array) -> tuple[Array, Array]:
    """Ggml's `get_scale_min_k4` for j = 0..7 at once: uint8 [n, 12] -> (scales, mins) [n, 8]."""
    low, mid, high = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low & 0x3F, (high & 0x0F) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([mid & 0x3F, (high >> 4) | ((mid >> 6) << 4)], axis=-1)
    return scales, mins


def _quantize_q4_k(blocks: Array) -> Array:
    # quantize_row_q4_K_ref.
    n = blocks.shape[0]
    sub = blocks.reshape(n * 8, 32)  # (n * 8 sub-blocks, 32)
    av_x = np.sqrt(_seq_sum(np.ascontiguousarray((sub * sub).T)) / _F32(32))
    weights = av_x[:, None] + np.abs(sub)
    scales, mins, levels = _make_qkx2_quants(sub, weights, 15, -1.0, 0.1, 20)
    scales, mins = scales.reshape(n, 8), mins.reshape(n, 8)
    max_scale = np.maximum(np.max(scales, axis=-1), _F32(0))
    max_min = np.maximum(np.max(mins, axis=-1), _F32(0))
    inv_scale = np.where(max_scale > 0, _F32(63) / np.where(max_scale > 0, max_scale, 1), 0)
    inv_min = np.where(max_min > 0, _F32(63) / np.where(max_min > 0, max_min, 1), 0)
    # `uint8_t ls = nearest_int(...)` keeps the low byte, then MIN(63, ls).
    ls = np.minimum(_nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
    lm = np.minimum(_nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
    d = (max_scale / _F32(63))[:, None].astype(np.float16)
    dmin = (max_min / _F32(63))[:, None].astype(np.float16)
    sub_d = d.astype(_F32) * ls.astype(_F32)  # (n, 8)
    sub_m = dmin.astype(_F32) * lm.astype(_F32)
    safe_d = np.where(sub_d == 0, _F32(1), sub_d)
    requant = np.clip(
        _nearest_int((blocks.reshape(n, 8, 32) + sub_m[..., None]) / safe_d[..., None]), 0, 15
    )
    # ggml keeps the search's levels where the sub-block scale rounded to zero (`if (!d) continue`).
    levels = np.where((sub_d == 0)[..., None], levels.reshape(n, 8, 32), requant)
    levels = levels.astype(np.uint8).reshape(n, 4, 2, 32)  # (n, group, low/high, 32)
    nibbles = (levels[:, :, 0] | (levels[:, :, 1] << 4)).reshape(n, 128)
    return np.concatenate(
        [d.view(np.uint8), dmin.view(np.uint8), _pack_k4_scales(ls, lm), nibbles], axis=-1
    )


def _dequantize_q4_k(raw: Array) -> Array:
    n = raw.shape[0]
    d = _f16_value(raw[:, 0:2])
    dmin = _f16_value(raw[:, 2:4])
    scales, mins = _unpack_k4_scales(raw[:, 4:16])
    sub_d = (d * scales.astype(_F32))[..., None]  # (n, 8, 1)
    sub_m = (dmin * mins.astype(_F32))[..., None]
    qs = raw[:, 16:].reshape(n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    nibbles = (qs & np.uint8(0x0F)).reshape(n, 8, 32).astype(_F32)  # (n, sub-block, 32)
    out: Array = (sub_d * nibbles - sub_m).reshape(n, 256)
    return out


# --- Q6_K: super-block of 256 = 16 sub-blocks of 16 ----------------------------------------------
# bytes: 128 ql | 64 qh | 16 int8 scales | f16 d. In half h (elements 128h..128h+127), element
# 128h + 32k + l (k = 0..3, l = 0..31) has low 4 bits in ql[64h + l + 32 (k % 2)] (low nibble
# for k < 2, high for k >= 2) and high 2 bits at bit 2k of qh[32h + l];
# x = d * scale_(e // 16) * (q - 32).


def _make_qx_quants(x: Array, nmax: int) -> tuple[Array, Array]:
    """Ggml's `make_qx_quants` with rmse_type=1 and no importance weights: (scale, L) per row."""
    nmax_f = _F32(nmax)
    peak = _first_absmax(x)
    zero = np.abs(peak) < _GROUP_MAX_EPS
    safe_peak = np.where(zero, _F32(1), peak)
    x = np.ascontiguousarray(x.T)  # (n, rows): element-major, see _seq_sum
    weights = x * x

    def candidate(iscale: Array) -> tuple[Array, Array, Array]:
        q = np.clip(_nearest_int(iscale * x), -nmax, nmax - 1)
        qf = q.astype(_F32)
        sumlx = _seq_sum(weights * x * qf)
        suml2 = _seq_sum(weights * qf * qf)
        return q, sumlx, suml2

    levels, sumlx, suml2 = candidate(-nmax_f / safe_peak)
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, _F32(1)), _F32(0))
    best = scale * sumlx
    for step in (*range(-9, 0), *range(1, 10)):
        q, sumlx, suml2 = candidate(-(nmax_f + _F32(0.1) * _F32(step)) / safe_peak)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        levels = np.where(better, q, levels)
        scale = np.where(better, sumlx / np.where(suml2 > 0, suml2, _F32(1)), scale)
        best = np.where(better, scale * sumlx, best)
    scale = np.where(zero, _F32(0), scale)
    levels = np.where(zero, 0, levels + nmax)
    return scale.astype(_F32), levels.T


def _quantize_q6_k(blocks: Array) -> Array:
    # quantize_row_q6_K_ref.
    n = blocks.shape[0]
    scales, levels = _make_qx_quants(blocks.reshape(n * 16, 16), 32)
    scales, levels = scales.reshape(n, 16), levels.reshape(n, 16, 16)
    max_scale = _first_absmax(scales)
    zero = np.abs(max_scale) < _GROUP_MAX_EPS
    iscale = _F32(-128) / np.where(zero, _F32(1), max_scale)
    d = (_F32(1) / iscale)[:, None].astype(np.float16)
    # `int8_t scales = MIN(127, nearest_int(...))`; |iscale * s| <= 128, so only 128 clips.
    sub_scales = np.minimum(_nearest_int(iscale[:, None] * scales), 127).astype(np.int8)
    sub_d = d.astype(_F32) * sub_scales.astype(_F32)  # (n, 16)
    safe_d = np.where(sub_d == 0, _F32(1), sub_d)
    requant = np.clip(_nearest_int(blocks.reshape(n, 16, 16) / safe_d[..., None]), -32, 31) + 32
    levels = np.where((sub_d == 0)[..., None], levels, requant).astype(np.uint8)
    levels = levels.reshape(n, 2, 4, 32)  # (n, half, k, l)
    low = levels & np.uint8(0x0F)
    ql = np.concatenate(
        [low[:, :, 0] | (low[:, :, 2] << 4), low[:, :, 1] | (low[:, :, 3] << 4)], axis=-1
    ).reshape(n, 128)
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    qh = np.bitwise_or.reduce((levels >> np.uint8(4)) << shifts, axis=2).reshape(n, 64)
    out = np.concatenate([ql, qh, sub_scales.view(np.uint8), d.view(np.uint8)], axis=-1)
    # ggml memsets a block whose sub-block scales are all (near) zero.
    return np.where(zero[:, None], np.uint8(0), out).astype(np.uint8)


def _dequantize_q6_k(raw: Array) -> Array:
    n = raw.shape[0]
    ql, qh = raw[:, :128], raw[:, 128:192]
    scales = raw[:, 192:208].view(np.int8).astype(_F32)
    d = _f16_value(raw[:, 208:210])
    sub_d = (d * scales).reshape(n, 16, 1)
    low = ql.reshape(n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    low = (low & np.uint8(0x0F)).reshape(n, 8, 32)  # (n, half * 4 + k, l)
    high = qh.reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    high = (high & np.uint8(0x03)).reshape(n, 8, 32)
    q = ((low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)).astype(_F32)
    return (sub_d * q.reshape(n, 16, 16)).reshape(n, 256)


# --- the codec table ----------------------------------------------------------------------------


@final
@dataclass(frozen=True)
class Codec:
    """Quantizer and dequantizer of one format over flat blocks.

    Attributes:
        name: the format (a key of `ir.types.QTENSOR_FORMATS`).
        block: logical elements per block.
        block_bytes: bytes per block.
        quantize_blocks: float32 [n, block] -> uint8 [n, block_bytes].
        dequantize_blocks: uint8 [n, block_bytes] -> float32 [n, block].
    """

    name: str
    block: int
    block_bytes: int
    quantize_blocks: Callable[[Array], Array]
    dequantize_blocks: Callable[[Array], Array]


def _quantize_f16(blocks: Array) -> Array:
    return _f16_bytes(blocks)


def _dequantize_f16(raw: Array) -> Array:
    return _f16_value(raw)


def _quantize_bf16(blocks: Array) -> Array:
    # NOTE: round to nearest even, NaN kept NaN (quiet), as ggml's GGML_FP32_TO_BF16.
    return np.ascontiguousarray(blocks.astype(ml_dtypes.bfloat16)).view(np.uint8)


def _dequantize_bf16(raw: Array) -> Array:
    bits = np.ascontiguousarray(raw).view("<u2").astype(np.uint32) << np.uint32(16)
    out: Array = bits.view(_F32)
    return out


def _codec(name: str, quant: Callable[[Array], Array], dequant: Callable[[Array], Array]) -> Codec:
    fmt = QTENSOR_FORMATS[name]
    return Codec(name, fmt.block, fmt.block_bytes, quant, dequant)


CODECS: Final[dict[str, Codec]] = {
    c.name: c
    for c in (
        _codec("q8_0", _quantize_q8_0, _dequantize_q8_0),
        _codec("q4_0", _quantize_q4_0, _dequantize_q4_0),
        _codec("q4_k", _quantize_q4_k, _dequantize_q4_k),
        _codec("q6_k", _quantize_q6_k, _dequantize_q6_k),
        # ggml's 16-bit float weights (one element per "block")
        _codec("f16", _quantize_f16, _dequantize_f16),
        _codec("bf16", _quantize_bf16, _dequantize_bf16),
    )
}


def _more_codecs() -> None:
    # NOTE: imported here, after the helpers it reuses are defined (quant_codecs imports them).
    from . import quant_codecs

    for name, quant in quant_codecs.QUANTIZERS.items():
        CODECS[name] = _codec(name, quant, quant_codecs.DEQUANTIZERS[name])


_more_codecs()


def _get(op: str, format: str) -> Codec:
    if format not in CODECS:
        raise FormatError(
            f"{op}: unknown quantization format {format!r} (expected one of {', '.join(CODECS)})",
            op=op,
        )
    return CODECS[format]


def quantize(x: Any, format: str) -> Array:
    """Quantize `x` into ggml blocks of `format` along its last axis.

    Reimplements ggml's reference quantizers (``quantize_row_<format>_ref``, no importance
    matrix). Q8_0 and Q4_0 match ggml byte for byte. Q4_K and Q6_K follow ggml's scale searches
    step by step in float32 with sums in element order; a compiler's FMA contraction in ggml can
    still flip a rare near-tie in those searches, so their bytes may differ from a given ggml
    build while being equally valid blocks. NaN or infinite inputs give unspecified blocks.

    Args:
        x: float array [..., K], K a multiple of the format's block size (converted to float32).
        format: a key of `CODECS` (``"q8_0"``, ``"q4_0"``, ``"q4_1"``, ``"q5_0"``, ``"q5_1"``,
            ``"q2_k"``, ``"q3_k"``, ``"q4_k"``, ``"q5_k"``, ``"q6_k"``, ``"iq4_nl"``,
            ``"iq4_xs"``).

    Returns:
        uint8 array [..., K // block * block_bytes].

    Raises:
        FormatError: for an unknown format.
        ShapeError: when the last axis is not a multiple of the block size.
    """
    codec = _get("quantize", format)
    array = np.asarray(x)
    blocks = _blocks("quantize", array, codec.block)
    with np.errstate(all="ignore"):
        # Chunks of blocks keep the K-quant searches' working set in cache.
        raw = np.concatenate(
            [codec.quantize_blocks(blocks[i : i + _CHUNK]) for i in range(0, len(blocks), _CHUNK)]
            or [np.zeros((0, codec.block_bytes), np.uint8)]
        )
    last = array.shape[-1] // codec.block * codec.block_bytes
    return raw.reshape(*array.shape[:-1], last)


def take_rows(table: Array, index: Array, format: str) -> Array:
    """Rows `index` of a 2-D table of ggml blocks, decoded: float32 [*index.shape, C].

    An embedding lookup of a quantized table (`dequantize` of the gathered rows without its
    checks: the table was checked when it was loaded). Indices are clamped into the table, as
    ``gather`` clamps.
    """
    codec = CODECS[format]
    # NOTE: a decode step looks up one token: the clamp and the decode run a few numpy calls
    # (`dequantize`'s checks and copies were a third of the lookup, which runs at every step
    # with the caches cold after the weights streamed)
    index = np.minimum(np.maximum(index, 0), table.shape[0] - 1)
    picked = table[index]
    return _decode(codec, picked.reshape(-1, codec.block_bytes), picked.shape)


def _decode(codec: Codec, raw: Array, shape: tuple[int, ...]) -> Array:
    """Flat blocks `raw` [n, block_bytes] decoded to float32 [*shape[:-1], elements]."""
    with np.errstate(all="ignore"):
        out = codec.dequantize_blocks(raw)
    last = shape[-1] // codec.block_bytes * codec.block
    return out.astype(_F32, copy=False).reshape(*shape[:-1], last)


def dequantize(blocks: Any, format: str) -> Array:
    """Decode ggml blocks of `format` to float32 (bit-exact with ggml's dequantizers).

    Args:
        blocks: uint8 array [..., n * block_bytes].
        format: a key of `CODECS`.

    Returns:
        float32 array [..., n * block]. Blocks holding inf/NaN scales decode to inf/NaN.

    Raises:
        FormatError: for an unknown format, a dtype other than uint8, or a last axis that is not
            a whole number of blocks.
    """
    codec = _get("dequantize", format)
    array = np.asarray(blocks)
    return _decode(codec, _raw_blocks("dequantize", array, codec.block_bytes), array.shape)
