"""Autograd engine: grad mode, backward, accumulation, grad transforms, Function, deep graphs."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.autograd import Function, FunctionCtx, enable_grad, is_grad_enabled, no_grad
from omnitensor.errors import DTypeError, OmnitensorError, ShapeError


def _leaf(values: list[float]) -> ot.Tensor:
    return ot.tensor(values).requires_grad_()


def test_backward_accumulates_into_leaves() -> None:
    x = _leaf([1.0, 2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [5.0, 7.0, 9.0])


def test_shared_subexpression_sums_cotangents() -> None:
    x = _leaf([2.0])
    y = x * x
    (y + y * x).sum().backward()  # d/dx (x^2 + x^3) = 2x + 3x^2
    np.testing.assert_allclose(x.grad.numpy(), [16.0])


def test_no_grad_records_nothing_and_is_context_local() -> None:
    x = _leaf([1.0])
    with no_grad():
        y = x * 2.0
        assert not is_grad_enabled()
        with enable_grad():
            z = x * 2.0
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None

    async def other_task() -> bool:
        return is_grad_enabled()

    async def main() -> bool:
        with no_grad():
            return await asyncio.create_task(asyncio.sleep(0, result=True)) and await other_task()

    assert asyncio.run(main()) is False  # the task copied the caller's context
    assert is_grad_enabled()


def test_no_grad_as_decorator() -> None:
    @no_grad()
    def f(t: ot.Tensor) -> ot.Tensor:
        return t * 2.0

    assert not f(_leaf([1.0])).requires_grad


def test_nothing_is_recorded_without_requires_grad() -> None:
    x = ot.tensor([1.0, 2.0])
    y = (x * 2.0).exp()
    assert y._grad_fn is None and y.grad_fn is None and y.is_leaf


def test_detach_cuts_the_tape() -> None:
    x = _leaf([3.0])
    y = (x * x).detach() * x
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [9.0])


def test_integer_results_do_not_require_grad() -> None:
    x = _leaf([1.0, -2.0])
    assert not (x > 0).requires_grad
    assert not x.argmax().requires_grad
    with pytest.raises(DTypeError):
        ot.tensor([1, 2]).requires_grad_()


def test_backward_needs_a_scalar_or_a_gradient() -> None:
    x = _leaf([1.0, 2.0])
    with pytest.raises(ShapeError, match="one-element"):
        (x * 2.0).backward()
    (x * 2.0).backward(ot.tensor([1.0, 0.5]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 1.0])
    with pytest.raises(OmnitensorError, match="does not require grad"):
        ot.tensor([1.0]).sum().backward()


def test_broadcast_and_matmul_gradients() -> None:
    w = ot.from_numpy(np.arange(6.0).reshape(2, 3)).requires_grad_()
    b = ot.from_numpy(np.ones(3)).requires_grad_()
    x = ot.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]]))
    ((x @ w) + b).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.array([[4.0] * 3, [6.0] * 3]))
    np.testing.assert_allclose(b.grad.numpy(), [2.0, 2.0, 2.0])


def test_indexing_and_setitem_are_differentiable() -> None:
    x = ot.from_numpy(np.arange(4.0)).requires_grad_()
    y = x * 1.0
    y[1] = 0.0
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 4.0, 6.0])
    x.grad = None
    x[1:3].sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 1.0, 1.0, 0.0])


def test_grad_and_value_and_grad() -> None:
    def f(a: ot.Tensor, b: ot.Tensor) -> ot.Tensor:
        return (a * a * b).sum()

    a, b = ot.tensor([1.0, 2.0]), ot.tensor([3.0, 4.0])
    np.testing.assert_allclose(ot.grad(f)(a, b).numpy(), [6.0, 16.0])
    value, (ga, gb) = ot.value_and_grad(f, argnums=(0, 1))(a, b)
    assert value.item() == pytest.approx(19.0)
    np.testing.assert_allclose(gb.numpy(), [1.0, 4.0])
    assert a.grad is None and not a.requires_grad  # inputs untouched
    grads, aux = ot.grad(lambda t: ((t * 2.0).sum(), "aux"), has_aux=True)(a)
    assert aux == "aux" and grads.tolist() == [2.0, 2.0]


def test_grad_of_unused_argument_is_zero() -> None:
    g = ot.grad(lambda a, b: (a * 2.0).sum(), argnums=1)(ot.tensor([1.0]), ot.tensor([5.0]))
    assert g.tolist() == [0.0]


def test_higher_order_with_create_graph() -> None:
    x = _leaf([2.0])
    y = (x * x * x).sum()
    y.backward(create_graph=True)
    first = x.grad
    assert first is not None and first.requires_grad
    x.grad = None
    first.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [12.0])  # d2/dx2 x^3 = 6x


def test_deep_graph_has_no_recursion_limit() -> None:
    x = _leaf([1.0])
    y = x
    for _ in range(3000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001**3000], rtol=1e-3)


class _Square(Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: ot.Tensor) -> ot.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: FunctionCtx, g: ot.Tensor) -> ot.Tensor:
        (x,) = ctx.saved_tensors
        return 2.0 * g * x


class _SplitScale(Function):
    """Two results: (2x, 3x), with a non-tensor argument."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: ot.Tensor, scale: float) -> tuple[ot.Tensor, ot.Tensor]:
        return x * (2.0 * scale), x * (3.0 * scale)

    @staticmethod
    def backward(ctx: FunctionCtx, ga: ot.Tensor, gb: ot.Tensor) -> tuple[ot.Tensor, None]:
        scale = ctx.inputs[1]
        return ga * (2.0 * scale) + gb * (3.0 * scale), None


def test_function_records_one_node() -> None:
    x = _leaf([1.0, 3.0])
    y = _Square.apply(x)
    assert y.grad_fn is not None and y.grad_fn.name == "_Square"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 6.0])


def test_function_records_nothing_when_not_needed() -> None:
    y = _Square.apply(ot.tensor([2.0]))
    assert y.grad_fn is None
    with no_grad():
        assert _Square.apply(_leaf([2.0])).grad_fn is None


def test_function_multi_output() -> None:
    x = _leaf([1.0])
    a, b = _SplitScale.apply(x, 1.0)
    (a * 5.0).sum().backward()  # only one output used: the other gets zeros
    np.testing.assert_allclose(x.grad.numpy(), [10.0])
    x.grad = None
    a, b = _SplitScale.apply(x, 2.0)
    (a + b).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [10.0])


def test_backward_is_one_lazy_program_and_cached() -> None:
    from omnitensor.tensor.realize import stats

    w = ot.from_numpy(np.ones((4, 3))).requires_grad_()

    def step() -> None:
        x = ot.from_numpy(np.arange(8.0).reshape(2, 4))
        loss = (x @ w).tanh().sum()
        w.grad = None
        loss.backward()
        assert not w.grad.is_realized  # gradients are lazy tensors
        w.grad.realize()

    step()
    before = stats.snapshot()
    step()
    after = stats.snapshot()
    assert after["compiles"] == before["compiles"]
    assert after["cache_hits"] == before["cache_hits"] + 1


def test_compiled_function_can_differentiate() -> None:
    w = ot.from_numpy(np.array([1.0, 2.0]))

    @ot.compile
    def g(x: ot.Tensor) -> ot.Tensor:
        return ot.grad(lambda v: (v * x).sum())(w)

    np.testing.assert_allclose(g(ot.tensor([3.0, 4.0])).numpy(), [3.0, 4.0])
    np.testing.assert_allclose(g(ot.tensor([5.0, 6.0])).numpy(), [5.0, 6.0])
    assert g.traces == 1
