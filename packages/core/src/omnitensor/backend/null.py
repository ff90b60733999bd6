"""A recording "null" backend for tests (as tinygrad's ops_null): runs nothing, remembers all.

It accepts every op and dtype, records each compiled function and each run, and returns zeros of
the declared output types. Not registered by default: tests use `null_plugin` with
`registry.register_plugin`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, final

import numpy as np

from ..ir.opdef import all_ops
from ..ir.program import Function
from ..ir.types import QTensorType, TensorType
from .contract import CONTRACT_VERSION, Backend, Capabilities, Executable
from .hookspecs import BackendSpec, hookimpl

__all__ = ["NullBackend", "NullExecutable", "NullPlugin", "null_plugin"]

Array = np.ndarray[Any, Any]


@final
class NullExecutable(Executable):
    """The compiled form of a function on the null backend: the function itself."""

    def __init__(self, function: Function) -> None:
        self.function = function


class NullBackend(Backend):
    """Accepts everything, computes nothing, records every compile and run.

    Subclass it (overriding `run`) for a test backend that also answers.

    Attributes:
        compiled: every function passed to `compile`, in order.
        runs: ``(executable, inputs, donated)`` for every `run`, in order.
    """

    def __init__(self, name: str = "null") -> None:
        self.name = name
        self.compiled: list[Function] = []
        self.runs: list[tuple[NullExecutable, list[Any], frozenset[int]]] = []

    def capabilities(self) -> Capabilities:
        """Every op with every dtype it declares (operand-specific dtypes included)."""
        ops: dict[str, frozenset[Any]] = {}
        for name, opdef in all_ops().items():
            dtypes = set(opdef.dtypes)
            for spec in opdef.operands:
                dtypes.update(spec.dtypes or ())
            ops[name] = frozenset(dtypes)
        return Capabilities(ops=ops, strided_inputs=True)

    def supports(self, inst: Any) -> str | None:
        """Always None: the null backend pretends to run anything."""
        return None

    def upload(self, array: Array) -> Array:
        """A copy of `array`."""
        return np.array(array, copy=True)

    def download(self, buffer: Any) -> Array:
        """A copy of `buffer`."""
        return np.array(buffer, copy=True)

    def compile(self, function: Function) -> NullExecutable:
        """Record `function`; return it wrapped."""
        self.compiled.append(function)
        return NullExecutable(function)

    def run(self, executable: Executable, inputs: Sequence[Any], *,
            donated: frozenset[int] = frozenset()) -> list[Any]:
        """Record the call; return zeros of each output's type (uint8 blocks for quantized)."""
        assert isinstance(executable, NullExecutable)
        self.runs.append((executable, list(inputs), donated))
        outputs: list[Any] = []
        for value in executable.function.outputs:
            if isinstance(value.type, QTensorType):
                outputs.append(np.zeros(value.type.storage_shape, dtype=np.uint8))
            else:
                assert isinstance(value.type, TensorType)
                outputs.append(np.zeros(value.type.shape, dtype=value.type.dtype.np))
        return outputs


@dataclass
class NullPlugin:
    """An in-process plugin object registering one `NullBackend` (see `null_plugin`).

    Attributes:
        spec: the spec it registers.
        created: backends its factory created.
    """

    spec: BackendSpec
    created: list[NullBackend] = field(default_factory=list)

    @hookimpl
    def omnitensor_register_backends(self) -> list[BackendSpec]:
        """The one spec."""
        return [self.spec]


def null_plugin(
    name: str = "null",
    *,
    priority: int | Callable[[], int] = 0,
    probe: Callable[[], str | None] | None = None,
    contract_version: int = CONTRACT_VERSION,
    devices: Callable[[], Mapping[str, Any] | Sequence[str]] | None = None,
) -> NullPlugin:
    """A plugin object for `registry.register_plugin` providing a `NullBackend` named `name`."""
    created: list[NullBackend] = []

    def factory() -> NullBackend:
        backend = NullBackend(name)
        created.append(backend)
        return backend

    spec = BackendSpec(
        name=name, contract_version=contract_version, priority=priority, probe=probe,
        factory=factory, devices=devices, distribution=f"omnitensor-backend-{name}",
    )
    return NullPlugin(spec, created)
