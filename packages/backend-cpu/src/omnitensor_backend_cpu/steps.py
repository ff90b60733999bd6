"""Plan steps of single instructions (the lowerings in `lowering` choose among them).

Reference kernels, BLAS and row-dot products, quantized products, in-place cache updates.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from omnitensor.dtypes import float32, float64
from omnitensor.ir.opdef import get_op
from omnitensor.ir.ops.linalg import dimension_numbers
from omnitensor.ir.program import Function, Instruction
from omnitensor.ir.types import TensorType

from . import codegen, threads, tier
from .drafts import Array, Draft, Owned, Slots, Step
from .prepared import Kept

__all__ = ["Epilogue", "dot_step", "qmatmul_step", "reference_step", "sum_step", "takes_addends",
           "update_step"]

#: Most activation rows (M) for which `x @ W.T` runs as row dot products instead of BLAS, and
#: the fewest weight elements for which that pays for loading numba (below, numpy's matmul, a
#: few microseconds either way; `codegen.min_elements` 0 lifts it, as for every kernel).
#: Measured from memory on 2 threads against OpenBLAS: a 4864 x 896 weight, 16 rows 1.7-2.4
#: against 2.8-3.2 ms, 32 rows 2.7-3.2 against 3.1-3.7 ms, 48 rows 3.9-4.2 against 3.5-3.6 ms;
#: one row of a 896 x 896 weight 123 against 186 us, of a 128 x 896 weight 31 against 33 us.
_GEMV_MAX_ROWS: Final = 32
#: `_GEMV_MAX_ROWS` where `gemm`'s tiles take the products (`threads.wide_products`).
_WIDE_GEMV_MAX_ROWS: Final = 16
_GEMV_MIN_WEIGHT: Final = 1 << 19
#: `fewrows.MIN_ROWS` (not imported: that loads numba), and the fewest flops for which its
#: tiles pay for loading numba.
_FEWROWS_MIN_ROWS: Final = 8
_FEWROWS_MIN_FLOPS: Final = 1 << 21


#: `gemm.MIN_WORK` (not imported: that loads numba).
_GEMM_MIN_WORK: Final = 1 << 21


#: Same-dtype elementwise ops whose reference kernel is this numpy ufunc on every dtype but the
#: 16-bit floats (which the reference computes in float32 and rounds once).
_UFUNCS: Final = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
                  "min": np.minimum, "neg": np.negative, "abs": np.abs, "exp": np.exp,
                  "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos}


def _ufunc_of(inst: Instruction) -> Any:
    """The numpy ufunc computing `inst` exactly as its reference kernel, or None."""
    ufunc = _UFUNCS.get(inst.op)
    if ufunc is None or ufunc.nin != len(inst.operands):
        return None
    types = {v.type for v in (*inst.operands, *inst.results)}
    if len(types) != 1:
        return None
    (only,) = types
    if (not isinstance(only, TensorType) or not only.shape  # (numpy returns 0-d as scalars)
            or only.dtype.bits == 16 and only.dtype.is_floating):
        return None
    return ufunc


def _ufunc_step(inst: Instruction, ufunc: Any, index: int) -> Draft:
    """A same-type elementwise op as one numpy call into the buffer the planner gives it.

    A decode step runs ~50 of these on tiny arrays (the residual adds), where the reference
    kernel's wrapping cost 5-10 us a step against 1-3 here; its own buffer, the same array
    every run, lets the step reading it keep its prepared kernel call (`kernel_step`).
    """
    reads = [v.id for v in inst.operands]
    result = inst.results[0]
    out = result.id
    assert isinstance(result.type, TensorType)
    owned = [Owned(out, result.type.shape, result.type.dtype.np, index)]

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[out]
        if len(reads) == 1:
            (x,) = reads

            def unary(slots: Slots) -> None:
                slots[out] = ufunc(slots[x], out=get(slots))

            return unary
        lhs, rhs = reads

        def binary(slots: Slots) -> None:
            slots[out] = ufunc(slots[lhs], slots[rhs], out=get(slots))

        return binary

    return Draft(reads, [out], make, owned)


def _concat_step(inst: Instruction, index: int) -> Draft:
    """`concatenate` as one numpy call into the buffer the planner gives it.

    A decode step stacks each layer's new key and value rows for its cache update (24 a step
    for a 24-layer model): a buffer of the plan's instead of a fresh array each run.
    """
    reads = [v.id for v in inst.operands]
    result = inst.results[0]
    out = result.id
    assert isinstance(result.type, TensorType)
    axis = int(inst.attrs["axis"]) % len(result.type.shape)
    owned = [Owned(out, result.type.shape, result.type.dtype.np, index)]

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[out]

        def step(slots: Slots) -> None:
            slots[out] = np.concatenate([slots[i] for i in reads], axis=axis, out=get(slots))

        return step

    return Draft(reads, [out], make, owned)


_VIEWS: Final = frozenset({"reshape", "transpose", "slice", "broadcast_in_dim"})


def _view_step(inst: Instruction) -> Step | None:
    """A view (reshape, transpose, basic slice, broadcast) as one numpy call, or None.

    The view is made again only when its operand is another array object than the last run's:
    a plan's arena buffers, and views of them, are the same objects run after run, so the
    steps reading them see the same arrays too (`kernel_step` keeps their prepared calls). A
    reshape numpy had to copy (a strided operand) is made at every run.
    """
    if inst.op not in _VIEWS:
        return None
    (x,), out = [v.id for v in inst.operands], inst.results[0].id
    make_view: Callable[[Array], Array]
    if inst.op == "reshape":
        shape = tuple(inst.attrs["shape"])

        def make_view(value: Array) -> Array:
            return value.reshape(shape)
    elif inst.op == "transpose":
        perm = tuple(inst.attrs["perm"])

        def make_view(value: Array) -> Array:
            return value.transpose(perm)
    elif inst.op == "slice":  # q, k and v of a joined product; gate and up
        attrs = inst.attrs
        index = tuple(slice(a, b, s) for a, b, s in zip(attrs["start"], attrs["limit"],
                                                        attrs["stride"], strict=True))

        def make_view(value: Array) -> Array:
            return value[index]
    else:
        make_view = _broadcast_view(inst)
    # (operand, view) of the last run, one tuple: concurrent runs read a consistent pair
    last: tuple[Any, Any] = (None, None)

    def view(slots: Slots) -> None:
        nonlocal last
        value = slots[x]
        source, made = last
        if source is not value:
            made = make_view(value)
            if _same_memory(made, value):
                last = (value, made)
        slots[out] = made

    return view


def _same_memory(view: Array, value: Array) -> bool:
    """Whether `view` is a view of `value`'s memory (numpy points a view at the owner)."""
    owner = view.base
    return owner is not None and (owner is value or owner is value.base)


