"""SSA editing of a `Function` in place (`Rewriter`) and the greedy pattern driver.

The rewriter keeps use-lists and program order incrementally, so a pattern's edit costs O(uses),
not O(program). Instruction ids are stable; an instruction changed in place gets its `version`
bumped, which is what the driver's per-(pattern, instruction) failure cache is keyed by.
Patterns themselves live in `passes/`; the registry in `registry`.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, final

import numpy as np

from ..errors import VerificationError
from ..ir.builder import infer_types, normalize_attrs
from ..ir.opdef import OpDef, Trait, all_ops
from ..ir.program import Function, Instruction
from ..ir.types import TensorType, Value
from .registry import Pattern

__all__ = [
    "DriverResult",
    "Rewriter",
    "apply_patterns",
    "constant_array",
    "is_pure",
    "opdef_or_none",
    "splat_value",
    "view",
]

logger = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]

# Ops with effects beyond their results: the collectives (`Trait.COLLECTIVE`; every rank must run
# them, in the same order). RNG is keyed (the same key gives the same bits), so it is pure.
_IMPURE: dict[str, bool] = {}


def is_pure(op: str) -> bool:
    """True when an instruction of `op` may be removed, merged, folded or hoisted."""
    impure = _IMPURE.get(op)
    if impure is None:
        opdef = opdef_or_none(op)
        impure = opdef is not None and opdef.has(Trait.COLLECTIVE)
        _IMPURE[op] = impure
    return not impure


_OPDEFS: dict[str, OpDef] = {}


def opdef_or_none(name: str) -> OpDef | None:
    """The op named `name`, or None while it is not declared (patterns look ops up lazily)."""
    found = _OPDEFS.get(name)
    if found is None:
        # NOTE: all_ops() copies the registry, so it is consulted only on a miss.
        _OPDEFS.update(all_ops())
        found = _OPDEFS.get(name)
    return found


def view(name: str, inst: Instruction | None) -> Any:
    """The typed view of `inst` when it is an instance of op `name`, else None.

    Looked up by name at call time, so pattern modules import before every op family exists.
    """
    if inst is None or inst.op != name:
        return None
    opdef = opdef_or_none(name)
    return None if opdef is None else opdef.view.match(inst)


@final
class Rewriter:
    """Edits one `Function` in place, keeping use-lists and program order up to date.

    Program order is a doubly linked list over instruction ids; `commit` writes it back to
    ``function.body`` (every driver and pass calls it before returning).

    Args:
        function: the function to edit (mutated).
        on_change: called with every instruction that was inserted or changed, and with every
            instruction whose operand lost a use (the driver's worklist hook).
    """

    def __init__(self, function: Function,
                 on_change: Callable[[Instruction], None] | None = None) -> None:
        self.function = function
        self.on_change = on_change
        self._insts: dict[int, Instruction] = {}
        self._next: dict[int, int | None] = {}
        self._prev: dict[int, int | None] = {}
        self._head: int | None = None
        self._tail: int | None = None
        self._producer: dict[int, Instruction] = {}
        # value id -> {user instruction id: number of operand slots it fills}
        self._users: dict[int, dict[int, int]] = {}
        self._output_uses: Counter[int] = Counter()
        self.inserted = 0
        self.erased = 0
        self.replaced = 0
        for inst in function.body:
            self._link_last(inst)
        for value in function.outputs:
            self._output_uses[value.id] += 1

    # --- queries ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Instruction]:
        """Instructions in program order (safe against erasing the current one)."""
        cur = self._head
        while cur is not None:
            nxt = self._next[cur]
            yield self._insts[cur]
            cur = nxt

    def __len__(self) -> int:
        return len(self._insts)

    def get(self, inst_id: int) -> Instruction | None:
        """The live instruction with `inst_id`, or None when erased."""
        return self._insts.get(inst_id)

    def producer(self, value: Value) -> Instruction | None:
        """The instruction that defines `value`, or None for a function input."""
        return self._producer.get(value.id)

    def users(self, value: Value) -> list[Instruction]:
        """Instructions using `value` as an operand (each once)."""
        return [self._insts[i] for i in self._users.get(value.id, {})]

    def use_count(self, value: Value) -> int:
        """Operand slots plus function outputs that read `value`."""
        return sum(self._users.get(value.id, {}).values()) + self._output_uses[value.id]

    def is_dead(self, inst: Instruction) -> bool:
        """True when no result of `inst` is used."""
        return all(self.use_count(v) == 0 for v in inst.results)

    # --- edits --------------------------------------------------------------------------------

    def replace_all_uses(self, old: Value, new: Value) -> int:
        """Make every user of `old` (and the function outputs) use `new` instead.

        Returns:
            The number of instructions changed.

        Raises:
            VerificationError: when the types differ.
        """
        if old is new:
            return 0
        if old.type != new.type:
            raise VerificationError(
                f"rewrite: replacement type differs (got {new.type}, expected {old.type})"
            )
        changed = 0
        for user_id in list(self._users.get(old.id, {})):
            user = self._insts[user_id]
            self._set_operands(user, [new if v is old else v for v in user.operands])
            changed += 1
        n_out = self._output_uses.pop(old.id, 0)
        if n_out:
            outs = self.function.outputs
            self.function.outputs = [new if v is old else v for v in outs]
            self._output_uses[new.id] += n_out
        self.replaced += 1
        producer = self._producer.get(old.id)
        if producer is not None:
            self._notify(producer)
        return changed

    def set_operands(self, inst: Instruction, operands: Sequence[Value],
                     attrs: dict[str, Any] | None = None) -> None:
        """Change `inst` in place (operands, and attributes merged over the old ones when given).

        Bumps the instruction's version and re-checks its result types.

        Raises:
            VerificationError: when the new operands/attributes infer other result types.
        """
        opdef = _opdef(inst.op)
        full = inst.attrs
        if attrs is not None:
            full = opdef.attr_defaults(normalize_attrs({**inst.attrs, **attrs}))
        types = infer_types(opdef, [v.type for v in operands], full)
        if tuple(v.type for v in inst.results) != types:
            raise VerificationError(
                f"{inst.op}: in-place change alters result types (got {types}, expected "
                f"{tuple(v.type for v in inst.results)})",
                op=inst.op,
            )
        inst.attrs = full
        self._set_operands(inst, operands)

    def insert_before(self, anchor: Instruction, op: str, /, *operands: Value,
                      **attrs: Any) -> tuple[Value, ...]:
        """Insert ``op(*operands, **attrs)`` right before `anchor`; return its results.

        Result types are inferred with the op's own rule (`builder.infer_types`), so an
        ill-typed insertion fails here, naming the op. Operands must be defined before `anchor`.
        """
        opdef = _opdef(op)
        full = opdef.attr_defaults(normalize_attrs(attrs))
        types = infer_types(opdef, [v.type for v in operands], full)
        results = tuple(self.function.new_value(t) for t in types)
        inst = Instruction(self.function.new_instruction_id(), op, operands, full, results)
        self._link_before(inst, anchor.id)
        self.inserted += 1
        self._notify(inst)
        return results

    def emit_before(self, anchor: Instruction, op: str, /, *operands: Value,
                    **attrs: Any) -> Value:
        """`insert_before` for a single-result op; returns the result."""
        results = self.insert_before(anchor, op, *operands, **attrs)
        if len(results) != 1:
            raise VerificationError(f"{op}: has {len(results)} results; use insert_before", op=op)
        return results[0]

    def replace_with(self, inst: Instruction, op: str, /, *operands: Value,
                     **attrs: Any) -> Value:
        """Insert ``op(*operands, **attrs)`` before `inst`, use it instead of `inst`'s result."""
        new = self.emit_before(inst, op, *operands, **attrs)
        self.replace_all_uses(inst.result, new)
        return new

    def erase(self, inst: Instruction) -> None:
        """Remove `inst`, whose results must be unused.

        Raises:
            VerificationError: when a result still has a use.
        """
        for v in inst.results:
            if self.use_count(v):
                raise VerificationError(
                    f"{inst.op}: cannot erase #{inst.id}, result %{v.id} still has uses",
                    op=inst.op,
                )
        for v in inst.results:
            self._producer.pop(v.id, None)
            self._users.pop(v.id, None)
        self._drop_uses(inst)
        self._unlink(inst)
        self.erased += 1

    def erase_dead(self, roots: Iterable[Instruction] | None = None) -> int:
        """Erase unused pure instructions (transitively); return how many were erased.

        Args:
            roots: where to start; None scans the whole function.
        """
        stack = list(self if roots is None else roots)
        count = 0
        while stack:
            inst = stack.pop()
            if inst.id not in self._insts or not is_pure(inst.op) or not self.is_dead(inst):
                continue
            producers = [self._producer.get(v.id) for v in inst.operands]
            self.erase(inst)
            count += 1
            stack.extend(p for p in producers if p is not None)
        return count

    def commit(self) -> Function:
        """Write program order back into ``function.body``; return the function."""
        self.function.body = list(self)
        return self.function

    # --- helpers ------------------------------------------------------------------------------

    def splat(self, anchor: Instruction, scalar: Any, type: TensorType) -> Value:
        """A value of `type` filled with `scalar`, inserted before `anchor`.

        Uses a scalar constant plus `broadcast_in_dim` for non-trivial shapes when that op is
        declared, so no large constant is materialized.
        """
        if type.size <= 16 or opdef_or_none("broadcast_in_dim") is None:
            return self.emit_before(anchor, "constant",
                                    value=np.full(type.shape, scalar, dtype=type.dtype.np))
        scalar_value = self.emit_before(anchor, "constant",
                                        value=np.asarray(scalar, dtype=type.dtype.np))
        return self.emit_before(anchor, "broadcast_in_dim", scalar_value, shape=type.shape,
                                dims=())

    def _set_operands(self, inst: Instruction, operands: Sequence[Value]) -> None:
        self._drop_uses(inst)
        inst.operands = tuple(operands)
        self._add_uses(inst)
        inst.version += 1
        self._notify(inst)
        # Users' patterns look at this instruction (one level up), so they are revisited too.
        for v in inst.results:
            for user_id in self._users.get(v.id, {}):
                self._notify(self._insts[user_id])

    def _add_uses(self, inst: Instruction) -> None:
        for v in inst.operands:
            users = self._users.setdefault(v.id, {})
            users[inst.id] = users.get(inst.id, 0) + 1

    def _drop_uses(self, inst: Instruction) -> None:
        for v in set(inst.operands):
            users = self._users.get(v.id)
            if users is not None:
                users.pop(inst.id, None)
            producer = self._producer.get(v.id)
            if producer is not None and producer is not inst:
                self._notify(producer)

    def _notify(self, inst: Instruction) -> None:
        if self.on_change is not None:
            self.on_change(inst)

    def _register(self, inst: Instruction) -> None:
        if inst.id in self._insts:
            raise VerificationError(f"rewrite: duplicate instruction id #{inst.id}")
        self._insts[inst.id] = inst
        for v in inst.results:
            self._producer[v.id] = inst
        self._add_uses(inst)

    def _link_last(self, inst: Instruction) -> None:
        self._register(inst)
        self._prev[inst.id], self._next[inst.id] = self._tail, None
        if self._tail is None:
            self._head = inst.id
        else:
            self._next[self._tail] = inst.id
        self._tail = inst.id

    def _link_before(self, inst: Instruction, anchor_id: int) -> None:
        if anchor_id not in self._insts:
            raise VerificationError(f"rewrite: anchor #{anchor_id} is not in the function")
        self._register(inst)
        prev = self._prev[anchor_id]
        self._prev[inst.id], self._next[inst.id] = prev, anchor_id
        self._prev[anchor_id] = inst.id
        if prev is None:
            self._head = inst.id
        else:
            self._next[prev] = inst.id

    def _unlink(self, inst: Instruction) -> None:
        prev, nxt = self._prev.pop(inst.id), self._next.pop(inst.id)
        if prev is None:
            self._head = nxt
        else:
            self._next[prev] = nxt
        if nxt is None:
            self._tail = prev
        else:
            self._prev[nxt] = prev
        del self._insts[inst.id]


def _opdef(name: str) -> OpDef:
    found = opdef_or_none(name)
    if found is not None:
        return found
    from ..ir.opdef import get_op

    return get_op(name)  # raises, naming the unknown op and the closest known ones


# --- value inspection helpers for patterns ----------------------------------------------------


def constant_array(rw: Rewriter, value: Value) -> Array | None:
    """The data of `value` when a `constant` instruction defines it, else None."""
    inst = rw.producer(value)
    if inst is None or inst.op != "constant":
        return None
    data = inst.attrs.get("value")
    return data if isinstance(data, np.ndarray) else np.asarray(data)


_SPLAT_THROUGH = ("broadcast_in_dim", "reshape", "transpose")


def splat_value(rw: Rewriter, value: Value, *, depth: int = 4) -> Any:
    """The one scalar every element of `value` equals, looking through constant broadcasts.

    Returns:
        A numpy scalar, or None when `value` is not known to be a splat.
    """
    for _ in range(depth + 1):
        data = constant_array(rw, value)
        if data is not None:
            if data.size == 0:
                return None
            first = data.reshape(-1)[0]
            same = (data == first) | ((data != data) & (first != first))  # NaN splats too
            if data.size > 1 and not bool(np.all(same)):
                return None
            return first
        inst = rw.producer(value)
        if inst is None or inst.op not in _SPLAT_THROUGH:
            return None
        value = inst.operands[0]
    return None


# --- the greedy driver ------------------------------------------------------------------------


@dataclass
class DriverResult:
    """What one `apply_patterns` run did.

    Attributes:
        rewrites: successful applications per pattern name.
        attempts: pattern calls per pattern name (successful or not).
        cache_skips: attempts avoided by the failure cache, per pattern name.
        erased_dead: dead pure instructions erased along the way.
        events: ``(pattern name, instruction id)`` for each rewrite, in order.
    """

    rewrites: Counter[str] = field(default_factory=Counter)
    attempts: Counter[str] = field(default_factory=Counter)
    cache_skips: Counter[str] = field(default_factory=Counter)
    erased_dead: int = 0
    events: list[tuple[str, int]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when anything was rewritten or erased."""
        return bool(self.rewrites) or self.erased_dead > 0

    @property
    def total_rewrites(self) -> int:
        """Sum of `rewrites`."""
        return sum(self.rewrites.values())


def _fingerprint(rw: Rewriter, inst: Instruction) -> tuple[int, ...]:
    # NOTE: patterns look one level up (the producers of the operands), so a producer changed in
    # place must invalidate a cached failure too: the key holds their versions beside inst's own.
    key = [inst.version]
    for v in inst.operands:
        producer = rw.producer(v)
        key.append(-1 if producer is None else producer.version)
        key.append(-1 if producer is None else producer.id)
    return tuple(key)


def apply_patterns(function: Function, patterns: Sequence[Pattern], *, erase_dead: bool = True,
                   max_rewrites: int = 100_000) -> DriverResult:
    """Apply `patterns` greedily to `function` (in place) until none fires.

    A worklist of instruction ids starts in program order; an instruction is revisited when it
    changed, was inserted, or one of its operands or users changed. A pattern that failed on an
    instruction is not retried until that instruction (or an operand's producer) changes.

    Args:
        function: the function to rewrite (mutated; `body` rewritten on return).
        patterns: the patterns, tried in order on each instruction.
        erase_dead: erase pure instructions whose results are unused as they are met.
        max_rewrites: a safety bound against patterns that undo each other.

    Returns:
        The counts and events of the run.
    """
    result = DriverResult()
    by_op: dict[str, list[Pattern]] = {}
    generic = [p for p in patterns if p.ops is None]
    for p in patterns:
        for op in p.ops or ():
            by_op.setdefault(op, []).append(p)
    queued: set[int] = set()
    worklist: deque[int] = deque()

    def push(inst: Instruction) -> None:
        if inst.id not in queued:
            queued.add(inst.id)
            worklist.append(inst.id)

    rw = Rewriter(function, on_change=push)
    for first in rw:
        push(first)
    failed: dict[tuple[str, int], tuple[int, ...]] = {}
    total = 0
    while worklist:
        inst_id = worklist.popleft()
        queued.discard(inst_id)
        current = rw.get(inst_id)
        if current is None:
            continue
        inst = current
        if erase_dead and is_pure(inst.op) and rw.is_dead(inst):
            result.erased_dead += rw.erase_dead([inst])
            continue
        candidates = by_op.get(inst.op, [])
        for p in (*candidates, *generic) if generic else candidates:
            key = (p.name, inst.id)
            fingerprint = _fingerprint(rw, inst)
            if failed.get(key) == fingerprint:
                result.cache_skips[p.name] += 1
                continue
            result.attempts[p.name] += 1
            if p(rw, inst):
                failed.pop(key, None)
                result.rewrites[p.name] += 1
                result.events.append((p.name, inst.id))
                total += 1
                if rw.get(inst.id) is not None:
                    push(inst)
                break
            failed[key] = fingerprint
        if total >= max_rewrites:
            logger.warning("rewrite: stopped after %d rewrites (patterns may undo each other)",
                           total)
            break
    rw.commit()
    return result
