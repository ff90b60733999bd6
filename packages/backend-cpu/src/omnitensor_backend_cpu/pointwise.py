"""Activation kernels of the composites: GELU (erf and tanh), SiLU, and the gated SwiGLU/GeGLU.

One flat loop over C-contiguous operands (callers copy strided ones), float32 through the
vectorizable `mathlib` forms (8 lanes, no libm calls), float64 through ``math``. The mode is an
argument, not a constant, so one compiled kernel serves every shape and every mode of a dtype.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from . import pool
from ._compat import jit
from .mathlib import activation64, gelu_erf32f, gelu_tanh32f, silu32f

__all__ = ["GELU_ERF", "GELU_TANH", "SILU", "activation"]

Array = np.ndarray[Any, Any]

#: Activation modes (the kernels' `mode` argument).
GELU_ERF: Final = 0
GELU_TANH: Final = 1
SILU: Final = 2

_FM: Final = frozenset({"contract"})

# NOTE: one loop per mode (the mode is tested once, outside), so each loop is branch-free and
# vectorizes; `up` is read only by the gated form (`gated` False passes `x` again).


@jit(fastmath=_FM, inline=True)
def _span32(x: Any, up: Any, out: Any, mode: int, gated: bool, lo: int, hi: int) -> None:
    if gated:
        if mode == 0:
            for i in range(lo, hi):
                out[i] = gelu_erf32f(x[i]) * up[i]
        elif mode == 1:
            for i in range(lo, hi):
                out[i] = gelu_tanh32f(x[i]) * up[i]
        else:
            for i in range(lo, hi):
                out[i] = silu32f(x[i]) * up[i]
    elif mode == 0:
        for i in range(lo, hi):
            out[i] = gelu_erf32f(x[i])
    elif mode == 1:
        for i in range(lo, hi):
            out[i] = gelu_tanh32f(x[i])
    else:
        for i in range(lo, hi):
            out[i] = silu32f(x[i])


@jit(fastmath=_FM)
def _act32(x: Any, up: Any, out: Any, mode: int, gated: bool) -> None:
    _span32(x, up, out, mode, gated, 0, x.shape[0])


@jit(fastmath=_FM)
def _act64_all(x: Any, up: Any, out: Any, mode: int, gated: bool) -> None:
    for i in range(x.shape[0]):
        y = activation64(x[i], mode)
        out[i] = y * up[i] if gated else y


def activation(x: Array, out: Array, mode: int, up: Array | None = None) -> None:
    """``out = act(x)`` (or ``act(x) * up``, the gated form), flat, in `x`'s dtype.

    Args:
        x: float32/float64 array (any layout; copied when not C-contiguous).
        out: C-contiguous result of `x`'s shape and dtype.
        mode: `GELU_ERF`, `GELU_TANH` or `SILU`.
        up: the other half of a gated unit, `x`'s shape, or None.
    """
    flat_x = np.ascontiguousarray(x).reshape(-1)
    flat_up = flat_x if up is None else np.ascontiguousarray(up).reshape(-1)
    flat_out = out.reshape(-1)
    gated = up is not None
    kernel = _act32 if x.dtype == np.float32 else _act64_all
    if flat_x.size < pool.MIN_SPLIT:  # (a decode step's (1, 4864): no split, no closure)
        kernel(flat_x, flat_up, flat_out, mode, gated)
        return
    pool.parallel_for(flat_x.size, lambda lo, hi: kernel(
        flat_x[lo:hi], flat_up[lo:hi], flat_out[lo:hi], mode, gated), grain=64)
