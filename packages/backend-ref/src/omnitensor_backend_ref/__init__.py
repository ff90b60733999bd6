"""omnitensor's reference backend: the numpy reference kernels of the core, as a backend.

Its entry point (``ref = omnitensor_backend_ref.plugin``) is all omnitensor reads at discovery;
`RefBackend` is imported only when the backend is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["RefBackend"]

if TYPE_CHECKING:
    from .backend import RefBackend as RefBackend


def __getattr__(name: str) -> object:
    # NOTE: lazy, so that discovery (which imports `.plugin`, hence this package) stays cheap.
    if name == "RefBackend":
        from .backend import RefBackend

        return RefBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
