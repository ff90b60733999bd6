"""Data-parallel training: W ranks x batch B give the parameters of one process x batch W*B.

Each rank trains two copies of the same model from the same seed: one data-parallel on its shard
(`data_parallel`, gradients all-reduced in buckets), one alone on the whole batch (plain
`omnitensor.compile`, no collective). After N steps they must agree (float32 to 1e-6, float64
to 1e-12: the summation order differs, so equality to the last bit is not promised), and the
parameters must be identical on every rank (checksums compared).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import distributed as dist
from omnitensor import nn
from omnitensor.errors import ShapeError
from omnitensor.functional import cross_entropy

STEPS, B = 6, 8


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.MLP(5, 16, 16, activation="gelu")
        self.head = nn.Linear(16, 3)

    def forward(self, x: ot.Tensor) -> ot.Tensor:
        return self.head(ot.functional.gelu(self.body(x)))


def _data(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    n = B * dist.world_size()
    return (rng.standard_normal((STEPS, n, 5)).astype(dtype),
            rng.integers(0, 3, (STEPS, n)).astype(np.int32))


def _model(dtype: str, seed: int) -> tuple[Net, nn.AdamW]:
    ot.manual_seed(seed)
    model = Net()
    if dtype == "float64":
        for p in model.parameters():
            wide = ot.from_numpy(p.numpy().astype(np.float64))  # a realized leaf
            nn.module.assign(p, wide)
    return model, nn.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)


def _train(model: Net, opt: nn.AdamW, xs: np.ndarray, ys: np.ndarray, wrap: object) -> list[float]:
    @wrap  # type: ignore[misc]
    def step(x: ot.Tensor, y: ot.Tensor) -> ot.Tensor:
        loss = cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        nn.clip_grad_norm_(model.parameters(), 0.5)  # clipping must see the global gradient
        opt.step()
        return loss

    pairs = zip(xs, ys, strict=True)
    return [float(step(ot.from_numpy(x), ot.from_numpy(y)).item()) for x, y in pairs]


@pytest.mark.parametrize(("dtype", "tol"), [("float32", 1e-6), ("float64", 1e-12)])
def test_ranks_times_batch_equal_one_process_with_the_whole_batch(dtype: str, tol: float) -> None:
    xs, ys = _data(dtype)
    # rank-dependent seed: the data-parallel model must take rank 0's initial parameters
    parallel, popt = _model(dtype, seed=dist.rank())
    losses = _train(parallel, popt, xs, ys, dist.data_parallel(popt, bucket_bytes=2048))
    alone, aopt = _model(dtype, seed=0)
    expected = _train(alone, aopt, xs, ys, ot.compile)
    np.testing.assert_allclose(losses, expected, rtol=tol, atol=tol)
    for (name, p), q in zip(parallel.named_parameters(), alone.parameters(), strict=True):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=tol, atol=tol, err_msg=name)
    checksums = dist.communicator().all_gather_object(
        [p.numpy().tobytes() for p in parallel.parameters()])
    assert all(c == checksums[0] for c in checksums), "parameters differ between ranks"


def test_gradients_are_bucketed() -> None:
    from omnitensor.tensor.realize import stats  # noqa: F401  (programs are inspected below)

    model, opt = _model("float32", seed=0)
    seen: list[tuple[int, ...]] = []
    original = dist.training.all_reduce

    def spy(x: ot.Tensor, reduction: str = "sum") -> ot.Tensor:
        seen.append(x.shape)
        return original(x, reduction)

    dist.training.all_reduce = spy  # type: ignore[assignment]
    try:
        dp = dist.DataParallel(opt, bucket_bytes=1 << 20)
        x, y = (a[0] for a in _data("float32"))
        with dp.synchronize():
            cross_entropy(model(ot.from_numpy(dp.shard(x))), ot.from_numpy(dp.shard(y))).backward()
        realized = [p.grad.numpy() for p in model.parameters()]
    finally:
        dist.training.all_reduce = original  # type: ignore[assignment]
    n_params = len(list(model.parameters()))
    if dist.world_size() > 1:
        assert len(seen) == 1, f"expected one bucket for {n_params} parameters, got {seen}"
        assert seen[0] == (sum(p.size for p in model.parameters()),)
    assert len(realized) == n_params


def test_uneven_batch_is_an_error() -> None:
    if dist.world_size() < 2:
        pytest.skip("needs two ranks")
    with pytest.raises(ShapeError, match="do not divide evenly"):
        dist.shard(np.zeros((2 * dist.world_size() + 1, 3)))


def test_checkpoint_written_by_rank_0_loads_on_every_rank(shared_tmp: Path) -> None:
    model, opt = _model("float32", seed=dist.rank() + 3)
    dist.broadcast_parameters(opt)
    xs, ys = _data("float32")
    _train(model, opt, xs[:2], ys[:2], dist.data_parallel(opt))
    path = shared_tmp / "ckpt" / "ckpt.safetensors"
    dist.save_checkpoint(path, model, opt)
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["ckpt.safetensors", "ckpt.safetensors.optimizer.json",
                     "ckpt.safetensors.optimizer.safetensors"]
    other, other_opt = _model("float32", seed=99)
    dist.load_checkpoint(path, other, other_opt)
    for p, q in zip(model.parameters(), other.parameters(), strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert other_opt.steps == opt.steps == 2
    # training goes on identically from the restored state
    a = _train(model, opt, xs[2:4], ys[2:4], dist.data_parallel(opt))
    b = _train(other, other_opt, xs[2:4], ys[2:4], dist.data_parallel(other_opt))
    assert a == b
