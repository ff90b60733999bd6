"""`omnitensor.compile`: trace a Python function once per input signature, then replay its plan.

The traced program's inputs are the tensor arguments (placeholders), then every realized tensor
the function read from outside (weights). Those outside tensors are read through their handles
at each call, so a parameter rebound by an optimizer step is seen by the next call; handles the
function itself rebinds (``x[i] = v``, parameter updates) become extra outputs and are rebound
after each call.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar

from ..backend.contract import Backend
from ..errors import OmnitensorError, TraceError
from ..ir.types import TensorType
from . import graph
from .graph import Node, Ref, aliases_of, capture, rebind
from .realize import (
    compile_plan,
    leaf_buffers,
    pick_backend,
    realize_refs,
    run_plan,
    stats,
    tracing,
)
from .tensor import Tensor

__all__ = ["CompiledFunction", "cache_sizes", "compile"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class _TraceState:
    """Handles seen while tracing, with the value each held at first sight (to see rebinding).

    Gradients (``t.grad``) are tracked too: a gradient read before the function set it is an
    input of the call (and its presence a guard of the trace), one the function set is an
    output rebound after each call (``zero_grad``, ``backward``, clipping).
    """

    def __init__(self) -> None:
        self.seen: dict[int, tuple[weakref.ref[Tensor], Ref]] = {}
        #: owner id -> (owner, type of the gradient it held on entry, None when it held none)
        self.grad_reads: dict[int, tuple[weakref.ref[Tensor], Any]] = {}
        #: owner id -> (owner, the gradient it held on entry)
        self.grad_writes: dict[int, tuple[weakref.ref[Tensor], Tensor | None]] = {}

    # Entries are keyed by id(); a trace frees many temporaries whose ids later handles reuse,
    # so an entry counts only while its weakref still points to the same object.

    def saw(self, tensor: Tensor) -> None:
        entry = self.seen.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            self.seen[id(tensor)] = (weakref.ref(tensor), (tensor._node, tensor._index))

    def read_grad(self, owner: Tensor) -> None:
        key = id(owner)
        for table in (self.grad_writes, self.grad_reads):
            entry = table.get(key)
            if entry is not None and entry[0]() is owner:
                return
        held = owner._grad
        if held is not None and not held._node.is_leaf:
            # a lazy gradient from an uncompiled step: compute it now, so that the call reads
            # its value as an input instead of replaying the graph that made it
            token = tracing.set(None)
            try:
                held.realize()
            finally:
                tracing.reset(token)
        self.grad_reads[key] = (weakref.ref(owner), None if held is None else held.type)

    def wrote_grad(self, owner: Tensor) -> None:
        entry = self.grad_writes.get(id(owner))
        if entry is None or entry[0]() is not owner:
            self.grad_writes[id(owner)] = (weakref.ref(owner), owner._grad)


class _GradOf:
    """Reads the gradient a tensor holds now (a handle source for gradients read on entry)."""

    __slots__ = ("owner",)

    def __init__(self, owner: weakref.ref[Tensor]) -> None:
        self.owner = owner

    def __call__(self) -> Tensor | None:
        owner = self.owner()
        return None if owner is None else owner._grad


def _flatten(tree: Any, leaves: list[Any]) -> Any:
    """Structure of `tree` with tensors replaced by their index in `leaves`."""
    if isinstance(tree, Tensor):
        leaves.append(tree)
        return ("T", len(leaves) - 1)
    if isinstance(tree, (list, tuple)):
        return (type(tree).__name__, tuple([_flatten(x, leaves) for x in tree]))
    if isinstance(tree, dict):
        return ("dict", tuple((k, _flatten(v, leaves)) for k, v in sorted(tree.items())))
    return ("static", tree)


def _unflatten(spec: Any, leaves: Sequence[Any]) -> Any:
    kind, body = spec
    if kind == "T":
        return leaves[body]
    if kind in ("list", "tuple"):
        items = [_unflatten(x, leaves) for x in body]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {k: _unflatten(v, leaves) for k, v in body}
    return body


def _leaf_types(leaves: list[Tensor]) -> tuple[Any, ...]:
    """(shape, dtype name) of each tensor argument: the part of a call's signature they set."""
    # NOTE: dtype names, not DType objects: a DType hashes in Python (a frozen dataclass), and
    # a decode step's signature holds some 55 of them
    out = []
    for t in leaves:
        held = t._node.types[t._index]
        out.append((held.shape, held.dtype.name) if isinstance(held, TensorType)
                   else (t.shape, t.dtype))
    return tuple(out)


