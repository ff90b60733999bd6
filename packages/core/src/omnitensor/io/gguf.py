"""GGUF files as llama.cpp writes them: a strict reader (`read_gguf`) and a writer (`write_gguf`).

The reader parses the header itself, checking every count, length, offset and size against the
file before it reads or allocates anything, so a malformed file is a `FormatError` naming the file
and the offset, never a crash, a hang or a huge allocation. (`gguf.GGUFReader` memory-maps the
whole file and clips out-of-range slices silently, so it is used only in tests, as a cross-check.)
Tensor data are copied into memory on `load`, or viewed in place in the file mapped read-only
(``load(name, mapped=True)``, what models use: see `io.mapped`). Type tables come from
the `gguf` package, and the writer is `gguf.GGUFWriter`, so files follow llama.cpp's conventions.
Name mapping and the rotary q/k row order live in `io.names`; tokenizers in `io.tokenizer`.
"""

from __future__ import annotations

import functools
import io
import logging
import math
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, Literal, final, overload

import ml_dtypes
import numpy as np

from ..errors import FormatError, ShapeError, UnsupportedError
from ..ir.types import QUANT_FORMATS
from ._compat import ggml_dequantize, gguf_module, gguf_writer
from .gguf_mix import FILE_TYPES, tensor_types
from .mapped import map_file
from .weights import Array, QuantizedArray, TensorInfo, missing_tensor

__all__ = ["GGUFFile", "NumberArray", "read_gguf", "write_gguf"]

_logger = logging.getLogger(__name__)

MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = (2, 3)
MAX_DIMS: Final = 4  # GGML_MAX_DIMS
DEFAULT_ALIGNMENT: Final = 32
_MAX_NESTING: Final = 4  # arrays of arrays; llama.cpp itself writes none
# Elements of arrays of arrays in one file: each becomes a Python list (~60 bytes for a 12-byte
# header), so millions of empty nested arrays would cost 5x the file and seconds to parse.
_MAX_NESTED_ELEMENTS: Final = 1 << 16

# GGUF metadata value types (gguf_type in ggml/gguf.h): id -> (name, struct format or "").
_VALUE_TYPES: Final[dict[int, tuple[str, str]]] = {
    0: ("uint8", "<B"),
    1: ("int8", "<b"),
    2: ("uint16", "<H"),
    3: ("int16", "<h"),
    4: ("uint32", "<I"),
    5: ("int32", "<i"),
    6: ("float32", "<f"),
    7: ("bool", "<?"),
    8: ("string", ""),
    9: ("array", ""),
    10: ("uint64", "<Q"),
    11: ("int64", "<q"),
    12: ("float64", "<d"),
}
_VALUE_TYPE_IDS: Final = {name: tid for tid, (name, _) in _VALUE_TYPES.items()}
_NUMPY_VALUE: Final = {"uint8": "<u1", "int8": "<i1", "uint16": "<u2", "int16": "<i2",
                       "uint32": "<u4", "int32": "<i4", "float32": "<f4", "uint64": "<u8",
                       "int64": "<i8", "float64": "<f8", "bool": "<u1"}

# Dense ggml types -> numpy dtypes of their elements (little-endian).
_DENSE_NUMPY: Final[dict[str, Any]] = {
    "f32": np.dtype("<f4"), "f16": np.dtype("<f2"), "bf16": np.dtype(ml_dtypes.bfloat16),
    "f64": np.dtype("<f8"), "i8": np.dtype("i1"), "i16": np.dtype("<i2"),
    "i32": np.dtype("<i4"), "i64": np.dtype("<i8"),
}


@dataclass(frozen=True)
class _GGMLType:
    id: int
    name: str  # lower case: "f32", "q4_k"
    block: int  # elements per block
    block_bytes: int


@functools.cache
def _ggml_types() -> dict[int, _GGMLType]:
    """Ggml's tensor types with their block sizes, from the `gguf` package's tables."""
    gguf = gguf_module()
    return {
        int(t.value): _GGMLType(int(t.value), t.name.lower(), *map(int, gguf.GGML_QUANT_SIZES[t]))
        for t in gguf.GGMLQuantizationType
        if t in gguf.GGML_QUANT_SIZES
    }


def _ggml_type_by_name(name: str) -> _GGMLType:
    for info in _ggml_types().values():
        if info.name == name:
            return info
    raise FormatError(f"write_gguf: unknown ggml type {name!r}")


