"""The row composites (softmax, log_softmax, layer_norm, rms_norm) as row-kernel operands.

Kernel-source backends lower each of them to one kernel per row over the trailing axes; this
module reads a composite instruction into what such a kernel needs, the same way for all.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Final

from omnitensor.dtypes import DType
from omnitensor.ir.opdef import OpView
from omnitensor.ir.types import Value

from ..lowering import LoweringTable
from .lower import KernelLowering

__all__ = ["ROW_KINDS", "register_rows", "row_operands"]

#: The row composites a row kernel computes.
ROW_KINDS: Final = ("softmax", "log_softmax", "layer_norm", "rms_norm")


def row_operands(view: OpView) -> tuple[Value, Value | None, Value | None, float, int]:
    """(x, weight or None, bias or None, eps, normalized trailing axes) of a row composite."""
    inst = view.inst
    x, *rest = inst.operands
    weight = rest[0] if rest else None
    bias = rest[1] if len(rest) > 1 else None
    eps = float(inst.attrs.get("eps", 0.0))
    axes = inst.attrs.get("axes", (-1,))
    return x, weight, bias, eps, len(tuple(axes)) if not isinstance(axes, int) else 1


def _row_lowering(kind: str) -> Callable[[KernelLowering, OpView], list[Any]]:
    def lowering(lw: KernelLowering, view: OpView) -> list[Any]:
        x, weight, bias, eps, axes = row_operands(view)
        return [lw.rows(kind, x, weight, bias, eps, axes)]

    return lowering


def register_rows(table: LoweringTable, dtypes: Collection[DType],
                  kinds: Collection[str] = ROW_KINDS) -> None:
    """Register the row composites `kinds` into `table`, lowered by the backend's `rows` kernel."""
    for kind in kinds:
        table.register(kind, dtypes=tuple(dtypes))(_row_lowering(kind))
