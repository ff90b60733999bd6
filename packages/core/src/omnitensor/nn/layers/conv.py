"""Conv2d and 2-D pooling layers (NCHW)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ... import functional as F
from ...errors import OmnitensorError
from ...tensor.tensor import Tensor
from ..module import Module, Parameter
from .basic import uniform

__all__ = ["AvgPool2d", "Conv2d", "MaxPool2d"]


class Conv2d(Module):
    """2-D convolution; weight (out, in / groups, kh, kw), PyTorch's default init."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] | str = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
                 dtype: Any = None) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise OmnitensorError(f"Conv2d: channels ({in_channels}, {out_channels}) must be "
                                  f"divisible by groups={groups}")
        kh, kw = (kernel_size, kernel_size) if isinstance(kernel_size, int) else kernel_size
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        bound = 1.0 / math.sqrt(in_channels // groups * kh * kw)
        self.weight = Parameter(uniform((out_channels, in_channels // groups, kh, kw), bound,
                                        dtype))
        self.bias = Parameter(uniform((out_channels,), bound, dtype)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class MaxPool2d(Module):
    """Max pooling over windows."""

    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(Module):
    """Average pooling over windows."""

    def __init__(self, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
                 padding: int | Sequence[int] = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        """Apply the layer (see the class docstring)."""
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)
