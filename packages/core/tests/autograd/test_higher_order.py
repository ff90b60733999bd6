"""Gradients of gradients: `grad`, `value_and_grad` and `vjp` compose (issue #19)."""

from __future__ import annotations

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.autograd import Function, FunctionCtx
from omnitensor.errors import DTypeError, ShapeError, UnsupportedError


def _cube(t: ot.Tensor) -> ot.Tensor:
    return (t**3).sum()


@pytest.mark.parametrize("backend", ["ref", "cpu"])
def test_nested_grad_is_the_second_derivative(backend: str) -> None:
    pytest.importorskip(f"omnitensor_backend_{backend}")
    with ot.use_backend(backend):
        assert ot.grad(ot.grad(_cube))(ot.tensor([2.0])).tolist() == [12.0]
        assert ot.grad(ot.grad(ot.grad(_cube)))(ot.tensor([2.0])).tolist() == [6.0]


def test_grad_through_a_closure_over_the_outer_variable() -> None:
    def outer(x: ot.Tensor) -> ot.Tensor:
        # d/dy (x y^2) = 2 x y, then d/dx = 2 y
        return ot.grad(lambda y: (x * y * y).sum())(ot.tensor([3.0])).sum()

    assert ot.grad(outer)(ot.tensor([2.0])).tolist() == [6.0]


def test_value_and_grad_value_stays_differentiable_when_nested() -> None:
    def outer(x: ot.Tensor) -> ot.Tensor:
        value, g = ot.value_and_grad(lambda t: (t * t * t).sum())(x)
        return value + g.sum()  # x^3 + 3x^2 -> 3x^2 + 6x

    assert ot.grad(outer)(ot.tensor([2.0])).tolist() == [24.0]


def test_mixed_partials_with_argnums() -> None:
    def f(a: ot.Tensor, b: ot.Tensor) -> ot.Tensor:
        return (a * a * b * b * b).sum()

    # d/db of (df/da = 2 a b^3) = 6 a b^2
    d_ab = ot.grad(lambda a, b: ot.grad(f, argnums=0)(a, b).sum(), argnums=1)(
        ot.tensor([1.5]), ot.tensor([2.0]))
    assert d_ab.tolist() == pytest.approx([36.0])


def test_grad_of_a_leaf_that_requires_grad_records_its_gradient() -> None:
    x = ot.tensor([2.0]).requires_grad_()
    g = ot.grad(_cube)(x)  # 3x^2, a function of x
    assert g.requires_grad
    g.sum().backward()
    assert x.grad is not None and x.grad.tolist() == [12.0]


def test_plain_grad_records_nothing() -> None:
    x = ot.tensor([2.0])
    value, g = ot.value_and_grad(_cube)(x)
    assert not g.requires_grad and not value.requires_grad and not x.requires_grad
    assert x.grad is None


def test_vjp_pullback_and_nesting() -> None:
    x = ot.tensor([0.5, 1.0])
    out, pullback = ot.vjp(lambda t: (t.sin(), t * t), x)
    (gx,) = pullback((ot.tensor([1.0, 1.0]), ot.tensor([0.0, 2.0])))
    np.testing.assert_allclose(gx.numpy(), np.cos([0.5, 1.0]) + [0.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(out[0].numpy(), np.sin([0.5, 1.0]), rtol=1e-6)

    def first(t: ot.Tensor) -> ot.Tensor:
        _, pb = ot.vjp(lambda u: u.sin(), t)
        return pb(ot.ones_like(t))[0].sum()  # sum cos t

    np.testing.assert_allclose(ot.grad(first)(x).numpy(), -np.sin([0.5, 1.0]), rtol=1e-6)


def test_vjp_checks_its_cotangents() -> None:
    _, pullback = ot.vjp(lambda t: t * 2.0, ot.tensor([1.0, 2.0]))
    with pytest.raises(ShapeError, match="cotangent shape"):
        pullback(ot.tensor([1.0]))
    with pytest.raises(ShapeError, match="one cotangent per output"):
        pullback(ot.tensor([1.0, 1.0]), ot.tensor([1.0, 1.0]))
    with pytest.raises(DTypeError, match="float"):
        ot.vjp(lambda t: t, ot.tensor([1, 2], dtype=ot.int32))


def test_grad_of_an_integer_argument_is_refused() -> None:
    with pytest.raises(DTypeError, match="float tensors"):
        ot.grad(lambda t: t.astype(ot.float32).sum())(ot.tensor([1], dtype=ot.int32))


def test_composite_second_derivative_goes_through_its_decomposition() -> None:
    import omnitensor.functional as F

    def f(x: ot.Tensor) -> ot.Tensor:
        return (F.gelu(x) * x).sum()

    x = np.array([0.3, -1.2, 0.8])
    got = ot.grad(lambda t: ot.grad(f)(t).sum())(ot.from_numpy(x)).numpy()  # separable f
    eps = 1e-5
    first = ot.grad(f)
    want = (first(ot.from_numpy(x + eps)).numpy() - first(ot.from_numpy(x - eps)).numpy()) / (
        2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


class _SavesIntermediate(Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: ot.Tensor) -> ot.Tensor:
        square = x * x  # computed with recording off: its dependence on x is lost
        ctx.save_for_backward(square)
        return square * x

    @staticmethod
    def backward(ctx: FunctionCtx, g: ot.Tensor) -> ot.Tensor:
        (square,) = ctx.saved_tensors
        return 3.0 * g * square


class _SavesInput(Function):
    @staticmethod
    def forward(ctx: FunctionCtx, x: ot.Tensor) -> ot.Tensor:
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx: FunctionCtx, g: ot.Tensor) -> ot.Tensor:
        (x,) = ctx.saved_tensors
        return 3.0 * g * x * x


def test_function_whose_backward_is_not_differentiable_raises_instead_of_zero() -> None:
    x = ot.tensor([2.0])
    assert ot.grad(lambda t: _SavesIntermediate.apply(t).sum())(x).tolist() == [12.0]
    with pytest.raises(UnsupportedError, match="second derivative of _SavesIntermediate"):
        ot.grad(ot.grad(lambda t: _SavesIntermediate.apply(t).sum()))(x).numpy()


def test_function_whose_backward_uses_its_inputs_differentiates_twice() -> None:
    x = ot.tensor([2.0])
    assert ot.grad(ot.grad(lambda t: _SavesInput.apply(t).sum()))(x).tolist() == [12.0]
