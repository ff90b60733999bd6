"""Which ggml type each tensor gets when a GGUF file is written, as llama.cpp's quantize tool does.

A plain type (``"q4_0"``, ``"q5_k"`` ...) applies to every matrix; the ``_K_S``/``_K_M`` mixes
follow llama.cpp's ``llama_tensor_get_type`` for dense models: the output projection (or tied
embedding) in Q6_K, ``attn_v`` (or a fused ``attn_qkv``) and ``ffn_down`` in Q6_K in some layers
(``use_more_bits``). A row that is not a whole number of K-quant blocks falls back as
llama.cpp does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K/IQ4_XS -> IQ4_NL), then to
F16. One-dimensional tensors stay F32; positional and segment embeddings are not quantized.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from ..errors import FormatError
from ..ir.types import QUANT_FORMATS

__all__ = ["FILE_TYPES", "MIXES", "tensor_types"]

#: llama.cpp's ``llama_ftype`` of each choice (``general.file_type``).
FILE_TYPES: Final = {
    "f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q2_k": 10,
    "q3_k": 11, "q4_k_s": 14, "q4_k": 15, "q4_k_m": 15, "q5_k_s": 16, "q5_k": 16, "q5_k_m": 17,
    "q6_k": 18, "iq4_nl": 25, "iq4_xs": 30, "bf16": 32,
}
#: mix -> the base type of its matrices.
MIXES: Final = {"q4_k_s": "q4_k", "q4_k_m": "q4_k", "q5_k_s": "q5_k", "q5_k_m": "q5_k"}
_FALLBACK: Final = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0", "q2_k": "iq4_nl",
                    "q3_k": "iq4_nl", "iq4_xs": "iq4_nl"}
_LAYER: Final = re.compile(r"^blk\.(\d+)\.")
# llama.cpp's quantize tool leaves these as they are (positional and segment embeddings).
_NOT_QUANTIZED: Final = frozenset({"position_embd.weight", "token_types.weight"})


def _use_more_bits(layer: int, layers: int) -> bool:
    """Llama.cpp's ``use_more_bits``: the first and last eighth, and every third layer between."""
    return (layer < layers // 8 or layer >= 7 * layers // 8
            or (layer - layers // 8) % 3 == 2)


def _mixed(name: str, base: str, mix: str, layers: int, tied: bool) -> str:
    if name == "output.weight" or (tied and name == "token_embd.weight"):
        return "q6_k"
    match = _LAYER.match(name)
    layer = int(match.group(1)) if match else 0
    more = mix.endswith("_m") and _use_more_bits(layer, layers)
    if name.endswith(("attn_v.weight", "attn_qkv.weight")):  # llama.cpp counts fused qkv as v
        if more:
            return "q6_k"
        if mix == "q4_k_s" and layer < 4:
            return "q5_k"
    elif name.endswith("ffn_down.weight"):
        if more:
            return "q6_k"
        if mix == "q4_k_s" and layer < layers // 8:
            return "q5_k"
    return base


def _fits(fmt: str, row: int) -> bool:
    return fmt not in QUANT_FORMATS or row % QUANT_FORMATS[fmt].block == 0


def tensor_types(shapes: Mapping[str, tuple[int, ...]], dtype: str) -> dict[str, str | None]:
    """The type of each float tensor (None: keep as is) for the file type `dtype`.

    Args:
        shapes: tensor name (llama.cpp's) -> shape.
        dtype: a key of `FILE_TYPES`.

    Raises:
        FormatError: an unknown `dtype`.
    """
    if dtype not in FILE_TYPES:
        raise FormatError(f"write_gguf: unknown dtype {dtype!r} (expected one of "
                          f"{', '.join(FILE_TYPES)})")
    layers = len({m.group(1) for n in shapes if (m := _LAYER.match(n))})
    tied = "output.weight" not in shapes
    out: dict[str, str | None] = {}
    for name, shape in shapes.items():
        quantized = dtype in MIXES or dtype in QUANT_FORMATS
        if len(shape) < 2 or (quantized and name in _NOT_QUANTIZED):
            out[name] = None  # 1-D tensors stay f32, as llama.cpp writes them
            continue
        chosen = _mixed(name, MIXES[dtype], dtype, layers, tied) if dtype in MIXES else dtype
        if not _fits(chosen, shape[-1]):
            chosen = _FALLBACK.get(chosen, "f16")
            if not _fits(chosen, shape[-1]):
                chosen = "f16"
        out[name] = chosen
    return out
