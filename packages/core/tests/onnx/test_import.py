"""omnitensor.onnx: models built with onnx.helper, checked against numpy; load-time errors."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (omnitensor[onnx])")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import omnitensor as ot  # noqa: E402
from omnitensor.errors import DTypeError, FormatError, ShapeError, UnsupportedError  # noqa: E402
from omnitensor.onnx import load, supported_ops  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _save(tmp_path, model, name="m.onnx"):
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def _mlp(tmp_path, batch="batch"):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((8, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
                   [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"),
                    numpy_helper.from_array(w2, "w2")])
    return _save(tmp_path, model), (w1, b1, w2)


def _numpy_mlp(x, w1, b1, w2):
    logits = np.maximum(x @ w1 + b1, 0) @ w2
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_mlp_matches_numpy_and_binds_symbolic_batch(tmp_path):
    path, weights = _mlp(tmp_path)
    model = load(path)
    assert [i.name for i in model.inputs] == ["x"]
    assert model.inputs[0].dims == ("batch", 4)
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
        (y,) = model(x)
        np.testing.assert_allclose(y.numpy(), _numpy_mlp(x, *weights), rtol=1e-5, atol=1e-6)
    assert model.run({"x": np.ones((2, 4), np.float32)})["y"].shape == (2, 3)


def test_initializers_are_parameters(tmp_path):
    path, _ = _mlp(tmp_path)
    model = load(path)
    assert sorted(model.parameters) == ["b1", "w1", "w2"]
    assert all(t.is_realized for t in model.parameters.values())


def test_softmax_goes_through_the_functional(tmp_path):
    # The importer calls the same functionals as user code, so backends see the same graph.
    path, _ = _mlp(tmp_path)
    from omnitensor.functional import stats

    before = sum(n for (family, _), n in stats.items() if family == "softmax")
    load(path)(np.ones((3, 4), np.float32))
    assert sum(n for (family, _), n in stats.items() if family == "softmax") == before + 1


def test_wrong_inputs_are_reported(tmp_path):
    path, _ = _mlp(tmp_path)
    model = load(path)
    with pytest.raises(ShapeError, match="fixes it to 4"):
        model(np.ones((2, 5), np.float32))
    with pytest.raises(DTypeError, match="astype"):
        model(np.ones((2, 4), np.float64))
    with pytest.raises(TypeError, match="no input named"):
        model(z=np.ones((2, 4), np.float32))
    with pytest.raises(TypeError, match="missing input"):
        model()


def test_symbolic_dims_must_agree(tmp_path):
    nodes = [helper.make_node("Add", ["a", "b"], ["c"])]
    model = _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 2]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n", 2])],
                   [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n", 2])])
    imported = load(_save(tmp_path, model))
    with pytest.raises(ShapeError, match="symbolic dim 'n'"):
        imported(np.ones((2, 2), np.float32), np.ones((3, 2), np.float32))


def test_unsupported_op_fails_at_load_naming_node_op_and_opset(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act"),
             helper.make_node("NonMaxSuppression", ["r", "r"], ["y"], name="nms")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                   [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    with pytest.raises(UnsupportedError) as info:
        load(_save(tmp_path, model))
    message = str(info.value)
    assert "'nms' (NonMaxSuppression, opset 17): op not supported" in message
    assert "Supported ops:" in message and "Relu" in message and "'act'" not in message


def test_unsupported_attribute_value_fails_at_load(tmp_path):
    nodes = [helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")]
    pads = numpy_helper.from_array(np.array([1, 1], np.int64), "p")
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])], [pads])
    with pytest.raises(UnsupportedError, match="mode='wrap'"):
        load(_save(tmp_path, model))


def test_not_onnx_is_a_format_error(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x00\x01 this is not a protobuf model \xff" * 4)
    with pytest.raises(FormatError, match="not a valid ONNX model"):
        load(path)


def test_shape_subgraph_is_folded_and_shape_inputs_specialize(tmp_path):
    # Reshape(x, Concat(Shape(x)[0:1], [-1])) : the shape is computed, not given.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one"], ["s0"]),
             helper.make_node("Concat", ["s0", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Reshape", ["flat", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                           helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    imported = load(_save(tmp_path, model))
    assert imported.shape_inputs == {"shape"}
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for shape in ([4, 6], [3, 8]):
        (y,) = imported(x, np.array(shape, np.int64))
        np.testing.assert_array_equal(y.numpy(), x.reshape(shape))


@pytest.mark.parametrize("backend", ["ref"])
def test_conv_pool_graph_matches_onnx_reference(tmp_path, backend):
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 0, 2, 1], strides=[2, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[2, 2], ceil_mode=1),
             helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["a"], ["y"])]
    inits = [numpy_helper.from_array(w, "w")] + [
        numpy_helper.from_array(v, name) for name, v in (
            ("s", rng.random(4).astype(np.float32) + 0.5),
            ("b", rng.standard_normal(4).astype(np.float32)),
            ("m", rng.standard_normal(4).astype(np.float32)),
            ("v", rng.random(4).astype(np.float32) + 0.5))]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 8])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    with ot.use_backend(backend):
        (y,) = load(_save(tmp_path, model))(x)
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-4, atol=1e-5)


def test_claims_the_common_ops():
    ops = set(supported_ops())
    for op in ("Conv", "MatMul", "Gemm", "Softmax", "LayerNormalization", "Attention",
               "Resize", "Reshape", "Gather", "Concat", "Slice", "Where", "Einsum"):
        assert op in ops
