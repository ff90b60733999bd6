"""Activation kernels of the composites: GELU (erf and tanh), SiLU, and the gated SwiGLU/GeGLU.

One flat loop over C-contiguous operands (callers copy strided ones), float32 through the
vectorizable `mathlib` forms (8 lanes, no libm calls), float64 through ``math``. Sizes are
arguments, not constants, so one compiled kernel serves every shape: one per float32 mode (a
model compiles only the activation it uses), one for every float64 mode.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
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

# NOTE: one kernel per float32 mode, each a branch-free loop that vectorizes (`up` is read only
# by the gated form; `gated` False passes `x` again). One kernel for all three modes took 4.9 s
# to compile on a cold cache, where a decode's SwiGLU needs the SiLU loops alone.


@jit(fastmath=_FM)
def _gelu_erf32(x: Any, up: Any, out: Any, gated: bool) -> None:
    if gated:
        for i in range(x.shape[0]):
            out[i] = gelu_erf32f(x[i]) * up[i]
    else:
        for i in range(x.shape[0]):
            out[i] = gelu_erf32f(x[i])


@jit(fastmath=_FM)
def _gelu_tanh32(x: Any, up: Any, out: Any, gated: bool) -> None:
    if gated:
        for i in range(x.shape[0]):
            out[i] = gelu_tanh32f(x[i]) * up[i]
    else:
        for i in range(x.shape[0]):
            out[i] = gelu_tanh32f(x[i])


@jit(fastmath=_FM)
def _silu32(x: Any, up: Any, out: Any, gated: bool) -> None:
    if gated:
        for i in range(x.shape[0]):
            out[i] = silu32f(x[i]) * up[i]
    else:
        for i in range(x.shape[0]):
            out[i] = silu32f(x[i])


_KERNELS32: Final = (_gelu_erf32, _gelu_tanh32, _silu32)  # by mode


@jit(fastmath=_FM)
def _act64_all(x: Any, up: Any, out: Any, gated: bool, mode: int) -> None:
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
    call, _ = prepare_activation(x, out, mode, up)
    call()


def _rows(a: Array) -> Array | None:
    """`a` as a 2-D view of rows along its last axis, each row contiguous; else None."""
    if a.ndim < 2 or a.strides[-1] != a.itemsize:
        return None
    rows = a.reshape(-1, a.shape[-1])
    return rows if np.may_share_memory(rows, a) else None  # (a copy: not a view)


def _by_rows(x: Array, up: Array, out: Array, mode: int, gated: bool) -> Callable[[], None]:
    kernel = _KERNELS32[mode]

    def rows(lo: int, hi: int) -> None:
        for r in range(lo, hi):
            kernel(x[r], up[r], out[r], gated)

    return functools.partial(pool.parallel_for, x.shape[0], rows, x.size)


def prepare_activation(x: Array, out: Array, mode: int, up: Array | None = None
                       ) -> tuple[Callable[[], None], bool]:
    """`activation`'s kernel call on these arrays, and whether it may be called again.

    Reusable when no operand was copied (see `rowops.prepare_norm`).
    """
    reusable = x.flags.c_contiguous and (up is None or up.flags.c_contiguous)
    if not reusable and x.dtype == np.float32 and out.flags.c_contiguous:
        x_rows = _rows(x)
        up_rows = x_rows if up is None else _rows(up)
        if x_rows is not None and up_rows is not None and up_rows.shape == x_rows.shape:
            # NOTE: a gated unit's gate and up are the two halves of one joined product's
            # rows: a kernel call a row on the views, where copying both to contiguous arrays
            # at every call took a 16-token prefill's (16, 4864) swiglu 127 us
            return _by_rows(x_rows, up_rows, out.reshape(x_rows.shape), mode,
                            up is not None), True
    flat_x = np.ascontiguousarray(x).reshape(-1)
    flat_up = flat_x if up is None else np.ascontiguousarray(up).reshape(-1)
    flat_out = out.reshape(-1)
    gated = up is not None
    if x.dtype == np.float32:
        kernel: Any = _KERNELS32[mode]
    else:

        def kernel(a: Array, b: Array, c: Array, g: bool) -> None:
            _act64_all(a, b, c, g, mode)

    if flat_x.size < pool.MIN_SPLIT:  # (a decode step's (1, 4864): no split)
        return functools.partial(kernel, flat_x, flat_up, flat_out, gated), reusable
    return functools.partial(pool.parallel_for, flat_x.size, lambda lo, hi: kernel(
        flat_x[lo:hi], flat_up[lo:hi], flat_out[lo:hi], gated), grain=64), reusable
