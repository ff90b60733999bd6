"""The types PTIR values carry: dense `TensorType` and block-quantized `QTensorType`; `Value`.

Nothing here knows about ops; `opdef` and `program` build on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, final

from ..dtypes import DType, as_dtype
from ..errors import ShapeError

__all__ = ["HALF_FORMATS", "QTENSOR_FORMATS", "QUANT_FORMATS", "QuantFormat", "QTensorType",
           "TensorType", "Type", "Value"]


@final
@dataclass(frozen=True)
class TensorType:
    """A dense tensor type: shape and dtype.

    Attributes:
        shape: non-negative dimension sizes; ``()`` is a scalar.
        dtype: the element type.
    """

    shape: tuple[int, ...]
    dtype: DType

    def __post_init__(self) -> None:
        shape = tuple([int(d) for d in self.shape])
        if shape and min(shape) < 0:
            raise ShapeError(f"tensor type: negative dimension (got {shape})")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", as_dtype(self.dtype))

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of a dense row-major buffer of this type."""
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.short}[{','.join(map(str, self.shape))}]"


@final
@dataclass(frozen=True)
class QuantFormat:
    """A ggml block-quantization format.

    Attributes:
        name: ``"q8_0"``, ``"q4_0"``, ``"q4_k"``, ``"q6_k"`` ... or ``"f16"``/``"bf16"``.
        block: logical elements per block (along the last logical axis).
        block_bytes: bytes one block occupies.
        spelling: how the IR text writes the type (default: `name`; the 16-bit formats
            differ from the dense dtypes of the same name).
    """

    name: str
    block: int
    block_bytes: int
    spelling: str = ""

    @property
    def text(self) -> str:
        """The type's name in the IR text."""
        return self.spelling or self.name


QUANT_FORMATS: Final[dict[str, QuantFormat]] = {
    f.name: f
    for f in (
        QuantFormat("q8_0", 32, 34),  # f16 scale + 32 int8
        QuantFormat("q4_0", 32, 18),  # f16 scale + 16 bytes of nibbles
        QuantFormat("q4_k", 256, 144),  # f16 d, f16 dmin, 12 bytes scales, 128 bytes nibbles
        QuantFormat("q6_k", 256, 210),  # 128 ql, 64 qh, 16 int8 scales, f16 d
        # more ggml formats (codecs in ir.quant_codecs)
        QuantFormat("q4_1", 32, 20),  # f16 d, f16 m, 16 bytes of nibbles
        QuantFormat("q5_0", 32, 22),  # f16 d, 4 bytes of fifth bits, 16 bytes of nibbles
        QuantFormat("q5_1", 32, 24),  # f16 d, f16 m, 4 bytes of fifth bits, 16 of nibbles
        QuantFormat("q2_k", 256, 84),  # 16 scale/min bytes, 64 bytes of 2-bit q, f16 d, dmin
        QuantFormat("q3_k", 256, 110),  # 32 hmask, 64 bytes of 2-bit q, 12 scales, f16 d
        QuantFormat("q5_k", 256, 176),  # f16 d, dmin, 12 scales, 32 qh, 128 nibbles
        QuantFormat("iq4_nl", 32, 18),  # f16 d, 16 bytes of indices into a non-linear table
        QuantFormat("iq4_xs", 256, 136),  # f16 d, u16 + 4 bytes of 6-bit scales, 128 indices
    )
}

#: ggml's 16-bit float types as weight storage: a 2-D float16/bfloat16 weight that `qmatmul`
#: reads as it is (widening each element on the fly) instead of a float32 copy. GGUF files hold
#: them as dense tensors; the model layer wraps matrices in this form (`models.compiled`).
HALF_FORMATS: Final[dict[str, QuantFormat]] = {
    f.name: f
    for f in (
        QuantFormat("f16", 1, 2, "ggml_f16"),  # IEEE half, little-endian
        QuantFormat("bf16", 1, 2, "ggml_bf16"),  # the top 16 bits of a float32
    )
}

#: Every storage format of `QTensorType`: the block formats and the 16-bit ones.
QTENSOR_FORMATS: Final[dict[str, QuantFormat]] = {**QUANT_FORMATS, **HALF_FORMATS}


@final
@dataclass(frozen=True)
class QTensorType:
    """A block-quantized tensor: a logical float tensor stored as ggml blocks (uint8 bytes).

    The blocks run along the last logical axis, so ``logical_shape[-1]`` must be a multiple of
    the format's block size. The storage is a uint8 array of shape
    ``logical_shape[:-1] + (logical_shape[-1] // block * block_bytes,)``.
    """

    format: str
    logical_shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.format not in QTENSOR_FORMATS:
            known = ", ".join(QTENSOR_FORMATS)
            raise ShapeError(f"quantized type: unknown format {self.format!r} (expected {known})")
        shape = tuple(int(d) for d in self.logical_shape)
        fmt = QTENSOR_FORMATS[self.format]
        if not shape or shape[-1] % fmt.block:
            raise ShapeError(
                f"quantized type: last axis must be a multiple of {fmt.block} for {self.format} "
                f"(got shape {shape})"
            )
        object.__setattr__(self, "logical_shape", shape)

    @property
    def storage_shape(self) -> tuple[int, ...]:
        """Shape of the uint8 byte array that holds the blocks."""
        fmt = QTENSOR_FORMATS[self.format]
        *lead, last = self.logical_shape
        return (*lead, last // fmt.block * fmt.block_bytes)

    @property
    def shape(self) -> tuple[int, ...]:
        """The logical shape (what `dequantize` returns)."""
        return self.logical_shape

    @property
    def ndim(self) -> int:
        """Number of logical dimensions."""
        return len(self.logical_shape)

    def __str__(self) -> str:
        text = QTENSOR_FORMATS[self.format].text
        return f"{text}[{','.join(map(str, self.logical_shape))}]"


Type = TensorType | QTensorType


@final
class Value:
    """An SSA value: the result of one instruction or a function input.

    Identity is the object; `id` is stable within its function and is what the text form prints.
    """

    __slots__ = ("id", "type")

    def __init__(self, id: int, type: Type) -> None:
        self.id = id
        self.type = type

    def __repr__(self) -> str:
        return f"%{self.id}: {self.type}"
