"""Two tiers of kernel steps: numpy reference kernels for small arrays, numba above.

Loading a compiled kernel costs tens of milliseconds (compiling it, on a cold cache, up to a
second, and numba's own start-up about a second once per process); on arrays of a few thousand
elements it saves microseconds per call, since numba's dispatch itself costs microseconds. So
kernel steps whose results are smaller than `codegen.min_elements` run the instructions'
reference kernels instead (`reference_runner`), for good: a small program (``omnitensor
generate char-gpt``) never imports numba, and no compile ever stalls a running loop.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence
from typing import Any, cast

import numpy as np

from omnitensor.dtypes import float32
from omnitensor.ir.opdef import OpDef, decomposition, get_op
from omnitensor.ir.program import Instruction
from omnitensor.ir.types import TensorType

__all__ = ["flatten", "reference_runner", "run_flat"]

Slots = list[Any]
Step = Callable[[Slots], None]

#: (reference kernel, attributes, operand keys, result keys, the OpDef when its operands are
#: grouped (variadic), else None). Keys are the plan's value ids, or (scope, id) pairs for the
#: values inside an inlined decomposition.
Entry = tuple[Callable[..., Any], dict[str, Any], list[Hashable], list[Hashable], OpDef | None]


def _identity(x: Any) -> Any:
    return x


def _erf32(x: Any) -> Any:
    """Erf of a float32 array in float32 numpy arithmetic: `mathlib.erf32f`'s form, 2 ulp.

    The reference kernel calls ``math.erf`` per element (numpy has no erf): 0.9 ms for a
    (300, 64) array, most of a small GELU network's training step on this tier
    (`examples/train_mlp.py`: 0.6 against 0.9 s for the whole process on the reference kernels).
    """
    a = np.minimum(np.abs(x), np.float32(9.0))
    s = a * a
    r = np.float32(-1.72853470e-5) * a + np.float32(3.83197126e-4)
    r = r * s + (np.float32(-3.88396438e-3) * a + np.float32(2.42546219e-2))
    for c in (-1.06777877e-1, -6.34846687e-1, -1.28717512e-1):
        r = r * a + np.float32(c)
    big = np.float32(1.0) - np.exp(np.maximum(r * a - a, np.float32(-104.0)))
    p = np.full_like(a, np.float32(-5.96761703e-4))
    for c in (4.99119423e-3, -2.67681349e-2, 1.12819925e-1, -3.76125336e-1, 1.28379166e-1):
        p = p * s + np.float32(c)
    y = np.where(a > np.float32(0.927734375), big, p * a + a)
    return np.where(np.isnan(x), x, np.copysign(y, x)).astype(np.float32, copy=False)


#: Primitives whose float32 reference kernel this tier replaces by a faster numpy form, within
#: the op's ULP budget (the compiled kernels' forms, see `mathlib`).
_FLOAT32_KERNELS: dict[str, Callable[..., Any]] = {"erf": _erf32}


def flatten(insts: Sequence[Instruction]) -> tuple[list[Entry], dict[Hashable, Any]]:
    """`insts` as a flat list of primitive reference kernels, composites inlined.

    A composite's reference kernel builds and interprets its decomposition on every call
    (0.15 ms for a (1, 896) rms_norm, against 10 us for its dozen numpy calls); inlined once
    here, small composites in a decode step cost what their primitives cost. Constants are
    evaluated here, once.

    Returns:
        (entries in order, constants by key).
    """
    entries: list[Entry] = []
    consts: dict[Hashable, Any] = {}
    scopes = itertools.count()

    def visit(inst: Instruction, key: Callable[[int], Hashable]) -> None:
        opdef = get_op(inst.op)
        reads = [key(v.id) for v in inst.operands]
        writes = [key(v.id) for v in inst.results]
        if inst.op == "constant":
            consts[writes[0]] = opdef.reference(**inst.attrs)
            return
        if opdef.decompose is None:
            grouped = opdef if any(s.variadic for s in opdef.operands) else None
            fast = _FLOAT32_KERNELS.get(inst.op)
            kernel = (fast if fast is not None and all(
                getattr(v.type, "dtype", None) == float32 for v in (*inst.operands, *inst.results))
                else opdef.reference)
            entries.append((kernel, dict(inst.attrs), reads, writes, grouped))
            return
        fn = decomposition(opdef, [v.type for v in inst.operands], dict(inst.attrs))
        scope = next(scopes)
        inner: dict[int, Hashable] = {spec.value.id: r
                                      for spec, r in zip(fn.inputs, reads, strict=True)}
        for value, write in zip(fn.outputs, writes, strict=True):
            if value.id in inner:  # a decomposition that returns an input (or one value twice)
                entries.append((_identity, {}, [inner[value.id]], [write], None))
            else:
                inner[value.id] = write
        for sub in fn.body:
            visit(sub, lambda vid, s=scope, m=inner: m.get(vid, (s, vid)))  # type: ignore[misc]

    for inst in insts:
        visit(inst, lambda vid: vid)
    return entries, consts


def run_flat(entries: Sequence[Entry], env: dict[Hashable, Any], slots: Slots) -> None:
    """Run flattened `entries`, reading `env` first and then `slots`, writing into `env`."""
    for kernel, attrs, reads, writes, grouped in entries:
        args = [env[r] if r in env else slots[cast(int, r)] for r in reads]
        result = kernel(*(grouped.group(args) if grouped is not None else args), **attrs)
        if len(writes) == 1:
            env[writes[0]] = result
        else:
            for write, value in zip(writes, result, strict=True):
                env[write] = value


def reference_runner(insts: Sequence[Instruction], literals: dict[int, Any],
                     outputs: Sequence[int],
                     getters: Sequence[Callable[[Slots], Any]]) -> Step:
    """A step running `insts` through the reference kernels, results into the given buffers.

    Args:
        insts: instructions in program order (composites are inlined, see `flatten`).
        literals: value id -> scalar for operands inlined as constants.
        outputs: value ids written out, each into the buffer its getter returns.
        getters: one per output (the plan's buffer for it).
    """
    entries, inner = flatten(insts)
    consts: dict[Hashable, Any] = dict(inner)
    consts.update({vid: np.asarray(value, dtype=_dtype(insts, vid))
                   for vid, value in literals.items()})

    def step(slots: Slots) -> None:
        env: dict[Hashable, Any] = dict(consts)
        run_flat(entries, env, slots)
        for vid, get in zip(outputs, getters, strict=True):
            buffer = get(slots)
            np.copyto(buffer, env[vid], casting="unsafe")
            slots[vid] = buffer

    return step


def _dtype(insts: Sequence[Instruction], value: int) -> Any:
    for inst in insts:
        for v in inst.operands:
            if v.id == value:
                assert isinstance(v.type, TensorType)
                return v.type.dtype.np
    raise AssertionError(value)
