"""numpy codecs for more ggml formats: Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS.

Each format is decoded through one shared form, `unpack`: small integer levels ``q`` (int8, one
per element) with a float32 ``scale`` and optional ``offset`` per sub-block, so that
``x = scale * q + offset`` with the products and sums ggml's dequantizers compute (bit-exact
with ggml and the `gguf` package). Backends repack from the same form (one byte per weight).

The quantizers port ggml's reference quantizers (``quantize_row_<format>_ref``, no importance
matrix): Q4_1/Q5_0/Q5_1 match ggml byte for byte; the K and IQ4 formats follow ggml's scale
searches step by step in float32 with sums in element order, as `quant_blocks` does for Q4_K
and Q6_K (see the FMA note there). The codec table `quant_blocks.CODECS` includes these.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from .quant_blocks import (
    _F32,
    _GROUP_MAX_EPS,
    _f16_bytes,
    _f16_value,
    _first_absmax,
    _nearest_int,
    _pack_k4_scales,
    _seq_sum,
    _unpack_k4_scales,
)

__all__ = ["DEQUANTIZERS", "QUANTIZERS", "UNPACKERS", "unpack"]

Array = np.ndarray[Any, Any]
#: (q int8 [n, block], scale float32 [n, subs], offset float32 [n, subs] or None)
Unpacked = tuple[Array, Array, Array | None]

#: IQ4_NL's non-linear levels (ggml's kvalues_iq4nl), shared by IQ4_XS.
IQ4_VALUES: Final = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69,
                              89, 113], np.int8)
_IQ4_F32: Final = IQ4_VALUES.astype(_F32)


def _nibbles(qs: Array) -> Array:
    """uint8 [n, 16] -> [n, 32]: low nibbles are elements 0..15, high nibbles 16..31."""
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1)


def _bits32(qh: Array) -> Array:
    """uint8 [n, 4] (a little-endian uint32) -> its 32 bits [n, 32], bit j for element j."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=-1, bitorder="little")


# --- unpackers (raw [n, block_bytes] -> levels, scales, offsets) ---------------------------------


def _unpack_q4_1(raw: Array) -> Unpacked:  # f16 d | f16 m | 16 bytes; x = d * q + m
    return (_nibbles(raw[:, 4:]).astype(np.int8), _f16_value(raw[:, 0:2]),
            _f16_value(raw[:, 2:4]))


def _unpack_q5_0(raw: Array) -> Unpacked:  # f16 d | u32 qh | 16 bytes; x = d * (q - 16)
    q = _nibbles(raw[:, 6:]) | (_bits32(raw[:, 2:6]) << np.uint8(4))
    return q.astype(np.int8) - np.int8(16), _f16_value(raw[:, 0:2]), None


def _unpack_q5_1(raw: Array) -> Unpacked:  # f16 d | f16 m | u32 qh | 16 bytes; x = d * q + m
    q = _nibbles(raw[:, 8:]) | (_bits32(raw[:, 4:8]) << np.uint8(4))
    return q.astype(np.int8), _f16_value(raw[:, 0:2]), _f16_value(raw[:, 2:4])


def _unpack_q2_k(raw: Array) -> Unpacked:
    # 16 scale bytes (low nibble scale, high nibble min) | 64 bytes of 2-bit q | f16 d | f16 dmin.
    # Byte 32h + l holds elements 128h + 32s + l at bits 2s; x = d*sc * q - dmin*m per 16.
    n = raw.shape[0]
    scales, d, dmin = raw[:, :16], _f16_value(raw[:, 80:82]), _f16_value(raw[:, 82:84])
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    q = ((raw[:, 16:80].reshape(n, 2, 1, 32) >> shifts) & np.uint8(3)).reshape(n, 256)
    return (q.astype(np.int8), d * (scales & np.uint8(0x0F)).astype(_F32),
            -(dmin * (scales >> np.uint8(4)).astype(_F32)))


def _q3_k_scales(packed: Array) -> Array:
    """Q3_K's 12 bytes -> 16 six-bit scales minus 32, as float32 [n, 16]."""
    n = packed.shape[0]
    low = (packed[:, :8].reshape(n, 1, 8) >> np.array([0, 4], np.uint8).reshape(1, 2, 1))
    high = (packed[:, 8:].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 4, 1))
    scales = (low.reshape(n, 16) & np.uint8(0x0F)) | ((high.reshape(n, 16) & np.uint8(3)) << 4)
    out: Array = (scales.astype(np.int8) - np.int8(32)).astype(_F32)
    return out


