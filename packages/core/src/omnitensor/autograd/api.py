"""Functional transforms: `grad`, `value_and_grad` and `vjp` (JAX's shape, PyTorch's engine)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..errors import DTypeError, OmnitensorError, ShapeError
from .engine import GradNode, Input, reaches_outside, run_backward
from .mode import enable_grad, is_grad_enabled

if TYPE_CHECKING:
    from ..tensor.tensor import Tensor

__all__ = ["grad", "value_and_grad", "vjp"]


def _argnums(argnums: int | Sequence[int]) -> tuple[tuple[int, ...], bool]:
    if isinstance(argnums, int):
        return (argnums,), True
    return tuple(argnums), False


def _variables(where: str, args: Sequence[Any], positions: Sequence[int]
               ) -> tuple[list[Any], list[Tensor]]:
    """`args` with the differentiated positions replaced by fresh variables (`Input` nodes).

    A variable has its argument's value and passes gradients through to it, so what a
    transform returns stays differentiable w.r.t. the argument (gradients of gradients).
    """
    from ..tensor.tensor import Tensor, as_tensor

    call = list(args)
    variables: list[Tensor] = []
    for p in positions:
        if not -len(args) <= p < len(args):
            raise OmnitensorError(
                f"{where}: argnums {p} is out of range (got {len(args)} positional arguments)",
                op=where)
        source = as_tensor(args[p])
        if not source.dtype.is_floating:
            raise DTypeError(
                f"{where}: can only differentiate w.r.t. float tensors (got {source.dtype} at "
                f"argument {p}); convert with astype first", op=where, dtype=source.dtype)
        variable = Tensor(source._node, source._index)
        variable._grad_fn = Input(source)
        call[p] = variable
        variables.append(variable)
    return call, variables


def _owned(variables: Sequence[Tensor]) -> Callable[[GradNode], bool]:
    ids = {id(v._grad_fn) for v in variables}
    return lambda node: id(node) in ids


def _needs_graph(roots: Sequence[Any], variables: Sequence[Tensor],
                 extra: Sequence[Any] = ()) -> bool:
    """Whether the gradients must be recorded so that an enclosing transform can use them."""
    if not is_grad_enabled():
        return False
    if any(v._grad_fn.edges[0] is not None for v in variables):
        return True  # an argument itself requires grad
    if any(getattr(t, "_grad_fn", None) is not None for t in extra):
        return True  # a cotangent requires grad
    return reaches_outside(roots, _owned(variables))


def _pullback(roots: Sequence[Tensor], cotangents: Sequence[Tensor],
              variables: Sequence[Tensor], create_graph: bool) -> list[Tensor]:
    """Gradients of `roots` (with `cotangents`) w.r.t. `variables`, zeros where unreached."""
    from ..tensor.creation import zeros_like

    live = [(r, c) for r, c in zip(roots, cotangents, strict=True) if r.requires_grad]
    found = (run_backward([r for r, _ in live], [c for _, c in live], create_graph=create_graph,
                          stop=_owned(variables)) if live else {})
    grads = []
    for v in variables:
        hit = found.get(id(v._grad_fn))
        grads.append(zeros_like(v).detach() if hit is None else hit[1].astype(v.dtype))
    return grads


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
                   has_aux: bool = False) -> Callable[..., Any]:
    """A function returning ``(fn(*args), gradient of fn w.r.t. args[argnums])``.

    Args:
        fn: returns a one-element float tensor (or ``(value, aux)`` with `has_aux`).
        argnums: which positional arguments to differentiate: an int gives one gradient, a
            sequence gives a tuple.
        has_aux: `fn` returns ``(value, aux)``; the result is then ``((value, aux), grads)``.

    The gradients are lazy tensors; ``.grad`` of other tensors is not touched. Transforms
    compose: when an argument requires grad, or `fn` reads a tensor that does (a leaf or an
    enclosing transform's argument), the gradient is itself recorded, so ``grad(grad(f))`` is
    the second derivative.

    Raises:
        ShapeError: `fn` returned something other than a one-element tensor.
        DTypeError: a differentiated argument is not a float tensor.
    """
    positions, single = _argnums(argnums)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..tensor.creation import ones_like
        from ..tensor.tensor import Tensor

        call, variables = _variables("grad", args, positions)
        with enable_grad():
            result = fn(*call, **kwargs)
        value, aux = (result if has_aux else (result, None))
        if not isinstance(value, Tensor) or value.size != 1:
            raise ShapeError(
                "grad: the function must return a one-element tensor (got "
                f"{getattr(value, 'shape', type(value).__name__)}); reduce it (e.g. .sum())",
                op="grad",
            )
        create_graph = _needs_graph([value], variables)
        grads = _pullback([value], [ones_like(value).detach()], variables, create_graph)
        out_grads: Any = grads[0] if single else tuple(grads)
        plain = value if create_graph else value.detach()
        return ((plain, aux) if has_aux else plain), out_grads

    return wrapper


def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """``fn(*primals)`` and a function mapping cotangents of it to cotangents of `primals`.

    JAX's ``vjp``: ``out, pullback = vjp(f, x, y)``; ``gx, gy = pullback(g)`` where `g` has the
    structure of `out` (one tensor, or a tuple of tensors). The pullback may be called several
    times, and composes with `grad`, `value_and_grad` and itself (its results are recorded when
    an enclosing transform needs them).

    Args:
        fn: a function of tensors returning a float tensor or a tuple of float tensors (with
            `has_aux`, ``(out, aux)``).
        primals: the arguments, every one differentiated.
        has_aux: `fn` returns ``(out, aux)``; the result is then ``(out, pullback, aux)``.

    Returns:
        ``(out, pullback)``, or ``(out, pullback, aux)`` with `has_aux`.

    Raises:
        DTypeError: a primal or an output is not a float tensor.
        ShapeError: a cotangent's shape differs from its output's, or their number differs.
    """
    from ..tensor.tensor import Tensor, as_tensor

    call, variables = _variables("vjp", primals, range(len(primals)))
    with enable_grad():
        result = fn(*call)
    out, aux = (result if has_aux else (result, None))
    single = isinstance(out, Tensor)
    outs = [out] if single else list(out) if isinstance(out, (tuple, list)) else None
    if outs is None or not all(isinstance(o, Tensor) for o in outs):
        raise DTypeError(
            f"vjp: the function must return a tensor or a tuple of tensors (got "
            f"{type(out).__name__})", op="vjp")
    for o in outs:
        if not o.dtype.is_floating:
            raise DTypeError(f"vjp: outputs must be float tensors (got {o.dtype})", op="vjp",
                             dtype=o.dtype)

    def pullback(*cotangents: Any) -> tuple[Tensor, ...]:
        if single and len(cotangents) == 1:
            given = [cotangents[0]]
        elif len(cotangents) == 1 and isinstance(cotangents[0], (tuple, list)):
            given = list(cotangents[0])
        else:
            given = list(cotangents)
        if len(given) != len(outs):
            raise ShapeError(
                f"vjp: pullback takes one cotangent per output (got {len(given)}, expected "
                f"{len(outs)})", op="vjp")
        cts = []
        for o, c in zip(outs, given, strict=True):
            ct = as_tensor(c)
            if ct.shape != o.shape:
                raise ShapeError(
                    f"vjp: cotangent shape {ct.shape} does not match the output's {o.shape}",
                    op="vjp", shapes=[ct.shape, o.shape])
            cts.append(ct.astype(o.dtype) if ct.dtype != o.dtype else ct)
        create_graph = _needs_graph(outs, variables, cts)
        return tuple(_pullback(outs, cts, variables, create_graph))

    create = _needs_graph(outs, variables)
    shown: Any = (out if create else out.detach()) if single else tuple(
        o if create else o.detach() for o in outs)
    return (shown, pullback, aux) if has_aux else (shown, pullback)


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
