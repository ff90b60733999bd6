"""The tape and the reverse walk.

Recording: when grad mode is on and some operand requires grad, `Tensor._apply` calls
`record_op`, which attaches one `OpNode` to the results (micrograd's idea: a graph of local
rules). Leaves that require grad carry a `Leaf` node, so every tensor that requires grad has a
`grad_fn` and the walk is uniform.

The walk (`run_backward`) sorts the nodes reachable from the roots with an explicit stack (no
recursion limit on deep models), then applies each node's rule once, consumers before producers,
summing the cotangents that reach each result. The rules are written with Tensor ops, so the
gradients are ordinary lazy tensors: the backward pass is captured, optimized, cached and run on
any backend like the forward.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DTypeError, OmnitensorError, ShapeError, UnsupportedError
from ..ir.opdef import Trait, get_op
from .mode import _enabled, set_grad_enabled

if TYPE_CHECKING:
    from ..tensor.tensor import Tensor

__all__ = [
    "FirstOrderOnly", "GradNode", "Input", "Leaf", "OpNode", "backward", "gradient_transform",
    "reaches_outside", "record_op", "run_backward",
]

#: ``(leaves, grads) -> grads``: applied by `backward` before gradients reach ``.grad``.
GradientTransform = Callable[[Sequence["Tensor"], Sequence["Tensor"]], Sequence["Tensor"]]
_TRANSFORM: contextvars.ContextVar[GradientTransform | None] = contextvars.ContextVar(
    "omnitensor_gradient_transform", default=None)


@contextlib.contextmanager
def gradient_transform(transform: GradientTransform) -> Iterator[None]:
    """Within the block, `backward` passes each call's new gradients through `transform`.

    `transform` receives the leaves and the gradients this ``backward`` computed for them (before
    accumulation into ``.grad``) and returns one gradient per leaf: data-parallel training
    all-reduces them here (``omnitensor.distributed.DataParallel``). Context-local; scopes nest
    (the innermost wins).
    """
    token = _TRANSFORM.set(transform)
    try:
        yield
    finally:
        _TRANSFORM.reset(token)

Grads = tuple["Tensor | None", ...]


class GradNode:
    """A node of the backward graph: one recorded step with `n_outputs` differentiable results.

    Attributes:
        edges: per input, ``(producer node, result index)`` or None when that input does not
            require grad.
        n_outputs: number of results (the cotangents `apply` receives).
    """

    __slots__ = ("__weakref__", "edges", "n_outputs")

    name = "node"

    def __init__(self, inputs: Sequence[Any], n_outputs: int) -> None:
        self.edges = tuple(edge_of(t) for t in inputs)
        self.n_outputs = n_outputs

    def apply(self, grads: Grads, create_graph: bool) -> Sequence[Tensor | None]:
        """Cotangents of the inputs from those of the results (None: no gradient)."""
        raise NotImplementedError

    def slot(self, value: Any) -> int:
        """Which of this node's results `value` is (by default its graph result index)."""
        return int(value._index)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def edge_of(value: Any) -> tuple[GradNode, int] | None:
    """The backward edge to `value`'s producer, or None when it does not require grad."""
    fn = getattr(value, "_grad_fn", None)
    if fn is None:
        return None
    return (fn, fn.slot(value))


class Leaf(GradNode):
    """The node of a leaf tensor that requires grad: gradients stop (and accumulate) here."""

    __slots__ = ("tensor",)

    name = "leaf"

    def __init__(self, tensor: Tensor) -> None:
        super().__init__((), 1)
        self.tensor: weakref.ref[Tensor] = weakref.ref(tensor)

    def apply(self, grads: Grads, create_graph: bool) -> Sequence[Tensor | None]:
        """Cotangents of the inputs from those of the results."""
        return ()

    def slot(self, value: Any) -> int:
        """Which result of this node `value` is."""
        return 0


class Input(GradNode):
    """The variable of one transform (`grad`, `vjp`) or of one replayed decomposition.

    The tensor it produces has the value of `source` and passes gradients straight through to
    it, so the transform's result stays a function of `source` (gradients of gradients); the
    transform's own walk stops here (``stop=``) and reads its gradient off this node.
    """

    __slots__ = ()

    name = "input"

    def __init__(self, source: Any) -> None:
        super().__init__((source,), 1)

    def apply(self, grads: Grads, create_graph: bool) -> Sequence[Tensor | None]:
        """The identity: the cotangent goes to the source."""
        return (grads[0],)

    def slot(self, value: Any) -> int:
        """Which result of this node `value` is."""
        return 0


class FirstOrderOnly(GradNode):
    """Stands for a gradient whose own derivative is not implemented.

    A walk that reaches it raises `UnsupportedError` naming `what`, so a missing second
    derivative is an error, never a silent zero.
    """

    __slots__ = ("what",)

    name = "first_order_only"

    def __init__(self, what: str, inputs: Sequence[Any]) -> None:
        super().__init__(inputs, 1)
        self.what = what

    def apply(self, grads: Grads, create_graph: bool) -> Sequence[Tensor | None]:
        """Raise: this gradient cannot be differentiated."""
        raise UnsupportedError(
            f"backward: the second derivative of {self.what} is not implemented (its gradient "
            "was computed once, without a differentiable backward); differentiate it only once",
            op=self.what,
        )


