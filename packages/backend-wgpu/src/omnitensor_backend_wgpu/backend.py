"""`WgpuBackend`: PTIR on any WebGPU adapter (Vulkan, Metal, D3D12) through wgpu-py and WGSL.

Buffers live on the device (`WgpuBuffer`); a program run records every kernel in one command
encoder and submits once; host reads happen only in `download`. Supported (op, dtype) pairs are
declared in `capabilities`; anything else raises `UnsupportedError` before any work (no silent
CPU fallback).
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Sequence
from typing import Any, final

import numpy as np

from omnitensor.backend import Backend, Capabilities, Executable
from omnitensor.dtypes import DType, bool_, float16, float32, int32, uint32
from omnitensor.errors import UnsupportedError
from omnitensor.ir import Function, Instruction
from omnitensor.ir.types import TensorType
from omnitensor.ir.verify import verify

from ._compat import AdapterInfo, Device, find_adapter
from .kernels import MAX_RANK
from .lower import Lowered, lower, pack_params, storage_nbytes
from .table import LOWERINGS

__all__ = ["WgpuBackend", "WgpuBuffer", "WgpuExecutable"]

logger = logging.getLogger(__name__)
Array = np.ndarray[Any, Any]

class _Pool:
    """Device buffers by power-of-two size class, reused after their owners are gone."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.free: dict[int, list[Any]] = {}
        self.hits = 0
        self.misses = 0

    def take(self, nbytes: int) -> tuple[Any, int]:
        size = max(256, 1 << (max(nbytes, 1) - 1).bit_length())
        if size > self.device.max_binding_size:
            size = nbytes + (-nbytes % 4)
        stack = self.free.get(size)
        if stack:
            self.hits += 1
            return stack.pop(), size
        self.misses += 1
        return self.device.storage(size), size

    def give(self, size: int, buffer: Any) -> None:
        self.free.setdefault(size, []).append(buffer)


@final
class _Storage:
    """One pooled device buffer; returns to the pool when the last reference goes."""

    __slots__ = ("__weakref__", "buffer", "size")

    def __init__(self, pool: _Pool, nbytes: int) -> None:
        self.buffer, self.size = pool.take(nbytes)
        weakref.finalize(self, pool.give, self.size, self.buffer)


@final
class WgpuBuffer:
    """A dense row-major tensor on the device (bool as u32 0/1, float16 as f16)."""

    __slots__ = ("dtype", "shape", "storage")

    def __init__(self, storage: _Storage, shape: tuple[int, ...], dtype: DType) -> None:
        self.storage = storage
        self.shape = shape
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"<WgpuBuffer {self.dtype.short}{list(self.shape)}>"


@final
class WgpuExecutable(Executable):
    """A lowered function: pipelines, parameter blocks and constants, ready to launch."""

    def __init__(self, function: Function, lowered: Lowered, pipelines: list[Any],
                 uniforms: list[Any], constants: dict[int, _Storage]) -> None:
        self.function = function
        self.lowered = lowered
        self.pipelines = pipelines
        self.uniforms = uniforms
        self.constants = constants

    @property
    def kernel_count(self) -> int:
        """Kernels launched per run."""
        return len(self.lowered.steps)


