"""dtypes of omnitensor, their categories and the promotion table (DESIGN §3).

Defaults: float32 for float creation and Python float literals, int32 for integer creation,
indices and token ids. Python scalars are weak: they take the tensor's dtype. float16/bfloat16
reductions and dot products accumulate in float32 (`accumulator`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, final

import ml_dtypes
import numpy as np

from .errors import DTypeError

__all__ = [
    "ALL",
    "BOOL",
    "DType",
    "FLOATING",
    "INTEGER",
    "NUMERIC",
    "SIGNED",
    "UNSIGNED",
    "accumulator",
    "as_dtype",
    "bfloat16",
    "bool_",
    "default_float",
    "default_int",
    "float16",
    "float32",
    "float64",
    "int16",
    "int32",
    "int64",
    "int8",
    "promote",
    "result_type",
    "uint32",
    "uint8",
]


@final
@dataclass(frozen=True, eq=True)
class DType:
    """A tensor element type.

    Attributes:
        name: numpy-style name (``"float32"``).
        short: the name used in PTIR text (``"f32"``).
        kind: ``"f"`` float, ``"i"`` signed int, ``"u"`` unsigned int, ``"b"`` bool.
        bits: width in bits.
    """

    name: str
    short: str
    kind: str
    bits: int

    @property
    def np(self) -> np.dtype[Any]:
        """The numpy dtype that stores this type (ml_dtypes for bfloat16)."""
        return _NUMPY[self.name]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return max(1, self.bits // 8)

    @property
    def is_floating(self) -> bool:
        """True for float16, bfloat16, float32, float64."""
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        """True for signed and unsigned integers (not bool)."""
        return self.kind in "iu"

    @property
    def is_bool(self) -> bool:
        """True for bool."""
        return self.kind == "b"

    def __repr__(self) -> str:
        return f"omnitensor.{self.name}"

    def __str__(self) -> str:
        return self.name


float16: Final = DType("float16", "f16", "f", 16)
bfloat16: Final = DType("bfloat16", "bf16", "f", 16)
float32: Final = DType("float32", "f32", "f", 32)
float64: Final = DType("float64", "f64", "f", 64)
int8: Final = DType("int8", "i8", "i", 8)
int16: Final = DType("int16", "i16", "i", 16)
int32: Final = DType("int32", "i32", "i", 32)
int64: Final = DType("int64", "i64", "i", 64)
uint8: Final = DType("uint8", "u8", "u", 8)
uint32: Final = DType("uint32", "u32", "u", 32)
bool_: Final = DType("bool", "bool", "b", 8)

ALL: Final[tuple[DType, ...]] = (
    float32, float16, bfloat16, float64, int8, int16, int32, int64, uint8, uint32, bool_,
)
FLOATING: Final = tuple(d for d in ALL if d.is_floating)
SIGNED: Final = tuple(d for d in ALL if d.kind == "i")
UNSIGNED: Final = tuple(d for d in ALL if d.kind == "u")
INTEGER: Final = SIGNED + UNSIGNED
NUMERIC: Final = FLOATING + INTEGER
BOOL: Final = (bool_,)

default_float: Final = float32
default_int: Final = int32

_NUMPY: dict[str, np.dtype[Any]] = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint32": np.dtype(np.uint32),
    "bool": np.dtype(np.bool_),
}
_BY_NAME: dict[str, DType] = {d.name: d for d in ALL} | {d.short: d for d in ALL}
_BY_NUMPY: dict[np.dtype[Any], DType] = {v: _BY_NAME[k] for k, v in _NUMPY.items()}


def as_dtype(value: Any) -> DType:
    """Turn a DType, a name (``"float32"``, ``"f32"``), a numpy dtype or a Python type into a DType.

    Raises:
        DTypeError: for anything that names no omnitensor dtype.
    """
    if isinstance(value, DType):
        return value
    if value is float:
        return default_float
    if value is int:
        return default_int
    if value is bool:
        return bool_
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    try:
        npd = np.dtype(value)
    except TypeError:
        npd = None
    if npd is not None and npd in _BY_NUMPY:
        return _BY_NUMPY[npd]
    known = ", ".join(d.name for d in ALL)
    raise DTypeError(f"dtype: {value!r} is not an omnitensor dtype (expected one of {known})")


# The promotion lattice: bool < unsigned < signed < floats, as in JAX's type lattice without the
# weak types (weak Python scalars are handled by `result_type`). Mixed signed/unsigned of the same
# width widen; float16 with bfloat16 gives float32.
def _rank(d: DType) -> tuple[int, int]:
    return ({"b": 0, "u": 1, "i": 2, "f": 3}[d.kind], d.bits)


def promote(a: DType, b: DType) -> DType:
    """The dtype both `a` and `b` convert to without loss where possible (the promotion table).

    Args:
        a: first dtype.
        b: second dtype.

    Returns:
        The promoted dtype. int ⊕ float gives that float; f16 ⊕ bf16 gives float32;
        a signed ⊕ unsigned pair gives the smallest signed type holding both (int64 at most).
    """
    if a == b:
        return a
    if {a, b} == {float16, bfloat16}:
        return float32
    hi, lo = (a, b) if _rank(a) >= _rank(b) else (b, a)
    if hi.kind == "f" or lo.kind == "b" or hi.kind == lo.kind:
        return hi
    # signed (hi) with unsigned (lo): the signed type must be wider than the unsigned one.
    for candidate in (int8, int16, int32, int64):
        if candidate.bits > lo.bits and candidate.bits >= hi.bits:
            return candidate
    return int64


def result_type(*args: Any) -> DType:
    """Promote tensors' dtypes and weak Python scalars, as DESIGN §3 states.

    Arguments with a ``dtype`` attribute (tensors, arrays) are strong; Python ``bool``, ``int``
    and ``float`` are weak: they take the strong dtype unless their category is higher
    (a float scalar with an int tensor gives the default float dtype).
    """
    strong = [as_dtype(a.dtype) for a in args if hasattr(a, "dtype")]
    weak = [a for a in args if not hasattr(a, "dtype")]
    if strong:
        out = strong[0]
        for d in strong[1:]:
            out = promote(out, d)
    elif all(isinstance(w, bool) for w in weak):
        return bool_
    else:
        return default_float if any(isinstance(w, float) for w in weak) else default_int
    for w in weak:
        if isinstance(w, bool):
            continue
        if isinstance(w, int) and out.is_bool:
            out = default_int
        elif isinstance(w, float) and not out.is_floating:
            out = default_float
    return out


def accumulator(dtype: DType) -> DType:
    """The dtype reductions and dot products of `dtype` accumulate in (float32 for f16/bf16)."""
    return float32 if dtype in (float16, bfloat16) else dtype
