"""Host arrays that nobody may write, and pages of mapped files a backend no longer reads.

Weights viewed in a file mapped read-only (`io.mapped.map_file`) or sealed by a reader
(`seal`) are `immutable`: host backends keep them without copying. A backend that copies a
weight into a layout of its own drops the file's pages afterwards (`release`), so the process
holds each weight once.
"""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np

__all__ = ["ALIGNMENT", "IN_PLACE_BYTES", "MAPPED_BYTES", "SMALL_BYTES", "aligned",
           "aligned_empty", "immutable", "is_aligned", "prefetch", "release", "seal"]

Array = np.ndarray[Any, Any]

_PAGE = mmap.PAGESIZE

#: Byte alignment of the arrays host backends keep (weights, sealed arrays): one cache line,
#: one AVX-512 load. numpy's large allocations start 16 bytes into a page, and GGUF tensors
#: 32 bytes apart: a weight read with 64-byte loads from such an address splits every load
#: over two cache lines (a matrix-vector product over 1.5 GB of f32 weights streamed 49 GB/s
#: from 16 past a line, 39 from 32 past it, 67 aligned).
ALIGNMENT = 64

#: Copies under this many bytes are left where numpy puts them: an array of a few cache lines
#: is not streamed, and an aligned allocation costs microseconds (five tiny inputs of a decode
#: step took 22 us more).
SMALL_BYTES = 4096


#: Weights in a mapped file smaller than this are copied out of it rather than read in place.
#: Reading a page of a mapped file maps the pages around it too (64 KiB of fault-around, or
#: the whole 2 MiB folio of a file the page cache holds in huge pages), and those pages count
#: in the process's memory: a 0.5B Q8_0 model's 49 norm weights, read at every step between
#: the matrices the backend had repacked and dropped (`release`), brought 94 MB of them back
#: (fresh-process peak of a 64-token decode 689 MB, 595 with the norms copied). A weight this
#: small costs nothing to copy; a large one read in place is its own pages.
IN_PLACE_BYTES = 1 << 18


def is_aligned(array: Array, alignment: int = ALIGNMENT) -> bool:
    """Whether `array`'s first element sits on an `alignment`-byte boundary."""
    return int(array.ctypes.data) % alignment == 0


#: Kept arrays of `aligned_empty` from this many bytes on get an anonymous mapping of their own.
#: 256 KiB rather than 1 MiB: a 0.5B model's q and output matrices (0.77 MB each) are kept too,
#: and q's copy goes away when the cpu backend joins q, k and v (fresh-process peak of that
#: model's Q8_0 decode 597-598 -> 588-589 MB); a page-rounded mapping wastes < 2 % at 256 KiB.
MAPPED_BYTES = 1 << 18


class _Anonymous(mmap.mmap):
    """The anonymous mapping under a large `aligned_empty` array (never a file's pages).

    Why not numpy's allocation: a weight copied into a backend's layout and later replaced (a
    layer's q, k and v joined into one matrix at the first run: 223 MB of a 0.5B Q8_0 model)
    went back to the C heap when freed, which kept part of its pages: that decode's peak in a
    fresh process was 668-709 MB, 652-654 with mappings of their own, unmapped with the array
    (from 1 MiB; see `MAPPED_BYTES` for the threshold now).
    """


