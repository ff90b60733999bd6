"""omnitensor: tensors and models defined once in PTIR, run by pluggable backends.

The public API lives here; everything else is importable from its own module.
"""

from . import array_api as array_api
from . import distributed as distributed
from . import dtypes as dtypes
from . import errors as errors
from . import functional as functional
from . import nn as nn
from .autograd import enable_grad as enable_grad
from .autograd import grad as grad
from .autograd import no_grad as no_grad
from .autograd import value_and_grad as value_and_grad
from .autograd.api import vjp as vjp
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
from .io.save import load as load
from .io.save import save as save
from .tensor.creation import arange as arange
from .tensor.creation import empty as empty
from .tensor.creation import empty_like as empty_like
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
from .tensor.linalg import einsum as einsum
from .tensor.linalg import matmul as matmul
from .tensor.linalg import matrix_transpose as matrix_transpose
from .tensor.linalg import outer as outer
from .tensor.linalg import tensordot as tensordot
from .tensor.linalg import vecdot as vecdot
from .tensor.math import abs as abs
from .tensor.math import acos as acos
from .tensor.math import acosh as acosh
from .tensor.math import add as add
from .tensor.math import asin as asin
from .tensor.math import asinh as asinh
from .tensor.math import atan as atan
from .tensor.math import atan2 as atan2
from .tensor.math import atanh as atanh
from .tensor.math import bitwise_and as bitwise_and
from .tensor.math import bitwise_invert as bitwise_invert
from .tensor.math import bitwise_or as bitwise_or
from .tensor.math import bitwise_xor as bitwise_xor
from .tensor.math import broadcast_to as broadcast_to
from .tensor.math import ceil as ceil
from .tensor.math import clip as clamp
from .tensor.math import clip as clip
from .tensor.math import cos as cos
from .tensor.math import cosh as cosh
from .tensor.math import divide as div
from .tensor.math import divide as divide
from .tensor.math import equal as eq
from .tensor.math import equal as equal
from .tensor.math import erf as erf
from .tensor.math import exp as exp
from .tensor.math import expm1 as expm1
from .tensor.math import floor as floor
from .tensor.math import floor_divide as floor_divide
from .tensor.math import greater as greater
from .tensor.math import greater as gt
from .tensor.math import greater_equal as ge
from .tensor.math import greater_equal as greater_equal
from .tensor.math import hypot as hypot
from .tensor.math import isfinite as isfinite
from .tensor.math import isinf as isinf
from .tensor.math import isnan as isnan
from .tensor.math import less as less
from .tensor.math import less as lt
from .tensor.math import less_equal as le
from .tensor.math import less_equal as less_equal
from .tensor.math import log as log
from .tensor.math import log1p as log1p
from .tensor.math import log2 as log2
from .tensor.math import log10 as log10
from .tensor.math import logaddexp as logaddexp
from .tensor.math import logical_and as logical_and
from .tensor.math import logical_not as logical_not
from .tensor.math import logical_or as logical_or
from .tensor.math import logical_xor as logical_xor
from .tensor.math import maximum as maximum
from .tensor.math import minimum as minimum
from .tensor.math import multiply as mul
from .tensor.math import multiply as multiply
from .tensor.math import negative as neg
from .tensor.math import negative as negative
from .tensor.math import not_equal as ne
from .tensor.math import not_equal as not_equal
from .tensor.math import positive as positive
from .tensor.math import pow as pow
from .tensor.math import reciprocal as reciprocal
from .tensor.math import remainder as remainder
from .tensor.math import round as round
from .tensor.math import rsqrt as rsqrt
from .tensor.math import sigmoid as sigmoid
from .tensor.math import sign as sign
from .tensor.math import sin as sin
from .tensor.math import sinh as sinh
from .tensor.math import sqrt as sqrt
from .tensor.math import square as square
from .tensor.math import subtract as sub
from .tensor.math import subtract as subtract
from .tensor.math import tan as tan
from .tensor.math import tanh as tanh
from .tensor.math import trunc as trunc
from .tensor.math import where as where
from .tensor.reduce import all as all
from .tensor.reduce import amax as amax
from .tensor.reduce import amin as amin
from .tensor.reduce import any as any
from .tensor.reduce import argmax as argmax
from .tensor.reduce import argmin as argmin
from .tensor.reduce import count_nonzero as count_nonzero
from .tensor.reduce import cumsum as cumsum
from .tensor.reduce import logsumexp as logsumexp
from .tensor.reduce import max as max
from .tensor.reduce import mean as mean
from .tensor.reduce import min as min
from .tensor.reduce import prod as prod
from .tensor.reduce import std as std
from .tensor.reduce import sum as sum
from .tensor.reduce import var as var
from .tensor.shape import broadcast_arrays as broadcast_arrays
from .tensor.shape import cat as cat
from .tensor.shape import clone as clone
from .tensor.shape import concat as concat
from .tensor.shape import concatenate as concatenate
from .tensor.shape import expand_dims as expand_dims
from .tensor.shape import flatten as flatten
from .tensor.shape import flip as flip
from .tensor.shape import moveaxis as moveaxis
from .tensor.shape import narrow as narrow
from .tensor.shape import permute as permute
from .tensor.shape import permute_dims as permute_dims
from .tensor.shape import repeat as repeat
from .tensor.shape import reshape as reshape
from .tensor.shape import roll as roll
from .tensor.shape import split as split
from .tensor.shape import squeeze as squeeze
from .tensor.shape import stack as stack
from .tensor.shape import swapaxes as swapaxes
from .tensor.shape import tile as tile
from .tensor.shape import transpose as transpose
from .tensor.shape import unsqueeze as unsqueeze
from .tensor.shape import unstack as unstack
from .tensor.tensor import Tensor as Tensor
from .tensor.tensor import realize as realize

