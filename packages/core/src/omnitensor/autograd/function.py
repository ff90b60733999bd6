"""`Function`: a differentiable operation written as a `forward` and a `backward`.

The base class does the bookkeeping: `apply` runs `forward` with recording off and attaches one
node to the results only when grad mode is on and some tensor argument requires grad; `backward`
then receives one cotangent per result (multi-output supported) and returns one per argument.

Example::

    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2.0 * g * x

    y = Square.apply(x)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import OmnitensorError
from .engine import GradNode, first_order_only
from .mode import is_grad_enabled, no_grad

if TYPE_CHECKING:
    from ..tensor.tensor import Tensor

__all__ = ["Function", "FunctionCtx", "FunctionNode", "apply_custom"]


class FunctionCtx:
    """What `forward` hands to `backward`.

    Attributes:
        needs_input_grad: per positional argument, whether it requires grad.
        inputs: the positional arguments of `forward`.
        outputs: the results of `forward` (set after it returns).
    """

    def __init__(self, inputs: Sequence[Any]) -> None:
        self.inputs = tuple(inputs)
        self.needs_input_grad = tuple(bool(getattr(a, "_grad_fn", None)) for a in inputs)
        self.outputs: tuple[Tensor, ...] = ()
        self._saved: tuple[Tensor, ...] = ()

    def save_for_backward(self, *tensors: Tensor) -> None:
        """Keep `tensors` for `backward` (read them back from `saved_tensors`)."""
        self._saved = tuple(tensors)

    @property
    def saved_tensors(self) -> tuple[Tensor, ...]:
        """The tensors given to `save_for_backward`, in order."""
        return self._saved


class FunctionNode(GradNode):
    """The backward node of one `Function` application (or one custom-backward module call)."""

    __slots__ = ("backward_fn", "ctx", "fn_name")

    def __init__(self, name: str, backward_fn: Callable[..., Any], ctx: FunctionCtx,
                 inputs: Sequence[Any], n_outputs: int) -> None:
        super().__init__(inputs, n_outputs)
        self.fn_name = name
        self.backward_fn = backward_fn
        self.ctx = ctx

    @property
    def name(self) -> str:  # type: ignore[override]
        """The function's class name."""
        return self.fn_name

    def slot(self, value: Any) -> int:
        """Which result of this node `value` is."""
        """Which result of this node `value` is."""
        # Results may come from different graph nodes: find the result by identity.
        for i, out in enumerate(self.ctx.outputs):
            if out._node is value._node and out._index == value._index:
                return i
        raise OmnitensorError(f"{self.fn_name}: tensor is not one of this node's results")

    def apply(self, grads: tuple[Tensor | None, ...], create_graph: bool
              ) -> Sequence[Tensor | None]:
        """Cotangents of the inputs from those of the results."""
        from ..tensor.creation import zeros_like

        # A user backward expects real tensors: results that got no cotangent get zeros.
        filled = [g if g is not None else zeros_like(out)
                  for g, out in zip(grads, self.ctx.outputs, strict=True)]
        result = self.backward_fn(self.ctx, *filled)
        if not isinstance(result, (tuple, list)):
            result = (result,)
        if len(result) != len(self.edges):
            raise OmnitensorError(
                f"{self.fn_name}.backward: returned {len(result)} gradients (expected "
                f"{len(self.edges)}, one per input of forward; use None for non-tensors)"
            )
        checked: list[Tensor | None] = []
        for i, (g, x) in enumerate(zip(result, self.ctx.inputs, strict=True)):
            if g is not None and getattr(x, "shape", None) != g.shape:
                raise OmnitensorError(
                    f"{self.fn_name}.backward: gradient {i} has shape {g.shape} (expected "
                    f"{getattr(x, 'shape', None)}, the shape of input {i})"
                )
            if g is not None and g.dtype != x.dtype:
                g = g.astype(x.dtype)
            checked.append(g)
        if create_graph and self._saves_intermediates():
            # `forward` ran with recording off: a tensor it computed and saved has lost its
            # dependence on the inputs, so differentiating `backward` would miss those terms.
            return first_order_only(f"{self.fn_name} (it saves intermediates computed in "
                                    "forward; save inputs or outputs and recompute instead)",
                                    checked, self.ctx.inputs)
        return checked

    def _saves_intermediates(self) -> bool:
        known = {(id(t._node), t._index) for t in self.ctx.outputs}
        known |= {(id(t._node), t._index) for t in self.ctx.inputs if hasattr(t, "_node")}
        return any(t._grad_fn is None and (id(t._node), t._index) not in known
                   for t in self.ctx.saved_tensors)


def apply_custom(name: str, forward: Callable[..., Any], backward: Callable[..., Any],
                 args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """Run ``forward(ctx, *args, **kwargs)`` and, when needed, record one node for it."""
    from ..tensor.tensor import Tensor

    ctx = FunctionCtx(args)
    needed = is_grad_enabled() and any(ctx.needs_input_grad)
    if not needed:
        with no_grad():
            return forward(ctx, *args, **kwargs)
    with no_grad():
        result = forward(ctx, *args, **kwargs)
    single = isinstance(result, Tensor)
    raw = (result,) if single else tuple(result)
    # Fresh handles: `forward` may return one of its inputs, whose own history must not change.
    outs = tuple(Tensor(t._node, t._index) for t in raw)
    ctx.outputs = outs
    node = FunctionNode(name, backward, ctx, args, len(outs))
    for t in outs:
        if t.dtype.is_floating:
            t._grad_fn = node
    return outs[0] if single else outs


class Function:
    """Base class of user-defined differentiable operations (see the module docstring)."""

    @staticmethod
    def forward(ctx: FunctionCtx, *args: Any, **kwargs: Any) -> Any:
        """Compute the result(s) from the arguments; runs with recording off."""
        raise NotImplementedError

    @staticmethod
    def backward(ctx: FunctionCtx, *grads: Tensor) -> Any:
        """One cotangent per positional argument of `forward` (None for non-tensors)."""
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        """Call `forward` and record one node when grad mode is on and an input requires grad."""
        return apply_custom(cls.__name__, cls.forward, cls.backward, args, kwargs)