def _unpack_q3_k(raw: Array) -> Unpacked:
    # 32 bytes hmask | 64 bytes of 2-bit q | 12 bytes scales | f16 d. Element 128h + 32s + l:
    # low bits at bits 2s of byte 32h + l, high bit = bit (4h + s) of hmask[l]; a clear high
    # bit subtracts 4. x = d * (scale - 32) * q per 16.
    n = raw.shape[0]
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    low = ((raw[:, 32:96].reshape(n, 2, 1, 32) >> shifts) & np.uint8(3)).reshape(n, 256)
    bits = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    high = ((raw[:, :32].reshape(n, 1, 32) >> bits) & np.uint8(1)).reshape(n, 256)
    q = low.astype(np.int8) - ((high ^ np.uint8(1)) << np.uint8(2)).astype(np.int8)
    return q, _f16_value(raw[:, 108:110]) * _q3_k_scales(raw[:, 96:108]), None


def _unpack_q5_k(raw: Array) -> Unpacked:
    # f16 d | f16 dmin | 12 bytes scales (as Q4_K) | 32 bytes qh | 128 bytes nibbles. Element
    # 64g + 32k + l: nibble k of byte 32g + l, high bit = bit (2g + k) of qh[l].
    n = raw.shape[0]
    scales, mins = _unpack_k4_scales(raw[:, 4:16])
    nib = (raw[:, 48:].reshape(n, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1))
    bits = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)
    high = (raw[:, 16:48].reshape(n, 1, 32) >> bits) & np.uint8(1)
    q = (nib & np.uint8(0x0F)).reshape(n, 256) | (high.reshape(n, 256) << np.uint8(4))
    return (q.astype(np.int8), _f16_value(raw[:, 0:2]) * scales.astype(_F32),
            -(_f16_value(raw[:, 2:4]) * mins.astype(_F32)))


def _unpack_iq4_nl(raw: Array) -> Unpacked:  # f16 d | 16 bytes of indices into IQ4_VALUES
    return IQ4_VALUES[_nibbles(raw[:, 2:])], _f16_value(raw[:, 0:2]), None


def _iq4_xs_scales(raw: Array) -> Array:
    n = raw.shape[0]
    high = raw[:, 2:4].copy().view("<u2").astype(np.uint32)  # (n, 1)
    high = (high >> (2 * np.arange(8, dtype=np.uint32))) & np.uint32(3)  # (n, 8)
    low = (raw[:, 4:8].reshape(n, 4, 1) >> np.array([0, 4], np.uint8).reshape(1, 1, 2))
    low = low.reshape(n, 8) & np.uint8(0x0F)
    out: Array = ((low | (high.astype(np.uint8) << 4)).astype(np.int8) - np.int8(32))
    return out.astype(_F32)


def _unpack_iq4_xs(raw: Array) -> Unpacked:
    # f16 d | u16 scales_h | 4 bytes scales_l | 128 bytes: sub-block i (32) uses bytes 16i..16i+15
    # as IQ4_NL does; x = d * (scale - 32) * IQ4_VALUES[index].
    n = raw.shape[0]
    idx = _nibbles(raw[:, 8:].reshape(n * 8, 16)).reshape(n, 256)
    return IQ4_VALUES[idx], _f16_value(raw[:, 0:2]) * _iq4_xs_scales(raw), None


UNPACKERS: Final = {
    "q4_1": _unpack_q4_1, "q5_0": _unpack_q5_0, "q5_1": _unpack_q5_1, "q2_k": _unpack_q2_k,
    "q3_k": _unpack_q3_k, "q5_k": _unpack_q5_k, "iq4_nl": _unpack_iq4_nl,
    "iq4_xs": _unpack_iq4_xs,
}


def unpack(raw: Array, format: str) -> Unpacked:
    """Levels, per-sub-block scales and offsets of blocks ``raw`` (uint8 [n, block_bytes]).

    ``dequantize == scale[:, s] * q + offset[:, s]`` for the elements of sub-block ``s`` (the
    sub-block size is ``block // scale.shape[1]``).
    """
    return UNPACKERS[format](raw)


