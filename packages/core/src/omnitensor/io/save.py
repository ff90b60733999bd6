"""`save` and `load`: tensors and state dicts in safetensors files (never pickle, never code).

A file holds one tensor, or a flat mapping of names to tensors (a `Module`'s state dict, or any
dict of tensors and arrays). Its ``__metadata__`` records which, so `load` gives back the same
kind of object. Files are ordinary safetensors: PyTorch's ``safetensors.torch.load_file`` and
Hugging Face tools read them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, FormatError
from ..tensor.tensor import Tensor, as_tensor
from .safetensors import read_safetensors, write_safetensors

__all__ = ["load", "save"]

_KIND = "omnitensor.kind"
_SINGLE = "__tensor__"


def save(obj: Any, path: str | os.PathLike[str]) -> None:
    """Write a tensor, a `Module`'s state dict, or a mapping of names to tensors to `path`.

    Args:
        obj: a `Tensor`, a `Module` (its `state_dict()` is saved), or a mapping from names to
            tensors, numpy arrays or nested lists.
        path: the file to write (conventionally ``*.safetensors``).

    Raises:
        ArgumentTypeError: (a TypeError) for anything else, e.g. an optimizer or a model object
            that is not a `Module`; save its state dict instead.
    """
    from ..nn.module import Module

    if isinstance(obj, Module):
        obj = obj.state_dict()
    if isinstance(obj, Tensor):
        write_safetensors(path, {_SINGLE: obj.numpy()}, metadata={_KIND: "tensor"})
        return
    if not isinstance(obj, Mapping):
        raise ArgumentTypeError(
            f"save: can save a Tensor, a Module or a dict of tensors (got "
            f"{type(obj).__name__}); omnitensor never pickles objects", op="save")
    arrays: dict[str, np.ndarray[Any, Any]] = {}
    for name, value in obj.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"save: keys must be strings (got {name!r})", op="save")
        tensor = value if isinstance(value, Tensor) else as_tensor(value, fn="save",
                                                                   arg=f"obj[{name!r}]")
        arrays[name] = tensor.numpy()
    write_safetensors(path, arrays, metadata={_KIND: "dict"})


def load(path: str | os.PathLike[str], *, backend: Any = None) -> Any:
    """Read what `save` wrote: a `Tensor`, or a dict of names to tensors.

    Args:
        path: the file.
        backend: put the tensors on this backend (a name or instance) now; by default they are
            host values that move to whichever backend first uses them.

    Raises:
        FormatError: the file is not a valid safetensors file.
    """
    file = read_safetensors(path)
    arrays = file.load_all()

    def place(array: np.ndarray[Any, Any]) -> Tensor:
        tensor = as_tensor(array)
        return tensor if backend is None else tensor.to(backend)

    if file.metadata.get(_KIND) == "tensor":
        if _SINGLE not in arrays:
            raise FormatError(f"load: {path}: marked as one tensor but holds {list(arrays)}",
                              path=str(path))
        return place(arrays[_SINGLE])
    return {name: place(array) for name, array in arrays.items()}
