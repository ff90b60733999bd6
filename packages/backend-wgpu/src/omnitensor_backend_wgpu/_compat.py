"""The one adapter around wgpu-py (untyped): adapters, the device, buffers, pipelines, dispatch.

Everything else in this package is typed against the small surface here; wgpu objects travel as
`Any`. Nothing here knows about PTIR.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["AdapterInfo", "Device", "find_adapter", "import_wgpu"]

_ADAPTER_ENV = "OMNITENSOR_WGPU_ADAPTER"
# NOTE: the native APIs first; wgpu's OpenGL path lacks shader-f16 and is a last resort.
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2}


def import_wgpu() -> Any:
    """Import wgpu (raises ImportError with wgpu's own message when it is missing)."""
    import wgpu  # noqa: PLC0415 (lazy on purpose: discovery must not import it)

    return wgpu


@dataclass(frozen=True)
class AdapterInfo:
    """What `omnitensor backends` shows about the chosen adapter."""

    device: str
    backend: str
    adapter_type: str
    shader_f16: bool

    @property
    def software(self) -> bool:
        """True for CPU rasterizers (lavapipe, llvmpipe, WARP, SwiftShader)."""
        return self.adapter_type.upper() == "CPU" or "llvmpipe" in self.device.lower()


def _info(adapter: Any) -> AdapterInfo:
    info = adapter.info
    return AdapterInfo(
        device=str(info.get("device", "?")),
        backend=str(info.get("backend_type", "?")),
        adapter_type=str(info.get("adapter_type", "?")),
        shader_f16="shader-f16" in adapter.features,
    )


def find_adapter() -> tuple[Any, AdapterInfo]:
    """The best adapter and its info.

    ``OMNITENSOR_WGPU_ADAPTER`` (a substring of the device or API name) chooses when set; else
    hardware before software, native APIs before OpenGL, shader-f16 first.

    Raises:
        RuntimeError: when no adapter exists (or none matches the environment variable).
    """
    wgpu = import_wgpu()
    adapters = [(a, _info(a)) for a in wgpu.gpu.enumerate_adapters_sync()]
    wanted = os.environ.get(_ADAPTER_ENV, "").strip().lower()
    if wanted:
        adapters = [(a, i) for a, i in adapters
                    if wanted in i.device.lower() or wanted in i.backend.lower()]
        if not adapters:
            raise RuntimeError(f"no wgpu adapter matches {_ADAPTER_ENV}={wanted!r}")
    if not adapters:
        raise RuntimeError(
            "no wgpu adapter (no Vulkan/Metal/D3D12 driver found); on Linux without a GPU "
            "install mesa-vulkan-drivers and set VK_ICD_FILENAMES to the lvp_icd JSON"
        )
    adapters.sort(key=lambda pair: (pair[1].software, _BACKEND_RANK.get(pair[1].backend, 1),
                                    not pair[1].shader_f16))
    return adapters[0]


class Device:
    """One wgpu device, its limits, and a pipeline cache keyed by (source hash, entry point)."""

    def __init__(self, adapter: Any, info: AdapterInfo) -> None:
        self._wgpu = import_wgpu()
        limits = adapter.limits
        wanted = {
            "max-storage-buffers-per-shader-stage":
                limits["max-storage-buffers-per-shader-stage"],
            "max-storage-buffer-binding-size": limits["max-storage-buffer-binding-size"],
            "max-buffer-size": limits["max-buffer-size"],
            "max-compute-workgroup-storage-size": limits["max-compute-workgroup-storage-size"],
        }
        features = ["shader-f16"] if info.shader_f16 else []
        self.device = adapter.request_device_sync(required_features=features,
                                                  required_limits=wanted)
        self.info = info
        self.max_storage_buffers = int(wanted["max-storage-buffers-per-shader-stage"])
        self.max_binding_size = int(wanted["max-storage-buffer-binding-size"])
        self.max_workgroups = int(limits["max-compute-workgroups-per-dimension"])
        self._pipelines: dict[tuple[str, str], Any] = {}
        self.pipeline_hits = 0
        self.pipeline_misses = 0
        self.submits = 0
        self.dispatches = 0
        usage = self._wgpu.BufferUsage
        self._storage_usage = usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
        self._uniform_usage = usage.UNIFORM | usage.COPY_DST

    # --- buffers --------------------------------------------------------------------------------

    def storage(self, nbytes: int) -> Any:
        """A new storage buffer of `nbytes` (a multiple of 4, at least 4)."""
        return self.device.create_buffer(size=nbytes, usage=self._storage_usage)

    def uniform(self, data: bytes) -> Any:
        """A uniform buffer holding `data` (padded to 16 bytes)."""
        padded = data + b"\0" * (-len(data) % 16 or (16 if not data else 0))
        return self.device.create_buffer_with_data(data=padded, usage=self._uniform_usage)

    def write(self, buffer: Any, data: bytes) -> None:
        """Queue a host-to-device copy into `buffer` at offset 0."""
        if data:
            self.device.queue.write_buffer(buffer, 0, data)

    def read(self, buffer: Any, nbytes: int) -> bytes:
        """Copy the first `nbytes` of `buffer` to the host (waits for queued work)."""
        if nbytes == 0:
            return b""
        aligned = nbytes + (-nbytes % 4)
        return bytes(self.device.queue.read_buffer(buffer, 0, aligned))[:nbytes]

    # --- pipelines ------------------------------------------------------------------------------

    def pipeline(self, source: str, entry_point: str = "main") -> Any:
        """The compute pipeline of `source`, built once per (source hash, entry point)."""
        key = (hashlib.sha256(source.encode()).hexdigest(), entry_point)
        found = self._pipelines.get(key)
        if found is not None:
            self.pipeline_hits += 1
            return found
        self.pipeline_misses += 1
        module = self.device.create_shader_module(code=source)
        pipeline = self.device.create_compute_pipeline(
            layout="auto", compute={"module": module, "entry_point": entry_point})
        self._pipelines[key] = pipeline
        return pipeline

    @property
    def pipeline_count(self) -> int:
        """Distinct pipelines built so far."""
        return len(self._pipelines)

    def bind_group(self, pipeline: Any, buffers: Sequence[Any]) -> Any:
        """A bind group over `buffers` at bindings 0, 1, ... of group 0."""
        entries = [{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(buffers)]
        return self.device.create_bind_group(layout=pipeline.get_bind_group_layout(0),
                                             entries=entries)

    def submit(self, launches: Sequence[tuple[Any, Any, tuple[int, int, int]]]) -> None:
        """Record every (pipeline, bind group, (x, y, z) workgroups) in one encoder; submit once."""
        if not launches:
            return
        encoder = self.device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        for pipeline, group, (x, y, z) in launches:
            compute.set_pipeline(pipeline)
            compute.set_bind_group(0, group)
            compute.dispatch_workgroups(x, y, z)
            self.dispatches += 1
        compute.end()
        self.device.queue.submit([encoder.finish()])
        self.submits += 1

    def destroy(self) -> None:
        """Release the device."""
        self._pipelines.clear()
        self.device.destroy()