# --- reading ----------------------------------------------------------------------------------


@final
class NumberArray(Sequence[Any]):
    """A metadata array of numbers or bools, kept packed as in the file (1x its bytes).

    A Python list of the same values costs 8-11x the file (a pointer and an object per element),
    so a crafted file could make parsing its header cost ten times its size. This reads like a
    sequence of Python ints, floats or bools (`tolist` copies it out); ``==`` compares the
    values with any sequence.
    """

    __slots__ = ("_boolean", "_values")

    def __init__(self, values: np.ndarray[Any, Any], *, boolean: bool = False) -> None:
        self._values = values
        self._values.flags.writeable = False
        self._boolean = boolean

    @property
    def array(self) -> np.ndarray[Any, Any]:
        """The packed values (read-only; bools as uint8)."""
        return self._values

    def tolist(self) -> list[Any]:
        """The values as a Python list."""
        values = self._values.tolist()
        return [bool(v) for v in values] if self._boolean else values

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> NumberArray: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return NumberArray(self._values[index], boolean=self._boolean)
        value = self._values[index].item()
        return bool(value) if self._boolean else value

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NumberArray | list | tuple):
            return self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = self.tolist()[:8] if len(self) > 8 else self.tolist()
        more = f", ... {len(self)} values" if len(self) > 8 else ""
        return f"NumberArray({head}{more})"


