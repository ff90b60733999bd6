"""Weight files mapped read-only into memory (`map_file`).

A model's weights are viewed straight in their file's pages: loading copies nothing. What a
backend may keep without copying, and how it drops pages it no longer reads, is in
`backend.host_memory`. The format readers live in `io.gguf` and `io.safetensors`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError

__all__ = ["map_file"]

Array = np.ndarray[Any, Any]


def map_file(path: str | os.PathLike[str]) -> Array:
    """The bytes of the file at `path` as a read-only uint8 array backed by a shared mapping.

    Pages are read from the file on first access; the mapping lives as long as an array made
    from it. The file must not be truncated or rewritten while a model uses it (as with
    llama.cpp's default ``mmap``).

    Raises:
        FormatError: when the file cannot be opened or mapped (an empty file, a pipe).
    """
    try:
        return np.memmap(Path(path), dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path}: cannot be memory-mapped ({exc})", path=str(path)) from None
