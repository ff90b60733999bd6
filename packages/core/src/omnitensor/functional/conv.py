"""2-D convolution and pooling (NCHW, PyTorch's arguments), lowered to slices and one matmul."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ShapeError
from ..tensor.shape import stack
from ..tensor.tensor import Tensor
from ._ops import lowest, pad, pair, strided_slice
from .registry import functional

__all__ = ["avg_pool2d", "conv2d", "max_pool2d"]


def _patches(x: Tensor, kernel: tuple[int, int], stride: tuple[int, int],
             dilation: tuple[int, int], fn: str) -> tuple[Tensor, int, int]:
    """(N, C, KH*KW, OH, OW) windows of an already padded (N, C, H, W) input."""
    n, c, h, w = x.shape
    kh, kw = kernel
    oh = (h - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"{fn}: kernel {kernel} does not fit the input {x.shape}", op=fn,
                         shapes=[x.shape])
    windows = []
    for i in range(kh):
        for j in range(kw):
            top, left = i * dilation[0], j * dilation[1]
            windows.append(strided_slice(
                x, (0, 0, top, left),
                (n, c, top + (oh - 1) * stride[0] + 1, left + (ow - 1) * stride[1] + 1),
                (1, 1, stride[0], stride[1])))
    return stack(windows, axis=2), oh, ow


def _padding(padding: int | Sequence[int] | str, kernel: tuple[int, int],
             dilation: tuple[int, int], fn: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(low, high) per spatial dim; "same" puts the extra element at the end, like PyTorch."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        total = [dilation[k] * (kernel[k] - 1) for k in range(2)]
        return (total[0] // 2, total[1] // 2), (total[0] - total[0] // 2,
                                                 total[1] - total[1] // 2)
    if isinstance(padding, str):
        raise ShapeError(f"{fn}: padding must be an int, a pair, 'valid' or 'same' (got "
                         f"{padding!r})", op=fn)
    p = pair(padding, "padding", fn)
    return p, p


@functional("conv2d")
def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None,
           stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
           dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation: x (N, C, H, W), weight (O, C / groups, KH, KW) -> (N, O, OH, OW)."""
    n, c, _, _ = x.shape
    o, cg, kh, kw = weight.shape
    if c % groups or o % groups or cg != c // groups:
        raise ShapeError(
            f"conv2d: channels do not match (got input {x.shape}, weight {weight.shape}, "
            f"groups={groups}; expected weight (O, C/groups, KH, KW) with O and C divisible by "
            "groups)", op="conv2d", shapes=[x.shape, weight.shape])
    st, dil = pair(stride, "stride", "conv2d"), pair(dilation, "dilation", "conv2d")
    low, high = _padding(padding, (kh, kw), dil, "conv2d")
    padded = pad(x, (0, 0) + low, (0, 0) + high)
    if (kh, kw) == (1, 1) and st == (1, 1):  # a 1x1 convolution is a matmul: no window copy
        cols, oh, ow = padded, padded.shape[2], padded.shape[3]
    else:
        cols, oh, ow = _patches(padded, (kh, kw), st, dil, "conv2d")  # (N, C, K, OH, OW)
    cols = cols.reshape(n, groups, cg * kh * kw, oh * ow)  # (N, G, Cg*K, L)
    w = weight.reshape(groups, o // groups, cg * kh * kw)  # (G, Og, Cg*K)
    out = (w @ cols).reshape(n, o, oh, ow)  # (N, G, Og, L) -> (N, O, OH, OW)
    return out + bias.reshape(1, o, 1, 1) if bias is not None else out


@functional("max_pool2d")
def max_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None
               = None, padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1
               ) -> Tensor:
    """Maximum over windows of (N, C, H, W); padding counts as -inf."""
    k = pair(kernel_size, "kernel_size", "max_pool2d")
    st = k if stride is None else pair(stride, "stride", "max_pool2d")
    dil = pair(dilation, "dilation", "max_pool2d")
    p = pair(padding, "padding", "max_pool2d")
    padded = pad(x, (0, 0) + p, (0, 0) + p, lowest(x.dtype))
    cols, _, _ = _patches(padded, k, st, dil, "max_pool2d")
    return cols.max(axis=2)


@functional("avg_pool2d")
def avg_pool2d(x: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None
               = None, padding: int | Sequence[int] = 0) -> Tensor:
    """Mean over windows of (N, C, H, W); zero padding counts (PyTorch's count_include_pad)."""
    k = pair(kernel_size, "kernel_size", "avg_pool2d")
    st = k if stride is None else pair(stride, "stride", "avg_pool2d")
    p = pair(padding, "padding", "avg_pool2d")
    cols, _, _ = _patches(pad(x, (0, 0) + p, (0, 0) + p), k, st, (1, 1), "avg_pool2d")
    return cols.mean(axis=2)
