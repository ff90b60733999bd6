"""The one adapter to the untyped `gguf` package (imported lazily: it costs ~0.3 s).

Everything else in `io` goes through these few functions, so their types are the contract.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

__all__ = ["ggml_dequantize", "gguf_module", "gguf_writer"]


@functools.cache
def gguf_module() -> ModuleType:
    """The `gguf` package (imported on first use)."""
    import gguf

    return gguf


def gguf_writer(path: str, arch: str) -> Any:
    """A `gguf.GGUFWriter` for `path` with ``general.architecture = arch``."""
    return gguf_module().GGUFWriter(path, arch)


def ggml_dequantize(raw: Any, type_id: int) -> Any:
    """Dequantize ggml blocks of type id `type_id` with the `gguf` package's numpy codecs.

    Raises:
        NotImplementedError: when the package has no codec for that type.
    """
    gguf = gguf_module()
    return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(type_id))
