"""Repacking of the other ggml formats for `quant.qmatmul` (Q4_1 ... IQ4_XS).

Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS.
The core decodes every one of them into the same form (`omnitensor.ir.quant_codecs.unpack`):
int8 levels with a float32 scale and an optional offset per sub-block, ``x = scale * q +
offset``. That is `quant.Packed` exactly (its ``mins`` are the negated offsets), so the same
one-byte-per-weight kernels run them; IQ4's non-linear levels are already integers (-127..113).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from omnitensor.ir.quant_codecs import UNPACKERS, unpack
from omnitensor.ir.types import QUANT_FORMATS

__all__ = ["MORE_FORMATS", "pack_more"]

Array = np.ndarray[Any, Any]

#: Formats repacked here (the sub-block of Q2_K and Q3_K is 16 elements, the rest 32).
MORE_FORMATS: Final = frozenset(UNPACKERS)
#: Every format `quant` repacks at load (numba-free here, so the backend can answer `repacks`
#: without loading the kernels).
PACKED_FORMATS: Final = frozenset({"q8_0", "q4_0", "q4_k", "q6_k"}) | MORE_FORMATS


def pack_more(blocks: Array, format: str, shape: tuple[int, ...]) -> Any:
    """`quant.Packed` of ggml blocks (uint8 [N, K/block*block_bytes]) of logical `shape` (N, K)."""
    from .quant import Packed

    n, k = shape
    fmt = QUANT_FORMATS[format]
    flat = np.ascontiguousarray(blocks).reshape(n * (k // fmt.block), fmt.block_bytes)
    with np.errstate(all="ignore"):
        q, scale, offset = unpack(flat, format)
    sub = fmt.block // scale.shape[1]  # 16 or 32
    shift = int(sub).bit_length() - 1
    mins = None if offset is None else np.ascontiguousarray(
        (-offset).reshape(n, k // sub), dtype=np.float32)
    return Packed(np.ascontiguousarray(q.reshape(n, k)),
                  np.ascontiguousarray(scale.reshape(n, k >> shift), dtype=np.float32),
                  format=format, shift=shift, mins=mins)
