"""A persistent pool of worker threads that run serial numba kernels on slices of the work.

numba's ``parallel=True`` compiles a second, parallel version of every kernel (one to two
seconds each on a cold cache, most of a training step's first-run time) and forks and joins its
own pool per call. Every kernel here is compiled once, serially, with ``nogil=True``; a large
call is split into contiguous ranges and the ranges run at the same time on these threads (the
caller runs the first range itself), so parallelism costs no compile time. Work too small to
pay for a hand-off (`MIN_SPLIT`) runs on the calling thread alone.

The exception is the decode path: a matrix-vector product of a few hundred microseconds,
issued some 170 times per token, where a hand-off through this pool (a Python future and a
wake-up, 50-150 us) costs more than the split saves. Those few kernels (`intdot`, `quant.gemv`,
`half`) also have a ``parallel=True`` twin whose ``prange`` over `parts` ranges runs on
numba's OpenMP workers, which spin between regions: a 896 x 896 int8 product takes 28 us on
two threads against 50 us on one, where this pool took 190 us.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

from . import threads

__all__ = ["MIN_SPLIT", "parallel_for", "parts", "worker_ranges"]

#: Units of work (elements, or the caller's own measure) under which a call is not split.
MIN_SPLIT: Final = 1 << 17

#: `MIN_SPLIT` for numba's OpenMP workers (`worker_ranges`), which spin between regions: a
#: hand-off there costs a few microseconds, not this pool's ~100.
MIN_WORKER_SPLIT: Final = 1 << 14

_POOL: list[ThreadPoolExecutor] = []
_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    with _LOCK:
        if not _POOL or _POOL[0]._max_workers < workers:
            _POOL[:] = [ThreadPoolExecutor(max_workers=workers,
                                           thread_name_prefix="omnitensor-cpu")]
        return _POOL[0]


def parts(n: int, work: int | None = None, grain: int = 1, least: int | None = None) -> int:
    """How many ranges `parallel_for` splits ``range(n)`` into (1: run on the caller).

    `least`: the fewest units of work that split (default `MIN_SPLIT`).
    """
    count = min(threads.count(), max(1, n // max(grain, 1)))
    least = MIN_SPLIT if least is None else least
    return 1 if count <= 1 or (n if work is None else work) < least else count


def worker_ranges(n: int, work: int | None = None, grain: int = 1) -> tuple[int, int] | None:
    """``(parts, step)`` where a call splits on numba's OpenMP workers instead of this pool.

    Where those workers run the products (`threads.wide_products`: `gemm`, attention), they
    spin for a while after every parallel region, and this pool's threads then share the
    cores with them (a training step's AdamW update of a (512, 128) weight ran no faster on
    two of them than on one). There a kernel with a ``prange`` twin runs ``parts`` ranges of
    ``step`` iterations (a multiple of `grain`) on the workers; None where the call runs on
    one thread, or on this pool (`parallel_for`).
    """
    if not threads.wide_products():
        return None
    count = parts(n, work, grain, MIN_WORKER_SPLIT)
    if count <= 1:
        return None
    step = -(-n // count)
    return count, -(-step // grain) * grain


def parallel_for(n: int, body: Callable[[int, int], None], work: int | None = None,
                 grain: int = 1) -> None:
    """Run ``body(lo, hi)`` over ``range(n)`` split into one range per thread.

    Args:
        n: the iteration count (rows, elements, tasks).
        body: runs the kernel on ``[lo, hi)`` (it must release the GIL to gain anything).
        work: the call's size in `MIN_SPLIT` units (default `n`); under `MIN_SPLIT`, or with
            one thread, `body(0, n)` runs on the calling thread.
        grain: range boundaries are multiples of this (e.g. a vector width).
    """
    count = parts(n, work, grain)
    if count <= 1:
        body(0, n)
        return
    step = -(-n // count)
    step = -(-step // grain) * grain
    bounds = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
    pool = _pool(len(bounds) - 1)
    futures: list[Future[None]] = [pool.submit(body, lo, hi) for lo, hi in bounds[1:]]
    body(*bounds[0])
    for future in futures:
        future.result()
