"""Quantized matrix products (`qmatmul`) over weights repacked once, at load.

ggml's Q8_0 block (an f16 scale then 32 int8) is a poor layout to stream: a kernel over it runs a
short reduction per block and converts a half float each time (3-6 GB/s here). Repacked as int8
rows with their float32 scales apart, one long vectorized reduction per output row reads the
weight at memory speed. The repacked form is made by `omnitensor_prepare_weight` when a model
is loaded (`plugin.py`) and found again by buffer identity; a weight nobody prepared is repacked
on first use and cached while its (read-only) buffer lives. Formats without a kernel here run
the core's reference kernel (dequantize, then a BLAS product).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Final

import numpy as np

from ._compat import jit, prange

__all__ = ["FORMATS", "Packed", "pack", "packed_for", "qmatmul"]

Array = np.ndarray[Any, Any]

#: Formats with a kernel of their own.
FORMATS: Final = frozenset({"q8_0"})

#: Weight elements (N x K) from which the product runs on numba's thread pool. High on purpose:
#: on this shared 2-core machine a fork/join per matrix-vector product waits for descheduled
#: threads (a 4864 x 896 product: 32 ms split over 2 threads, under 2 ms on one), so only
#: products as large as an LM head are split.
PARALLEL_THRESHOLD: Final = 1 << 24


class Packed:
    """A Q8_0 weight as int8 rows `qs` (N, K) and float32 block scales `d` (N, K/32)."""

    __slots__ = ("d", "qs")

    def __init__(self, qs: Array, d: Array) -> None:
        self.qs = qs
        self.d = d


def pack(blocks: Array, format: str, shape: tuple[int, ...]) -> Packed:
    """Repack ggml blocks (uint8 [N, K/32*34]) of logical `shape` (N, K)."""
    assert format == "q8_0", format
    n, k = shape
    raw = np.ascontiguousarray(blocks).reshape(n, k // 32, 34)
    d = raw[:, :, :2].copy().view(np.float16).astype(np.float32).reshape(n, k // 32)
    qs = np.ascontiguousarray(raw[:, :, 2:]).view(np.int8).reshape(n, k)
    return Packed(qs, np.ascontiguousarray(d))


# NOTE: keyed by id(buffer) with a weak reference that proves it is still the same array; the
# entry goes away with the buffer. Only read-only buffers are cached (a writable one could change
# under the cache).
_CACHE: dict[int, tuple[weakref.ref[Array], Packed]] = {}
_LOCK = threading.Lock()


def _forget(key: int) -> None:
    with _LOCK:
        _CACHE.pop(key, None)


def packed_for(blocks: Array, format: str, shape: tuple[int, ...]) -> Packed:
    """The repacked form of `blocks`, made once per read-only buffer."""
    key = id(blocks)
    entry = _CACHE.get(key)
    if entry is not None and entry[0]() is blocks:
        return entry[1]
    packed = pack(blocks, format, shape)
    if not blocks.flags.writeable:
        with _LOCK:
            _CACHE[key] = (weakref.ref(blocks, lambda _: _forget(key)), packed)
    return packed


@jit()
def _q8_rows(x: Any, qs: Any, d: Any, out: Any) -> None:
    m_rows, k = x.shape
    for n in range(qs.shape[0]):
        for m in range(m_rows):
            acc = np.float32(0.0)
            for j in range(k):
                acc += x[m, j] * (np.float32(qs[n, j]) * d[n, j >> 5])
            out[m, n] = acc


@jit(parallel=True)
def _q8_rows_par(x: Any, qs: Any, d: Any, out: Any) -> None:
    # NOTE: parallel over output rows; each row is one long reduction with the block scale
    # applied per element (reassoc lets LLVM keep 8-wide partial sums), which streams the int8
    # row at memory speed, unlike a short reduction per 32-element block.
    m_rows, k = x.shape
    for n in prange(qs.shape[0]):
        for m in range(m_rows):
            acc = np.float32(0.0)
            for j in range(k):
                acc += x[m, j] * (np.float32(qs[n, j]) * d[n, j >> 5])
            out[m, n] = acc


def qmatmul(x: Array, packed: Packed, out: Array) -> None:
    """Out (M, N) = x (M, K) float32 @ dequantize(packed).T, accumulated in float32."""
    n, k = packed.qs.shape
    kernel = _q8_rows_par if n * k >= PARALLEL_THRESHOLD else _q8_rows
    kernel(x, packed.qs, packed.d, out)


@jit()
def _f32_rows(x: Any, w: Any, out: Any) -> None:
    m_rows, k = x.shape
    for n in range(w.shape[0]):
        for m in range(m_rows):
            acc = np.float32(0.0)
            for j in range(k):
                acc += x[m, j] * w[n, j]
            out[m, n] = acc


@jit(parallel=True)
def _f32_rows_par(x: Any, w: Any, out: Any) -> None:
    m_rows, k = x.shape
    for n in prange(w.shape[0]):
        for m in range(m_rows):
            acc = np.float32(0.0)
            for j in range(k):
                acc += x[m, j] * w[n, j]
            out[m, n] = acc


#: Most activation rows (M) for which `x @ W.T` runs as row dot products instead of BLAS.
GEMV_MAX_ROWS: Final = 4


def gemv(x: Array, w: Array, out: Array) -> None:
    """Out (M, N) = x (M, K) @ w (N, K).T for a few rows M, float32, reading w once.

    Why not BLAS: for a matrix-vector product OpenBLAS splits every call over all threads,
    and on a shared 2-core machine each split waits for a descheduled thread (a 3 MB GEMV took
    35 ms under load). One long reduction per output row streams the weight at memory speed;
    only products large enough to pay for a fork/join use numba's pool.
    """
    n, k = w.shape
    kernel = _f32_rows_par if n * k >= PARALLEL_THRESHOLD else _f32_rows
    kernel(x, w, out)