def _dequantizer(format: str) -> Any:
    def dequantize(raw: Array) -> Array:
        q, scale, offset = UNPACKERS[format](raw)
        n, block = q.shape
        subs = scale.shape[1]
        x = scale.reshape(n, subs, 1) * q.reshape(n, subs, block // subs).astype(_F32)
        if offset is not None:
            x = x + offset.reshape(n, subs, 1)
        out: Array = x.reshape(n, block)
        return out

    return dequantize


DEQUANTIZERS: Final = {name: _dequantizer(name) for name in UNPACKERS}


# --- Q4_1, Q5_0, Q5_1 (quantize_row_q{4_1,5_0,5_1}_ref) -----------------------------------------


def _pack_nibbles(q: Array) -> Array:
    return (q[:, :16] & np.uint8(0x0F)) | (q[:, 16:] << np.uint8(4))


def _min_max_levels(blocks: Array, nmax: int) -> tuple[Array, Array, Array]:
    lo = blocks.min(axis=-1, keepdims=True)
    hi = blocks.max(axis=-1, keepdims=True)
    d = (hi - lo) / _F32(nmax)
    inv = np.where(d == 0, _F32(0), _F32(1) / np.where(d == 0, _F32(1), d))
    q = np.clip(np.trunc((blocks - lo) * inv + _F32(0.5)), 0, nmax).astype(np.uint8)
    return q, d, lo


def _quantize_q4_1(blocks: Array) -> Array:
    q, d, lo = _min_max_levels(blocks, 15)
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _pack_nibbles(q)], axis=-1)


def _quantize_q5_0(blocks: Array) -> Array:
    d = (_first_absmax(blocks) / _F32(-16))[:, None]
    inv = np.where(d == 0, _F32(0), _F32(1) / np.where(d == 0, _F32(1), d))
    q = np.clip(np.trunc(blocks * inv + _F32(16.5)), 0, 31).astype(np.uint8)
    qh = np.packbits(q >> np.uint8(4), axis=-1, bitorder="little")
    return np.concatenate([_f16_bytes(d), qh, _pack_nibbles(q)], axis=-1)


def _quantize_q5_1(blocks: Array) -> Array:
    q, d, lo = _min_max_levels(blocks, 31)
    qh = np.packbits(q >> np.uint8(4), axis=-1, bitorder="little")
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), qh, _pack_nibbles(q)], axis=-1)


# --- K formats -----------------------------------------------------------------------------------


def _qkx2(x: Array, weights: Array, nmax: int, rmin: float, rdelta: float, nstep: int,
          use_mad: bool) -> tuple[Array, Array, Array]:
    """Ggml's `make_qkx2_quants` over rows of `x`: (scale, -min, levels) per row.

    As `quant_blocks._make_qkx2_quants`, with ggml's ``use_mad`` (absolute instead of squared
    errors, Q2_K's choice).
    """
    x = np.ascontiguousarray(x.T)  # (n, rows): element-major, sums in element order
    weights = np.ascontiguousarray(weights.T)

    def err(diff: Array) -> Array:
        return np.abs(diff) if use_mad else diff * diff

    nmax_f = _F32(nmax)
    lo = np.minimum(np.min(x, axis=0), _F32(0))
    hi = np.max(x, axis=0)
    flat = hi == lo
    sum_w = _seq_sum(weights)
    sum_x = _seq_sum(weights * x)
    iscale = nmax_f / np.where(flat, _F32(1), hi - lo)
    scale = _F32(1) / iscale
    levels = np.clip(_nearest_int(iscale * (x - lo)), 0, nmax)
    best_error = _seq_sum(weights * err((scale * levels.astype(_F32) + lo) - x))
    for step in range(nstep + 1):
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
        this_scale = np.where(positive, sum_xl / np.where(sum_l2 == 0, _F32(1), sum_l2),
                              this_scale)
        error = _seq_sum(weights * err((this_scale * aux + this_min) - x))
        better = (det > 0) & (error < best_error) & ~flat
        levels = np.where(better, aux.astype(np.int32), levels)
        best_error = np.where(better, error, best_error)
        scale = np.where(better, this_scale, scale)
        lo = np.where(better, this_min, lo)
    scale = np.where(flat, _F32(0), scale)
    levels = np.where(flat, 0, levels)
    return scale.astype(_F32), (-lo).astype(_F32), levels.T