def _broadcast_view(inst: Instruction) -> Callable[[Array], Array]:
    """`broadcast_in_dim` as a read-only view made by the array constructor.

    ``np.broadcast_to`` (the reference) took 8 us a call against 2 us here; a char-gpt training
    step makes ~80 of these views. A strided operand takes the reference.
    """
    shape, dims = tuple(inst.attrs["shape"]), tuple(inst.attrs["dims"])
    operand = inst.operands[0].type
    assert isinstance(operand, TensorType)
    # the operand dims that keep their size (the others repeat: stride 0)
    kept = [(i, d) for i, d in enumerate(dims) if operand.shape[i] == shape[d] != 1]
    reference = get_op("broadcast_in_dim").reference

    def broadcast(value: Array) -> Array:
        if not (value.flags.c_contiguous and value.size):
            return np.asarray(reference(value, shape=shape, dims=dims))
        strides = [0] * len(shape)
        for i, d in kept:
            strides[d] = value.strides[i]
        view = np.ndarray(shape, value.dtype, value, 0, tuple(strides))
        view.flags.writeable = False
        return view

    return broadcast


def reference_step(inst: Instruction, index: int = -1) -> Draft:
    """`inst` run by its reference kernel (numpy; a composite's decomposition, inlined once).

    Views, same-type elementwise ufuncs and concatenations run as one numpy call (the latter
    two into a buffer of the plan's, step `index`).
    """
    opdef = get_op(inst.op)
    ufunc = _ufunc_of(inst) if index >= 0 else None
    if ufunc is not None:
        return _ufunc_step(inst, ufunc, index)
    if inst.op == "concatenate" and index >= 0 and isinstance(inst.results[0].type, TensorType):
        return _concat_step(inst, index)
    kernel, attrs = opdef.reference, dict(inst.attrs)
    reads = [v.id for v in inst.operands]
    writes = [v.id for v in inst.results]
    variadic = any(s.variadic for s in opdef.operands)
    if opdef.decompose is not None:
        entries, consts = tier.flatten([inst])

        def make_inlined(_: dict[int, Callable[[Slots], Array]]) -> Step:
            def step(slots: Slots) -> None:
                env: dict[Any, Any] = dict(consts)
                tier.run_flat(entries, env, slots)
                for slot in writes:
                    slots[slot] = np.asarray(env[slot])

            return step

        return Draft(reads, writes, make_inlined)

    def make(_: dict[int, Callable[[Slots], Array]]) -> Step:
        direct = _view_step(inst)
        if direct is not None:
            return direct
        if len(writes) == 1 and not variadic:
            (out,) = writes

            def step(slots: Slots) -> None:
                slots[out] = np.asarray(kernel(*[slots[i] for i in reads], **attrs))

            return step

        def step_multi(slots: Slots) -> None:
            result = kernel(*opdef.group([slots[i] for i in reads]), **attrs)
            results = result if isinstance(result, tuple) else (result,)
            for slot, array in zip(writes, results, strict=True):
                slots[slot] = np.asarray(array)

        return step_multi

    return Draft(reads, writes, make)


