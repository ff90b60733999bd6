"""Built-in case sources: trait-derived cases (`generate`), per-family op samples, fused graphs.

Importing this package registers them through the same public API third parties use. A family
module whose ops are not declared yet registers samples that are simply never used.
"""

from __future__ import annotations

from .. import generate as _generate  # noqa: F401  (registers the generic sources)
from .. import layout as _layout  # noqa: F401  (non-contiguous input buffers)
from . import collective as _collective  # noqa: F401
from . import composite as _composite  # noqa: F401
from . import creation as _creation  # noqa: F401
from . import custom as _custom  # noqa: F401
from . import elementwise as _elementwise  # noqa: F401
from . import functional as _functional  # noqa: F401
from . import grad as _grad  # noqa: F401
from . import graph as _graph  # noqa: F401
from . import indexing as _indexing  # noqa: F401
from . import linalg as _linalg  # noqa: F401
from . import model as _model  # noqa: F401
from . import movement as _movement  # noqa: F401
from . import quant as _quant  # noqa: F401
from . import reduce as _reduce  # noqa: F401
