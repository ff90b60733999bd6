"""A linear layer's bias and the residual after it, added by `gemm`'s tiles as they store.

`gemm.gemm`'s addends give the same bits as the adds after the plain product (every tile
edge, every thread split, both orders), and the plan hands a product the adds after it only
where they read nothing made later and nothing else reads the sums in between.
"""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu import gemm, pool, threads
from omnitensor_backend_cpu.backend import CpuBackend


@pytest.fixture
def wide(monkeypatch: pytest.MonkeyPatch) -> None:
    """Products take `gemm`'s path whatever this host's vectors and BLAS."""
    monkeypatch.setattr(threads, "wide_products", lambda: True)


def _adds(plain: np.ndarray, addends: list[np.ndarray]) -> np.ndarray:
    out = plain.copy()
    for addend in addends:
        out = out + addend
    return out


def _addends(which: str, m: int, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``b`` a bias (N,), ``B`` a bias broadcast to (M, N) (row stride 0), ``r`` a residual."""
    bias = rng.standard_normal(n, dtype=np.float32)
    made = {"b": bias, "B": np.broadcast_to(bias, (m, n))}
    return [made[c] if c in made else rng.standard_normal((m, n), dtype=np.float32)
            for c in which]


# M around a panel (32 rows: the last one's padding rows must not read past the residual),
# N around a tile (12 weight rows, then 4, then 1 at a time); every order of a bias and a
# residual, and more adds than the tiles take (added after)
@pytest.mark.parametrize("m", [1, 31, 33, 70])
@pytest.mark.parametrize("n", [1, 5, 12, 13, 44])
@pytest.mark.parametrize("which", ["b", "r", "br", "rb", "B", "Br", "rB", "rr", "bb", "brr"])
def test_addends_give_the_bits_of_the_adds_after_the_product(m: int, n: int,
                                                            which: str) -> None:
    rng = np.random.default_rng(m * 10 + n)
    a = rng.standard_normal((m, 24), dtype=np.float32)
    bt = rng.standard_normal((n, 24), dtype=np.float32)
    addends = _addends(which, m, n, rng)
    plain = np.empty((m, n), np.float32)
    gemm.gemm(a, bt, plain)
    out = np.full((m, n), np.nan, np.float32)
    gemm.gemm(a, bt, out, addends)
    np.testing.assert_array_equal(out, _adds(plain, addends))


@pytest.mark.parametrize(("m", "transposed", "parts"), [
    (200, False, 2),  # by rows
    (40, False, 2),  # few panels: by columns
    (130, True, 2),  # a transposed: the sum split, the addends after the partial sums
])
def test_addends_survive_every_thread_split(monkeypatch: pytest.MonkeyPatch, m: int,
                                            transposed: bool, parts: int) -> None:
    monkeypatch.setattr(pool, "parts", lambda *a, **kw: parts)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((300, m) if transposed else (m, 300), dtype=np.float32)
    a = a.T if transposed else a
    bt = rng.standard_normal((61, 300), dtype=np.float32)
    plain = np.empty((m, 61), np.float32)
    gemm.gemm(a, bt, plain)
    for which in ("br", "rb"):
        addends = _addends(which, m, 61, rng)
        out = np.full((m, 61), np.nan, np.float32)
        gemm.gemm(a, bt, out, addends)
        np.testing.assert_array_equal(out, _adds(plain, addends))


def test_addends_read_strided_and_other_dtypes_and_write_strided_rows() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 16), dtype=np.float32)
    bt = rng.standard_normal((9, 16), dtype=np.float32)
    bias = rng.standard_normal(18)[::2].astype(np.float32)  # strided: copied once
    residual = rng.standard_normal((9, 40), dtype=np.float32).T  # columns strided
    plain = np.empty((40, 9), np.float32)
    gemm.gemm(a, bt, plain)
    out = np.full((9, 40), np.nan, np.float32).T  # out's rows strided: through a dense copy
    gemm.gemm(a, bt, out, [bias, residual])
    np.testing.assert_array_equal(out, _adds(plain, [bias, residual]))
    with pytest.raises(ValueError, match="shapes do not match"):
        gemm.gemm(a, bt, plain, [np.zeros(8, np.float32)])
    with pytest.raises(ValueError, match="shapes do not match"):
        gemm.gemm(a, bt, plain, [np.zeros((40, 8), np.float32)])


# --- in plans -------------------------------------------------------------------------------

_M, _N, _K = 70, 48, 640  # m * n * k over gemm.MIN_WORK: on the tiles


def _linear(order: str, *, read_twice: bool = False, late_residual: bool = False,
            product_out: bool = False) -> Function:
    """``x @ w.T`` then adds in `order` (``b``: the bias broadcast along rows, ``r``: a
    residual input), the operands of each add in the order written."""
    b = Builder()
    x = b.input(TensorType((_M, _K), float32))
    w = b.input(TensorType((_N, _K), float32))
    bias = b.input(TensorType((_N,), float32))
    residual = b.input(TensorType((_M, _N), float32))
    y = product = b.emit("dot_general", x, w, contracting=((1,), (1,)))
    for step in order:
        if step == "b":
            y = b.emit("add", y, b.emit("broadcast_in_dim", bias, shape=(_M, _N), dims=(1,)))
        elif step == "r" and late_residual:
            late = b.emit("mul", residual, residual)
            y = b.emit("add", late, y)
        else:
            y = b.emit("add", residual, y)
    outs = [y]
    if read_twice:
        outs.append(b.emit("mul", product, product))
    if product_out:
        outs.append(product)
    return b.build(outs)


@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize(("order", "label"), [
    ("b", "gemm:dot_general+add"),
    ("r", "gemm:dot_general+add"),
    ("br", "gemm:dot_general+add+add"),
    ("rb", "gemm:dot_general+add+add"),
    ("bb", "gemm:dot_general+add+add"),  # two biases: the second added after the tiles
    ("rbr", "gemm:dot_general+add+add"),
])
def test_a_product_performs_the_adds_after_it(backend: CpuBackend, order: str,
                                              label: str) -> None:
    fn = _linear(order)
    exe = backend.compile(fn)
    assert exe.plan.labels[0] == f"{label}({_M}, {_N})"
    assert exe.plan.kinds.count("gemm") == 1
    rng = np.random.default_rng(len(order))
    xs = [rng.standard_normal(v.value.type.shape, dtype=np.float32) for v in fn.inputs]
    (got,) = backend.run(exe, xs)
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize("case", ["read twice", "late residual", "product out"])
def test_adds_stay_apart_where_the_product_cannot_take_them(backend: CpuBackend,
                                                            case: str) -> None:
    fn = _linear("br" if case == "late residual" else "b", read_twice=case == "read twice",
                 late_residual=case == "late residual", product_out=case == "product out")
    exe = backend.compile(fn)
    labels = [label for label in exe.plan.labels if label.startswith("gemm:")]
    want = "gemm:dot_general+add" if case == "late residual" else "gemm:dot_general"
    # (a residual made after the product: the bias before it still goes in)
    assert labels == [f"{want}({_M}, {_N})"]
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal(v.value.type.shape, dtype=np.float32) for v in fn.inputs]
    for got, want_out in zip(backend.run(exe, xs), evaluate(fn, xs), strict=True):
        np.testing.assert_allclose(got, want_out, rtol=1e-4, atol=1e-4)


def test_a_bias_broadcast_before_the_trace_is_read_as_a_bias() -> None:
    """A traced model's bias arrives as a (M, N) input broadcast from (N,): row stride 0,
    one row read (not copied out to M rows); a residual of the same shape, in full."""
    rng = np.random.default_rng(4)
    bias = rng.standard_normal(7, dtype=np.float32)
    residual = rng.standard_normal((5, 7), dtype=np.float32)
    flags, got_bias, got_residual, later = gemm._epilogue([residual, np.broadcast_to(bias,
                                                                                     (5, 7))])
    assert flags == gemm.EPILOGUE_BIAS | gemm.EPILOGUE_RESIDUAL | gemm.EPILOGUE_RESIDUAL_FIRST
    assert got_bias.shape == (7,) and np.shares_memory(got_bias, bias)
    assert np.shares_memory(got_residual, residual) and not later


def _activated(values: np.ndarray, activation: str) -> np.ndarray:
    out = np.ascontiguousarray(values, np.float32)
    gemm.activate(out, 0, out.shape[0], 0, out.shape[1], gemm.ACTIVATIONS[activation])
    return out


@pytest.mark.parametrize("activation", sorted(gemm.ACTIVATIONS))
@pytest.mark.parametrize(("m", "which", "split"), [
    (33, "b", 1),  # the last block's rows end inside a panel
    (200, "br", 2),  # by rows: each thread its blocks
    (40, "rb", 2),  # by columns: each thread its columns of every block
    (70, "rr", 1),  # a second residual: added after the tiles, the activation after it
])
def test_an_activation_follows_every_add(monkeypatch: pytest.MonkeyPatch, activation: str,
                                         m: int, which: str, split: int) -> None:
    monkeypatch.setattr(pool, "parts", lambda *a, **kw: split)
    rng = np.random.default_rng(m)
    a = rng.standard_normal((m, 40), dtype=np.float32)
    bt = rng.standard_normal((29, 40), dtype=np.float32) * np.float32(0.5)
    addends = _addends(which, m, 29, rng)
    plain = np.empty((m, 29), np.float32)
    gemm.gemm(a, bt, plain)
    out = np.full((m, 29), np.nan, np.float32)
    gemm.gemm(a, bt, out, addends, activation)
    np.testing.assert_array_equal(out, _activated(_adds(plain, addends), activation))


def test_an_activation_follows_partial_sums() -> None:
    """A transposed a splits the sum over threads: the activation after the partial sums."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((400, 130), dtype=np.float32).T
    bt = rng.standard_normal((61, 400), dtype=np.float32)
    bias = rng.standard_normal(61, dtype=np.float32)
    plain = np.empty((130, 61), np.float32)
    gemm.gemm(a, bt, plain)
    out = np.empty((130, 61), np.float32)
    gemm.gemm(a, bt, out, [bias], "gelu")
    np.testing.assert_allclose(out, _activated(plain + bias, "gelu"), rtol=1e-5, atol=1e-4)


def _feed_forward(approximate: str, *, keep_pre_activation: bool = False) -> Function:
    b = Builder()
    x = b.input(TensorType((_M, _K), float32))
    w = b.input(TensorType((_N, _K), float32))
    bias = b.input(TensorType((_N,), float32))
    pre = b.emit("add", b.emit("dot_general", x, w, contracting=((1,), (1,))),
                 b.emit("broadcast_in_dim", bias, shape=(_M, _N), dims=(1,)))
    out = b.emit("gelu", pre, approximate=approximate)
    return b.build([out, pre] if keep_pre_activation else [out])


@pytest.mark.usefixtures("wide")
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("keep", [False, True])
def test_a_product_applies_the_gelu_after_its_bias(backend: CpuBackend, approximate: str,
                                                   keep: bool) -> None:
    fn = _feed_forward(approximate, keep_pre_activation=keep)
    exe = backend.compile(fn)
    # (a pre-activation the program keeps, as a training step does: the gelu stays apart)
    want = "gemm:dot_general+add" if keep else "gemm:dot_general+add+gelu"
    assert exe.plan.labels[0] == f"{want}({_M}, {_N})"
    rng = np.random.default_rng(6)
    xs = [rng.standard_normal(v.value.type.shape, dtype=np.float32) * np.float32(0.2)
          for v in fn.inputs]
    for got, want_out in zip(backend.run(exe, xs), evaluate(fn, xs), strict=True):
        np.testing.assert_allclose(got, want_out, rtol=1e-4, atol=1e-4)
