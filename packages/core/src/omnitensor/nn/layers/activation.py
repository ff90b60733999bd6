"""Activation layers: ReLU, GELU, SiLU, Tanh, Sigmoid, Softmax, LogSoftmax, Identity, Flatten.

Each wraps its functional (or tensor method) so it can sit in a `Sequential`.
"""

from __future__ import annotations

from typing import Any

from ... import functional as F
from ...errors import OmnitensorError
from ...tensor.tensor import Tensor
from ..module import Module

__all__ = ["GELU", "Flatten", "Identity", "LogSoftmax", "ReLU", "SiLU", "Sigmoid", "Softmax",
           "Tanh"]


class ReLU(Module):
    """max(x, 0). See `functional.relu`."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.relu(x)


class GELU(Module):
    """x * Phi(x), exact (erf) or ``approximate="tanh"``. See `functional.gelu`.

    Args:
        approximate: ``"none"`` (erf) or ``"tanh"``.
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise OmnitensorError(f"GELU: approximate must be 'none' or 'tanh' (got "
                                  f"{approximate!r})")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"approximate": self.approximate}


class SiLU(Module):
    """x * sigmoid(x). See `functional.silu`."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.silu(x)


class Tanh(Module):
    """Hyperbolic tangent."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return x.tanh()


class Sigmoid(Module):
    """Logistic sigmoid 1 / (1 + e**-x)."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return x.sigmoid()


class Softmax(Module):
    """Softmax along `dim` (PyTorch's name; `axis` also accepted). See `functional.softmax`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.softmax(x, axis=self.dim)

    def extra_repr(self) -> dict[str, Any]:
        """Constructor settings shown by `repr`."""
        return {"dim": self.dim}


class LogSoftmax(Softmax):
    """log(softmax(x)) along `dim`, computed stably. See `functional.log_softmax`."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.log_softmax(x, axis=self.dim)


class Identity(Module):
    """Returns its input (a placeholder in a `Sequential`)."""

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return x


class Flatten(Module):
    """Merge axes `start_dim`..`end_dim` (default: all but the batch axis)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return x.flatten(self.start_dim, self.end_dim)