def _safe_inv(value: Array, numerator: float) -> Array:
    return np.where(value > 0, _F32(numerator) / np.where(value > 0, value, _F32(1)), _F32(0))


def _quantize_q2_k(blocks: Array) -> Array:
    # quantize_row_q2_K_ref: 16 sub-blocks of 16, 4-bit scales and mins.
    n = blocks.shape[0]
    sub = blocks.reshape(n * 16, 16)
    scales, mins, levels = _qkx2(sub, np.abs(sub), 3, -0.5, 0.1, 15, True)
    scales, mins = scales.reshape(n, 16), mins.reshape(n, 16)
    max_scale, max_min = scales.max(axis=-1), mins.max(axis=-1)
    ls = np.where((max_scale > 0)[:, None],
                  _nearest_int(_safe_inv(max_scale, 15)[:, None] * scales), 0)
    lm = np.where((max_min > 0)[:, None], _nearest_int(_safe_inv(max_min, 15)[:, None] * mins), 0)
    d = np.where(max_scale > 0, max_scale / _F32(15), _F32(0))[:, None].astype(np.float16)
    dmin = np.where(max_min > 0, max_min / _F32(15), _F32(0))[:, None].astype(np.float16)
    packed_scales = (ls.astype(np.uint8) & np.uint8(0x0F)) | (lm.astype(np.uint8) << 4)
    sub_d = d.astype(_F32) * (packed_scales & np.uint8(0x0F)).astype(_F32)
    sub_m = dmin.astype(_F32) * (packed_scales >> np.uint8(4)).astype(_F32)
    safe_d = np.where(sub_d == 0, _F32(1), sub_d)
    requant = np.clip(
        _nearest_int((blocks.reshape(n, 16, 16) + sub_m[..., None]) / safe_d[..., None]), 0, 3)
    levels = np.where((sub_d == 0)[..., None], levels.reshape(n, 16, 16), requant)
    levels = levels.astype(np.uint8).reshape(n, 2, 4, 32)  # (n, half, shift, l)
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    qs = np.bitwise_or.reduce(levels << shifts, axis=2).reshape(n, 64)
    return np.concatenate([packed_scales, qs, d.view(np.uint8), dmin.view(np.uint8)], axis=-1)


def _make_q3_quants(x: Array, nmax: int) -> tuple[Array, Array]:
    """Ggml's `make_q3_quants` with do_rmse over rows: (scale, levels + nmax) per row."""
    peak = _first_absmax(x)
    zero = np.abs(peak) < _GROUP_MAX_EPS
    iscale = -_F32(nmax) / np.where(zero, _F32(1), peak)
    x = np.ascontiguousarray(x.T)  # (16, rows)
    levels = np.clip(_nearest_int(iscale * x), -nmax, nmax - 1)
    w = x * x
    lf = levels.astype(_F32)
    sumlx = _seq_sum(w * x * lf)
    suml2 = _seq_sum(w * lf * lf)
    for _ in range(5):  # a row that changes nothing in a pass changes nothing later either
        for i in range(x.shape[0]):
            wi, xi, li = w[i], x[i], levels[i].astype(_F32)
            slx = sumlx - wi * xi * li
            sl2 = suml2 - wi * li * li
            positive = slx > 0
            new_l = np.clip(_nearest_int(xi * sl2 / np.where(positive, slx, _F32(1))),
                            -nmax, nmax - 1)
            nf = new_l.astype(_F32)
            slx = slx + wi * xi * nf
            sl2 = sl2 + wi * nf * nf
            accept = (positive & (new_l != levels[i]) & (sl2 > 0)
                      & (slx * slx * suml2 > sumlx * sumlx * sl2))
            levels[i] = np.where(accept, new_l, levels[i])
            sumlx = np.where(accept, slx, sumlx)
            suml2 = np.where(accept, sl2, suml2)
    scale = np.where(zero, _F32(0), sumlx / np.where(zero, _F32(1), suml2))
    return scale.astype(_F32), np.where(zero, 0, levels + nmax).T


