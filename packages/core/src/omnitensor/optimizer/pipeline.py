"""The default optimizer pipeline (`PipelineOptimizer`, `optimize`) and its knobs and counters.

Order: bare decompositions are raised into composites (`passes.raise_composites`), composites
the backend cannot lower are expanded (`passes.composites`; only when the
context names the backend's ``supports``), then a bounded fixed-point loop of canonicalization,
folding and CSE (``OMNITENSOR_OPT_PRE_ITERS``, default 2), the backend's passes (given in the
`PassContext`; the plugin hook supplies them), param-only hoisting (when the context asks), then
a bounded fixed-point loop of CSE, DCE and canonicalization (``OMNITENSOR_OPT_POST_ITERS``,
default 4). ``OMNITENSOR_OPT=0`` switches it off; ``OMNITENSOR_PASS_STATS=1`` logs per-pass runs,
rewrites and time at WARNING; ``OMNITENSOR_OPT_VERIFY=1`` runs the verifier after every pass
(tests set it). Every variable is read at call time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, final

from ..errors import OmnitensorError
from ..ir.program import Function
from .context import Pass, PassContext, PassResult
from .dump import Trace, dump_dir
from .passes import (
    CSEPass,
    DCEPass,
    ExpandCompositesPass,
    PatternPass,
    RaiseCompositesPass,
    plan_hoist,
)
from .registry import Pattern
from .rewrite import apply_patterns

__all__ = [
    "OptimizeStats",
    "OptimizerCounters",
    "PassStat",
    "PipelineOptimizer",
    "as_pass",
    "enabled",
    "knobs",
    "optimize",
    "optimize_for_backend",
    "stats",
]

logger = logging.getLogger(__name__)

ENV_OPT: Final = "OMNITENSOR_OPT"
ENV_PRE_ITERS: Final = "OMNITENSOR_OPT_PRE_ITERS"
ENV_POST_ITERS: Final = "OMNITENSOR_OPT_POST_ITERS"
ENV_PASS_STATS: Final = "OMNITENSOR_PASS_STATS"
ENV_VERIFY: Final = "OMNITENSOR_OPT_VERIFY"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OmnitensorError(
            f"{name}: not an integer (got {raw!r}, expected a count such as {default})"
        ) from None
    if value < 0:
        raise OmnitensorError(f"{name}: negative (got {value}, expected >= 0)")
    return value


def _env_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    return raw not in ("0", "false", "off", "no")


def enabled() -> bool:
    """False when ``OMNITENSOR_OPT=0`` switches the optimizer off."""
    return _env_flag(ENV_OPT, True)


def knobs() -> tuple[bool, int, int]:
    """``(enabled, pre iterations, post iterations)`` as the environment says now.

    The plan cache puts this in its key, so changing a knob never serves a stale plan.
    """
    return enabled(), _env_int(ENV_PRE_ITERS, 2), _env_int(ENV_POST_ITERS, 4)


@dataclass
class PassStat:
    """Totals of one pass over one optimization (or over the process, in `stats`)."""

    runs: int = 0
    changed: int = 0
    rewrites: int = 0
    erased: int = 0
    time_s: float = 0.0

    def add(self, result: PassResult, seconds: float) -> None:
        """Account one run."""
        self.runs += 1
        self.changed += int(result.changed)
        self.rewrites += result.rewrites
        self.erased += result.erased
        self.time_s += seconds


@dataclass
class OptimizeStats:
    """What one `optimize` call did.

    Attributes:
        enabled: False when ``OMNITENSOR_OPT=0`` returned the function unchanged.
        passes: per-pass totals, by pass name.
        pre_iterations: iterations the first fixed-point loop ran.
        post_iterations: iterations the second fixed-point loop ran.
        instructions_before: body length of the input function.
        instructions_after: body length of the result (main, when hoisting split it).
        prelude: the param-only prelude when hoisting moved work out (else None); see
            `passes.hoist` for how main's extra ``"hoisted:<n>"`` inputs are fed.
        prelude_inputs: positions of the prelude's inputs in the input function's inputs.
        hoisted_instructions: instructions moved into the prelude.
        pattern_rewrites: successful applications per pattern name.
    """

    enabled: bool = True
    passes: dict[str, PassStat] = field(default_factory=dict)
    pre_iterations: int = 0
    post_iterations: int = 0
    instructions_before: int = 0
    instructions_after: int = 0
    prelude: Function | None = None
    prelude_inputs: tuple[int, ...] = ()
    hoisted_instructions: int = 0
    pattern_rewrites: dict[str, int] = field(default_factory=dict)

    @property
    def pass_runs(self) -> int:
        """Total pass runs."""
        return sum(s.runs for s in self.passes.values())

    @property
    def rewrites(self) -> int:
        """Total rewrites over all passes."""
        return sum(s.rewrites for s in self.passes.values())


@final
class OptimizerCounters:
    """Process-wide counters (tests check that a cached plan runs zero passes)."""

    def __init__(self) -> None:
        self.optimize_runs = 0
        self.disabled_runs = 0
        self.pass_runs = 0
        self.passes: dict[str, PassStat] = {}

    def reset(self) -> None:
        """Zero every counter."""
        self.__init__()

    def snapshot(self) -> dict[str, int]:
        """The scalar counters as a dict."""
        return {"optimize_runs": self.optimize_runs, "disabled_runs": self.disabled_runs,
                "pass_runs": self.pass_runs}


stats: Final = OptimizerCounters()


@final
class _PatternListPass:
    """A backend's rule list run as a pass."""

    def __init__(self, name: str, patterns: Sequence[Pattern]) -> None:
        self.name = name
        self.patterns = list(patterns)

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        driven = apply_patterns(fn, self.patterns)
        return PassResult(changed=driven.changed, rewrites=driven.total_rewrites,
                          erased=driven.erased_dead, counts=dict(driven.rewrites),
                          events=list(driven.events))


