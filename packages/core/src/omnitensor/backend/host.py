"""Shared pieces of backends whose buffers are host numpy arrays (ref, cpu, third parties).

Buffer handling is the same for every such backend: uploads are read-only copies, downloads are
copies the caller owns, movement ops become numpy views where numpy makes them, and handed-out
results are read-only (DESIGN §4). Compiling and running stay each backend's own business.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from ..dtypes import DType
from ..ir.opdef import OpDef, OpView, Trait, all_ops
from ..ir.program import Instruction
from .contract import Backend
from .host_memory import (
    IN_PLACE_BYTES,
    SMALL_BYTES,
    aligned_empty,
    immutable,
    is_aligned,
    release,
    seal,
)
from .lowering import LoweringTable

__all__ = ["HostArrayBackend", "hand_out", "read_only", "reference_lowerings",
           "reference_op_table"]

Array = np.ndarray[Any, Any]


def reference_op_table() -> dict[str, frozenset[DType]]:
    """Every primitive op x every dtype its declaration allows (operand-specific dtypes included).

    Composites are left out: a backend claims a composite only through a lowering, so for a
    backend using this table `expand_composites` inlines every composite's decomposition.
    """
    ops: dict[str, frozenset[DType]] = {}
    for name, opdef in all_ops().items():
        if opdef.has(Trait.COMPOSITE):
            continue
        dtypes = set(opdef.dtypes)
        for spec in opdef.operands:
            dtypes.update(spec.dtypes or ())
        ops[name] = frozenset(dtypes)
    return ops


def _reference_kernel(ctx: Any, view: OpView) -> Any:
    """The op's numpy reference kernel (``kernel(*operand groups, **attrs)``)."""
    return view.opdef.reference


def reference_lowerings() -> LoweringTable:
    """A lowering table of every primitive's reference kernel, in `reference_op_table`'s dtypes.

    Host backends start from it and override entries with their own kernels; a lowering
    returns the numpy kernel to call with the instruction's operand groups and attributes.
    Composites have no entry, so they are expanded into primitives for such a backend.
    """
    table = LoweringTable()
    for name, dtypes in reference_op_table().items():
        table.register(name, dtypes=dtypes)(_reference_kernel)
    return table


def read_only(array: Array) -> Array:
    """`array`, marked read-only: handed-out buffers must never be written (DESIGN §4)."""
    array.flags.writeable = False
    return array


def hand_out(outputs: Sequence[Array], inputs: Sequence[Array],
             donated: Collection[int] = ()) -> list[Array]:
    """Run outputs made read-only; outputs that are inputs themselves are returned as they are.

    `donated` are the positions of inputs the run may have written in place: their outputs
    (a KV cache updated in place) are recognized by identity first.
    """
    # NOTE: a decode step returns ~25 outputs, nearly all of them donated caches written in
    # place, and has ~250 inputs: a donated output is recognized without reading its flags (a
    # flags object per array), and the others are looked for among the inputs by a scan that
    # allocates nothing (a set of every input's id cost ~40 us a step, cold after the weights);
    # a training step's ~150 new parameters and moments would scan the inputs 150 times
    # (0.4 ms a step): from a few such outputs, the set is cheaper
    kept = {id(inputs[i]) for i in donated}
    pending = [out for out in outputs if id(out) not in kept and out.flags.writeable]
    if len(pending) > _SCANS:
        known = set(map(id, inputs))
        for out in pending:
            if id(out) not in known:
                out.setflags(write=False)
    else:
        for out in pending:
            if id(out) not in map(id, inputs):
                out.setflags(write=False)
    return list(outputs)


#: Outputs to look for among the inputs from which `hand_out` builds a set of their ids.
_SCANS = 8


class HostArrayBackend(Backend):
    """A backend whose buffers are numpy arrays (strided, so views are free).

    Subclasses implement `capabilities`, `compile` and `run`; `reference_op_table` gives the
    table of a backend that runs every op (falling back to the reference kernels).
    """

    def supports(self, inst: Instruction) -> str | None:
        """None for every op in the capability table."""
        if inst.op in self.capabilities().ops:
            return None
        return f"{inst.op} is not a declared op"

    def upload(self, array: Array) -> Array:
        """A read-only copy of `array` (the caller may keep writing its own).

        An array nobody can write (`host_memory.immutable`: a weight viewed in its mapped file,
        or one `host_memory.seal` made) is kept as it is: a model's weights are not copied,
        unless a floating-point one does not start on a cache line (`host_memory.ALIGNMENT`;
        a GGUF tensor may start 32 bytes past one): the kernels stream those with whole-line
        loads, so such a weight is copied once, aligned, and its file pages dropped. A small
        floating-point weight in a mapped file (a norm's) is copied too: read in place at
        every step, it maps the file's pages around it (`host_memory.IN_PLACE_BYTES`).
        Copies are aligned too.
        """
        if immutable(array):
            if array.dtype.kind != "f":  # (quantized blocks: the backend repacks them)
                return array
            if array.nbytes < IN_PLACE_BYTES:  # (a norm's weight: see `IN_PLACE_BYTES`)
                own = aligned_empty(array.shape, array.dtype)
                np.copyto(own, array)
                return seal(own)
            if is_aligned(array):
                return array
            copy = seal(array)
            release(array)
            return copy
        if array.nbytes < SMALL_BYTES:  # (a step's token ids: alignment buys nothing there)
            return read_only(np.array(array, copy=True))
        copy = aligned_empty(array.shape, array.dtype, kept=False)  # (a step's inputs too)
        np.copyto(copy, array)
        return read_only(copy)

    def download(self, buffer: Any) -> Array:
        """A writable copy of `buffer` that the caller owns."""
        return np.array(buffer, copy=True)

    def view(self, buffer: Any, op: OpDef, attrs: Mapping[str, Any]) -> Any | None:
        """The op's reference kernel applied to `buffer`, when numpy made it a view (no copy)."""
        with np.errstate(all="ignore"):
            result = np.asarray(op.reference(buffer, **attrs))
        if result.size == 0 or np.shares_memory(result, buffer):
            return result
        return None
