"""Finite-difference gradient checks (the test that every gradient rule is right).

`gradcheck` compares the gradients autograd computes with central differences of the same
function, evaluated in float64; `gradgradcheck` does the same one order up (gradients of
gradients against central differences of the gradients). Used by the core's tests and by the
conformance suite's gradient cases; public so that users can check their own `Function`s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import OmnitensorError

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck", "numeric_grads"]

Array = np.ndarray[Any, Any]


class GradcheckError(OmnitensorError):
    """Analytic and numeric gradients differ."""


def _loss(fn: Callable[..., Any], arrays: Sequence[Array], weights: Array | None) -> float:
    from ..tensor.interop import from_numpy
    from .mode import no_grad

    with no_grad():
        out = fn(*(from_numpy(a.copy()) for a in arrays))
        values = out.numpy().astype(np.float64)
    return float((values * weights).sum() if weights is not None else values.sum())


def numeric_grads(fn: Callable[..., Any], arrays: Sequence[Array], *, weights: Array | None = None,
                  eps: float = 1e-6) -> list[Array]:
    """Central differences of ``sum(fn(*arrays) * weights)`` w.r.t. each array."""
    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a, dtype=np.float64)
        flat = g.reshape(-1)
        for j in range(a.size):
            args = [x.copy() for x in arrays]
            args[i].reshape(-1)[j] += eps
            up = _loss(fn, args, weights)
            args[i].reshape(-1)[j] -= 2 * eps
            down = _loss(fn, args, weights)
            flat[j] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


def gradcheck(fn: Callable[..., Any], *arrays: Array, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-4, seed: int = 0) -> None:
    """Check autograd's gradients of `fn` against central differences (float64 arrays).

    The output is contracted with fixed random weights, so every output element matters.

    Raises:
        GradcheckError: naming the argument and the largest difference.
    """
    from ..tensor.interop import from_numpy
    from .api import value_and_grad

    arrays = tuple(np.asarray(a, dtype=np.float64) for a in arrays)
    from .mode import no_grad

    with no_grad():
        shape = fn(*(from_numpy(a.copy()) for a in arrays)).shape
    weights = np.random.default_rng(seed).normal(size=shape)

    def loss(*xs: Any) -> Any:
        out = fn(*xs)
        return (out * from_numpy(weights)).sum()

    _, analytic = value_and_grad(loss, tuple(range(len(arrays))))(
        *(from_numpy(a.copy()) for a in arrays))
    numeric = numeric_grads(fn, arrays, weights=weights, eps=eps)
    for i, (got, want) in enumerate(zip(analytic, numeric, strict=True)):
        got_np = got.numpy().astype(np.float64)
        if not np.allclose(got_np, want, atol=atol, rtol=rtol):
            worst = float(np.max(np.abs(got_np - want)))
            raise GradcheckError(
                f"gradcheck: gradient of argument {i} differs from finite differences (max "
                f"abs difference {worst:.3g}; analytic {got_np.ravel()[:6]}, numeric "
                f"{want.ravel()[:6]})"
            )


def gradgradcheck(fn: Callable[..., Any], *arrays: Array, eps: float = 1e-5, atol: float = 1e-5,
                  rtol: float = 1e-4, seed: int = 0, directions: int = 2) -> None:
    """Check second derivatives of `fn` (through ``grad(grad(...))``) against differences.

    The scalar is ``L(x) = sum(w * f(x) + f(x) ** 2)`` for fixed random `w`: its Hessian holds
    both the op's own second derivative and the derivative of its gradient rule w.r.t. the
    cotangent (``2 J^T J``), so even a linear op's rule must be differentiable. The analytic
    Hessian-vector product ``H v`` (from nested `grad`) is compared, along random directions
    `u`, with central differences of the analytic gradient: ``(<grad L(x + eps u), v> -
    <grad L(x - eps u), v>) / (2 eps)``.

    Raises:
        GradcheckError: naming the direction and both values.
    """
    from ..tensor.interop import from_numpy
    from .api import grad
    from .mode import no_grad

    arrays = tuple(np.asarray(a, dtype=np.float64) for a in arrays)
    with no_grad():
        shape = fn(*(from_numpy(a.copy()) for a in arrays)).shape
    rng = np.random.default_rng(seed)
    weights = np.asarray(rng.normal(size=shape))
    vs = [np.asarray(rng.normal(size=a.shape)) for a in arrays]
    argnums = tuple(range(len(arrays)))

    def loss(*xs: Any) -> Any:
        out = fn(*xs)
        return (out * from_numpy(weights) + out * out).sum()

    def directional(*xs: Any) -> Any:
        grads = grad(loss, argnums)(*xs)
        total = None
        for g, v in zip(grads, vs, strict=True):
            term = (g * from_numpy(v)).sum()
            total = term if total is None else total + term
        return total

    hvp = grad(directional, argnums)(*(from_numpy(a.copy()) for a in arrays))
    hvp_np = [h.numpy().astype(np.float64) for h in hvp]
    for k in range(directions):
        us = [np.asarray(rng.normal(size=a.shape)) for a in arrays]
        up = directional(*(from_numpy(a + eps * u) for a, u in zip(arrays, us, strict=True)))
        down = directional(*(from_numpy(a - eps * u) for a, u in zip(arrays, us, strict=True)))
        numeric = (float(up.item()) - float(down.item())) / (2 * eps)
        analytic = float(sum(float((h * u).sum()) for h, u in zip(hvp_np, us, strict=True)))
        if not abs(analytic - numeric) <= atol * (1 + sum(float(np.abs(h).sum())
                                                          for h in hvp_np)) + rtol * abs(numeric):
            raise GradcheckError(
                f"gradgradcheck: second derivative along direction {k} differs from finite "
                f"differences of the gradient (analytic {analytic:.6g}, numeric {numeric:.6g})"
            )