@dataclass(frozen=True)
class Epilogue:
    """Adds and an activation after a product, performed by its step (`gemm.gemm`'s).

    Attributes:
        result: the value the step writes (the last add's result) instead of the product.
        addends: what the adds add, in order: values of the product's shape, or (N,) values
            added along its rows (a linear layer's bias, before its broadcast).
        absorbed: the body indices of the instructions the step performs.
        activation: a key of `gemm.ACTIVATIONS` applied after the adds, or None.
    """

    result: int
    addends: tuple[int, ...]
    absorbed: tuple[int, ...]
    activation: str | None = None


@dataclass(frozen=True)
class _Product:
    """How `dot_step` runs a `dot_general`: its sizes, layouts and kernel."""

    b: int
    m: int
    n: int
    k: int
    lperm: tuple[int, ...]
    rperm: tuple[int, ...]
    batch: tuple[int, ...]
    matvec: bool
    own: bool
    free_rhs: int


def _product(inst: Instruction) -> _Product | None:
    lhs_t, rhs_t, out_t = (v.type for v in (*inst.operands, inst.results[0]))
    assert isinstance(lhs_t, TensorType) and isinstance(rhs_t, TensorType)
    assert isinstance(out_t, TensorType)
    if lhs_t.dtype not in (float32, float64) or out_t.size == 0:
        return None
    (lc, rc), (lb, rb) = dimension_numbers(lhs_t.shape, rhs_t.shape, inst.attrs["contracting"],
                                           inst.attrs["batch"])
    lf = tuple(d for d in range(lhs_t.ndim) if d not in lb + lc)
    rf = tuple(d for d in range(rhs_t.ndim) if d not in rb + rc)
    b = math.prod(lhs_t.shape[d] for d in lb)
    m = math.prod(lhs_t.shape[d] for d in lf)
    n = math.prod(rhs_t.shape[d] for d in rf)
    k = math.prod(lhs_t.shape[d] for d in lc)
    lperm, rperm = lb + lf + lc, rb + rc + rf
    lid = lperm == tuple(range(lhs_t.ndim))
    # NOTE: batch dims stay apart (numpy's matmul broadcasts over any number): merged, the
    # heads of a (B, T, H, D) tensor viewed as (B, H, T, D) were copied first (a training
    # step's q @ k.T in its attention backward: 270 against 56 us with the dims apart)
    batch = tuple(lhs_t.shape[d] for d in lb) if b > 1 else ()
    flops = 2.0 * b * m * n * k

    # x @ W.T with W (N, K) as stored and a few rows of x: row dot products (see quant.gemv).
    # NOTE: also every product BLAS would split over its threads: their spinning workers
    # then share the cores with the row products' (a 16-token prefill's 4864 x 896 products
    # took 6.3 ms after a split BLAS product, against 1.8 ms)
    # (From `fewrows.MIN_ROWS` rows on, the outer-product tiles beat BLAS on smaller weights
    # too: a 16-token prefill's 128 x 896 key and value products.)
    big = (n * k >= _GEMV_MIN_WEIGHT or flops >= threads.BLAS_PARALLEL_FLOPS
           or (m >= _FEWROWS_MIN_ROWS and flops >= _FEWROWS_MIN_FLOPS))
    # (from 17 rows, `fewrows` runs two 16-row tiles where `gemm` runs one 32-row panel: a
    # 24-row product by a 9728 x 896 weight took 2.6 ms there against 1.5 ms in `gemm`)
    most_rows = (_WIDE_GEMV_MAX_ROWS if m > _WIDE_GEMV_MAX_ROWS and m * n * k >= _GEMM_MIN_WORK
                 and threads.wide_products() else _GEMV_MAX_ROWS)
    matvec = (lhs_t.dtype == float32 and b == 1 and m <= most_rows
              and (big or not codegen.min_elements()) and lid
              and rperm == (*rc, *rf) and len(rc) == 1 and len(rf) == 1 and rc[0] == 1)

    # float32 products big enough run as `gemm`'s wide tiles where numpy's BLAS is narrower
    # (`threads.wide_products`; `gemm` is imported only for such sizes: it loads numba)
    own = (not matvec and b == 1 and lhs_t.dtype == float32 and rhs_t.dtype == float32
           and m * n * k >= _GEMM_MIN_WORK and threads.wide_products())
    return _Product(b, m, n, k, lperm, rperm, batch, matvec, own, len(rf))


