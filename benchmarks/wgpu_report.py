"""wgpu section of the benchmarks: kernels, submits and pipeline hits for a transformer block.

The block is layer norm, attention and a GELU MLP; its run time is reported too.

Counted, not just timed, so the numbers mean the same on lavapipe and on a real GPU:
``python benchmarks/wgpu_report.py [--tokens 16 --width 64 --runs 5]``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor_conformance.cases.graph import attention, gelu_tanh, layer_norm


def block(tokens: int, width: int, heads: int) -> Function:
    """X + attn(ln(x)) then + mlp(ln(.)): one transformer block on (1, T, C) activations."""
    b = Builder("block")
    d = width // heads

    def t(*shape: int) -> TensorType:
        return TensorType(shape, float32)

    x = b.input(t(tokens, width))
    g1, b1, g2, b2 = (b.input(t(width)) for _ in range(4))
    wq, wk, wv, wo = (b.input(t(width, width)) for _ in range(4))
    w1, w2 = b.input(t(width, 4 * width)), b.input(t(4 * width, width))

    def mm(a: Any, w: Any) -> Any:
        return b.emit("dot_general", a, w, contracting=((1,), (0,)))

    def heads_of(v: Any) -> Any:
        v = b.emit("reshape", v, shape=(1, tokens, heads, d))  # (B, T, H, D)
        return b.emit("transpose", v, perm=(0, 2, 1, 3))  # (B, H, T, D)

    h = layer_norm(b, x, g1, b1)
    att = attention(b, heads_of(mm(h, wq)), heads_of(mm(h, wk)), heads_of(mm(h, wv)))
    att = b.emit("reshape", b.emit("transpose", att, perm=(0, 2, 1, 3)),
                 shape=(tokens, width))  # (B, H, T, D) -> (T, C)
    x = b.emit("add", x, mm(att, wo))
    h = gelu_tanh(b, mm(layer_norm(b, x, g2, b2), w1))
    return b.build([b.emit("add", x, mm(h, w2))])


def main() -> None:
    """Print the counters and timings."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    from omnitensor.backend.registry import get_backend
    from omnitensor.ir.interpret import evaluate

    backend: Any = get_backend("wgpu")
    fn = block(args.tokens, args.width, args.heads)
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal(spec.value.type.shape) * 0.2).astype(np.float32)
              for spec in fn.inputs]
    s0 = backend.stats()
    start = time.perf_counter()
    exe = backend.compile(fn)
    compile_s = time.perf_counter() - start
    s1 = backend.stats()
    backend.compile(block(args.tokens, args.width, args.heads))  # a second, identical program
    s2 = backend.stats()
    buffers = [backend.upload(a) for a in inputs]
    out = backend.download(backend.run(exe, buffers)[0])
    times = []
    s3 = backend.stats()
    for _ in range(args.runs):
        start = time.perf_counter()
        backend.download(backend.run(exe, buffers)[0])
        times.append(time.perf_counter() - start)
    s4 = backend.stats()
    want = evaluate(fn, inputs)[0]
    print(f"device:                  {backend.device_info()}")
    print(f"PTIR instructions:       {len(fn.body)}")
    print(f"kernels per program:     {exe.kernel_count}")
    print(f"submits per run:         {(s4['submits'] - s3['submits']) / args.runs:g}")
    print(f"pipelines built (1st):   {s1['pipeline_misses'] - s0['pipeline_misses']} "
          f"(cache hits {s1['pipeline_hits'] - s0['pipeline_hits']}), {compile_s:.2f} s")
    print(f"pipeline hits (2nd):     {s2['pipeline_hits'] - s1['pipeline_hits']} "
          f"(built {s2['pipeline_misses'] - s1['pipeline_misses']})")
    print(f"pool hits/misses (runs): {s4['pool_hits'] - s3['pool_hits']}/"
          f"{s4['pool_misses'] - s3['pool_misses']}")
    print(f"run (median of {args.runs}):   {1e3 * float(np.median(times)):.2f} ms")
    print(f"max abs err vs ref:      {float(np.max(np.abs(out - want))):.2e}")


if __name__ == "__main__":
    main()
