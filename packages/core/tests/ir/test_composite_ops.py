"""Composites are registry ops: text round trip, verifier, declared decomposition."""

from __future__ import annotations

import pytest

from omnitensor.dtypes import float32
from omnitensor.errors import ShapeError
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import Trait, all_ops, decomposition, get_op
from omnitensor.ir.text import parse_function, print_function
from omnitensor.ir.types import TensorType
from omnitensor.ir.verify import verify


def test_composites_round_trip_through_text_and_verify() -> None:
    b = Builder()
    x = b.input(TensorType((2, 3), float32))
    w = b.input(TensorType((3,), float32))
    qkv = [b.input(TensorType((1, 2, 3, 4), float32)) for _ in range(3)]
    y = b.emit("layer_norm", x, w, w, axes=(1,), eps=1e-5)
    z = b.emit("scaled_dot_product_attention", *qkv, scale=0.5, is_causal=True)
    fn = b.build([y, z])
    text = print_function(fn)
    parsed = parse_function(text)
    verify(parsed)
    assert print_function(parsed) == text


def test_every_composite_declares_a_decomposition_of_primitives() -> None:
    composites = [op for op in all_ops().values() if op.has(Trait.COMPOSITE)]
    assert {"softmax", "log_softmax", "layer_norm", "rms_norm", "gelu", "silu", "swiglu",
            "geglu", "rotary_embedding", "scaled_dot_product_attention"} <= {
                op.name for op in composites}
    for op in composites:
        assert op.decompose is not None and op.doc


def test_normalized_axes_must_be_trailing() -> None:
    b = Builder()
    x = b.input(TensorType((2, 3), float32))
    with pytest.raises(ShapeError, match="trailing"):
        b.emit("softmax", x, axes=(0,))


def test_norm_backward_composites_name_what_is_wrong() -> None:
    """A cotangent of another type, a parameter of the wrong shape or dtype, or one too many."""
    from omnitensor.dtypes import float64
    from omnitensor.errors import DTypeError

    b = Builder()
    x = b.input(TensorType((2, 3), float32))
    w = b.input(TensorType((3,), float32))
    with pytest.raises(ShapeError, match="grad is .*expected x's type"):
        b.emit_multi("layer_norm_backward", x, b.input(TensorType((2, 4), float32)), w,
                     axes=(1,))
    with pytest.raises(ShapeError, match="weight has shape"):
        b.emit_multi("rms_norm_backward", x, x, b.input(TensorType((2,), float32)), axes=(1,))
    with pytest.raises(DTypeError, match="weight has dtype"):
        b.emit_multi("layer_norm_backward", x, x, b.input(TensorType((3,), float64)),
                     axes=(1,))
    with pytest.raises(ShapeError, match="at most 1 parameter"):
        b.emit_multi("rms_norm_backward", x, x, w, w, axes=(1,))
    dx, dw, db = b.emit_multi("layer_norm_backward", x, x, w, w, axes=(1,))
    assert (dx.type, dw.type, db.type) == (x.type, w.type, w.type)


def test_decomposition_is_a_function_of_primitives() -> None:
    fn = decomposition(get_op("rms_norm"), [TensorType((2, 3), float32)],
                       {"axes": (1,), "eps": 1e-6})
    assert not any(get_op(i.op).has(Trait.COMPOSITE) for i in fn.body)
    assert [v.type for v in fn.outputs] == [TensorType((2, 3), float32)]