def aligned_empty(shape: tuple[int, ...] | int, dtype: Any,
                  alignment: int = ALIGNMENT, *, kept: bool = True) -> Array:
    """A new writable C-contiguous array whose data starts on an `alignment`-byte boundary.

    A `kept` array (a weight's copy) from `MAPPED_BYTES` on lives in a mapping of its own
    (page-aligned, huge pages where the system gives them), returned to the system when the
    array and its views are gone. ``kept=False`` (a copy made at every call) takes numpy's
    memory, which the C heap hands out again without new page faults: a fresh 4 MiB mapping
    per call made such a copy 1.7x slower, 1 MiB 6x.
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    if kept and nbytes >= MAPPED_BYTES and _PAGE % alignment == 0:
        # (private: the default shared anonymous mapping is shared memory, without huge pages)
        region = _Anonymous(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if hasattr(mmap, "MADV_HUGEPAGE"):
            region.madvise(mmap.MADV_HUGEPAGE)
        mapped: Array = np.frombuffer(region, np.uint8, nbytes).view(dtype).reshape(shape)
        return mapped
    raw = np.empty(nbytes + alignment, np.uint8)
    start = -int(raw.ctypes.data) % alignment
    out: Array = raw[start:start + nbytes].view(dtype).reshape(shape)
    return out


def aligned(array: Array, alignment: int = ALIGNMENT) -> Array:
    """`array` itself when C-contiguous and aligned, else an aligned C-contiguous copy."""
    if array.flags.c_contiguous and is_aligned(array, alignment):
        return array
    out = aligned_empty(array.shape, array.dtype, alignment)
    np.copyto(out, array)
    return out


def _mapping(array: Array) -> tuple[mmap.mmap, int] | None:
    """The mapping `array` lives in and its offset there, or None for ordinary memory."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    if not isinstance(base, mmap.mmap) or base.closed or isinstance(base, _Anonymous):
        return None
    start = np.frombuffer(base, np.uint8).ctypes.data
    return base, int(array.ctypes.data) - start


def _span(array: Array) -> tuple[mmap.mmap, int, int] | None:
    """(mapping, page-aligned start, length) of the pages under a contiguous mapped array."""
    found = _mapping(array)
    if found is None or array.size == 0 or not (array.flags.c_contiguous or
                                                array.flags.f_contiguous):
        return None
    mapping, offset = found
    start = offset - offset % _PAGE
    end = min(offset + array.nbytes, len(mapping))
    return mapping, start, end - start


def release(array: Array) -> bool:
    """Drop the resident pages of a memory-mapped `array` (they are read again if touched).

    A backend calls this after it has copied a weight into a layout of its own, so the file's
    copy stops counting in the process's resident memory. Arrays in ordinary memory are left
    alone. Returns whether pages were dropped.
    """
    span = _span(array)
    if span is None or not hasattr(mmap, "MADV_DONTNEED"):
        return False
    mapping, start, length = span
    mapping.madvise(mmap.MADV_DONTNEED, start, length)
    return True


def prefetch(array: Array) -> bool:
    """Ask the kernel to read a memory-mapped `array` from disk now (``MADV_WILLNEED``).

    Weights computed on in place are prefetched at load, so the first token does not wait for
    the disk. Returns whether the array is mapped.
    """
    span = _span(array)
    if span is None or not hasattr(mmap, "MADV_WILLNEED"):
        return False
    mapping, start, length = span
    mapping.madvise(mmap.MADV_WILLNEED, start, length)
    return True


def seal(array: Array) -> Array:
    """A read-only view of a fresh contiguous `array` that no handle can write again.

    The view's base is a read-only memoryview, so `immutable` holds and backends may keep the
    array without copying it. The caller gives `array` up. The view is `ALIGNMENT`-aligned
    (copied there when `array` is not; `aligned_empty` makes arrays that need no copy).
    """
    flat = aligned(array).reshape(-1).view(np.uint8)
    frozen = np.frombuffer(memoryview(flat.data).toreadonly(), np.uint8)
    out: Array = frozen.view(array.dtype).reshape(array.shape)
    return out


def immutable(array: Array) -> bool:
    """Whether no one can write `array`.

    True when it is read-only down to a read-only buffer (a file mapped read-only, `seal`,
    bytes). A read-only array that owns its memory does not count: its owner may make it writable.
    """
    base: Any = array
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if isinstance(base, mmap.mmap):
        return not base.closed and _read_only_mapping(base)
    if isinstance(base, memoryview):
        return base.readonly
    return isinstance(base, bytes)


def _read_only_mapping(mapping: mmap.mmap) -> bool:
    with memoryview(mapping) as view:
        return view.readonly
