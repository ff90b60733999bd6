"""Row composites over trailing axes: softmax, log_softmax, layer_norm, rms_norm.

Each normalizes over `axes`, which must be the operand's trailing dims (``(ndim - 1,)`` for one
axis). The optional affine parameters are a variadic operand `params`: ``()``, ``(weight,)``
or, for layer_norm, ``(weight, bias)``; each has exactly the normalized trailing shape and x's
dtype (a bias without a weight, or parameters of other shapes, are applied by the functional
as ordinary ops after the composite).
"""

from __future__ import annotations

from ....dtypes import FLOATING
from ....errors import DTypeError, ShapeError
from ...builder import Builder
from ...opdef import OpView, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary, keep_reduce, mean_keep, trailing

__all__ = ["LayerNormView", "LogSoftmaxView", "RmsNormView", "SoftmaxView"]


def check_params(op: str, x: TensorType, params: tuple[TensorType, ...],
                  axes: tuple[int, ...], most: int) -> None:
    trailing(op, len(x.shape), axes)
    if len(params) > most:
        raise ShapeError(f"{op}: at most {most} parameter operand(s) (got {len(params)})", op=op)
    want = x.shape[len(x.shape) - len(axes):]
    for name, p in zip(("weight", "bias"), params, strict=False):
        if p.shape != want:
            raise ShapeError(f"{op}: {name} has shape {p.shape} (expected the normalized "
                             f"shape {want})", op=op, shapes=[x.shape, p.shape])
        if p.dtype != x.dtype:
            raise DTypeError(f"{op}: {name} has dtype {p.dtype} (expected x's {x.dtype})",
                             op=op, dtype=p.dtype.name)


def _affine(b: Builder, out: Value, params: tuple[Value, ...]) -> Value:
    if params:
        out = binary(b, "mul", out, params[0])
    if len(params) > 1:
        out = binary(b, "add", out, params[1])
    return out


@composite("softmax", dtypes=FLOATING, ulp=4)
class SoftmaxView(OpView):
    """exp(x - max) / sum(exp(x - max)) over the trailing `axes`.

    Shifting by the row maximum keeps exp finite; a row of -inf gives NaN, a +inf entry NaN
    (as the decomposition computes it). Empty rows give empty results.
    """

    x = operand()
    axes: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
        trailing("softmax", len(x.shape), axes)
        return x

    @staticmethod
    def decompose(b: Builder, x: Value, *, axes: tuple[int, ...]) -> Value:
        e = b.emit("exp", binary(b, "sub", x, keep_reduce(b, "reduce_max", x, axes)))
        return binary(b, "div", e, keep_reduce(b, "reduce_sum", e, axes))


@composite("log_softmax", dtypes=FLOATING, ulp=4)
class LogSoftmaxView(OpView):
    """(x - max) - log(sum(exp(x - max))) over the trailing `axes` (stable log-softmax).

    Edge cases follow the decomposition: -inf entries stay -inf, a row of -inf gives NaN.
    """

    x = operand()
    axes: tuple[int, ...] = attribute()

    @staticmethod
    def infer(x: TensorType, *, axes: tuple[int, ...]) -> TensorType:
        trailing("log_softmax", len(x.shape), axes)
        return x

    @staticmethod
    def decompose(b: Builder, x: Value, *, axes: tuple[int, ...]) -> Value:
        shifted = binary(b, "sub", x, keep_reduce(b, "reduce_max", x, axes))
        total = keep_reduce(b, "reduce_sum", b.emit("exp", shifted), axes)
        return binary(b, "sub", shifted, b.emit("log", total))


@composite("layer_norm", dtypes=FLOATING, ulp=8)
class LayerNormView(OpView):
    """(x - mean) * rsqrt(var + eps) [* weight] [+ bias] over the trailing `axes`.

    The variance is the biased one (divided by the row length). `params` is ``()``,
    ``(weight,)`` or ``(weight, bias)``, each of the normalized shape. Empty rows give NaN.
    """

    x = operand()
    params = operand(variadic=True, min_count=0)
    axes: tuple[int, ...] = attribute()
    eps: float = attribute(1e-5)

    @staticmethod
    def infer(x: TensorType, params: tuple[TensorType, ...], *, axes: tuple[int, ...],
              eps: float) -> TensorType:
        check_params("layer_norm", x, params, axes, 2)
        return x

    @staticmethod
    def decompose(b: Builder, x: Value, params: tuple[Value, ...], *, axes: tuple[int, ...],
                  eps: float) -> Value:
        centered = binary(b, "sub", x, mean_keep(b, x, axes))
        var = mean_keep(b, b.emit("mul", centered, centered), axes)
        out = binary(b, "mul", centered, b.emit("rsqrt", binary(b, "add", var, eps)))
        return _affine(b, out, params)


@composite("rms_norm", dtypes=FLOATING, ulp=8)
class RmsNormView(OpView):
    """x * rsqrt(mean(x * x) + eps) [* weight] over the trailing `axes`.

    `params` is ``()`` or ``(weight,)`` of the normalized shape. Empty rows give NaN.
    """

    x = operand()
    params = operand(variadic=True, min_count=0)
    axes: tuple[int, ...] = attribute()
    eps: float = attribute(1e-6)

    @staticmethod
    def infer(x: TensorType, params: tuple[TensorType, ...], *, axes: tuple[int, ...],
              eps: float) -> TensorType:
        check_params("rms_norm", x, params, axes, 1)
        return x

    @staticmethod
    def decompose(b: Builder, x: Value, params: tuple[Value, ...], *, axes: tuple[int, ...],
                  eps: float) -> Value:
        ms = binary(b, "add", mean_keep(b, b.emit("mul", x, x), axes), eps)
        return _affine(b, binary(b, "mul", x, b.emit("rsqrt", ms)), params)
