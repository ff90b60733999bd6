"""Running one case on a backend and on the reference interpreter, and judging the result.

The oracle is `omnitensor.ir.interpret.evaluate`. A case whose instructions the backend declares
unsupported is *unsupported* (never a pass); a declared-supported case that raises
`UnsupportedError` anyway, errors, or differs from the reference is a *failure*, reported with a
reproducer (PTIR text, seed, one-line rerun command).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from omnitensor.backend.contract import Backend
from omnitensor.errors import UnsupportedError
from omnitensor.ir.interpret import evaluate, run_instruction
from omnitensor.ir.opdef import Trait, get_op
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor.optimizer.passes import expand_composites

from .case import Case
from .compare import Mismatch, Tolerance, compare, tolerance_for

__all__ = [
    "Outcome",
    "check_kind",
    "first_unsupported",
    "for_backend",
    "reference_outputs",
    "reproducer",
    "run_case",
    "time_case",
]

Array = np.ndarray[Any, Any]

#: Traits whose single-op cases are compared per element (no accumulation happens).
_PER_ELEMENT = Trait.ELEMENTWISE | Trait.MOVEMENT | Trait.CREATION | Trait.INDEXING


@dataclass
class Outcome:
    """What happened to one case on one backend.

    Attributes:
        status: ``pass``, ``fail``, ``unsupported`` or ``expanded`` (the backend has no
            lowering of the composite under test; its decomposition ran and matched).
        message: the reason (unsupported) or the failure report with its reproducer.
        tolerances: the tolerance used per output (shown in reports).
    """

    status: str
    message: str = ""
    tolerances: list[Tolerance] = field(default_factory=list)


def function_text(fn: Function) -> str:
    """PTIR text of `fn`, or a plain listing when the printer cannot print it."""
    try:
        return fn.text()
    except Exception:  # noqa: BLE001 (a printer bug must not hide the failure being reported)
        lines = [f"func {fn.name}({', '.join(repr(i.value) for i in fn.inputs)})"]
        lines += [f"  {inst!r} {inst.attrs}" for inst in fn.body]
        lines.append(f"  return {', '.join(f'%{v.id}' for v in fn.outputs)}")
        return "\n".join(lines)


def rerun_command(case: Case, backend: str) -> str:
    """The one-line shell command that reruns just `case` on `backend`."""
    mode = "" if case.mode == "test" else f" --mode {case.mode}"
    return f"omnitensor conformance {backend}{mode} --case {case.id}"


def reproducer(case: Case, fn: Function, seed: int, backend: str) -> str:
    """The reproducer block printed under every failure."""
    text = "\n".join(f"    {line}" for line in function_text(fn).splitlines())
    return (
        f"  case:   {case.id} (source {case.source!r})\n"
        f"  seed:   {seed}  (inputs: "
        f"omnitensor_conformance.find_case({case.id!r}).inputs({seed}))\n"
        f"  rerun:  {rerun_command(case, backend)}\n"
        + (f"  layouts: {case.layouts} (input buffers made with layout.layout_buffer)\n"
           if case.layouts else "")
        + f"  PTIR:\n{text}"
    )


def for_backend(backend: Backend, case: Case) -> tuple[Function, bool]:
    """The case's program as the backend gets it, and whether a composite under test expanded.

    As the optimizer does, composites the backend has no lowering for are inlined
    (`expand_composites`); a case whose own composite was expanded is reported ``expanded``.
    """
    fn = case.function()
    op = case.op.removeprefix("grad.")
    claimed = not any(inst.op == op and backend.supports(inst) is not None for inst in fn.body)
    return fn, expand_composites(fn, backend.supports) > 0 and not claimed


def first_unsupported(backend: Backend, fn: Function) -> str | None:
    """The backend's reason for the first instruction of `fn` it declares unsupported, or None.

    Composites the backend does not lower count as supported: they are expanded.
    """
    fn = fn.copy()
    expand_composites(fn, backend.supports)
    for inst in fn.body:
        reason = backend.supports(inst)
        if reason is not None:
            return reason
    return None


def reference_outputs(fn: Function,
                      inputs: Sequence[Array]) -> tuple[list[Array], list[Array | None]]:
    """The oracle's outputs of `fn`, and per output the mask of unspecified elements (or None).

    An output is masked where the op that produced it declares ``unspecified`` elements for the
    operands it saw (int÷0, out-of-range casts).
    """
    expected = evaluate(fn, list(inputs))
    producers = {v.id: inst for inst in fn.body for v in inst.results}
    masks: list[Array | None] = [None] * len(fn.outputs)
    wanted = {i for i, v in enumerate(fn.outputs)
              if v.id in producers and get_op(producers[v.id].op).unspecified is not None}
    if wanted:
        env = {spec.value.id: np.asarray(a) for spec, a in zip(fn.inputs, inputs, strict=True)}
        for inst in fn.body:
            for value, out in zip(inst.results, run_instruction(inst, [env[v.id] for v in
                                                                       inst.operands]),
                                  strict=True):
                env[value.id] = out
        for i in wanted:
            inst = producers[fn.outputs[i].id]
            opdef = get_op(inst.op)
            assert opdef.unspecified is not None
            with np.errstate(all="ignore"):
                mask = opdef.unspecified(*opdef.group([env[v.id] for v in inst.operands]),
                                         **inst.attrs)
            masks[i] = np.broadcast_to(np.asarray(mask, bool), expected[i].shape)
    return expected, masks


def check_kind(case: Case, fn: Function) -> str:
    """The comparison for `case`.

    Its own when set; for ``auto``, per element for a single op without accumulation and NMSE
    otherwise.
    """
    if case.check != "auto":
        return case.check
    computing = [inst for inst in fn.body if not get_op(inst.op).has(Trait.MOVEMENT)]
    if len(computing) <= 1 and all(get_op(i.op).traits & _PER_ELEMENT for i in computing):
        return "ulp"
    return "nmse"


def _case_ulp(case: Case, fn: Function) -> int:
    if case.ulp is not None:
        return case.ulp
    return max((get_op(inst.op).ulp for inst in fn.body), default=0)


def _case_nmse(fn: Function) -> float:
    """The largest NMSE budget an op of the program declares (`OpDef.nmse`)."""
    return max((get_op(inst.op).nmse for inst in fn.body), default=0.0)


def _input_buffers(backend: Backend, case: Case, inputs: Sequence[Any]) -> list[Any] | None:
    """The case's inputs uploaded, in the case's layouts (None: a view was declined)."""
    if not case.layouts:
        return [backend.upload(a) for a in inputs]
    from .layout import layout_buffer

    buffers = []
    for array, kind in zip(inputs, case.layouts, strict=True):
        buffer = layout_buffer(backend, array, kind)
        if buffer is None:
            return None
        buffers.append(buffer)
    return buffers


def run_case(backend: Backend, case: Case, *, seed: int, backend_name: str,
             loosened: Mapping[str, float] | None = None) -> Outcome:
    """Run `case` on `backend`, compare with the reference, and say what happened.

    Args:
        backend: the backend under test.
        case: the case.
        seed: the input seed (`Case.seed`).
        backend_name: the name used in the rerun command.
        loosened: the backend's per-dtype loosening factors.
    """
    fn, expanded = for_backend(backend, case)
    reason = first_unsupported(backend, fn)
    if reason is not None:
        return Outcome("unsupported", reason)
    if case.layouts and not backend.capabilities().strided_inputs:
        return Outcome("unsupported", "strided input buffers (the backend declares "
                                      "strided_inputs=False: views stay ops in its programs)")
    inputs = case.inputs(seed)
    expected, masks = reference_outputs(case.function(oracle=True) if case.oracle else fn,
                                        inputs)
    repro = reproducer(case, fn, seed, backend_name)
    try:
        backend.check(fn)
        exe = backend.compile(fn)
        buffers = _input_buffers(backend, case, inputs)
        if buffers is None:
            return Outcome("unsupported", f"{case.id}: the backend's view() cannot make the "
                                          f"layouts {case.layouts}")
        actual = [np.asarray(backend.download(b)) for b in backend.run(exe, buffers)]
    except UnsupportedError as exc:
        return Outcome("fail", f"{case.id}: the backend declares this case supported but raised "
                               f"UnsupportedError: {exc}\n{repro}")
    except Exception as exc:  # noqa: BLE001 (any backend error is this case's failure)
        return Outcome("fail",
                       f"{case.id}: the backend raised {type(exc).__name__}: {exc}\n{repro}")
    if len(actual) != len(expected):
        return Outcome("fail", f"{case.id}: the backend returned {len(actual)} outputs "
                               f"(expected {len(expected)})\n{repro}")
    kind = check_kind(case, fn)
    budget = _case_ulp(case, fn)
    nmse_budget = _case_nmse(fn)
    factors = loosened or {}
    tolerances, problems = [], []
    for i, (got, want, mask) in enumerate(zip(actual, expected, masks, strict=True)):
        out_type = fn.outputs[i].type
        name = out_type.dtype.name if isinstance(out_type, TensorType) else "uint8"
        tol = tolerance_for(name, kind, ulp=budget, loosen=factors.get(name, 1.0),
                            nmse=nmse_budget)
        tolerances.append(tol)
        mismatch: Mismatch | None = compare(got, np.asarray(want), tol, mask)
        if mismatch is not None:
            problems.append(f"  output {i} ({tol}): {mismatch}")
    if problems:
        return Outcome("fail", f"{case.id}: does not match the reference interpreter\n"
                               + "\n".join(problems) + "\n" + repro, tolerances)
    if expanded:
        return Outcome("expanded", f"{case.op}: no lowering in backend {backend_name!r}; its "
                                   f"decomposition ran and matched", tolerances)
    return Outcome("pass", "", tolerances)


@dataclass(frozen=True)
class Timing:
    """Perf-mode numbers for one case (seconds are medians over `repeats`)."""

    backend_s: float
    reference_s: float
    bytes_moved: int
    flops: float | None


def _median_time(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def time_case(backend: Backend, case: Case, *, seed: int, repeats: int = 3) -> Timing:
    """Time `case` on `backend` (compiled and uploaded once, one warm-up) and on the reference.

    Raises:
        UnsupportedError: when the backend declares the case unsupported.
    """
    fn, _ = for_backend(backend, case)
    reason = first_unsupported(backend, fn)
    if reason is not None:
        raise UnsupportedError(reason, op=case.op, backend=backend.name)
    inputs = case.inputs(seed)
    exe = backend.compile(fn)
    buffers = [backend.upload(a) for a in inputs]

    def on_backend() -> None:
        # Downloading synchronizes asynchronous devices; its cost counts, as a user pays it.
        for out in backend.run(exe, buffers):
            backend.download(out)

    on_backend()
    backend_s = _median_time(on_backend, repeats)
    reference_s = _median_time(lambda: evaluate(fn, inputs), max(1, repeats // 2))
    outputs = evaluate(fn, inputs)
    moved = sum(a.nbytes for a in inputs) + sum(np.asarray(o).nbytes for o in outputs)
    return Timing(backend_s, reference_s, moved, case.flops)
