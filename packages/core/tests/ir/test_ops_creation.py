"""Creation ops: iota, constant, rng (threefry2x32 known answers, determinism, distributions)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from omnitensor import dtypes
from omnitensor.errors import DTypeError, OmnitensorError, ShapeError
from omnitensor.ir import Builder, TensorType, get_op
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import Trait
from omnitensor.ir.ops.creation import threefry2x32

U32 = dtypes.uint32
KEY = TensorType((2,), U32)


def run(op: str, *arrays: np.ndarray, **attrs: Any) -> np.ndarray:
    b = Builder()
    values = [b.input(TensorType(a.shape, dtypes.as_dtype(a.dtype))) for a in arrays]
    out = b.emit(op, *values, **attrs)
    return evaluate(b.build([out]), list(arrays))[0]


def infer(op: str, *types: TensorType, **attrs: Any) -> TensorType:
    b = Builder()
    out = b.emit(op, *[b.input(t) for t in types], **attrs)
    assert isinstance(out.type, TensorType)
    return out.type


def key(a: int, b: int) -> np.ndarray:
    return np.array([a, b], np.uint32)


# --- iota --------------------------------------------------------------------------------------


def test_iota() -> None:
    assert infer("iota", shape=(2, 3), dimension=1, dtype=dtypes.int32) == TensorType(
        (2, 3), dtypes.int32
    )
    np.testing.assert_array_equal(
        run("iota", shape=(2, 3), dimension=1, dtype=dtypes.int32), [[0, 1, 2], [0, 1, 2]]
    )
    np.testing.assert_array_equal(
        run("iota", shape=(2, 3), dimension=0, dtype=dtypes.float32), [[0, 0, 0], [1, 1, 1]]
    )
    out = run("iota", shape=(3,), dimension=-1, dtype=dtypes.bfloat16)
    assert out.dtype == ml_dtypes.bfloat16 and out.tolist() == [0, 1, 2]
    assert run("iota", shape=(0, 4), dimension=1, dtype=dtypes.int8).shape == (0, 4)
    # int8 wraps past 127, as convert does.
    assert run("iota", shape=(130,), dimension=0, dtype=dtypes.int8)[-1] == -127


def test_iota_errors() -> None:
    assert get_op("iota").has(Trait.CREATION)
    with pytest.raises(DTypeError, match="iota: dtype bool is not supported"):
        infer("iota", shape=(3,), dimension=0, dtype=dtypes.bool_)
    with pytest.raises(ShapeError, match=r"iota: axis 1 is out of range .*\(3,\)"):
        infer("iota", shape=(3,), dimension=1, dtype=dtypes.int32)
    with pytest.raises(ShapeError, match="out of range"):
        infer("iota", shape=(), dimension=0, dtype=dtypes.int32)
    with pytest.raises(ShapeError, match="iota: negative dimension"):
        infer("iota", shape=(-1,), dimension=0, dtype=dtypes.int32)


# --- constant ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", dtypes.ALL, ids=str)
def test_constant(dtype: dtypes.DType) -> None:
    value = np.arange(6).reshape(2, 3).astype(dtype.np)
    assert infer("constant", value=value) == TensorType((2, 3), dtype)
    b = Builder()
    fn = b.build([b.constant(value)])
    out = evaluate(fn, [])[0]
    np.testing.assert_array_equal(out, value)
    assert not out.flags.writeable  # the literal cannot be changed through a result


def test_constant_errors() -> None:
    assert get_op("constant").has(Trait.CREATION)
    with pytest.raises(DTypeError, match="constant: value must be a numpy ndarray"):
        infer("constant", value=[1, 2])
    with pytest.raises(DTypeError, match="not an omnitensor dtype"):
        infer("constant", value=np.zeros(2, np.complex64))


# --- threefry2x32 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("k", "c", "expected"),
    [
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ],
)
def test_threefry_known_answers(k: tuple[int, int], c: tuple[int, int],
                                expected: tuple[int, int]) -> None:
    """Random123 kat_vectors for threefry2x32_20."""
    w0, w1 = threefry2x32(k[0], k[1], c[0], c[1])
    assert (int(w0), int(w1)) == expected
    # Vectorized: the same answer in every lane.
    v0, v1 = threefry2x32(k[0], k[1], np.full(3, c[0], np.uint32), c[1])
    assert v0.tolist() == [expected[0]] * 3 and v1.tolist() == [expected[1]] * 3


def test_rng_bits_recipe() -> None:
    k = key(0x13198A2E, 0x03707344)
    out = run("rng", k, shape=(2, 3), dtype=U32, distribution="bits", stream=7)
    assert out.dtype == np.uint32 and out.shape == (2, 3)
    for i in range(6):
        w0, _ = threefry2x32(k[0], k[1], i, 7)
        assert out.reshape(-1)[i] == w0
    # Element 0 with counter (0, 0) under key (0, 0) is the first known-answer word.
    zero = run("rng", key(0, 0), shape=(1,), dtype=U32, distribution="bits", stream=0)
    assert zero[0] == 0x6B200159


@pytest.mark.parametrize(
    ("dtype", "bits"),
    [(dtypes.float32, 23), (dtypes.float16, 10), (dtypes.bfloat16, 7)],
    ids=["f32", "f16", "bf16"],
)
def test_rng_uniform_recipe(dtype: dtypes.DType, bits: int) -> None:
    k = key(1, 2)
    out = run("rng", k, shape=(64,), dtype=dtype, distribution="uniform", stream=3)
    w0, _ = threefry2x32(k[0], k[1], np.arange(64, dtype=np.uint32), 3)
    expected = (w0 >> np.uint32(32 - bits)).astype(np.float64) / 2.0**bits
    assert out.dtype == dtype.np
    np.testing.assert_array_equal(out.astype(np.float64), expected)  # exact, bit for bit


def test_rng_uniform_float64_uses_both_words() -> None:
    k = key(5, 6)
    out = run("rng", k, shape=(4,), dtype=dtypes.float64, distribution="uniform", stream=0)
    w0, w1 = threefry2x32(k[0], k[1], np.arange(4, dtype=np.uint32), 0)
    for i in range(4):
        mantissa = (int(w0[i]) << 20) | (int(w1[i]) >> 12)
        assert out[i] == mantissa / 2.0**52


@pytest.mark.parametrize("dtype", dtypes.FLOATING, ids=str)
def test_rng_normal_recipe(dtype: dtypes.DType) -> None:
    k = key(9, 9)
    out = run("rng", k, shape=(64,), dtype=dtype, distribution="normal", stream=1)
    w0, w1 = threefry2x32(k[0], k[1], np.arange(64, dtype=np.uint32), 1)
    u1, u2 = w0 / 2.0**32, w1 / 2.0**32
    expected = np.sqrt(-2 * np.log(1 - u1)) * np.cos(2 * np.pi * u2)
    if dtype != dtypes.float64:
        expected = expected.astype(np.float32)
    assert out.dtype == dtype.np
    np.testing.assert_array_equal(out, expected.astype(dtype.np))


def test_rng_determinism_and_streams() -> None:
    k = key(42, 0)
    a = run("rng", k, shape=(3, 4), dtype=dtypes.float32)
    b = run("rng", k, shape=(3, 4), dtype=dtypes.float32)
    np.testing.assert_array_equal(a, b)
    c = run("rng", k, shape=(3, 4), dtype=dtypes.float32, stream=1)
    d = run("rng", key(43, 0), shape=(3, 4), dtype=dtypes.float32)
    assert not np.array_equal(a, c) and not np.array_equal(a, d)
    # Element i does not depend on the shape: a longer draw extends a shorter one.
    e = run("rng", k, shape=(20,), dtype=dtypes.float32)
    np.testing.assert_array_equal(e[:12], a.reshape(-1))
    assert run("rng", k, shape=(0, 3), dtype=dtypes.float32).shape == (0, 3)


def test_rng_key_split_recipe() -> None:
    """The tensor layer derives keys with distribution='bits' and a stream; words are a key."""
    k = key(0, 0)
    child = run("rng", k, shape=(2,), dtype=U32, distribution="bits", stream=1)
    assert child.dtype == np.uint32 and child.shape == (2,)
    grandchild = run("rng", child, shape=(2,), dtype=U32, distribution="bits", stream=1)
    assert not np.array_equal(child, grandchild)


def test_rng_distribution_sanity() -> None:
    k = key(2024, 7)
    u = run("rng", k, shape=(100_000,), dtype=dtypes.float32, distribution="uniform")
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
    h = run("rng", k, shape=(10_000,), dtype=dtypes.float16, distribution="uniform")
    assert h.min() >= 0 and h.max() < 1
    n = run("rng", k, shape=(100_000,), dtype=dtypes.float32, distribution="normal")
    assert np.isfinite(n).all() and np.abs(n).max() < 6.7
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
    assert abs(np.mean(np.abs(n) < 1) - 0.6827) < 0.01
    bits = run("rng", k, shape=(100_000,), dtype=U32, distribution="bits")
    ones = np.unpackbits(bits.view(np.uint8)).mean()
    assert abs(ones - 0.5) < 0.005


def test_rng_declaration_and_errors() -> None:
    opdef = get_op("rng")
    assert opdef.has(Trait.CREATION | Trait.RANDOM | Trait.NON_DIFFERENTIABLE)
    assert infer("rng", KEY, shape=(2, 3), dtype=dtypes.float32) == TensorType(
        (2, 3), dtypes.float32
    )
    with pytest.raises(ShapeError, match=r"rng: key must have shape \(2,\) \(got \(3,\)"):
        infer("rng", TensorType((3,), U32), shape=(2,), dtype=dtypes.float32)
    with pytest.raises(DTypeError, match="rng: operand 'key' has dtype int32"):
        infer("rng", TensorType((2,), dtypes.int32), shape=(2,), dtype=dtypes.float32)
    with pytest.raises(DTypeError, match="rng: distribution 'bits' cannot give dtype float32"):
        infer("rng", KEY, shape=(2,), dtype=dtypes.float32, distribution="bits")
    with pytest.raises(DTypeError, match="rng: distribution 'uniform' cannot give dtype int32"):
        infer("rng", KEY, shape=(2,), dtype=dtypes.int32)
    with pytest.raises(OmnitensorError, match="rng: unknown distribution 'gamma'"):
        infer("rng", KEY, shape=(2,), dtype=dtypes.float32, distribution="gamma")
    with pytest.raises(OmnitensorError, match="rng: stream must be a uint32"):
        infer("rng", KEY, shape=(2,), dtype=dtypes.float32, stream=2**32)
    with pytest.raises(ShapeError, match="rng: too many elements"):
        infer("rng", KEY, shape=(2**17, 2**16), dtype=dtypes.float32)
