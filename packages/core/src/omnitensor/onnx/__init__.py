"""ONNX import: `load(path)` turns an ONNX model into an omnitensor function.

Install the extra: ``pip install 'omnitensor[onnx]'``. Initializers become parameter tensors,
graph inputs the function's inputs; the model is traced per input signature by
`omnitensor.compile`, so it runs on any backend, optimized and cached like any other function.
Unsupported ops, attributes or element types raise `UnsupportedError` at load time, naming each
node, its op and the opset.
"""

from .model import OnnxModel as OnnxModel
from .model import load as load
from .model import supported_ops as supported_ops

__all__ = ["OnnxModel", "load", "supported_ops"]
