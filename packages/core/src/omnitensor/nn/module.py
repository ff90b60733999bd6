"""`Module`: parameters and submodules by stable dotted name, state dicts, train/eval, devices.

Layers orchestrate, functionals do the math (DESIGN §2). A module whose class defines
``backward(self, ctx, *grads)`` replaces autograd for its whole forward: the inner ops record
nothing and one node stands for the call (see `LinearManual` in the tests).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..errors import OmnitensorError, ShapeError
from ..ir.program import Role
from ..tensor.tensor import Tensor, as_tensor

__all__ = ["IncompatibleKeys", "Module", "Parameter"]


class Parameter(Tensor):
    """A tensor that is a module's weight: realized, requires grad, role PARAMETER."""

    __slots__ = ()

    def __init__(self, value: Any, requires_grad: bool = True) -> None:
        t = as_tensor(value)
        t.realize()
        super().__init__(t._node, t._index)
        self._node.role = Role.PARAMETER
        if requires_grad and self.dtype.is_floating:
            self.requires_grad = True


class IncompatibleKeys(NamedTuple):
    """What `load_state_dict` did not match."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def assign(handle: Tensor, value: Tensor) -> None:
    """Rebind `handle` to `value` in place, keeping its autograd leaf (optimizer updates)."""
    handle._rebind_to(value)


class Module:
    """Base class of layers: assign parameters, submodules and buffers as attributes."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "training", True)

    # --- attribute registry ---------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise OmnitensorError(
                f"{type(self).__name__}: call super().__init__() before assigning attributes")
        for table in ("_parameters", "_modules", "_buffers"):
            self.__dict__[table].pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        for table in ("_parameters", "_modules", "_buffers"):
            found = self.__dict__.get(table, {})
            if name in found:
                return found[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_buffer(self, name: str, value: Tensor | None) -> None:
        """A named non-trainable tensor saved in the state dict (RNG keys, running stats)."""
        if value is not None:
            value.realize()
            value._node.role = Role.STATE
        self._buffers[name] = value

    def register_parameter(self, name: str, value: Parameter | None) -> None:
        """Register `value` (None keeps the name, e.g. a disabled bias)."""
        self._parameters[name] = value

    # --- traversal ------------------------------------------------------------------------------

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every submodule, by dotted name ("" for self). Iterative."""
        stack: list[tuple[str, Module]] = [(prefix, self)]
        seen: set[int] = set()
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = list(module._modules.items())
            for child_name, child in reversed(children):
                if child is not None:
                    stack.append((f"{name}.{child_name}" if name else child_name, child))

    def children(self) -> Iterator[Module]:
        """Direct submodules."""
        return (m for m in self._modules.values() if m is not None)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """Every parameter by stable dotted name (``blocks.0.attn.q.weight``), shared once."""
        seen: set[int] = set()
        for mod_name, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self) -> list[Parameter]:
        """Every parameter, in `named_parameters` order."""
        return [p for _, p in self.named_parameters()]

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        """Every buffer by dotted name."""
        for mod_name, module in self.named_modules():
            for name, b in module._buffers.items():
                if b is not None:
                    yield (f"{mod_name}.{name}" if mod_name else name), b

    # --- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Tensor]:
        """Parameters and buffers by dotted name (the tensors themselves; `.numpy()` copies)."""
        out: dict[str, Tensor] = dict(self.named_parameters())
        out.update(self.named_buffers())
        return out

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values (tensors or arrays) into the parameters and buffers of the same names.

        Raises:
            OmnitensorError: with `strict`, when keys are missing or unexpected (lists both).
            ShapeError: when a value's shape differs from the parameter's.
        """
        own = self.state_dict()
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise OmnitensorError(
                f"load_state_dict: keys do not match (missing: {missing or 'none'}; unexpected: "
                f"{unexpected or 'none'}); pass strict=False to load the matching ones")
        for name, target in own.items():
            if name not in state:
                continue
            value = state[name]
            array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            if tuple(array.shape) != target.shape:
                raise ShapeError(
                    f"load_state_dict: {name} has shape {tuple(array.shape)} (expected "
                    f"{target.shape})", shapes=[tuple(array.shape), target.shape])
            fresh = as_tensor(array.astype(target.dtype.np)).to(target.backend) if (
                target.backend is not None) else as_tensor(array.astype(target.dtype.np))
            fresh._node.role = target._node.role
            assign(target, fresh)
        return IncompatibleKeys(missing, unexpected)

    def train(self, mode: bool = True) -> Module:
        """Set training mode here and in every submodule; returns self."""
        for _, module in self.named_modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self) -> Module:
        """`train(False)`."""
        return self.train(False)

    def to(self, backend: Any) -> Module:
        """Move every parameter and buffer to `backend` (a name or instance), in place."""
        for _, t in list(self.named_parameters()) + list(self.named_buffers()):
            role = t._node.role
            assign(t, t.detach().to(backend))
            t._node.role = role
        return self

    def zero_grad(self) -> None:
        """Forget every parameter's gradient."""
        for p in self.parameters():
            p.grad = None

    # --- calling --------------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation (subclasses define it)."""
        raise NotImplementedError(f"{type(self).__name__}.forward")

    backward: Any = None  # a subclass may define backward(self, ctx, *grads)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """See the base class."""
        if type(self).backward is None:
            return self.forward(*args, **kwargs)
        return self._call_custom(args, kwargs)

    def _call_custom(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One autograd node for the whole forward.

        The subclass's ``backward(ctx, *grads)`` returns ``(input_grads, {param_name: grad})``.
        """
        from ..autograd.function import apply_custom

        named = list(self.named_parameters())
        n = len(args)

        def forward(ctx: Any, *inputs: Any) -> Any:
            ctx.args = inputs[:n]
            return self.forward(*inputs[:n], **kwargs)

        def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
            input_grads, param_grads = self.backward(ctx, *grads)
            unknown = set(param_grads) - {name for name, _ in named}
            if unknown:
                raise OmnitensorError(
                    f"{type(self).__name__}.backward: gradients for unknown parameters "
                    f"{sorted(unknown)} (known: {[name for name, _ in named]})")
            return tuple(input_grads) + tuple(param_grads.get(name) for name, _ in named)

        return apply_custom(type(self).__name__, forward, backward,
                            list(args) + [p for _, p in named], {})

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.extra_repr().items())
        lines = [f"{type(self).__name__}({inner})"]
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {}
