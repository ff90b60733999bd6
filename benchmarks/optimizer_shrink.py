"""How much the PTIR optimizer shrinks a 12-layer transformer forward program, and what it hoists.

The program is recorded directly with the `Builder`, the way a naive tracer records it: every
scalar is a fresh constant broadcast to the operand's shape, float16 weights are converted at
each use, torch-layout weights are transposed at each use (and transposed back and forth where
a ``.T.T`` slips in), activations are re-converted to their own dtype, and the causal mask is
rebuilt per layer. Run::

    python benchmarks/optimizer_shrink.py [--layers 12] [--check]

It prints instruction counts before/after, per-pass statistics, what hoisting moved into the
prelude, and (with ``--check``) compares results on the reference interpreter, including a
repeated call served by `HoistCache` and a recompute after one SGD step on the weights.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, bool_, float16, float32, int32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function, Role
from omnitensor.ir.types import TensorType, Value
from omnitensor.optimizer import HoistCache, PassContext, optimize

Array = np.ndarray[Any, Any]


class NaiveTracer:
    """Records numpy-style math into PTIR with the redundancy a simple tracer produces."""

    def __init__(self, b: Builder) -> None:
        self.b = b

    def shape(self, x: Value) -> tuple[int, ...]:
        """Shape of `x`."""
        assert isinstance(x.type, TensorType)
        return x.type.shape

    def dtype(self, x: Value) -> DType:
        """Dtype of `x`."""
        assert isinstance(x.type, TensorType)
        return x.type.dtype

    def scalar(self, value: float, like: Value) -> Value:
        """A fresh constant broadcast to `like`'s shape (a tracer does this per literal)."""
        c = self.b.constant(np.asarray(value, dtype=self.dtype(like).np))
        return self.b.emit("broadcast_in_dim", c, shape=self.shape(like), dims=())

    def as_f32(self, x: Value) -> Value:
        """`x` converted to float32 (recorded even when it already is)."""
        return self.b.emit("convert", x, dtype=float32)  # even when x already is float32

    def expand(self, x: Value, shape: tuple[int, ...], axes: tuple[int, ...]) -> Value:
        """Broadcast `x` (whose dims are `axes` of `shape`) to `shape`."""
        return self.b.emit("broadcast_in_dim", x, shape=shape, dims=axes)

    def binary(self, op: str, x: Value, y: Value | float) -> Value:
        """``op(x, y)``, broadcasting a Python float `y`."""
        rhs = self.scalar(y, x) if isinstance(y, float) else y
        return self.b.emit(op, x, rhs)

    def linear(self, x: Value, w16: Value) -> Value:
        """X @ w.T with a torch-layout (out, in) float16 weight, converted at every use."""
        w = self.as_f32(w16)  # (out, in)
        wt = self.b.emit("transpose", w, perm=(1, 0))  # (in, out)
        wt = self.b.emit("transpose", self.b.emit("transpose", wt, perm=(1, 0)), perm=(1, 0))
        return self.b.emit("dot_general", x, wt, contracting=((1,), (0,)))  # (T, out)

    def layer_norm(self, x: Value, gamma: Value, beta: Value, eps: float = 1e-5) -> Value:
        """Layer norm over the last axis of (T, C) `x`."""
        t, c = self.shape(x)
        mean = self.binary("div", self.b.emit("reduce_sum", x, axes=(1,)),
                           float(c))  # (T,)
        xc = self.b.emit("sub", x, self.expand(mean, (t, c), (0,)))  # (T, C)
        var = self.binary("div", self.b.emit("reduce_sum", self.b.emit("mul", xc, xc),
                                             axes=(1,)), float(c))  # (T,)
        inv = self.b.emit("rsqrt", self.binary("add", var, eps))  # (T,)
        y = self.b.emit("mul", xc, self.expand(inv, (t, c), (0,)))
        g = self.expand(self.as_f32(gamma), (t, c), (1,))
        bias = self.expand(self.as_f32(beta), (t, c), (1,))
        return self.b.emit("add", self.b.emit("mul", y, g), bias)

    def softmax(self, x: Value) -> Value:
        """Softmax over the last axis."""
        shape = self.shape(x)
        last = len(shape) - 1
        keep = tuple(range(last))
        m = self.b.emit("reduce_max", x, axes=(last,))
        e = self.b.emit("exp", self.b.emit("sub", x, self.expand(m, shape, keep)))
        s = self.b.emit("reduce_sum", e, axes=(last,))
        return self.b.emit("div", e, self.expand(s, shape, keep))

    def gelu(self, x: Value) -> Value:
        """GELU, tanh approximation."""
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = self.b.emit("mul", self.b.emit("mul", x, x), x)
        inner = self.binary("mul", self.b.emit("add", x, self.binary("mul", cube, 0.044715)),
                            float(np.sqrt(2 / np.pi)))
        t = self.binary("add", self.b.emit("tanh", inner), 1.0)
        return self.binary("mul", self.b.emit("mul", x, t), 0.5)

    def causal_mask(self, scores: Value) -> Value:
        """-inf above the diagonal of (H, T, T) scores (rebuilt per layer, as traced)."""
        h, t, _ = self.shape(scores)
        row = self.b.emit("iota", shape=(t, t), dimension=0, dtype=int32)
        col = self.b.emit("iota", shape=(t, t), dimension=1, dtype=int32)
        allowed = self.b.emit("le", col, row)  # (T, T) bool
        allowed = self.expand(allowed, (h, t, t), (1, 2))
        neg_inf = self.scalar(-np.inf, scores)
        return self.b.emit("select", allowed, scores, neg_inf)


