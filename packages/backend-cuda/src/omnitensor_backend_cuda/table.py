"""The CUDA backend's lowering table: every op and composite it lowers, in the dtypes it runs.

The shared lowerings (elementwise chains, views, reductions ...) come from the core's codegen;
`lower` and `lower_ops` register the CUDA kernels. Capabilities are derived from this table: an
op or composite without an entry is unsupported (the composites are then expanded into
primitives before the backend sees them).
"""

from __future__ import annotations

from typing import Final

from omnitensor.backend.codegen.common import declared_dtypes, register_common
from omnitensor.backend.lowering import LoweringTable

__all__ = ["LOWERINGS", "declared_dtypes"]


#: op or composite name -> its CUDA lowering.
LOWERINGS: Final = LoweringTable()
register_common(LOWERINGS, declared_dtypes)
