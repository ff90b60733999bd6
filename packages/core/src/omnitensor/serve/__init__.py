"""An OpenAI-compatible HTTP server (``omnitensor serve``; needs the ``[serve]`` extra).

`create_app` builds the FastAPI app over loaded models; the CLI verb runs it with uvicorn.
"""

from __future__ import annotations

from .app import ApiError as ApiError
from .app import create_app as create_app

__all__ = ["ApiError", "create_app"]
