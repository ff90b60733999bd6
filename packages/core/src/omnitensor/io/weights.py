"""What every weight-file reader returns: `TensorInfo`, `QuantizedArray`, the `WeightFile` protocol.

The format readers (`io.gguf`, `io.safetensors`) implement `WeightFile`; the model layer consumes it
without knowing which format a tensor came from. No parsing lives here.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, final, runtime_checkable

import numpy as np

from ..dtypes import DType, as_dtype
from ..errors import DTypeError, FormatError, ShapeError
from ..ir import quant_blocks
from ..ir.types import QUANT_FORMATS, QTensorType

__all__ = ["Array", "QuantizedArray", "TensorInfo", "WeightFile", "missing_tensor"]

Array = np.ndarray[Any, Any]

# Dense type names (the lower-case ggml / safetensors spelling) -> numpy dtype names.
_DENSE: dict[str, str] = {
    "f64": "float64",
    "f32": "float32",
    "f16": "float16",
    "bf16": "bfloat16",
    "i64": "int64",
    "i32": "int32",
    "i16": "int16",
    "i8": "int8",
    "u64": "uint64",
    "u32": "uint32",
    "u16": "uint16",
    "u8": "uint8",
    "bool": "bool",
}


@final
@dataclass(frozen=True)
class TensorInfo:
    """Where a tensor lives in a file and what it holds, without reading it.

    Attributes:
        name: the tensor's name in the file.
        shape: the logical shape in omnitensor (numpy, row-major) order; for GGUF this is ggml's
            ``ne`` reversed.
        type: lower-case element type: ``"f32"``, ``"f16"``, ``"bf16"``, ``"i32"``, ... for dense
            tensors, ``"q8_0"``, ``"q4_0"``, ``"q4_k"``, ``"q6_k"`` (or another ggml type name such
            as ``"q5_k"``) for block-quantized ones.
        offset: absolute byte offset of the data in its file.
        nbytes: bytes of data.
        file: the file that holds the data (shards of one model differ).
    """

    name: str
    shape: tuple[int, ...]
    type: str
    offset: int
    nbytes: int
    file: Path

    @property
    def size(self) -> int:
        """Number of logical elements."""
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def quantized(self) -> bool:
        """Whether the data are ggml blocks rather than dense elements."""
        return self.type not in _DENSE

    @property
    def dtype(self) -> DType | None:
        """The omnitensor dtype of a dense tensor (None for quantized or exotic types)."""
        name = _DENSE.get(self.type)
        if name is None:
            return None
        try:
            return as_dtype(name)
        except DTypeError:  # a numpy dtype omnitensor lacks (uint16, uint64)
            return None

    @property
    def qtype(self) -> QTensorType | None:
        """The PTIR type of a tensor in one of omnitensor's quantization formats, else None."""
        if self.type in QUANT_FORMATS:
            return QTensorType(self.type, self.shape)
        return None


@final
@dataclass(frozen=True, eq=False)
class QuantizedArray:
    """A block-quantized tensor held in memory as its ggml bytes.

    Attributes:
        blocks: uint8 array of shape ``QTensorType(format, shape).storage_shape`` (blocks run
            along the last logical axis).
        format: ``"q8_0"``, ``"q4_0"``, ``"q4_k"`` or ``"q6_k"``.
        shape: the logical shape (what `dequantize` returns).

    Raises:
        ShapeError: when `blocks` does not have the storage shape of (`format`, `shape`).
    """

    blocks: Array
    format: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        qtype = QTensorType(self.format, tuple(self.shape))
        object.__setattr__(self, "shape", qtype.logical_shape)
        if self.blocks.dtype != np.uint8 or tuple(self.blocks.shape) != qtype.storage_shape:
            raise ShapeError(
                f"quantized array: blocks do not fit {qtype} (got {self.blocks.dtype}"
                f"{list(self.blocks.shape)}, expected uint8{list(qtype.storage_shape)})"
            )

    @classmethod
    def quantize(cls, x: Any, format: str) -> QuantizedArray:
        """Quantize float array `x` [..., K] into `format` blocks (ggml's reference quantizer)."""
        array = np.asarray(x, dtype=np.float32)
        return cls(quant_blocks.quantize(array, format), format, tuple(array.shape))

    @property
    def type(self) -> QTensorType:
        """The PTIR type of this tensor."""
        return QTensorType(self.format, self.shape)

    @property
    def ndim(self) -> int:
        """Number of logical dimensions."""
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of block storage."""
        return int(self.blocks.nbytes)

    def dequantize(self) -> Array:
        """Decode to float32 of the logical shape (bit-exact with ggml)."""
        return quant_blocks.dequantize(self.blocks, self.format)

    def __repr__(self) -> str:
        return f"QuantizedArray({self.type}, {self.nbytes} bytes)"


@runtime_checkable
class WeightFile(Protocol):
    """Named tensors plus metadata, read lazily by name and copied into memory when loaded.

    Implemented by `io.gguf.GGUFFile`, `io.safetensors.SafetensorsFile` and the sharded
    `io.safetensors.ShardedWeights`.
    """

    @property
    def path(self) -> Path:
        """The file (or directory) the weights come from."""

    @property
    def metadata(self) -> Mapping[str, Any]:
        """Key/value metadata (GGUF key/values, safetensors ``__metadata__``)."""

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """Every tensor name, in file order."""

    def tensor_info(self, name: str) -> TensorInfo:
        """Shape, type and location of tensor `name`; FormatError if there is none."""

    def load(self, name: str, *, dequantize: bool = False, mapped: bool = False
             ) -> Array | QuantizedArray:
        """Read tensor `name`: a copy, or with `mapped` a read-only view of the mapped file."""

    def __contains__(self, name: object) -> bool:
        """Whether a tensor of that name exists."""

    def __iter__(self) -> Iterator[str]:
        """Iterate over tensor names."""


def missing_tensor(path: Path | str, name: str, names: tuple[str, ...]) -> FormatError:
    """The FormatError for a tensor name that is not in a file, with the closest names."""
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return FormatError(
        f"{path}: no tensor named {name!r} (the file has {len(names)} tensors){hint}",
        path=str(path),
    )
