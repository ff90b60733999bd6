"""WGSL sources of the non-fused kernels (reductions, tiled matmul, gather, slices, pad, cumsum).

Also the threefry helper used by fused `rng` leaves.

Every kernel reads shapes, strides and offsets from one uniform block (`P`), so its source
depends only on the op, dtypes and binding count, never on shapes: one pipeline serves every
shape. Sources are plain strings; `lower` decides what to launch and with which parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from omnitensor.backend.codegen.wgsl import MATHLIB, WGSL
from omnitensor.dtypes import DType, float16

__all__ = [
    "MAX_RANK",
    "PARAM_WORDS",
    "THREEFRY",
    "WORKGROUP",
    "cumsum_source",
    "dynamic_slice_source",
    "dynamic_update_slice_source",
    "gather_source",
    "matmul_source",
    "pad_source",
    "prelude",
    "reduce_source",
]

#: Largest rank a kernel handles (shapes live in fixed-size parameter slots).
MAX_RANK: Final = 8
#: u32 words in every kernel's uniform parameter block.
PARAM_WORDS: Final = 512
#: Threads per workgroup of 1-D kernels.
WORKGROUP: Final = 64
#: Tile edge of the matmul kernel.
TILE: Final = 16

THREEFRY: Final = """
fn rotl(x: u32, r: u32) -> u32 { return (x << r) | (x >> (32u - r)); }
fn threefry(k0: u32, k1: u32, c0: u32, c1: u32) -> vec2<u32> {
  let ks = array<u32, 3>(k0, k1, k0 ^ k1 ^ 0x1BD11BDAu);
  var x0 = c0 + k0;
  var x1 = c1 + k1;
  let rot = array<u32, 8>(13u, 15u, 26u, 6u, 17u, 29u, 16u, 24u);
  for (var g = 0u; g < 5u; g = g + 1u) {
    for (var j = 0u; j < 4u; j = j + 1u) {
      x0 = x0 + x1;
      x1 = rotl(x1, rot[(g % 2u) * 4u + j]);
      x1 = x1 ^ x0;
    }
    let s = g + 1u;
    x0 = x0 + ks[s % 3u];
    x1 = x1 + ks[(s + 1u) % 3u] + s;
  }
  return vec2<u32>(x0, x1);
}
"""


def prelude(bindings: Sequence[tuple[DType, bool]], *, math: bool = False) -> str:
    """Header of a kernel: f16 enable, the parameter block, and storage bindings 1..n.

    Args:
        bindings: per storage binding (dtype, writable), in binding order (named b1, b2 ...).
        math: include the float math library.
    """
    lines = []
    if any(d == float16 for d, _ in bindings):
        lines.append("enable f16;")
    lines.append(f"struct Params {{ v: array<vec4<u32>, {PARAM_WORDS // 4}> }};")
    lines.append("@group(0) @binding(0) var<uniform> P: Params;")
    lines.append("fn p(i: u32) -> u32 { return P.v[i >> 2u][i & 3u]; }")
    lines.append("fn pi(i: u32) -> i32 { return bitcast<i32>(p(i)); }")
    for k, (dtype, writable) in enumerate(bindings, start=1):
        access = "read_write" if writable else "read"
        lines.append(f"@group(0) @binding({k}) var<storage, {access}> b{k}: "
                     f"array<{WGSL.storage_type(dtype)}>;")
    if math:
        lines.append(MATHLIB)
    return "\n".join(lines) + "\n"


_GUARD = "  if (gid >= p(0u)) { return; }\n"
_LINEAR = ("@compute @workgroup_size(64)\n"
           "fn main(@builtin(global_invocation_id) g: vec3<u32>, "
           "@builtin(num_workgroups) nwg: vec3<u32>) {\n"
           "  let gid = g.x + g.y * nwg.x * 64u;\n")


def _ident(op: str, dtype: DType) -> str:
    ctype = WGSL.compute_type(dtype)
    if op == "reduce_sum":
        return {"f32": "0.0", "i32": "0", "u32": "0u"}[ctype]
    if op == "reduce_prod":
        return {"f32": "1.0", "i32": "1", "u32": "1u"}[ctype]
    largest = op in ("reduce_min", "argmin")
    if ctype == "bool":
        return "true" if largest else "false"
    if ctype == "f32":
        return "m_inf()" if largest else "-m_inf()"
    if ctype == "i32":
        return "bitcast<i32>(0x7fffffffu)" if largest else "bitcast<i32>(0x80000000u)"
    return "0xffffffffu" if largest else "0u"


def _combine(op: str, dtype: DType, a: str, b: str) -> str:
    ctype = WGSL.compute_type(dtype)
    if op == "reduce_sum":
        return f"{a} + {b}"
    if op == "reduce_prod":
        return f"{a} * {b}"
    if ctype == "bool":
        return f"{a} | {b}" if op == "reduce_max" else f"{a} & {b}"
    name = "max" if op == "reduce_max" else "min"
    return f"m_{name}({a}, {b})" if ctype == "f32" else f"{name}({a}, {b})"


def reduce_source(op: str, dtype: DType) -> str:
    """A reduction over a strided view: one workgroup per output element, tree in shared memory.

    Params: n_out, n_red, kept_rank, red_rank, offset, kept_shape[8], kept_strides[8],
    red_shape[8], red_strides[8]. Binding 1 is the input, binding 2 the output.
    """
    arg = op in ("argmax", "argmin")
    out_dtype = None if arg else dtype
    acc = WGSL.compute_type(dtype)
    body = prelude([(dtype, False), (out_dtype or dtype, True)] if not arg else
                   [(dtype, False), (dtype, True)], math=True)
    if arg:
        body = body.replace(f"b2: array<{WGSL.storage_type(dtype)}>", "b2: array<i32>")
    load = WGSL.load(dtype, "b1[u32(a)]")
    lines = [body, f"var<workgroup> sv: array<{acc}, 64>;", "var<workgroup> si: array<u32, 64>;"]
    if arg:
        larger = op == "argmax"
        cmp = ">" if larger else "<"
        nan = ("m_isnan(a)", "m_isnan(b)") if acc == "f32" else ("false", "false")
        lines.append(f"""