class _Signature:
    """A call signature (a nested tuple) that hashes once: the trace cache looks it up twice."""

    __slots__ = ("hash", "value")

    def __init__(self, value: tuple[Any, ...]) -> None:
        self.value = value
        self.hash = hash(value)

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Signature) and self.hash == other.hash \
            and self.value == other.value


def _resolve(leaf: Ref, sources: list[Callable[[], Tensor | None]]) -> Ref:
    """What a captured tensor resolves to now.

    Its first live source's value where that source was rebound to a value of the same type,
    else what was captured.
    """
    node, index = leaf
    for source in sources:
        handle = source()
        if handle is None:
            continue
        if handle._node is node and handle._index == index:  # not rebound
            return leaf
        if handle._node.types[handle._index] == node.types[index]:
            return handle._node, handle._index
    return leaf


@dataclass
class _Bound:
    """A trace's captured tensors (weights) as looked up at one `epoch`.

    A decode step captures ~220 weights and passes ~50 arguments; looking the weights up,
    checking and unwrapping them again at every call was a third of its Python overhead.
    Nothing but a rebinding (`graph.rebinds`) or a deletion (`graph.deletions`) can change
    what they resolve to, so both counters are the epoch.
    """

    epoch: tuple[int, int]
    #: refs and buffers by input position (argument positions are filled at each call)
    refs: list[Ref]
    buffers: list[Any]
    #: the captured tensors' input positions, and the backend holding their buffers
    captured: list[int]
    backend: Backend
    _storages: frozenset[int] | None = None
    _nodes: frozenset[int] | None = None

    @property
    def storages(self) -> frozenset[int]:
        """Ids of the captured buffers' storages: a donated argument sharing one is not written.

        (Looked up on the first call that donates: most never do.)
        """
        if self._storages is None:
            self._storages = frozenset(id(self.backend.storage(self.buffers[pos]))
                                       for pos in self.captured)
        return self._storages

    @property
    def nodes(self) -> frozenset[int]:
        """Ids of the captured nodes: a call that donates one of them ends this epoch."""
        if self._nodes is None:
            self._nodes = frozenset(id(self.refs[pos][0]) for pos in self.captured)
        return self._nodes