def first_order_only(what: str, grads: Sequence[Tensor | None],
                     inputs: Sequence[Any]) -> tuple[Tensor | None, ...]:
    """`grads` as handles whose differentiation raises (when some of `inputs` requires grad)."""
    from ..tensor.tensor import Tensor

    if not any(getattr(x, "_grad_fn", None) is not None for x in inputs):
        return tuple(grads)
    out: list[Tensor | None] = []
    for g in grads:
        if g is None:
            out.append(None)
            continue
        fresh = Tensor(g._node, g._index)
        fresh._grad_fn = FirstOrderOnly(what, [x for x in inputs if hasattr(x, "_grad_fn")])
        out.append(fresh)
    return tuple(out)


class OpNode(GradNode):
    """One recorded PTIR op: its operand values, result values and complete attributes."""

    __slots__ = ("attrs", "inputs", "multi", "op", "outputs")

    def __init__(self, op: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
                 attrs: dict[str, Any], multi: bool = False) -> None:
        super().__init__(inputs, len(outputs))
        self.multi = multi  # the rule takes tuples (a MULTI_RESULT op, even with one result)
        from ..tensor.tensor import Tensor

        self.op = op
        self.attrs = attrs
        # Snapshots of the values (a handle may be rebound later, e.g. ``x[i] = v``); they keep
        # their producers so that `create_graph=True` differentiates the rules themselves.
        snaps = []
        for t in inputs:
            snap = Tensor(t._node, t._index)
            snap._grad_fn = t._grad_fn
            snaps.append(snap)
        self.inputs = tuple(snaps)
        self.outputs = tuple((t._node, t._index) for t in outputs)

    @property
    def name(self) -> str:  # type: ignore[override]
        """The op name."""
        return self.op

    def apply(self, grads: Grads, create_graph: bool) -> Sequence[Tensor | None]:
        """Cotangents of the operands from the op's gradient rule."""
        """Cotangents of the inputs from those of the results."""
        from ..tensor.tensor import Tensor
        from .vjp import get_vjp

        rule = get_vjp(self.op)
        outs = []
        for node, index in self.outputs:
            out = Tensor(node, index)
            if create_graph:
                out._grad_fn = self
            outs.append(out)
        if not self.multi:
            g: Any = grads[0]
            out_arg: Any = outs[0]
        else:
            g, out_arg = grads, tuple(outs)
        result = rule(g, out_arg, *self.inputs, **self.attrs)
        if not isinstance(result, (tuple, list)):
            result = (result,)
        if len(result) != len(self.inputs):
            raise OmnitensorError(
                f"{self.op}: gradient rule returned {len(result)} cotangents (expected "
                f"{len(self.inputs)}, one per operand); fix the rule in autograd/vjp"
            )
        return tuple(result)


