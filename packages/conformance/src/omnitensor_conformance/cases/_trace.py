"""Tracing tensor-level code (functionals, autograd, models) into a conformance case's program.

Placeholders stand for the case's inputs; `emit` records the lazy graph behind some tensors into
the case's builder. Shared by the gradient, functional and model case sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType, Value

__all__ = ["emit", "placeholder"]


def placeholder(index: int, type: TensorType) -> Any:
    """A lazy tensor standing for case input `index`."""
    from omnitensor.tensor.graph import Node
    from omnitensor.tensor.tensor import Tensor

    node = Node(None, (), {}, (type,))
    node.placeholder = index
    return Tensor(node)


def emit(builder: Builder, values: Sequence[Value], roots: Sequence[Any]) -> list[Value]:
    """Record the lazy graph behind `roots` into `builder` (placeholder i -> values[i])."""
    from omnitensor.tensor.graph import capture

    refs = [(t._node, t._index) for t in roots]
    cap = capture(refs)
    env: dict[tuple[int, int], Value] = {}
    for node, index in cap.leaves:
        if node.placeholder is None:
            raise ValueError("traced code reads a constant array larger than 16 elements; "
                             "make it a case input")
        env[(id(node), index)] = values[node.placeholder]
    for node in cap.order:
        results = builder.emit_multi(node.op or "", *(env[(id(n), i)] for n, i in node.inputs),
                                     **node.attrs)
        for i, value in enumerate(results):
            env[(id(node), i)] = value
    return [env[(id(n), i)] for n, i in refs]


