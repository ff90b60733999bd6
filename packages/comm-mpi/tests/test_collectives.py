"""Every collective against its numpy meaning, eager and compiled, over dtypes; the gradient
rules across ranks; mismatched calls detected on every rank.

Rank r's input is a known function of r, so each rank computes the expected result itself.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import omnitensor as ot
from omnitensor import distributed as dist
from omnitensor.errors import CollectiveMismatchError, ShapeError

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8"]
GATHER_DTYPES = [*DTYPES, "bool"]


def _np(dtype: str) -> np.dtype:
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


def _input(r: int, dtype: str, shape: tuple[int, ...] = (4, 6)) -> np.ndarray:
    """Rank r's operand: distinct per rank, exact in every dtype."""
    rng = np.random.default_rng(100 + r)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    values = rng.integers(0, 9, shape) + r  # small ints: sums are exact in (b)float16 too
    return values.astype(_np(dtype))


def _all(dtype: str, shape: tuple[int, ...] = (4, 6)) -> list[np.ndarray]:
    return [_input(r, dtype, shape) for r in range(dist.world_size())]


def _reduce(arrays: list[np.ndarray], reduction: str) -> np.ndarray:
    wide = np.stack([a.astype(np.float64) for a in arrays])
    out = {"sum": wide.sum(0), "mean": wide.mean(0), "max": wide.max(0), "min": wide.min(0)}
    return out[reduction].astype(arrays[0].dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["sum", "mean", "max", "min"])
def test_all_reduce(dtype: str, reduction: str) -> None:
    if reduction == "mean" and not np.issubdtype(_np(dtype), np.floating) and dtype != "bfloat16":
        pytest.skip("mean is defined for floating dtypes only")
    x = _input(dist.rank(), dtype)
    got = dist.all_reduce(ot.from_numpy(x), reduction).numpy()
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got.astype(np.float64),
                                  _reduce(_all(dtype), reduction).astype(np.float64))


@pytest.mark.parametrize("dtype", GATHER_DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_all_gather(dtype: str, axis: int) -> None:
    got = dist.all_gather(ot.from_numpy(_input(dist.rank(), dtype)), axis=axis).numpy()
    np.testing.assert_array_equal(got, np.concatenate(_all(dtype), axis=axis))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "int32"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("reduction", ["sum", "max"])
def test_reduce_scatter(dtype: str, axis: int, reduction: str) -> None:
    w, r = dist.world_size(), dist.rank()
    shape = (2 * w, 3 * w)
    got = dist.reduce_scatter(ot.from_numpy(_input(r, dtype, shape)), reduction, axis).numpy()
    full = _reduce(_all(dtype, shape), reduction)
    expected = np.split(full, w, axis=axis)[r]
    np.testing.assert_array_equal(got.astype(np.float64), expected.astype(np.float64))


@pytest.mark.parametrize("dtype", GATHER_DTYPES)
def test_broadcast(dtype: str) -> None:
    root = dist.world_size() - 1
    got = dist.broadcast(ot.from_numpy(_input(dist.rank(), dtype, (3, 5))), root=root).numpy()
    np.testing.assert_array_equal(got, _input(root, dtype, (3, 5)))


def test_strided_operand_is_handled() -> None:
    x = _input(dist.rank(), "float32", (6, 8))
    view = ot.from_numpy(x).T[::2]  # a strided view on host backends
    got = dist.all_reduce(view, "sum").numpy()
    np.testing.assert_array_equal(got, sum(a.T[::2] for a in _all("float32", (6, 8))))


def test_collectives_inside_a_compiled_program() -> None:
    @ot.compile
    def step(x: ot.Tensor) -> tuple[ot.Tensor, ot.Tensor]:
        total = dist.all_reduce(x * 2.0, "sum")
        return total + 1.0, dist.all_gather(x, axis=0)

    for k in range(3):
        x = _input(dist.rank(), "float32") + k
        total, gathered = step(ot.from_numpy(x))
        np.testing.assert_array_equal(total.numpy(), sum(a + k for a in _all("float32")) * 2 + 1)
        np.testing.assert_array_equal(gathered.numpy(),
                                      np.concatenate([a + k for a in _all("float32")]))
    assert step.traces == 1


def test_all_reduce_gradient_is_all_reduce() -> None:
    # loss_r = sum(all_reduce(x_r) * c_r); d(sum_r loss_r)/d x_r = sum_r c_r on every rank.
    w, r = dist.world_size(), dist.rank()
    x = ot.from_numpy(_input(r, "float64", (3,))).requires_grad_()
    c = [np.arange(3, dtype=np.float64) + 10 * k for k in range(w)]
    (dist.all_reduce(x, "sum") * ot.from_numpy(c[r])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), sum(c))


