"""Lowering tables: one per backend, the single source of what it runs and how.

A backend registers a lowering function per op or composite name (`@TABLE.register(name,
dtypes=..., when=...)`); its capabilities are derived from the table, `supports` answers from
it (before any work), and the backend's lowering dispatches through `lookup`. What the function
receives (a lowering context and the instruction's typed `OpView`) and returns is the backend's
business. See /work/COMPOSITES-API.md and docs/writing-a-backend.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from omnitensor.backend.contract import primary_dtype
from omnitensor.dtypes import ALL, DType
from omnitensor.errors import UnsupportedError
from omnitensor.ir.opdef import OpView, all_ops
from omnitensor.ir.program import Instruction

__all__ = ["Lowering", "LoweringTable", "Predicate"]

#: A backend's lowering function: (its context, the instruction's view) -> whatever it returns.
Lowering = Callable[..., Any]
#: The reason one instruction is not supported, or None.
Predicate = Callable[[OpView], str | None]
_F = TypeVar("_F", bound=Lowering)


@dataclass(frozen=True)
class _Entry:
    fn: Lowering
    dtypes: frozenset[DType] | None
    when: Predicate | None


class LoweringTable:
    """op or composite name -> (lowering, dtypes it runs in, optional predicate)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def register(self, name: str, *, dtypes: Iterable[DType] | None = None,
                 when: Predicate | None = None) -> Callable[[_F], _F]:
        """Decorator registering the lowering of `name` (a later registration overrides).

        Args:
            name: the op or composite name.
            dtypes: the dtypes (as `primary_dtype` names an instruction) it runs in; None: every
                dtype the op declares.
            when: ``view -> reason or None`` for finer rules (shapes, attributes).
        """

        def decorate(fn: _F) -> _F:
            self._entries[name] = _Entry(fn, None if dtypes is None else frozenset(dtypes), when)
            return fn

        return decorate

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def names(self) -> frozenset[str]:
        """Every registered name."""
        return frozenset(self._entries)

    def _dtypes(self, name: str, entry: _Entry) -> frozenset[DType]:
        if entry.dtypes is not None:
            return entry.dtypes
        opdef = all_ops().get(name)
        return frozenset(opdef.dtypes) if opdef is not None else frozenset(ALL)

    def supports(self, inst: Instruction) -> str | None:
        """Why this table cannot lower `inst` (no entry, its dtype, the predicate), or None."""
        entry = self._entries.get(inst.op)
        if entry is None:
            return f"{inst.op} has no lowering"
        dtype = primary_dtype(inst)
        if dtype not in self._dtypes(inst.op, entry):
            return f"{inst.op} on {dtype} has no lowering"
        if entry.when is not None:
            return entry.when(all_ops()[inst.op].view(inst))
        return None

    def capabilities(self) -> dict[str, frozenset[DType]]:
        """Declared op name -> the dtypes its lowering runs in (what `Capabilities.ops` holds)."""
        declared = all_ops()
        return {name: self._dtypes(name, entry) for name, entry in self._entries.items()
                if name in declared}

    def lookup(self, inst: Instruction) -> Lowering:
        """The lowering of `inst`.

        Raises:
            UnsupportedError: when the table has none (check `supports` first).
        """
        entry = self._entries.get(inst.op)
        if entry is None:
            raise UnsupportedError(f"{inst.op} has no lowering", op=inst.op)
        return entry.fn
