"""Built-in case sources: trait-derived cases (`generate`), per-family op samples, fused graphs.

Importing this package registers them through the same public API third parties use.
"""

from __future__ import annotations

from .. import generate as _generate  # noqa: F401  (registers the generic sources)
from . import elementwise as _elementwise  # noqa: F401
from . import graph as _graph  # noqa: F401