def build_transformer(layers: int = 12, t: int = 16, c: int = 64, heads: int = 4,
                      ff: int = 256) -> Function:
    """A decoder-only transformer forward over (T, C) activations; weights are parameters."""
    b = Builder("transformer")
    tr = NaiveTracer(b)
    d = c // heads
    x = b.input(TensorType((t, c), float32), Role.DATA, "x")
    h = tr.as_f32(x)
    for n in range(layers):

        def param(name: str, shape: tuple[int, ...], dtype: DType = float16,
                  n: int = n) -> Value:
            return b.input(TensorType(shape, dtype), Role.PARAMETER, f"blk.{n}.{name}")

        ln1 = tr.layer_norm(h, param("ln1.g", (c,)), param("ln1.b", (c,)))
        q, k, v = (tr.linear(ln1, param(f"attn.{p}", (c, c))) for p in "qkv")

        def heads_of(z: Value) -> Value:
            z = b.emit("reshape", z, shape=(t, heads, d))  # (T, H, D)
            return b.emit("transpose", z, perm=(1, 0, 2))  # (H, T, D)

        qh, kh, vh = heads_of(q), heads_of(k), heads_of(v)
        scores = b.emit("dot_general", qh, kh, contracting=((2,), (2,)),
                        batch=((0,), (0,)))  # (H, T, T)
        scores = tr.binary("mul", scores, float(1 / np.sqrt(d)))
        probs = tr.softmax(tr.causal_mask(scores))
        ctx = b.emit("dot_general", probs, vh, contracting=((2,), (1,)),
                     batch=((0,), (0,)))  # (H, T, D)
        ctx = b.emit("reshape", b.emit("transpose", ctx, perm=(1, 0, 2)), shape=(t, c))  # (T, C)
        h = b.emit("add", h, tr.linear(ctx, param("attn.o", (c, c))))
        ln2 = tr.layer_norm(h, param("ln2.g", (c,)), param("ln2.b", (c,)))
        up = tr.gelu(tr.linear(ln2, param("mlp.up", (ff, c))))
        h = b.emit("add", h, tr.as_f32(tr.linear(up, param("mlp.down", (c, ff)))))
    return b.build([h])


