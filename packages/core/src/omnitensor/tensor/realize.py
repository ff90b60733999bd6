"""Realization: capture the lazy graph, look the plan up in a bounded cache, compile on a miss, run.

Cache first, optimize on a miss (DESIGN §4): a second identical step runs zero optimizer passes
and zero compiles; `stats` counts both so tests can prove it.
"""

from __future__ import annotations

import contextvars
import logging
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backend.contract import Backend, Executable
from ..errors import OmnitensorError, TraceError
from ..ir.program import Function
from ..optimizer.passes.hoist import HoistCache
from .graph import Capture, Node, Ref, capture

__all__ = ["Plan", "PlanCache", "Stats", "plan_cache", "realize_refs", "stats"]

log = logging.getLogger(__name__)


@dataclass
class Stats:
    """Counters of the realization machinery (for tests and `OMNITENSOR_PASS_STATS`)."""

    realizations: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    compiles: int = 0
    optimizer_runs: int = 0
    prelude_runs: int = 0
    #: seconds spent tracing and compiling `compile`d functions, and compiling the kernels a
    #: backend compiles on first use (`Backend.compile_seconds`); the CLI reports it apart
    compile_seconds: float = 0.0
    #: traces dropped by `compile`d functions over their bound (OMNITENSOR_TRACE_CACHE_SIZE)
    trace_evictions: int = 0

    def reset(self) -> None:
        """Zero every counter."""
        for name in self.__dataclass_fields__:
            setattr(self, name, type(getattr(self, name))())

    def snapshot(self) -> dict[str, float]:
        """The counters as a dict."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


stats = Stats()


@dataclass
class Plan:
    """A compiled program for one captured structure on one backend."""

    executable: Executable
    function: Function
    backend: Backend
    prelude: Executable | None = None
    prelude_inputs: tuple[int, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)


class PlanCache:
    """Bounded LRU of plans keyed by the capture key (which includes backend and layouts)."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity or int(os.environ.get("OMNITENSOR_PLAN_CACHE_SIZE", "256"))
        self._plans: OrderedDict[str, Plan] = OrderedDict()

    def get(self, key: str) -> Plan | None:
        """The plan for `key`, marked most recently used; None on a miss."""
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
        return plan

    def put(self, key: str, plan: Plan) -> None:
        """Store `plan`, evicting the least recently used beyond capacity."""
        self._plans[key] = plan
        self._plans.move_to_end(key)
        while len(self._plans) > self.capacity:
            self._plans.popitem(last=False)

    def clear(self) -> None:
        """Forget every plan."""
        self._plans.clear()

    def __len__(self) -> int:
        return len(self._plans)


plan_cache = PlanCache()
hoist_cache: HoistCache[list[Any]] = HoistCache()

#: Set while `omnitensor.compile` traces a function: realizing then is an error.
tracing: contextvars.ContextVar[Any] = contextvars.ContextVar("omnitensor_tracing", default=None)


def optimizer_knobs() -> tuple[Any, ...]:
    """Optimizer knobs in force (part of the cache key: they change the compiled program)."""
    from ..optimizer import knobs

    return knobs()


def compile_plan(cap: Capture, backend: Backend, *, hoist: bool = True) -> Plan:
    """Build, optimize, check and compile the captured function (the miss path).

    With `hoist`, parameter-only work is split into a prelude whose outputs are cached per
    parameter buffer versions (`run_plan`).
    """
    from ..backend.registry import backend_passes
    from ..optimizer import PassContext, dump, optimize

    stats.optimizer_runs += 1
    function = cap.function()
    trace = dump.start_trace(function.signature(), cache_hit=False, backend=backend.name) if (
        dump.dump_dir() is not None) else None
    try:
        context = PassContext(backend=backend.name, backend_passes=backend_passes(backend.name),
                              hoist=hoist, trace=trace, supports=backend.supports)
        main, result = optimize(function, context)
        plan = Plan(_compile(main, backend), main, backend)
        if result.prelude is not None:
            plan.prelude = _compile(result.prelude, backend)
            plan.prelude_inputs = tuple(result.prelude_inputs)
    finally:
        if trace is not None:
            trace.close()
    return plan


