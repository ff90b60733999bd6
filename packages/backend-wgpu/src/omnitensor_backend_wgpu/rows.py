"""Row kernels: softmax, log_softmax, layer norm and RMS norm (composites, or matched).

The row composites reach `row_source` through the lowering table. Until the functionals emit
them, the matcher below also finds their portable decompositions.

The portable `F.softmax`, `F.layer_norm` and `F.rms_norm` trace to a reduction, a reshape, a
broadcast and elementwise ops per statistic (two reductions each for softmax and layer norm), so
without help they run as three to five kernels, each writing a full tensor. Here the lowering
recognizes those instruction shapes (over the last axis, float32/float16) and replaces them by
one kernel per program: one workgroup per row, the statistics reduced in workgroup shared memory,
the optional weight and bias applied on the way out. Nothing is matched when an intermediate
value is used outside the pattern (it must then exist in a buffer), so the rewrite never
changes what a program computes, only how many kernels it takes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from omnitensor.backend.codegen.wgsl import WGSL
from omnitensor.dtypes import float16, float32
from omnitensor.ir.program import Instruction
from omnitensor.ir.types import TensorType, Value

from .kernels import prelude

__all__ = ["ROW_KINDS", "RowPattern", "match_rows", "row_params", "row_source"]

#: The fused row kernels, by the functional they replace.
ROW_KINDS = ("softmax", "layer_norm", "rms_norm")
#: Parameter words before the per-binding blocks; each binding then takes `_BLOCK` words.
_HEAD = 16
_BLOCK = 10


@dataclass
class RowPattern:
    """One matched softmax / layer norm / RMS norm over the last axis of `x`.

    Attributes:
        kind: one of `ROW_KINDS`.
        x: the normalized value.
        weight: multiplied in after normalizing (same shape as `x`), or None.
        bias: added last (same shape as `x`), or None.
        scales: (c, multiply) per mean (layer norm: of the mean and of the variance): the
            sum is divided by c, or multiplied by it when `multiply`.
        eps: added to the variance / mean square.
        covered: indices (in the instruction list) the fused kernel replaces; the last one is
            where it is emitted.
    """

    kind: str
    x: Value
    weight: Value | None = None
    bias: Value | None = None
    scales: tuple[tuple[float, bool], tuple[float, bool]] = ((1.0, False), (1.0, False))
    eps: float = 0.0
    covered: list[int] = field(default_factory=list)


class _Matcher:
    def __init__(self, body: Sequence[Instruction], outputs: Sequence[Value]) -> None:
        self.body = body
        self.producer: dict[int, int] = {}
        self.uses: dict[int, int] = {}
        for i, inst in enumerate(body):
            for r in inst.results:
                self.producer[id(r)] = i
            for v in inst.operands:
                self.uses[id(v)] = self.uses.get(id(v), 0) + 1
        for v in outputs:
            self.uses[id(v)] = self.uses.get(id(v), 0) + 1

    def made(self, value: Value, op: str, covered: list[int]) -> Instruction | None:
        """The instruction of `op` producing `value` (recorded in `covered`), or None."""
        i = self.producer.get(id(value))
        if i is None or self.body[i].op != op:
            return None
        covered.append(i)
        return self.body[i]

    def scalar(self, value: Value) -> float | None:
        """The number a broadcast 0-d constant holds (left uncovered: it is shared), or None."""
        i = self.producer.get(id(value))
        if i is None or self.body[i].op != "broadcast_in_dim":
            return None
        j = self.producer.get(id(self.body[i].operands[0]))
        if j is None or self.body[j].op != "constant":
            return None
        held = self.body[j].attrs["value"]
        if getattr(held, "shape", ()) != ():
            return None
        return float(held)

    def unbroadcast(self, value: Value, shape: tuple[int, ...],
                    covered: list[int]) -> Value | None:
        """The per-row value spread over the last axis of `shape` by `value`'s broadcast.

        Either ``broadcast((..., 1), dims=all)`` (keepdims, as the functionals trace) or
        ``broadcast((...,), dims=leading)``.
        """
        rank = len(shape)
        b = self.made(value, "broadcast_in_dim", covered)
        if b is None or not isinstance(value.type, TensorType) or value.type.shape != shape:
            return None
        dims, t = tuple(b.attrs["dims"]), b.operands[0].type
        if not isinstance(t, TensorType):
            return None
        if dims == tuple(range(rank)) and t.shape == (*shape[:-1], 1):
            return b.operands[0]
        if dims == tuple(range(rank - 1)) and t.shape == shape[:-1]:
            return b.operands[0]
        return None

    def reduced(self, value: Value, shape: tuple[int, ...], op: str,
                covered: list[int]) -> Value | None:
        """The x of ``<op>(x, axes=(-1,))``, maybe reshaped to (..., 1), with x of `shape`."""
        rank = len(shape)
        t = value.type
        if isinstance(t, TensorType) and t.shape == (*shape[:-1], 1):
            r = self.made(value, "reshape", covered)
            if r is None:
                return None
            value = r.operands[0]
        elif not isinstance(t, TensorType) or t.shape != shape[:-1]:
            return None
        red = self.made(value, op, covered)
        if red is None or [a % rank for a in red.attrs["axes"]] != [rank - 1]:
            return None
        x = red.operands[0]
        return x if isinstance(x.type, TensorType) and x.type.shape == shape else None

    def mean(self, value: Value, shape: tuple[int, ...],
             covered: list[int]) -> tuple[Value, float, bool] | None:
        """(x, c, multiply) of ``reduce_sum(x) / c`` or ``reduce_sum(x) * c``, or None."""
        i = self.producer.get(id(value))
        if i is None or self.body[i].op not in ("div", "mul"):
            return None
        d = self.body[i]
        covered.append(i)
        c = self.scalar(d.operands[1])
        summed = self.reduced(d.operands[0], shape, "reduce_sum", covered)
        if c is None or summed is None:
            return None
        return summed, c, d.op == "mul"

    # --- patterns -------------------------------------------------------------------------------

    def softmax(self, value: Value) -> RowPattern | None:
        covered: list[int] = []
        t = value.type
        d = self.made(value, "div", covered)
        if d is None or not isinstance(t, TensorType) or not t.shape:
            return None
        e, total = d.operands
        exp = self.made(e, "exp", covered)
        row = self.unbroadcast(total, t.shape, covered)
        if exp is None or row is None or self.reduced(row, t.shape, "reduce_sum",
                                                      covered) is not e:
            return None
        sub = self.made(exp.operands[0], "sub", covered)
        if sub is None:
            return None
        x = sub.operands[0]
        row = self.unbroadcast(sub.operands[1], t.shape, covered)
        if row is None or self.reduced(row, t.shape, "reduce_max", covered) is not x:
            return None
        return RowPattern("softmax", x, covered=covered)

    def norm(self, value: Value) -> RowPattern | None:
        """A layer norm or RMS norm core: ``x_or_centered * broadcast(rsqrt(mean + eps))``."""
        covered: list[int] = []
        t = value.type
        m = self.made(value, "mul", covered)
        if m is None or not isinstance(t, TensorType) or not t.shape:
            return None
        shape = t.shape
        base = m.operands[0]
        row = self.unbroadcast(m.operands[1], shape, covered)
        rs = self.made(row, "rsqrt", covered) if row is not None else None
        add = self.made(rs.operands[0], "add", covered) if rs is not None else None
        if add is None:
            return None
        eps = self.scalar(add.operands[1])
        var = self.mean(add.operands[0], shape, covered)
        if eps is None or var is None:
            return None
        squared = self.made(var[0], "mul", covered)
        if squared is None or squared.operands[0] is not base or squared.operands[1] is not base:
            return None
        before = len(covered)
        sub = self.made(base, "sub", covered)
        if sub is not None:
            x = sub.operands[0]
            row = self.unbroadcast(sub.operands[1], shape, covered)
            mean = self.mean(row, shape, covered) if row is not None else None
            if mean is not None and mean[0] is x:
                return RowPattern("layer_norm", x, scales=(mean[1:], var[1:]), eps=eps,
                                  covered=covered)
            # NOTE: not a layer norm; still an RMS norm of whatever `base` is.
            del covered[before:]
        return RowPattern("rms_norm", base, scales=(var[1:], var[1:]), eps=eps,
                          covered=covered)

    def candidates(self, index: int) -> list[RowPattern]:
        """Patterns ending at instruction `index`, largest first."""
        inst = self.body[index]
        value = inst.results[0]
        found: list[RowPattern] = []
        if inst.op == "div":
            sm = self.softmax(value)
            if sm is not None:
                sm.covered.append(index)
                found.append(sm)
            return found
        if inst.op == "add":
            for core_v, bias in (inst.operands, inst.operands[::-1]):
                for scaled in self.scaled(core_v):
                    if scaled.kind == "layer_norm" and scaled.bias is None:
                        scaled.bias = bias
                        scaled.covered.append(index)
                        found.append(scaled)
        elif inst.op == "mul":
            for scaled in self.scaled(value):
                scaled.covered = [i for i in scaled.covered if i != index] + [index]
                found.append(scaled)
        return found

    def scaled(self, value: Value) -> list[RowPattern]:
        """``core * weight`` patterns, then the bare core, ending at `value`."""
        found: list[RowPattern] = []
        i = self.producer.get(id(value))
        if i is not None and self.body[i].op == "mul":
            inst = self.body[i]
            for core_v, weight in (inst.operands, inst.operands[::-1]):
                core = self.norm(core_v)
                if core is not None:
                    core.weight = weight
                    core.covered.append(i)
                    found.append(core)
        core = self.norm(value)
        if core is not None:
            found.append(core)
        return found

    def interior_ok(self, pattern: RowPattern) -> bool:
        """True when every covered value but the last is used only inside the pattern."""
        inside: dict[int, int] = {}
        for i in pattern.covered:
            for v in self.body[i].operands:
                inside[id(v)] = inside.get(id(v), 0) + 1
        for i in pattern.covered[:-1]:
            for r in self.body[i].results:
                if self.uses.get(id(r), 0) != inside.get(id(r), 0):
                    return False
        return len(set(pattern.covered)) == len(pattern.covered)


def _fits(pattern: RowPattern, final: Value) -> bool:
    t = pattern.x.type
    if not isinstance(t, TensorType) or t.dtype not in (float32, float16) or not t.shape:
        return False
    for extra in (pattern.weight, pattern.bias):
        if extra is not None and extra.type != t:
            return False
    return final.type == t


def match_rows(body: Sequence[Instruction], outputs: Sequence[Value]) -> dict[int, RowPattern]:
    """Fusable row patterns in `body`, keyed by the index of the instruction that ends each.

    Args:
        body: the instructions of one function (or one inlined decomposition).
        outputs: the values the function returns (used outside `body`).
    """
    matcher = _Matcher(body, outputs)
    claimed: set[int] = set()
    found: dict[int, RowPattern] = {}
    for index in range(len(body) - 1, -1, -1):
        if index in claimed or body[index].op not in ("div", "mul", "add"):
            continue
        for pattern in matcher.candidates(index):
            pattern.covered = sorted(set(pattern.covered))
            if (pattern.covered[-1] == index and matcher.interior_ok(pattern)
                    and not claimed & set(pattern.covered)
                    and _fits(pattern, body[index].results[0])):
                found[index] = pattern
                claimed |= set(pattern.covered)
                break
    return found


def _f32_bits(value: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", value))[0])


def row_params(n_rows: int, row_len: int, outer: Sequence[int],
               scales: Sequence[tuple[float, bool]], eps: float,
               views: Sequence[tuple[int, int, Sequence[int]]]) -> list[int]:
    """The parameter words of a row kernel.

    Args:
        n_rows: rows (workgroups).
        row_len: elements per row.
        outer: the shape of the leading dims.
        scales: the two means' (c, multiply) (see `RowPattern`).
        eps: the epsilon.
        views: per input binding (offset, stride along the row, strides of the leading dims).
    """
    words = [n_rows, row_len, len(outer), _f32_bits(scales[0][0]), _f32_bits(scales[1][0]),
             _f32_bits(eps)]
    words += list(outer) + [0] * (8 - len(outer))
    words += [int(scales[0][1]), int(scales[1][1])]
    for offset, inner, strides in views:
        words += [offset, inner, *strides, *[0] * (8 - len(strides))]
    return words


def _reduce(value: str, combine: str) -> str:
    """A workgroup tree reduction of the f32 `value` (every thread gets the result)."""
    return f"""  red[lid] = {value};
  workgroupBarrier();
  for (var t = 32u; t > 0u; t = t >> 1u) {{
    if (lid < t) {{ red[lid] = {combine.format(a="red[lid]", b="red[lid + t]")}; }}
    workgroupBarrier();
  }}
  {value} = red[0];
  workgroupBarrier();