def random_inputs(fn: Function, seed: int = 0) -> list[Array]:
    """Inputs of `fn`'s types: activations N(0, 1), weights N(0, 0.05), norms around 1."""
    rng = np.random.default_rng(seed)
    out = []
    for inp in fn.inputs:
        assert isinstance(inp.value.type, TensorType)
        shape, dtype = inp.value.type.shape, inp.value.type.dtype
        if dtype == bool_:
            out.append(rng.random(shape) < 0.5)
            continue
        scale = 1.0 if inp.role is Role.DATA else 0.05
        base = 1.0 if inp.name.endswith(".g") else 0.0
        out.append((base + scale * rng.standard_normal(shape)).astype(dtype.np))
    return out


def _histogram(fn: Function) -> str:
    counts = Counter(i.op for i in fn.body)
    return ", ".join(f"{op} {n}" for op, n in counts.most_common())


def main() -> None:
    """Build, optimize and report (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--check", action="store_true", help="compare results on the reference")
    args = parser.parse_args()

    fn = build_transformer(args.layers)
    start = time.perf_counter()
    main_fn, stats = optimize(fn, PassContext(hoist=True))
    seconds = time.perf_counter() - start
    before, after = len(fn.body), len(main_fn.body)
    prelude = stats.prelude
    print(f"{args.layers}-layer transformer forward: {before} instructions")
    print(f"after optimize: main {after} instructions "
          f"({100 * (before - after) / before:.1f}% fewer per call), "
          f"prelude {0 if prelude is None else len(prelude.body)} instructions, "
          f"{seconds * 1e3:.0f} ms")
    print(f"  iterations: pre {stats.pre_iterations}, post {stats.post_iterations}")
    for name, s in stats.passes.items():
        print(f"  pass {name:<13} runs {s.runs:>2}  rewrites {s.rewrites:>5}  "
              f"erased {s.erased:>5}  {s.time_s * 1e3:8.1f} ms")
    top = sorted(stats.pattern_rewrites.items(), key=lambda kv: -kv[1])
    print("  rewrites: " + ", ".join(f"{k} {v}" for k, v in top))
    print(f"  before: {_histogram(fn)}")
    print(f"  main:   {_histogram(main_fn)}")
    if prelude is not None:
        print(f"hoisted to the prelude ({stats.hoisted_instructions} instructions, "
              f"{len(prelude.outputs)} values, {len(prelude.inputs)} parameters): "
              f"{_histogram(prelude)}")
    if args.check:
        _check(fn, main_fn, stats.prelude, stats.prelude_inputs)


def _check(fn: Function, main_fn: Function, prelude: Function | None,
           prelude_inputs: tuple[int, ...]) -> None:
    inputs = random_inputs(fn)
    cache: HoistCache[list[Array]] = HoistCache()
    versions = [0] * len(fn.inputs)

    def call(args: list[Array]) -> list[Array]:
        if prelude is None:
            return evaluate(main_fn, args)
        hoisted = cache.get_or_compute(
            fn.signature(), tuple(versions[i] for i in prelude_inputs),
            lambda: evaluate(prelude, [args[i] for i in prelude_inputs]))
        return evaluate(main_fn, [*args, *hoisted])

    def report(what: str, expected: list[Array], actual: list[Array]) -> None:
        err = max(float(np.max(np.abs(e - a))) for e, a in zip(expected, actual, strict=True))
        print(f"{what}: max |optimized - unoptimized| = {err:.3g}")

    report("call 1", evaluate(fn, inputs), call(inputs))
    report("call 2", evaluate(fn, inputs), call(inputs))
    # one SGD step on every weight: new buffers, new versions -> the prelude runs again
    rng = np.random.default_rng(1)
    stepped = list(inputs)
    for k, inp in enumerate(fn.inputs):
        if inp.role is Role.PARAMETER:
            grad = np.asarray(rng.standard_normal(inputs[k].shape), dtype=inputs[k].dtype)
            stepped[k] = np.asarray(inputs[k] - 0.01 * grad).astype(inputs[k].dtype)
            versions[k] += 1
    report("after SGD step", evaluate(fn, stepped), call(stepped))
    print(f"hoist cache: hits {cache.hits}, misses {cache.misses}, "
          f"recomputes {cache.recomputes}")


if __name__ == "__main__":
    main()