__version__ = "0.1.0"

__all__ = [
    "distributed",
    "load", "save", "array_api",
    "Backend", "Tensor", "abs", "acos", "acosh", "add", "all", "amax", "amin", "any", "arange",
    "argmax", "argmin", "asin", "asinh", "atan", "atan2", "atanh", "bfloat16", "bitwise_and",
    "bitwise_invert", "bitwise_or", "bitwise_xor", "bool_", "broadcast_arrays", "broadcast_to",
    "cat", "ceil", "clamp", "clip", "clone", "compile", "concat", "concatenate", "cos", "cosh",
    "count_nonzero", "cumsum", "div", "divide", "dtypes", "einsum", "empty", "empty_like",
    "enable_grad", "eq", "equal", "erf", "errors", "exp", "expand_dims", "expm1", "eye",
    "flatten", "flip", "float16", "float32", "float64", "floor", "floor_divide", "from_dlpack",
    "from_numpy", "full", "full_like", "functional", "ge", "get_backend", "grad", "greater",
    "greater_equal", "gt", "hookimpl", "hypot", "int16", "int32", "int64", "int8", "isfinite",
    "isinf", "isnan", "key", "le", "less", "less_equal", "linspace", "list_backends", "log",
    "log10", "log1p", "log2", "logaddexp", "logical_and", "logical_not", "logical_or",
    "logical_xor", "logsumexp", "lt", "manual_seed", "matmul", "matrix_transpose", "max",
    "maximum", "mean", "min", "minimum", "moveaxis", "mul", "multiply", "narrow", "ne", "neg",
    "negative", "nn", "no_grad", "not_equal", "ones", "ones_like", "outer", "permute",
    "permute_dims", "positive", "pow", "prod", "rand", "randn", "realize", "reciprocal",
    "remainder", "repeat", "reshape", "roll", "round", "rsqrt", "sigmoid", "sign", "sin",
    "sinh", "split", "split_key", "sqrt", "square", "squeeze", "stack", "std", "sub",
    "subtract", "sum", "swapaxes", "tan", "tanh", "tensor", "tensordot", "tile", "transpose",
    "trunc", "uint32", "uint8", "unsqueeze", "unstack", "use_backend", "value_and_grad", "var",
    "vecdot", "vjp", "where", "zeros", "zeros_like",
]