fn pick(a: {acc}, ai: u32, b: {acc}, bi: u32) -> bool {{
  if (bi == 0xffffffffu) {{ return true; }}
  if (ai == 0xffffffffu) {{ return false; }}
  if ({nan[0]} && {nan[1]}) {{ return ai < bi; }}
  if ({nan[0]}) {{ return true; }}
  if ({nan[1]}) {{ return false; }}
  if (a {cmp} b) {{ return true; }}
  if (b {cmp} a) {{ return false; }}
  return ai < bi;
}}""")
    lines.append(f"""
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
  let o = wid.x + wid.y * nwg.x;
  if (o >= p(0u)) {{ return; }}
  let n_red = p(1u);
  var base = pi(4u);
  var rem = o;
  for (var d = i32(p(2u)) - 1; d >= 0; d = d - 1) {{
    let sz = p(5u + u32(d));
    base = base + i32(rem % sz) * pi(13u + u32(d));
    rem = rem / sz;
  }}
  var acc: {acc} = {_ident(op, dtype)};
  var best = 0xffffffffu;
  // NOTE: contiguous chunks per thread, combined in order by thread 0, so a short reduction
  // runs in the reference's sequential order (products of inf and 0 depend on it).
  let chunk = (n_red + 63u) / 64u;
  let stop = min(n_red, (lid + 1u) * chunk);
  for (var r = lid * chunk; r < stop; r = r + 1u) {{
    var a = base;
    var q = r;
    for (var d = i32(p(3u)) - 1; d >= 0; d = d - 1) {{
      let sz = p(21u + u32(d));
      a = a + i32(q % sz) * pi(29u + u32(d));
      q = q / sz;
    }}
    let v = {load};
    {"if (pick(v, r, acc, best)) { acc = v; best = r; }" if arg else
     "acc = " + _combine(op, dtype, "acc", "v") + ";"}
  }}
  sv[lid] = acc;
  si[lid] = best;
  workgroupBarrier();
  if (lid == 0u) {{
    for (var t = 1u; t < 64u; t = t + 1u) {{
      {"if (pick(sv[t], si[t], acc, best)) { acc = sv[t]; best = si[t]; }" if arg else
       "acc = " + _combine(op, dtype, "acc", "sv[t]") + ";"}
    }}
    sv[0] = acc;
    si[0] = best;
  }}
  if (lid == 0u) {{
    {"b2[o] = i32(si[0]);" if arg else "b2[o] = " + WGSL.store(dtype, "sv[0]") + ";"}
  }}
}}""")
    return "\n".join(lines)


def matmul_source(dtype: DType) -> str:
    """Tiled (B, M, K) x (B, K, N) -> (B, M, N) with 16x16 workgroup tiles in shared memory.

    Params: B, M, N, K, lhs (offset, sb, sm, sk), rhs (offset, sb, sk, sn). Bindings: lhs, rhs,
    out (contiguous). float16 accumulates in float32; integers wrap.
    """
    acc = WGSL.compute_type(dtype)
    zero = {"f32": "0.0", "i32": "0", "u32": "0u"}[acc]
    head = prelude([(dtype, False), (dtype, False), (dtype, True)])
    la = WGSL.load(dtype, "b1[u32(pi(4u) + i32(b) * pi(5u) + i32(row) * pi(6u)"
                          " + i32(ka) * pi(7u))]")
    lb = WGSL.load(dtype, "b2[u32(pi(8u) + i32(b) * pi(9u) + i32(kb) * pi(10u)"
                          " + i32(col) * pi(11u))]")
    return head + f"""
