"""Functional transforms: `grad` and `value_and_grad` (JAX's shape, PyTorch's engine)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import OmnitensorError, ShapeError
from .engine import run_backward
from .mode import enable_grad

if TYPE_CHECKING:
    from ..tensor.tensor import Tensor

__all__ = ["grad", "value_and_grad"]


def _argnums(argnums: int | Sequence[int]) -> tuple[tuple[int, ...], bool]:
    if isinstance(argnums, int):
        return (argnums,), True
    return tuple(argnums), False


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
                   has_aux: bool = False) -> Callable[..., Any]:
    """A function returning ``(fn(*args), gradient of fn w.r.t. args[argnums])``.

    Args:
        fn: returns a one-element float tensor (or ``(value, aux)`` with `has_aux`).
        argnums: which positional arguments to differentiate: an int gives one gradient, a
            sequence gives a tuple.
        has_aux: `fn` returns ``(value, aux)``; the result is then ``((value, aux), grads)``.

    The gradients are lazy tensors; ``.grad`` of other tensors is not touched.
    """
    positions, single = _argnums(argnums)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..tensor.creation import ones_like, zeros_like
        from ..tensor.tensor import Tensor, as_tensor

        call = list(args)
        leaves: list[Tensor] = []
        for p in positions:
            if p >= len(args):
                raise OmnitensorError(
                    f"grad: argnums {p} is out of range (got {len(args)} positional arguments)")
            leaf = as_tensor(args[p]).detach()
            leaf.requires_grad = True
            call[p] = leaf
            leaves.append(leaf)
        with enable_grad():
            result = fn(*call, **kwargs)
        value, aux = (result if has_aux else (result, None))
        if not isinstance(value, Tensor) or value.size != 1:
            raise ShapeError(
                "grad: the function must return a one-element tensor (got "
                f"{getattr(value, 'shape', type(value).__name__)}); reduce it (e.g. .sum())",
                op="grad",
            )
        found = (run_backward([value], [ones_like(value)]) if value.requires_grad else {})
        grads = []
        for leaf in leaves:
            hit = found.get(id(leaf._grad_fn))
            grads.append(zeros_like(leaf) if hit is None else hit[1].astype(leaf.dtype))
        out_grads: Any = grads[0] if single else tuple(grads)
        plain = value.detach()
        return ((plain, aux) if has_aux else plain), out_grads

    return wrapper


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
         has_aux: bool = False) -> Callable[..., Any]:
    """A function returning the gradient of `fn` w.r.t. ``args[argnums]``.

    See `value_and_grad`; with `has_aux` it returns ``(grads, aux)``.
    """
    vg = value_and_grad(fn, argnums, has_aux=has_aux)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value, grads = vg(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return wrapper
