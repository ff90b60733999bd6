"""ONNX op handlers, one module per family; importing this package registers them all."""

from . import attention as attention
from . import elementwise as elementwise
from . import extra as extra
from . import losses as losses
from . import more as more
from . import nn as nn
from . import reduce as reduce
from . import resize as resize
from . import shape as shape

__all__ = ["attention", "elementwise", "extra", "losses", "more", "nn", "reduce", "resize", "shape"]