def _fingerprint(fn: Function) -> tuple[Any, ...]:
    return (tuple((i.id, i.version, i.op, tuple(v.id for v in i.operands)) for i in fn.body),
            tuple(v.id for v in fn.outputs), tuple(i.value.id for i in fn.inputs))


@final
class _CallablePass:
    """A ``Function -> Function | None`` callable run as a pass (the hookspec allows it)."""

    def __init__(self, fn: Callable[[Function], Function | None]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)

    def run(self, fn: Function, ctx: PassContext) -> PassResult:
        before = _fingerprint(fn)
        out = self.fn(fn)
        if out is not None and out is not fn:
            fn.inputs, fn.body, fn.outputs = list(out.inputs), list(out.body), list(out.outputs)
            fn._next_value = max(fn._next_value, out._next_value)
            fn._next_inst = max(fn._next_inst, out._next_inst)
        return PassResult(changed=_fingerprint(fn) != before)


def as_pass(obj: Any) -> Pass:
    """A backend-contributed pass object as a `Pass`.

    Accepts a `Pass` (``name`` + ``run(fn, ctx)``), a `Pattern` or a list of them (a rule
    list), or a callable ``Function -> Function | None``.

    Raises:
        OmnitensorError: for anything else, naming its type.
    """
    if hasattr(obj, "run") and hasattr(obj, "name"):
        return obj  # type: ignore[no-any-return]
    if isinstance(obj, Pattern):
        return _PatternListPass(obj.name, [obj])
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(p, Pattern) for p in obj):
        return _PatternListPass("+".join(p.name for p in obj), obj)
    if callable(obj):
        return _CallablePass(obj)
    raise OmnitensorError(
        f"optimizer: cannot use {type(obj).__name__} as a pass (expected a Pass, a Pattern list "
        f"or a Function -> Function callable)"
    )


