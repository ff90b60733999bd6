"""ggml block codecs: bit-exact agreement with the `gguf` package, round-trip error bounds, layouts.

Q4_K and Q6_K have no quantizer in `gguf`, so their vectorized quantizers are checked against a
scalar, line-by-line port of ggml's reference C (below), block by block.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.errors import FormatError, ShapeError
from omnitensor.ir import quant_blocks
from omnitensor.ir.types import QTENSOR_FORMATS, QUANT_FORMATS, QTensorType

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

FORMATS = ["q8_0", "q4_0", "q4_k", "q6_k"]
GGML = {
    "q8_0": GGMLQuantizationType.Q8_0,
    "q4_0": GGMLQuantizationType.Q4_0,
    "q4_k": GGMLQuantizationType.Q4_K,
    "q6_k": GGMLQuantizationType.Q6_K,
}
F32 = np.float32


def sample(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Gaussian data with awkward blocks: zeros, constants, tiny and huge scales, outliers."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(F32)
    flat = x.reshape(-1, shape[-1])
    if flat.shape[0] >= 8 and shape[-1] >= 256:
        flat[0, :256] = 0.0
        flat[1, :256] = 3.0
        flat[2, :256] = -2.0
        flat[3, :32] = 0.0
        flat[3, 40] = 50.0
        flat[4] *= F32(1e-4)
        flat[5] *= F32(300.0)
        flat[6, :16] = 0.0
        flat[7] = np.abs(flat[7])
    return x


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(
        np.asarray(a, F32).view(np.uint32), np.asarray(b, F32).view(np.uint32)
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_bit_exact_with_gguf_on_quantized_data(fmt: str) -> None:
    x = sample((16, 1024))
    blocks = quant_blocks.quantize(x, fmt)
    assert blocks.dtype == np.uint8
    assert blocks.shape == QTensorType(fmt, x.shape).storage_shape
    ours = quant_blocks.dequantize(blocks, fmt)
    theirs = gguf_quants.dequantize(blocks, GGML[fmt])
    assert ours.dtype == F32 and same_bits(ours, theirs)


@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_bit_exact_with_gguf_on_random_bytes(fmt: str) -> None:
    # Arbitrary bytes exercise every nibble/scale bit pattern; the float16 scales are kept
    # finite so that the comparison is about layout and arithmetic, not NaN payloads.
    fmt_info = QUANT_FORMATS[fmt]
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (64, fmt_info.block_bytes), dtype=np.uint8)
    halves = rng.uniform(-2, 2, (64, 2)).astype(np.float16).view(np.uint8)
    if fmt == "q6_k":
        raw[:, 208:210] = halves[:, :2]
    elif fmt == "q4_k":
        raw[:, 0:4] = halves
    else:
        raw[:, 0:2] = halves[:, :2]
    ours = quant_blocks.dequantize(raw.reshape(4, -1), fmt)
    theirs = gguf_quants.dequantize(raw.reshape(4, -1), GGML[fmt])
    assert ours.shape == (4, 16 * fmt_info.block) and same_bits(ours, theirs)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_quantize_byte_exact_with_gguf(fmt: str) -> None:
    x = sample((16, 1024), seed=4)
    x[8, :32] = np.linspace(-1, 1, 32)  # exact halves in x / d exercise roundf's ties
    np.testing.assert_array_equal(quant_blocks.quantize(x, fmt), gguf_quants.quantize(x, GGML[fmt]))


# Worst-case error per element relative to the block's largest magnitude, and RMS error relative
# to the data's RMS on Gaussian data (ggml's formats: ~8.5, 4.5, 4.5 and 6.6 bits per weight).
BOUNDS = {"q8_0": (0.005, 0.01), "q4_0": (0.13, 0.12), "q4_k": (0.2, 0.1), "q6_k": (0.04, 0.03)}


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_error_bounds(fmt: str) -> None:
    block = QUANT_FORMATS[fmt].block
    x = np.random.default_rng(5).standard_normal((32, 2048)).astype(F32)
    y = quant_blocks.dequantize(quant_blocks.quantize(x, fmt), fmt)
    worst, rms = BOUNDS[fmt]
    blocks_x, blocks_err = x.reshape(-1, block), np.abs(y - x).reshape(-1, block)
    peak = np.max(np.abs(blocks_x), axis=1, keepdims=True)
    assert np.all(blocks_err <= worst * peak), float(np.max(blocks_err / peak))
    assert np.sqrt(np.mean((y - x) ** 2)) <= rms * np.sqrt(np.mean(x**2))


@pytest.mark.parametrize("fmt", FORMATS)
def test_special_blocks_round_trip(fmt: str) -> None:
    x = sample((8, 512), seed=6)
    y = quant_blocks.dequantize(quant_blocks.quantize(x, fmt), fmt)
    assert np.all(y[0, :256] == 0)  # zero blocks decode to exact zeros
    np.testing.assert_allclose(y[1, :256], 3.0, rtol=0.01)
    np.testing.assert_allclose(y[2, :256], -2.0, rtol=0.01)
    assert np.all(np.isfinite(y))


@pytest.mark.parametrize("fmt", FORMATS)
def test_leading_dims_and_errors(fmt: str) -> None:
    block = QUANT_FORMATS[fmt].block
    x = sample((2, 3, 2 * block), seed=7)
    blocks = quant_blocks.quantize(x, fmt)
    assert blocks.shape == (2, 3, 2 * QUANT_FORMATS[fmt].block_bytes)
    flat = quant_blocks.quantize(x.reshape(6, -1), fmt)
    np.testing.assert_array_equal(blocks.reshape(6, -1), flat)
    assert quant_blocks.dequantize(blocks, fmt).shape == x.shape
    with pytest.raises(ShapeError, match=r"quantize: last axis must be a multiple"):
        quant_blocks.quantize(np.zeros((2, block + 1), F32), fmt)
    with pytest.raises(FormatError, match=r"dequantize: expected uint8 blocks"):
        quant_blocks.dequantize(blocks[..., :-1], fmt)
    with pytest.raises(FormatError, match=r"dequantize: expected uint8 blocks"):
        quant_blocks.dequantize(blocks.astype(np.int8), fmt)


def test_unknown_format() -> None:
    with pytest.raises(FormatError, match=r"quantize: unknown quantization format 'q7_k'"):
        quant_blocks.quantize(np.zeros(256, F32), "q7_k")
    assert set(quant_blocks.CODECS) == set(QTENSOR_FORMATS)


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_16_bit_formats_agree_with_gguf(fmt: str) -> None:
    # ggml's F16/BF16 weights as `QTensorType` storage: little-endian bytes, 2 per element.
    ggml = {"f16": GGMLQuantizationType.F16, "bf16": GGMLQuantizationType.BF16}[fmt]
    x = sample((16, 1024), seed=8)
    x[9, :6] = [np.inf, -np.inf, 0.0, -0.0, 6e-8, 1e-40]  # specials, f16/f32 subnormals
    blocks = quant_blocks.quantize(x, fmt)
    assert blocks.shape == QTensorType(fmt, x.shape).storage_shape == (16, 2048)
    theirs = np.ascontiguousarray(gguf_quants.quantize(x, ggml)).view(np.uint8)
    np.testing.assert_array_equal(blocks, theirs.reshape(16, 2048))
    raw = np.random.default_rng(9).integers(0, 256, (8, 512), dtype=np.uint8)  # NaNs included
    ours = quant_blocks.dequantize(raw, fmt)
    assert ours.shape == (8, 256)
    expected = gguf_quants.dequantize(raw.view("<u2") if fmt == "f16" else raw, ggml)
    np.testing.assert_array_equal(ours.view(np.uint32)[~np.isnan(ours)],
                                  np.asarray(expected, F32).view(np.uint32)[~np.isnan(ours)])
    assert np.array_equal(np.isnan(ours), np.isnan(expected))


def test_q4_0_element_order() -> None:
    # Elements 0..15 are the low nibbles, 16..31 the high nibbles; value = (nibble - 8) * d.
    block = np.zeros(18, np.uint8)
    block[:2] = np.array([0.5], np.float16).view(np.uint8)
    block[2:] = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)
    out = quant_blocks.dequantize(block, "q4_0")
    np.testing.assert_array_equal(out[:16], (np.arange(16) - 8) * 0.5)
    np.testing.assert_array_equal(out[16:], np.full(16, 3.5))


# --- scalar ports of ggml's reference quantizers (ggml-quants.c), one block at a time ------------


def _nearest_int(v: Any) -> int:
    return int(np.rint(F32(v)))


def _ref_make_qkx2(
    x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int
) -> tuple[Any, Any, list[int]]:
    n = len(x)
    mn, mx, sum_w = x[0], x[0], w[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        mn, mx = min(mn, x[i]), max(mx, x[i])
        sum_w += w[i]
        sum_x += w[i] * x[i]
    mn = min(mn, F32(0))
    if mx == mn:
        return F32(0), -mn, [0] * n
    iscale = F32(nmax) / (mx - mn)
    scale = F32(1) / iscale
    levels = [max(0, min(nmax, _nearest_int(iscale * (x[i] - mn)))) for i in range(n)]
    best = F32(0)
    for i in range(n):
        diff = scale * F32(levels[i]) + mn - x[i]
        best += w[i] * (diff * diff)
    for step in range(nstep + 1):
        iscale = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / (mx - mn)
        aux = [max(0, min(nmax, _nearest_int(iscale * (x[i] - mn)))) for i in range(n)]
        sum_l = sum_l2 = sum_xl = F32(0)
        for i in range(n):
            wl = w[i] * F32(aux[i])
            sum_l += wl
            sum_l2 += wl * F32(aux[i])
            sum_xl += wl * x[i]
        det = sum_w * sum_l2 - sum_l * sum_l
        if det > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            if this_min > 0:
                this_min, this_scale = F32(0), sum_xl / sum_l2
            err = F32(0)
            for i in range(n):
                diff = this_scale * F32(aux[i]) + this_min - x[i]
                err += w[i] * (diff * diff)
            if err < best:
                levels, best, scale, mn = aux, err, this_scale, this_min
    return scale, -mn, levels


def _ref_q4_k(x: np.ndarray) -> np.ndarray:
    scales, mins, levels = [], [], []
    for j in range(8):
        sub = x[32 * j : 32 * j + 32]
        sum_x2 = F32(0)
        for v in sub:
            sum_x2 += v * v
        av_x = np.sqrt(sum_x2 / F32(32))
        s, m, lv = _ref_make_qkx2(sub, av_x + np.abs(sub), 15, -1.0, 0.1, 20)
        scales.append(s)
        mins.append(m)
        levels.extend(lv)
    max_scale = max([F32(0), *scales])
    max_min = max([F32(0), *mins])
    inv_scale = F32(63) / max_scale if max_scale > 0 else F32(0)
    inv_min = F32(63) / max_min if max_min > 0 else F32(0)
    packed = [0] * 12
    for j in range(8):
        ls = min(63, _nearest_int(inv_scale * scales[j]) & 0xFF)
        lm = min(63, _nearest_int(inv_min * mins[j]) & 0xFF)
        if j < 4:
            packed[j], packed[j + 4] = ls, lm
        else:
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            packed[j - 4] |= (ls >> 4) << 6
            packed[j] |= (lm >> 4) << 6
    d = np.float16(max_scale / F32(63))
    dmin = np.float16(max_min / F32(63))
    for j in range(8):
        if j < 4:
            sc, m = packed[j] & 63, packed[j + 4] & 63
        else:
            sc = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4)
            m = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4)
        dd = F32(d) * F32(sc)
        if not dd:
            continue
        dm = F32(dmin) * F32(m)
        for ii in range(32):
            levels[32 * j + ii] = max(0, min(15, _nearest_int((x[32 * j + ii] + dm) / dd)))
    qs = [levels[g + i] | (levels[g + i + 32] << 4) for g in range(0, 256, 64) for i in range(32)]
    head = np.array([d, dmin], np.float16).view(np.uint8)
    return np.concatenate([head, np.array(packed + qs, np.uint8)])


def _ref_make_qx(x: np.ndarray, nmax: int) -> tuple[Any, list[int]]:
    amax, peak = F32(0), F32(0)
    for v in x:
        if abs(v) > amax:
            amax, peak = abs(v), v
    if amax < F32(1e-15):
        return F32(0), [0] * len(x)

    def attempt(iscale: Any) -> tuple[Any, Any, list[int]]:
        sumlx = suml2 = F32(0)
        ls = []
        for v in x:
            q = max(-nmax, min(nmax - 1, _nearest_int(iscale * v)))
            ls.append(q + nmax)
            w = v * v
            sumlx += w * v * F32(q)
            suml2 += w * F32(q) * F32(q)
        return sumlx, suml2, ls

    sumlx, suml2, levels = attempt(F32(-nmax) / peak)
    scale = sumlx / suml2 if suml2 else F32(0)
    best = scale * sumlx
    for step in [*range(-9, 0), *range(1, 10)]:
        sumlx, suml2, ls = attempt(-(F32(nmax) + F32(0.1) * F32(step)) / peak)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            levels, scale = ls, sumlx / suml2
            best = scale * sumlx
    return scale, levels


def _ref_q6_k(x: np.ndarray) -> np.ndarray:
    scales, levels = [], []
    for ib in range(16):
        s, lv = _ref_make_qx(x[16 * ib : 16 * ib + 16], 32)
        scales.append(s)
        levels.extend(lv)
    max_abs, max_scale = F32(0), F32(0)
    for s in scales:
        if abs(s) > max_abs:
            max_abs, max_scale = abs(s), s
    if max_abs < F32(1e-15):
        return np.zeros(210, np.uint8)
    iscale = F32(-128) / max_scale
    d = np.float16(F32(1) / iscale)
    sc = [min(127, _nearest_int(iscale * s)) for s in scales]
    for j in range(16):
        dd = F32(d) * F32(sc[j])
        if not dd:
            continue
        for ii in range(16):
            levels[16 * j + ii] = max(-32, min(31, _nearest_int(x[16 * j + ii] / dd))) + 32
    ql, qh = [0] * 128, [0] * 64
    for half in range(2):
        j = 128 * half
        for i in range(32):
            q = [levels[j + i + 32 * k] for k in range(4)]
            ql[64 * half + i] = (q[0] & 0xF) | ((q[2] & 0xF) << 4)
            ql[64 * half + i + 32] = (q[1] & 0xF) | ((q[3] & 0xF) << 4)
            qh[32 * half + i] = sum((q[k] >> 4) << (2 * k) for k in range(4))
    tail = np.array([d], np.float16).view(np.uint8)
    return np.concatenate([np.array(ql + qh, np.uint8), np.array(sc, np.int8).view(np.uint8), tail])


@pytest.mark.parametrize(("fmt", "ref"), [("q4_k", _ref_q4_k), ("q6_k", _ref_q6_k)])
def test_k_quantizers_follow_ggml_reference(fmt: str, ref: Any) -> None:
    x = sample((8, 256), seed=8)
    ours = quant_blocks.quantize(x, fmt)
    with np.errstate(all="ignore"):
        expected = np.stack([ref(row) for row in x])
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize("fmt", [*FORMATS, "f16", "bf16", "iq4_xs"])
def test_take_rows_is_dequantize_of_the_clamped_rows(fmt: str) -> None:
    """An embedding lookup decodes exactly the rows `dequantize` decodes, indices clamped."""
    table = quant_blocks.quantize(sample((7, 512)), fmt)
    tokens = np.array([[3, 0, 6], [-2, 9, 3]])
    got = quant_blocks.take_rows(table, tokens, fmt)
    want = quant_blocks.dequantize(table, fmt)[np.clip(tokens, 0, 6)]
    assert got.dtype == np.float32 and got.shape == (2, 3, 512)
    assert same_bits(got, want)
