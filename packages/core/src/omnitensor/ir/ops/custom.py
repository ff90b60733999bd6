"""`custom_call`: a backend-offered fused kernel that always carries its portable decomposition.

The decomposition is an ordinary PTIR `Function`, so the reference interpreter, the verifier and
the conformance suite can check any backend's fused kernel against it. Which backend offers which
`name` is the business of the backend's capabilities, not of this declaration.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import ALL
from ...errors import DTypeError, OmnitensorError, ShapeError
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..program import Function
from ..types import TensorType, Type

__all__ = ["CustomCallView", "match_custom_call"]

Array = np.ndarray[Any, Any]


@primitive("custom_call", traits=Trait.MULTI_RESULT, dtypes=ALL)
class CustomCallView(OpView):
    """A named fused kernel with its portable `decomposition`; its results are the decomposition's.

    `operands` (any number, including none) must match the decomposition's inputs one to one, in
    type (shape and dtype); the results are the decomposition's outputs, in order (one or more).
    A backend that knows `name` may run its own kernel, which must agree with the decomposition
    within the conformance tolerances; any other backend runs the decomposition. The reference
    is the decomposition run by the reference interpreter, so its edge cases are those of the
    decomposition's ops.
    """

    operands = operand(variadic=True, min_count=0)
    name: str = attribute()
    decomposition: Function = attribute()

    @staticmethod
    def infer(operands: tuple[Type, ...], *, name: str,
              decomposition: Function) -> tuple[Type, ...]:
        op = "custom_call"
        if not isinstance(name, str) or not name:
            raise OmnitensorError(f"{op}: name must be a non-empty str (got {name!r})", op=op)
        if not isinstance(decomposition, Function):
            raise OmnitensorError(
                f"{op}[{name}]: decomposition must be a PTIR Function (got "
                f"{type(decomposition).__name__})",
                op=op,
            )
        expected = [v.type for v in decomposition.input_values]
        if len(operands) != len(expected):
            raise ShapeError(
                f"{op}[{name}]: wrong number of operands (got {len(operands)}, expected "
                f"{len(expected)}, the decomposition's inputs)",
                op=op,
                shapes=[t.shape for t in operands],
            )
        for i, (got, want) in enumerate(zip(operands, expected, strict=True)):
            if got == want:
                continue
            if isinstance(got, TensorType) and isinstance(want, TensorType) and (
                got.shape == want.shape
            ):
                raise DTypeError(
                    f"{op}[{name}]: operand {i} has dtype {got.dtype} (expected {want.dtype}, "
                    f"the decomposition's input type {want})",
                    op=op,
                    dtype=got.dtype.name,
                )
            raise ShapeError(
                f"{op}[{name}]: operand {i} has type {got} (expected {want}, the "
                f"decomposition's input type)",
                op=op,
                shapes=[got.shape, want.shape],
            )
        if not decomposition.outputs:
            raise OmnitensorError(
                f"{op}[{name}]: the decomposition has no outputs (expected at least one)", op=op
            )
        return tuple(v.type for v in decomposition.outputs)

    @staticmethod
    def reference(operands: tuple[Array, ...], *, name: str,
                  decomposition: Function) -> tuple[Array, ...]:
        from ..interpret import evaluate  # the interpreter imports the registry lazily too

        return tuple(evaluate(decomposition, list(operands)))


match_custom_call = CustomCallView.match
