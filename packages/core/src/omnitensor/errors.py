"""The one exception hierarchy of omnitensor (DESIGN §10).

Every error a user can trigger is raised from here. Each class also subclasses the natural builtin
so that `except ValueError` style code keeps working. Messages follow
`"<what>: <problem> (got <actual>, expected <expected>); <remedy>"`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "ArgumentTypeError",
    "BackendError",
    "BackendNotInstalledError",
    "BackendUnavailableError",
    "CollectiveMismatchError",
    "DTypeError",
    "DistributedError",
    "DistributedTimeoutError",
    "FormatError",
    "GenerationArgumentError",
    "IndexOutOfRangeError",
    "OmnitensorError",
    "ParseError",
    "PluginError",
    "RankFailedError",
    "ShapeError",
    "SpecError",
    "TraceError",
    "UnsupportedError",
    "VerificationError",
]


class OmnitensorError(Exception):
    """Base class of every error omnitensor raises on purpose.

    Args:
        message: the full, human-readable message.
        **fields: structured context (``op``, ``shapes``, ``dtype``, ``backend``, ``path``,
            ``offset`` ...), kept as attributes so that tools need not parse the message.
    """

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.op: str | None = fields.pop("op", None)
        self.shapes: Sequence[tuple[int, ...]] | None = fields.pop("shapes", None)
        self.dtype: str | None = fields.pop("dtype", None)
        self.backend: str | None = fields.pop("backend", None)
        self.fields: dict[str, Any] = fields

    def __str__(self) -> str:
        return self.message


class ShapeError(OmnitensorError, ValueError):
    """Shapes that do not fit an op (caught when the op is recorded)."""


class DTypeError(OmnitensorError, TypeError):
    """A dtype an op does not accept, or operands whose dtypes do not agree."""


class IndexOutOfRangeError(ShapeError, IndexError):
    """An integer index outside its axis (an `IndexError`, so iteration over a tensor ends)."""


class ArgumentTypeError(OmnitensorError, TypeError):
    """An argument of a type a function cannot take (names the function and the argument)."""


class UnsupportedError(OmnitensorError, NotImplementedError):
    """A backend does not support an (op, dtype, shape, attribute) combination.

    Raised before any work is done, never after a wrong answer.
    """


class FormatError(OmnitensorError, ValueError):
    """A malformed file or text: names the path (or source) and the offset where it went wrong."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None,
                 **fields: Any) -> None:
        super().__init__(message, **fields)
        self.path = path
        self.offset = offset


class SpecError(FormatError):
    """A ModelSpec that is malformed or over its limits (names the source and the step)."""


class GenerationArgumentError(OmnitensorError, ValueError):
    """An argument of `generate`/`stream` out of range or of the wrong kind (names it)."""


class ParseError(FormatError):
    """PTIR text that cannot be parsed (carries the line and column)."""


class VerificationError(OmnitensorError, ValueError):
    """A PTIR function that breaks an invariant (SSA, types, op rules)."""


class TraceError(OmnitensorError, RuntimeError):
    """Something a function traced by `omnitensor.compile` cannot do, with the way around it."""


class BackendError(OmnitensorError, RuntimeError):
    """A backend failed while doing work it had accepted."""


class BackendUnavailableError(OmnitensorError, RuntimeError):
    """A backend is installed but cannot run here (no device, failed import, version mismatch)."""


class BackendNotInstalledError(BackendUnavailableError, ImportError):
    """No installed distribution provides the backend that was asked for."""


class PluginError(OmnitensorError, RuntimeError):
    """A plugin broke a rule of the hook contract (raised in a hook, returned a wrong value).

    Args:
        message: what went wrong.
        plugin: the entry-point name of the plugin at fault.
    """

    def __init__(self, message: str, *, plugin: str | None = None, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.plugin = plugin


class DistributedError(OmnitensorError, RuntimeError):
    """A distributed job cannot go on: launch, communicator or collective failure.

    Args:
        message: what went wrong, naming the ranks involved.
        ranks: the ranks at fault (the one that raised or died, or those that never arrived).
    """

    def __init__(self, message: str, *, ranks: Sequence[int] = (), **fields: Any) -> None:
        super().__init__(message, **fields)
        self.ranks = tuple(ranks)


class RankFailedError(DistributedError):
    """Another rank raised an exception (its message is included) or died."""


class DistributedTimeoutError(DistributedError, TimeoutError):
    """A collective waited longer than the timeout for some ranks (named in the message)."""


class CollectiveMismatchError(DistributedError, ShapeError):
    """Ranks called a collective with different ops, shapes, dtypes or attributes."""