class _Cursor:
    """Sequential reads of a file that never go past its end (each read is bounds-checked)."""

    def __init__(self, stream: IO[bytes], path: Path, size: int) -> None:
        self.stream = stream
        self.path = path
        self.size = size
        self.pos = 0
        self.nested = 0  # elements of arrays of arrays read so far

    def error(self, problem: str, offset: int | None = None) -> FormatError:
        offset = self.pos if offset is None else offset
        return FormatError(f"{self.path}: {problem} at offset {offset}", path=str(self.path),
                           offset=offset)

    @property
    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or n > self.left:
            raise self.error(f"truncated {what} (needs {n} bytes, {self.left} left in the file)")
        data = self.stream.read(n)
        if len(data) != n:  # the file shrank under us
            raise self.error(f"truncated {what} (read {len(data)} of {n} bytes)")
        self.pos += n
        return data

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, *, strict: bool = False) -> str:
        start = self.pos
        length = self.scalar("<Q", f"length of {what}")
        raw = self.take(length, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if strict:
                raise self.error(f"{what} is not valid UTF-8 ({exc.reason})", start) from None
            return raw.decode("utf-8", errors="replace")


def _read_value(cur: _Cursor, type_id: int, key: str, depth: int = 0) -> tuple[Any, str]:
    """One metadata value of type `type_id`: (python value, type name like ``array[uint32]``)."""
    if type_id not in _VALUE_TYPES:
        raise cur.error(f"metadata {key!r}: unknown value type {type_id} "
                        f"(expected 0..{max(_VALUE_TYPES)})", cur.pos - 4)
    name, fmt = _VALUE_TYPES[type_id]
    if fmt:
        value = cur.scalar(fmt, f"value of {key!r}")
        return (bool(value) if name == "bool" else value), name
    if name == "string":
        return cur.string(f"value of {key!r}"), name
    if depth >= _MAX_NESTING:
        raise cur.error(f"metadata {key!r}: arrays nested deeper than {_MAX_NESTING}")
    sub_id = cur.scalar("<I", f"array type of {key!r}")
    count_at = cur.pos
    count = cur.scalar("<Q", f"array length of {key!r}")
    if sub_id not in _VALUE_TYPES:
        raise cur.error(f"metadata {key!r}: unknown array element type {sub_id}", count_at - 4)
    sub_name, sub_fmt = _VALUE_TYPES[sub_id]
    # Every element takes at least its fixed size (8 bytes of length for strings, 12 of header for
    # arrays): a count the rest of the file cannot hold is refused before anything is allocated.
    least = struct.calcsize(sub_fmt) if sub_fmt else (8 if sub_name == "string" else 12)
    if count > cur.left // least:
        raise cur.error(f"metadata {key!r}: array of {count} {sub_name} elements does not fit in "
                        f"the {cur.left} bytes left in the file", count_at)
    if sub_fmt:
        raw = cur.take(count * least, f"array {key!r}")
        items = np.frombuffer(raw, dtype=_NUMPY_VALUE[sub_name])
        return NumberArray(items, boolean=sub_name == "bool"), f"array[{sub_name}]"
    if sub_name == "string":
        return [cur.string(f"element of {key!r}") for _ in range(count)], "array[string]"
    cur.nested += count
    if cur.nested > _MAX_NESTED_ELEMENTS:
        raise cur.error(f"metadata {key!r}: more than {_MAX_NESTED_ELEMENTS} elements in arrays "
                        "of arrays (llama.cpp writes none)", count_at)
    values = [_read_value(cur, sub_id, key, depth + 1)[0] for _ in range(count)]
    return values, "array[array]"


@final
class GGUFFile:
    """A parsed GGUF file: metadata and tensor directory in memory, tensor data read on `load`.

    Build it with `read_gguf`. Implements `io.weights.WeightFile`.

    Attributes:
        version: the GGUF version (2 or 3).
        metadata_types: metadata key -> GGUF value type name (``"uint32"``, ``"array[string]"``),
            so that `write_gguf` can write a value back with its original type.
        data_offset: absolute offset of the tensor data section.
        alignment: the data alignment (``general.alignment``, default 32).
    """

    def __init__(self, path: Path, *, version: int, metadata: dict[str, Any],
                 metadata_types: dict[str, str], tensors: dict[str, TensorInfo],
                 ggml_types: dict[str, int], data_offset: int, alignment: int) -> None:
        self._path = path
        self.version = version
        self._metadata = metadata
        self.metadata_types = metadata_types
        self._tensors = tensors
        self._ggml_types = ggml_types
        self.data_offset = data_offset
        self.alignment = alignment
        self._mapped: Array | None = None

    @property
    def path(self) -> Path:
        """The file."""
        return self._path

    @property
    def metadata(self) -> Mapping[str, Any]:
        """Every metadata key/value; arrays are lists, numbers Python ints and floats."""
        return self._metadata

    @property
    def architecture(self) -> str | None:
        """``general.architecture`` (``"llama"``, ``"qwen2"``, ``"gpt2"``, ``"bert"``...)."""
        arch = self._metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """Tensor names in file order."""
        return tuple(self._tensors)

    def tensor_info(self, name: str) -> TensorInfo:
        """Shape (omnitensor order: ggml's dims reversed), type and location of `name`.

        Raises:
            FormatError: when the file has no tensor `name`.
        """
        if name not in self._tensors:
            raise missing_tensor(self._path, name, self.tensor_names)
        return self._tensors[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    @overload
    def load(self, name: str, *, dequantize: Literal[True], mapped: bool = False) -> Array: ...

    @overload
    def load(self, name: str, *, dequantize: bool = False, mapped: bool = False
             ) -> Array | QuantizedArray: ...

    def load(self, name: str, *, dequantize: bool = False, mapped: bool = False
             ) -> Array | QuantizedArray:
        """Copy tensor `name` into memory (or, with `mapped`, view it in the mapped file).

        Args:
            name: the tensor's GGUF name (``"blk.0.attn_q.weight"``).
            dequantize: decode quantized tensors to float32 instead of keeping their blocks.
            mapped: return a read-only view of the file mapped in memory (`io.mapped.map_file`)
                instead of a copy: nothing is read until the data are touched. Decoded types
                (`dequantize`, ggml types omnitensor has no codec for) are new arrays anyway.

        Returns:
            A numpy array for dense types (F32, F16, BF16 as ``ml_dtypes.bfloat16``, F64, I8..I64);
            a `QuantizedArray` for Q8_0, Q4_0, Q4_K and Q6_K (unless `dequantize`); float32
            (decoded by the `gguf` package) for other ggml quantized types.

        Raises:
            FormatError: unknown name, or data no longer in the file.
            UnsupportedError: a ggml type that neither omnitensor nor `gguf` can decode.
        """
        info = self.tensor_info(name)
        if mapped:
            if self._mapped is None:
                self._mapped = map_file(self._path)
            raw = np.asarray(self._mapped[info.offset:info.offset + info.nbytes])
            if raw.size != info.nbytes:
                raise self._truncated(info, raw.size)
            return self._decode(raw, info, dequantize=dequantize)
        with open(self._path, "rb") as stream:
            return self._load(stream, info, dequantize=dequantize)

    def load_all(self, *, dequantize: bool = False,
                 progress: Callable[[str, int], None] | None = None
                 ) -> dict[str, Array | QuantizedArray]:
        """Copy every tensor into memory, in file order (one open file, sequential reads).

        Args:
            dequantize: as in `load`.
            progress: called as ``progress(name, nbytes)`` after each tensor (for progress bars).
        """
        out: dict[str, Array | QuantizedArray] = {}
        with open(self._path, "rb") as stream:
            for info in sorted(self._tensors.values(), key=lambda t: t.offset):
                out[info.name] = self._load(stream, info, dequantize=dequantize)
                if progress is not None:
                    progress(info.name, info.nbytes)
        return {name: out[name] for name in self._tensors}

    def _load(self, stream: io.BufferedReader, info: TensorInfo, *,
              dequantize: bool) -> Array | QuantizedArray:
        stream.seek(info.offset)
        raw = np.empty(info.nbytes, dtype=np.uint8)
        got = stream.readinto(raw.data)
        if got != info.nbytes:
            raise self._truncated(info, got)
        return self._decode(raw, info, dequantize=dequantize)

    def _truncated(self, info: TensorInfo, got: int) -> FormatError:
        return FormatError(
            f"{self._path}: tensor {info.name!r} is truncated (got {got} of {info.nbytes} "
            f"bytes at offset {info.offset})", path=str(self._path), offset=info.offset)

    def _decode(self, raw: Array, info: TensorInfo, *, dequantize: bool
                ) -> Array | QuantizedArray:
        """The tensor of `info` from its raw bytes (viewed in place where no decoding runs)."""
        if info.type in _DENSE_NUMPY:
            dense: Array = raw.view(_DENSE_NUMPY[info.type]).reshape(info.shape)
            return dense
        *lead, last = info.shape or (1,)
        if info.type in QUANT_FORMATS:
            fmt = QUANT_FORMATS[info.type]
            blocks = raw.reshape(*lead, last // fmt.block * fmt.block_bytes)
            quantized = QuantizedArray(blocks, info.type, info.shape)
            return quantized.dequantize() if dequantize else quantized
        ggml = _ggml_types()[self._ggml_types[info.name]]
        try:
            decoded = ggml_dequantize(raw.reshape(*lead, last // ggml.block * ggml.block_bytes),
                                      ggml.id)
        except NotImplementedError:
            raise UnsupportedError(
                f"{self._path}: tensor {info.name!r} has ggml type {info.type} that cannot be "
                f"decoded (omnitensor decodes f32, f16, bf16, {', '.join(QUANT_FORMATS)})"
            ) from None
        _logger.info("%s: %s (%s) dequantized to float32", self._path, info.name, info.type)
        return np.asarray(decoded, dtype=np.float32).reshape(info.shape)

    def __repr__(self) -> str:
        return (f"GGUFFile({str(self._path)!r}, arch={self.architecture!r}, "
                f"tensors={len(self._tensors)}, keys={len(self._metadata)})")


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse the header of the GGUF file at `path` (metadata and tensor directory).

    Args:
        path: a ``.gguf`` file (GGUF version 2 or 3, little-endian).

    Returns:
        A `GGUFFile`; tensor data are read later by `GGUFFile.load`.

    Raises:
        FormatError: wrong magic or version, truncated header, counts or lengths the file cannot
            hold, more than 4 dimensions, an unknown tensor type, a row not a whole number of
            blocks, bad alignment, tensor data outside the file or overlapping. The message names
            the file and the offset.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        stream = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise FormatError(f"{path}: cannot open ({exc.strerror})", path=str(path)) from None
    with stream:
        cur = _Cursor(stream, path, size)
        return _parse(cur)


def _parse(cur: _Cursor) -> GGUFFile:
    magic = cur.take(4, "magic") if cur.size >= 4 else b""
    if magic != MAGIC:
        raise FormatError(f"{cur.path}: not a GGUF file (got magic {magic!r} at offset 0, "
                          f"expected {MAGIC!r})", path=str(cur.path), offset=0)
    version = cur.scalar("<I", "version")
    if version not in SUPPORTED_VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        why = "a big-endian GGUF file" if swapped in SUPPORTED_VERSIONS else f"version {version}"
        raise cur.error(f"unsupported GGUF: {why} (expected little-endian version 2 or 3)", 4)
    n_tensors = cur.scalar("<Q", "tensor count")
    n_kv = cur.scalar("<Q", "metadata count")
    # A key/value takes at least 13 bytes, a tensor entry at least 24: refuse absurd counts now.
    if n_kv > cur.left // 13:
        raise cur.error(f"metadata count {n_kv} cannot fit in the {cur.left} bytes left", 16)
    if n_tensors > cur.left // 24:
        raise cur.error(f"tensor count {n_tensors} cannot fit in the {cur.left} bytes left", 8)
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for _ in range(n_kv):
        key_at = cur.pos
        key = cur.string("metadata key", strict=True)
        if key in metadata:
            raise cur.error(f"duplicate metadata key {key!r}", key_at)
        type_id = cur.scalar("<I", f"value type of {key!r}")
        metadata[key], types[key] = _read_value(cur, type_id, key)
    entries = [_read_tensor_entry(cur) for _ in range(n_tensors)]
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if (not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0
            or alignment & (alignment - 1)):
        raise cur.error(f"general.alignment must be a power of two (got {alignment!r})", 0)
    data_offset = -(-cur.pos // alignment) * alignment
    tensors: dict[str, TensorInfo] = {}
    ggml_ids: dict[str, int] = {}
    for name, shape, ggml, rel, entry_at in entries:
        if name in tensors:
            raise cur.error(f"duplicate tensor name {name!r}", entry_at)
        tensors[name] = _check_tensor(cur, name, shape, ggml, rel, entry_at, data_offset,
                                      alignment)
        ggml_ids[name] = ggml.id
    _check_overlap(cur, tensors)
    return GGUFFile(cur.path, version=version, metadata=metadata, metadata_types=types,
                    tensors=tensors, ggml_types=ggml_ids, data_offset=data_offset,
                    alignment=alignment)


def _read_tensor_entry(cur: _Cursor) -> tuple[str, tuple[int, ...], _GGMLType, int, int]:
    entry_at = cur.pos
    name = cur.string("tensor name", strict=True)
    n_dims = cur.scalar("<I", f"dimension count of {name!r}")
    if n_dims > MAX_DIMS:
        raise cur.error(f"tensor {name!r} has {n_dims} dimensions (expected at most {MAX_DIMS})",
                        cur.pos - 4)
    ne = [cur.scalar("<Q", f"dimensions of {name!r}") for _ in range(n_dims)]
    type_at = cur.pos
    type_id = cur.scalar("<I", f"type of {name!r}")
    types = _ggml_types()
    if type_id not in types:
        raise cur.error(f"tensor {name!r} has unknown ggml type {type_id} "
                        f"(known: {', '.join(t.name for t in types.values())})", type_at)
    offset = cur.scalar("<Q", f"data offset of {name!r}")
    # ggml's ne[0] is the fastest-varying axis: omnitensor's (numpy's) last axis.
    return name, tuple(reversed(ne)), types[type_id], offset, entry_at


def _check_tensor(cur: _Cursor, name: str, shape: tuple[int, ...], ggml: _GGMLType, rel: int,
                  entry_at: int, data_offset: int, alignment: int) -> TensorInfo:
    # ggml's int64 ne; real files are far smaller. Zero-size tensors count their other dims too:
    # numpy refuses to even describe an empty (0, 2**62) array.
    if any(d >= 2**62 for d in shape) or math.prod(max(d, 1) for d in shape) >= 2**48:
        raise cur.error(f"tensor {name!r} has an absurd dimension (got shape {shape})", entry_at)
    elements = math.prod(shape)
    row = shape[-1] if shape else 1
    if row % ggml.block:
        raise cur.error(f"tensor {name!r} of type {ggml.name} has rows of {row} elements, not a "
                        f"multiple of the block size {ggml.block}", entry_at)
    nbytes = elements // ggml.block * ggml.block_bytes
    start = data_offset + rel
    if rel % alignment:
        raise cur.error(f"tensor {name!r} data offset {rel} is not a multiple of the alignment "
                        f"{alignment}", entry_at)
    if start > cur.size or nbytes > cur.size - start:
        raise cur.error(f"tensor {name!r} ({ggml.name}{list(shape)}, {nbytes} bytes at offset "
                        f"{start}) extends past the end of the file ({cur.size} bytes)", entry_at)
    return TensorInfo(name, shape, ggml.name, start, nbytes, cur.path)


def _check_overlap(cur: _Cursor, tensors: Mapping[str, TensorInfo]) -> None:
    end, previous = 0, ""
    for info in sorted(tensors.values(), key=lambda t: t.offset):
        if info.nbytes and info.offset < end:
            raise cur.error(f"tensor {info.name!r} overlaps tensor {previous!r}", info.offset)
        if info.nbytes:
            end, previous = info.offset + info.nbytes, info.name


# --- writing ----------------------------------------------------------------------------------

# llama.cpp reads these keys with a fixed type (its GGUFMeta checks the stored type exactly).
_UINT32_SUFFIXES: Final = (
    ".context_length", ".embedding_length", ".block_count", ".feed_forward_length",
    ".attention.head_count", ".attention.head_count_kv", ".attention.key_length",
    ".attention.value_length", ".rope.dimension_count", ".vocab_size", "_token_id",
    "general.file_type", "general.quantization_version", "general.alignment",
    ".pooling_type", ".attention.causal", ".expert_count", ".expert_used_count",
    ".attention.sliding_window",
)
_FILE_TYPES: Final = FILE_TYPES  # llama.cpp's llama_ftype by name (io.gguf_mix)


def _infer_type(key: str, value: Any) -> str:
    if isinstance(value, bool | np.bool_):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | np.integer):
        if key.endswith(_UINT32_SUFFIXES) and 0 <= value < 2**32:
            return "uint32"
        return "int32" if -(2**31) <= value < 2**31 else "int64"
    if isinstance(value, float | np.floating):
        return "float32"
    if isinstance(value, list | tuple | np.ndarray | NumberArray):
        items = value.tolist() if isinstance(value, np.ndarray | NumberArray) else list(value)
        if not items:
            return "array[int32]"
        sub = _infer_type("", items[0])  # no key: per-key integer widths are for scalars
        if sub == "int32" and not all(-(2**31) <= v < 2**31 for v in items):
            sub = "int64"
        return f"array[{sub}]"
    raise FormatError(f"write_gguf: metadata {key!r} has a type GGUF cannot hold "
                      f"(got {type(value).__name__}, expected bool, int, float, str or a list)")


def _add_metadata(writer: Any, key: str, value: Any, type_name: str) -> None:
    vtype = gguf_module().GGUFValueType
    if type_name.startswith("array["):
        sub = type_name[len("array["):-1]
        items = value.tolist() if isinstance(value, np.ndarray | NumberArray) else list(value)
        if not items:
            _logger.debug("write_gguf: skipping empty array %r (gguf cannot write one)", key)
            return
        if sub not in _VALUE_TYPE_IDS or sub == "array":
            raise FormatError(f"write_gguf: metadata {key!r}: unsupported array type {type_name}")
        writer.add_key_value(key, items, vtype.ARRAY, sub_type=vtype(_VALUE_TYPE_IDS[sub]))
        return
    if type_name not in _VALUE_TYPE_IDS:
        raise FormatError(f"write_gguf: metadata {key!r}: unknown type {type_name!r} "
                          f"(expected one of {', '.join(_VALUE_TYPE_IDS)} or array[...])")
    if isinstance(value, np.generic):
        value = value.item()
    writer.add_key_value(key, value, vtype(_VALUE_TYPE_IDS[type_name]))


def _convert(name: str, value: Array | QuantizedArray, dtype: str | None
             ) -> tuple[Array, str]:
    """The bytes to write for one tensor and its ggml type name."""
    if isinstance(value, QuantizedArray):
        return value.blocks, value.format
    array = np.asarray(value)
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    floating = array.dtype in (np.float32, np.float16) or array.dtype == ml_dtypes.bfloat16
    # Like llama.cpp's converter: 1-D tensors (norms, biases) stay f32; matrices take `dtype`.
    if dtype is not None and floating and array.ndim >= 2:
        if dtype in QUANT_FORMATS:
            if array.shape[-1] % QUANT_FORMATS[dtype].block == 0:
                return QuantizedArray.quantize(array, dtype).blocks, dtype
            _logger.info("write_gguf: %s %s does not fit %s blocks; written as f16", name,
                         array.shape, dtype)
            dtype = "f16"
        array = array.astype({"f32": np.float32, "f16": np.float16,
                              "bf16": ml_dtypes.bfloat16}[dtype])
    elif floating and array.dtype != np.float16 and array.dtype != ml_dtypes.bfloat16:
        array = array.astype(np.float32)
    for type_name, np_dtype in _DENSE_NUMPY.items():
        if array.dtype == np_dtype:
            return array, type_name
    raise FormatError(f"write_gguf: tensor {name!r} has a dtype GGUF cannot hold "
                      f"(got {array.dtype}, expected float32/16, bfloat16 or int8..int64)")


def write_gguf(path: str | os.PathLike[str], metadata: Mapping[str, Any],
               tensors: Mapping[str, Array | QuantizedArray], *, arch: str,
               dtype: str | None = None, types: Mapping[str, str] | None = None) -> None:
    """Write a GGUF file that llama.cpp loads (through `gguf.GGUFWriter`).

    Tensor shapes are given in omnitensor order and written as ggml's reversed ``ne``. Names and
    metadata keys should follow llama.cpp (`io.names` maps Hugging Face names, permutes llama's
    rotary q/k rows and builds the hyper-parameter keys).

    Args:
        path: the output file.
        metadata: key/values (``"llama.context_length": 2048``, ``"tokenizer.ggml.tokens": [...]``).
            ``general.architecture`` is `arch`; ``general.file_type`` is filled in from `dtype`.
        tensors: name -> numpy array (float32, float16, bfloat16, float64 written as f32,
            int8..int64) or `QuantizedArray` (written as its blocks).
        arch: llama.cpp architecture name (``"llama"``, ``"qwen2"``, ``"gpt2"``, ``"bert"``).
        dtype: convert float tensors of 2 or more dimensions to ``"f32"``, ``"f16"``, ``"bf16"``
            or a ggml format (``"q4_0"``, ``"q4_1"``, ``"q5_0"``, ``"q5_1"``, ``"q8_0"``,
            ``"q2_k"``, ``"q3_k"``, ``"q4_k"``, ``"q5_k"``, ``"q6_k"``, ``"iq4_nl"``,
            ``"iq4_xs"``), or to llama.cpp's mixes ``"q4_k_s"``, ``"q4_k_m"``, ``"q5_k_s"``,
            ``"q5_k_m"`` (`io.gguf_mix`). 1-D tensors stay f32, as in llama.cpp; a row that is
            not a whole number of blocks falls back as llama.cpp's quantize tool does. None
            keeps each tensor's own type.
        types: metadata key -> GGUF type name (``"uint32"``, ``"array[int32]"``...) overriding
            the inferred type (`GGUFFile.metadata_types` gives a read file's types).

    Raises:
        FormatError: a value or dtype GGUF cannot hold, or an unknown `dtype`.
    """
    if dtype is not None and dtype not in _FILE_TYPES:
        raise FormatError(f"write_gguf: unknown dtype {dtype!r} (expected one of "
                          f"{', '.join(_FILE_TYPES)})")
    declared = metadata.get("general.architecture", arch)
    if declared != arch:
        raise FormatError(f"write_gguf: general.architecture {declared!r} differs from "
                          f"arch {arch!r}")
    chosen = {} if dtype is None else tensor_types(
        {name: tuple(value.shape) for name, value in tensors.items()}, dtype)
    converted = {name: _convert(name, value, chosen.get(name)) for name, value in
                 tensors.items()}
    writer = gguf_writer(os.fspath(path), arch)
    types = dict(types or {})
    merged = dict(metadata)
    if dtype is not None:
        merged.setdefault("general.file_type", _FILE_TYPES[dtype])
    if any(t in QUANT_FORMATS for _, t in converted.values()):
        merged.setdefault("general.quantization_version", 2)
    for key, value in merged.items():
        if key in ("general.architecture", "general.alignment"):
            continue  # the writer sets these itself
        _add_metadata(writer, key, value, types.get(key) or _infer_type(key, value))
    for name, (data, type_name) in converted.items():
        ggml = _ggml_type_by_name(type_name)
        raw_dtype = gguf_module().GGMLQuantizationType(ggml.id)
        if type_name == "bf16":
            data = data.view(np.uint16)  # GGUFWriter does not know ml_dtypes; shape is kept
        if data.ndim == 0:
            data = data.reshape(1)
        try:
            writer.add_tensor(name, np.ascontiguousarray(data), raw_dtype=raw_dtype)
        except ValueError as exc:
            raise ShapeError(f"write_gguf: tensor {name!r}: {exc}") from None
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
