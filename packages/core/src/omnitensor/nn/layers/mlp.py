"""Feed-forward blocks: MLP (Linear, activation, Linear) and SwiGLU."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import functional as F
from ...errors import OmnitensorError
from ...tensor.tensor import Tensor
from ..module import Module
from .basic import Linear

__all__ = ["MLP", "SwiGLU"]

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "tanh": lambda x: x.tanh(),
}


def _lookup(name: str) -> Callable[[Tensor], Tensor]:
    """The activation function called `name`."""
    if name not in _ACTIVATIONS:
        raise OmnitensorError(f"activation: unknown {name!r} (known: "
                              f"{', '.join(sorted(_ACTIVATIONS))})")
    return _ACTIVATIONS[name]


class MLP(Module):
    """fc2(act(fc1(x))): (..., dim) -> (..., hidden) -> (..., out_dim or dim)."""

    def __init__(self, dim: int, hidden: int, out_dim: int | None = None,
                 activation: str = "gelu", bias: bool = True, dtype: Any = None) -> None:
        super().__init__()
        self.act_name = activation
        self.act = _lookup(activation)
        self.fc1 = Linear(dim, hidden, bias, dtype)
        self.fc2 = Linear(hidden, out_dim or dim, bias, dtype)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        result: Tensor = self.fc2(self.act(self.fc1(x)))
        return result

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"activation": self.act_name}


class SwiGLU(Module):
    """down(silu(gate(x)) * up(x)) (Llama's feed-forward)."""

    def __init__(self, dim: int, hidden: int, bias: bool = False, dtype: Any = None) -> None:
        super().__init__()
        self.gate = Linear(dim, hidden, bias, dtype)
        self.up = Linear(dim, hidden, bias, dtype)
        self.down = Linear(hidden, dim, bias, dtype)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        result: Tensor = self.down(F.swiglu(self.gate(x), self.up(x)))
        return result