@dataclass
class _Trace:
    """One traced signature: the plan and how to feed and unpack it."""

    plan: Any
    key: str
    backend: Backend
    leaves: list[Ref]
    handles: dict[int, list[Callable[[], Tensor | None]]]  # leaf position -> its sources
    out_spec: Any
    n_outputs: int
    rebound: list[weakref.ref[Tensor]] = field(default_factory=list)
    #: owners whose gradient the call sets (None: cleared), in output order after `rebound`
    grads_set: list[weakref.ref[Tensor]] = field(default_factory=list)
    grads_cleared: list[weakref.ref[Tensor]] = field(default_factory=list)
    #: owners whose gradient the trace read on entry, with its type then (None: no gradient)
    guards: list[tuple[weakref.ref[Tensor], Any]] = field(default_factory=list)
    #: input positions of the function's arguments (the rest are captured tensors)
    arguments: frozenset[int] = frozenset()
    #: (input position, argument leaf) of each argument, and (position, sources) of each
    #: captured tensor a handle may have rebound: `_inputs`'s loops, prepared once
    placed: list[tuple[int, int]] = field(init=False)
    watched: list[tuple[int, list[Callable[[], Tensor | None]]]] = field(init=False)
    captured: list[int] = field(init=False)
    #: the captured tensors as last looked up (`_bind`), reused while its epoch is current
    bound: _Bound | None = None
    #: every source is a tensor handle (no gradient of one): `bound` may be reused
    only_handles: bool = field(init=False)
    #: (donated argument leaves, the input positions they take, their argument indices):
    #: the same at every call of this trace (its signature fixes the arguments' structure)
    donation: tuple[frozenset[int], frozenset[int], tuple[int, ...]] | None = None

    _rebound_lookup: tuple[list[list[int]], list[int]] | None = field(default=None,
                                                                       init=False)

    def rebound_lookup(self) -> tuple[list[list[int]], list[int]]:
        """Where the handles this trace's call rebinds are watched (see `_bind`'s `since`).

        ``(direct, others)``: ``direct[i]``, the positions whose first source is handle i of
        `rebound`, rebound to a value of their type (they resolve to its new value); `others`,
        the remaining positions one of whose sources is rebound (looked up in full).
        """
        if self._rebound_lookup is None:
            handles = [r() for r in self.rebound]
            index = {id(h): i for i, h in enumerate(handles) if h is not None}
            types = [v.type for v in self.plan.function.outputs[
                self.n_outputs:self.n_outputs + len(handles)]]
            direct: list[list[int]] = [[] for _ in handles]
            others: list[int] = []
            for pos, sources in self.watched:
                live = [s() for s in sources]
                if not any(h is not None and id(h) in index for h in live):
                    continue
                i = None if live[0] is None else index.get(id(live[0]))
                node, at = self.leaves[pos]
                if i is not None and types[i] == node.types[at]:
                    direct[i].append(pos)
                else:
                    others.append(pos)
            self._rebound_lookup = direct, others
        return self._rebound_lookup

    def __post_init__(self) -> None:
        self.only_handles = not any(isinstance(source, _GradOf)
                                    for sources in self.handles.values() for source in sources)
        self.placed = [(pos, self.leaves[pos][0].placeholder or 0)
                       for pos in sorted(self.arguments)]
        self.watched = sorted(self.handles.items())
        self.captured = [pos for pos in range(len(self.leaves)) if pos not in self.arguments]

    def donated(self, leaves: frozenset[int]) -> tuple[frozenset[int], tuple[int, ...]]:
        """The input positions of the donated argument `leaves`, and their argument indices."""
        if self.donation is None or self.donation[0] != leaves:
            positions = frozenset(pos for pos in self.arguments
                                  if self.leaves[pos][0].placeholder in leaves)
            self.donation = (leaves, positions,
                             tuple(self.leaves[pos][0].placeholder or 0 for pos in positions))
        return self.donation[1], self.donation[2]

    def matches(self) -> bool:
        """True when every gradient the trace read on entry is present (or absent) as then."""
        for ref, expected in self.guards:
            owner = ref()
            if owner is None:
                continue
            held = owner._grad
            if (None if held is None else held.type) != expected:
                return False
        return True