def _verify(fn: Function, after: str) -> None:
    try:
        from ..ir.verify import verify
    except ImportError:  # the verifier is optional for the optimizer
        return
    try:
        verify(fn)
    except OmnitensorError as exc:
        raise type(exc)(f"optimizer: {after} broke the function: {exc}") from exc


@final
class PipelineOptimizer:
    """The default pipeline (see the module docstring).

    Args:
        pre_passes: the first loop's passes (default: canonicalize, fold, CSE; CSE runs before
            hoisting too, so that a weight transposed twice is hoisted once).
        post_passes: the second loop's passes (default: CSE, DCE, canonicalize).
    """

    def __init__(self, pre_passes: Sequence[Pass] | None = None,
                 post_passes: Sequence[Pass] | None = None) -> None:
        self.pre_passes: list[Pass] = list(
            pre_passes if pre_passes is not None
            else [PatternPass("canonicalize"), PatternPass("fold"), CSEPass()]
        )
        self.post_passes: list[Pass] = list(
            post_passes if post_passes is not None
            else [CSEPass(), DCEPass(), PatternPass("canonicalize")]
        )
        #: Raising runs first in the default pipeline (a custom `pre_passes` list leaves it out).
        self.raise_pass: Pass | None = RaiseCompositesPass() if pre_passes is None else None

    def run(self, fn: Function, ctx: PassContext | None = None) -> tuple[Function, OptimizeStats]:
        """Optimize a copy of `fn`; return it (main, when hoisting split it) and the stats.

        `fn` itself is never modified. With ``OMNITENSOR_OPT=0`` it is returned as is.
        """
        ctx = ctx if ctx is not None else PassContext()
        on, pre_iters, post_iters = knobs()
        result = OptimizeStats(enabled=on, instructions_before=len(fn.body))
        if not on:
            stats.disabled_runs += 1
            result.instructions_after = len(fn.body)
            return fn, result
        stats.optimize_runs += 1
        own_trace = ctx.trace is None and dump_dir() is not None
        trace = ctx.trace if ctx.trace is not None else (
            Trace(None, kind="optimize", backend=ctx.backend) if own_trace else None
        )
        if trace is not None:
            if trace.signature is None:
                trace.signature = fn.signature()
            trace.program("before", fn)
        work = fn.copy()
        verify = _env_flag(ENV_VERIFY, False)
        if self.raise_pass is not None:
            self._run_pass(self.raise_pass, work, ctx, result, trace, "raise", 0, verify)
        if ctx.supports is not None:  # a backend is known: expand what it cannot lower
            self._run_pass(ExpandCompositesPass(), work, ctx, result, trace, "expand", 0, verify)
        result.pre_iterations = self._loop("pre", self.pre_passes, work, ctx, pre_iters, result,
                                           trace, verify)
        for obj in ctx.backend_passes:
            self._run_pass(as_pass(obj), work, ctx, result, trace, "backend", 0, verify)
        if ctx.hoist:
            split = plan_hoist(work)
            if split.prelude is not None:
                work = split.main
                result.prelude = split.prelude
                result.prelude_inputs = split.prelude_inputs
                result.hoisted_instructions = split.moved
                if trace is not None:
                    trace.record("hoist", moved=split.moved, hoisted_values=split.hoisted,
                                 prelude_inputs=list(split.prelude_inputs))
        result.post_iterations = self._loop("post", self.post_passes, work, ctx, post_iters,
                                            result, trace, verify)
        if result.prelude is not None:
            DCEPass().run(result.prelude, ctx)
        result.instructions_after = len(work.body)
        if trace is not None:
            trace.program("after", work)
            if result.prelude is not None:
                trace.program("prelude", result.prelude)
            if own_trace:
                trace.close()
        if _env_flag(ENV_PASS_STATS, False):
            _log_stats(fn.name, result)
        return work, result

    def _loop(self, stage: str, passes: Sequence[Pass], fn: Function, ctx: PassContext,
              max_iters: int, result: OptimizeStats, trace: Trace | None, verify: bool) -> int:
        iterations = 0
        for iteration in range(max_iters):
            iterations += 1
            changed = False
            for p in passes:
                changed |= self._run_pass(p, fn, ctx, result, trace, stage, iteration, verify)
            if not changed:
                break
        return iterations

    def _run_pass(self, p: Pass, fn: Function, ctx: PassContext, result: OptimizeStats,
                  trace: Trace | None, stage: str, iteration: int, verify: bool) -> bool:
        start = time.perf_counter()
        out = p.run(fn, ctx)
        seconds = time.perf_counter() - start
        result.passes.setdefault(p.name, PassStat()).add(out, seconds)
        stats.passes.setdefault(p.name, PassStat()).add(out, seconds)
        stats.pass_runs += 1
        for name, count in out.counts.items():
            if name not in ("attempts", "cache_skips", "merged", "erased"):
                result.pattern_rewrites[name] = result.pattern_rewrites.get(name, 0) + count
        if trace is not None:
            trace.record("pass", name=p.name, stage=stage, iteration=iteration,
                         changed=out.changed, rewrites=out.rewrites, erased=out.erased,
                         time_s=round(seconds, 6), size=len(fn.body))
            for what, inst_id in out.events:
                trace.record("rewrite", name=p.name, pattern=what, inst=inst_id)
        if verify:
            _verify(fn, f"pass {p.name!r}")
        return out.changed


