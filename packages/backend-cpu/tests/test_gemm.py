"""`gemm`'s wide tiles: every edge of a tile, every layout, both thread splits, and the paths
that reach it (plain products, dequantized and widened weights) on any host."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir import quant_blocks
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu import gemm, half, quant, threads
from omnitensor_backend_cpu.backend import CpuBackend


def _want(a: np.ndarray, bt: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ bt.astype(np.float64).T


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Products take `gemm`'s path whatever this host's vectors and BLAS."""
    monkeypatch.setattr(threads, "wide_products", lambda: True)


# M around a panel (32 rows), N around a tile (12 weight rows, then 8, 4, 1), K from 1; a as
# stored or a transposed view (a weight gradient's ``dY.T``, packed along its columns)
@pytest.mark.parametrize("m", [1, 31, 32, 33, 70])
@pytest.mark.parametrize("n", [1, 11, 12, 16, 25, 44])
@pytest.mark.parametrize("k", [1, 17, 64])
@pytest.mark.parametrize("transposed", [False, True])
def test_gemm_matches_a_float64_product(m: int, n: int, k: int, transposed: bool) -> None:
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    if transposed:
        a = np.ascontiguousarray(a.T).T
    bt = rng.standard_normal((n, k), dtype=np.float32)
    out = np.full((m, n), np.nan, np.float32)
    gemm.gemm(a, bt, out)
    np.testing.assert_allclose(out, _want(a, bt), rtol=1e-5, atol=1e-5)