def takes_addends(inst: Instruction) -> bool:
    """Whether `dot_step` runs this product where an `Epilogue`'s adds can be performed.

    On `gemm`'s tiles, with its result's last axis as the tiles' columns.
    """
    product = _product(inst)
    return product is not None and product.own and product.free_rhs == 1


def dot_step(inst: Instruction, index: int, epilogue: Epilogue | None = None) -> Draft | None:
    """`dot_general` on float32/float64 as one BLAS call (batched by numpy's matmul).

    With an `epilogue` (only where `takes_addends`), the step writes the adds' result.
    """
    product = _product(inst)
    if product is None:
        return None
    assert epilogue is None or (product.own and product.free_rhs == 1)
    lhs_t, rhs_t, out_t = (v.type for v in (*inst.operands, inst.results[0]))
    assert isinstance(lhs_t, TensorType) and isinstance(rhs_t, TensorType)
    assert isinstance(out_t, TensorType)
    b, m, n, k = product.b, product.m, product.n, product.k
    lperm, rperm, batch = product.lperm, product.rperm, product.batch
    matvec, own = product.matvec, product.own
    lshape, rshape, oshape = (*batch, m, k), (*batch, k, n), (*batch, m, n)
    lhs, rhs = inst.operands[0].id, inst.operands[1].id
    out = inst.results[0].id if epilogue is None else epilogue.result
    owned = [Owned(out, out_t.shape, out_t.dtype.np, index)]
    lid = lperm == tuple(range(lhs_t.ndim))
    rid = rperm == tuple(range(rhs_t.ndim))
    flops = 2.0 * b * m * n * k
    addends = () if epilogue is None else epilogue.addends
    activation = None if epilogue is None else epilogue.activation

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[out]
        if matvec:
            from . import quant

            kept = Kept()

            def prepare(arrays: Sequence[Array]) -> tuple[Callable[[], None], bool]:
                x, w, result = arrays
                if not w.flags.c_contiguous:
                    return functools.partial(np.matmul, x.reshape(m, k), w.T,
                                             out=result.reshape(m, n)), False
                call = quant.prepare_gemv(np.ascontiguousarray(x).reshape(m, k), w,
                                          result.reshape(m, n))
                return call, x.flags.c_contiguous

            def gemv_step(slots: Slots) -> None:
                result = get(slots)
                kept.run((slots[lhs], slots[rhs], result), prepare)
                slots[out] = result

            return gemv_step

        if own:
            from . import gemm

            def gemm_step(slots: Slots) -> None:
                a = slots[lhs] if lid else slots[lhs].transpose(lperm)
                c = slots[rhs] if rid else slots[rhs].transpose(rperm)
                result = get(slots)
                # (a (N,) bias as it is; a value of out's shape as (M, N): a bias broadcast
                # from a (N,) input keeps its zero row stride, and is read as a bias)
                extra = [x if x.ndim == 1 else x.reshape(m, n)
                         for x in (slots[v] for v in addends)]
                gemm.gemm(a.reshape(m, k), c.reshape(k, n).T, result.reshape(m, n), extra,
                          activation)
                slots[out] = result

            return gemm_step

        def step(slots: Slots) -> None:
            a = slots[lhs] if lid else slots[lhs].transpose(lperm)
            c = slots[rhs] if rid else slots[rhs].transpose(rperm)
            result = get(slots)
            threads.blas_for(flops)
            # NOTE: reshape is a view whenever the permuted strides allow (the common x @ W
            # and x @ W.T layouts); otherwise numpy copies, which is still correct.
            np.matmul(a.reshape(lshape), c.reshape(rshape), out=result.reshape(oshape))
            slots[out] = result

        return step

    # (the kind names the kernels in profiles: a few rows' products run as `quant.gemv`'s row
    # products or `gemm.few`'s tiles, not in BLAS)
    kind = "gemm" if own else "gemv" if matvec else "blas"
    return Draft([lhs, rhs, *addends], [out], make, owned, kind)


