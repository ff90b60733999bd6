"""safetensors files and Hugging Face model directories (config.json, shards, tokenizer.json).

The reader parses the small JSON header itself (the `safetensors` numpy API has no bfloat16) and
checks the header length, dtypes, shapes and offsets against the file before reading a byte of
data; tensors are then copied into memory by name. Nothing here unpickles or executes anything
from a file. Name mapping to omnitensor's (GGUF-style) names lives in `io.names`.
"""

from __future__ import annotations

import io
import json
import math
import os
import struct
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import ml_dtypes
import numpy as np

from ..errors import FormatError
from .mapped import map_file
from .weights import Array, TensorInfo, missing_tensor

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

__all__ = [
    "HFDirectory",
    "SafetensorsFile",
    "ShardedWeights",
    "read_hf_dir",
    "read_safetensors",
    "write_safetensors",
]

MAX_HEADER_BYTES: Final = 100 * 1024 * 1024  # the safetensors crate's own limit

# safetensors dtype -> (our lower-case type name, numpy dtype).
_DTYPES: Final[dict[str, tuple[str, Any]]] = {
    "F64": ("f64", np.dtype("<f8")),
    "F32": ("f32", np.dtype("<f4")),
    "F16": ("f16", np.dtype("<f2")),
    "BF16": ("bf16", np.dtype(ml_dtypes.bfloat16)),
    "F8_E4M3": ("f8_e4m3", np.dtype(ml_dtypes.float8_e4m3fn)),
    "F8_E5M2": ("f8_e5m2", np.dtype(ml_dtypes.float8_e5m2)),
    "I64": ("i64", np.dtype("<i8")),
    "I32": ("i32", np.dtype("<i4")),
    "I16": ("i16", np.dtype("<i2")),
    "I8": ("i8", np.dtype("i1")),
    "U64": ("u64", np.dtype("<u8")),
    "U32": ("u32", np.dtype("<u4")),
    "U16": ("u16", np.dtype("<u2")),
    "U8": ("u8", np.dtype("u1")),
    "BOOL": ("bool", np.dtype("?")),
}
_BY_NUMPY: Final = {np_dtype: st for st, (_, np_dtype) in _DTYPES.items()}


def _error(path: Path, problem: str, offset: int | None = None) -> FormatError:
    where = f" at offset {offset}" if offset is not None else ""
    return FormatError(f"{path}: {problem}{where}", path=str(path), offset=offset)


