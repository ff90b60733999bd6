"""Op-specific samples of the quantized pair `dequantize` / `qmatmul` on every storage format.

Block bytes are random except the float16 scales, which are set to small finite values (a
random scale would often be inf/NaN and hide everything else); the 16-bit float formats hold
random normal values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from omnitensor.dtypes import DType
from omnitensor.ir import quant_blocks
from omnitensor.ir.types import HALF_FORMATS, QTENSOR_FORMATS, QTensorType, TensorType

from ..case import Arg, Sample, cases, sample

#: Byte offsets of the float16 scale fields inside one block, per format (ggml layouts).
SCALE_OFFSETS: dict[str, tuple[int, ...]] = {
    "q8_0": (0,),
    "q4_0": (0,),
    "q4_k": (0, 2),  # d, dmin
    "q6_k": (208,),  # d follows ql (128), qh (64) and the int8 scales (16)
    "q4_1": (0, 2),  # d, m
    "q5_0": (0,),
    "q5_1": (0, 2),  # d, m
    "q2_k": (80, 82),  # d, dmin follow the scales (16) and the 2-bit levels (64)
    "q3_k": (108,),  # d follows hmask (32), levels (64) and scales (12)
    "q5_k": (0, 2),  # d, dmin
    "iq4_nl": (0,),
    "iq4_xs": (0,),
}


def blocks(rng: np.random.Generator, type: Any) -> Any:
    """Random ggml blocks with finite float16 scales in [0.001, 0.05)."""
    if type.format in HALF_FORMATS:
        values = rng.standard_normal(type.logical_shape).astype(np.float32)
        return quant_blocks.quantize(values, type.format)
    fmt = QTENSOR_FORMATS[type.format]
    raw = rng.integers(0, 256, size=type.storage_shape, dtype=np.uint8)
    view = raw.reshape(-1, fmt.block_bytes)
    for offset in SCALE_OFFSETS.get(type.format, ()):
        scales = rng.uniform(0.001, 0.05, size=view.shape[0]).astype(np.float16)
        view[:, offset : offset + 2] = scales.view(np.uint8).reshape(-1, 2)
    return raw


@cases("dequantize")
def _dequantize(dtype: DType) -> Iterator[Sample]:
    for fmt in QTENSOR_FORMATS:
        block = max(QTENSOR_FORMATS[fmt].block, 16)
        q = Arg(QTensorType(fmt, (3, 2 * block)), blocks)
        yield sample(fmt, [q], lambda b, x, f=fmt: b.emit("dequantize", x, format=f, dtype=dtype))


def non_finite(rng: np.random.Generator, type: Any) -> Any:
    """Normal activations with a NaN in the first row and +inf, -inf in the last."""
    x = rng.standard_normal(type.shape).astype(type.dtype.np)
    x[0, 1] = np.nan
    x[-1, 2], x[-1, 5] = np.inf, -np.inf
    return x


@cases("qmatmul")
def _qmatmul(dtype: DType) -> Iterator[Sample]:
    for fmt in QTENSOR_FORMATS:
        block = max(QTENSOR_FORMATS[fmt].block, 16)
        w = Arg(QTensorType(fmt, (5, 2 * block)), blocks)
        x = Arg(TensorType((3, 2 * block), dtype))
        yield sample(fmt, [x, w], lambda b, a, q, f=fmt: b.emit("qmatmul", a, q, format=f),
                     check="nmse")
        # NaN and infinities propagate as through dequantize-then-matmul (a kernel that
        # quantizes the activation or uses the weight's offsets must notice them)
        odd = Arg(TensorType((4, 2 * block), dtype), non_finite)
        yield sample(f"{fmt}_non_finite", [odd, w],
                     lambda b, a, q, f=fmt: b.emit("qmatmul", a, q, format=f), check="nmse")
        big = Arg(QTensorType(fmt, (1024, 4096)), blocks)
        yield sample(f"perf_{fmt}", [Arg(TensorType((8, 4096), dtype)), big],
                     lambda b, a, q, f=fmt: b.emit("qmatmul", a, q, format=f), perf=True,
                     test=False, flops=2.0 * 8 * 1024 * 4096)
