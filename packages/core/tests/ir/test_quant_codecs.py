"""Every ggml format's codec block by block against the `gguf` package and ggml itself.

`dequantize` must equal `gguf.quants.dequantize` bit for bit, on quantized data and on random
bytes. `quantize` must equal `gguf.quants.quantize` byte for byte where gguf has a quantizer
(Q8_0, Q4_0, Q4_1, Q5_0, Q5_1); for the K and IQ4 formats (no quantizer in gguf) the blocks are
compared with ggml's own `ggml_quantize_chunk` (what llama.cpp's quantize tool calls) when
llama-cpp-python's libggml is installed, and the round-trip error is bounded everywhere.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.ir import quant_blocks, quant_codecs
from omnitensor.ir.types import QUANT_FORMATS, QTensorType

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType  # noqa: E402

ALL = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
       "iq4_nl", "iq4_xs"]
GGUF_QUANTIZES = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]
# relative RMS error of a round trip on Gaussian data (ggml's quantizers give the same)
MAX_ERROR = {"q8_0": 0.01, "q4_0": 0.12, "q4_1": 0.09, "q5_0": 0.05, "q5_1": 0.045,
             "q2_k": 0.32, "q3_k": 0.17, "q4_k": 0.09, "q5_k": 0.045, "q6_k": 0.02,
             "iq4_nl": 0.085, "iq4_xs": 0.085}


def _ggml_type(fmt: str) -> Any:
    return getattr(GGMLQuantizationType, fmt.upper())


def sample(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Gaussian rows with awkward blocks: zeros, constants, tiny and huge scales, all positive."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0] = 0.0
    x[1, :256] = 3.0
    x[2, :40] = 0.0
    x[3] *= np.float32(1e-4)
    x[4] *= np.float32(300.0)
    x[5, :16] = 0.0
    x[6] = np.abs(x[6])
    x[7, 5] = 40.0
    return x


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a32, b32 = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a32.shape == b32.shape and np.array_equal(a32.view(np.uint32), b32.view(np.uint32))


def test_every_format_has_a_codec() -> None:
    assert set(ALL) <= set(QUANT_FORMATS) and set(QUANT_FORMATS) <= set(quant_blocks.CODECS)
    import gguf

    for fmt in ALL:  # block sizes agree with ggml's
        assert tuple(gguf.GGML_QUANT_SIZES[_ggml_type(fmt)]) == (
            QUANT_FORMATS[fmt].block, QUANT_FORMATS[fmt].block_bytes)


@pytest.mark.parametrize("fmt", ALL)
def test_dequantize_bit_exact_with_gguf(fmt: str) -> None:
    x = sample((16, 1024))
    blocks = quant_blocks.quantize(x, fmt)
    assert blocks.shape == QTensorType(fmt, x.shape).storage_shape
    assert same_bits(quant_blocks.dequantize(blocks, fmt),
                     gguf_quants.dequantize(blocks, _ggml_type(fmt)))
    # random bytes: every level, scale and sign pattern (non-finite scales compared as NaN)
    raw = np.random.default_rng(1).integers(0, 256, blocks.shape, dtype=np.uint8)
    with np.errstate(all="ignore"):
        ours = quant_blocks.dequantize(raw, fmt)
        theirs = gguf_quants.dequantize(raw, _ggml_type(fmt)).astype(np.float32)
    finite = np.isfinite(theirs)
    assert np.array_equal(finite, np.isfinite(ours))
    assert same_bits(ours[finite], theirs[finite])


@pytest.mark.parametrize("fmt", GGUF_QUANTIZES)
def test_quantize_byte_exact_with_gguf(fmt: str) -> None:
    x = sample((16, 1024), seed=2)
    np.testing.assert_array_equal(quant_blocks.quantize(x, fmt),
                                  gguf_quants.quantize(x, _ggml_type(fmt)))


@pytest.mark.parametrize("fmt", ALL)
def test_round_trip_error(fmt: str) -> None:
    x = np.random.default_rng(3).standard_normal((8, 2048)).astype(np.float32)
    back = quant_blocks.dequantize(quant_blocks.quantize(x, fmt), fmt)
    error = float(np.sqrt(((back - x) ** 2).mean() / (x**2).mean()))
    assert error < MAX_ERROR[fmt], error
    zeros = np.zeros((2, QUANT_FORMATS[fmt].block * 2), np.float32)
    assert not quant_blocks.dequantize(quant_blocks.quantize(zeros, fmt), fmt).any()


@pytest.mark.parametrize("fmt", sorted(quant_codecs.UNPACKERS))
def test_unpacked_form(fmt: str) -> None:
    """The shared (levels, scale, offset) form that backends repack from."""
    raw = quant_blocks.quantize(sample((8, 512), seed=4), fmt).reshape(
        -1, QUANT_FORMATS[fmt].block_bytes)
    q, scale, offset = quant_codecs.unpack(raw, fmt)
    assert q.dtype == np.int8 and scale.dtype == np.float32
    assert q.shape == (raw.shape[0], QUANT_FORMATS[fmt].block)
    subs = scale.shape[1]
    x = scale[:, :, None] * q.reshape(len(q), subs, -1).astype(np.float32)
    if offset is not None:
        x = x + offset[:, :, None]
    assert same_bits(x.reshape(len(q), -1), quant_blocks.dequantize(raw, fmt))


def _libggml() -> Any:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llama-cpp-python (libggml) is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "lib" / "libggml-base.so"
    if not path.is_file():
        pytest.skip(f"no libggml-base.so in {path.parent}")
    lib = ctypes.CDLL(str(path))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    return lib


@pytest.mark.parametrize("fmt", ALL)
def test_quantize_byte_exact_with_ggml(fmt: str) -> None:
    lib = _libggml()
    x = np.ascontiguousarray(sample((32, 1024), seed=5))
    ours = quant_blocks.quantize(x, fmt)
    theirs = np.zeros_like(ours)
    lib.ggml_quantize_chunk(int(_ggml_type(fmt).value), x.ctypes.data, theirs.ctypes.data, 0,
                            x.shape[0], x.shape[1], None)
    bb = QUANT_FORMATS[fmt].block_bytes
    same = (ours.reshape(-1, bb) == theirs.reshape(-1, bb)).all(axis=-1)
    # see quant_blocks.quantize: an FMA in a ggml build can flip a rare near-tie of a search
    assert same.mean() >= (1.0 if fmt in GGUF_QUANTIZES else 0.995), same.mean()