def test_all_gather_gradient_is_reduce_scatter() -> None:
    w, r = dist.world_size(), dist.rank()
    x = ot.from_numpy(_input(r, "float64", (2,))).requires_grad_()
    weights = [np.arange(2 * w, dtype=np.float64) * (k + 1) for k in range(w)]
    (dist.all_gather(x, axis=0) * ot.from_numpy(weights[r])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), sum(weights)[2 * r:2 * r + 2])


def test_broadcast_gradient_reaches_the_root_only() -> None:
    w, r = dist.world_size(), dist.rank()
    x = ot.from_numpy(np.ones(2)).requires_grad_()
    (dist.broadcast(x, root=0) * float(r + 1)).sum().backward()
    expected = np.full(2, sum(k + 1 for k in range(w))) if r == 0 else np.zeros(2)
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_mismatched_shapes_are_reported_on_every_rank() -> None:
    if dist.world_size() < 2:
        pytest.skip("needs two ranks")
    r = dist.rank()
    x = np.zeros((3, 4 + r), np.float32)  # rank 1 has another shape
    with pytest.raises(CollectiveMismatchError) as info:
        dist.all_reduce(ot.from_numpy(x), "sum").numpy()
    message = str(info.value)
    assert "rank 0: " in message and "float32[3, 4]" in message and "float32[3, 5]" in message
    assert isinstance(info.value, ShapeError)
    # the job goes on: both ranks skipped the data phase of that call
    np.testing.assert_array_equal(dist.all_reduce(ot.from_numpy(np.ones(2)), "sum").numpy(),
                                  np.full(2, dist.world_size()))


def test_mismatched_ops_are_reported() -> None:
    if dist.world_size() < 2:
        pytest.skip("needs two ranks")
    x = ot.from_numpy(np.ones((2, 2), np.float32))
    with pytest.raises(CollectiveMismatchError, match="all_gather"):
        (dist.all_reduce(x, "sum") if dist.rank() == 0 else dist.all_gather(x)).numpy()
    dist.barrier()


def test_objects_and_barrier() -> None:
    comm = dist.communicator()
    assert comm.all_gather_object({"rank": dist.rank()}) == [
        {"rank": k} for k in range(dist.world_size())]
    assert comm.broadcast_object("hello" if dist.rank() == 0 else None) == "hello"
    assert comm.all_gather_bytes(b"" if dist.rank() else b"x") == [
        b"x", *([b""] * (dist.world_size() - 1))]
    dist.barrier()


def test_pooled_result_buffers_are_never_shared_while_alive() -> None:
    w = dist.world_size()
    n = 1 << 17  # 512 KiB of float32: above the pool's threshold
    comm = dist.communicator()
    kept = [comm.all_reduce(np.full(n, float(k + dist.rank()), np.float32), reduction="sum")
            for k in range(6)]  # more than the pool holds, all alive
    for k, got in enumerate(kept):
        np.testing.assert_array_equal(got, np.full(n, sum(k + r for r in range(w)), np.float32))
    addresses = {got.__array_interface__["data"][0] for got in kept}
    assert len(addresses) == len(kept)
    first = kept[0].__array_interface__["data"][0]
    del kept, got
    again = comm.all_reduce(np.ones(n, np.float32), reduction="sum")  # may reuse a freed one
    np.testing.assert_array_equal(again, np.full(n, w, np.float32))
    assert again.flags.writeable
    tensors = [dist.all_reduce(ot.from_numpy(np.full(n, 2.0 * k, np.float32)), "sum")
               for k in range(3)]
    for t in tensors:
        t.realize()
    for k, t in enumerate(tensors):
        np.testing.assert_array_equal(t.numpy(), np.full(n, 2.0 * k * w, np.float32))
    assert isinstance(first, int)
