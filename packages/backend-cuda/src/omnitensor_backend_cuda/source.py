"""CUDA C kernel shells: the thread- and warp-per-row ``__global__`` wrappers and their host harness.

Every kernel is plain C++ whose logic lives in ``OT_HD`` (``__host__ __device__``) functions;
the ``__global__`` shell around them only maps threads to work (and, for warp kernels, combines
lane states with shuffles). The same text therefore compiles to PTX (NVRTC on a GPU, nvcc in the
tests) and, with ``-DOT_HOST_HARNESS``, to a host library whose ``<name>_host`` entry points run
the very same logic functions over the whole grid on the CPU (`nvcc.HostLibrary`). Expressions
and the prelude come from the CUDA C dialect of the core's printer
(`omnitensor.backend.codegen.cuda`). Nothing here knows about buffers or CuPy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from omnitensor.backend.codegen.cuda import CUDA, PRELUDE
from omnitensor.dtypes import DType, bfloat16, float16, float32, float64

__all__ = ["CUDA", "PRELUDE", "WARP", "Arg", "is_float", "thread_kernel", "warp_kernel"]

#: Lanes per warp: warp kernels combine lane states with butterfly shuffles over this many lanes.
WARP: Final = 32

# --- kernel shells -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """One pointer argument of a kernel: its C name and pointer type (``const float*``)."""

    name: str
    ctype: str


def _params(args: Sequence[Arg]) -> str:
    return ", ".join(f"{a.ctype} __restrict__ {a.name}" for a in args)


def _host_casts(args: Sequence[Arg]) -> str:
    return ", ".join(f"({a.ctype})A[{k}]" for k, a in enumerate(args))


def thread_kernel(name: str, args: Sequence[Arg], body: str) -> str:
    """A kernel whose thread t (of n) runs `body` (C statements using t, P and the args).

    Emits ``<name>_body`` (the logic, host and device), the ``__global__`` grid-stride shell
    ``<name>(n, P, args...)`` and, under ``OT_HOST_HARNESS``, ``<name>_host(n, P, A)``.
    """
    names = ", ".join(a.name for a in args)
    return f"""
OT_HD void {name}_body(long long t, const long long* __restrict__ P, {_params(args)}) {{
{body}
}}
extern "C" __global__ void {name}(long long n, const long long* __restrict__ P, {_params(args)}) {{
  for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n;
       t += (long long)gridDim.x * blockDim.x) {name}_body(t, P, {names});
}}
#ifdef OT_HOST_HARNESS
extern "C" void {name}_host(long long n, const long long* P, void** A) {{
  for (long long t = 0; t < n; ++t) {name}_body(t, P, {_host_casts(args)});
}}
#endif
"""


def warp_kernel(name: str, args: Sequence[Arg], state: Sequence[tuple[str, str, int]],
                partial: str, combine: str, finish: str, *, warps: int = 4) -> str:
    """A kernel where one warp handles one row: lane partials, butterfly combine, finish.

    Args:
        name: the kernel name.
        args: its pointer arguments.
        state: the per-lane state struct fields as (C type, name, array length; 1 = scalar).
        partial: C statements of ``<name>_partial(row, lane, P, args..., S& s)`` (init + fold).
        combine: C statements of ``<name>_combine(S& a, const S& b)`` (a = a op b).
        finish: C statements of ``<name>_finish(row, lane, P, args..., const S& s)``.
        warps: warps per block.

    The host harness ``<name>_host(rows, P, A)`` emulates the butterfly exactly (lane l combines
    with lane l ^ offset for offset = 16 .. 1), so it meets the same float results as the GPU.
    """
    names = ", ".join(a.name for a in args)
    fields = "\n".join(f"  {t} {n}{f'[{k}]' if k > 1 else ''};" for t, n, k in state)
    shuffles = []
    for _, n, k in state:
        if k > 1:
            shuffles.append(f"  for (int i = 0; i < {k}; ++i) o.{n}[i] = "
                            f"__shfl_xor_sync(0xffffffffu, s.{n}[i], off);")
        else:
            shuffles.append(f"  o.{n} = __shfl_xor_sync(0xffffffffu, s.{n}, off);")
    shuffle_body = "\n".join(shuffles)
    return f"""
struct {name}_S {{
{fields}
}};
OT_HD void {name}_partial(long long row, int lane, const long long* __restrict__ P, {_params(args)}, {name}_S& s) {{
{partial}
}}
OT_HD void {name}_combine({name}_S& a, const {name}_S& b) {{
{combine}
}}
OT_HD void {name}_finish(long long row, int lane, const long long* __restrict__ P, {_params(args)}, const {name}_S& s) {{
{finish}
}}
__device__ __forceinline__ {name}_S {name}_shfl(const {name}_S& s, int off) {{
  {name}_S o;
{shuffle_body}
  return o;
}}
extern "C" __global__ void __launch_bounds__({warps * WARP}) {name}(long long rows, const long long* __restrict__ P, {_params(args)}) {{
  long long row = blockIdx.x * (long long){warps} + threadIdx.x / {WARP};
  int lane = threadIdx.x % {WARP};
  if (row >= rows) return;  // whole warps leave together: the shuffles below stay converged
  {name}_S s;
  {name}_partial(row, lane, P, {names}, s);
  for (int off = {WARP // 2}; off > 0; off >>= 1) {{ {name}_S o = {name}_shfl(s, off); {name}_combine(s, o); }}
  {name}_finish(row, lane, P, {names}, s);
}}
#ifdef OT_HOST_HARNESS
extern "C" void {name}_host(long long rows, const long long* P, void** A) {{
  static {name}_S s[{WARP}], o[{WARP}];
  for (long long row = 0; row < rows; ++row) {{
    for (int l = 0; l < {WARP}; ++l) {name}_partial(row, l, P, {_host_casts(args)}, s[l]);
    for (int off = {WARP // 2}; off > 0; off >>= 1) {{
      for (int l = 0; l < {WARP}; ++l) o[l] = s[l ^ off];
      for (int l = 0; l < {WARP}; ++l) {name}_combine(s[l], o[l]);
    }}
    for (int l = 0; l < {WARP}; ++l) {name}_finish(row, l, P, {_host_casts(args)}, s[l]);
  }}
}}
#endif
"""


def is_float(dtype: DType) -> bool:
    """float16/bfloat16/float32/float64."""
    return dtype in (float16, bfloat16, float32, float64)
