"""The table of ONNX operators the importer claims: one handler per op type.

A handler receives the node's attributes (already decoded to Python values) and its inputs, each
either a numpy array (a value known while tracing: an initializer, a `Constant`, a `Shape`) or a
`Tensor`, and returns the node's outputs. Whether an op and its attributes are supported is
decided at load time, from `Handler.since`, `Handler.attributes` and `Handler.check`, so an
unsupported model fails before anything runs, naming the node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from ..tensor.tensor import Tensor

__all__ = ["HANDLERS", "Ctx", "Handler", "Value", "handler"]

Value = Any  # np.ndarray (known while tracing) | Tensor | None (an omitted optional input)
HandlerFn = Callable[..., Any]
F = TypeVar("F", bound=HandlerFn)


class Ctx(Protocol):
    """What a handler sees of the model being traced (`model.Context`)."""

    opset: int
    node: Any

    def where(self) -> str:
        """`node 'name' (Op)` for error messages."""

    def tensor(self, value: Value) -> Tensor:
        """`value` as a Tensor (known arrays become constants or their parameter tensor)."""

    def ints(self, value: Value, what: str) -> tuple[int, ...]:
        """A known integer list; a value computed from data is refused."""


@dataclass(frozen=True)
class Handler:
    """How one ONNX op type is imported.

    Attributes:
        op_type: the ONNX op type (default domain).
        fn: ``fn(ctx, attrs, *inputs) -> outputs``.
        since: the oldest opset whose semantics `fn` implements (older opsets are refused).
        attributes: the attribute names `fn` understands; any other present attribute refuses
            the node at load time.
        check: optional ``check(attrs) -> reason | None`` for unsupported attribute values.
        static_inputs: input positions that must be known while tracing (shapes, axes, pads).
    """

    op_type: str
    fn: HandlerFn
    since: int = 1
    attributes: frozenset[str] = frozenset()
    check: Callable[[Mapping[str, Any]], str | None] | None = None
    static_inputs: frozenset[int] = field(default_factory=frozenset)


HANDLERS: dict[str, Handler] = {}


def handler(*op_types: str, since: int = 1, attributes: Sequence[str] = (),
            check: Callable[[Mapping[str, Any]], str | None] | None = None,
            static: Sequence[int] = ()) -> Callable[[F], F]:
    """Register `fn` as the importer of each of `op_types`."""

    def register(fn: F) -> F:
        for op_type in op_types:
            HANDLERS[op_type] = Handler(op_type, fn, since, frozenset(attributes), check,
                                        frozenset(static))
        return fn

    return register


def is_static(value: Value) -> bool:
    """Whether `value` is known while tracing (a numpy array)."""
    return isinstance(value, np.ndarray)


def is_tensor(value: Value) -> bool:
    """Whether `value` is a traced tensor."""
    return isinstance(value, Tensor)
