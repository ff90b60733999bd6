"""omnitensor's Array API namespace (the 2023.12 revision of the Python array API standard).

``x.__array_namespace__()`` returns this module, so libraries that dispatch on the standard
(scikit-learn with ``array_api_dispatch=True``, SciPy, array-api-compat) run on omnitensor
tensors, lazily like everything else. The functions are omnitensor's own (`omnitensor.exp` is
``omnitensor.array_api.exp``); only those whose standard signature differs live in
`_functions`. omnitensor has no complex, uint16 or uint64 dtypes. The `linalg` extension is
provided (its decompositions read their input, see `omnitensor.array_api.linalg`); `fft` is not.
Checked with the standard's own suite (``tox -e array-api-ref`` / ``array-api-cpu``).
"""

from __future__ import annotations

import math as _math
from typing import Any

from .. import dtypes as _dt
from ..dtypes import DType as _DType
from ..tensor.linalg import matmul as matmul
from ..tensor.linalg import matrix_transpose as matrix_transpose
from ..tensor.linalg import tensordot as tensordot
from ..tensor.linalg import vecdot as vecdot
from ..tensor.math import abs as abs
from ..tensor.math import acos as acos
from ..tensor.math import acosh as acosh
from ..tensor.math import add as add
from ..tensor.math import asin as asin
from ..tensor.math import asinh as asinh
from ..tensor.math import atan as atan
from ..tensor.math import atan2 as atan2
from ..tensor.math import atanh as atanh
from ..tensor.math import bitwise_and as bitwise_and
from ..tensor.math import bitwise_invert as bitwise_invert
from ..tensor.math import bitwise_or as bitwise_or
from ..tensor.math import bitwise_xor as bitwise_xor
from ..tensor.math import broadcast_to as broadcast_to
from ..tensor.math import ceil as ceil
from ..tensor.math import clip as clip
from ..tensor.math import copysign as copysign
from ..tensor.math import cos as cos
from ..tensor.math import cosh as cosh
from ..tensor.math import divide as divide
from ..tensor.math import equal as equal
from ..tensor.math import exp as exp
from ..tensor.math import expm1 as expm1
from ..tensor.math import floor as floor
from ..tensor.math import floor_divide as floor_divide
from ..tensor.math import greater as greater
from ..tensor.math import greater_equal as greater_equal
from ..tensor.math import hypot as hypot
from ..tensor.math import isfinite as isfinite
from ..tensor.math import isinf as isinf
from ..tensor.math import isnan as isnan
from ..tensor.math import less as less
from ..tensor.math import less_equal as less_equal
from ..tensor.math import log as log
from ..tensor.math import log1p as log1p
from ..tensor.math import log2 as log2
from ..tensor.math import log10 as log10
from ..tensor.math import logaddexp as logaddexp
from ..tensor.math import logical_and as logical_and
from ..tensor.math import logical_not as logical_not
from ..tensor.math import logical_or as logical_or
from ..tensor.math import logical_xor as logical_xor
from ..tensor.math import maximum as maximum
from ..tensor.math import minimum as minimum
from ..tensor.math import multiply as multiply
from ..tensor.math import negative as negative
from ..tensor.math import not_equal as not_equal
from ..tensor.math import positive as positive
from ..tensor.math import pow as pow
from ..tensor.math import remainder as remainder
from ..tensor.math import round as round
from ..tensor.math import sign as sign
from ..tensor.math import signbit as signbit
from ..tensor.math import sin as sin
from ..tensor.math import sinh as sinh
from ..tensor.math import sqrt as sqrt
from ..tensor.math import square as square
from ..tensor.math import subtract as subtract
from ..tensor.math import tan as tan
from ..tensor.math import tanh as tanh
from ..tensor.math import trunc as trunc
from ..tensor.math import where as where
from ..tensor.reduce import all as all
from ..tensor.reduce import any as any
from ..tensor.reduce import argmax as argmax
from ..tensor.reduce import argmin as argmin
from ..tensor.reduce import max as max
from ..tensor.reduce import mean as mean
from ..tensor.reduce import min as min
from ..tensor.reduce import prod as prod
from ..tensor.reduce import std as std
from ..tensor.reduce import sum as sum
from ..tensor.reduce import var as var
from ..tensor.shape import broadcast_arrays as broadcast_arrays
from ..tensor.shape import concat as concat
from ..tensor.shape import expand_dims as expand_dims
from ..tensor.shape import flip as flip
from ..tensor.shape import moveaxis as moveaxis
from ..tensor.shape import permute_dims as permute_dims
from ..tensor.shape import roll as roll
from ..tensor.shape import squeeze as squeeze
from ..tensor.shape import stack as stack
from ..tensor.shape import tile as tile
from ..tensor.shape import unstack as unstack
from . import linalg as linalg
from ._functions import arange as arange
from ._functions import argsort as argsort
from ._functions import asarray as asarray
from ._functions import astype as astype
from ._functions import bitwise_left_shift as bitwise_left_shift
from ._functions import bitwise_right_shift as bitwise_right_shift
from ._functions import can_cast as can_cast
from ._functions import conj as conj
from ._functions import cumulative_sum as cumulative_sum
from ._functions import empty as empty
from ._functions import empty_like as empty_like
from ._functions import eye as eye
from ._functions import finfo as finfo
from ._functions import from_dlpack as from_dlpack
from ._functions import full as full
from ._functions import full_like as full_like
from ._functions import iinfo as iinfo
from ._functions import imag as imag
from ._functions import isdtype as isdtype
from ._functions import linspace as linspace
from ._functions import meshgrid as meshgrid
from ._functions import nonzero as nonzero
from ._functions import ones as ones
from ._functions import ones_like as ones_like
from ._functions import real as real
from ._functions import repeat as repeat
from ._functions import reshape as reshape
from ._functions import result_type as result_type
from ._functions import searchsorted as searchsorted
from ._functions import sort as sort
from ._functions import take as take
from ._functions import tril as tril
from ._functions import triu as triu
from ._functions import unique_all as unique_all
from ._functions import unique_counts as unique_counts
from ._functions import unique_inverse as unique_inverse
from ._functions import unique_values as unique_values
from ._functions import zeros as zeros
from ._functions import zeros_like as zeros_like

