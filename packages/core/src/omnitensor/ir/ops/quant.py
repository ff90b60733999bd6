"""Quantized ops: `dequantize` and `qmatmul` over ggml-block `QTensorType` operands.

The block codecs themselves live in `ir.quant_blocks`. Reference kernels receive quantized
operands as uint8 arrays of `QTensorType.storage_shape`, never their types, so each op carries
its block `format` as an attribute, which `infer` checks against the operand's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import FLOATING, DType, float32, float64
from ...errors import DTypeError, ShapeError
from .. import quant_blocks, rules
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..types import QTENSOR_FORMATS, QTensorType, TensorType

__all__ = ["DequantizeView", "QMatmulView", "match_dequantize", "match_qmatmul"]

Array = np.ndarray[Any, Any]


def _check_format(op: str, q: QTensorType, format: Any) -> None:
    """`format` must name a known format and equal the quantized operand's own."""
    if format not in QTENSOR_FORMATS:
        raise DTypeError(
            f"{op}: unknown quantization format {format!r} (expected one of "
            f"{', '.join(QTENSOR_FORMATS)})",
            op=op,
        )
    if format != q.format:
        raise DTypeError(
            f"{op}: attribute format {format!r} does not match the operand (got {q}, expected "
            f"format={q.format!r})",
            op=op,
        )


@primitive("dequantize", traits=Trait.QUANTIZED | Trait.NON_DIFFERENTIABLE, dtypes=FLOATING)
class DequantizeView(OpView):
    """Decode the ggml blocks of `q` to a dense tensor of its logical shape and `dtype`.

    The values are exactly ggml's dequantization in float32 (e.g. Q4_0: ``(nibble - 8) * d``,
    with d the block's float16 scale), then rounded once (to nearest even) to `dtype`:
    float16 may overflow to ±inf, bfloat16 loses precision; float64 is exact. `format` must
    equal ``q.format``. Blocks whose float16 scales are inf/NaN decode to inf/NaN. Quantized
    weights are constants for autograd: no gradient flows into `q`.
    """

    q = operand(quantized=True)
    format: str = attribute()
    dtype: DType = attribute(float32)

    @staticmethod
    def infer(q: QTensorType, *, format: str, dtype: DType) -> TensorType:
        """The shape/dtype rule (see the class docstring)."""
        _check_format("dequantize", q, format)
        if not isinstance(dtype, DType):
            raise DTypeError(f"dequantize: dtype must be a DType (got {dtype!r})", op="dequantize")
        rules.check_dtype("dequantize", "result dtype", dtype, FLOATING)
        return TensorType(q.logical_shape, dtype)

    @staticmethod
    def reference(q: Array, *, format: str, dtype: DType) -> Array:
        """The numpy reference kernel."""
        return quant_blocks.dequantize(q, format).astype(dtype.np)


@primitive("qmatmul", traits=Trait.QUANTIZED, dtypes=FLOATING, nmse=1e-7)
class QMatmulView(OpView):
    """``x @ dequantize(w).T``: a dense activation times a ggml-quantized weight matrix.

    `x` is floating [..., K]; `w` is a `QTensorType` [N, K] (ggml's row layout: one row of
    blocks per output feature) of `format`, which must equal ``w.format``. The result is
    [..., N] of x's dtype. float16/bfloat16/float32 inputs accumulate in float32 against the
    float32 dequantized weight and round once; float64 accumulates in float64. The summation
    order is unspecified, and a backend may quantize `x` on the fly to 16-bit integers per
    block of the weight's scales and multiply integers (NMSE budget 1e-7 for float32 and
    narrower, where float32 rounding alone gives ~1e-14; ggml's 8-bit activations, ~1e-5, do
    not pass). NaN and infinities propagate. Differentiable in `x` only (the gradient is
    ``g @ dequantize(w)``); the quantized weight gets no gradient.
    """

    x = operand()
    w = operand(quantized=True)
    format: str = attribute()

    @staticmethod
    def infer(x: TensorType, w: QTensorType, *, format: str) -> TensorType:
        """The shape/dtype rule (see the class docstring)."""
        _check_format("qmatmul", w, format)
        if w.ndim != 2:
            raise ShapeError(
                f"qmatmul: weight must be rank 2 [N, K] (got {w})",
                op="qmatmul",
                shapes=[w.logical_shape],
            )
        if x.ndim == 0 or x.shape[-1] != w.logical_shape[1]:
            raise ShapeError(
                f"qmatmul: contraction sizes differ (got x {x.shape} and weight "
                f"{w.logical_shape}, expected x.shape[-1] == {w.logical_shape[1]})",
                op="qmatmul",
                shapes=[x.shape, w.logical_shape],
            )
        return TensorType(x.shape[:-1] + (w.logical_shape[0],), x.dtype)

    @staticmethod
    def reference(x: Array, w: Array, *, format: str) -> Array:
        """The numpy reference kernel."""
        work = np.float64 if x.dtype == float64.np else np.float32
        weight = quant_blocks.dequantize(w, format).astype(work)  # (N, K)
        out = np.matmul(x.astype(work), weight.T)  # (..., K) @ (K, N) -> (..., N)
        return np.asarray(out).astype(x.dtype)


match_dequantize = DequantizeView.match
match_qmatmul = QMatmulView.match