def _compile(function: Function, backend: Backend) -> Executable:
    backend.check(function)
    stats.compiles += 1
    return backend.compile(function)


def run_plan(plan: Plan, key: str, leaves: Sequence[Ref], buffers: list[Any], *,
             donated: frozenset[int] = frozenset()) -> list[Any]:
    """Run `plan` on input `buffers`, serving hoisted parameter work from the cache."""
    # kernels a backend compiles on first use count as compile time, not run time
    compiled = plan.backend.compile_seconds()
    try:
        if plan.prelude is not None:
            versions = tuple(leaves[i][0].version for i in plan.prelude_inputs)

            def run_prelude() -> list[Any]:
                stats.prelude_runs += 1
                assert plan.prelude is not None
                return plan.backend.run(plan.prelude,
                                        [buffers[i] for i in plan.prelude_inputs])

            buffers = buffers + list(hoist_cache.get_or_compute(key, versions, run_prelude))
        return plan.backend.run(plan.executable, buffers, donated=donated)
    finally:
        stats.compile_seconds += plan.backend.compile_seconds() - compiled


def leaf_buffers(leaves: Sequence[Ref], backend: Backend) -> list[Any]:
    """The buffers of captured leaves on `backend`, uploading host leaves on first use."""
    out: list[Any] = []
    for node, index in leaves:
        if node.deleted:
            raise OmnitensorError(
                "tensor: this tensor's buffer was donated to a compiled call and may have been "
                "overwritten; use the call's result instead"
            )
        if node.placeholder is not None and node.buffers is None:
            raise TraceError("tensor: a traced placeholder escaped its compiled function")
        if node.backend is None:
            assert node.host is not None
            if node.home is not None and node.home is not backend:
                raise OmnitensorError(
                    f"tensor: operands belong to two backends ({node.home.name!r} and "
                    f"{backend.name!r}); move one with .to({backend.name!r}) or "
                    f".to({node.home.name!r})", backend=node.home.name)
            node.buffers = [backend.upload(array) for array in node.host]
            node.host = None
            node.backend = backend
        elif node.backend is not backend:
            raise OmnitensorError(
                f"tensor: operands belong to two backends ({node.backend.name!r} and "
                f"{backend.name!r}); move one with .to({backend.name!r}) or "
                f".to({node.backend.name!r})",
                backend=node.backend.name,
            )
        assert node.buffers is not None
        out.append(node.buffers[index])
    return out


def pick_backend(roots: Sequence[Ref]) -> Backend:
    """The backend the graph behind `roots` runs on: its bound leaves', else the selected one."""
    from ..backend.registry import get_backend

    cap_nodes = [n for n, _ in roots]
    stack, seen = list(cap_nodes), set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.owner is not None:
            return node.owner
        stack.extend(n for n, _ in node.inputs)
    return get_backend()


def realize_refs(refs: Sequence[Ref]) -> None:
    """Realize every node behind `refs` in one program (results of one node stay together)."""
    if tracing.get() is not None:
        raise TraceError(
            "realize: cannot read tensor values inside omnitensor.compile; return the tensor "
            "instead, or use `where(...)` / a fixed `size=` for data-dependent shapes"
        )
    nodes: dict[int, Node] = {}
    for node, _ in refs:
        if node.op is not None:  # (not `is_leaf`: this runs for every input of every call)
            nodes.setdefault(id(node), node)
    if not nodes:
        return
    roots: list[Ref] = [(node, i) for node in nodes.values() for i in range(len(node.types))]
    backend = pick_backend(roots)
    stats.realizations += 1
    cap = capture(roots, extra_key=(id(backend), optimizer_knobs()))
    buffers = leaf_buffers(cap.leaves, backend)
    key = cap.key
    layout = tuple(backend.layout_key(b) for b in buffers)
    if any(x is not None for x in layout):
        key = f"{key}:{hash(layout)}"
    plan = plan_cache.get(key)
    if plan is None:
        stats.cache_misses += 1
        plan = compile_plan(cap, backend)
        plan_cache.put(key, plan)
    else:
        stats.cache_hits += 1
    outputs = run_plan(plan, key, cap.leaves, buffers)
    position = 0
    for node in nodes.values():
        count = len(node.types)
        node.bind(list(outputs[position : position + count]), backend)
        position += count
