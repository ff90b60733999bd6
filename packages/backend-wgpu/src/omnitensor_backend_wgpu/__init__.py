"""omnitensor's WebGPU backend: WGSL kernels through wgpu-py on Vulkan, Metal or D3D12.

Its entry point (``wgpu = omnitensor_backend_wgpu.plugin``) is all omnitensor reads at discovery;
`WgpuBackend` (which imports wgpu and creates the device) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["WgpuBackend"]

if TYPE_CHECKING:
    from .backend import WgpuBackend as WgpuBackend


def __getattr__(name: str) -> object:
    # NOTE: lazy, so that discovery (which imports `.plugin`, hence this package) stays cheap.
    if name == "WgpuBackend":
        from .backend import WgpuBackend

        return WgpuBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