"""


def row_source(kind: str, dtype: Any, *, weight: bool, bias: bool) -> str:
    """WGSL of one fused row kernel (one workgroup of 64 threads per row).

    Bindings: x, then weight and bias when present, then the dense output.
    """
    n_in = 1 + int(weight) + int(bias)
    head = prelude([(dtype, False)] * n_in + [(dtype, True)], math=True)
    out = f"b{n_in + 1}"
    names = ["x"] + (["w"] if weight else []) + (["bb"] if bias else [])
    decl = "\n".join(f"  var a{k} = pi({_HEAD + k * _BLOCK}u);" for k in range(n_in))
    walk = "\n".join(f"    a{k} = a{k} + c * pi({_HEAD + k * _BLOCK + 2}u + u32(d));"
                     for k in range(n_in))
    loads = "\n".join(
        f"fn ld_{name}(a: i32, j: u32) -> f32 {{ return "
        f"{WGSL.load(dtype, f'b{k + 1}[u32(a + i32(j) * pi({_HEAD + k * _BLOCK + 1}u))]')}; }}"
        for k, name in enumerate(names))
    x = "ld_x(a0, j)"
    loop = "  for (var j = lid; j < n; j = j + 64u) {"
    if kind in ("softmax", "log_softmax"):
        value = f"({x} - mx) - m_log(s)" if kind == "log_softmax" else f"m_exp({x} - mx) / s"
        body = f"""  var mx = -m_inf();
{loop} mx = m_max(mx, {x}); }}
{_reduce("mx", "m_max({a}, {b})")}  var s = 0.0;
{loop} s = s + m_exp({x} - mx); }}
{_reduce("s", "{a} + {b}")}"""
    elif kind == "layer_norm":
        value = f"({x} - mean) * r"
        body = f"""  var s = 0.0;
{loop} s = s + {x}; }}
{_reduce("s", "{a} + {b}")}  let mean = m_scale(s, 3u);
  var q = 0.0;
{loop} let c = {x} - mean; q = q + c * c; }}
{_reduce("q", "{a} + {b}")}  let r = 1.0 / m_sqrt(m_scale(q, 4u) + bitcast<f32>(p(5u)));
"""
    else:
        value = f"{x} * r"
        body = f"""  var q = 0.0;
{loop} let c = {x}; q = q + c * c; }}
{_reduce("q", "{a} + {b}")}  let r = 1.0 / m_sqrt(m_scale(q, 3u) + bitcast<f32>(p(5u)));
"""
    if weight:
        value = f"({value}) * ld_w(a1, j)"
    if bias:
        value = f"({value}) + ld_bb(a{n_in - 1}, j)"
    scale = ("fn m_scale(s: f32, k: u32) -> f32 {\n"
             "  let c = bitcast<f32>(p(k));\n"
             "  return select(s / c, s * c, p(k + 11u) != 0u);\n}\n")
    return head + loads + "\n" + scale + f"""
var<workgroup> red: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
  let row = wid.x + wid.y * nwg.x;
  if (row >= p(0u)) {{ return; }}
  let n = p(1u);
{decl}
  var rem = row;
  for (var d = i32(p(2u)) - 1; d >= 0; d = d - 1) {{
    let sz = p(6u + u32(d));
    let c = i32(rem % sz);
    rem = rem / sz;
{walk}
  }}
{body}{loop}
    {out}[row * n + j] = {WGSL.store(dtype, value)};
  }}
}}
"""
