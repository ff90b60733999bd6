"""``OMNITENSOR_NUM_THREADS``: one thread count for numba's pool and for BLAS.

Default: all cores. Applied when the backend is created (and by `apply` on demand); numba's
pool cannot grow past the size it started with, so larger requests are clamped.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Final

from omnitensor.errors import OmnitensorError

from . import _compat

__all__ = ["ENV", "apply", "apply_from_env", "requested"]

logger = logging.getLogger(__name__)

ENV: Final = "OMNITENSOR_NUM_THREADS"

_BLAS_LIMITER: list[Any] = []


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
    """Use `n` threads in numba and BLAS; returns the count numba actually uses."""
    n = max(1, min(n, _compat.max_threads()))
    _compat.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # optional: without it BLAS keeps its own default
        logger.info("cpu: threadpoolctl is not installed; BLAS threads left as they are")
    else:
        _BLAS_LIMITER.clear()
        _BLAS_LIMITER.append(threadpool_limits(limits=n, user_api="blas"))
    return n


def apply_from_env() -> int:
    """`apply` the count from ``OMNITENSOR_NUM_THREADS``."""
    return apply(requested())
