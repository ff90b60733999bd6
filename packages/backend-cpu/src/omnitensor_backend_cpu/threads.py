"""``OMNITENSOR_NUM_THREADS``: one thread count for numba's pool and for BLAS.

Default: all cores. Applied when the backend is created (and by `apply` on demand); numba's
pool cannot grow past the size it started with, so larger requests are clamped. numba itself is
imported only when a plan first needs a compiled kernel (small programs run numpy kernels and
never pay its import and start-up), so its count is applied then (`numba_loaded`).
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from typing import Any, Final

from omnitensor.errors import OmnitensorError

__all__ = ["ENV", "apply", "apply_from_env", "blas_for", "count", "numba_loaded", "requested",
           "wide_products"]

logger = logging.getLogger(__name__)

ENV: Final = "OMNITENSOR_NUM_THREADS"

_BLAS_LIMITER: list[Any] = []

#: The count numba gets when `_compat` first imports it.
_PENDING: list[int] = []

#: The thread count in force (`count`).
_COUNT: list[int] = [1]

#: Floating-point operations from which a BLAS call may use every thread. Below, one: a split
#: product waits for the slowest thread, and on a busy machine that is a descheduled one (a
#: 300 x 64 x 64 product took 7 ms on two threads of a loaded 2-core machine, 20 us on one).
#: From 5e6 a char-gpt training step (products of 576 x 128 x 128, 19 MFLOP) took 37 ms
#: against 45 ms from 5e7 (alternated medians; 1e7 gave 39.5 ms, 2e6 40 ms).
BLAS_PARALLEL_FLOPS: Final = 5e6

#: [the configured BLAS thread count, the count set now, the BLAS libraries' setters]
_BLAS: list[Any] = [1, 1, None]


def requested() -> int:
    """The thread count the environment asks for (all cores when unset)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return os.cpu_count() or 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise OmnitensorError(
            f"cpu: {ENV} must be a positive integer (got {raw!r}, expected e.g. "
            f"{ENV}={os.cpu_count() or 1})"
        )
    return n


def apply(n: int) -> int:
    """Use `n` threads in numba and BLAS; returns the count numba uses (or will use)."""
    n = max(1, n)
    if "numba" in sys.modules:  # already paid for: apply now
        from . import _compat

        n = min(n, _compat.max_threads())
        _compat.set_num_threads(n)
    else:
        n = min(n, _pool_size())
        _PENDING[:] = [n]
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: without it BLAS keeps its own default
        logger.info("cpu: threadpoolctl is not installed; BLAS threads left as they are")
    else:
        _BLAS_LIMITER.clear()
        _BLAS_LIMITER.append(threadpool_limits(limits=n, user_api="blas"))
        _BLAS[0] = _BLAS[1] = n
    _COUNT[0] = n
    return n


def count() -> int:
    """The thread count in force (the last `apply`)."""
    return _COUNT[0]


@functools.cache
def wide_products() -> bool:
    """Whether float32 products run on `gemm`'s tiles rather than numpy's BLAS.

    Where the CPU has 16-float vectors (x86 AVX-512) and numpy's BLAS is OpenBLAS, whatever
    kernels OpenBLAS picked; any other BLAS, or an unknown one, is trusted. BLAS then runs on
    one thread only (`blas_for`). Why not OpenBLAS's own AVX-512 kernels: alone they match the
    tiles (2 threads, 512 x 896 x 4864: 389 against 374 GFLOP/s; 576 x 128 x 128, a char-gpt
    product: 297 against 354), but beside numba's OpenMP workers, which run everything else,
    each pool spins while the other works: a char-gpt training step took 20.4 ms with
    OpenBLAS's SkylakeX kernels and 12.5 ms on the tiles (Xeon with AVX-512, 2 cores).
    """
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    from llvmlite import binding

    features: Any = binding.get_host_cpu_features()
    if not features.get("avx512f", False):
        return False
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return False
    blas = [info for info in threadpool_info() if info.get("user_api") == "blas"]
    return bool(blas) and all(info.get("internal_api") == "openblas" for info in blas)


def blas_for(flops: float) -> None:
    """Set BLAS to the thread count a product of `flops` operations pays for (one if small).

    Always one where `wide_products`: OpenBLAS's workers spin for some 70 ms after a call
    (2^28 cycles, its default), and the numba workers that run everything else then share
    the cores with them (a 128-token prefill took 1.04 s against 0.27 s without them).
    """
    want = _BLAS[0] if flops >= BLAS_PARALLEL_FLOPS and not wide_products() else 1
    if want == _BLAS[1]:
        return
    setters = _BLAS[2]
    if setters is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            setters = []
        else:
            setters = [c.set_num_threads for c in ThreadpoolController().lib_controllers
                       if c.user_api == "blas"]
        _BLAS[2] = setters
    for setter in setters:
        setter(want)
    _BLAS[1] = want


def _pool_size() -> int:
    raw = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else os.cpu_count() or 1


def numba_loaded(set_num_threads: Any) -> None:
    """Called by `_compat` right after it imports numba: apply the pending thread count."""
    if _PENDING:
        set_num_threads(_PENDING[0])


def apply_from_env() -> int:
    """`apply` the count from ``OMNITENSOR_NUM_THREADS``."""
    return apply(requested())
