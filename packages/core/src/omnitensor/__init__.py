"""omnitensor: tensors and models defined once in PTIR, run by pluggable backends.

The public API lives here; everything else is importable from its own module.
"""

from . import dtypes as dtypes
from . import errors as errors
from . import functional as functional
from . import nn as nn
from .autograd import enable_grad as enable_grad
from .autograd import grad as grad
from .autograd import no_grad as no_grad
from .autograd import value_and_grad as value_and_grad
from .backend.contract import Backend as Backend
from .backend.hookspecs import hookimpl as hookimpl
from .backend.registry import get_backend as get_backend
from .backend.registry import list_backends as list_backends
from .backend.registry import use_backend as use_backend
from .dtypes import bfloat16 as bfloat16
from .dtypes import bool_ as bool_
from .dtypes import float16 as float16
from .dtypes import float32 as float32
from .dtypes import float64 as float64
from .dtypes import int8 as int8
from .dtypes import int16 as int16
from .dtypes import int32 as int32
from .dtypes import int64 as int64
from .dtypes import uint8 as uint8
from .dtypes import uint32 as uint32
from .tensor.creation import arange as arange
from .tensor.creation import eye as eye
from .tensor.creation import full as full
from .tensor.creation import full_like as full_like
from .tensor.creation import key as key
from .tensor.creation import linspace as linspace
from .tensor.creation import manual_seed as manual_seed
from .tensor.creation import ones as ones
from .tensor.creation import ones_like as ones_like
from .tensor.creation import rand as rand
from .tensor.creation import randn as randn
from .tensor.creation import split_key as split_key
from .tensor.creation import tensor as tensor
from .tensor.creation import zeros as zeros
from .tensor.creation import zeros_like as zeros_like
from .tensor.interop import from_dlpack as from_dlpack
from .tensor.interop import from_numpy as from_numpy
from .tensor.jit import compile as compile
from .tensor.math import broadcast_to as broadcast_to
from .tensor.math import concatenate as concatenate
from .tensor.math import matmul as matmul
from .tensor.math import maximum as maximum
from .tensor.math import minimum as minimum
from .tensor.math import stack as stack
from .tensor.math import where as where
from .tensor.tensor import Tensor as Tensor
from .tensor.tensor import realize as realize

__version__ = "0.1.0"

__all__ = [
    "Backend", "Tensor", "arange", "bfloat16", "bool_", "broadcast_to", "compile", "concatenate",
    "dtypes", "errors", "eye", "float16", "float32", "float64", "from_dlpack", "from_numpy",
    "full", "full_like", "get_backend", "hookimpl", "int16", "int32", "int64", "int8", "key",
    "linspace", "list_backends", "manual_seed", "matmul", "maximum", "minimum", "ones",
    "ones_like", "rand", "randn", "realize", "split_key", "stack", "tensor", "uint32", "uint8",
    "use_backend", "where", "zeros", "zeros_like",
    "enable_grad", "grad", "no_grad", "value_and_grad", "functional", "nn",
]
