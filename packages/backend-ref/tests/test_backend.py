"""The ref backend: discovery through its entry point, capabilities, views, compile and run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.backend import registry
from omnitensor.dtypes import FLOATING, float32, int32
from omnitensor.errors import VerificationError
from omnitensor.ir import Builder, Function, Instruction, TensorType, all_ops, get_op
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import Trait
from omnitensor_backend_ref.backend import RefBackend


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("OMNITENSOR_BACKEND", "OMNITENSOR_DISABLE_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    registry.reset()
    yield
    registry.reset()


def _exp_plus_x(shape: tuple[int, ...] = (3, 4)) -> Function:
    builder = Builder()
    x = builder.input(TensorType(shape, float32), name="x")
    return builder.build([builder.emit("add", builder.emit("exp", x), x)])


def test_discovered_through_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    info = {i.name: i for i in registry.list_backends()}["ref"]
    assert info.available and info.contract_ok and info.priority == 10
    assert info.distribution == "omnitensor-backend-ref" and info.version
    assert info.value == "omnitensor_backend_ref.plugin"
    monkeypatch.setenv("OMNITENSOR_BACKEND", "ref")
    assert isinstance(registry.get_backend(), RefBackend)


def test_capabilities_cover_every_declared_primitive_and_dtype() -> None:
    caps = RefBackend().capabilities()
    assert caps.strided_inputs
    for name, opdef in all_ops().items():
        if opdef.has(Trait.COMPOSITE):  # not claimed: expanded into primitives before compile
            assert name not in caps.ops, name
            continue
        assert set(opdef.dtypes) <= caps.ops[name], name
    assert all(caps.supports("exp", d) for d in FLOATING)
    assert not caps.supports("exp", int32)


def test_compile_and_run_match_the_interpreter() -> None:
    backend = RefBackend()
    fn = _exp_plus_x()
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    (out,) = backend.run(backend.compile(fn), [backend.upload(x)])
    np.testing.assert_array_equal(backend.download(out), evaluate(fn, [x])[0])


def test_compile_verifies() -> None:
    fn = _exp_plus_x()
    bad = Instruction(0, "exp", [fn.input_values[0]], {}, [fn.body[0].results[0]])
    broken = Function("broken", fn.inputs, [bad, bad], fn.outputs)
    with pytest.raises(VerificationError):
        RefBackend().compile(broken)


def test_buffers_are_copies_and_never_written() -> None:
    backend = RefBackend()
    host = np.ones((3, 4), np.float32)
    buffer = backend.upload(host)
    host[...] = 5
    assert float(buffer[0, 0]) == 1.0 and not buffer.flags.writeable
    (out,) = backend.run(backend.compile(_exp_plus_x()), [buffer], donated=frozenset({0}))
    assert not out.flags.writeable
    assert float(buffer[0, 0]) == 1.0
    mine = backend.download(out)
    mine[...] = 0  # downloads are the caller's to write
    assert float(out[0, 0]) != 0


def test_transpose_is_a_free_view() -> None:
    backend = RefBackend()
    buffer = backend.upload(np.arange(6, dtype=np.float32).reshape(2, 3))
    view = backend.view(buffer, get_op("transpose"), {"perm": (1, 0)})
    assert view is not None and view.shape == (3, 2) and np.shares_memory(view, buffer)