def record_op(op: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
    """The hook `Tensor._apply` calls when some operand requires grad.

    Records nothing when grad mode is off, when the op is not differentiable, or when no result
    is a float (comparisons, argmax, casts to int).
    """
    if not _enabled.get():
        return
    opdef = get_op(op)
    if opdef.has(Trait.NON_DIFFERENTIABLE):
        return
    floats = [t for t in outputs if _is_float(t)]
    if not floats:
        return
    node = OpNode(op, inputs, outputs, outputs[0]._node.attrs, opdef.has(Trait.MULTI_RESULT))
    for t in floats:
        t._grad_fn = node


def _is_float(t: Tensor) -> bool:
    from ..ir.types import TensorType

    type = t._node.types[t._index]
    return isinstance(type, TensorType) and type.dtype.is_floating


def _toposort(roots: Sequence[GradNode],
              stop: Callable[[GradNode], bool] | None = None) -> list[GradNode]:
    """Nodes reachable from `roots`, every consumer before its producers. Iterative.

    The producers of nodes for which `stop` returns True are not visited.
    """
    post: list[GradNode] = []
    visited: set[int] = set()
    stack: list[tuple[GradNode, bool]] = [(r, False) for r in roots]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            post.append(node)
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        if stop is not None and stop(node):
            continue
        for edge in node.edges:
            if edge is not None and id(edge[0]) not in visited:
                stack.append((edge[0], False))
    post.reverse()
    return post


def _accumulate(slot: list[Tensor | None], index: int, grad: Tensor) -> None:
    current = slot[index]
    slot[index] = grad if current is None else current + grad


def run_backward(roots: Sequence[Tensor], grad_roots: Sequence[Tensor], *,
                 create_graph: bool = False,
                 stop: Callable[[GradNode], bool] | None = None
                 ) -> dict[int, tuple[GradNode, Tensor]]:
    """Propagate `grad_roots` back from `roots`; returns ``{id(node): (node, gradient)}``.

    The nodes reported are the leaves reached and the `stop` nodes.

    Args:
        roots: tensors to differentiate (each must require grad).
        grad_roots: their cotangents, same shapes and dtypes.
        create_graph: record the backward ops too (for higher-order gradients).
        stop: nodes for which this returns True are treated as leaves (used by `grad`): their
            gradient is reported and nothing behind them is visited.
    """
    pending: dict[int, list[Tensor | None]] = {}
    root_nodes: list[GradNode] = []
    for root, g in zip(roots, grad_roots, strict=True):
        edge = edge_of(root)
        if edge is None:
            raise OmnitensorError(
                "backward: tensor does not require grad (got a tensor with no grad_fn); set "
                "requires_grad on an input or compute it outside no_grad()"
            )
        node, index = edge
        _check_cotangent("backward", root, g)
        root_nodes.append(node)
        _accumulate(pending.setdefault(id(node), [None] * node.n_outputs), index, g)
    results: dict[int, tuple[GradNode, Tensor]] = {}
    with set_grad_enabled(create_graph):
        for node in _toposort(root_nodes, stop):
            grads = pending.pop(id(node), None)
            if grads is None or all(g is None for g in grads):
                continue
            if isinstance(node, Leaf) or (stop is not None and stop(node)):
                if grads[0] is not None:
                    results[id(node)] = (node, grads[0])
                continue
            in_grads = node.apply(tuple(grads), create_graph)
            for edge, cotangent in zip(node.edges, in_grads, strict=True):
                if edge is None or cotangent is None:
                    continue
                producer, index = edge
                _accumulate(pending.setdefault(id(producer), [None] * producer.n_outputs),
                            index, cotangent)
    return results


def reaches_outside(roots: Sequence[Any], own: Callable[[GradNode], bool]) -> bool:
    """True when the graph behind `roots` reaches a variable that `own` does not claim.

    A transform differentiating w.r.t. its own `Input` nodes uses this to decide whether its
    gradients must themselves be recorded: they must when the function also depends on a leaf
    that requires grad or on another (enclosing) transform's variable.
    """
    stack = [fn for fn in (getattr(r, "_grad_fn", None) for r in roots) if fn is not None]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if own(node):
            continue
        if isinstance(node, (Leaf, Input)):
            return True
        stack.extend(edge[0] for edge in node.edges if edge is not None)
    return False


def _check_cotangent(where: str, value: Tensor, grad: Tensor) -> None:
    if grad.shape != value.shape:
        raise ShapeError(
            f"{where}: gradient shape {grad.shape} does not match the tensor's shape "
            f"{value.shape}; pass a gradient of the same shape",
            op=where,
            shapes=[grad.shape, value.shape],
        )
    if not grad.dtype.is_floating:
        raise DTypeError(f"{where}: gradient must be a float tensor (got {grad.dtype})", op=where)


def backward(tensor: Tensor, gradient: Tensor | None = None, *,
             create_graph: bool = False) -> None:
    """Accumulate d(tensor)/d(leaf) into ``leaf.grad`` for every leaf that requires grad.

    Args:
        tensor: the value to differentiate; a scalar unless `gradient` is given.
        gradient: the cotangent of `tensor` (default: ones for a one-element tensor).
        create_graph: record the backward ops so that the gradients can be differentiated.

    Raises:
        ShapeError: when `gradient` is missing for a tensor with more than one element.
    """
    from ..tensor.tensor import as_tensor

    if gradient is None:
        if tensor.size != 1:
            raise ShapeError(
                f"backward: a gradient can be created implicitly only for one-element tensors "
                f"(got shape {tensor.shape}); pass gradient=",
                op="backward",
                shapes=[tensor.shape],
            )
        from ..tensor.creation import ones_like

        gradient = ones_like(tensor)
    else:
        gradient = as_tensor(gradient).astype(tensor.dtype)
    found = run_backward([tensor], [gradient], create_graph=create_graph)
    pairs = [(leaf.tensor(), grad) for leaf, grad in found.values() if isinstance(leaf, Leaf)]
    live = [(target, grad) for target, grad in pairs if target is not None]
    transform = _TRANSFORM.get()
    if transform is not None and live:
        new = list(transform([t for t, _ in live], [g for _, g in live]))
        if len(new) != len(live):
            raise OmnitensorError(f"backward: the gradient transform returned {len(new)} "
                                  f"gradients (expected {len(live)}, one per leaf)")
        live = [(t, g) for (t, _), g in zip(live, new, strict=True)]
    for target, grad in live:
        if grad.dtype != target.dtype:
            grad = grad.astype(target.dtype)
        if not create_graph:
            grad = grad.detach()
        target.grad = grad if target.grad is None else target.grad + grad


class _Hooks:
    """The entry points the tensor layer calls (`omnitensor.tensor.tensor.AutogradHooks`)."""

    def record_op(self, op: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor]) -> None:
        record_op(op, inputs, outputs)

    def make_leaf(self, tensor: Tensor) -> Any:
        return Leaf(tensor)

    def is_leaf_node(self, node: Any) -> bool:
        return isinstance(node, Leaf)

    def backward(self, tensor: Tensor, gradient: Tensor | None, *, create_graph: bool) -> None:
        backward(tensor, gradient, create_graph=create_graph)


def _register() -> None:
    from ..tensor.tensor import register_autograd

    register_autograd(_Hooks())


_register()
