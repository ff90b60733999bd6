"""Lowering tables: capabilities, support answers and dispatch derive from one registration."""

from __future__ import annotations

from typing import Any

import pytest

from omnitensor.backend.lowering import LoweringTable
from omnitensor.dtypes import float16, float32, int32
from omnitensor.errors import UnsupportedError
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import OpView, get_op
from omnitensor.ir.types import TensorType


def _insts() -> dict[str, Any]:
    b = Builder()
    x, i = b.input(TensorType((4, 3), float32)), b.input(TensorType((4, 3), int32))
    fn = b.build([b.emit("exp", x), b.emit("neg", i), b.emit("reduce_sum", x, axes=(0, 1))])
    return {inst.op: inst for inst in fn.body}


def test_table_answers_from_its_registrations() -> None:
    table = LoweringTable()

    def wide_only(view: OpView) -> str | None:
        return "reduce_sum: a full reduction is refused" if len(view.inst.attrs["axes"]) > 1 \
            else None

    table.register("exp", dtypes=(float32, float16))(lambda ctx, view: ["exp", ctx])
    table.register("reduce_sum", when=wide_only)(lambda ctx, view: ["sum"])
    insts = _insts()
    assert table.supports(insts["exp"]) is None
    assert table.supports(insts["neg"]) == "neg has no lowering"
    assert table.supports(insts["reduce_sum"]) == "reduce_sum: a full reduction is refused"
    caps = table.capabilities()
    assert caps["exp"] == frozenset({float32, float16})
    assert caps["reduce_sum"] == frozenset(get_op("reduce_sum").dtypes)  # None: as declared
    assert "neg" not in caps and "exp" in table and table.names() == {"exp", "reduce_sum"}
    assert table.lookup(insts["exp"])(1, None) == ["exp", 1]
    with pytest.raises(UnsupportedError, match="neg has no lowering"):
        table.lookup(insts["neg"])


def test_dtype_outside_the_registration_is_refused() -> None:
    table = LoweringTable()
    table.register("neg", dtypes=(float32,))(lambda ctx, view: [])
    assert table.supports(_insts()["neg"]) == "neg on int32 has no lowering"


def test_undeclared_names_stay_out_of_capabilities() -> None:
    table = LoweringTable()
    table.register("no_such_composite")(lambda ctx, view: [])
    assert "no_such_composite" in table and "no_such_composite" not in table.capabilities()