def _quantize_q3_k(blocks: Array) -> Array:
    # quantize_row_q3_K_ref: 16 sub-blocks of 16, 6-bit signed scales, 3-bit levels.
    n = blocks.shape[0]
    scales, levels = _make_q3_quants(blocks.reshape(n * 16, 16), 4)
    scales, levels = scales.reshape(n, 16), levels.reshape(n, 16, 16)
    max_scale = _first_absmax(scales)
    has = max_scale != 0
    iscale = np.where(has, _F32(-32) / np.where(has, max_scale, _F32(1)), _F32(0))
    ls = np.where(has[:, None], np.clip(_nearest_int(iscale[:, None] * scales), -32, 31) + 32,
                  0).astype(np.uint8)  # ggml leaves the scale bytes zero without a scale
    d = np.where(has, _F32(1) / np.where(has, iscale, _F32(1)), _F32(0))[:, None]
    d16 = d.astype(np.float16)
    low = ls & np.uint8(0x0F)
    packed = np.zeros((n, 12), np.uint8)
    packed[:, :8] = low[:, :8] | (low[:, 8:] << np.uint8(4))
    top = (ls >> np.uint8(4)).reshape(n, 4, 4)  # (n, j // 4, j % 4)
    packed[:, 8:] = np.bitwise_or.reduce(
        top << (2 * np.arange(4, dtype=np.uint8)).reshape(1, 4, 1), axis=1)
    sub_d = d16.astype(_F32) * (ls.astype(np.int8) - np.int8(32)).astype(_F32)
    sub_d = np.where(has[:, None], sub_d, _F32(0))
    safe_d = np.where(sub_d == 0, _F32(1), sub_d)
    requant = np.clip(_nearest_int(blocks.reshape(n, 16, 16) / safe_d[..., None]), -4, 3) + 4
    levels = np.where((sub_d == 0)[..., None], levels, requant).astype(np.uint8).reshape(n, 256)
    high = (levels > 3).astype(np.uint8).reshape(n, 8, 32)  # element 32m + l -> bit m of l
    hmask = np.bitwise_or.reduce(high << np.arange(8, dtype=np.uint8).reshape(1, 8, 1), axis=1)
    low2 = (levels & np.uint8(3)).reshape(n, 2, 4, 32)
    qs = np.bitwise_or.reduce(low2 << (2 * np.arange(4, dtype=np.uint8)).reshape(1, 1, 4, 1),
                              axis=2).reshape(n, 64)
    return np.concatenate([hmask, qs, packed, d16.view(np.uint8)], axis=-1)


def _quantize_q5_k(blocks: Array) -> Array:
    # quantize_row_q5_K_ref: as Q4_K with 5-bit levels (make_qkx2_quants(32, 31, ..., -0.5, 0.1,
    # 15)) and the fifth bit in qh.
    n = blocks.shape[0]
    sub = blocks.reshape(n * 8, 32)
    av_x = np.sqrt(_seq_sum(np.ascontiguousarray((sub * sub).T)) / _F32(32))
    scales, mins, levels = _qkx2(sub, av_x[:, None] + np.abs(sub), 31, -0.5, 0.1, 15, False)
    scales, mins = scales.reshape(n, 8), mins.reshape(n, 8)
    max_scale = np.maximum(np.max(scales, axis=-1), _F32(0))
    max_min = np.maximum(np.max(mins, axis=-1), _F32(0))
    ls = np.minimum(_nearest_int(_safe_inv(max_scale, 63)[:, None] * scales) & 0xFF, 63)
    lm = np.minimum(_nearest_int(_safe_inv(max_min, 63)[:, None] * mins) & 0xFF, 63)
    d = (max_scale / _F32(63))[:, None].astype(np.float16)
    dmin = (max_min / _F32(63))[:, None].astype(np.float16)
    sub_d = d.astype(_F32) * ls.astype(_F32)
    sub_m = dmin.astype(_F32) * lm.astype(_F32)
    safe_d = np.where(sub_d == 0, _F32(1), sub_d)
    requant = np.clip(
        _nearest_int((blocks.reshape(n, 8, 32) + sub_m[..., None]) / safe_d[..., None]), 0, 31)
    levels = np.where((sub_d == 0)[..., None], levels.reshape(n, 8, 32), requant)
    levels = levels.astype(np.uint8).reshape(n, 4, 2, 32)  # (n, group, low/high half, l)
    nibbles = (levels[:, :, 0] & np.uint8(0x0F)) | ((levels[:, :, 1] & np.uint8(0x0F)) << 4)
    bits = (levels >> np.uint8(4)).reshape(n, 8, 32)  # bit 2g + k of qh[l]
    qh = np.bitwise_or.reduce(bits << np.arange(8, dtype=np.uint8).reshape(1, 8, 1), axis=1)
    return np.concatenate([d.view(np.uint8), dmin.view(np.uint8), _pack_k4_scales(ls, lm), qh,
                           nibbles.reshape(n, 128)], axis=-1)