@final
class SafetensorsFile:
    """One parsed ``.safetensors`` file; tensors are copied into memory by `load`.

    Implements `io.weights.WeightFile`. Build it with `read_safetensors`.
    """

    def __init__(self, path: Path, tensors: dict[str, TensorInfo],
                 metadata: dict[str, str]) -> None:
        self._path = path
        self._tensors = tensors
        self._metadata = metadata
        self._mapped: Array | None = None

    @property
    def path(self) -> Path:
        """The file."""
        return self._path

    @property
    def metadata(self) -> Mapping[str, str]:
        """The header's ``__metadata__`` (string to string)."""
        return self._metadata

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """Tensor names in data order."""
        return tuple(self._tensors)

    def tensor_info(self, name: str) -> TensorInfo:
        """Shape, type and location of `name` (FormatError if the file has none)."""
        if name not in self._tensors:
            raise missing_tensor(self._path, name, self.tensor_names)
        return self._tensors[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def load(self, name: str, *, dequantize: bool = False, mapped: bool = False) -> Array:
        """Copy tensor `name` into memory as a numpy array (bfloat16 as ``ml_dtypes.bfloat16``).

        Args:
            name: the tensor name in the file.
            dequantize: accepted for `WeightFile` compatibility (safetensors holds no blocks).
            mapped: a read-only view of the file mapped in memory (`io.mapped.map_file`) instead
                of a copy; a tensor whose data are not aligned to its element size is copied.
        """
        info = self.tensor_info(name)
        dtype = next(np_dtype for dname, np_dtype in _DTYPES.values() if dname == info.type)
        if mapped and info.offset % np.dtype(dtype).itemsize == 0:
            if self._mapped is None:
                self._mapped = map_file(self._path)
            raw = np.asarray(self._mapped[info.offset:info.offset + info.nbytes])
            if raw.size != info.nbytes:
                raise _error(info.file, f"tensor {info.name!r} is truncated (got {raw.size} of "
                             f"{info.nbytes} bytes)", info.offset)
            out: Array = raw.view(dtype).reshape(info.shape)
            return out
        with open(self._path, "rb") as stream:
            return _read_tensor(stream, info)

    def load_all(self, *, progress: Callable[[str, int], None] | None = None
                 ) -> dict[str, Array]:
        """Copy every tensor into memory (one open file; `progress(name, nbytes)` after each)."""
        out: dict[str, Array] = {}
        with open(self._path, "rb") as stream:
            for info in self._tensors.values():
                out[info.name] = _read_tensor(stream, info)
                if progress is not None:
                    progress(info.name, info.nbytes)
        return out

    def __repr__(self) -> str:
        return f"SafetensorsFile({str(self._path)!r}, tensors={len(self._tensors)})"


def _read_tensor(stream: io.BufferedReader, info: TensorInfo) -> Array:
    stream.seek(info.offset)
    raw = np.empty(info.nbytes, dtype=np.uint8)
    got = stream.readinto(raw.data)
    if got != info.nbytes:
        raise _error(info.file, f"tensor {info.name!r} is truncated (got {got} of "
                     f"{info.nbytes} bytes)", info.offset)
    dtype = next(np_dtype for name, np_dtype in _DTYPES.values() if name == info.type)
    out: Array = raw.view(dtype).reshape(info.shape)
    return out


def read_safetensors(path: str | os.PathLike[str]) -> SafetensorsFile:
    """Parse the header of a ``.safetensors`` file and check it against the file.

    Raises:
        FormatError: header length past the file or over 100 MiB, a header that is not a JSON
            object, an unknown dtype, a bad shape, offsets out of the data section, a size that
            does not match shape x dtype, or overlapping tensors. Names the file and offset.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as stream:
            head = stream.read(8)
            if len(head) < 8:
                raise _error(path, f"not a safetensors file (got {len(head)} bytes, expected "
                             "at least 8)", 0)
            (length,) = struct.unpack("<Q", head)
            if length > size - 8 or length > MAX_HEADER_BYTES:
                raise _error(path, f"header length {length} is out of range (the file has "
                             f"{size} bytes; at most {MAX_HEADER_BYTES} allowed)", 0)
            raw = stream.read(length)
    except OSError as exc:
        raise FormatError(f"{path}: cannot read ({exc.strerror})", path=str(path)) from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _error(path, f"header is not valid JSON ({exc})", 8) from None
    if not isinstance(header, dict):
        raise _error(path, f"header must be a JSON object (got {type(header).__name__})", 8)
    return _parse_header(path, header, data_start=8 + length, size=size)


def _parse_header(path: Path, header: dict[str, Any], *, data_start: int,
                  size: int) -> SafetensorsFile:
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise _error(path, "__metadata__ must map strings to strings", 8)
    data_size = size - data_start
    tensors: list[TensorInfo] = []
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise _error(path, f"tensor {name!r}: entry must be an object", 8)
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise _error(path, f"tensor {name!r}: unknown dtype {dtype!r} (expected one of "
                         f"{', '.join(_DTYPES)})", 8)
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise _error(path, f"tensor {name!r}: shape must be a list of non-negative ints "
                         f"(got {shape!r})", 8)
        if len(shape) > 8 or math.prod(max(d, 1) for d in shape) >= 2**48:
            raise _error(path, f"tensor {name!r}: absurd shape {shape!r}", 8)
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise _error(path, f"tensor {name!r}: data_offsets must be [begin, end] "
                         f"(got {offsets!r})", 8)
        begin, end = offsets
        type_name, np_dtype = _DTYPES[dtype]
        nbytes = math.prod(shape) * np_dtype.itemsize
        if not 0 <= begin <= end <= data_size:
            raise _error(path, f"tensor {name!r}: data_offsets [{begin}, {end}] out of range "
                         f"(data section has {data_size} bytes)", data_start + max(begin, 0))
        if end - begin != nbytes:
            raise _error(path, f"tensor {name!r}: {end - begin} bytes of data for {dtype}"
                         f"{shape} (expected {nbytes})", data_start + begin)
        tensors.append(TensorInfo(name, tuple(shape), type_name, data_start + begin, nbytes, path))
    tensors.sort(key=lambda t: t.offset)
    end_of_previous = data_start
    for info in tensors:
        if info.nbytes and info.offset < end_of_previous:
            raise _error(path, f"tensor {info.name!r} overlaps the previous tensor", info.offset)
        end_of_previous = max(end_of_previous, info.offset + info.nbytes)
    return SafetensorsFile(path, {t.name: t for t in tensors}, dict(metadata))


def write_safetensors(path: str | os.PathLike[str], tensors: Mapping[str, Any], *,
                      metadata: Mapping[str, str] | None = None) -> None:
    """Write numpy arrays (bfloat16 included) as a safetensors file Hugging Face loads.

    Tensors are laid out as the `safetensors` package does: by decreasing alignment, then name;
    the header is padded with spaces to a multiple of 8 bytes.

    Raises:
        FormatError: a dtype safetensors cannot hold, or metadata that is not string to string.
    """
    arrays = {name: np.ascontiguousarray(value) for name, value in tensors.items()}
    header: dict[str, Any] = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise FormatError(f"write_safetensors: {path}: metadata must map str to str")
        header["__metadata__"] = dict(metadata)
    order = sorted(arrays, key=lambda n: (-arrays[n].dtype.itemsize, n))
    offset = 0
    for name in order:
        array = arrays[name]
        if array.dtype not in _BY_NUMPY:
            raise FormatError(f"write_safetensors: tensor {name!r} has dtype {array.dtype} that "
                              f"safetensors cannot hold", path=str(path))
        header[name] = {"dtype": _BY_NUMPY[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as stream:
        stream.write(struct.pack("<Q", len(text)))
        stream.write(text)
        for name in order:
            stream.write(arrays[name].tobytes())


@final
class ShardedWeights:
    """Several safetensors shards seen as one `WeightFile` (``model.safetensors.index.json``)."""

    def __init__(self, path: Path, shards: Mapping[str, SafetensorsFile],
                 metadata: Mapping[str, Any] | None = None) -> None:
        self._path = path
        self._shards = dict(shards)
        self._owner: dict[str, SafetensorsFile] = {}
        for shard in self._shards.values():
            for name in shard.tensor_names:
                if name in self._owner:
                    raise _error(path, f"tensor {name!r} is in both {self._owner[name].path.name} "
                                 f"and {shard.path.name}")
                self._owner[name] = shard
        self._metadata = dict(metadata or {})

    @property
    def path(self) -> Path:
        """The directory (or index file) the shards come from."""
        return self._path

    @property
    def shards(self) -> tuple[SafetensorsFile, ...]:
        """The shard files."""
        return tuple(self._shards.values())

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The index's ``metadata`` (or the single file's ``__metadata__``)."""
        return self._metadata

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """Every tensor name over all shards."""
        return tuple(self._owner)

    def tensor_info(self, name: str) -> TensorInfo:
        """Shape, type and location (`TensorInfo.file` names the shard)."""
        if name not in self._owner:
            raise missing_tensor(self._path, name, self.tensor_names)
        return self._owner[name].tensor_info(name)

    def load(self, name: str, *, dequantize: bool = False, mapped: bool = False) -> Array:
        """Copy tensor `name` from its shard into memory (`mapped`: view it in place)."""
        self.tensor_info(name)
        return self._owner[name].load(name, mapped=mapped)

    def __contains__(self, name: object) -> bool:
        return name in self._owner

    def __iter__(self) -> Iterator[str]:
        return iter(self._owner)

    def __len__(self) -> int:
        return len(self._owner)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: cannot read JSON ({exc})", path=str(path)) from None


def _load_weights(directory: Path) -> ShardedWeights:
    index_path = directory / "model.safetensors.index.json"
    single = directory / "model.safetensors"
    if single.is_file():
        file = read_safetensors(single)
        return ShardedWeights(single, {single.name: file}, file.metadata)
    if index_path.is_file():
        index = _read_json(index_path)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(v, str) for v in weight_map.values()):
            raise FormatError(f"{index_path}: weight_map must map tensor names to file names",
                              path=str(index_path))
        shards: dict[str, SafetensorsFile] = {}
        for file_name in dict.fromkeys(weight_map.values()):
            # A shard must be a plain file name inside the directory: no path escapes.
            if Path(file_name).name != file_name or file_name in ("", ".", ".."):
                raise FormatError(f"{index_path}: shard {file_name!r} is not a file name in "
                                  "the model directory", path=str(index_path))
            shards[file_name] = read_safetensors(directory / file_name)
        weights = ShardedWeights(index_path, shards, index.get("metadata") or {})
        for name, file_name in weight_map.items():
            if name not in shards[file_name]:
                raise FormatError(f"{index_path}: tensor {name!r} is mapped to {file_name}, "
                                  "which does not hold it", path=str(index_path))
        return weights
    found = sorted(p.name for p in directory.glob("*.safetensors"))
    if len(found) == 1:
        file = read_safetensors(directory / found[0])
        return ShardedWeights(file.path, {found[0]: file}, file.metadata)
    raise FormatError(f"{directory}: no model.safetensors or model.safetensors.index.json "
                      f"(found {found or 'no .safetensors files'})", path=str(directory))


