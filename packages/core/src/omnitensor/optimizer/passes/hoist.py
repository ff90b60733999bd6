"""Param-only hoisting: split work that depends only on parameters into a cached prelude.

Weight transposes, dequantization and RoPE tables depend on nothing but parameter inputs and
literals, so they need not run on every call. `split_param_only` moves them into a *prelude*
function whose outputs become extra inputs of the *main* function; `HoistCache` keeps the
prelude's outputs per (plan signature, parameter buffer versions), so an optimizer step (which
bumps the versions) recomputes them instead of serving stale values.

Contract of the split (what the tensor layer relies on):

- ``main.inputs`` is ``fn.inputs`` unchanged, followed by one input per hoisted value, with
  role `Role.PARAMETER` and name ``"hoisted:<n>"`` (n = 0, 1, ...), in prelude-output order.
- ``prelude.inputs`` are some of ``fn``'s `Role.PARAMETER` inputs (the same `Input` objects);
  `HoistSplit.prelude_inputs` gives their positions in ``fn.inputs``.
- So ``main(*args, *prelude(*[args[i] for i in split.prelude_inputs]))`` equals ``fn(*args)``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, final

from ...ir.program import Function, Input, Instruction, Role
from ...ir.types import Value
from ..rewrite import is_pure
from .dce import eliminate_dead_code

__all__ = [
    "HOISTED_PREFIX",
    "HoistCache",
    "HoistSplit",
    "is_hoisted_input",
    "plan_hoist",
    "split_param_only",
]

HOISTED_PREFIX: Final = "hoisted:"

# Param-only instructions that stay in main, recomputed there: they cost nothing (views,
# literals) and hoisting them would only materialize bigger buffers.
_REMATERIALIZE: Final = frozenset({"broadcast_in_dim", "reshape", "constant", "iota"})


def is_hoisted_input(inp: Input) -> bool:
    """True for a main-function input that receives a prelude output."""
    return inp.role is Role.PARAMETER and inp.name.startswith(HOISTED_PREFIX)


@final
@dataclass(frozen=True)
class HoistSplit:
    """The result of `plan_hoist`.

    Attributes:
        prelude: the param-only function, or None when nothing is worth hoisting.
        main: the function to run per call (``fn`` itself when `prelude` is None).
        prelude_inputs: positions in ``fn.inputs`` of the prelude's inputs, in order.
        moved: instructions computed by the prelude instead of main.
    """

    prelude: Function | None
    main: Function
    prelude_inputs: tuple[int, ...]
    moved: int

    @property
    def hoisted(self) -> int:
        """Number of values the prelude hands to main."""
        return 0 if self.prelude is None else len(self.prelude.outputs)


def _stays_in_main(inst: Instruction) -> bool:
    return inst.op in _REMATERIALIZE or not inst.operands


def plan_hoist(fn: Function) -> HoistSplit:
    """Split `fn` into a param-only prelude and a main function (see the module docstring).

    `fn` is not modified.
    """
    param_only: set[int] = {i.value.id for i in fn.inputs if i.role is Role.PARAMETER}
    prelude_ids: set[int] = set()  # param-only instruction ids
    hoistable: set[int] = set()  # those worth running in the prelude rather than main
    for inst in fn.body:
        if is_pure(inst.op) and all(v.id in param_only for v in inst.operands):
            param_only.update(v.id for v in inst.results)
            prelude_ids.add(inst.id)
            if not _stays_in_main(inst):
                hoistable.add(inst.id)
    if not hoistable:
        return HoistSplit(None, fn, (), 0)
    # Backward liveness of main: a hoistable result read by main is a boundary value.
    live: set[int] = {v.id for v in fn.outputs}
    boundary: set[int] = set()
    main_body: list[Instruction] = []
    for inst in reversed(fn.body):
        if not any(v.id in live for v in inst.results) and is_pure(inst.op):
            continue
        if inst.id in hoistable:
            boundary.update(v.id for v in inst.results if v.id in live)
            continue
        main_body.append(inst)
        live.update(v.id for v in inst.operands)
    if not boundary:
        return HoistSplit(None, fn, (), 0)
    main_body.reverse()
    boundary_values = [v for inst in fn.body if inst.id in hoistable for v in inst.results
                       if v.id in boundary]

    prelude_body = [_copy(inst, {}) for inst in fn.body if inst.id in prelude_ids]
    prelude_fn = Function(f"{fn.name}.prelude", [], prelude_body, boundary_values)
    eliminate_dead_code(prelude_fn)
    used = {v.id for inst in prelude_fn.body for v in inst.operands} | {
        v.id for v in boundary_values
    }
    positions = tuple(k for k, i in enumerate(fn.inputs)
                      if i.role is Role.PARAMETER and i.value.id in used)
    prelude_fn.inputs = [fn.inputs[k] for k in positions]

    mapping: dict[int, Value] = {}
    hoisted_inputs: list[Input] = []
    for n, value in enumerate(boundary_values):
        new = fn.new_value(value.type)
        mapping[value.id] = new
        hoisted_inputs.append(Input(new, Role.PARAMETER, f"{HOISTED_PREFIX}{n}"))
    main_fn = Function(fn.name, [*fn.inputs, *hoisted_inputs],
                       [_copy(inst, mapping) for inst in main_body],
                       [mapping.get(v.id, v) for v in fn.outputs])
    moved = sum(1 for inst in prelude_fn.body if inst.id in hoistable)
    return HoistSplit(prelude_fn, main_fn, positions, moved)


def _copy(inst: Instruction, mapping: dict[int, Value]) -> Instruction:
    operands = [mapping.get(v.id, v) for v in inst.operands]
    return Instruction(inst.id, inst.op, operands, dict(inst.attrs), inst.results)


def split_param_only(fn: Function) -> tuple[Function | None, Function]:
    """``(prelude, main)`` of `plan_hoist`; prelude is None when nothing is hoisted."""
    split = plan_hoist(fn)
    return split.prelude, split.main


_T = TypeVar("_T")


@final
class HoistCache(Generic[_T]):
    """Prelude outputs cached per (plan signature, parameter buffer versions).

    One entry is kept per signature: when the versions differ (an optimizer step wrote the
    parameters), the entry is recomputed and replaced, never served stale.

    Attributes:
        hits: lookups answered from the cache.
        misses: lookups that computed (first time or after a version change).
        recomputes: the misses caused by a version change of a known signature.
    """

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[tuple[Any, ...], _T]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.recomputes = 0

    def get_or_compute(self, signature: Hashable, versions: Sequence[Any],
                       compute: Callable[[], _T]) -> _T:
        """The cached value for (`signature`, `versions`), computing it on a miss.

        Args:
            signature: the plan's structural signature.
            versions: the version of every parameter buffer the prelude reads, in order.
            compute: runs the prelude; called only on a miss.
        """
        key = tuple(versions)
        entry = self._entries.get(signature)
        if entry is not None and entry[0] == key:
            self._entries.move_to_end(signature)
            self.hits += 1
            return entry[1]
        self.misses += 1
        if entry is not None:
            self.recomputes += 1
        value = compute()
        self._entries[signature] = (key, value)
        self._entries.move_to_end(signature)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return value

    def invalidate(self, signature: Hashable | None = None) -> None:
        """Drop one signature's entry, or every entry when `signature` is None."""
        if signature is None:
            self._entries.clear()
        else:
            self._entries.pop(signature, None)

    def __len__(self) -> int:
        return len(self._entries)
