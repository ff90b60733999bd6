"""Grad mode: whether operations on tensors that require grad are recorded for backward.

The mode is a context variable, so it is local to a thread and to an asyncio task: one task
running `no_grad()` does not turn recording off for another.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["enable_grad", "is_grad_enabled", "no_grad", "set_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])

_enabled: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "omnitensor_grad_enabled", default=True
)


def is_grad_enabled() -> bool:
    """True when new operations on tensors that require grad are recorded."""
    return _enabled.get()


class _GradMode:
    """A context manager (and decorator) that sets grad mode for its scope."""

    def __init__(self, enabled: bool) -> None:
        self._mode = enabled
        self._tokens: list[contextvars.Token[bool]] = []

    def __enter__(self) -> None:
        self._tokens.append(_enabled.set(self._mode))

    def __exit__(self, *exc: object) -> None:
        _enabled.reset(self._tokens.pop())

    def __call__(self, fn: F) -> F:
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with _GradMode(mode):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def no_grad() -> _GradMode:
    """Scope (or decorator) in which nothing is recorded for backward.

    Example:
        >>> with omnitensor.no_grad():
        ...     y = model(x)  # y.requires_grad is False
    """
    return _GradMode(False)


def enable_grad() -> _GradMode:
    """Scope (or decorator) that turns recording back on inside a `no_grad` scope."""
    return _GradMode(True)


@contextmanager
def set_grad_enabled(enabled: bool) -> Iterator[None]:
    """Scope with grad mode set to `enabled`."""
    token = _enabled.set(bool(enabled))
    try:
        yield
    finally:
        _enabled.reset(token)
