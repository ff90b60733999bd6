"""The gradients of layer_norm and rms_norm as composites (dx and the parameters' in one op).

Differentiated through its decomposition, a norm's backward is some twenty primitives on the
row statistics (means kept as size-1 dims, reshapes, broadcasts, the parameters' sums over the
leading dims); as one composite a backend runs it as one pass over the rows, as its forward
runs. The decompositions below are the closed forms, with x-hat = (x - mean) * r and
r = rsqrt(var + eps):

- layer norm: dx = r (gy - mean(gy) - x-hat mean(gy x-hat)), gy = grad * weight;
  dweight = sum(grad x-hat), dbias = sum(grad) over the leading dims;
- RMS norm (r = rsqrt(mean(x^2) + eps)): dx = r gy - x r^3 mean(gy x); dweight = sum(grad x r).
"""

from __future__ import annotations

from ....dtypes import FLOATING
from ....errors import ShapeError
from ...builder import Builder, dense
from ...opdef import OpView, Trait, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary, mean_keep
from .norms import check_params

__all__ = ["LayerNormBackwardView", "RmsNormBackwardView"]


def _infer(op: str, x: TensorType, grad: TensorType, params: tuple[TensorType, ...],
           axes: tuple[int, ...], most: int) -> tuple[TensorType, ...]:
    check_params(op, x, params, axes, most)
    if grad != x:
        raise ShapeError(f"{op}: grad is {grad} (expected x's type {x})", op=op,
                         shapes=[grad.shape, x.shape])
    return (x, *params)


def _leading_sum(b: Builder, v: Value, axes: tuple[int, ...]) -> Value:
    """`v` summed over the dims before the normalized `axes` (the parameters' cotangents)."""
    leading = tuple(range(len(dense(v.type).shape) - len(axes)))
    return b.emit("reduce_sum", v, axes=leading) if leading else v


@composite("layer_norm_backward", traits=Trait.MULTI_RESULT, dtypes=FLOATING, ulp=16)
class LayerNormBackwardView(OpView):
    """The cotangents (dx, *dparams) of `layer_norm` for the cotangent `grad`.

    `x`, `params` and the attributes are the forward's (see layer_norm); `grad` has x's type.
    The results are dx and one cotangent per parameter given (dweight, dbias), each of its
    parameter's shape.
    """

    x = operand()
    grad = operand()
    params = operand(variadic=True, min_count=0)
    axes: tuple[int, ...] = attribute()
    eps: float = attribute(1e-5)

    @staticmethod
    def infer(x: TensorType, grad: TensorType, params: tuple[TensorType, ...], *,
              axes: tuple[int, ...], eps: float) -> tuple[TensorType, ...]:
        return _infer("layer_norm_backward", x, grad, params, axes, 2)

    @staticmethod
    def decompose(b: Builder, x: Value, grad: Value, params: tuple[Value, ...], *,
                  axes: tuple[int, ...], eps: float) -> tuple[Value, ...]:
        centered = binary(b, "sub", x, mean_keep(b, x, axes))
        var = mean_keep(b, b.emit("mul", centered, centered), axes)
        r = b.emit("rsqrt", binary(b, "add", var, eps))
        xhat = binary(b, "mul", centered, r)
        gy = binary(b, "mul", grad, params[0]) if params else grad
        shift = binary(b, "add", mean_keep(b, gy, axes),
                       binary(b, "mul", xhat, mean_keep(b, b.emit("mul", gy, xhat), axes)))
        dx = binary(b, "mul", b.emit("sub", gy, shift), r)
        dparams = [_leading_sum(b, b.emit("mul", grad, xhat), axes), _leading_sum(b, grad, axes)]
        return (dx, *dparams[:len(params)])


@composite("rms_norm_backward", traits=Trait.MULTI_RESULT, dtypes=FLOATING, ulp=16)
class RmsNormBackwardView(OpView):
    """The cotangents (dx, *dparams) of `rms_norm` for the cotangent `grad`.

    `x`, `params` and the attributes are the forward's (see rms_norm); `grad` has x's type.
    The results are dx and, with a weight, dweight of the weight's shape.
    """

    x = operand()
    grad = operand()
    params = operand(variadic=True, min_count=0)
    axes: tuple[int, ...] = attribute()
    eps: float = attribute(1e-6)

    @staticmethod
    def infer(x: TensorType, grad: TensorType, params: tuple[TensorType, ...], *,
              axes: tuple[int, ...], eps: float) -> tuple[TensorType, ...]:
        return _infer("rms_norm_backward", x, grad, params, axes, 1)

    @staticmethod
    def decompose(b: Builder, x: Value, grad: Value, params: tuple[Value, ...], *,
                  axes: tuple[int, ...], eps: float) -> tuple[Value, ...]:
        ms = binary(b, "add", mean_keep(b, b.emit("mul", x, x), axes), eps)
        r = b.emit("rsqrt", ms)
        gy = binary(b, "mul", grad, params[0]) if params else grad
        cubed = b.emit("mul", b.emit("mul", r, r), r)
        along = binary(b, "mul", x, b.emit("mul", cubed, mean_keep(b, b.emit("mul", gy, x), axes)))
        dx = b.emit("sub", binary(b, "mul", gy, r), along)
        if not params:
            return (dx,)
        return dx, _leading_sum(b, b.emit("mul", grad, binary(b, "mul", x, r)), axes)
