"""A whole training step (forward, backward, clipping, optimizer update) under `compile`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import nn
from omnitensor.functional import cross_entropy
from omnitensor.nn.optim import Optimizer
from omnitensor.tensor.realize import stats

Factory = Callable[[Any], Optimizer]

OPTIMIZERS: list[Any] = [
    pytest.param(lambda p: nn.AdamW(p, lr=0.01, weight_decay=0.1), id="adamw"),
    pytest.param(lambda p: nn.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
                 id="sgd-momentum"),
]


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 16), nn.Linear(16, 3)

    def forward(self, x: ot.Tensor) -> ot.Tensor:
        return self.fc2(ot.functional.gelu(self.fc1(x)))


def _data(step: int) -> tuple[ot.Tensor, ot.Tensor]:
    rng = np.random.default_rng(step)
    x = rng.normal(size=(8, 4)).astype(np.float32)
    return ot.from_numpy(x), ot.from_numpy(rng.integers(0, 3, size=8).astype(np.int32))


def _setup(factory: Factory, schedule: bool = True
           ) -> tuple[_MLP, Optimizer, nn.CosineWithWarmup | None]:
    ot.manual_seed(0)
    model = _MLP()
    opt = factory(model.parameters())
    sched = nn.CosineWithWarmup(opt, warmup_steps=2, total_steps=8) if schedule else None
    return model, opt, sched


def _step(model: _MLP, opt: Optimizer, x: ot.Tensor, y: ot.Tensor) -> ot.Tensor:
    loss = cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    nn.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(realize_with=[loss])
    return loss


def _state(opt: Optimizer) -> dict[Any, Any]:
    return {(i, k): np.asarray(v) for i, s in opt.state_dict()["state"].items()
            for k, v in s.items()}


@pytest.mark.parametrize("factory", OPTIMIZERS)
def test_compiled_training_step_traces_once_and_matches_eager(factory: Factory) -> None:
    steps = 6
    model, opt, sched = _setup(factory)
    eager_losses = []
    for i in range(steps):
        eager_losses.append(_step(model, opt, *_data(i)).item())
        assert sched is not None
        sched.step()

    cmodel, copt, csched = _setup(factory)
    step = ot.compile(lambda x, y: _step(cmodel, copt, x, y))
    compiled_losses = []
    before = stats.snapshot()
    for i in range(steps):
        compiled_losses.append(step(*_data(i)).item())
        assert csched is not None
        csched.step()
    assert step.traces == 1
    assert stats.compiles - before["compiles"] <= 2  # the step and, at most, its hoisted prelude
    np.testing.assert_allclose(compiled_losses, eager_losses, rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(model.named_parameters(), cmodel.named_parameters(),
                                 strict=True):
        assert q.is_realized and q.is_leaf and q.requires_grad, name
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
        assert q.grad is not None and p.grad is not None
        # the gradient of the LAST step (clipped), not the traced one nor a stale one
        np.testing.assert_allclose(q.grad.numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert copt.steps == opt.steps == steps
    mine, theirs = _state(copt), _state(opt)
    assert mine.keys() == theirs.keys()
    for key in theirs:
        np.testing.assert_allclose(mine[key], theirs[key], rtol=1e-5, atol=1e-7, err_msg=key)
    assert float(mine[(0, "step")]) == steps


def test_compiled_step_resumes_eagerly_and_from_a_state_dict() -> None:
    """Parameters and state the compiled call rebinds are ordinary tensors afterwards."""
    factory: Factory = lambda p: nn.AdamW(p, lr=0.01)  # noqa: E731
    model, opt, _ = _setup(factory, schedule=False)
    for i in range(4):
        _step(model, opt, *_data(i))

    cmodel, copt, _ = _setup(factory, schedule=False)
    step = ot.compile(lambda x, y: _step(cmodel, copt, x, y))
    for i in range(2):
        step(*_data(i))
    for i in range(2, 4):  # continue uncompiled on what the compiled calls left behind
        _step(cmodel, copt, *_data(i))
    for p, q in zip(model.parameters(), cmodel.parameters(), strict=True):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)

    restored, ropt, _ = _setup(factory, schedule=False)
    restored.load_state_dict({k: v.numpy() for k, v in cmodel.state_dict().items()})
    ropt.load_state_dict(copt.state_dict())
    rstep = ot.compile(lambda x, y: _step(restored, ropt, x, y))
    for i in range(4, 6):
        rstep(*_data(i))
        _step(model, opt, *_data(i))
    for p, q in zip(model.parameters(), restored.parameters(), strict=True):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-5, atol=1e-6)


def test_gradients_accumulate_across_compiled_calls_without_zero_grad() -> None:
    """Without ``zero_grad`` in the step, gradients sum across calls, as uncompiled."""

    def run(compiled: bool) -> list[np.ndarray]:
        model, _, _ = _setup(lambda p: nn.SGD(p, lr=0.1), schedule=False)

        def accumulate(x: ot.Tensor, y: ot.Tensor) -> ot.Tensor:
            loss = cross_entropy(model(x), y)
            loss.backward()
            return loss

        fn = ot.compile(accumulate) if compiled else accumulate
        for i in range(3):
            fn(*_data(i))
        if compiled:  # no gradient on entry, then one: two traces, reused from then on
            assert fn.traces == 2  # type: ignore[attr-defined]
        return [p.grad.numpy() for p in model.parameters() if p.grad is not None]

    eager, compiled = run(False), run(True)
    assert len(eager) == len(compiled) == 4
    for a, b in zip(eager, compiled, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_zero_grad_at_the_end_of_a_compiled_step_clears_gradients() -> None:
    model, opt, _ = _setup(lambda p: nn.AdamW(p, lr=0.01), schedule=False)

    def step(x: ot.Tensor, y: ot.Tensor) -> ot.Tensor:
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    fn = ot.compile(step)
    first = [p.numpy() for p in model.parameters()]
    for i in range(3):
        fn(*_data(i))
    assert fn.traces == 1
    assert all(p.grad is None for p in model.parameters())
    assert all(not np.allclose(a, p.numpy()) for a, p in zip(first, model.parameters(),
                                                               strict=True))
