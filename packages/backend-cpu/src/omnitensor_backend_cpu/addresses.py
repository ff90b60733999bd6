"""Operands by address, for kernels over a varying number of arrays (`batched`).

numba types a tuple of arrays by its length: a kernel indexing such tuples at run time (the
batched optimizer updates, one array per parameter) compiled for 28 s at 21 arrays and again
for every other count. Here the arrays' data addresses go in as one int64 array instead, and
the kernel views each as an array again (`pointer_at` with ``numba.carray``): compiled once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types as _types
from numba.extending import intrinsic as _intrinsic

from ._compat import jit

__all__ = ["addresses", "pointer_at", "table"]

# NOTE: numba's typing helpers are untyped; used through Any (see `_compat`).
types: Any = _types
intrinsic: Any = _intrinsic


@intrinsic  # type: ignore[untyped-decorator]
def pointer_at(typingctx: Any, address: Any) -> Any:
    """The integer `address` as a ``void *`` (for ``numba.carray``)."""
    if not isinstance(address, types.Integer):
        return None
    sig = types.voidptr(address)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return sig, codegen


@jit()
def addresses(arrays: Any, out: Any) -> None:
    """``out[j]`` = the data address of ``arrays[j]`` (a tuple of arrays of one type)."""
    for j in range(len(arrays)):
        out[j] = arrays[j].ctypes.data


def table(columns: list[tuple[np.ndarray[Any, Any], ...]]) -> np.ndarray[Any, Any]:
    """``(len(columns), len(columns[0]))`` int64: the address of each column's arrays."""
    out = np.empty((len(columns), len(columns[0])), np.int64)
    for k, column in enumerate(columns):
        addresses(column, out[k])
    return out
