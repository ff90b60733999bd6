"""The compiler: a PTIR `Function` to a `Plan`, a flat list of pre-bound steps over value slots.

Each step is a closure made here, at compile time, that reads its operand slots and writes its
result slots; running a plan is one loop over those closures (no per-op dispatch). Steps are:
views and everything without a faster kernel (the core's numpy reference kernels), fused
elementwise groups (`codegen`), and each instruction's entry of the lowering table (`lowering`:
BLAS products, the composites' kernels). Fused structure arrives as composites; nothing here
re-matches decompositions. Values that a
step writes into memory it is given ("owned" values) get buffers from the memory planner:
liveness over the plan, buffers reused once their last reader ran, allocated once per
executable; only buffers that escape as outputs are fresh per run.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from omnitensor.dtypes import float32
from omnitensor.ir.opdef import get_op
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType

from . import codegen, pool, steps
from .batched import batch_groups
from .codegen import FusedGroup
from .drafts import Array, Draft, Owned, Slots, Step, one_element
from .lowering import Lower, lower
from .steps import Epilogue
from .tier import reference_runner

__all__ = ["Plan", "build_plan"]

#: Buffers are aligned to cache lines (and AVX registers).
_ALIGN: Final = 64

#: Elements of the largest value from which a program counts as large: its composites run
#: compiled kernels at every size (a model with weights of a million elements and more).
LARGE_PROGRAM: Final = 1 << 20



@dataclass
class Plan:
    """An executable plan.

    Attributes:
        steps: the pre-bound calls, in order.
        template: initial slot contents (constants; arena arrays are added per arena).
        input_slots: slot of each function input.
        output_slots: slot of each function output.
        arena_spec: (slot index, byte offset into its buffer) per arena-backed value slot.
        arena_sizes: byte capacity of each arena buffer.
        kinds: the step kinds in order (``ref``, ``fused``, ``blas``, ``rows``) for stats.
        labels: one line per step (kind and ops) for profiles and dumps.
        groups: the fused groups (for tests and dumps).
    """

    steps: list[Step]
    template: list[Any]
    input_slots: list[int]
    output_slots: list[int]
    arena_spec: dict[int, tuple[int, tuple[int, ...], np.dtype[Any]]]
    arena_sizes: list[int]
    kinds: list[str]
    groups: list[FusedGroup]
    labels: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arena: list[Any] | None = None

    def new_arena(self) -> list[Any]:
        """Slot contents with fresh arena buffers (one allocation per arena buffer)."""
        raws = []
        for size in self.arena_sizes:
            raw = np.empty(size + _ALIGN, np.uint8)
            start = (-raw.ctypes.data) % _ALIGN
            raws.append(raw[start:start + size])
        slots = list(self.template)
        for slot, (buf, shape, dtype) in self.arena_spec.items():
            nbytes = math.prod(shape) * dtype.itemsize
            slots[slot] = raws[buf][:nbytes].view(dtype).reshape(shape)
        return slots

    def run(self, inputs: Sequence[Any], donated: frozenset[int] = frozenset()) -> list[Any]:
        """Run the steps on `inputs`; return the output slots.

        Inputs whose positions are in `donated` may be written in place (their callers gave
        them up), e.g. a KV cache by `dynamic_update_slice`.
        """
        # NOTE: the arena is built on first use and reused; a concurrent run of the same plan
        # gets a private one instead of waiting (or racing).
        owned = self._lock.acquire(blocking=False)
        try:
            if owned:
                if self._arena is None:
                    self._arena = self.new_arena()
                slots = list(self._arena)
            else:
                slots = self.new_arena()
            for slot, array in zip(self.input_slots, inputs, strict=True):
                slots[slot] = array
            slots[-1] = donated
            with np.errstate(all="ignore"):
                for step in self.steps:
                    step(slots)
            return [slots[s] for s in self.output_slots]
        finally:
            if owned:
                self._lock.release()


# --- step makers --------------------------------------------------------------------------------


#: A fused kernel's cost per element in additions: transcendental functions and the activation
#: composites (polynomials around an exponential) ~8, division and square roots ~4, the rest 1.
_OP_COST: Final = {
    **dict.fromkeys(("exp", "expm1", "log", "log1p", "tanh", "erf", "logistic", "sin", "cos",
                     "pow", "gelu", "silu", "swiglu", "geglu"), 8),
    **dict.fromkeys(("div", "sqrt", "rsqrt"), 4),
}


def _split_work(group: FusedGroup, size: int) -> int:
    """A fused kernel's work in `pool.MIN_SPLIT` units: elements times cost, in eighths.

    Why not the element count: a hand-off to the pool costs ~100 us, which a cheap kernel
    does not save until about a million elements. An add and a bias add over (32, 28, 384)
    (an encoder's residual) took 204 us on one thread against 260 on two; over
    (32, 28, 1536), 815 against 553 us. A GELU pays from the 131072 elements it did before.
    """
    cost = sum(_OP_COST.get(inst.op, 1) for inst in group.insts)
    return max(1, size * cost // 8)


def _fused_step(group: FusedGroup, index: int, large: bool) -> Draft:
    ins, outs = list(group.inputs), list(group.outputs)
    size = math.prod(group.shape)
    work = _split_work(group, size)
    owned = [Owned(v, group.shape, _dtype_of(group, v), index) for v in outs]
    small = not large and size < codegen.min_elements()

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        out_get = [getters[v] for v in outs]

        def compiled() -> Step:
            kernels: dict[tuple[int, tuple[bool, ...], tuple[bool, ...], tuple[bool, ...]],
                          tuple[Callable[..., Any], Callable[..., Any]]] = {}

            def step(slots: Slots) -> None:
                arrays = [slots[i] for i in ins]
                results = [get(slots) for get in out_get]
                # a scalar broadcast to the shape (every stride 0) is read as one element
                scalars = tuple(a.ndim > 0 and a.size > 0 and not any(a.strides)
                                for a in arrays)
                split = _row_split(arrays)
                # a bias broadcast over rows is read as one row by a (rows, cols) kernel
                vectors = tuple(not s and not a.flags.c_contiguous and _repeats(a, split)
                                for a, s in zip(arrays, scalars, strict=True)) if split else ()
                # and a per-row value broadcast along the rows as one column
                columns = tuple(not s and not v and not a.flags.c_contiguous
                                and _per_row(a, split) for a, s, v in
                                zip(arrays, scalars, vectors, strict=True)) if split else ()
                key = (split, vectors, scalars, columns)
                found = kernels.get(key)
                if found is None:
                    found = kernels[key] = codegen.kernel_for(group, vectors, scalars, columns)
                kernel, twin = found
                if split:
                    rows = math.prod(group.shape[:split])
                    cols = size // rows
                    operands = [one_element(a) if s else a[(0,) * split].reshape(cols) if v else
                                np.ascontiguousarray(a[(Ellipsis, *(0,) * (a.ndim - split))]
                                                     ).reshape(rows) if c else
                                np.ascontiguousarray(a).reshape(rows, cols)
                                for a, v, s, c in zip(arrays, vectors, scalars, columns,
                                                      strict=True)]
                    whole = [v or s for v, s in zip(vectors, scalars, strict=True)]
                    outputs = [r.reshape(rows, cols) for r in results]

                    def part(lo: int, hi: int) -> None:
                        kernel(hi - lo, cols, *[a if w else a[lo:hi] for a, w in
                                                zip(operands, whole, strict=True)],
                               *[r[lo:hi] for r in outputs])

                    ranges = pool.worker_ranges(rows, work)
                    if ranges is None:
                        pool.parallel_for(rows, part, work=work)
                    else:
                        twin(*ranges, rows, cols, *operands, *outputs)
                else:
                    # NOTE: other strided and broadcast operands are copied contiguous first:
                    # one extra pass over them, against a loop nest over arbitrary strides that
                    # LLVM does not vectorize (30x slower for a tanh-GELU over (576, 512)).
                    args = [one_element(a) if s else a.reshape(-1) if a.flags.c_contiguous
                            else np.ascontiguousarray(a).reshape(-1)
                            for a, s in zip(arrays, scalars, strict=True)]
                    flats = [*args, *[r.reshape(-1) for r in results]]
                    ranged = [*[not s for s in scalars], *[True] * len(results)]
                    ranges = pool.worker_ranges(size, work, grain=64)
                    if ranges is None:
                        pool.parallel_for(size, lambda lo, hi: kernel(
                            hi - lo, *[a[lo:hi] if r else a for a, r in
                                       zip(flats, ranged, strict=True)]), work=work, grain=64)
                    else:
                        twin(*ranges, size, *flats)
                for v, r in zip(outs, results, strict=True):
                    slots[v] = r

            return step

        if small:
            return reference_runner(group.insts, group.literals, outs, out_get)
        return compiled()

    # NOTE: a small group runs the reference kernels: its kind says so (profiles, labels).
    return Draft(ins, outs, make, owned, "ref" if small else "fused",
                 group=None if small else group)


def _repeats(a: Array, split: int) -> bool:
    """True when `a` is one C-contiguous block repeated over its first `split` axes."""
    return (0 < split < a.ndim and not any(a.strides[:split])
            and a[(0,) * split].flags.c_contiguous)


def _per_row(a: Array, split: int) -> bool:
    """True when `a` holds one value per row (of the first `split` axes): zero strides after."""
    return 0 < split < a.ndim and not any(a.strides[split:])


def _row_split(arrays: Sequence[Array]) -> int:
    """How many leading axes a fused kernel runs as rows (0: every operand is read flat).

    Those the first broadcast operand implies: a bias of (C,) broadcast to (B, T, C) repeats
    over 2 axes, and is read in place as one row of C, not copied to (B, T, C); a (B, T, 1)
    statistic broadcast to (B, T, C) holds one value per row of C, read as a column of B x T.
    """
    for a in arrays:
        if a.flags.c_contiguous or not a.ndim:
            continue
        split = 0
        while split < a.ndim and a.strides[split] == 0:
            split += 1
        if _repeats(a, split) and a[(0,) * split].size >= 16:
            return split
        tail = a.ndim
        while tail > 0 and a.strides[tail - 1] == 0:
            tail -= 1
        if _per_row(a, tail) and math.prod(a.shape[tail:]) >= 16:
            return tail
    return 0


def _dtype_of(group: FusedGroup, value: int) -> np.dtype[Any]:
    for inst in group.insts:
        for v in inst.results:
            if v.id == value:
                assert isinstance(v.type, TensorType)
                return v.type.dtype.np
    raise AssertionError(value)


# --- grouping ----------------------------------------------------------------------------------


def _literal(fn_producers: dict[int, Instruction], value_id: int) -> Any | None:
    """The scalar a value holds when it is a one-element constant (maybe broadcast)."""
    inst = fn_producers.get(value_id)
    if inst is not None and inst.op == "broadcast_in_dim":
        inst = fn_producers.get(inst.operands[0].id)
    if inst is None or inst.op != "constant":
        return None
    array = inst.attrs["value"]
    if array.size != 1:
        return None
    return array.reshape(-1)[0].item()


_PASS_THROUGH: Final = frozenset({"constant", "broadcast_in_dim"})


#: The most instructions one fused kernel holds: a longer run is split into several kernels,
#: so a long chain never becomes one huge function for LLVM (compile time and memory grow
#: faster than linearly with its size). ``OMNITENSOR_CPU_MAX_FUSED`` overrides it.
MAX_FUSED = max(1, int(os.environ.get("OMNITENSOR_CPU_MAX_FUSED", "128")))


def epilogues(function: Function) -> dict[int, Epilogue]:
    """The adds after float32 products that the products' steps perform, by product index.

    A product on `gemm`'s tiles (`steps.takes_addends`) whose only reader is an ``add`` of a
    bias (a (N,) vector broadcast along its rows, read before its broadcast) or of a value
    of its shape (a residual; or a bias the trace broadcast already, which `gemm` tells by
    its strides when it runs), and that add's only reader another such add: a linear layer's
    bias, and the residual connection after it. Their operands must exist when the product
    runs (made before it, or the function's inputs), and the sums in between be read by
    nothing else (a training step keeps neither: the backward reads the product's inputs).
    Then a GELU or SiLU whose only operand is the result, where nothing else reads that (an
    inference feed-forward; a training step keeps the pre-activation for its backward).
    """
    producers = {v.id: i for i, inst in enumerate(function.body) for v in inst.results}
    users: dict[int, list[int]] = {}
    for idx, inst in enumerate(function.body):
        for v in inst.operands:
            users.setdefault(v.id, []).append(idx)
    outputs = {v.id for v in function.outputs}
    found: dict[int, Epilogue] = {}
    for idx, inst in enumerate(function.body):
        kind = inst.results[0].type
        if (inst.op != "dot_general" or not isinstance(kind, TensorType)
                or kind.dtype != float32 or not steps.takes_addends(inst)):
            continue
        value = inst.results[0].id
        addends: list[int] = []
        absorbed: list[int] = []
        while len(absorbed) < _MOST_ADDENDS:
            readers = users.get(value, [])
            if value in outputs or len(readers) != 1:
                break
            add = function.body[readers[0]]
            if (add.op != "add" or add.results[0].type != kind
                    or len({v.id for v in add.operands}) != 2):
                break
            other = next(v for v in add.operands if v.id != value)
            made = producers.get(other.id, -1)
            source = function.body[made] if made >= 0 else None
            if (source is not None and source.op == "broadcast_in_dim"
                    and tuple(source.attrs["dims"]) == (len(kind.shape) - 1,)
                    and source.operands[0].type == TensorType(kind.shape[-1:], float32)
                    and producers.get(source.operands[0].id, -1) < idx):
                addends.append(source.operands[0].id)
            elif other.type == kind and made < idx:
                addends.append(other.id)
            else:
                break
            absorbed.append(readers[0])
            value = add.results[0].id
        activation = None
        readers = users.get(value, [])
        if value not in outputs and len(readers) == 1:
            after = function.body[readers[0]]
            if after.results[0].type == kind and after.op in _ACTIVATIONS:
                tanh = after.attrs.get("approximate") == "tanh"
                activation = "gelu_tanh" if tanh else after.op
                absorbed.append(readers[0])
                value = after.results[0].id
        if absorbed:
            found[idx] = Epilogue(value, tuple(addends), tuple(absorbed), activation)
    return found


#: Activation ops a product applies after its adds (`epilogues`; named as in
#: `gemm.ACTIVATIONS`, the tanh GELU as ``gelu_tanh``).
_ACTIVATIONS: Final = frozenset({"gelu", "silu"})


#: Most adds a product performs (`epilogues`): a bias and a residual.
_MOST_ADDENDS: Final = 2


def _groups(function: Function, absorbed: frozenset[int] = frozenset()) -> dict[int, FusedGroup]:
    """Fused groups keyed by the index of their last instruction in the body.

    A run longer than `MAX_FUSED` instructions is cut into several groups; `absorbed`
    instructions (a product's `epilogues`) are in none.

    A group is a run of fusible instructions of one shape, consecutive in program order except
    for constants and broadcasts in between (which do not read the group's values). Running the
    group where its last instruction stood keeps every dependency satisfied.
    """
    producers = {v.id: inst for inst in function.body for v in inst.results}
    users: dict[int, set[int]] = {}
    for idx, inst in enumerate(function.body):
        for v in inst.operands:
            users.setdefault(v.id, set()).add(idx)
    outputs = {v.id for v in function.outputs}
    runs: list[list[int]] = []
    current: list[int] = []
    shape: tuple[int, ...] | None = None
    members: set[int] = set()

    def close() -> None:
        nonlocal current, shape, members
        if current:
            runs.append(current)
        current, shape, members = [], None, set()

    for idx, inst in enumerate(function.body):
        result = inst.results[0].type
        if idx in absorbed:
            close()
        elif codegen.can_fuse(inst) and isinstance(result, TensorType):
            if (shape is not None and result.shape != shape) or len(current) >= MAX_FUSED:
                close()
            shape = result.shape
            current.append(idx)
            members.update(v.id for v in inst.results)
        elif inst.op in _PASS_THROUGH and not any(v.id in members for v in inst.operands):
            continue
        else:
            close()
    close()
    groups: dict[int, FusedGroup] = {}
    for run in runs:
        insts = [function.body[i] for i in run]
        if not _worth_fusing(insts):
            continue
        inside = {v.id for i in insts for v in i.results}
        last = run[-1]
        inputs: list[int] = []
        literals: dict[int, Any] = {}
        for inst in insts:
            for v in inst.operands:
                if v.id in inside or v.id in inputs or v.id in literals:
                    continue
                lit = _literal(producers, v.id)
                if lit is not None:
                    literals[v.id] = lit
                else:
                    inputs.append(v.id)
        outs = [v for v in sorted(inside)
                if v in outputs or any(u > last or function.body[u].results[0].id not in inside
                                       for u in users.get(v, ()))]
        assert isinstance(insts[0].results[0].type, TensorType)
        groups[last] = FusedGroup(insts, insts[0].results[0].type.shape, inputs, literals, outs)
    return groups


def _worth_fusing(insts: list[Instruction]) -> bool:
    # NOTE: a lone cheap op is as fast in numpy and would cost a numba compile, unless it is
    # large enough for the pool's threads (numpy runs on one); a lone float32 transcendental
    # is worth it (vectorized approximations instead of libm calls).
    if len(insts) > 1:
        return True
    inst = insts[0]
    result = inst.results[0].type
    dtype = getattr(result, "dtype", None)
    if isinstance(result, TensorType) and result.size >= pool.MIN_SPLIT:
        return True
    return dtype == float32 and inst.op in codegen.FAST_F32


# --- planning ---------------------------------------------------------------------------------


def build_plan(function: Function) -> Plan:
    """Compile a verified function into a `Plan` (groups, kernels, buffers)."""
    ends = epilogues(function)
    absorbed = frozenset(i for e in ends.values() for i in e.absorbed)
    groups = _groups(function, absorbed)
    grouped = {id(i) for g in groups.values() for i in g.insts}
    values = [*(i.value.type for i in function.inputs),
              *(v.type for inst in function.body for v in inst.results)]
    # NOTE: a program with a fused group above the reference tier (elementwise work over
    # activations: a training step, a prefill) runs its small groups and composites compiled
    # too: a training step's AdamW updates of (128,) biases ran 30 numpy calls each, and
    # share the kernel of its (128, 128) weights' update (kernels take sizes as arguments). A
    # program that is large by its weights alone (a decode step) compiles its composites at
    # every size but leaves its few small groups to numpy: compiled, a first chat prompt took
    # 0.14 s longer, for no faster decode.
    busy = any(math.prod(g.shape) >= codegen.min_elements() for g in groups.values())
    large = busy or max((math.prod(getattr(t, "shape", ())) for t in values), default=0) >= (
        LARGE_PROGRAM)
    drafts: list[Draft] = []
    # NOTE: the last slot holds the run's donated input positions (read by in-place steps).
    template: list[Any] = [None] * (function._next_value + 1)
    for idx, inst in enumerate(function.body):
        if idx in groups:
            group = groups[idx]
            drafts.append(_fused_step(group, len(drafts), busy))
            ops = "+".join(i.op for i in group.insts)
            drafts[-1].label = f"{drafts[-1].kind}:{ops}{group.shape}"
            continue
        if id(inst) in grouped or idx in absorbed:
            continue
        if inst.op == "constant":
            template[inst.results[0].id] = get_op("constant").reference(**inst.attrs)
            continue
        end = ends.get(idx)
        draft = lower(Lower(function, idx, len(drafts), large, end), inst)
        adds = "" if end is None else "".join(
            f"+{function.body[i].op}" for i in end.absorbed)
        draft.label = f"{draft.kind}:{inst.op}{adds}{_shape_of(inst)}"
        drafts.append(draft)
    drafts = batch_groups(drafts, lambda g: _split_work(g, math.prod(g.shape)))
    drafts = _drop_dead(drafts, {v.id for v in function.outputs})
    return _assign_buffers(function, drafts, template, list(groups.values()))


def _shape_of(inst: Instruction) -> tuple[int, ...] | str:
    result = inst.results[0].type
    return result.shape if isinstance(result, TensorType) else str(result)


def _drop_dead(drafts: list[Draft], outputs: set[int]) -> list[Draft]:
    """Remove steps none of whose results is read (broadcasts of inlined literals)."""
    live = set(outputs)
    kept: list[Draft] = []
    for draft in reversed(drafts):
        if draft.kind == "ref" and not any(w in live for w in draft.writes):
            continue
        live.update(draft.reads)
        kept.append(draft)
    kept.reverse()
    for i, draft in enumerate(kept):
        for o in draft.owned:
            o.step = i
    return kept


def _assign_buffers(function: Function, drafts: list[Draft], template: list[Any],
                    groups: list[FusedGroup]) -> Plan:
    # Which owned buffers may a value reference? Views and reference kernels may return views
    # of their operands, so their results alias everything their operands alias.
    aliases: dict[int, frozenset[int]] = {}
    owned_by_value: dict[int, Owned] = {}
    for draft in drafts:
        for o in draft.owned:
            owned_by_value[o.value] = o
        # a step's other results may be views of its own buffers too (the joined products)
        viewed = draft.reads if draft.viewed is None else draft.viewed
        carried = frozenset().union(*(aliases.get(r, frozenset()) for r in viewed),
                                    (o.value for o in draft.owned))
        for w in draft.writes:
            aliases[w] = frozenset({w}) if w in owned_by_value else carried
    last_use: dict[int, int] = {}
    for i, draft in enumerate(drafts):
        for r in draft.reads:
            for b in aliases.get(r, ()):
                last_use[b] = max(last_use.get(b, -1), i)
    escaping = set().union(*(aliases.get(v.id, frozenset()) for v in function.outputs))
    # Liveness-based reuse: a buffer returns to the pool after its last reader; a step never
    # gets a buffer one of its own operands still lives in.
    free: list[tuple[int, int]] = []  # (capacity, arena buffer index)
    sizes: list[int] = []
    spec: dict[int, tuple[int, tuple[int, ...], np.dtype[Any]]] = {}
    live: list[tuple[int, int, int]] = []  # (last use, buffer index, capacity)
    for i, draft in enumerate(drafts):
        for entry in [e for e in live if e[0] < i]:
            live.remove(entry)
            free.append((entry[2], entry[1]))
        for o in draft.owned:
            if o.value in escaping:
                continue
            need = -(-max(o.nbytes, 1) // _ALIGN) * _ALIGN
            fits = sorted((cap, buf) for cap, buf in free if cap >= need)
            if fits:
                cap, buf = fits[0]
                free.remove((cap, buf))
            else:
                cap, buf = need, len(sizes)
                sizes.append(need)
            spec[o.value] = (buf, o.shape, o.dtype)
            live.append((last_use.get(o.value, i), buf, cap))
    steps: list[Step] = []
    for draft in drafts:
        getters: dict[int, Callable[[Slots], Array]] = {}
        for o in draft.owned:
            getters[o.value] = _getter(o, o.value in spec)
        steps.append(draft.make(getters))
    return Plan(
        steps=steps,
        template=template,
        input_slots=[i.value.id for i in function.inputs],
        output_slots=[v.id for v in function.outputs],
        arena_spec=spec,
        arena_sizes=sizes,
        kinds=[d.kind for d in drafts],
        groups=groups,
        labels=[d.label or d.kind for d in drafts],
    )


def _getter(owned: Owned, in_arena: bool) -> Callable[[Slots], Array]:
    if in_arena:
        slot = owned.value
        return lambda slots: slots[slot]
    return _OutputPool(owned.shape, owned.dtype)


class _OutputPool:
    """Buffers of one escaping value, reused once no one but the pool refers to them.

    Outputs are handed out fresh (a caller may keep them), but a repeated step whose previous
    outputs were dropped would otherwise fault in new pages every run (a fresh 64 MB output
    costs about twice a reused one here). A buffer the caller still holds, or holds a view
    of, has more references than the pool's own and is never touched.
    """

    _KEEP: Final = 2
    #: its buffers differ from run to run (steps keep nothing prepared for them)
    fresh: Final = True

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        self.shape, self.dtype = shape, dtype
        self.pool: list[Array] = []
        self.lock = threading.Lock()

    def __call__(self, slots: Slots) -> Array:
        if self.lock.acquire(blocking=False):
            try:
                for array in self.pool:
                    # references: the pool's list, `array`, getrefcount's argument
                    if sys.getrefcount(array) <= 3:
                        array.flags.writeable = True
                        return array
                fresh = np.empty(self.shape, self.dtype)
                if len(self.pool) < self._KEEP:
                    self.pool.append(fresh)
                return fresh
            finally:
                self.lock.release()
        return np.empty(self.shape, self.dtype)
