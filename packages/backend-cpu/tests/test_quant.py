"""The Q4_0/Q4_K/Q6_K/Q8_0 qmatmul kernels over repacked weights against the reference kernel."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from omnitensor.backend.host_memory import is_aligned
from omnitensor.dtypes import float32
from omnitensor.ir import quant_blocks
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import QTensorType, TensorType
from omnitensor_backend_cpu import dequant, plugin, pool, quant, threads
from omnitensor_backend_cpu.backend import CpuBackend

FORMATS = ["q8_0", "q4_0", "q4_k", "q6_k"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_repacked_weight_dequantizes_like_the_reference(fmt: str) -> None:
    rng = np.random.default_rng(3)
    n, k = 6, 512
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    scales = np.repeat(packed.scales, 1 << packed.shift, axis=1)
    values = packed.qs.astype(np.float32) * scales
    if packed.offsets is not None:
        values -= np.repeat(packed.offsets, 32, axis=1)
    np.testing.assert_array_equal(values, quant_blocks.dequantize(blocks, fmt))
    assert is_aligned(quant.packed_for(blocks, fmt, (n, k)).stored)  # whole-line loads


@pytest.mark.parametrize("fmt", FORMATS)
def test_tile_dequantization_is_exact(fmt: str) -> None:
    """The BLAS tiles' vector dequantization: every format's layout, any rows of a tile."""
    rng = np.random.default_rng(4)
    n, k = 9, 512
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    mins = np.zeros((n, 0), np.float32) if packed.mins is None else packed.mins
    tile = np.full((5, k), np.nan, np.float32)
    dequant.dequantize_rows(packed.stored, packed.d, mins, 3, tile, 1, 4, packed.shift)
    expected = quant_blocks.dequantize(blocks, fmt)
    np.testing.assert_array_equal(tile[1:4], expected[4:7])  # weight rows lo + r
    assert np.isnan(tile[0]).all() and np.isnan(tile[4]).all()  # rows outside: untouched


# (The 32-element formats also at 3, 6, 7 and 13 blocks a row: rows that are not a whole
# number of the K formats' 256-element super-blocks, nor of the 4-bit kernel's lines of four
# blocks: a last pair, a last block, both.)
@pytest.mark.parametrize("fmt,n,k", [(f, n, k) for f in FORMATS
                                     for n, k in [(8, 256), (40, 768), (300, 1024)]]
                         + [(f, 9, k) for f in ("q8_0", "q4_0") for k in (96, 192, 224, 416)])
# integer dots (13: passes of 8, 4 and 1 rows); BLAS tiles
@pytest.mark.parametrize("m", [1, 3, 13, 40, quant.BLAS_MIN_ROWS + 8])
def test_qmatmul_kernel_matches_the_reference(backend: CpuBackend, fmt: str, m: int, n: int,
                                              k: int, assert_qmatmul_close: Any) -> None:
    rng = np.random.default_rng(1)
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    b = Builder()
    x = b.input(TensorType((1, m, k), float32))
    w = b.input(QTensorType(fmt, (n, k)))
    fn = b.build([b.emit("qmatmul", x, w, format=fmt)])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["quant"]
    xs = [rng.normal(size=(1, m, k)).astype(np.float32), backend.upload(blocks)]
    # repacked at load through the hook, then found by buffer identity
    assert plugin.omnitensor_prepare_weight(backend, "w", xs[1], QTensorType(fmt, (n, k))) \
        is xs[1]
    # (plans keep their last run's arrays, with what they prepared for them: earlier tests'
    # weights leave the cache when the collector frees their plans, not during this run)
    gc.collect()
    before = len(quant._CACHE)
    (got,) = backend.run(exe, xs)
    assert len(quant._CACHE) == before
    (want,) = evaluate(fn, [xs[0], blocks])
    assert_qmatmul_close(got, want)


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k"])
@pytest.mark.parametrize("m", [1, 16, quant.BLAS_MIN_ROWS + 8])
def test_products_of_one_activation_run_as_one_over_joined_rows(
        backend: CpuBackend, fmt: str, m: int, assert_qmatmul_close: Any) -> None:
    """q, k and v of one layer: one step, each weight's rows held once (views of the joined)."""
    rng = np.random.default_rng(3)
    k, rows = 256, (96, 32, 32)
    blocks = [backend.upload(quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32),
                                                   fmt)) for n in rows]
    b = Builder()
    x = b.input(TensorType((1, m, k), float32))
    ws = [b.input(QTensorType(fmt, (n, k))) for n in rows]
    other = b.input(QTensorType("q8_0" if fmt != "q8_0" else "q4_k", (32, k)))
    fn = b.build([b.emit("qmatmul", x, w, format=fmt) for w in ws]
                 + [b.emit("qmatmul", x, other, format=other.type.format)])
    exe = backend.compile(fn)
    joins = m < quant.BLAS_MIN_ROWS  # BLAS tiles from there: kept apart (contiguous results)
    # the three joined; the other format apart
    assert exe.plan.kinds == ["quant"] * (2 if joins else 4)
    for w, n in zip(blocks, rows, strict=True):
        plugin.omnitensor_prepare_weight(backend, "w", w, QTensorType(fmt, (n, k)))
    extra = backend.upload(quant_blocks.quantize(rng.normal(size=(32, k)).astype(np.float32),
                                                 other.type.format))
    xs = [rng.normal(size=(1, m, k)).astype(np.float32), *blocks, extra]
    got = backend.run(exe, xs)
    want = evaluate(fn, [xs[0], *[np.asarray(w) for w in blocks], extra])
    for g, w in zip(got, want, strict=True):
        assert_qmatmul_close(g, w)
    if not joins:
        return
    joined = quant.joined_for(blocks, fmt, [(n, k) for n in rows])
    scales = joined.d if isinstance(joined.d, tuple) else (joined.d,)
    assert all(is_aligned(a) for a in (joined.stored, *scales))  # whole-line loads
    for w, n in zip(blocks, rows, strict=True):  # each part's rows: a view of the joined
        assert np.shares_memory(quant.packed_for(w, fmt, (n, k)).stored, joined.stored)
    assert backend.run(exe, xs)[1].tolist() == got[1].tolist()