@final
class WgpuBackend(Backend):
    """The WebGPU backend (``wgpu``): one device per process, WGSL kernels, fused chains."""

    name = "wgpu"

    def __init__(self, adapter: Any = None, info: AdapterInfo | None = None) -> None:
        if adapter is None or info is None:
            adapter, info = find_adapter()
        self.device = Device(adapter, info)
        self.pool = _Pool(self.device)
        self._capabilities: Capabilities | None = None
        logger.info("wgpu: using %s (%s, %s)", info.device, info.backend, info.adapter_type)

    # --- capabilities ---------------------------------------------------------------------------

    @property
    def dtypes(self) -> tuple[DType, ...]:
        """The dtypes buffers of this device may hold."""
        base = (float32, int32, uint32, bool_)
        return base + ((float16,) if self.device.info.shader_f16 else ())

    def capabilities(self) -> Capabilities:
        """The lowering table's (op, dtype) pairs the adapter can hold."""
        if self._capabilities is None:
            native = set(self.dtypes)
            ops = {name: frozenset(dtypes & native)
                   for name, dtypes in LOWERINGS.capabilities().items()}
            info = self.device.info
            self._capabilities = Capabilities(
                ops=ops, strided_inputs=False,
                notes={"device": info.device, "api": info.backend, "type": info.adapter_type,
                       "shader-f16": str(info.shader_f16)})
        return self._capabilities

    def supports(self, inst: Instruction) -> str | None:
        """None when the table lowers it, every dtype is native, ranks <= 8, sizes fit."""
        reason = LOWERINGS.supports(inst)
        if reason is not None:
            return reason if "backend" in reason else f"{reason} in backend 'wgpu'"
        if inst.op == "custom_call":
            for inner in inst.attrs["decomposition"].body:
                reason = self.supports(inner)
                if reason is not None:
                    return reason
            return None
        native = set(self.dtypes)
        for value in (*inst.operands, *inst.results):
            t = value.type
            if not isinstance(t, TensorType):
                return f"{inst.op} on quantized operands is not supported by backend 'wgpu'"
            if t.dtype not in native:
                return f"{inst.op} on {t.dtype} is not supported by backend 'wgpu'"
            if len(t.shape) > MAX_RANK:
                return f"{inst.op}: rank {len(t.shape)} exceeds {MAX_RANK} on backend 'wgpu'"
            if storage_nbytes(t.shape, t.dtype) > self.device.max_binding_size:
                return (f"{inst.op}: a {t} buffer exceeds the adapter's storage binding limit "
                        f"({self.device.max_binding_size} bytes)")
        return None

    # --- buffers --------------------------------------------------------------------------------

    def _host(self, array: Array, dtype: DType) -> bytes:
        if dtype == bool_:
            array = array.astype(np.uint32)
        data = np.ascontiguousarray(array).tobytes()
        return data + b"\0" * (-len(data) % 4)  # copies must be 4-byte aligned

    def upload(self, array: Array) -> WgpuBuffer:
        """Copy `array` to a new device buffer.

        Raises:
            UnsupportedError: for dtypes the device cannot hold, or arrays beyond the adapter's
                storage binding limit.
        """
        from omnitensor.dtypes import as_dtype

        array = np.asarray(array)
        dtype = as_dtype(array.dtype)
        if dtype not in self.dtypes:
            raise UnsupportedError(
                f"upload: dtype {dtype} is not supported by backend 'wgpu' (expected one of "
                f"{', '.join(d.name for d in self.dtypes)}); convert first or use another "
                f"backend", dtype=dtype.name, backend=self.name)
        nbytes = storage_nbytes(array.shape, dtype)
        if nbytes > self.device.max_binding_size:
            raise UnsupportedError(
                f"upload: {nbytes} bytes exceed the adapter's storage binding limit (got "
                f"shape {array.shape}, expected at most {self.device.max_binding_size} bytes); "
                f"split the tensor", dtype=dtype.name, backend=self.name)
        storage = _Storage(self.pool, nbytes)
        self.device.write(storage.buffer, self._host(array, dtype))
        return WgpuBuffer(storage, tuple(array.shape), dtype)

    def download(self, buffer: Any) -> Array:
        """Copy a device buffer to a new host array (waits for the work that writes it)."""
        if not isinstance(buffer, WgpuBuffer):
            raise TypeError(f"wgpu: cannot download {type(buffer).__name__} (expected "
                            f"WgpuBuffer)")
        dtype = buffer.dtype
        item = 4 if dtype == bool_ else dtype.itemsize
        size = math.prod(buffer.shape)
        raw = self.device.read(buffer.storage.buffer, size * item)
        host = np.frombuffer(raw, np.uint32 if dtype == bool_ else dtype.np, count=size).copy()
        if dtype == bool_:
            host = host != 0
        return host.reshape(buffer.shape)

    # --- programs -------------------------------------------------------------------------------

    def compile(self, function: Function) -> WgpuExecutable:
        """Lower `function` to kernels; build (or reuse) their pipelines; upload constants."""
        verify(function)
        self.check(function)
        lowered = lower(function, max_storage=self.device.max_storage_buffers,
                        max_groups=self.device.max_workgroups)
        pipelines = [self.device.pipeline(step.source) for step in lowered.steps]
        uniforms = [self.device.uniform(pack_params(step.params)) for step in lowered.steps]
        constants = {}
        for slot, value in lowered.constants.items():
            storage = _Storage(self.pool, lowered.slot_bytes[slot])
            self.device.write(storage.buffer, self._host(value, _dtype_of(value)))
            constants[slot] = storage
        return WgpuExecutable(function, lowered, pipelines, uniforms, constants)

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Launch every kernel in one command encoder and one submit; return output buffers.

        `donated` is accepted; this backend never writes an input in place.
        """
        if not isinstance(executable, WgpuExecutable):
            raise TypeError(f"wgpu: cannot run {type(executable).__name__} (expected "
                            f"WgpuExecutable)")
        low = executable.lowered
        slots: list[_Storage | None] = [None] * len(low.slot_bytes)
        for i, buffer in enumerate(inputs):
            slots[i] = buffer.storage
        for slot, storage in executable.constants.items():
            slots[slot] = storage
        for slot in range(low.n_inputs, len(slots)):
            if slots[slot] is None:
                slots[slot] = _Storage(self.pool, low.slot_bytes[slot])
        launches = []
        for step, pipeline, uniform in zip(low.steps, executable.pipelines,
                                           executable.uniforms, strict=True):
            buffers = [uniform] + [slots[s].buffer for s in step.slots]  # type: ignore[union-attr]
            launches.append((pipeline, self.device.bind_group(pipeline, buffers), step.groups))
        self.device.submit(launches)
        outputs = []
        for view in low.outputs:
            owner = slots[view.slot]
            assert owner is not None
            outputs.append(WgpuBuffer(owner, view.shape, view.dtype))
        return outputs

    def stats(self) -> dict[str, int]:
        """Counters: pipelines built/reused, submits, dispatches, pool hits/misses."""
        d = self.device
        return {"pipelines": d.pipeline_count, "pipeline_hits": d.pipeline_hits,
                "pipeline_misses": d.pipeline_misses, "submits": d.submits,
                "dispatches": d.dispatches, "pool_hits": self.pool.hits,
                "pool_misses": self.pool.misses}

    def device_info(self) -> dict[str, str]:
        """Adapter name, API and type."""
        info = self.device.info
        return {"device": info.device, "api": info.backend, "type": info.adapter_type,
                "shader-f16": str(info.shader_f16)}

    def close(self) -> None:
        """Release the device."""
        self.device.destroy()


def _dtype_of(value: Array) -> DType:
    from omnitensor.dtypes import as_dtype

    return as_dtype(value.dtype)
