"""Every registered op has a docstring and a reference kernel that runs on a well-typed example.

Ops without required attributes get a generic sample (every operand ``(2, 3)`` of the first
allowed dtype); others need an entry in `SAMPLES`. A new op without either fails here, by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from omnitensor import dtypes
from omnitensor.ir import Builder, Function, QTensorType, TensorType, all_ops, get_op
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.opdef import MISSING, OpDef
from omnitensor.ir.types import Type

F32 = dtypes.float32
I32 = dtypes.int32


def f32(*shape: int) -> TensorType:
    return TensorType(shape, F32)


def i32(*shape: int) -> TensorType:
    return TensorType(shape, I32)


def _decomposition() -> Function:
    b = Builder("fused_exp_add")
    x, y = b.input(f32(2, 3)), b.input(f32(2, 3))
    return b.build([b.emit("add", b.emit("exp", x), y), x])


Sample = tuple[list[Type], dict[str, Any]]

# op -> a callable giving (operand types, attributes) of one small well-typed application.
SAMPLES: dict[str, Callable[[], Sample]] = {
    # elementwise with required attributes
    "convert": lambda: ([f32(2, 3)], {"dtype": dtypes.float16}),
    "bitcast": lambda: ([f32(2, 3)], {"dtype": dtypes.int32}),
    # movement
    "reshape": lambda: ([f32(2, 3)], {"shape": (3, 2)}),
    "broadcast_in_dim": lambda: ([f32(3)], {"shape": (2, 3), "dims": (1,)}),
    "transpose": lambda: ([f32(2, 3)], {"perm": (1, 0)}),
    "slice": lambda: ([f32(4, 5)], {"start": (1, 0), "limit": (3, 5), "stride": (1, 2)}),
    "concatenate": lambda: ([f32(2, 3), f32(1, 3)], {"axis": 0}),
    "pad": lambda: ([f32(2, 3), f32()], {"low": (1, -1), "high": (0, 2), "interior": (1, 0)}),
    "reverse": lambda: ([f32(2, 3)], {"axes": (1,)}),
    # reductions
    "reduce_sum": lambda: ([f32(2, 3)], {"axes": (1,)}),
    "reduce_prod": lambda: ([f32(2, 3)], {"axes": (0,)}),
    "reduce_max": lambda: ([f32(2, 3)], {"axes": (0, 1)}),
    "reduce_min": lambda: ([f32(2, 3)], {"axes": (1,)}),
    "argmax": lambda: ([f32(2, 3)], {"axis": 1}),
    "argmin": lambda: ([f32(2, 3)], {"axis": 0}),
    "cumsum": lambda: ([f32(2, 3)], {"axis": 1}),
    # collectives (world size 1: the identity)
    "all_reduce": lambda: ([f32(2, 3)], {"reduction": "sum", "world_size": 1}),
    "all_gather": lambda: ([f32(2, 3)], {"axis": 1, "world_size": 1}),
    "reduce_scatter": lambda: ([f32(2, 3)], {"reduction": "mean", "axis": 0, "world_size": 1}),
    "collective_broadcast": lambda: ([f32(2, 3)], {"root": 0, "world_size": 1}),
    # creation
    "iota": lambda: ([], {"shape": (2, 3), "dimension": 1, "dtype": I32}),
    "constant": lambda: ([], {"value": np.arange(6, dtype=np.float32).reshape(2, 3)}),
    "rng": lambda: ([TensorType((2,), dtypes.uint32)], {"shape": (2, 3), "dtype": F32}),
    # composites (normalized axes are the trailing ones)
    "softmax": lambda: ([f32(2, 3)], {"axes": (1,)}),
    "log_softmax": lambda: ([f32(2, 3)], {"axes": (1,)}),
    "layer_norm": lambda: ([f32(2, 3), f32(3), f32(3)], {"axes": (1,)}),
    "rms_norm": lambda: ([f32(2, 3, 4), f32(3, 4)], {"axes": (1, 2)}),
    "swiglu": lambda: ([f32(2, 3), f32(2, 3)], {}),
    "geglu": lambda: ([f32(2, 3), f32(2, 3)], {"approximate": "tanh"}),
    "scaled_dot_product_attention": lambda: (
        [f32(1, 4, 3, 8), f32(1, 2, 5, 8), f32(1, 2, 5, 6)], {"scale": 0.5, "is_causal": True}),
    "layer_norm_backward": lambda: ([f32(2, 3), f32(2, 3), f32(3), f32(3)], {"axes": (1,)}),
    "rms_norm_backward": lambda: ([f32(2, 3), f32(2, 3), f32(3)], {"axes": (1,)}),
    "scaled_dot_product_attention_backward": lambda: (
        [f32(1, 4, 3, 8), f32(1, 2, 5, 8), f32(1, 2, 5, 6), f32(1, 4, 3, 6)],
        {"scale": 0.5, "is_causal": True}),
    "rotary_embedding": lambda: ([f32(2, 5, 8), f32(5, 4), f32(5, 4)], {"interleaved": True}),
    "cross_entropy": lambda: ([f32(2, 3), i32(2)], {"label_smoothing": 0.1}),
    "custom_call": lambda: ([f32(2, 3), f32(2, 3)],
                            {"name": "fused_exp_add", "decomposition": _decomposition()}),
    # linalg / indexing / quant (declared in linalg.py, indexing.py, quant.py)
    "dot_general": lambda: ([f32(2, 3), f32(3, 4)], {"contracting": ((1,), (0,))}),
    "gather": lambda: ([f32(4, 3), i32(2)], {"axis": 0}),
    "scatter_add": lambda: ([f32(4, 3), i32(2), f32(2, 3)], {"axis": 0}),
    "dynamic_slice": lambda: ([f32(4, 5), i32(), i32()], {"sizes": (2, 3)}),
    "dynamic_update_slice": lambda: ([f32(4, 5), f32(2, 3), i32(), i32()], {}),
    "top_k": lambda: ([f32(2, 5)], {"k": 2}),
    "dequantize": lambda: ([QTensorType("q8_0", (2, 32))], {"format": "q8_0"}),
    "qmatmul": lambda: ([f32(3, 32), QTensorType("q8_0", (4, 32))], {"format": "q8_0"}),
}

# Ops whose reference cannot run on a generic sample, with the reason. Keep this tiny.
SKIP: dict[str, str] = {}


def _generic_sample(opdef: OpDef) -> Sample | None:
    """Every operand (2, 3) of its first allowed dtype, when no attribute is required."""
    if any(a.default is MISSING for a in opdef.attributes):
        return None
    types: list[Type] = []
    for spec in opdef.operands:
        if spec.quantized:
            return None
        allowed = spec.dtypes if spec.dtypes is not None else opdef.dtypes
        types += [TensorType((2, 3), allowed[0])] * (spec.min_count if spec.variadic else 1)
    return types, {}


def _random(type: Type, rng: np.random.Generator) -> np.ndarray:
    if isinstance(type, QTensorType):
        return rng.integers(0, 256, type.storage_shape, dtype=np.uint8)
    dtype = type.dtype
    if dtype.is_floating:
        return rng.standard_normal(type.shape).astype(dtype.np)
    if dtype.is_bool:
        return rng.integers(0, 2, type.shape).astype(bool)
    if dtype == dtypes.uint32:
        return rng.integers(0, 2**32, type.shape, dtype=np.uint64).astype(np.uint32)
    return rng.integers(0, 3, type.shape).astype(dtype.np)  # small: valid as any index


def test_every_op_has_doc_and_reference() -> None:
    missing = [
        name for name, opdef in all_ops().items()
        if not callable(opdef.reference) or not opdef.doc.strip() or not opdef.summary
    ]
    assert not missing, f"ops without a docstring or reference kernel: {missing}"


def test_samples_name_registered_ops() -> None:
    stale = sorted((set(SAMPLES) | set(SKIP)) - set(all_ops()))
    assert not stale, f"SAMPLES/SKIP name unknown ops: {stale}"


@pytest.mark.parametrize("name", list(all_ops()))
def test_reference_runs_on_a_sample(name: str) -> None:
    if name in SKIP:
        pytest.skip(SKIP[name])
    opdef = get_op(name)
    sample = SAMPLES[name]() if name in SAMPLES else _generic_sample(opdef)
    assert sample is not None, (
        f"{name}: needs an entry in SAMPLES of tests/ir/test_completeness.py (it has required "
        f"attributes or quantized operands)"
    )
    types, attrs = sample
    b = Builder()
    results = b.emit_multi(name, *[b.input(t) for t in types], **attrs)
    fn = b.build(list(results))
    rng = np.random.default_rng(0)
    # evaluate() checks every result's shape and dtype against the recorded type.
    outs = evaluate(fn, [_random(t, rng) for t in types])
    assert len(outs) == len(results) >= 1
