"""PTIR programs: `Instruction`, function `Input`s with roles, and the SSA `Function`.

Ids are stable: a value or instruction keeps its id for the function's life, so passes, dumps and
traces can name them. Construction goes through `builder.Builder`; checking through `verify`;
text through `text`.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, final

from .types import Type, Value

__all__ = ["Function", "Input", "Instruction", "Role"]


class Role(enum.Enum):
    """What a function input is: weights, carried state, or per-call data (DESIGN §3)."""

    PARAMETER = "param"
    STATE = "state"
    DATA = "data"


@final
@dataclass(frozen=True)
class Input:
    """A function input: its value, role and a human name (``"blk.0.attn_q.weight"``)."""

    value: Value
    role: Role = Role.DATA
    name: str = ""


@final
class Instruction:
    """One op application: ``results = op(*operands, **attrs)``.

    Attributes:
        id: stable id within the function.
        op: the op name (see `ir.opdef.get_op`).
        operands: operand values, flat (a variadic operand's values in place).
        attrs: attributes, complete (defaults filled) and normalized (tuples, not lists).
        results: result values (one, or several for multi-result ops).
        version: bumped by the rewriter whenever the instruction changes in place.
    """

    __slots__ = ("attrs", "id", "op", "operands", "results", "version")

    def __init__(self, id: int, op: str, operands: Sequence[Value], attrs: dict[str, Any],
                 results: Sequence[Value]) -> None:
        self.id = id
        self.op = op
        self.operands = tuple(operands)
        self.attrs = attrs
        self.results = tuple(results)
        self.version = 0

    @property
    def result(self) -> Value:
        """The first (usually only) result."""
        return self.results[0]

    def __repr__(self) -> str:
        ops = ", ".join(f"%{v.id}" for v in self.operands)
        res = ", ".join(f"%{v.id}" for v in self.results)
        return f"<{res} = {self.op}({ops}) #{self.id}>"


@final
class Function:
    """An SSA function: typed inputs with roles, a body in program order, outputs.

    Every operand of an instruction is a function input or a result of an earlier instruction;
    `verify.verify` checks this and every type.
    """

    def __init__(self, name: str, inputs: Sequence[Input], body: Sequence[Instruction],
                 outputs: Sequence[Value]) -> None:
        self.name = name
        self.inputs = list(inputs)
        self.body = list(body)
        self.outputs = list(outputs)
        ids = [i.value.id for i in self.inputs] + [v.id for x in self.body for v in x.results]
        self._next_value = max(ids, default=-1) + 1
        self._next_inst = max((x.id for x in self.body), default=-1) + 1

    def new_value(self, type: Type) -> Value:
        """A fresh value with an id never used in this function."""
        value = Value(self._next_value, type)
        self._next_value += 1
        return value

    def new_instruction_id(self) -> int:
        """A fresh instruction id never used in this function."""
        self._next_inst += 1
        return self._next_inst - 1

    @property
    def input_values(self) -> list[Value]:
        """The input values, in order."""
        return [i.value for i in self.inputs]

    def instructions(self) -> Iterator[Instruction]:
        """The body, in program order."""
        return iter(self.body)

    def __len__(self) -> int:
        return len(self.body)

    def text(self) -> str:
        """PTIR text (see `ir.text`)."""
        from .text import print_function

        return print_function(self)

    def __str__(self) -> str:
        return self.text()

    def signature(self) -> str:
        """Structural signature: a hash over ops, types, wiring, attributes, constants and roles.

        Input names and value ids do not enter it (values are renumbered in program order), so
        two captures of the same computation share a signature.
        """
        from .text import print_function

        return hashlib.sha256(print_function(self, canonical=True).encode()).hexdigest()[:32]

    def copy(self) -> Function:
        """A deep copy with the same ids (values are shared immutable objects)."""
        body = [Instruction(x.id, x.op, x.operands, dict(x.attrs), x.results) for x in self.body]
        fn = Function(self.name, self.inputs, body, self.outputs)
        fn._next_value, fn._next_inst = self._next_value, self._next_inst
        return fn