#: Fewest input elements for which a float sum over leading or trailing axes runs as a product
#: with a vector of ones. numpy's reduction over a short trailing axis loops per row: a char-gpt
#: step's (64, 9, 128) -> (64, 9) sums took 36 us against 18 us as a product, its
#: (64, 9, 128) -> (128,) sums 25 against 9 us (one thread, warm). `codegen.min_elements` 0
#: lifts it (the tests and the conformance run reach this step on small cases).
_SUM_MIN_ELEMENTS: Final = 1 << 12


def sum_step(inst: Instruction, index: int) -> Draft | None:
    """`reduce_sum` of a float32/float64 array over leading or trailing axes, by BLAS.

    ``x (rows, cols) @ ones(cols)`` for trailing axes, ``ones(rows) @ x`` for leading ones:
    NaN and infinities propagate as in a sum (``x * 1`` is x). Declines (the reference step)
    for other axes, small arrays and whole-array sums; a strided input at run time is summed
    by numpy into the same buffer.
    """
    x_t, out_t = inst.operands[0].type, inst.results[0].type
    assert isinstance(x_t, TensorType) and isinstance(out_t, TensorType)
    axes = sorted(a % x_t.ndim for a in inst.attrs["axes"]) if x_t.ndim else []
    small = x_t.size < _SUM_MIN_ELEMENTS and codegen.min_elements() > 0
    if x_t.dtype not in (float32, float64) or small or not axes or len(axes) == x_t.ndim:
        return None
    trailing = axes == list(range(x_t.ndim - len(axes), x_t.ndim))
    if not trailing and axes != list(range(len(axes))):
        return None
    reduced = math.prod(x_t.shape[a] for a in axes)
    kept = out_t.size
    ones = np.ones(reduced, x_t.dtype.np)
    x, out = inst.operands[0].id, inst.results[0].id
    owned = [Owned(out, out_t.shape, out_t.dtype.np, index)]
    axis = tuple(axes)

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[out]

        def step(slots: Slots) -> None:
            value, result = slots[x], get(slots)
            if not value.flags.c_contiguous:
                np.sum(value, axis=axis, out=result)
                slots[out] = result
                return
            threads.blas_for(2.0 * value.size)
            if trailing:
                np.matmul(value.reshape(kept, reduced), ones, out=result.reshape(kept))
            else:
                np.matmul(ones, value.reshape(reduced, kept), out=result.reshape(kept))
            slots[out] = result

        return step

    return Draft([x], [out], make, owned, "blas")