var<workgroup> ta: array<array<{acc}, 16>, 16>;
var<workgroup> tb: array<array<{acc}, 16>, 16>;
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  let b = wid.z;
  let m = p(1u);
  let n = p(2u);
  let k = p(3u);
  let row = wid.y * 16u + lid.y;
  let col = wid.x * 16u + lid.x;
  var acc: {acc} = {zero};
  let tiles = (k + 15u) / 16u;
  for (var t = 0u; t < tiles; t = t + 1u) {{
    let ka = t * 16u + lid.x;
    let kb = t * 16u + lid.y;
    var va: {acc} = {zero};
    var vb: {acc} = {zero};
    if (row < m && ka < k) {{ va = {la}; }}
    if (kb < k && col < n) {{ vb = {lb}; }}
    ta[lid.y][lid.x] = va;
    tb[lid.y][lid.x] = vb;
    workgroupBarrier();
    for (var j = 0u; j < 16u; j = j + 1u) {{ acc = acc + ta[lid.y][j] * tb[j][lid.x]; }}
    workgroupBarrier();
  }}
  if (row < m && col < n) {{ b3[(b * m + row) * n + col] = {WGSL.store(dtype, "acc")}; }}
}}
"""


def _unravel(rank_word: str, shape_base: int, accumulators: Sequence[tuple[str, int]],
             extra: str = "") -> str:
    """A loop over output dims (innermost first) adding coordinate * stride to accumulators."""
    adds = "\n".join(f"    {name} = {name} + i32(c) * pi({base}u + u32(d));"
                     for name, base in accumulators)
    return f"""  var rem = gid;
  for (var d = i32({rank_word}) - 1; d >= 0; d = d - 1) {{
    let sz = p({shape_base}u + u32(d));
    let c = rem % sz;
    rem = rem / sz;
{adds}
{extra}  }}
"""


def gather_source(dtype: DType, index: DType) -> str:
    """tf.gather with batch dims, indices clamped to [0, n-1].

    Params: n, rank, out_shape[8] (2..9), op_off (10), op_strides per out dim (11..18), idx_off
    (19), idx_strides per out dim (20..27), axis_len (28), axis_stride (29).
    Bindings: operand, indices, out.
    """
    clamp = ("u32(clamp(raw, 0, i32(p(28u)) - 1))" if index.kind == "i"
             else "min(raw, p(28u) - 1u)")
    return prelude([(dtype, False), (index, False), (dtype, True)]) + _LINEAR + _GUARD + f"""
  var a = pi(10u);
  var ia = pi(19u);
{_unravel("p(1u)", 2, [("a", 11), ("ia", 20)])}  let raw = b2[u32(ia)];
  a = a + i32({clamp}) * pi(29u);
  b3[gid] = b1[u32(a)];
}}
"""


def _starts(index_dtypes: Sequence[DType], first_binding: int, dims_base: int,
            sizes_base: int) -> str:
    lines = ["  var st = array<i32, 8>(0, 0, 0, 0, 0, 0, 0, 0);"]
    for d, idt in enumerate(index_dtypes):
        raw = f"b{first_binding + d}[0]"
        hi = f"(pi({dims_base + d}u) - pi({sizes_base + d}u))"
        value = f"i32(min({raw}, u32({hi})))" if idt.kind == "u" else f"clamp({raw}, 0, {hi})"
        lines.append(f"  st[{d}] = {value};")
    return "\n".join(lines) + "\n"


def dynamic_slice_source(dtype: DType, index_dtypes: Sequence[DType]) -> str:
    """dynamic_slice with StableHLO clamping.

    Params: n, rank, sizes[8] (2..9), off (10), strides (11..18), operand dims (19..26).
    Bindings: operand, one 0-d buffer per start index, out.
    """
    r = len(index_dtypes)
    binds = [(dtype, False)] + [(d, False) for d in index_dtypes] + [(dtype, True)]
    out = f"b{r + 2}"
    return prelude(binds) + _LINEAR + _GUARD + f"""
{_starts(index_dtypes, 2, 19, 2)}  var a = pi(10u);
  var rem = gid;
  for (var d = i32(p(1u)) - 1; d >= 0; d = d - 1) {{
    let sz = p(2u + u32(d));
    let c = i32(rem % sz);
    rem = rem / sz;
    a = a + (c + st[d]) * pi(11u + u32(d));
  }}
  {out}[gid] = b1[u32(a)];
}}
"""


def dynamic_update_slice_source(dtype: DType, index_dtypes: Sequence[DType]) -> str:
    """dynamic_update_slice: a copy of the operand with the update written at clamped starts.

    Params: n, rank, shape[8] (2..9), op_off (10), op_strides (11..18), up_off (19),
    up_strides (20..27), up_shape (28..35). Bindings: operand, update, starts..., out.
    """
    r = len(index_dtypes)
    binds = [(dtype, False), (dtype, False)]
    binds += [(d, False) for d in index_dtypes] + [(dtype, True)]
    out = f"b{r + 3}"
    return prelude(binds) + _LINEAR + _GUARD + f"""
{_starts(index_dtypes, 3, 2, 28)}  var a = pi(10u);
  var ua = pi(19u);
  var inside = true;
  var rem = gid;
  for (var d = i32(p(1u)) - 1; d >= 0; d = d - 1) {{
    let sz = p(2u + u32(d));
    let c = i32(rem % sz);
    rem = rem / sz;
    a = a + c * pi(11u + u32(d));
    inside = inside && c >= st[d] && c < st[d] + pi(28u + u32(d));
    ua = ua + (c - st[d]) * pi(20u + u32(d));
  }}
  if (inside) {{ {out}[gid] = b2[u32(ua)]; }} else {{ {out}[gid] = b1[u32(a)]; }}
}}
"""


def pad_source(dtype: DType) -> str:
    """Pad with low/high (possibly negative) and interior padding.

    Params: n, rank, out_shape (2..9), off (10), strides (11..18), in_shape (19..26),
    low (27..34), interior (35..42), pad_value offset (43). Bindings: x, padding_value, out.
    """
    head = prelude([(dtype, False), (dtype, False), (dtype, True)])
    return head + _LINEAR + _GUARD + """  var a = pi(10u);
  var hole = false;
  var rem = gid;
  for (var d = i32(p(1u)) - 1; d >= 0; d = d - 1) {
    let sz = p(2u + u32(d));
    let c = i32(rem % sz);
    rem = rem / sz;
    let t = c - pi(27u + u32(d));
    let step = pi(35u + u32(d)) + 1;
    let s = t / max(step, 1);
    if (t < 0 || t % step != 0 || s >= pi(19u + u32(d))) { hole = true; }
    a = a + s * pi(11u + u32(d));
  }
  if (hole) { b3[gid] = b2[u32(pi(43u))]; } else { b3[gid] = b1[u32(a)]; }
}
"""


def cumsum_source(dtype: DType) -> str:
    """Inclusive running sum along one axis: one thread per line (lines are short in practice).

    Params: n_lines, len, outer_rank, in_off, in_axis_stride, reverse, outer_shape (6..13),
    outer_in_strides (14..21), outer_out_strides (22..29), out_axis_stride (30).
    """
    acc = WGSL.compute_type(dtype)
    zero = {"f32": "0.0", "i32": "0", "u32": "0u"}[acc]
    load = WGSL.load(dtype, "b1[u32(a + i32(k) * pi(4u))]")
    return prelude([(dtype, False), (dtype, True)]) + _LINEAR + _GUARD + f"""
  var a = pi(3u);
  var o = 0;
  var rem = gid;
  for (var d = i32(p(2u)) - 1; d >= 0; d = d - 1) {{
    let sz = p(6u + u32(d));
    let c = i32(rem % sz);
    rem = rem / sz;
    a = a + c * pi(14u + u32(d));
    o = o + c * pi(22u + u32(d));
  }}
  let len = p(1u);
  var acc: {acc} = {zero};
  for (var j = 0u; j < len; j = j + 1u) {{
    let k = select(j, len - 1u - j, p(5u) != 0u);
    acc = acc + {load};
    b2[u32(o + i32(k) * pi(30u))] = {WGSL.store(dtype, "acc")};
  }}
}}
"""

