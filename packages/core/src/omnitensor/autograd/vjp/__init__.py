"""Gradient rules: one vector-Jacobian product per differentiable PTIR op, one module per family.

A rule receives the cotangent of the result(s), the result value(s) and the operand values
(positional, variadic operands flattened), then the op's complete attributes (keyword-only), and
returns one cotangent per operand (None where an operand has no gradient)::

    @vjp("exp")
    def _(g, out, x):
        return g * out

Multi-result ops get tuples for `g` (entries may be None) and `out`. Rules are written with
Tensor operations, so gradients are ordinary lazy tensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import OmnitensorError

__all__ = ["VJP", "get_vjp", "has_vjp", "registered", "vjp"]

VJP = Callable[..., Any]

_RULES: dict[str, VJP] = {}


def vjp(op: str) -> Callable[[VJP], VJP]:
    """Register the function it decorates as the gradient rule of `op`."""

    def wrap(fn: VJP) -> VJP:
        if op in _RULES:
            raise OmnitensorError(f"vjp: op {op!r} already has a gradient rule")
        _RULES[op] = fn
        return fn

    return wrap


def _load() -> None:
    from . import collective, composite, creation, elementwise, indexing, linalg, movement, reduce  # noqa: F401


def registered() -> dict[str, VJP]:
    """Every registered rule, by op name."""
    _load()
    return dict(_RULES)


def has_vjp(op: str) -> bool:
    """True when `op` has a gradient rule."""
    _load()
    return op in _RULES


def get_vjp(op: str) -> VJP:
    """The gradient rule of `op`.

    Raises:
        OmnitensorError: when `op` has none, naming the op.
    """
    _load()
    rule = _RULES.get(op)
    if rule is None:
        raise OmnitensorError(
            f"backward: op {op!r} has no gradient rule; add one in omnitensor/autograd/vjp/ or "
            "mark the op Trait.NON_DIFFERENTIABLE",
            op=op,
        )
    return rule