def _siblings(inst: Instruction, function: Function) -> list[Instruction]:
    """The `qmatmul`s of the same activations by weights of `inst`'s format (itself among them).

    Only weights that are function inputs (a model's parameters: the same buffers every run)
    and only when every sibling keeps float32 activations and results; none when `inst`'s own
    weight is not an input.
    """
    inputs = {i.value.id for i in function.inputs}
    if inst.operands[1].id not in inputs:
        return []
    x, fmt = inst.operands[0], inst.attrs["format"]

    def joins(other: Instruction) -> bool:
        out_t = other.results[0].type
        return (other.op == "qmatmul" and other.operands[0].id == x.id
                and other.attrs.get("format") == fmt and other.operands[1].id in inputs
                and isinstance(out_t, TensorType) and out_t.dtype == float32
                and out_t.size > 0 and other.attrs == inst.attrs)

    return [other for other in function.body if joins(other)]


def qmatmul_step(inst: Instruction, index: int, function: Function) -> Draft | None:
    """`qmatmul` of float32 activations by a weight format `quant` has a kernel for.

    The products of one activation by several weights (a layer's q, k and v; gate and up)
    run as one step over the weights' joined rows (`quant.joined_for`): the activations are
    quantized once and the rows split over the threads once. The first sibling's step
    computes every sibling's result; the others' steps are empty (and dropped).
    """
    x_t, out_t = inst.operands[0].type, inst.results[0].type
    w_t = inst.operands[1].type
    assert isinstance(x_t, TensorType) and isinstance(out_t, TensorType)
    fmt = inst.attrs["format"]
    from . import half, quant

    if fmt in half.FORMATS and x_t.dtype == float32 and out_t.size > 0:
        return _half_step(inst, index)
    if fmt not in quant.FORMATS or x_t.dtype != float32 or out_t.size == 0:
        return None
    shape = tuple(getattr(w_t, "logical_shape", ()))
    n, k = shape
    m = out_t.size // n
    x, w, out = inst.operands[0].id, inst.operands[1].id, inst.results[0].id
    # NOTE: from BLAS_MIN_ROWS rows (dequantized tiles by BLAS) the per-product overheads
    # are noise, and the joined result's column blocks would cost copies where contiguous
    # results are wanted (Q8_0 prefill of 128 tokens: 1206-1359 against 1084-1325 ms joined)
    siblings = _siblings(inst, function) if m < quant.BLAS_MIN_ROWS else []
    if len(siblings) > 1:
        if siblings[0] is not inst:  # computed by the first sibling's step
            return Draft([], [], lambda _: lambda slots: None, [], "ref")
        return _joined_step(siblings, m, k, fmt, index)
    owned = [Owned(out, out_t.shape, out_t.dtype.np, index)]

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[out]
        kept = Kept()

        def prepare(arrays: Sequence[Array]) -> tuple[Callable[[], None], bool]:
            lhs, weight, result = arrays
            packed = quant.packed_for(weight, fmt, shape)
            call = quant.prepare_qmatmul(np.ascontiguousarray(lhs).reshape(m, k), packed,
                                         result.reshape(m, n))
            return call, lhs.flags.c_contiguous

        def step(slots: Slots) -> None:
            result = get(slots)
            kept.run((slots[x], slots[w], result), prepare)
            slots[out] = result

        return step

    return Draft([x, w], [out], make, owned, "quant")


def _half_step(inst: Instruction, index: int) -> Draft:
    """`qmatmul` by a float16/bfloat16 weight, widened row by row as it is read (`half`)."""
    from . import half

    out_t, w_t = inst.results[0].type, inst.operands[1].type
    assert isinstance(out_t, TensorType)
    fmt = inst.attrs["format"]
    n, k = tuple(getattr(w_t, "logical_shape", ()))
    m = out_t.size // n
    x, w, out = inst.operands[0].id, inst.operands[1].id, inst.results[0].id
    owned = [Owned(out, out_t.shape, out_t.dtype.np, index)]

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[out]

        def step(slots: Slots) -> None:
            result = get(slots)
            lhs = np.ascontiguousarray(slots[x]).reshape(m, k)
            half.qmatmul(lhs, np.ascontiguousarray(slots[w]), fmt, result.reshape(m, n))
            slots[out] = result

        return step

    return Draft([x, w], [out], make, owned, "quant")


