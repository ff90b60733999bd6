"""`CudaBackend`: PTIR on an NVIDIA GPU through CuPy (memory pool, cuBLAS) and generated kernels.

`compile` lowers a function once (`lower`) and binds every step to a loaded kernel (RawModule,
cached by source) or to cupy.matmul: running is one loop over pre-bound launches, with no
per-op Python dispatch. Buffers (`CudaBuffer`) are CuPy arrays, possibly strided views
(zero-copy); bfloat16 lives in uint16 arrays because CuPy has no bfloat16 dtype.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, final

import numpy as np

from omnitensor.backend import Backend, Capabilities, Executable
from omnitensor.dtypes import DType, as_dtype, bfloat16
from omnitensor.ir import Function, Instruction, OpDef
from omnitensor.ir.types import TensorType
from omnitensor.ir.verify import verify

from ._compat import as_strided, device_facts, import_cupy, selected_device
from .kernels import MAX_RANK
from .lower import Lowered, Step, lower, row_major
from .table import LOWERINGS

__all__ = ["CudaBackend", "CudaBuffer", "CudaExecutable", "supports"]

logger = logging.getLogger(__name__)
Array = np.ndarray[Any, Any]


@final
class CudaBuffer:
    """A tensor on the device: a CuPy array (maybe a strided view) and its PTIR dtype."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: Any, dtype: DType) -> None:
        self.array = array
        self.dtype = dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape."""
        return tuple(self.array.shape)

    def __repr__(self) -> str:
        return f"<CudaBuffer {self.dtype.short}{list(self.shape)}>"


@final
class CudaExecutable(Executable):
    """A launch list bound to loaded kernels and uploaded parameter arrays.

    `plans` caches, per set of donated inputs, the launches to replay and the slots bound to
    input buffers (a donated KV cache is updated in place: its copy launch is dropped).
    """

    def __init__(self, function: Function, lowered: Lowered,
                 launches: list[Callable[[list[Any]], None]], constants: dict[int, Any]) -> None:
        self.function = function
        self.lowered = lowered
        self.launches = launches
        self.constants = constants
        self.plans: dict[frozenset[int], tuple[list[Callable[[list[Any]], None]],
                                               dict[int, int]]] = {}

    def plan(self, donated: frozenset[int]) -> tuple[list[Callable[[list[Any]], None]],
                                                     dict[int, int]]:
        """(launches, slot -> input bindings) when the inputs `donated` may be written."""
        found = self.plans.get(donated)
        if found is None:
            steps, bound = self.lowered.plan(donated)
            keep = {id(s) for s in steps}
            launches = [f for f, s in zip(self.launches, self.lowered.steps, strict=True)
                        if id(s) in keep]
            found = self.plans[donated] = (launches, bound)
        return found

    @property
    def kernel_count(self) -> int:
        """Launches per run."""
        return len(self.launches)


@final
class CudaBackend(Backend):
    """The CUDA backend (``cuda``): one device per process (``OMNITENSOR_CUDA_DEVICE``)."""

    name = "cuda"

    def __init__(self) -> None:
        self.cp = import_cupy()
        self.index = selected_device()
        self.cp.cuda.Device(self.index).use()
        self.facts = device_facts(self.cp, self.index)
        self._modules: dict[str, Any] = {}
        self._capabilities: Capabilities | None = None
        logger.info("cuda: using %s", self.facts["device"])

    # --- capabilities -----------------------------------------------------------------------

    def capabilities(self) -> Capabilities:
        """The ops and composites of the lowering table, in its dtypes; strided buffers."""
        if self._capabilities is None:
            self._capabilities = Capabilities(ops=dict(LOWERINGS.capabilities()),
                                              strided_inputs=True, notes=dict(self.facts))
        return self._capabilities

    def supports(self, inst: Instruction) -> str | None:
        """None when the table lowers the instruction and every tensor has rank <= 8."""
        return supports(inst)

    # --- buffers ----------------------------------------------------------------------------

    def upload(self, array: Array) -> CudaBuffer:
        """Copy `array` to the device (through CuPy's memory pool)."""
        host = np.ascontiguousarray(array)
        dtype = as_dtype(host.dtype)
        if dtype == bfloat16:
            host = host.view(np.uint16)
        return CudaBuffer(self.cp.asarray(host), dtype)

    def download(self, buffer: Any) -> Array:
        """Copy a device buffer to a new host array."""
        if not isinstance(buffer, CudaBuffer):
            raise TypeError(f"cuda: cannot download {type(buffer).__name__} (expected "
                            f"CudaBuffer)")
        host = self.cp.asnumpy(buffer.array)
        return host.view(bfloat16.np) if buffer.dtype == bfloat16 else np.array(host)

    def layout_key(self, buffer: Any) -> Any:
        """Element strides: compiled launch lists depend on input layouts."""
        return _element_strides(buffer)

    def view(self, buffer: Any, op: OpDef, attrs: Mapping[str, Any]) -> Any | None:
        """Zero-copy views for transpose/broadcast/slice/reverse/compatible reshape."""
        from omnitensor.backend.codegen import View, view_op

        if not isinstance(buffer, CudaBuffer) or op.name not in (
                "transpose", "broadcast_in_dim", "slice", "reverse", "reshape"):
            return None
        x = View(0, buffer.dtype, buffer.shape, _element_strides(buffer), 0)
        shape = tuple(op.infer(TensorType(buffer.shape, buffer.dtype), **attrs).shape)
        made = view_op(op.name, x, dict(attrs), shape)
        if made is None:
            return None
        return CudaBuffer(as_strided(self.cp, buffer.array, made.shape, made.strides,
                                     made.offset), buffer.dtype)

    # --- programs ---------------------------------------------------------------------------

    def _function(self, step: Step) -> Any:
        module = self._modules.get(step.source)
        if module is None:
            module = self.cp.RawModule(code=step.source, options=("--std=c++14",))
            self._modules[step.source] = module
        return module.get_function(step.name)

    def compile(self, function: Function) -> CudaExecutable:
        """Lower `function`, load its kernels, upload parameters and constants once."""
        verify(function)
        self.check(function)
        lowered = lower(function)
        constants = {}
        for slot, value in lowered.constants.items():
            host = value.view(np.uint16) if value.dtype == bfloat16.np else value
            constants[slot] = self.cp.asarray(np.ascontiguousarray(host).reshape(-1))
        launches = [self._bind(step, lowered) for step in lowered.steps]
        return CudaExecutable(function, lowered, launches, constants)

    def _bind(self, step: Step, lowered: Lowered) -> Callable[[list[Any]], None]:
        cp = self.cp
        if step.kind == "matmul":
            bs, m, n, k, loff, lsb, lsm, lsk, roff, rsb, rsk, rsn = step.params[:12]
            a_slot, b_slot, o_slot = step.slots

            def matmul(slots: list[Any]) -> None:
                a = as_strided(cp, slots[a_slot], (bs, m, k), (lsb, lsm, lsk), loff)
                b = as_strided(cp, slots[b_slot], (bs, k, n), (rsb, rsk, rsn), roff)
                cp.matmul(a, b, out=slots[o_slot].reshape(bs, m, n))

            return matmul
        kernel = self._function(step)
        params = cp.asarray(np.asarray(step.params or [0], dtype=np.int64))
        grid, block = step.grid()
        count = np.int64(step.n)
        bound = step.slots

        def launch(slots: list[Any]) -> None:
            kernel(grid, block, (count, params, *[slots[s] for s in bound]))

        return launch

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Allocate the program's buffers from the pool and replay its launch list."""
        if not isinstance(executable, CudaExecutable):
            raise TypeError(f"cuda: cannot run {type(executable).__name__} (expected "
                            f"CudaExecutable)")
        low = executable.lowered
        launches, bound = executable.plan(frozenset(donated))
        slots: list[Any] = []
        for k, (shape, dtype) in enumerate(low.slot_shapes):
            if k in bound:
                slots.append(slots[bound[k]])
            elif k < low.n_inputs:
                buffer = inputs[k]
                if _element_strides(buffer) != row_major(buffer.shape):
                    buffer = CudaBuffer(self.cp.ascontiguousarray(buffer.array), buffer.dtype)
                slots.append(buffer.array)
            elif k in executable.constants:
                slots.append(executable.constants[k])
            else:
                np_dtype = np.uint16 if dtype == bfloat16 else dtype.np
                slots.append(self.cp.empty(shape, dtype=np_dtype))
        for launch in launches:
            launch(slots)
        return [CudaBuffer(as_strided(self.cp, slots[v.slot], v.shape, v.strides, v.offset),
                           v.dtype) for v in low.outputs]

    def device_info(self) -> dict[str, str]:
        """Device name, memory, compute capability and CuPy version."""
        return dict(self.facts)

    def close(self) -> None:
        """Return the pool's free blocks to the driver."""
        self.cp.get_default_memory_pool().free_all_blocks()


def supports(inst: Instruction) -> str | None:
    """Why the CUDA lowering cannot run `inst` (no lowering, a dtype, rank > 8), or None."""
    reason = LOWERINGS.supports(inst)
    if reason is not None:
        return reason if "backend" in reason else f"{reason} in backend 'cuda'"
    if inst.op == "custom_call":
        for inner in inst.attrs["decomposition"].body:
            reason = supports(inner)
            if reason is not None:
                return reason
    for value in (*inst.operands, *inst.results):
        if isinstance(value.type, TensorType) and len(value.type.shape) > MAX_RANK:
            return f"{inst.op}: rank {len(value.type.shape)} exceeds {MAX_RANK}"
    return None


def _element_strides(buffer: Any) -> tuple[int, ...]:
    array = buffer.array if isinstance(buffer, CudaBuffer) else buffer
    item = array.dtype.itemsize
    return tuple(int(s) // item for s in array.strides)


