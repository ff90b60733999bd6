"""Row kernels: softmax, log_softmax, layer norm and RMS norm, one workgroup per row.

The lowering table sends the row composites here (`lower.rows`): one kernel per program, one
workgroup of 64 threads per row, the statistics reduced in workgroup shared memory, the optional
weight and bias applied on the way out.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from omnitensor.backend.codegen.wgsl import WGSL

from .kernels import prelude

__all__ = ["row_params", "row_source"]

#: Parameter words before the per-binding blocks; each binding then takes `_BLOCK` words.
_HEAD = 16
_BLOCK = 10


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
        scales: per mean (layer norm: of the mean and of the variance) (c, multiply): the
            sum is divided by c, or multiplied by it when `multiply`.
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
