"""The contract every backend implements (DESIGN §5): buffers, capabilities, compile, run.

Small on purpose: a backend uploads and downloads buffers, says what it supports, compiles a PTIR
`Function` into an executable and runs it. Views, weight preparation and fused kernels are
optional speed. Discovery and selection live in `registry`; hook specifications in `hookspecs`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..dtypes import DType
from ..errors import UnsupportedError
from ..ir.opdef import OpDef
from ..ir.program import Function, Instruction
from ..ir.types import TensorType, Type

__all__ = ["CONTRACT_VERSION", "Backend", "Capabilities", "Executable", "primary_dtype"]

#: Version of this contract. A plugin registered against another major version is listed as
#: unavailable with both versions named (see `registry`).
CONTRACT_VERSION = 1


def primary_dtype(inst: Instruction) -> DType:
    """The dtype that names an instruction in capability tables and conformance ids.

    The first dense operand's dtype, or the first result's dtype for ops without dense operands.
    """
    for value in inst.operands:
        if isinstance(value.type, TensorType):
            return value.type.dtype
    first = inst.results[0].type
    assert isinstance(first, TensorType)
    return first.dtype


@dataclass(frozen=True)
class Capabilities:
    """What a backend supports, declared up front.

    Attributes:
        ops: op name -> dtypes (as `primary_dtype` names them) the backend runs correctly.
            Ops absent here are unsupported.
        strided_inputs: buffers carry (shape, strides, offset) and kernels accept strided
            inputs, so views are free; otherwise the tensor layer inserts copies.
        loosened: dtype name -> tolerance factor (> 1) the backend asks the conformance suite to
            apply for that dtype; the report shows it.
        notes: free-form facts for `omnitensor backends` (device name, memory ...).
    """

    ops: Mapping[str, frozenset[DType]]
    strided_inputs: bool = False
    loosened: Mapping[str, float] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)

    def supports(self, op: str, dtype: DType) -> bool:
        """True when (`op`, `dtype`) is declared supported."""
        return dtype in self.ops.get(op, frozenset())


class Executable(abc.ABC):  # noqa: B024 (a marker base: backends define what it holds)
    """A compiled program, owned by the backend that made it. `Backend.run` executes it."""

    function: Function


class Backend(abc.ABC):
    """Base class of every backend.

    Subclasses set `name`, implement the abstract methods, and are created by the factory that
    their plugin registers (`hookspecs.omnitensor_register_backends`).
    """

    name: str = "?"

    # --- required ---------------------------------------------------------------------------

    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """The (op, dtype) table and buffer properties of this backend."""

    @abc.abstractmethod
    def upload(self, array: np.ndarray[Any, Any]) -> Any:
        """Copy a host array into a new backend buffer of the same shape and dtype."""

    @abc.abstractmethod
    def download(self, buffer: Any) -> np.ndarray[Any, Any]:
        """Copy a backend buffer to a host numpy array the caller owns."""

    @abc.abstractmethod
    def compile(self, function: Function) -> Executable:
        """Compile `function` into an executable.

        Called only after `check` accepted every instruction. The function is already
        optimized; the backend may transform its own copy further.
        """

    @abc.abstractmethod
    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Run `executable` on input buffers (in function-input order); return output buffers.

        Inputs whose index is in `donated` may be overwritten in place. Other input buffers, and
        any buffer handed out earlier, must never be written.
        """

    # --- optional ---------------------------------------------------------------------------

    def repacks(self, type: Type) -> bool:
        """Whether a weight of `type` is held beside a copy in a layout of the backend's own.

        A host backend whose `omnitensor_prepare_weight` repacks a format keeps the uploaded
        bytes too (its reference kernels read them): bytes viewed in a mapped file cost nothing
        once their pages are released, but bytes made at load would stay resident twice, so
        `models.fusion` does not stack such weights. Default: False.
        """
        return False

    def supports(self, inst: Instruction) -> str | None:
        """None when the backend can run `inst`, else the reason it cannot.

        The default reads `capabilities()` by (op, `primary_dtype`); override for finer rules
        (shapes, attributes, secondary dtypes).
        """
        dtype = primary_dtype(inst)
        if self.capabilities().supports(inst.op, dtype):
            return None
        return f"{inst.op} on {dtype} is not supported by backend {self.name!r}"

    def check(self, function: Function) -> None:
        """Raise UnsupportedError for the first instruction this backend cannot run.

        Raises:
            UnsupportedError: naming the op, its dtype and the backend, before any work is done.
        """
        for inst in function.body:
            reason = self.supports(inst)
            if reason is not None:
                raise UnsupportedError(
                    f"{inst.op}: {reason}; choose another backend with OMNITENSOR_BACKEND or "
                    f"omnitensor.use_backend(...)",
                    op=inst.op,
                    dtype=primary_dtype(inst).name,
                    backend=self.name,
                )

    def view(self, buffer: Any, op: OpDef, attrs: Mapping[str, Any]) -> Any | None:
        """A zero-copy view of `buffer` implementing movement op `op`, or None when impossible.

        Only called for ops with `Trait.VIEW` on backends whose capabilities say
        `strided_inputs`. The default makes no views.
        """
        return None

    def storage(self, buffer: Any) -> Any:
        """The object that owns the memory `buffer` lives in (`buffer` itself when it owns it).

        Two buffers with the same storage may alias. The core uses this to keep donation safe:
        a donated buffer that does not own its memory, or whose memory another input of the
        same call also reads, is not offered for in-place writes, and when a donated buffer
        is written in place every live tensor viewing the same storage is invalidated. The
        default follows ``.base`` (numpy, CuPy); override when views are made differently.
        """
        root = buffer
        while (base := getattr(root, "base", None)) is not None:
            root = base
        return root

    def layout_key(self, buffer: Any) -> Any:
        """Hashable description of a buffer's layout beyond shape and dtype (strides, offset).

        Part of the plan-cache key. Backends whose compiled code does not depend on input layouts
        return None (the default).
        """
        return None

    def device_info(self) -> dict[str, str]:
        """Facts about the device for `omnitensor backends` (name, memory ...)."""
        return {}

    def compile_seconds(self) -> float:
        """Seconds this backend has spent so far compiling kernels it compiles on first use.

        A backend whose kernels compile inside `run` (the first run of an executable) counts
        that time here, and the time it spends loading such kernels from an on-disk cache
        (the cpu backend: both, as the time numba holds its compiler lock); callers subtract
        it from run times and report it as compile time (`omnitensor generate`'s "compile",
        `tensor.realize.stats.compile_seconds`). A backend that compiles everything in
        `compile` keeps the default, 0.0.
        """
        return 0.0

    def close(self) -> None:  # noqa: B027 (optional hook: most backends hold nothing to release)
        """Release device resources (called at interpreter exit for created backends)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
