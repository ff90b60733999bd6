"""Gradient rules of the composites: one per composite, under the composite's name.

softmax, log_softmax and cross_entropy have the usual closed-form backward (cheaper than
differentiating the max-shifted decomposition); attention, layer_norm and rms_norm emit their
backward composites (one op a backend runs as one kernel); the others are differentiated
through their decomposition, replayed with Tensor ops on fresh leaves so the primitive rules run
on it (as for `custom_call`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ...ir.opdef import Trait, all_ops, decomposition
from . import vjp
from ._util import op

if TYPE_CHECKING:
    from ...tensor.tensor import Tensor


def _sum_keep(t: Tensor, axes: tuple[int, ...]) -> Tensor:
    kept = tuple(d for d in range(t.ndim) if d not in axes)
    return op("broadcast_in_dim", op("reduce_sum", t, axes=axes), shape=t.shape, dims=kept)


@vjp("softmax")
def _softmax(g: Tensor, out: Tensor, x: Tensor, *, axes: tuple[int, ...]) -> Tensor:
    return out * (g - _sum_keep(g * out, axes))


@vjp("log_softmax")
def _log_softmax(g: Tensor, out: Tensor, x: Tensor, *, axes: tuple[int, ...]) -> Tensor:
    return g - out.exp() * _sum_keep(g, axes)


def through_decomposition(name: str) -> Callable[..., tuple[Tensor | None, ...]]:
    """The gradient rule of composite `name`: backward through its decomposition."""

    def rule(g: Tensor | tuple[Tensor | None, ...], out: Any, *operands: Tensor,
             **attrs: Any) -> tuple[Tensor | None, ...]:
        from .replay import backward_through

        opdef = all_ops()[name]
        fn = decomposition(opdef, [t._node.types[t._index] for t in operands], attrs)
        return backward_through(fn, operands, g if isinstance(g, tuple) else (g,))

    rule.__name__ = f"_{name}"
    return rule


_OWN_RULES = ("softmax", "log_softmax", "cross_entropy", "scaled_dot_product_attention",
              "layer_norm", "rms_norm")

for _name, _opdef in all_ops().items():
    if _opdef.has(Trait.COMPOSITE) and _name not in _OWN_RULES:
        vjp(_name)(through_decomposition(_name))

_attention_through_decomposition = through_decomposition("scaled_dot_product_attention")


@vjp("scaled_dot_product_attention")
def _attention(g: Tensor, out: Tensor, q: Tensor, k: Tensor, v: Tensor, *extras: Tensor,
               **attrs: Any) -> tuple[Tensor | None, ...]:
    # NOTE: one composite for dq, dk and dv (a backend runs it as one kernel per head); an
    # additive mask that needs its own gradient (a learned bias) goes through the
    # decomposition, which gives every operand's.
    if attrs["mask_kind"] == "additive" and extras[0]._grad_fn is not None:
        return _attention_through_decomposition(g, out, q, k, v, *extras, **attrs)
    from ...tensor.tensor import Tensor

    dq, dk, dv = Tensor._apply_multi("scaled_dot_product_attention_backward", q, k, v, g,
                                     *extras, **attrs)
    return (dq, dk, dv) + (None,) * len(extras)


def _norm_rule(name: str) -> Callable[..., tuple[Tensor, ...]]:
    """The rule of norm `name`: its backward composite, dx and every parameter's at once."""

    def rule(g: Tensor, out: Tensor, x: Tensor, *params: Tensor, axes: tuple[int, ...],
             eps: float) -> tuple[Tensor, ...]:
        from ...tensor.tensor import Tensor

        return Tensor._apply_multi(f"{name}_backward", x, g, *params, axes=axes, eps=eps)

    rule.__name__ = f"_{name}"
    return rule


vjp("layer_norm")(_norm_rule("layer_norm"))
vjp("rms_norm")(_norm_rule("rms_norm"))


@vjp("cross_entropy")
def _cross_entropy(g: Tensor, out: Tensor, x: Tensor, target: Tensor, *, ignore_index: int,
                   label_smoothing: float) -> tuple[Tensor, None]:
    # NOTE: d loss / dx = (softmax(x) - w) * g for a kept row, where w = (1 - s) onehot + s / C
    # sums to 1; ignored rows give 0. Cheaper than differentiating the decomposition.
    last = x.ndim - 1
    rows = tuple(range(last))
    probs = op("softmax", x, axes=(last,))
    classes = op("iota", shape=x.shape, dimension=last, dtype=target.dtype)
    wanted = op("broadcast_in_dim", target, shape=x.shape, dims=rows)
    weights = op("convert", op("eq", classes, wanted), dtype=x.dtype)
    if label_smoothing:
        weights = weights * (1.0 - label_smoothing) + label_smoothing / x.shape[last]
    kept = op("convert", op("ne", target, op("broadcast_in_dim", op(
        "constant", value=np.asarray(ignore_index, np.int32)), shape=target.shape, dims=())),
        dtype=x.dtype)
    scale = op("broadcast_in_dim", g * kept, shape=x.shape, dims=rows)
    return (probs - weights) * scale, None
