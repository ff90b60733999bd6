"""Tensor arithmetic against numpy on the reference backend."""

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.errors import DTypeError, OmnitensorError, ShapeError


def test_issue_example_matches_numpy() -> None:
    x = ot.arange(6.0).reshape(2, 3)
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal((x @ x.T).max(axis=1).numpy(), (a @ a.T).max(axis=1))


@pytest.mark.parametrize("op", ["__add__", "__sub__", "__mul__", "__truediv__", "__pow__",
                                "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__"])
def test_binary_operators_broadcast_like_numpy(op: str) -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 2, (3, 1, 4)).astype(np.float32)
    b = rng.uniform(0.5, 2, (5, 1)).astype(np.float32)
    got = getattr(ot.tensor(a), op)(ot.tensor(b)).numpy()
    np.testing.assert_allclose(got, getattr(a, op)(b), rtol=1e-6)


def test_weak_scalars_keep_tensor_dtype() -> None:
    x = ot.ones(3, dtype=ot.float16)
    assert (x * 2.5).dtype == ot.float16
    assert (ot.ones(3, dtype=ot.int32) + 1).dtype == ot.int32
    assert (ot.ones(3, dtype=ot.int32) * 0.5).dtype == ot.float32
    assert (ot.ones(3, dtype=ot.int8) + ot.ones(3, dtype=ot.float16)).dtype == ot.float16
    assert (ot.arange(4) / 2).dtype == ot.float32


def test_integer_division_and_modulo_follow_python() -> None:
    a = np.array([-7, -3, 3, 7], dtype=np.int32)
    b = np.array([2, -2, 2, -2], dtype=np.int32)
    np.testing.assert_array_equal((ot.tensor(a) // ot.tensor(b)).numpy(), a // b)
    np.testing.assert_array_equal((ot.tensor(a) % ot.tensor(b)).numpy(), a % b)


def test_reductions_and_keepdims() -> None:
    a = np.random.default_rng(1).normal(size=(2, 3, 4)).astype(np.float32)
    x = ot.tensor(a)
    np.testing.assert_allclose(x.sum().numpy(), a.sum(), rtol=1e-5)
    np.testing.assert_allclose(x.mean(axis=(0, 2), keepdims=True).numpy(),
                               a.mean(axis=(0, 2), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(x.max(axis=1).numpy(), a.max(axis=1))
    np.testing.assert_array_equal(x.argmax(axis=-1).numpy(), a.argmax(axis=-1))
    np.testing.assert_array_equal(x.argmin().numpy(), a.argmin())
    assert x.argmax(axis=1).dtype == ot.int32


@pytest.mark.parametrize(("sa", "sb"), [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)),
                                        ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
                                        ((5, 2, 3), (5, 3, 4)), ((1, 2, 3), (4, 3, 2))])
def test_matmul_shapes_like_numpy(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=sa).astype(np.float32), rng.normal(size=sb).astype(np.float32)
    np.testing.assert_allclose((ot.tensor(a) @ ot.tensor(b)).numpy(), a @ b, rtol=1e-5,
                               atol=1e-6)


def test_movement_methods() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = ot.tensor(a)
    np.testing.assert_array_equal(x.permute(2, 0, 1).numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(x.reshape(4, -1).numpy(), a.reshape(4, -1))
    np.testing.assert_array_equal(x[:, :1].squeeze(1).numpy(), a[:, 0])
    np.testing.assert_array_equal(x.unsqueeze(1).numpy(), a[:, None])
    np.testing.assert_array_equal(x.flip(1).numpy(), a[:, ::-1])
    np.testing.assert_array_equal(x.narrow(2, 1, 2).numpy(), a[:, :, 1:3])
    np.testing.assert_array_equal(x[:1].expand(3, 3, 4).numpy(), np.broadcast_to(a[:1], (3, 3, 4)))
    np.testing.assert_array_equal(ot.concatenate([x, x], axis=1).numpy(),
                                  np.concatenate([a, a], axis=1))
    np.testing.assert_array_equal(ot.stack([x, x], axis=0).numpy(), np.stack([a, a]))


def test_creation() -> None:
    np.testing.assert_array_equal(ot.arange(2, 11, 3).numpy(), np.arange(2, 11, 3))
    np.testing.assert_allclose(ot.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5), rtol=1e-6)
    np.testing.assert_array_equal(ot.eye(3, 4, k=1).numpy(), np.eye(3, 4, k=1))
    np.testing.assert_array_equal(ot.full((2, 2), 7, dtype="int8").numpy(), np.full((2, 2), 7))
    assert ot.zeros(2, 3).dtype == ot.float32 and ot.arange(3).dtype == ot.int32
    assert ot.tensor([1.5]).dtype == ot.float32 and ot.tensor([1]).dtype == ot.int32


def test_random_is_seeded_and_backend_independent_in_bits() -> None:
    a = ot.rand(1000, seed=7).numpy()
    b = ot.rand(1000, seed=7).numpy()
    np.testing.assert_array_equal(a, b)
    assert 0.0 <= a.min() and a.max() < 1.0 and abs(a.mean() - 0.5) < 0.05
    n = ot.randn(4000, seed=3).numpy()
    assert abs(n.mean()) < 0.1 and abs(n.std() - 1) < 0.1
    k1, k2 = ot.split_key(ot.key(0))
    assert not np.array_equal(ot.rand(8, key=k1).numpy(), ot.rand(8, key=k2).numpy())


def test_where_and_clip() -> None:
    a = np.array([-2.0, -0.5, 0.5, 2.0], dtype=np.float32)
    x = ot.tensor(a)
    np.testing.assert_array_equal(ot.where(x > 0, x, 0.0).numpy(), np.where(a > 0, a, 0))
    np.testing.assert_array_equal(x.clip(-1, 1).numpy(), np.clip(a, -1, 1))


def test_errors_name_op_and_shapes() -> None:
    with pytest.raises(ShapeError, match=r"add: cannot broadcast \(2, 3\) with \(4,\)"):
        ot.ones(2, 3) + ot.ones(4)
    with pytest.raises(ShapeError, match="matmul"):
        ot.ones(2, 3) @ ot.ones(4, 2)
    with pytest.raises(ShapeError, match="reshape"):
        ot.ones(2, 3).reshape(4, 2)
    with pytest.raises(DTypeError):
        ot.tensor(np.array([1 + 2j]))
    with pytest.raises(OmnitensorError):
        ot.ones(2).item()


def test_item_tolist_repr() -> None:
    x = ot.tensor([[1, 2], [3, 4]])
    assert x.tolist() == [[1, 2], [3, 4]]
    assert x[1, 0].item() == 3
    assert "Tensor(" in repr(x) and "int32" in repr(x)


def test_eager_mode_realizes_every_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_EAGER", "1")
    y = ot.ones(3) + 1
    assert y.is_realized
    monkeypatch.setenv("OMNITENSOR_EAGER", "0")
    assert not (ot.ones(3) + 1).is_realized


def test_mixing_backends_names_both() -> None:
    from omnitensor.backend.null import NullBackend

    a = ot.ones(2).realize()
    other = NullBackend()
    b = ot.from_numpy(np.ones(2, np.float32))
    b = b.to(other)
    with pytest.raises(OmnitensorError, match="two backends"):
        (a + b).numpy()