class CompiledFunction(Generic[P, R]):
    """A function traced once per input signature (shapes, dtypes, static args, backend).

    The traces (each holding its compiled plan) are kept least recently used first and bounded
    by `capacity` (``OMNITENSOR_TRACE_CACHE_SIZE``, default 64): a caller cycling through more
    signatures than that retraces instead of growing without end.

    Attributes:
        traces: how many times the Python function ran (one per new signature).
        capacity: the most traces kept.
    """

    def __init__(self, fn: Callable[P, R], donate: Sequence[int] = ()) -> None:
        self.fn = fn
        self.donate = frozenset(donate)
        self.traces = 0
        self.capacity = max(1, int(os.environ.get("OMNITENSOR_TRACE_CACHE_SIZE", "64")))
        self._cache: OrderedDict[Any, list[_Trace]] = OrderedDict()
        self._kept = 0
        functools.update_wrapper(self, fn)
        _live.add(self)

    def __len__(self) -> int:
        """The number of traces kept."""
        return self._kept

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the compiled plan for these arguments' signature (tracing `fn` on a new one)."""
        # NOTE: one pass builds the spec of (args, kwargs) exactly as _flatten((args, kwargs))
        # would and notes each tensor leaf's top-level argument (a decode step passes dozens
        # of cache tensors: walking them twice was a measurable part of the step's overhead).
        arg_leaves: list[Tensor] = []
        owners: list[int] = []  # top-level argument position of each tensor leaf
        arg_specs = []
        for position, arg in enumerate(args):
            before = len(arg_leaves)
            arg_specs.append(_flatten(arg, arg_leaves))
            owners.extend([position] * (len(arg_leaves) - before))
        spec = ("tuple", (("tuple", tuple(arg_specs)), _flatten(kwargs, arg_leaves)))
        refs = [(t._node, t._index) for t in arg_leaves]
        realize_refs(refs)
        for position in self.donate:
            if position >= len(args):
                raise OmnitensorError(f"compile: donate index {position} is not an argument "
                                      f"(the function got {len(args)})")
        donated_leaves = frozenset(i for i, p in enumerate(owners) if p in self.donate)
        backend = pick_backend(refs) if arg_leaves else None
        try:
            signature = _Signature((spec, _leaf_types(arg_leaves), id(backend)))
        except TypeError:
            spec_key(spec)  # says which argument is not hashable
            raise
        candidates = self._cache.get(signature)
        if candidates is None:
            candidates = self._cache[signature] = []
        else:
            self._cache.move_to_end(signature)
        # traces of one signature differ only in which gradients existed on entry (guards)
        trace = next((t for t in candidates if t.matches()), None)
        if trace is None:
            began = time.perf_counter()
            trace = self._trace(args, kwargs, arg_leaves, backend, signature)
            stats.compile_seconds += time.perf_counter() - began
            candidates.append(trace)
            self._kept += 1
            while self._kept > self.capacity and len(self._cache) > 1:
                _, dropped = self._cache.popitem(last=False)
                self._kept -= len(dropped)
                stats.trace_evictions += len(dropped)
        result: R = self._run(trace, arg_leaves, donated_leaves)
        return result

    def _trace(self, args: Any, kwargs: Any, arg_leaves: list[Tensor], backend: Backend | None,
               signature: Any) -> _Trace:
        self.traces += 1
        if self.traces > 1:  # expected once per shape bucket; INFO keeps decode loops quiet
            log.info("compile: retracing %s for a new signature %s",
                        getattr(self.fn, "__name__", "function"), signature.value[1])
        placeholders = []
        for i, t in enumerate(arg_leaves):
            node = Node(None, (), {}, (t.type,), t._node.backend)
            node.placeholder = i
            placeholders.append(Tensor(node))
        spec = _flatten((args, kwargs), [])
        t_args, t_kwargs = _unflatten(spec, placeholders)
        state = _TraceState()
        token = tracing.set(state)
        try:
            result = self.fn(*t_args, **t_kwargs)
        except BaseException:
            for ref, entry in state.grad_writes.values():  # no traced gradient may escape
                if (owner := ref()) is not None:
                    owner._grad = entry
            raise
        finally:
            tracing.reset(token)
        out_leaves: list[Tensor] = []
        out_spec = _flatten(result, out_leaves)
        # NOTE: an argument's placeholder handle rebound inside (a KV cache's ``assign``) is
        # not the caller's tensor and dies with the trace: its new value is no extra output
        rebound = [ref for ref, first in state.seen.values()
                   if (h := ref()) is not None and first[0].placeholder is None
                   and (h._node, h._index) != first]
        grads_set: list[weakref.ref[Tensor]] = []
        grads_cleared: list[weakref.ref[Tensor]] = []
        grad_roots: list[Ref] = []
        for ref, entry in state.grad_writes.values():
            owner = ref()
            if owner is None:
                continue
            final = owner._grad
            if final is None:
                grads_cleared.append(ref)
            else:
                grads_set.append(ref)
                grad_roots.append((final._node, final._index))
            owner._grad = entry  # the call itself sets it after running
        roots = [t._ref() for t in out_leaves] + [
            (h._node, h._index) for ref in rebound if (h := ref()) is not None] + grad_roots
        for ref, first in state.seen.values():
            handle = ref()
            if handle is not None and any(ref is r for r in rebound):
                # the call itself rebinds it after running; until then it holds its old value
                rebind(handle, *first)
        cap = capture(roots, name=getattr(self.fn, "__name__", "compiled"))
        chosen = backend or pick_backend(roots)
        stats.cache_misses += 1
        plan = compile_plan(cap, chosen)
        handles: dict[int, list[Callable[[], Tensor | None]]] = {}
        by_leaf = {(id(n), i): pos for pos, (n, i) in enumerate(cap.leaves)}
        guards: list[tuple[weakref.ref[Tensor], Any]] = []
        for ref, expected in state.grad_reads.values():
            guards.append((ref, expected))
            owner = ref()
            held = None if owner is None else owner._grad
            if held is not None:
                pos = by_leaf.get((id(held._node), held._index))
                if pos is not None:  # the owner's gradient at call time, whatever object
                    handles.setdefault(pos, []).append(_GradOf(ref))
        for ref, (node, index) in state.seen.values():
            pos = by_leaf.get((id(node), index))
            if pos is not None and node.placeholder is None:
                handles.setdefault(pos, []).append(ref)
        arguments = frozenset(pos for pos, (node, _) in enumerate(cap.leaves)
                              if node.placeholder is not None)
        return _Trace(plan, cap.key, chosen, cap.leaves, handles, out_spec, len(out_leaves),
                      [r for r in rebound if r() is not None], grads_set, grads_cleared, guards,
                      arguments=arguments)

    @staticmethod
    def _bind(trace: _Trace, since: _Bound | None = None,
              fresh: list[Node | None] | None = None) -> _Bound:
        """Look up the captured tensors' current values (a handle may have been rebound).

        With `since` (a lookup whose epoch only this trace's own call moved, by rebinding the
        handles in `trace.rebound`), only the positions those handles watch are looked up
        again, and `fresh` (the realized node each of those handles was rebound to, None for
        one that died) gives most of them directly: a training step rebinds ~150 parameters
        and moments at every call, and looking up every captured tensor again took 0.2 ms of
        its ~1 ms of Python outside the plan (0.06 ms this way).
        """
        epoch = (graph.rebinds, graph.deletions)
        if since is None:
            refs = list(trace.leaves)
            buffers: list[Any] = [None] * len(refs)
            looked_up = [pos for pos, _ in trace.watched]
        else:
            refs, buffers = list(since.refs), list(since.buffers)
            direct, looked_up = trace.rebound_lookup()
            looked_up = list(looked_up)
            for positions, node in zip(direct, fresh or [], strict=True):
                for pos in positions:
                    if node is None or node.buffers is None:  # (a handle that died)
                        looked_up.append(pos)
                    else:
                        refs[pos], buffers[pos] = (node, 0), node.buffers[0]
        for pos in looked_up:
            refs[pos] = _resolve(trace.leaves[pos], trace.handles[pos])
        again = trace.captured if since is None else looked_up
        captured = [refs[pos] for pos in again]
        realize_refs(captured)
        for pos, buf in zip(again, leaf_buffers(captured, trace.backend), strict=True):
            buffers[pos] = buf
        bound = _Bound(epoch, refs, buffers, trace.captured, trace.backend)
        # a gradient source can change without a rebinding: looked up at every call
        if trace.only_handles and epoch == (graph.rebinds, graph.deletions):
            trace.bound = bound
        return bound

    def _inputs(self, trace: _Trace, arg_leaves: list[Tensor]
                ) -> tuple[list[Ref], list[Any], _Bound]:
        bound = trace.bound
        if bound is None or bound.epoch != (graph.rebinds, graph.deletions):
            bound = self._bind(trace)
        buffers = list(bound.buffers)
        # (the arguments were realized by `__call__`)
        arg_refs = [arg_leaves[placeholder]._ref() for _, placeholder in trace.placed]
        for (pos, _), buf in zip(trace.placed, leaf_buffers(arg_refs, trace.backend),
                                 strict=True):
            buffers[pos] = buf
        # NOTE: the refs are the captured tensors' as bound, the arguments' positions holding
        # their placeholders: `run_plan` reads refs only for a hoisted prelude's inputs, which
        # are parameter inputs, never an argument (a placeholder is data), so no per-call copy
        # of the ~270 refs of a decode step is made
        return bound.refs, buffers, bound

    def _run(self, trace: _Trace, arg_leaves: list[Tensor], donated_leaves: frozenset[int]
             ) -> Any:
        refs, buffers, bound = self._inputs(trace, arg_leaves)
        donated, donated_args = trace.donated(donated_leaves)
        in_place, storages = _writable_in_place(trace.backend, buffers, donated,
                                                trace.arguments,
                                                bound.storages if donated else frozenset())
        outputs = run_plan(trace.plan, trace.key, refs, buffers, donated=in_place)
        stats.cache_hits += 1
        if donated:
            epoch = (graph.rebinds, graph.deletions)
            gone = [arg_leaves[i]._node for i in donated_args]
            # Every live view of the memory that may have been overwritten goes with it.
            gone += [alias for pos in in_place for alias in aliases_of(storages[pos])]
            for node in gone:
                graph.delete(node)
            if bound is trace.bound and bound.epoch == epoch \
                    and not any(id(node) in bound.nodes for node in gone):
                bound.epoch = (graph.rebinds, graph.deletions)  # none of its tensors went
        results = [Tensor(Node.from_buffer(buf, t.type, trace.backend)) for buf, t in
                   zip(outputs[: trace.n_outputs], trace.plan.function.outputs, strict=False)]
        n_rebound = len(trace.rebound)
        values = trace.plan.function.outputs
        rebound_at = slice(trace.n_outputs, trace.n_outputs + n_rebound)
        # (the lookup still current up to this call's own rebinding can be brought up to date
        # by looking up only the positions it rebinds, below)
        current = (trace.bound is bound and n_rebound > 0
                   and bound.epoch == (graph.rebinds, graph.deletions))
        fresh: list[Node | None] = []
        for ref, buf, value in zip(trace.rebound, outputs[rebound_at], values[rebound_at],
                                   strict=True):
            handle = ref()
            if handle is None:
                fresh.append(None)
                continue
            new = Node.from_buffer(buf, value.type, trace.backend)
            new.role = handle._node.role  # a parameter stays a parameter (hoisting)
            rebind(handle, new, 0)
            fresh.append(new)
        start = trace.n_outputs + n_rebound
        for ref, buf, value in zip(trace.grads_set, outputs[start:], values[start:],
                                   strict=True):
            owner = ref()
            if owner is not None:
                owner._grad = Tensor(Node.from_buffer(buf, value.type, trace.backend))
        for ref in trace.grads_cleared:
            owner = ref()
            if owner is not None:
                owner._grad = None
        if current and graph.rebinds - bound.epoch[0] == n_rebound \
                and graph.deletions == bound.epoch[1]:
            self._bind(trace, since=bound, fresh=fresh)
        return _unflatten(trace.out_spec, results)


