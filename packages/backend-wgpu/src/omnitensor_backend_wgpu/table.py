"""The WebGPU backend's lowering table: every op and composite it lowers, in the dtypes it runs.

The shared lowerings (elementwise chains, views, reductions ...) come from the core's codegen;
`lower` registers the WGSL kernels. Capabilities are derived from this table, intersected with
what the adapter can hold (float16 only with shader-f16); an op or composite without an entry
is unsupported (composites are then expanded into primitives before the backend sees them).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from omnitensor.backend.codegen.common import declared_dtypes, register_common
from omnitensor.backend.lowering import LoweringTable
from omnitensor.dtypes import DType, bool_, float16, float32, int32, uint32
from omnitensor.ir.opdef import OpView

__all__ = ["FLOATS", "LOWERINGS", "NATIVE", "dtypes_for", "result_dtype"]

#: dtypes a buffer can hold (float16 only on adapters with shader-f16).
NATIVE: Final = (float32, float16, int32, uint32, bool_)
FLOATS: Final = (float32, float16)
#: Float-only ops (the math library is float32).
_FLOAT_ONLY: Final = ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "logistic",
                      "sin", "cos", "erf", "atan2", "floor", "ceil", "round", "gelu", "silu",
                      "swiglu", "geglu")
#: Integer-only ops (pow on floats needs an extended-precision log to meet its budget).
_INT_ONLY: Final = ("pow",)


def dtypes_for(name: str) -> Collection[DType]:
    """The dtypes op `name` runs in here: its declared ones that WGSL kernels handle."""
    declared = declared_dtypes(name)
    wanted = FLOATS if name in _FLOAT_ONLY else (int32, uint32) if name in _INT_ONLY else NATIVE
    return [d for d in wanted if d in declared]


def result_dtype(view: OpView) -> str | None:
    """Ops named by their operands but run in their result's dtype: that dtype must be ours."""
    op, result = view.inst.op, view.inst.results[0].type
    allowed = (float32, float16, uint32) if op == "rng" else dtypes_for(op)
    dtype = getattr(result, "dtype", None)
    if dtype not in allowed:
        return f"{op} on {dtype} is not supported by backend 'wgpu'"
    return None


def _bitcast(view: OpView) -> str | None:
    types = (view.inst.results[0].type, view.inst.operands[0].type)
    if any(getattr(t, "dtype", None) == bool_ for t in types):
        return "bitcast: bool has no 8-bit storage on backend 'wgpu'"
    return result_dtype(view)


#: op or composite name -> its WGSL lowering.
LOWERINGS: Final = LoweringTable()
register_common(LOWERINGS, dtypes_for, {"bitcast": _bitcast, "convert": result_dtype,
                                        "select": result_dtype, "iota": result_dtype})
