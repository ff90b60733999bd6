"""The cpu backend's lowering table: what it runs, and as which plan step.

Every declared op (and composite) has an entry: by default the reference kernel inside the plan
(for a composite, its decomposition run by the interpreter), so the backend runs everything the
reference does and its capabilities are the table's (`LOWERINGS.capabilities()`). Entries below
override that with the backend's own steps: BLAS and row-dot products for ``dot_general``,
repacked quantized products for ``qmatmul``, in-place cache updates, one pass for
``scatter_add`` (an embedding's gradient), and the composites'
kernels (row kernels for softmax/log_softmax/layer_norm/rms_norm, activations for gelu/silu and
the gated units, rotary embedding, fused attention). Elementwise chains are fused before the
table is consulted (`plan`), so they have no entries of their own here.

A lowering is ``fn(ctx, view) -> Draft | None``; None (an instance the kernel does not cover,
e.g. a softmax over a non-trailing axis) falls back to the reference step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, cast

import numpy as np

from omnitensor.backend.host import reference_op_table
from omnitensor.backend.lowering import LoweringTable
from omnitensor.dtypes import float32, float64
from omnitensor.ir.opdef import OpView, all_ops
from omnitensor.ir.ops.composite.attention import ScaledDotProductAttentionView
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType

from .drafts import Array, Draft
from .kernel_step import Kernel, kernel_draft, once, result_layout
from .steps import Epilogue, dot_step, qmatmul_step, reference_step, sum_step, update_step

__all__ = ["LOWERINGS", "Lower", "lower"]

#: op or composite name -> the cpu lowering.
LOWERINGS: Final = LoweringTable()

_FLOATS: Final = (float32, float64)


@dataclass
class Lower:
    """What a lowering gets besides the instruction: its function and positions.

    Attributes:
        function: the function being planned.
        index: the instruction's position in the body.
        step: the position its step takes in the plan.
        large: the program holds a value of `LARGE_PROGRAM` elements or more (a model's
            weights): its composites run compiled kernels at every size (`kernel_draft`).
        epilogue: the adds after a product that its step performs (`plan.epilogues`).
    """

    function: Function
    index: int
    step: int
    large: bool = False
    epilogue: Epilogue | None = None


#: How many ops were declared at the last `sync`.
_SYNCED: list[int] = [-1]


def _reference(ctx: Lower, view: OpView) -> Draft:
    return reference_step(view.inst, ctx.step)


def sync() -> None:
    """Give every declared op without an entry the reference lowering.

    Ops may be declared after this module is imported (plugins, composites).
    """
    declared = len(all_ops())
    if _SYNCED[0] == declared:  # nothing declared since the last call (the common case)
        return
    for name, dtypes in reference_op_table().items():
        if name not in LOWERINGS:
            LOWERINGS.register(name, dtypes=dtypes)(_reference)
    _SYNCED[0] = declared


def lower(ctx: Lower, inst: Instruction) -> Draft:
    """The plan step of `inst` from its table entry (the reference step when that declines)."""
    sync()
    draft: Draft | None = LOWERINGS.lookup(inst)(ctx, all_ops()[inst.op].view(inst))
    return draft if draft is not None else reference_step(inst, ctx.step)


# --- primitives with steps of their own ---------------------------------------------------------


def _register_primitives() -> None:
    table = reference_op_table()

    @LOWERINGS.register("dot_general", dtypes=table["dot_general"])
    def _dot(ctx: Lower, view: OpView) -> Draft | None:
        return dot_step(view.inst, ctx.step, ctx.epilogue)

    @LOWERINGS.register("qmatmul", dtypes=table["qmatmul"])
    def _qmatmul(ctx: Lower, view: OpView) -> Draft | None:
        return qmatmul_step(view.inst, ctx.step, ctx.function)

    @LOWERINGS.register("reduce_sum", dtypes=table["reduce_sum"])
    def _sum(ctx: Lower, view: OpView) -> Draft | None:
        return sum_step(view.inst, ctx.step)

    @LOWERINGS.register("dynamic_update_slice", dtypes=table["dynamic_update_slice"])
    def _update(ctx: Lower, view: OpView) -> Draft | None:
        return update_step(view.inst, ctx.function, ctx.index)

    @LOWERINGS.register("scatter_add", dtypes=table["scatter_add"])
    def _scatter_add(ctx: Lower, view: OpView) -> Draft | None:
        inst = view.inst
        result = _float_result(inst)
        operand, indices, updates = inst.operands
        if result is None or getattr(updates.type, "dtype", None) != result.dtype \
                or set(inst.attrs) != {"axis", "batch_dims"}:
            return None
        axis, batch_dims = int(inst.attrs["axis"]), int(inst.attrs["batch_dims"])

        def kernel() -> Kernel:
            from . import scatter

            def run(args: list[Array | None], out: Array) -> None:
                x, index, rows = args
                assert x is not None and index is not None and rows is not None
                scatter.scatter_add(x, index, rows, out, axis, batch_dims)

            return once(run)

        # its cost is the updates' size (an embedding gradient: many rows into a small table)
        work = max(result.size, getattr(updates.type, "size", 0))
        return kernel_draft(inst, ctx.step, [operand.id, indices.id, updates.id], kernel,
                            "scatter", work=work, large=ctx.large)


_register_primitives()


# --- composites ---------------------------------------------------------------------------------
# NOTE: registered without dtypes (every dtype the composite declares; the lowering declines
# what its kernels do not cover). Each lowering reads the instruction conservatively: an
# attribute it does not know, or an operand it cannot place, makes it decline (None: the
# decomposition runs), so a composite whose declaration grows a setting is never computed
# wrongly here, only more slowly.

_ROW_ATTRS: Final = frozenset({"eps", "axis", "axes", "normalized_ndim"})


def _float_result(inst: Instruction) -> TensorType | None:
    result = inst.results[0].type
    if len(inst.results) != 1 or not isinstance(result, TensorType):
        return None
    return result if result.dtype in _FLOATS else None


def _trailing(inst: Instruction, ndim: int) -> int | None:
    """How many trailing axes the composite normalizes (None: not trailing, or unknown)."""
    attrs = inst.attrs
    if "normalized_ndim" in attrs:
        count = int(attrs["normalized_ndim"])
        return count if 0 < count <= ndim else None
    axes = attrs.get("axes", attrs.get("axis", -1))
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    norm = sorted(a % ndim for a in axes) if ndim else []
    if not norm or norm != list(range(ndim - len(norm), ndim)):
        return None
    return len(norm)


def _row_lowering(kind: str) -> Callable[[Lower, OpView], Draft | None]:
    def lowering(ctx: Lower, view: OpView) -> Draft | None:
        inst = view.inst
        result = _float_result(inst)
        if result is None or set(inst.attrs) - _ROW_ATTRS or not result.shape:
            return None
        axes = _trailing(inst, len(result.shape))
        operands = inst.operands
        width = math.prod(result.shape[len(result.shape) - (axes or 0):])
        if axes is None or any(getattr(v.type, "dtype", None) != result.dtype
                               for v in operands):
            return None
        if any(getattr(v.type, "size", -1) != width for v in operands[1:]):
            return None  # weight/bias: one value per normalized element
        most = {"softmax": 1, "log_softmax": 1, "rms_norm": 2, "layer_norm": 3}[kind]
        if len(operands) > most or (kind.endswith("softmax") and axes != 1):
            return None
        eps = float(inst.attrs.get("eps", 0.0))
        ids = [v.id for v in operands] + [None] * (most - len(operands))

        def kernel() -> Kernel:
            from . import rowops

            if kind.endswith("norm"):
                centre = kind == "layer_norm"

                def prepare(args: list[Array | None], out: Array
                            ) -> tuple[Callable[[], None], bool]:
                    x = args[0]
                    assert x is not None
                    return rowops.prepare_norm(x, args[1], args[2] if centre else None, out,
                                               eps, centre, axes or 1)

                return prepare

            def run(args: list[Array | None], out: Array) -> None:
                x = args[0]
                assert x is not None
                if kind == "softmax":
                    rowops.softmax(x, out)
                else:
                    rowops.log_softmax(x, out)

            return once(run)

        return kernel_draft(inst, ctx.step, ids, kernel, "rows", large=ctx.large)

    return lowering


for _kind in ("softmax", "log_softmax", "layer_norm", "rms_norm"):
    LOWERINGS.register(_kind)(_row_lowering(_kind))


def _norm_backward_lowering(kind: str) -> Callable[[Lower, OpView], Draft | None]:
    # (the composite's own checks hold: params of the normalized shape and x's dtype, trailing
    # axes, grad of x's type)
    def lowering(ctx: Lower, view: OpView) -> Draft | None:
        inst = view.inst
        x, g, *params = inst.operands
        if not isinstance(x.type, TensorType) or x.type.dtype not in _FLOATS:
            return None
        axes = len(tuple(inst.attrs["axes"]))
        eps = float(inst.attrs.get("eps", 0.0))
        reads = [x.id, g.id, params[0].id if params else None]

        def kernel() -> Kernel:
            from . import norm_backward

            def prepare(args: list[Array | None], dx: Array, *dparams: Array
                        ) -> tuple[Callable[[], None], bool]:
                a, b, w = args
                assert a is not None and b is not None
                reusable = all(v is None or v.flags.c_contiguous for v in args)
                dweight, dbias = (*dparams, None, None)[:2]
                return norm_backward.prepare_norm_backward(
                    a, b, w, dx, dweight, dbias, eps=eps, centre=kind == "layer_norm",
                    axes=axes), reusable

            return prepare

        return kernel_draft(inst, ctx.step, reads, kernel, "rows",
                            work=2 * math.prod(x.type.shape), large=ctx.large)

    return lowering


for _kind in ("layer_norm", "rms_norm"):
    LOWERINGS.register(f"{_kind}_backward")(_norm_backward_lowering(_kind))


@LOWERINGS.register("cross_entropy")
def _cross_entropy(ctx: Lower, view: OpView) -> Draft | None:
    inst = view.inst
    result = _float_result(inst)
    attrs = dict(inst.attrs)
    ignore = int(attrs.pop("ignore_index", -100))
    smoothing = float(attrs.pop("label_smoothing", 0.0))
    x, target = inst.operands
    if result is None or attrs or getattr(x.type, "dtype", None) != result.dtype:
        return None

    def kernel() -> Kernel:
        from . import rowops

        def run(args: list[Array | None], out: Array) -> None:
            logits, classes = args
            assert logits is not None and classes is not None
            rowops.cross_entropy(logits, classes, out, ignore_index=ignore,
                                 label_smoothing=smoothing)

        return once(run)

    width = getattr(x.type, "size", 0)
    return kernel_draft(inst, ctx.step, [x.id, target.id], kernel, "rows", work=width,
                        large=ctx.large)


def _activation_lowering(name: str) -> Callable[[Lower, OpView], Draft | None]:
    def lowering(ctx: Lower, view: OpView) -> Draft | None:
        inst = view.inst
        result = _float_result(inst)
        if result is None:
            return None
        attrs = dict(inst.attrs)
        approximate = attrs.pop("approximate", "none")
        if attrs or approximate not in ("none", "tanh"):
            return None
        gated = name in ("swiglu", "geglu")
        operands = inst.operands
        if len(operands) != (2 if gated else 1) or any(v.type != result for v in operands):
            return None  # the gated units only in their two-operand (gate, up) form
        silu = name in ("silu", "swiglu")

        def kernel() -> Kernel:
            # NOTE: imported here, not when lowering: pointwise loads numba, which a program
            # whose activations are all small (the reference tier) never needs.
            from . import pointwise

            mode = (pointwise.SILU if silu else
                    pointwise.GELU_TANH if approximate == "tanh" else pointwise.GELU_ERF)

            def prepare(args: list[Array | None], out: Array
                        ) -> tuple[Callable[[], None], bool]:
                x = args[0]
                assert x is not None
                return pointwise.prepare_activation(x, out, mode, args[1] if gated else None)

            return prepare

        return kernel_draft(inst, ctx.step, [v.id for v in operands], kernel, "act",
                            large=ctx.large)

    return lowering


for _name in ("gelu", "silu", "swiglu", "geglu"):
    LOWERINGS.register(_name)(_activation_lowering(_name))


@LOWERINGS.register("rotary_embedding")
def _rotary(ctx: Lower, view: OpView) -> Draft | None:
    inst = view.inst
    result = _float_result(inst)
    attrs = dict(inst.attrs)
    interleaved = bool(attrs.pop("interleaved", False))
    if result is None or attrs or len(inst.operands) != 3 or not result.shape:
        return None
    x, cos, sin = inst.operands
    half = (*result.shape[:-1], result.shape[-1] // 2)
    for table in (cos.type, sin.type):
        if not isinstance(table, TensorType) or table.dtype != result.dtype:
            return None
        try:
            np.broadcast_shapes(table.shape, half)
        except ValueError:
            return None
        if np.broadcast_shapes(table.shape, half) != half:
            return None

    def kernel() -> Kernel:
        from . import attention

        def prepare(args: list[Array | None], out: Array) -> tuple[Callable[[], None], bool]:
            a, c, s = args
            assert a is not None and c is not None and s is not None
            return attention.prepare_rotary(a, c, s, out, interleaved=interleaved)

        return prepare

    return kernel_draft(inst, ctx.step, [x.id, cos.id, sin.id], kernel, "rotary", large=ctx.large)


_ATTN_ATTRS: Final = frozenset({"scale", "is_causal", "mask_kind", "has_q_positions",
                                "has_kv_length", "softcap"})


@LOWERINGS.register("scaled_dot_product_attention")
def _attention(ctx: Lower, view: OpView) -> Draft | None:
    inst = view.inst
    result = _float_result(inst)
    if result is None or set(inst.attrs) - _ATTN_ATTRS or len(result.shape) != 4:
        return None
    attn = cast(ScaledDotProductAttentionView, view)
    q, k, v, extras = attn.q, attn.k, attn.v, list(attn.extras)
    kind = str(inst.attrs.get("mask_kind", "none"))
    if kind not in ("none", "bool", "additive"):
        return None
    mask = extras.pop(0) if kind != "none" else None
    qpos = extras.pop(0) if inst.attrs.get("has_q_positions", False) else None
    kvlen = extras.pop(0) if inst.attrs.get("has_kv_length", False) else None
    if extras:
        return None
    types = [t.type for t in (q, k, v)]
    if any(not isinstance(t, TensorType) or t.dtype != result.dtype or len(t.shape) != 4
           for t in types):
        return None
    scale = float(inst.attrs["scale"])
    softcap = float(inst.attrs.get("softcap", 0.0))
    causal = bool(inst.attrs.get("is_causal", False))
    reads = [q.id, k.id, v.id, *(None if t is None else t.id for t in (mask, qpos, kvlen))]

    def kernel() -> Kernel:
        from . import attention

        def prepare(args: list[Array | None], out: Array) -> tuple[Callable[..., None], bool]:
            a, b, c = args
            assert a is not None and b is not None and c is not None
            return attention.prepare_sdpa(a, b, c, out, scale=scale, causal=causal,
                                          softcap=softcap), True

        return prepare

    qt, kt = (t for t in types[:2] if isinstance(t, TensorType))
    scores = math.prod(qt.shape[:3]) * kt.shape[2]  # (B, Hq, T, S)
    return kernel_draft(inst, ctx.step, reads, kernel, "attn", work=max(scores, result.size),
                        large=ctx.large, dynamic=3, layouts=_heads_layouts(ctx, inst))


#: (B, H, T, D) heads stored as (B, T, H, D): what the usual transpose reads as contiguous.
_TOKENS_FIRST: Final = (0, 2, 1, 3)


def _heads_layouts(ctx: Lower, inst: Instruction) -> list[tuple[int, ...] | None]:
    """Per result of an attention op, `_TOKENS_FIRST` where its readers transpose it so.

    The heads merged back into (B, T, H * D) were a copy of every attention output and
    gradient (an encoder batch's six: 0.9 ms); stored in that order, transpose and reshape
    are views. (One query row needs no such layout: its transpose is free already.)
    """
    return [_TOKENS_FIRST if isinstance(r.type, TensorType) and len(r.type.shape) == 4
            and r.type.shape[2] > 1 and result_layout(ctx.function, r.id, _TOKENS_FIRST)
            else None for r in inst.results]


#: Keys per row up to which the fused attention backward runs; longer rows (and float64) get
#: the composite's decomposition, whose batched BLAS products beat per-row loops there.
BACKWARD_MAX_KEYS: Final = 64


def _backward_fits(view: OpView) -> str | None:
    inst = view.inst
    types = [r.type for r in inst.results]
    if not all(isinstance(t, TensorType) and t.dtype == float32 for t in types):
        return "the fused attention backward runs float32 only"
    if set(inst.attrs) - _ATTN_ATTRS or str(inst.attrs.get("mask_kind")) not in (
            "none", "bool", "additive"):
        return "attributes the fused attention backward does not know"
    keys = types[1]
    assert isinstance(keys, TensorType)
    if keys.shape[2] > BACKWARD_MAX_KEYS:
        return f"rows of more than {BACKWARD_MAX_KEYS} keys run the decomposition"
    return None


@LOWERINGS.register("scaled_dot_product_attention_backward", dtypes=(float32,),
                    when=_backward_fits)
def _attention_backward(ctx: Lower, view: OpView) -> Draft | None:
    inst = view.inst
    q, k, v, g, *extras = inst.operands
    kind = str(inst.attrs.get("mask_kind", "none"))
    mask = extras.pop(0) if kind != "none" else None
    qpos = extras.pop(0) if inst.attrs.get("has_q_positions", False) else None
    kvlen = extras.pop(0) if inst.attrs.get("has_kv_length", False) else None
    scale = float(inst.attrs["scale"])
    softcap = float(inst.attrs.get("softcap", 0.0))
    causal = bool(inst.attrs.get("is_causal", False))
    reads = [q.id, k.id, v.id, g.id, *(None if t is None else t.id for t in (mask, qpos, kvlen))]

    def kernel() -> Kernel:
        from . import attention_backward

        def prepare(args: list[Array | None], dq: Array, dk: Array,
                    dv: Array) -> tuple[Callable[..., None], bool]:
            a, b, c, d = args
            assert a is not None and b is not None and c is not None and d is not None
            return attention_backward.prepare_backward(a, b, c, d, dq, dk, dv, scale=scale,
                                                       causal=causal, softcap=softcap), True

        return prepare

    sizes = sum(math.prod(r.type.shape) for r in inst.results if isinstance(r.type, TensorType))
    return kernel_draft(inst, ctx.step, reads, kernel, "attn", work=sizes, large=ctx.large,
                        dynamic=3, layouts=_heads_layouts(ctx, inst))