__array_api_version__ = "2023.12"

bool = _dt.bool_  # noqa: A001 (the standard's name)
int8 = _dt.int8
int16 = _dt.int16
int32 = _dt.int32
int64 = _dt.int64
uint8 = _dt.uint8
uint32 = _dt.uint32
float32 = _dt.float32
float64 = _dt.float64

e = _math.e
inf = _math.inf
nan = _math.nan
pi = _math.pi
newaxis = None


class Info:
    """What `__array_namespace_info__` returns: devices, default dtypes and capabilities."""

    def capabilities(self) -> dict[str, Any]:
        """Optional features: boolean indexing (reads the mask) and data-dependent shapes."""
        return {"boolean indexing": True, "data-dependent shapes": True}

    def default_device(self) -> str:
        """The backend `omnitensor.get_backend()` selects."""
        from ..backend.registry import current_backend_name

        return current_backend_name()

    def devices(self) -> list[str]:
        """Every available backend."""
        from ..backend.registry import list_backends

        return [info.name for info in list_backends() if info.available]

    def default_dtypes(self, *, device: Any = None) -> dict[str, _DType | None]:
        """float32 for reals, int32 for integers and indices; no complex dtype."""
        return {"real floating": _dt.default_float, "complex floating": None,
                "integral": _dt.default_int, "indexing": _dt.int32}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, _DType]:
        """The dtypes of this namespace (of one kind when `kind` is given)."""
        every = {d.name: d for d in (bool, int8, int16, int32, int64, uint8, uint32, float32,
                                     float64)}
        if kind is None:
            return every
        return {name: d for name, d in every.items() if isdtype(d, kind)}


def __array_namespace_info__() -> Info:
    """Inspection of the namespace (devices, default dtypes, capabilities)."""
    return Info()


__all__ = [
    "linalg",
    "Info", "__array_api_version__", "__array_namespace_info__", "abs", "acos", "acosh", "add",
    "all", "any", "arange", "argmax", "argmin", "argsort", "asarray", "asin", "asinh", "astype",
    "atan", "atan2", "atanh", "bitwise_and", "bitwise_invert", "bitwise_left_shift",
    "bitwise_or", "bitwise_right_shift", "bitwise_xor", "bool", "broadcast_arrays",
    "broadcast_to", "can_cast", "ceil", "clip", "concat", "conj", "copysign", "cos", "cosh",
    "cumulative_sum", "divide", "e", "empty", "empty_like", "equal", "exp", "expand_dims",
    "expm1", "eye", "finfo", "flip", "float32", "float64", "floor", "floor_divide",
    "from_dlpack", "full", "full_like", "greater", "greater_equal", "hypot", "iinfo", "imag",
    "inf", "int16", "int32", "int64", "int8", "isdtype", "isfinite", "isinf", "isnan", "less",
    "less_equal", "linspace", "log", "log10", "log1p", "log2", "logaddexp", "logical_and",
    "logical_not", "logical_or", "logical_xor", "matmul", "matrix_transpose", "max", "maximum",
    "mean", "meshgrid", "min", "minimum", "moveaxis", "multiply", "nan", "negative", "newaxis",
    "nonzero", "not_equal", "ones", "ones_like", "permute_dims", "pi", "positive", "pow",
    "prod", "real", "remainder", "repeat", "reshape", "result_type", "roll", "round",
    "searchsorted", "sign", "signbit", "sin", "sinh", "sort", "sqrt", "square", "squeeze",
    "stack", "std", "subtract", "sum", "take", "tan", "tanh", "tensordot", "tile", "tril",
    "triu", "trunc", "uint32", "uint8", "unique_all", "unique_counts", "unique_inverse",
    "unique_values", "unstack", "var", "vecdot", "where", "zeros", "zeros_like",
]