@final
class HFDirectory:
    """A Hugging Face model directory: ``config.json``, safetensors weights, tokenizer files.

    Attributes:
        path: the directory.
        config: the parsed ``config.json``.
        weights: every tensor over all shards, lazily loaded by Hugging Face name.
        tokenizer_config: ``tokenizer_config.json`` if present, else ``{}``.
        generation_config: ``generation_config.json`` if present, else ``{}``.
    """

    def __init__(self, path: Path, config: dict[str, Any], weights: ShardedWeights,
                 tokenizer_config: dict[str, Any], generation_config: dict[str, Any]) -> None:
        self.path = path
        self.config = config
        self.weights = weights
        self.tokenizer_config = tokenizer_config
        self.generation_config = generation_config

    @property
    def architecture(self) -> str | None:
        """``config["model_type"]`` (``"llama"``, ``"qwen2"``, ``"gpt2"``, ``"bert"``...)."""
        model_type = self.config.get("model_type")
        return model_type if isinstance(model_type, str) else None

    @property
    def tokenizer_path(self) -> Path | None:
        """``tokenizer.json`` if the directory has one."""
        candidate = self.path / "tokenizer.json"
        return candidate if candidate.is_file() else None

    def load_tokenizer(self) -> Tokenizer | None:
        """The directory's tokenizer (`Tokenizer.from_hf_dir`), or None without tokenizer.json."""
        from .tokenizer import Tokenizer

        return Tokenizer.from_hf_dir(self.path) if self.tokenizer_path else None

    def __repr__(self) -> str:
        return (f"HFDirectory({str(self.path)!r}, arch={self.architecture!r}, "
                f"tensors={len(self.weights)})")


