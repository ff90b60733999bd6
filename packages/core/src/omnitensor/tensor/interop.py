"""Interop with numpy and DLPack: `from_numpy` and `from_dlpack`.

Tensor's own `__array__` and `__dlpack__` live on the class.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..ir.types import TensorType
from .graph import Node
from .tensor import Tensor

__all__ = ["from_dlpack", "from_numpy"]


def from_numpy(array: np.ndarray[Any, Any], *, copy: bool = True) -> Tensor:
    """A tensor holding `array` (copied unless ``copy=False``), keeping its dtype.

    With ``copy=False`` the tensor aliases `array` until it is first used on a backend; the
    caller must not modify the array while the tensor lives.

    Raises:
        DTypeError: for numpy dtypes omnitensor does not have (complex, strings ...).
    """
    array = np.asarray(array)
    dtype = dt.as_dtype(array.dtype)
    if copy:
        array = array.copy()
    return Tensor(Node.from_host(array, TensorType(array.shape, dtype)))


def from_dlpack(obj: Any) -> Tensor:
    """A tensor from any object exporting DLPack on the CPU (numpy, PyTorch ...), copied."""
    return from_numpy(np.from_dlpack(obj), copy=True)
