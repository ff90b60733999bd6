"""`omnitensor inspect model.onnx` and `omnitensor run model.onnx --input ...`."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="ONNX import needs the onnx package (omnitensor[onnx])")
from onnx import TensorProto, helper  # noqa: E402

from omnitensor.cli.main import main  # noqa: E402


@pytest.fixture
def model_path(tmp_path):
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Tanh", ["sq"], ["y"])]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_inspect_lists_io_ops_and_support(model_path, capsys):
    assert main(["inspect", str(model_path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["inputs"] == [{"name": "x", "dtype": "FLOAT", "shape": ["n", 3]}]
    assert info["ops"] == {"Mul": 1, "Tanh": 1}
    assert info["omnitensor"] == "supported"


def test_run_saves_outputs(model_path, tmp_path, capsys):
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    code = main(["run", str(model_path), "--input", f"x={tmp_path / 'x.npy'}", "--output",
                 str(out), "--backend", "ref"])
    assert code == 0
    np.testing.assert_allclose(np.load(out / "y.npy"), np.tanh(x * x), rtol=1e-6)


def test_run_reports_missing_and_bad_inputs(model_path, capsys):
    assert main(["run", str(model_path)]) == 2
    assert "missing --input for x" in capsys.readouterr().err
    assert main(["run", str(model_path), "--input", "x=/no/such.npy"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["run", str(model_path), "--input", "x=@2x4:float32", "--backend", "ref"]) == 1
    assert "fixes it to 3" in capsys.readouterr().err