def _log_stats(name: str, result: OptimizeStats) -> None:
    lines = [f"optimizer stats for {name!r}: {result.instructions_before} -> "
             f"{result.instructions_after} instructions, pre {result.pre_iterations} / post "
             f"{result.post_iterations} iterations, {result.hoisted_instructions} hoisted",
             f"  {'pass':<14} {'runs':>5} {'changed':>7} {'rewrites':>8} {'erased':>6} "
             f"{'time ms':>9}"]
    for pass_name, s in result.passes.items():
        lines.append(f"  {pass_name:<14} {s.runs:>5} {s.changed:>7} {s.rewrites:>8} "
                     f"{s.erased:>6} {s.time_s * 1e3:>9.3f}")
    logger.warning("\n".join(lines))


_DEFAULT: PipelineOptimizer | None = None


def optimize(fn: Function, context: PassContext | None = None) -> tuple[Function, OptimizeStats]:
    """Run the default pipeline on a copy of `fn`; return ``(optimized, stats)``.

    Args:
        fn: the captured function (not modified).
        context: backend passes, hoisting, trace; default: portable, no hoisting.

    Returns:
        The optimized function (the main function when hoisting split off a prelude, which
        is then ``stats.prelude``) and what was done.
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = PipelineOptimizer()
    return _DEFAULT.run(fn, context)


def optimize_for_backend(function: Function, backend: Any, *, passes: Sequence[Any] = (),
                         trace: Trace | None = None) -> Function:
    """The tensor layer's entry point: `optimize` for `backend`, keeping the function's inputs.

    No hoisting happens here (it adds inputs); call `optimize` with ``PassContext(hoist=True)``
    for that. With ``OMNITENSOR_OPT=0`` `function` itself is returned.

    Args:
        function: the captured function (not modified).
        backend: a `Backend` (its ``name`` is used) or a backend name.
        passes: the backend's passes, as ``backend.registry.backend_passes(name)`` returns them
            (the optimizer does not import the plugin registry).
        trace: the realization's dump trace, if any.
    """
    name = backend if isinstance(backend, str) else getattr(backend, "name", None)
    supports = None if isinstance(backend, str) else getattr(backend, "supports", None)
    out, _ = optimize(function, PassContext(backend=name, backend_passes=passes, trace=trace,
                                            supports=supports))
    return out
