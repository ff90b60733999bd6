"""omnitensor's CPU backend: PTIR compiled to a plan of fused numba kernels, BLAS and numpy.

Its entry point (``cpu = omnitensor_backend_cpu.plugin``) is all omnitensor reads at discovery;
`CpuBackend` (and numba with it) is imported only when the backend is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["CpuBackend"]

if TYPE_CHECKING:
    from .backend import CpuBackend as CpuBackend


def __getattr__(name: str) -> object:
    # NOTE: lazy, so that discovery (which imports `.plugin`, hence this package) stays cheap.
    if name == "CpuBackend":
        from .backend import CpuBackend

        return CpuBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
