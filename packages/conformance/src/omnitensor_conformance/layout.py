"""Non-contiguous input buffers: each case's inputs handed to the backend in other layouts.

A backend that declares ``strided_inputs`` receives views of realized tensors as they are
(``x.T @ w``, ``x[::2]``, ``flip``, ``broadcast_to``), so its kernels must honour any strides.
Layout cases upload an input in another memory order and make the view with the backend's own
`Backend.view`, so the buffer the kernel reads is the one a user's view would give it:

- ``transposed``: every axis reversed in memory (column-major for matrices);
- ``reversed``: negative strides on every axis (``x[::-1, ::-1]``);
- ``stepped``: a stride-2 slice of a buffer twice as large, the gaps holding a sentinel;
- ``broadcast``: a zero stride on the first axis (every row is row 0, as ``broadcast_to``).

`layout_cases` gives every operand position of every op each layout, on samples of the op's
first dtype (stride handling does not depend on the dtype; the suite stays quick).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from omnitensor.backend.contract import Backend
from omnitensor.ir.opdef import get_op
from omnitensor.ir.types import TensorType

from .case import Case, register_case_source

__all__ = ["LAYOUTS", "effective_values", "layout_buffer", "layout_cases"]

Array = np.ndarray[Any, Any]

LAYOUTS = ("transposed", "reversed", "stepped", "broadcast")


def applies(kind: str, shape: tuple[int, ...]) -> bool:
    """Whether layout `kind` changes anything for an input of `shape`."""
    if not shape or 0 in shape:
        return False
    if kind == "transposed":
        return sum(1 for n in shape if n > 1) >= 2
    if kind == "broadcast":
        return shape[0] > 1
    return True


def effective_values(array: Array, kind: str) -> Array:
    """The values an input holds in layout `kind` (a broadcast repeats row 0)."""
    if kind == "broadcast":
        return np.ascontiguousarray(np.broadcast_to(array[:1], array.shape))
    return array


def _sentinel(dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "b":
        return True
    if dtype.kind in "iu":
        return min(77, np.iinfo(dtype).max)
    return 7777.0


def layout_buffer(backend: Backend, array: Array, kind: str) -> Any | None:
    """`array` (already `effective_values`) as a backend buffer in layout `kind`.

    Returns None when the backend cannot make the view (it declares no strided inputs or its
    `view` declined).
    """
    if not kind:
        return backend.upload(array)
    if not backend.capabilities().strided_inputs:
        return None
    ndim = array.ndim
    if kind == "transposed":
        perm = tuple(reversed(range(ndim)))
        base = backend.upload(np.ascontiguousarray(array.transpose(perm)))
        return backend.view(base, get_op("transpose"), {"perm": perm})
    if kind == "reversed":
        axes = tuple(range(ndim))
        base = backend.upload(np.ascontiguousarray(np.flip(array, axes)))
        return backend.view(base, get_op("reverse"), {"axes": axes})
    if kind == "stepped":
        big = np.full(tuple(2 * n for n in array.shape), _sentinel(array.dtype), array.dtype)
        big[tuple(slice(0, None, 2) for _ in range(ndim))] = array
        base = backend.upload(big)
        return backend.view(base, get_op("slice"), {
            "start": (0,) * ndim, "limit": tuple(2 * n - 1 for n in array.shape),
            "stride": (2,) * ndim})
    if kind == "broadcast":
        base = backend.upload(np.ascontiguousarray(array[:1]))
        return backend.view(base, get_op("broadcast_in_dim"),
                            {"shape": array.shape, "dims": tuple(range(ndim))})
    raise ValueError(f"conformance: unknown layout {kind!r} (expected one of {LAYOUTS})")


def _eligible(case: Case) -> bool:
    return all(isinstance(a.type, TensorType) for a in case.args) and any(
        a.type.shape for a in case.args)


def _direct_inputs(case: Case) -> set[int]:
    """Positions of the inputs that the case's op reads directly."""
    fn = case.function()
    ids = {spec.value.id: i for i, spec in enumerate(fn.inputs)}
    return {ids[v.id] for inst in fn.body if inst.op == case.op for v in inst.operands
            if v.id in ids}


def layout_cases() -> Iterator[Case]:
    """For every op, each (operand position, layout) on one of its first-dtype samples."""
    from .generate import generic_cases, op_sample_cases

    by_op: dict[str, list[Case]] = defaultdict(list)
    for case in (*generic_cases(), *op_sample_cases()):
        first = get_op(case.op).dtypes[0].name
        if case.dtype == first and case.mode == "test" and _eligible(case):
            by_op[case.op].append(case)
    for found in by_op.values():
        # Small samples first: the layout is under test, not the size.
        found.sort(key=lambda c: sum(int(np.prod(a.type.shape)) for a in c.args))
        direct = {c.id: _direct_inputs(c) for c in found}
        positions = max(len(c.args) for c in found)
        for position in range(positions):
            for kind in LAYOUTS:
                fits = [c for c in found if position < len(c.args)
                        and applies(kind, c.args[position].type.shape)]
                # The op itself must read the strided buffer (no movement op in between).
                usable = [c for c in fits if position in direct[c.id]] or fits
                if not usable:
                    continue
                # Rotate through the samples so that several of them see a strided operand.
                base = usable[(position * len(LAYOUTS) + LAYOUTS.index(kind)) % len(usable)]
                layouts = tuple(kind if i == position else "" for i in range(len(base.args)))
                yield replace(base, sample=f"{base.sample}.{kind}{position}", source="layout",
                              layouts=layouts)


register_case_source("layout", layout_cases)
