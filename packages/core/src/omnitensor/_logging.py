"""The ``omnitensor`` logger's level from ``OMNITENSOR_LOG`` (``info``, ``warning``, ``error``).

Library code only logs (never prints). Without ``OMNITENSOR_LOG`` nothing is configured: warnings
reach stderr through Python's last-resort handler unless the application set up logging itself.
"""

from __future__ import annotations

import logging
import os

__all__ = ["LOGGER_NAME", "configure_logging"]

LOGGER_NAME = "omnitensor"

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_HANDLER_FLAG = "_omnitensor_env_handler"


def configure_logging() -> None:
    """Apply ``OMNITENSOR_LOG`` to the ``omnitensor`` logger (idempotent, cheap).

    A level below WARNING needs a handler of its own (the last-resort handler shows only
    warnings), so one stderr handler is attached, once, when the variable asks for ``info`` or
    ``debug`` and the logger has none. An unknown value is reported once and otherwise ignored.
    """
    raw = os.environ.get("OMNITENSOR_LOG", "").strip().lower()
    logger = logging.getLogger(LOGGER_NAME)
    if not raw:
        return
    level = _LEVELS.get(raw)
    if level is None:
        logger.warning(
            "OMNITENSOR_LOG: unknown level (got %r, expected one of info, warning, error)", raw
        )
        return
    logger.setLevel(level)
    if level < logging.WARNING and not any(
        getattr(h, _HANDLER_FLAG, False) for h in logger.handlers
    ):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        setattr(handler, _HANDLER_FLAG, True)
        logger.addHandler(handler)