def test_large_qmatmul_split_over_threads_agrees() -> None:
    rng = np.random.default_rng(2)
    n, k = 4096, 4096
    assert pool.parts(n, 2 * n * k, grain=16) == threads.count() > 1 or threads.count() == 1
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), "q4_k")
    packed = quant.pack(blocks, "q4_k", (n, k))
    x = rng.normal(size=(2, k)).astype(np.float32)
    out = np.empty((2, n), np.float32)
    quant.qmatmul(x, packed, out)
    want = x @ quant_blocks.dequantize(blocks, "q4_k").T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("n,k", [(896, 4864), (4864, 896), (96, 128)])
def test_dequantized_tiles_are_equal_and_cover_the_weight(n: int, k: int) -> None:
    tile = quant._tile_rows(n, k)
    count = -(-n // tile)
    assert 4 * tile * k <= max(quant._TILE_BYTES, 4 * 16 * k)
    assert n - (count - 1) * tile > tile - count  # the last tile is not a narrow rest


def test_many_rows_by_several_tiles_match_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    n, k, m = 200, 256, quant.BLAS_MIN_ROWS
    monkeypatch.setattr(quant, "_TILE_BYTES", 4 * 48 * k)  # tiles of 40 rows: five
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), "q8_0")
    packed = quant.pack(blocks, "q8_0", (n, k))
    x = rng.normal(size=(m, k)).astype(np.float32)
    out = np.empty((m, n), np.float32)
    quant.qmatmul(x, packed, out)
    want = x @ quant_blocks.dequantize(blocks, "q8_0").T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("fmt,bound", [("q4_0", 1.34), ("q4_k", 1.06)])
def test_4_bit_weights_stay_4_bit(fmt: str, bound: float) -> None:
    # two weights per byte: the repacked form is about the size of the ggml blocks (Q4_K's
    # scales and offsets a byte per sub-block and a float32 per 256, as the file holds them)
    rng = np.random.default_rng(5)
    n, k = 64, 512
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    assert packed.nibbles is not None and packed.nibbles.nbytes == n * k // 2
    assert packed.nbytes <= bound * blocks.nbytes


def test_q6_k_scales_stay_a_byte_per_sub_block() -> None:
    # one int8 per weight, the sub-block scales as the file's int8 levels and one float32 per
    # 256: 8.6 bits a weight (float32 scales per 16 would be 10)
    rng = np.random.default_rng(5)
    n, k = 8, 512
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), "q6_k")
    packed = quant.pack(blocks, "q6_k", (n, k))
    assert isinstance(packed.d, tuple) and packed.d[0].dtype == np.int8
    assert packed.nbytes == n * k + n * k // 16 + 4 * n * k // 256