def read_hf_dir(path: str | os.PathLike[str]) -> HFDirectory:
    """Open a Hugging Face model directory (``save_pretrained`` layout).

    Reads ``config.json`` (required), ``tokenizer_config.json`` and ``generation_config.json``
    (optional) and the safetensors headers (``model.safetensors`` or the shards listed by
    ``model.safetensors.index.json``); no tensor data yet. Pickled ``*.bin`` weights are refused.

    Raises:
        FormatError: a missing or malformed ``config.json``, no safetensors weights, a bad
            index, or a malformed shard.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise FormatError(f"{directory}: not a directory", path=str(directory))
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise FormatError(f"{directory}: no config.json (expected a Hugging Face model "
                          "directory)", path=str(directory))
    config = _read_json(config_path)
    if not isinstance(config, dict):
        raise FormatError(f"{config_path}: must hold a JSON object", path=str(config_path))
    optional: list[dict[str, Any]] = []
    for name in ("tokenizer_config.json", "generation_config.json"):
        file = directory / name
        value = _read_json(file) if file.is_file() else {}
        optional.append(value if isinstance(value, dict) else {})
    if not any(directory.glob("*.safetensors")) and any(directory.glob("*.bin")):
        raise FormatError(f"{directory}: only pickled *.bin weights found; omnitensor loads "
                          "safetensors only (pickle can execute code); convert with "
                          "save_pretrained(safe_serialization=True)", path=str(directory))
    return HFDirectory(directory, config, _load_weights(directory), *optional)
