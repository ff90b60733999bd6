"""Reverse-mode automatic differentiation on lazy tensors (DESIGN §7).

Gradients are ordinary lazy tensors, so a backward pass is captured, optimized, cached and run
on any backend like the forward. Pieces: grad mode (`mode`), the tape and the walk (`engine`),
one gradient rule per op (`vjp`), user-defined `Function`s (`function`), and the `grad` /
`value_and_grad` transforms (`api`).
"""

from .api import grad as grad
from .api import value_and_grad as value_and_grad
from .engine import backward as backward
from .function import Function as Function
from .function import FunctionCtx as FunctionCtx
from .mode import enable_grad as enable_grad
from .mode import is_grad_enabled as is_grad_enabled
from .mode import no_grad as no_grad
from .mode import set_grad_enabled as set_grad_enabled

__all__ = [
    "Function", "FunctionCtx", "backward", "enable_grad", "grad", "is_grad_enabled", "no_grad",
    "set_grad_enabled", "value_and_grad",
]