def test_q8_0_keeps_its_half_scales() -> None:
    # where the CPU widens halves, Q8_0's scales stay the file's float16 bits: the repacked
    # weight holds exactly the bytes of its ggml blocks (else float32 scales, 36/34 of them)
    from omnitensor_backend_cpu._compat import HALF_CONVERSION

    rng = np.random.default_rng(6)
    n, k = 16, 256
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), "q8_0")
    packed = quant.pack(blocks, "q8_0", (n, k))
    held = packed.qs.nbytes + packed.d.nbytes
    assert held == (blocks.nbytes if HALF_CONVERSION else blocks.nbytes * 36 // 34)
    assert packed.d.dtype == (np.uint16 if HALF_CONVERSION else np.float32)
    raw = np.ascontiguousarray(blocks).reshape(n, k // 32, 34)[:, :, :2]
    np.testing.assert_array_equal(packed.scales,
                                  raw.copy().view(np.float16).astype(np.float32)[..., 0])


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k", "q6_k"])
@pytest.mark.parametrize("m", [1, 5])
def test_non_finite_activations_propagate_as_in_the_reference(fmt: str, m: int) -> None:
    # the integer kernels cannot carry NaN or inf: such rows take the float kernels
    rng = np.random.default_rng(7)
    n, k = 48, 512
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    x = rng.normal(size=(m, k)).astype(np.float32)
    x[0, 3] = np.nan
    x[-1, 100] = np.inf if m > 1 else np.nan
    out = np.empty((m, n), np.float32)
    with np.errstate(all="ignore"):  # as plans run their steps
        quant.qmatmul(x, packed, out)
        want = x @ quant_blocks.dequantize(blocks, fmt).T
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(out), np.isinf(want))


# the 2 x 4 dot blocks and their edges, one row; the outer-product tiles (8 rows and up): one
# narrow tile, wide tiles with padding, whole wide tiles
@pytest.mark.parametrize("m", [1, 3, 4, 7, 8, 9, 16, 21, 32])
@pytest.mark.parametrize("split", [False, True])
def test_float32_row_products_match_float64(m: int, split: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "_COUNT", [2])
    if split:
        monkeypatch.setattr(pool, "MIN_SPLIT", 1)
        monkeypatch.setattr(pool, "MIN_WORKER_SPLIT", 1)
    rng = np.random.default_rng(m)
    x = rng.normal(size=(m, 53)).astype(np.float32)
    w = rng.normal(size=(37, 53)).astype(np.float32)  # an odd count of weight rows
    out = np.full((m, 37), np.nan, np.float32)
    quant.gemv(x, w, out)
    want = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_dot_step_knows_where_the_outer_product_tiles_start() -> None:
    from omnitensor_backend_cpu import fewrows, steps

    assert steps._FEWROWS_MIN_ROWS == fewrows.MIN_ROWS


@pytest.mark.parametrize("fmt", ["q8_0", "iq4_nl", "q2_k", "q3_k", "q4_k"])
@pytest.mark.parametrize(("m", "n"), [(8, 10), (16, 10), (13, 10), (16, 9), (3, 10)])
def test_long_rows_by_each_kernel_match_the_reference(fmt: str, m: int, n: int,
                                                      assert_qmatmul_close: Any) -> None:
    # rows of 2304 (over `intdot._PAIR_MIN_K`): one-byte weights with plain scales in blocks
    # of 32 go `intdot.GROUP` blocks a vector from 4 activation rows; in blocks of 16 (Q2_K,
    # Q3_K) two weight rows and eight activation rows a pass where both counts allow (8 or 16
    # by 10);
    # Q4_K (nibbles, factored scales), 13 activation rows or 9 weight rows: one row a pass
    from omnitensor_backend_cpu import intdot

    rng = np.random.default_rng(8)
    k = 2304
    assert k >= intdot._PAIR_MIN_K
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    x = rng.normal(size=(m, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    mins = quant._NO_MINS if packed.mins is None else packed.mins
    call = intdot.prepare(x, packed.stored, packed.d, mins, out, packed.shift, packed.highs)
    one_byte = fmt not in ("q4_k",)
    want = (intdot._grouped_split if one_byte and packed.shift == 5 and m >= 4
            else intdot._paired_split if one_byte and m % 8 == 0 and n % 2 == 0
            else None)
    kind = getattr(call, "func", None)
    assert (kind if kind in (intdot._grouped_split, intdot._paired_split) else None) is want
    assert call()
    assert_qmatmul_close(out, x @ quant_blocks.dequantize(blocks, fmt).T)


@pytest.mark.parametrize("m", [4, 5, 7, 8, 11, 16, 19])
@pytest.mark.parametrize("blocks", [1, 3, 6, 28, 31])
def test_grouped_blocks_match_float64_with_offsets(m: int, blocks: int) -> None:
    # `intdot`'s groups of blocks on int8 weights in blocks of 32: every row count past the
    # passes of 8 (a last 1-3 rows done again with the rows before them), blocks past the last
    # whole group, and per-block offsets (none of the formats here has them; the kernel
    # takes them as `_rows` does)
    from omnitensor_backend_cpu import intdot

    rng = np.random.default_rng(m * 100 + blocks)
    n, k = 12, 32 * blocks
    qs = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    d = rng.uniform(0.001, 0.01, size=(n, blocks)).astype(np.float32)
    mins = rng.uniform(-0.01, 0.01, size=(n, blocks)).astype(np.float32)
    x = rng.normal(size=(m, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    call = intdot.prepare(x, qs, d, mins, out, 5)
    assert getattr(call, "func", None) is intdot._grouped_split
    assert call()
    weight = (qs.astype(np.float64) * np.repeat(d, 32, axis=1)
              - np.repeat(mins.astype(np.float64), 32, axis=1))
    want = x.astype(np.float64) @ weight.T
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_grouped_products_hold_the_integer_bounds() -> None:
    # the largest sums a block can make (|q| = 128 against activations quantized to +-32767:
    # 32 * 128 * 32767 < 2**31), through every form of the pair multiply-add (vpdpwssd where
    # the CPU has AVX-512 VNNI); the sums are exact, so only float32 rounding is left
    from omnitensor_backend_cpu import intdot

    n, k, m = 8, 32 * 9, 16
    qs = np.full((n, k), -128, np.int8)
    qs[1::2] = 127
    qs[2, ::2] = 127  # mixed signs inside each pair
    d = np.ones((n, k // 32), np.float32)
    x = np.ones((m, k), np.float32)
    x[1::2] = -1.0
    out = np.full((m, n), np.nan, np.float32)
    call = intdot.prepare(x, qs, d, np.zeros((n, 0), np.float32), out, 5)
    assert getattr(call, "func", None) is intdot._grouped_split
    assert call()
    want = x.astype(np.float64) @ qs.astype(np.float64).T
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_group_layout_gives_each_chunk_a_part_of_every_block() -> None:
    from omnitensor_backend_cpu import intdot

    group = intdot.GROUP
    k = 32 * (2 * group + 1)  # two whole groups and one block past them
    for lanes in (8, 16):
        xq = np.arange(2 * k, dtype=np.int16).reshape(2, k)
        moved = xq.copy()
        intdot.interleave_groups(moved, lanes)
        per = 2 * lanes // group
        for row in range(2):
            for base in (0, 32 * group):
                for c in range(0, 32, per):
                    for g in range(group):
                        at = base + c // per * 2 * lanes + g * per
                        start = base + 32 * g + c
                        assert moved[row, at: at + per].tolist() == xq[
                            row, start: start + per].tolist()
            assert moved[row, 64 * group:].tolist() == xq[row, 64 * group:].tolist()


@pytest.mark.parametrize("k", [1, 7, 31, 32, 33, 64, 901])
def test_row_dot_sums_every_term_of_the_row(k: int) -> None:
    from omnitensor_backend_cpu import fewrows
    from omnitensor_backend_cpu._compat import jit

    dot = jit()(lambda x, w, m, n: fewrows.row_dot(x, w, m, n))
    rng = np.random.default_rng(k)
    x = rng.standard_normal((3, k)).astype(np.float32)
    w = rng.standard_normal((5, k + 3)).astype(np.float32)[:, :k]  # rows longer than K
    for m, n in ((0, 0), (2, 4), (1, 3)):
        want = float(np.dot(x[m].astype(np.float64), w[n].astype(np.float64)))
        assert abs(dot(x, w, m, n) - want) <= 1e-5 * (1 + np.abs(x[m]) @ np.abs(w[n]))
    x[1, k - 1] = np.float32(1e6)  # the last term (a pass's or the tail's) is counted
    w[3, k - 1] = np.float32(1.0)
    assert dot(x, w, 1, 3) > 5e5


def test_pair_sums_take_vnni_only_where_numba_compiles_for_it(monkeypatch: Any) -> None:
    # `irblocks.pair_dot_add` writes `vpdpwssd` out, unchecked by LLVM: a user's target CPU
    # (a kernel cache shared by machines) decides, not the host
    import platform

    import numba

    from omnitensor_backend_cpu import irblocks

    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("x86 only (the instruction is x86's)")
    cases = [("generic", None, False), (None, "+avx2,-avx512vnni,+avx512vl", False),
             (None, "+avx512f,+avx512vnni,+avx512vl", True)]
    for name, features, want in cases:
        monkeypatch.setattr(numba.config, "CPU_NAME", name)
        monkeypatch.setattr(numba.config, "CPU_FEATURES", features)
        irblocks._pair_dot_instruction.cache_clear()
        try:
            assert irblocks._pair_dot_instruction() is want, (name, features)
        finally:
            irblocks._pair_dot_instruction.cache_clear()
