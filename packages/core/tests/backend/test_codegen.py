"""The backend-neutral codegen: view arithmetic, chain fusion grouping and the two dialects."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.backend.codegen import KernelLowering, Node, Plan, View, merge_dims, view_op
from omnitensor.backend.codegen.common import declared_dtypes, register_common
from omnitensor.backend.codegen.cuda import CUDA
from omnitensor.backend.codegen.wgsl import WGSL
from omnitensor.backend.lowering import LoweringTable
from omnitensor.dtypes import bool_, float16, float32, float64, int8, int32, uint32
from omnitensor.errors import UnsupportedError
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType


def _elements(v: View, size: int) -> np.ndarray[Any, Any]:
    base = np.arange(size)
    return np.lib.stride_tricks.as_strided(base[v.offset:], v.shape,
                                           [s * base.itemsize for s in v.strides])


def test_views_match_numpy() -> None:
    x = View(0, float32, (3, 4), (4, 1))
    data = np.arange(12).reshape(3, 4)
    t = view_op("transpose", x, {"perm": (1, 0)}, (4, 3))
    assert t is not None and (_elements(t, 12) == data.T).all()
    s = view_op("slice", x, {"start": (1, 0), "stride": (1, 2)}, (2, 2))
    assert s is not None and (_elements(s, 12) == data[1:3, ::2]).all()
    r = view_op("reverse", x, {"axes": (1,)}, (3, 4))
    assert r is not None and (_elements(r, 12) == data[:, ::-1]).all()
    b = view_op("broadcast_in_dim", View(0, float32, (4,), (1,)), {"dims": (1,)}, (3, 4))
    assert b is not None and b.strides == (0, 1)
    assert view_op("reshape", t, {}, (12,)) is None  # a strided view does not reshape
    assert merge_dims(x, [[0, 1]]) == ([12], [1])
    assert merge_dims(t, [[0, 1]]) is None
    with pytest.raises(UnsupportedError, match="not a view op"):
        view_op("pad", x, {}, (3, 4))


@pytest.mark.parametrize(("printer", "want"), [
    (CUDA, "ot_rh((a + b))"),
    (WGSL, "(a + b)"),
])
def test_dialects_print_float16_add(printer: Any, want: str) -> None:
    assert printer.expr("add", float16, ["a", "b"], {}, float16) == want


def test_dialects_differ_only_in_hooks() -> None:
    assert CUDA.expr("select", float32, ["c", "a", "b"], {}, float32) == "(c ? a : b)"
    assert WGSL.expr("select", float32, ["c", "a", "b"], {}, float32) == "select(b, a, c)"
    assert CUDA.expr("add", int8, ["a", "b"], {}, int8).startswith("(signed char)(")
    assert WGSL.expr("convert", float32, ["a"], {}, bool_) == "!(a == f32(0.0))"
    assert WGSL.expr("ne", float32, ["a", "b"], {}, bool_) == "(!(a == b))"
    assert WGSL.expr("pow", uint32, ["a", "b"], {}, uint32) == "m_ipow_u(a, b)"
    assert CUDA.expr("max", int32, ["a", "b"], {}, int32) == "(int)(ot_imax<int>(a, b))"
    assert CUDA.store(float16, "v") == "ot_f2h(v)" and WGSL.load(bool_, "w") == "(w != 0u)"
    with pytest.raises(UnsupportedError, match="no WGSL template"):
        WGSL.expr("cumsum", float32, ["a"], {}, float32)
    with pytest.raises(UnsupportedError, match="float64 has no WGSL type"):
        WGSL.compute_type(float64)


_TABLE = LoweringTable()
register_common(_TABLE, declared_dtypes)


class _Counting(KernelLowering):
    """Records each fused chain instead of printing a kernel."""

    printer = CUDA
    table = _TABLE

    def __init__(self) -> None:
        super().__init__(Plan())
        self.chains: list[list[str]] = []

    def emit(self, step: Any) -> None:
        self.out.steps.append(step)

    def materialize(self, expr: Any, target: View | None = None) -> View:
        body: list[str] = []
        names = {id(leaf): f"v{k}" for k, leaf in enumerate(self.leaves(expr))}
        self.chain(expr, names, body)
        self.chains.append(body)
        self.emit(body)
        return target or self.new_slot(expr.shape, expr.dtype)

    def reduction(self, op: str, x: View, axes: Any, res: TensorType) -> View:
        return self.new_slot(res.shape, res.dtype)


def test_chains_fuse_until_shared_or_reduced() -> None:
    b = Builder()
    x = b.input(TensorType((4, 3), float32))
    y = b.emit("exp", b.emit("neg", x))        # one chain ...
    z = b.emit("add", y, y)                     # ... y is used twice: materialized first
    s = b.emit("reduce_sum", b.emit("mul", z, x), axes=(1,))
    fn = b.build([s, b.emit("transpose", z, perm=(1, 0))])
    lw = _Counting()
    plan = lw.lower(fn, [lw.new_slot((4, 3), float32)])
    assert [len(c) for c in lw.chains] == [2, 1, 1]  # neg+exp, add, mul (feeding the sum)
    assert isinstance(lw.env[id(z)], View) and not isinstance(lw.env[id(z)], Node)
    assert plan.outputs[1].strides == (1, 3)  # the transpose stayed a view


def test_a_long_chain_is_cut_into_bounded_kernels() -> None:
    from omnitensor.backend.codegen.lower import MAX_CHAIN

    n = 2 * MAX_CHAIN + 5
    b = Builder()
    x = b.input(TensorType((4,), float32))
    v = x
    for _ in range(n):
        v = b.emit("neg", v)
    fn = b.build([v])
    lw = _Counting()
    lw.lower(fn, [lw.new_slot((4,), float32)])
    sizes = [len(c) for c in lw.chains]
    assert sum(sizes) == n and max(sizes) <= MAX_CHAIN, sizes