# --- IQ4_NL / IQ4_XS (quantize_row_iq4_nl_impl without importance weights) ---------------------


def _best_index(values: Array) -> Array:
    """Ggml's `best_index_int8` over IQ4_VALUES: the nearest level (the upper one on ties)."""
    upper = np.clip(np.searchsorted(_IQ4_F32, values, side="right"), 1, 15)
    below, above = _IQ4_F32[upper - 1], _IQ4_F32[upper]
    out: Array = np.where(values - below < above - values, upper - 1, upper)
    out = np.where(values <= _IQ4_F32[0], 0, np.where(values >= _IQ4_F32[15], 15, out))
    return out.astype(np.uint8)


def _iq4_scales(x: Array) -> Array:
    """The best float32 scale of each row of 32 (ggml's 15-step search, weights x**2)."""
    peak = _first_absmax(x)
    zero = np.abs(peak) < _GROUP_MAX_EPS
    safe_peak = np.where(zero, _F32(1), peak)
    x = np.ascontiguousarray(x.T)  # (32, rows)
    w = x * x

    def sums(iscale: Array) -> tuple[Array, Array]:
        q = _IQ4_F32[_best_index(iscale * x)]
        return _seq_sum(w * q * x), _seq_sum(w * q * q)

    d = safe_peak / _F32(127)  # -max / values[0]
    sumqx, sumq2 = sums(_F32(1) / d)
    d = sumqx / np.where(sumq2 > 0, sumq2, _F32(1))
    best = d * sumqx
    for step in range(-7, 8):
        sumqx, sumq2 = sums(_F32(step - 127) / safe_peak)
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(better, sumqx / np.where(sumq2 > 0, sumq2, _F32(1)), d)
        best = np.where(better, d * sumqx, best)
    return np.where(zero, _F32(0), d).astype(_F32)


def _iq4_pack(indices: Array) -> Array:
    """Indices [n, 32] -> 16 bytes each: element j low nibble, element 16 + j high nibble."""
    out: Array = indices[:, :16] | (indices[:, 16:] << np.uint8(4))
    return out


def _quantize_iq4_nl(blocks: Array) -> Array:
    d = _iq4_scales(blocks)[:, None]
    inv = np.where(d == 0, _F32(0), _F32(1) / np.where(d == 0, _F32(1), d))
    return np.concatenate([_f16_bytes(d), _iq4_pack(_best_index(inv * blocks))], axis=-1)


def _quantize_iq4_xs(blocks: Array) -> Array:
    n = blocks.shape[0]
    sub = blocks.reshape(n * 8, 32)
    scales = _iq4_scales(sub).reshape(n, 8)
    d = (-_first_absmax(scales) / _F32(32))[:, None]
    inv = np.where(d == 0, _F32(0), _F32(1) / np.where(d == 0, _F32(1), d))
    ls = np.clip(_nearest_int(inv * scales), -32, 31)  # (n, 8)
    dl = d * ls.astype(_F32)
    idl = np.where(dl == 0, _F32(0), _F32(1) / np.where(dl == 0, _F32(1), dl))
    indices = _best_index(idl.reshape(n * 8, 1) * sub)
    biased = (ls + 32).astype(np.uint16)
    low = (biased & 0x0F).astype(np.uint8)
    scales_l = low[:, 0::2] | (low[:, 1::2] << np.uint8(4))
    scales_h = np.bitwise_or.reduce((biased >> 4) << (2 * np.arange(8, dtype=np.uint16)),
                                    axis=-1).astype("<u2").reshape(n, 1).view(np.uint8)
    out: Array = np.concatenate([_f16_bytes(d), scales_h, scales_l,
                                 _iq4_pack(indices).reshape(n, 128)], axis=-1)
    return out


QUANTIZERS: Final = {
    "q4_1": _quantize_q4_1, "q5_0": _quantize_q5_0, "q5_1": _quantize_q5_1,
    "q2_k": _quantize_q2_k, "q3_k": _quantize_q3_k, "q5_k": _quantize_q5_k,
    "iq4_nl": _quantize_iq4_nl, "iq4_xs": _quantize_iq4_xs,
}
