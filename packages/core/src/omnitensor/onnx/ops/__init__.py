"""ONNX op handlers, one module per family; importing this package registers them all."""

from . import elementwise as elementwise
from . import nn as nn
from . import reduce as reduce
from . import shape as shape

__all__ = ["elementwise", "nn", "reduce", "shape"]