def test_gemm_reads_and_writes_through_strides() -> None:
    """bt a transposed view (``x @ W``), a a column slice, out a column slice of a wider array."""
    rng = np.random.default_rng(7)
    wide_a = rng.standard_normal((45, 80), dtype=np.float32)
    a = wide_a[:, 3:43]
    w = rng.standard_normal((40, 30), dtype=np.float32)  # (K, N): bt = w.T
    frame = np.full((45, 50), -7.0, np.float32)
    out = frame[:, 10:40]
    gemm.gemm(a, w.T, out)
    np.testing.assert_allclose(out, _want(a, w.T), rtol=1e-5, atol=1e-5)
    assert (frame[:, :10] == -7.0).all() and (frame[:, 40:] == -7.0).all()
    columns = np.full((30, 45), np.nan, np.float32).T  # out's rows strided: stored by lanes
    gemm.gemm(a, w.T, columns)
    np.testing.assert_allclose(columns, _want(a, w.T), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("span", [gemm.SPAN, gemm.FEW_ROWS])
@pytest.mark.parametrize("layout", ["rows", "columns", "every_other_column"])
def test_panels_hold_a_transposed_and_zero_padded(span: int, layout: str) -> None:
    """Whole 16 x 16 blocks go through registers, the rest (a short last panel, K past the
    last block, rows without unit stride) element by element: every panel equals a's rows."""
    rng = np.random.default_rng(3)
    m, k = 2 * span + 5, 37
    full = rng.standard_normal((m, 2 * k), dtype=np.float32)
    a = {"rows": full[:, :k], "columns": np.ascontiguousarray(full[:, :k].T).T,
         "every_other_column": full[:, ::2][:, :k]}[layout]
    count = -(-m // span)
    panels = np.full((count * k, span), np.nan, np.float32)
    gemm.pack_rows(a, panels, 0, count)
    padded = np.zeros((count * span, k), np.float32)
    padded[:m] = a
    want = padded.reshape(count, span, k).transpose(0, 2, 1).reshape(count * k, span)
    np.testing.assert_array_equal(panels, want)


@pytest.mark.parametrize(("m", "k", "transposed", "parts"), [
    (40, 48, False, 2),  # few panels: out's columns split
    (300, 48, False, 2),  # panels split by rows (4+ a thread)
    (300, 48, True, 2),  # a transposed but too few terms: by rows
    (130, 131, True, 2),  # a transposed (dY.T @ X): the sum split, shares uneven
    (70, 400, True, 3),  # ... over three threads: two partial sums added
])
def test_every_thread_split_gives_the_same_product(
        monkeypatch: pytest.MonkeyPatch, m: int, k: int, transposed: bool, parts: int) -> None:
    from omnitensor_backend_cpu import pool

    monkeypatch.setattr(pool, "parts", lambda *a, **kw: parts)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((k, m) if transposed else (m, k), dtype=np.float32)
    a = a.T if transposed else a
    bt = rng.standard_normal((61, k), dtype=np.float32)
    for _ in range(8):  # threads that overran each other's panels would differ now and then
        out = np.full((m, 61), np.nan, np.float32)
        gemm.gemm(a, bt, out)
        np.testing.assert_allclose(out, _want(a, bt), rtol=1e-5, atol=1e-4)
    assert gemm.column_share(61, 2, 0) == (0, 36) and gemm.column_share(61, 2, 1) == (36, 61)


def test_gemm_refuses_mismatched_shapes() -> None:
    a = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match="shapes do not match"):
        gemm.gemm(a, np.zeros((5, 7), np.float32), np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="shapes do not match"):
        gemm.gemm(a, np.zeros((5, 8), np.float32), np.zeros((4, 6), np.float32))


@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize("m", [20, 70])  # from 17 rows: not `fewrows`' two 16-row tiles
def test_a_large_product_runs_on_the_wide_tiles(backend: CpuBackend, m: int) -> None:
    n, k = 130, 1024  # m * n * k over gemm.MIN_WORK
    assert m * n * k >= gemm.MIN_WORK
    b = Builder()
    x = b.input(TensorType((m, k), float32))
    w = b.input(TensorType((n, k), float32))
    fn = b.build([b.emit("dot_general", x, w, contracting=((1,), (1,)))])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["gemm"]
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((m, k), dtype=np.float32),
          rng.standard_normal((n, k), dtype=np.float32)]
    (got,) = backend.run(exe, xs)
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k"])
@pytest.mark.parametrize("m", [quant.WIDE_MIN_ROWS, quant.BLAS_MIN_ROWS + 8])  # both ends
def test_dequantized_weights_multiply_on_the_wide_tiles(fmt: str, m: int,
                                                        assert_qmatmul_close: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(quant, "_many_rows", lambda *a, f=quant._many_rows: (
        calls.append(1), f(*a))[1])
    rng = np.random.default_rng(2)
    n, k = 300, 512  # 300 rows: tiles of 12 and a short one
    blocks = quant_blocks.quantize(rng.normal(size=(n, k)).astype(np.float32), fmt)
    packed = quant.pack(blocks, fmt, (n, k))
    x = rng.normal(size=(m, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    quant.qmatmul(x, packed, out)
    assert calls, "the dequantized path was not taken"
    assert_qmatmul_close(out, x @ quant_blocks.dequantize(blocks, fmt).T)


@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("hardware", sorted({False, half.HALF_CONVERSION}))
def test_16_bit_weights_multiply_on_the_wide_tiles(fmt: str, hardware: bool) -> None:
    rng = np.random.default_rng(4)
    m, n, k = 90, 300, 192
    w = rng.standard_normal((n, k)).astype(np.float32)
    w[4, :3] = [0.0, 3e-7, -6e-8]  # zero and subnormal halves take the exact pass
    blocks = quant_blocks.quantize(w, fmt)
    blocks.flags.writeable = False
    x = rng.standard_normal((m, k)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    half.qmatmul(x, blocks, fmt, out, hardware=hardware)
    want = _want(x, quant_blocks.dequantize(blocks, fmt))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)


@pytest.mark.usefixtures("wide")
def test_blas_stays_on_one_thread_beside_the_wide_tiles() -> None:
    threads.blas_for(1e12)
    try:
        assert threads._BLAS[1] == 1
    finally:
        threads._BLAS[1] = -1  # the next call sets the count again


@pytest.mark.parametrize("case", ["gqa-causal", "bool-softcap", "additive", "kv-length"])
def test_attention_products_on_the_wide_tiles_match_the_blas_path(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor_backend_cpu import attention

    rng = np.random.default_rng(9)
    b, hq, hkv, t, s, d = 2, 6, 2 if case == "gqa-causal" else 6, 40, 70, 16
    q = rng.normal(size=(b, t, hq, d)).astype(np.float32).transpose(0, 2, 1, 3)  # strided
    k = rng.normal(size=(b, hkv, s, d)).astype(np.float32)
    v = rng.normal(size=(b, hkv, s, d)).astype(np.float32)
    kwargs: dict[str, Any] = {"scale": 0.3}
    if case == "gqa-causal":
        kwargs["causal"] = True
    elif case == "bool-softcap":
        kwargs.update(mask=rng.random((b, 1, t, s)) > 0.3, softcap=2.0)
    elif case == "additive":
        kwargs["mask"] = rng.normal(size=(1, hq, 1, s)).astype(np.float32)
    else:
        kwargs["kv_length"] = 50  # a prefill into a larger cache: keys from 50 on skipped
    results = []
    for wide in (False, True):
        monkeypatch.setattr(threads, "wide_products", lambda wide=wide: wide)
        out = np.full((b, hq, t, d), np.nan, np.float32)
        attention.sdpa(q, k, v, out, **kwargs)
        results.append(out)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5, atol=1e-5)


# up to a 16-row panel; N around `few`'s 16-row tiles (then 4, 1); K around the full tiles'
# passes of 16 (each prefetching the next tile's line)
@pytest.mark.parametrize("m", [1, 8, 9, 16])
@pytest.mark.parametrize("n", [1, 5, 16, 21, 40])
@pytest.mark.parametrize("k", [1, 15, 17, 64])
@pytest.mark.parametrize("stored", [False, True])
def test_few_rows_match_a_float64_product(m: int, n: int, k: int, stored: bool) -> None:
    rng = np.random.default_rng(m * 100 + n * 10 + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    # a weight as stored (rows contiguous), or a transposed view (strided reads)
    bt = (rng.standard_normal((n, k), dtype=np.float32) if stored
          else rng.standard_normal((k, n), dtype=np.float32).T)
    out = np.full((m, n), np.nan, np.float32)
    gemm.few(a, bt, out)
    np.testing.assert_allclose(out, _want(a, bt), rtol=1e-5, atol=1e-5)
    split = np.full((m, n), np.nan, np.float32)
    panels = np.empty((k, gemm.FEW_ROWS), np.float32)
    gemm.pack_rows(a, panels, 0, 1)
    gemm._few_split(panels, bt, split, 2)
    np.testing.assert_array_equal(split, out)


def test_few_refuses_more_rows_than_a_panel() -> None:
    with pytest.raises(ValueError, match="at most 16 rows"):
        gemm.few(np.zeros((17, 4), np.float32), np.zeros((3, 4), np.float32),
                 np.zeros((17, 3), np.float32))


@pytest.mark.usefixtures("wide")
def test_a_few_row_product_takes_the_16_row_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(gemm, "few", lambda *a, f=gemm.few: (calls.append(1), f(*a))[1])
    rng = np.random.default_rng(6)
    x = rng.standard_normal((12, 256), dtype=np.float32)
    w = rng.standard_normal((100, 256), dtype=np.float32)
    out = np.full((12, 100), np.nan, np.float32)
    quant.gemv(x, w, out)
    assert calls
    np.testing.assert_allclose(out, _want(x, w), rtol=1e-4, atol=1e-4)
