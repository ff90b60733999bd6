"""Further ONNX ops: shifts, rotary embedding, SwiGLU, CumProd, Einsum, ConvTranspose, LpPool.

Also ScatterND (with indices known while tracing) and the window functions, which depend on
known sizes only and are therefore always folded.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...errors import UnsupportedError
from ...functional import conv2d, silu
from ...functional._ops import pad
from ...tensor.creation import full
from ...tensor.interop import from_numpy
from ...tensor.math import where
from ...tensor.shape import concatenate
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler
from .elementwise import _broadcast
from .nn import _pads, _windows

Attrs = Mapping[str, Any]


def _bitshift_check(attrs: Attrs) -> str | None:
    return None if attrs.get("direction") in ("LEFT", "RIGHT") else "direction must be LEFT/RIGHT"


@handler("BitShift", since=11, attributes=("direction",), check=_bitshift_check)
def _bitshift(ctx: Ctx, attrs: Attrs, x: Value, y: Value) -> Tensor:
    a, s = _broadcast(ctx.tensor(x), ctx.tensor(y).astype(ctx.tensor(x).dtype))
    if a.dtype.is_floating or a.dtype == dt.bool_:
        raise UnsupportedError(f"BitShift on {a.dtype}", op="onnx")
    bits = a.dtype.np.itemsize * 8
    signed = np.issubdtype(a.dtype.np, np.signedinteger)
    wide = dt.int64
    aw, sw = a.astype(wide), s.astype(wide)
    in_range = Tensor._apply("and", sw >= 0, sw < bits)
    safe = where(in_range, sw, full(tuple(sw.shape), 0, dtype=wide))
    two = Tensor._apply("pow", full(tuple(sw.shape), 2, dtype=wide), safe)
    if attrs["direction"] == "LEFT":
        out = (aw * two).astype(a.dtype)  # wraps to the type's width, as a shift does
        return where(in_range, out, full(tuple(out.shape), 0, dtype=a.dtype))
    quotient = Tensor._apply("div", aw, two)
    if signed:  # an arithmetic shift floors; `div` truncates toward zero
        inexact = Tensor._apply("ne", quotient * two, aw)
        quotient = where(Tensor._apply("and", aw < 0, inexact), quotient - 1, quotient)
        fill = where(aw < 0, full(tuple(aw.shape), -1, dtype=wide),
                     full(tuple(aw.shape), 0, dtype=wide))
    else:
        fill = full(tuple(aw.shape), 0, dtype=wide)
    return where(in_range, quotient, fill).astype(a.dtype)


@handler("RotaryEmbedding", since=23, attributes=("interleaved", "num_heads",
                                                  "rotary_embedding_dim"))
def _rotary(ctx: Ctx, attrs: Attrs, x: Value, cos: Value, sin: Value,
            position_ids: Value = None) -> Tensor:
    t = ctx.tensor(x)
    original = tuple(t.shape)
    if t.ndim == 4:
        t = t.permute(0, 2, 1, 3)  # (B, S, H, D)
    else:
        heads = int(attrs.get("num_heads", 0))
        if not heads:
            raise UnsupportedError("3-D RotaryEmbedding needs num_heads", op="onnx")
        t = t.reshape(t.shape[0], t.shape[1], heads, t.shape[2] // heads)
    head = t.shape[3]
    dim = int(attrs.get("rotary_embedding_dim", 0)) or head
    c, s_ = ctx.tensor(cos), ctx.tensor(sin)
    if position_ids is not None:
        ids = ctx.tensor(position_ids).astype(dt.int32)
        c = Tensor._apply("gather", c, ids, axis=0)
        s_ = Tensor._apply("gather", s_, ids, axis=0)
    c = c.reshape(c.shape[0], c.shape[1], 1, c.shape[2])
    s_ = s_.reshape(s_.shape[0], s_.shape[1], 1, s_.shape[2])
    rot, rest = t[..., :dim], t[..., dim:]
    half = dim // 2
    if attrs.get("interleaved", 0):
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
    real = c * x1 - s_ * x2
    imag = s_ * x1 + c * x2
    if attrs.get("interleaved", 0):
        rot = concatenate([real.reshape(*real.shape, 1), imag.reshape(*imag.shape, 1)],
                          axis=-1).reshape(*rot.shape)
    else:
        rot = concatenate([real, imag], axis=-1)
    out = concatenate([rot, rest], axis=-1) if dim < head else rot
    if len(original) == 3:
        return out.reshape(*original)
    return out.permute(0, 2, 1, 3)


@handler("SwiGLU", since=26, attributes=("alpha",))
def _swiglu(ctx: Ctx, attrs: Attrs, a: Value, b: Value) -> Tensor:
    x, gate = ctx.tensor(a), ctx.tensor(b)
    alpha = float(attrs.get("alpha", 1.0))
    swish = silu(x) if alpha == 1.0 else x * (x * alpha).sigmoid()
    return swish * gate


@handler("CumProd", since=1, attributes=("exclusive", "reverse"), static=(1,))
def _cumprod(ctx: Ctx, attrs: Attrs, x: Value, axis: Value) -> Tensor:
    t = ctx.tensor(x)
    a = ctx.ints(axis, "CumProd's axis")[0]
    a = a + t.ndim if a < 0 else a
    n = t.shape[a]
    i = np.arange(n).reshape(n, 1)
    j = np.arange(n).reshape(1, n)
    if attrs.get("reverse", 0):
        keep = j > i if attrs.get("exclusive", 0) else j >= i
    else:
        keep = j < i if attrs.get("exclusive", 0) else j <= i
    # out[..., i, ...] = prod over j of (keep[i, j] ? x[..., j, ...] : 1): an (n, n) product.
    moved = t if a == t.ndim - 1 else t.permute(*[d for d in range(t.ndim) if d != a], a)
    lead = tuple(moved.shape[:-1])
    grid = moved.reshape(*lead, 1, n).expand(*lead, n, n)
    mask = from_numpy(keep).reshape(*([1] * len(lead)), n, n).expand(*lead, n, n)
    one = full(lead + (n, n), 1, dtype=t.dtype)
    out = where(mask, grid, one).prod(-1)
    if a == t.ndim - 1:
        return out
    back = list(range(t.ndim - 1))
    back.insert(a, t.ndim - 1)
    return out.permute(*back)


def _parse_einsum(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise UnsupportedError(f"Einsum {equation!r}: {len(terms)} terms for {len(ranks)} "
                               "inputs", op="onnx")
    used = set(eq) - set(",->.")
    spare = [c for c in string.ascii_letters if c not in used]
    width = max((r - (len(term) - 3) for term, r in zip(terms, ranks, strict=True)
                 if "..." in term), default=0)
    ellipsis = "".join(spare[:width])
    expanded = []
    for term, r in zip(terms, ranks, strict=True):
        if "..." in term:
            own = r - (len(term) - 3)
            term = term.replace("...", ellipsis[width - own:])
        expanded.append(term)
    if not arrow:
        counts: dict[str, int] = {}
        for term in expanded:
            for c in term:
                counts[c] = counts.get(c, 0) + 1
        rhs = ellipsis + "".join(sorted(c for c, k in counts.items()
                                        if k == 1 and c not in ellipsis))
    else:
        rhs = rhs.replace("...", ellipsis)
    return expanded, rhs


@handler("Einsum", since=12, attributes=("equation",))
def _einsum(ctx: Ctx, attrs: Attrs, *xs: Value) -> Tensor:
    tensors = [ctx.tensor(x) for x in xs]
    terms, out = _parse_einsum(str(attrs["equation"]), [t.ndim for t in tensors])
    letters = sorted({c for term in terms for c in term})
    sizes: dict[str, int] = {}
    aligned = []
    for term, t in zip(terms, tensors, strict=True):
        # Repeated letters in one term (a diagonal) are taken with a gather of the diagonal.
        while len(set(term)) < len(term):
            c = next(ch for ch in term if term.count(ch) > 1)
            first, second = term.index(c), term.index(c, term.index(c) + 1)
            n = t.shape[first]
            idx = from_numpy(np.arange(n, dtype=np.int32))
            perm = [first, second] + [d for d in range(t.ndim) if d not in (first, second)]
            moved = t.permute(*perm).reshape(n * n, *[t.shape[d] for d in perm[2:]])
            t = Tensor._apply("gather", moved, idx * (n + 1), axis=0)
            term = c + "".join(term[d] for d in perm[2:])
        for c, size in zip(term, t.shape, strict=True):
            if sizes.setdefault(c, size) != size and size != 1 and sizes[c] == 1:
                sizes[c] = size
        order = [term.index(c) for c in letters if c in term]
        moved = t.permute(*order) if order != list(range(t.ndim)) else t
        shape = [t.shape[term.index(c)] if c in term else 1 for c in letters]
        aligned.append((moved.reshape(*shape), shape))
    full_shape = [sizes[c] for c in letters]
    product = None
    for part, shape in aligned:
        part = part.expand(*full_shape) if shape != full_shape else part
        product = part if product is None else product * part
    assert product is not None
    summed = tuple(i for i, c in enumerate(letters) if c not in out)
    result = product.sum(summed) if summed else product
    kept = [c for c in letters if c in out]
    perm = [kept.index(c) for c in out]
    return result.permute(*perm) if perm != list(range(len(perm))) else result


def _conv_transpose_check(attrs: Attrs) -> str | None:
    auto = attrs.get("auto_pad", "NOTSET")
    return None if auto in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID") else (
        f"auto_pad={auto!r}")


@handler("ConvTranspose", since=1, attributes=("auto_pad", "dilations", "group", "kernel_shape",
                                               "output_padding", "output_shape", "pads",
                                               "strides"), check=_conv_transpose_check)
def _conv_transpose(ctx: Ctx, attrs: Attrs, x: Value, w: Value, b: Value = None) -> Tensor:
    t, weight = ctx.tensor(x), ctx.tensor(w)
    if t.ndim not in (3, 4):
        raise UnsupportedError(f"ConvTranspose of rank {t.ndim} (supported: 1-D, 2-D)",
                               op="onnx")
    one_d = t.ndim == 3
    if one_d:
        t = t.reshape(t.shape[0], t.shape[1], 1, t.shape[2])
        weight = weight.reshape(weight.shape[0], weight.shape[1], 1, weight.shape[2])
    rank = 2
    groups = int(attrs.get("group", 1))

    def per_dim(name: str, default: int) -> list[int]:
        values = list(attrs.get(name, [default] * (1 if one_d else 2)))
        return [default] + values if one_d else values

    strides, dilations = per_dim("strides", 1), per_dim("dilations", 1)
    out_pad = per_dim("output_padding", 0)
    kernel = list(weight.shape[2:])
    sizes = list(t.shape[2:])
    pads = list(attrs.get("pads", [0] * (2 if one_d else 4)))
    low = ([0] + pads[:1]) if one_d else pads[:2]
    high = ([0] + pads[1:]) if one_d else pads[2:]
    auto = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = per_dim("output_shape", 0) if "output_shape" in attrs else [
            n * s for n, s in zip(sizes, strides, strict=True)]
        for d in range(rank):
            total = strides[d] * (sizes[d] - 1) + out_pad[d] + (
                (kernel[d] - 1) * dilations[d] + 1) - target[d]
            if auto == "SAME_UPPER":
                low[d], high[d] = total // 2, total - total // 2
            else:
                low[d], high[d] = total - total // 2, total // 2
    elif auto == "VALID":
        low, high = [0, 0], [0, 0]
    c_in, c_out_g = weight.shape[0], weight.shape[1]
    # The equivalent convolution: zeros between input elements, flipped, transposed weights.
    zero = full((), 0, dtype=t.dtype)
    edge = [(kernel[d] - 1) * dilations[d] for d in range(rank)]
    spread = Tensor._apply("pad", t, zero, low=(0, 0, edge[0] - low[0], edge[1] - low[1]),
                           high=(0, 0, edge[0] - high[0] + out_pad[0],
                                 edge[1] - high[1] + out_pad[1]),
                           interior=(0, 0, strides[0] - 1, strides[1] - 1))
    flipped = Tensor._apply("reverse", weight, axes=(2, 3))
    kg = flipped.reshape(groups, c_in // groups, c_out_g, kernel[0], kernel[1])
    w_conv = kg.permute(0, 2, 1, 3, 4).reshape(groups * c_out_g, c_in // groups, kernel[0],
                                                kernel[1])
    out = conv2d(spread, w_conv, None if b is None else ctx.tensor(b), stride=1, padding=0,
                 dilation=(dilations[0], dilations[1]), groups=groups)
    return out.reshape(out.shape[0], out.shape[1], out.shape[3]) if one_d else out


@handler("LpPool", since=11, attributes=("auto_pad", "ceil_mode", "dilations", "kernel_shape",
                                         "p", "pads", "strides"))
def _lp_pool(ctx: Ctx, attrs: Attrs, x: Value) -> Tensor:
    t = ctx.tensor(x)
    one_d = t.ndim == 3
    if t.ndim not in (3, 4):
        raise UnsupportedError(f"LpPool of rank {t.ndim} (supported: 1-D, 2-D)", op="onnx")
    t4 = t.reshape(t.shape[0], t.shape[1], 1, t.shape[2]) if one_d else t
    rank = t.ndim - 2
    kernel = tuple(attrs["kernel_shape"])
    strides = tuple(attrs.get("strides", [1] * rank))
    dilations = tuple(attrs.get("dilations", [1] * rank))
    low, high = _pads(attrs, kernel, strides, dilations, t.shape[2:],
                      bool(attrs.get("ceil_mode", 0)))
    if one_d:
        kernel, strides, dilations = (1, *kernel), (1, *strides), (1, *dilations)
        low, high = [0, *low], [0, *high]
    p = float(attrs.get("p", 2))
    padded = pad(t4.abs() ** p, (0, 0, *low), (0, 0, *high))
    out = _windows(padded, (kernel[0], kernel[1]), (strides[0], strides[1]),
                   (dilations[0], dilations[1])).sum(axis=2) ** (1.0 / p)
    return out.reshape(out.shape[0], out.shape[1], out.shape[3]) if one_d else out


def _scatter_nd_check(attrs: Attrs) -> str | None:
    reduction = attrs.get("reduction", "none")
    return None if reduction in ("none", "add", "mul", "max", "min") else (
        f"reduction={reduction!r}")


@handler("ScatterND", since=11, attributes=("reduction",), check=_scatter_nd_check,
         static=(1,))
def _scatter_nd(ctx: Ctx, attrs: Attrs, x: Value, indices: Value, updates: Value) -> Tensor:
    t, upd = ctx.tensor(x), ctx.tensor(updates)
    idx = np.asarray(indices).astype(np.int64)
    k = idx.shape[-1]
    dims = t.shape[:k]
    flat_idx = np.ravel_multi_index(tuple(np.moveaxis(np.where(idx < 0, idx + np.asarray(
        dims), idx), -1, 0)), dims).reshape(-1)
    rows = int(np.prod(dims))
    tail = tuple(t.shape[k:])
    flat = t.reshape(rows, *tail)
    upd_rows = upd.reshape(len(flat_idx), *tail)
    reduction = attrs.get("reduction", "none")
    # Static indices: one gather per update, applied in order (later updates win for "none").
    for n, row in enumerate(flat_idx.tolist()):
        cur = flat[row:row + 1]
        new = upd_rows[n:n + 1]
        if reduction == "add":
            new = cur + new
        elif reduction == "mul":
            new = cur * new
        elif reduction == "max":
            new = Tensor._apply("max", cur, new)
        elif reduction == "min":
            new = Tensor._apply("min", cur, new)
        parts = [p for p in (flat[:row], new, flat[row + 1:]) if p.shape[0]]
        flat = concatenate(parts, axis=0)
    return flat.reshape(*t.shape)


def _folded_only(op_type: str) -> None:
    """An op whose inputs are all shapes/sizes: always folded by onnx's reference op."""

    def run(ctx: Ctx, attrs: Attrs, *xs: Value) -> Tensor:
        raise UnsupportedError(f"{op_type} needs inputs known while tracing", op="onnx")

    handler(op_type, since=17, attributes=("output_datatype", "periodic"), static=(0,))(run)


for _name in ("BlackmanWindow", "HannWindow", "HammingWindow"):
    _folded_only(_name)
