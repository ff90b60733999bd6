"""The lowerings every kernel-source backend shares, registered into its own `LoweringTable`.

Elementwise ops (and the elementwise composites the printer has templates for) become pending
chain nodes, movement ops views, `iota` a fused leaf, constants slots, `custom_call` its inlined
decomposition, reductions and `concatenate` the backend's reduction / fused-copy kernels. A
backend calls `register_common` with the dtypes it runs each op in, then registers its own
kernels (matmul, indexing, row kernels ...) in the same table.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from omnitensor.dtypes import ALL, DType
from omnitensor.ir.opdef import OpView, Trait, all_ops, get_op

from ..lowering import LoweringTable
from .lower import Iota, KernelLowering, tensor_type
from .printer import TEMPLATES
from .views import VIEW_OPS

__all__ = ["ELEMENTWISE_COMPOSITES", "REDUCTIONS", "common_ops", "declared_dtypes",
           "register_common"]

#: Reductions lowered by the backend's `KernelLowering.reduction`.
REDUCTIONS: Final = ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin")
#: Composites that are elementwise and fuse into chains (printer templates of their own).
ELEMENTWISE_COMPOSITES: Final = ("gelu", "silu", "swiglu", "geglu")

Lowering = Callable[[KernelLowering, OpView], list[Any]]


def _elementwise(lw: KernelLowering, view: OpView) -> list[Any]:
    return [lw.pending(view.inst)]


def _movement(lw: KernelLowering, view: OpView) -> list[Any]:
    return [lw.movement(view.inst)]


def _iota(lw: KernelLowering, view: OpView) -> list[Any]:
    res = tensor_type(view.inst.results[0])
    return [Iota(view.inst.attrs["dimension"], res.dtype, res.shape)]


def _constant(lw: KernelLowering, view: OpView) -> list[Any]:
    return [lw.constant(view.inst)]


def _custom_call(lw: KernelLowering, view: OpView) -> list[Any]:
    return lw.inline(view.inst.operands, view.inst.attrs["decomposition"])


def _reduce(lw: KernelLowering, view: OpView) -> list[Any]:
    return lw.reduce(view.inst)


def _concatenate(lw: KernelLowering, view: OpView) -> list[Any]:
    return lw.concatenate(view.inst)


def _collective(lw: KernelLowering, view: OpView) -> list[Any]:
    # NOTE: world size 1 only (see `_one_process`): every collective is then its operand.
    return [lw.operand(view.inst.operands[0])]


def _one_process(view: OpView) -> str | None:
    """Why a collective cannot run here: kernel backends have no communicator of their own."""
    size = view.inst.attrs.get("world_size", 1)
    if size == 1:
        return None
    return (f"{view.inst.op}: world size {size} needs a communicator this backend can hand its "
            "buffers to (none is implemented for it; run distributed jobs on a host backend "
            "such as cpu)")


def declared_dtypes(name: str) -> tuple[DType, ...]:
    """Every dtype op `name` declares for any of its operands (or its result), in `ALL` order."""
    opdef = get_op(name)
    declared = set(opdef.dtypes)
    for spec in opdef.operands:
        declared.update(spec.dtypes or ())
    return tuple(d for d in ALL if d in declared)


def common_ops() -> dict[str, Lowering]:
    """Op name -> shared lowering, for every declared op the shared walk lowers."""
    declared = all_ops()
    found: dict[str, Lowering] = {}
    for name, opdef in declared.items():
        if opdef.has(Trait.ELEMENTWISE) and (name in TEMPLATES or name in ("convert", "bitcast")):
            found[name] = _elementwise
    found |= {name: _elementwise for name in ELEMENTWISE_COMPOSITES if name in declared}
    found |= dict.fromkeys(VIEW_OPS, _movement)
    found |= dict.fromkeys(REDUCTIONS, _reduce)
    found |= {"iota": _iota, "constant": _constant, "custom_call": _custom_call,
              "concatenate": _concatenate}
    found |= {name: _collective for name, opdef in declared.items()
              if opdef.has(Trait.COLLECTIVE)}
    return found


def register_common(table: LoweringTable, dtypes: Callable[[str], Collection[DType] | None],
                    when: Mapping[str, Callable[[OpView], str | None]] | None = None) -> None:
    """Register the shared lowerings into `table`.

    Args:
        table: the backend's lowering table.
        dtypes: op name -> the dtypes the backend runs it in (None: skip the op).
        when: op name -> the backend's predicate (the reason an instruction is not supported).
    """
    for name, lowering in common_ops().items():
        wanted = dtypes(name)
        if wanted is not None:
            rule = (when or {}).get(name)
            if rule is None and get_op(name).has(Trait.COLLECTIVE):
                rule = _one_process
            table.register(name, dtypes=tuple(wanted), when=rule)(lowering)