def _writable_in_place(backend: Any, buffers: Sequence[Any], donated: frozenset[int],
                       arguments: frozenset[int], captured: frozenset[int]
                       ) -> tuple[frozenset[int], dict[int, Any]]:
    """The donated positions the backend may write in place, and their storages.

    `arguments` are the input positions of the function's arguments; `captured` holds the
    ids of the storages of the other inputs, the captured tensors (known from `_Bound`, so
    only the arguments' storages are looked up at each call).

    A donated buffer that views memory it does not own (a slice of a larger tensor), or whose
    memory another input of the same call reads, is copied instead: writing it would change
    tensors the caller did not donate, or inputs the program is still reading.
    """
    if not donated:
        return donated, {}
    storages = {pos: backend.storage(buffers[pos]) for pos in arguments}
    readers = Counter(map(id, storages.values()))
    in_place = frozenset(
        pos for pos in donated
        if storages[pos] is buffers[pos] and readers[id(buffers[pos])] == 1
        and id(buffers[pos]) not in captured
    )
    return in_place, {pos: storages[pos] for pos in in_place}


_live: weakref.WeakSet[CompiledFunction[Any, Any]] = weakref.WeakSet()


def cache_sizes() -> dict[str, int]:
    """How much every compile cache holds now, and its bound.

    Returns:
        ``plans`` / ``plan_capacity`` (the realization plan cache, OMNITENSOR_PLAN_CACHE_SIZE),
        ``hoisted`` / ``hoisted_capacity`` (cached parameter-only preludes), ``traces`` (kept
        by every live `compile`d function, each bounded by OMNITENSOR_TRACE_CACHE_SIZE),
        ``compiled_functions`` and ``trace_evictions``.
    """
    from .realize import hoist_cache, plan_cache

    functions = list(_live)
    return {
        "plans": len(plan_cache), "plan_capacity": plan_cache.capacity,
        "hoisted": len(hoist_cache), "hoisted_capacity": hoist_cache.max_entries,
        "traces": sum(len(f) for f in functions), "compiled_functions": len(functions),
        "trace_evictions": stats.trace_evictions,
    }


def spec_key(spec: Any) -> Any:
    """A hashable form of a flattened argument structure (static values must be hashable)."""
    try:
        hash(spec)
    except TypeError as error:
        raise TraceError(
            f"compile: a non-tensor argument is not hashable ({error}); pass tensors or "
            "hashable Python values"
        ) from None
    return spec


def compile(fn: Callable[P, R] | None = None, *, donate: Sequence[int] = ()) -> Any:
    """Trace `fn` once per input signature and replay the compiled plan afterwards.

    Args:
        fn: a function of tensors (and hashable static values) returning a pytree of tensors.
        donate: positions of arguments whose tensors (nested ones included) the call may
            overwrite; using such a tensor after the call raises.

    Returns:
        A `CompiledFunction` (or a decorator when `fn` is omitted).
    """
    if fn is None:
        return functools.partial(compile, donate=donate)
    return CompiledFunction(fn, donate)