def _joined_step(siblings: list[Instruction], m: int, k: int, fmt: str, index: int) -> Draft:
    from . import quant

    x = siblings[0].operands[0].id
    weights = [i.operands[1].id for i in siblings]
    outs = [i.results[0].id for i in siblings]
    shapes = [tuple(getattr(i.operands[1].type, "logical_shape", ())) for i in siblings]
    out_shapes = [getattr(i.results[0].type, "shape", ()) for i in siblings]
    bounds = np.cumsum([0] + [s[0] for s in shapes]).tolist()

    # one buffer for all the results, owned by the first: the others are views of it (the
    # planner keeps it while any of them is read)
    owned = [Owned(outs[0], (m, bounds[-1]), np.dtype(np.float32), index)]

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        get = getters[outs[0]]
        kept = Kept()
        # (buffer, its parts) of the last run: the same views while the buffer is the same
        last: tuple[Any, list[Array]] = (None, [])

        def prepare(arrays: Sequence[Array]) -> tuple[Callable[[], None], bool]:
            lhs, *parts, result = arrays
            packed = quant.joined_for(parts, fmt, shapes)
            call = quant.prepare_qmatmul(np.ascontiguousarray(lhs).reshape(m, k), packed,
                                         result)
            return call, lhs.flags.c_contiguous

        def step(slots: Slots) -> None:
            nonlocal last
            result = get(slots)
            kept.run((slots[x], *[slots[w] for w in weights], result), prepare)
            held, parts = last
            if held is not result:
                parts = [result[:, lo:hi].reshape(shape) for lo, hi, shape in
                         zip(bounds[:-1], bounds[1:], out_shapes, strict=True)]
                last = (result, parts)
            for out, part in zip(outs, parts, strict=True):
                slots[out] = part

        return step

    return Draft([x, *weights], outs, make, owned, "quant")


def update_step(inst: Instruction, function: Function, idx: int) -> Draft | None:
    """`dynamic_update_slice` of a donated input that nothing else reads: written in place.

    A KV cache is donated to each decode step and updated one row at a time: copying it per
    step would cost as much as the attention itself. When the operand is a function input read
    by no other instruction (and is not itself an output), a run that donated it writes the
    update into its buffer; otherwise (not donated, or a read-only view) the step copies.
    """
    operand = inst.operands[0].id
    positions = {i.value.id: n for n, i in enumerate(function.inputs)}
    if operand not in positions or any(v.id == operand for v in function.outputs):
        return None
    if any(v.id == operand for other in function.body[idx + 1:] for v in other.operands):
        return None
    if any(v.id == operand for other in function.body[:idx] for v in other.operands):
        return None
    position = positions[operand]
    update = inst.operands[1].id
    starts = [v.id for v in inst.operands[2:]]
    out = inst.results[0].id
    op_t = inst.operands[0].type
    up_t = inst.operands[1].type
    assert isinstance(op_t, TensorType) and isinstance(up_t, TensorType)
    dims, sizes = op_t.shape, up_t.shape
    # NOTE: starts that are constants (a KV cache's zeros) are sliced once, here; the others
    # (the cache position) are read at every run and clamped as the op says
    producers = {v.id: i for i in function.body for v in i.results}
    fixed: list[slice | None] = []
    moving: list[tuple[int, int, int, int]] = []  # (axis, start slot, dim, size)
    for axis, (i, d, n) in enumerate(zip(starts, dims, sizes, strict=True)):
        source = producers.get(i)
        if source is not None and source.op == "constant":
            first = min(max(int(source.attrs["value"]), 0), d - n)
            fixed.append(slice(first, first + n))
        else:
            fixed.append(None)
            moving.append((axis, i, d, n))

    def make(_: dict[int, Callable[[Slots], Array]]) -> Step:
        def step(slots: Slots) -> None:
            buf = slots[operand]
            if position in slots[-1] and _writable(buf):
                target = buf
            else:
                target = np.array(buf, copy=True)
            index = list(fixed)
            for axis, i, d, n in moving:
                first = min(max(int(slots[i]), 0), d - n)
                index[axis] = slice(first, first + n)
            target[tuple(index)] = slots[update]
            slots[out] = target

        return step

    return Draft([operand, update, *starts], [out], make, [], "inplace", viewed=[operand])


def _writable(array: Array) -> bool:
    """Make a donated buffer writable again (uploads and outputs are handed out read-only)."""
    if array.flags.writeable:
        return True
    try:
        array.flags.writeable = True
    except ValueError:  # a view of a read-only base: copy instead
        return False
    return True
