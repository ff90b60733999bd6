"""omnitensor's CUDA backend: CuPy buffers, cuBLAS products and generated CUDA C kernels.

Its entry point (``cuda = omnitensor_backend_cuda.plugin``) is all omnitensor reads at
discovery; `CudaBackend` (which imports CuPy) is imported only when the backend is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["CudaBackend"]

if TYPE_CHECKING:
    from .backend import CudaBackend as CudaBackend


def __getattr__(name: str) -> object:
    # NOTE: lazy, so that discovery (which imports `.plugin`, hence this package) stays cheap.
    if name == "CudaBackend":
        from .backend import CudaBackend

        return CudaBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
