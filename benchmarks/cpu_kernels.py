"""CPU kernel figures of the speed table: the cpu backend against torch, same run, interleaved.

Two parts, each with torch (and numpy where it helps) timed round by round in this process:

1. **public API**: ``ot.compile`` of the functionals users call (``F.softmax``,
   ``F.log_softmax``, ``F.layer_norm``, ``F.rms_norm``, ``F.gelu`` both forms, ``F.silu``,
   ``F.cross_entropy``, ``F.scaled_dot_product_attention``), fed ``ot.from_numpy`` tensors.
   A call returns its result computed (the cpu backend runs the plan synchronously); the
   ``.numpy()`` copy of it (a 64 MB copy here) is left out, as torch's figure has no
   conversion either;
2. **hand-built PTIR**: the same math written as bare primitives in the *other* equivalent
   forms (keepdims through broadcast dims, mean as sum times 1/n, x / sqrt instead of
   x * rsqrt, weights at full shape, the tanh-GELU term by term), optimized by the default
   pipeline (the raise pass's path) and compiled by the ``cpu`` backend.

Each line prints the median, the ratio to torch (>1: omnitensor is faster), the largest
difference from torch's result, and the plan's step labels (``kind:op``), which show whether
the work reached a fused kernel (``rows:``/``act:``/``attn:``) or fell back (``ref:``).

    python benchmarks/cpu_kernels.py [--rounds 15] [--only softmax,gelu,...] [--part api,ptir]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from figures import record, threads

import omnitensor as ot
import omnitensor.functional as F
from omnitensor.backend import get_backend
from omnitensor.backend.registry import backend_passes
from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor.optimizer.pipeline import optimize_for_backend

try:  # the competitor
    import torch
    import torch.nn.functional as TF
except ImportError:  # pragma: no cover
    torch = None

Array = np.ndarray[Any, Any]
ROWS = COLS = 4096
FLAT = 16 * 2**20
ATTN = (32, 12, 128, 64)  # batch, heads, tokens, head size (an encoder batch)


def _labels(executable: Any) -> list[str]:
    plan = getattr(executable, "plan", None)
    return list(getattr(plan, "labels", [type(executable).__name__]))


def _api_labels(compiled: Any) -> list[str]:
    """Step labels of the (only) trace of an ``ot.compile``d function."""
    labels: list[str] = []
    for traces in compiled._cache.values():
        for trace in traces:
            labels += _labels(trace.plan.executable)
    return labels


def _short(labels: list[str]) -> str:
    return ", ".join(label.split("(")[0] for label in labels)


# --- part 1: the public API ------------------------------------------------------------------


def api_workloads(rng: np.random.Generator, only: set[str]) -> list[tuple[
        str, str, Callable[..., Any], list[Array], Callable[..., Any] | None]]:
    """(key, title, functional, numpy inputs, torch function) per workload."""
    x = rng.normal(size=(ROWS, COLS)).astype(np.float32)
    w, b = (rng.normal(size=COLS).astype(np.float32) for _ in range(2))
    flat = (rng.normal(size=FLAT) * 2).astype(np.float32)
    out: list[tuple[str, str, Callable[..., Any], list[Array], Callable[..., Any] | None]] = []
    have = torch is not None

    def add(name: str, title: str, fn: Callable[..., Any], inputs: list[Array],
            ref: Callable[..., Any] | None) -> None:
        if name in only:
            key = name + ("_causal" if "causal" in title else "")
            out.append((key, title, fn, inputs, ref if have else None))

    add("softmax", f"F.softmax rows {ROWS}x{COLS}", lambda a: F.softmax(a, axis=-1), [x],
        lambda a: torch.softmax(a, -1))
    add("log_softmax", f"F.log_softmax rows {ROWS}x{COLS}", lambda a: F.log_softmax(a, -1),
        [x], lambda a: torch.log_softmax(a, -1))
    add("layer_norm", f"F.layer_norm {ROWS}x{COLS} (w, b)",
        lambda a, w_, b_: F.layer_norm(a, COLS, w_, b_, 1e-5), [x, w, b],
        lambda a, w_, b_: TF.layer_norm(a, (COLS,), w_, b_, 1e-5))
    add("rms_norm", f"F.rms_norm {ROWS}x{COLS} (w)",
        lambda a, w_: F.rms_norm(a, COLS, w_, 1e-6), [x, w],
        lambda a, w_: TF.rms_norm(a, (COLS,), w_, 1e-6))
    add("gelu", "F.gelu erf 16M", lambda a: F.gelu(a), [flat], lambda a: TF.gelu(a))
    add("gelu_tanh", "F.gelu tanh 16M", lambda a: F.gelu(a, approximate="tanh"), [flat],
        lambda a: TF.gelu(a, approximate="tanh"))
    add("silu", "F.silu 16M", lambda a: F.silu(a), [flat], lambda a: TF.silu(a))
    classes = rng.integers(0, COLS, ROWS).astype(np.int64)
    add("cross_entropy", f"F.cross_entropy {ROWS}x{COLS} (mean)",
        lambda a, t_: F.cross_entropy(a, t_), [x, classes], lambda a, t_: TF.cross_entropy(a, t_))
    if "attention" in only:
        bsz, heads, tokens, size = ATTN
        q, k, v = (rng.normal(size=(bsz, heads, tokens, size)).astype(np.float32)
                   for _ in range(3))
        mask = rng.random((bsz, 1, 1, tokens)) > 0.1
        add("attention", f"F.scaled_dot_product_attention {ATTN} bool mask",
            lambda q_, k_, v_, m_: F.scaled_dot_product_attention(q_, k_, v_, m_),
            [q, k, v, mask],
            lambda q_, k_, v_, m_: TF.scaled_dot_product_attention(q_, k_, v_, m_))
        add("attention", f"F.scaled_dot_product_attention {ATTN} causal",
            lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, is_causal=True),
            [q, k, v],
            lambda q_, k_, v_: TF.scaled_dot_product_attention(q_, k_, v_, is_causal=True))
    return out


# --- part 2: hand-built PTIR in the other equivalent forms -----------------------------------


def _scalar(b: Builder, value: float, shape: tuple[int, ...]) -> Any:
    return b.emit("broadcast_in_dim", b.constant(value, "float32"), shape=shape, dims=())


def softmax_bcast(rows: int, cols: int) -> Function:
    """Softmax with keepdims through broadcast dims: max, sub, exp, sum, div."""
    b = Builder("softmax_bcast")
    x = b.input(TensorType((rows, cols), float32))
    m = b.emit("reduce_max", x, axes=(1,))
    e = b.emit("exp", b.emit("sub", x, b.emit("broadcast_in_dim", m, shape=(rows, cols),
                                                dims=(0,))))
    s = b.emit("reduce_sum", e, axes=(1,))
    y = b.emit("div", e, b.emit("broadcast_in_dim", s, shape=(rows, cols), dims=(0,)))
    return b.build([y])


def rms_norm_sqrt(rows: int, cols: int) -> Function:
    """RMS norm as x / sqrt(sum(x^2) * (1/n) + eps) * w, the weight given at full shape."""
    b = Builder("rms_norm_sqrt")
    x = b.input(TensorType((rows, cols), float32))
    w = b.input(TensorType((rows, cols), float32))
    shape = (rows, cols)
    s = b.emit("reduce_sum", b.emit("mul", x, x), axes=(1,))
    mean = b.emit("mul", s, _scalar(b, 1.0 / cols, (rows,)))
    r = b.emit("sqrt", b.emit("add", mean, _scalar(b, 1e-6, (rows,))))
    y = b.emit("div", x, b.emit("broadcast_in_dim", r, shape=shape, dims=(0,)))
    return b.build([b.emit("mul", y, w)])


def layer_norm_mul(rows: int, cols: int) -> Function:
    """Layer norm with means as sum times 1/n through reshape keepdims, weight and bias (L,)."""
    b = Builder("layer_norm_mul")
    x = b.input(TensorType((rows, cols), float32))
    w = b.input(TensorType((cols,), float32))
    bias = b.input(TensorType((cols,), float32))
    shape, keep = (rows, cols), (rows, 1)

    def mean(v: Any) -> Any:
        s = b.emit("reshape", b.emit("reduce_sum", v, axes=(1,)), shape=keep)
        return b.emit("broadcast_in_dim", b.emit("mul", s, _scalar(b, 1.0 / cols, keep)),
                      shape=shape, dims=(0, 1))

    c = b.emit("sub", x, mean(x))
    var = mean(b.emit("mul", c, c))
    y = b.emit("mul", c, b.emit("rsqrt", b.emit("add", var, _scalar(b, 1e-5, shape))))
    y = b.emit("mul", y, b.emit("broadcast_in_dim", w, shape=shape, dims=(1,)))
    return b.build([b.emit("add", y, b.emit("broadcast_in_dim", bias, shape=shape, dims=(1,)))])


def gelu_tanh_terms(n: int) -> Function:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) written term by term."""
    b = Builder("gelu_tanh_terms")
    x = b.input(TensorType((n,), float32))
    s = (n,)
    x3 = b.emit("mul", b.emit("mul", x, x), x)
    inner = b.emit("add", x, b.emit("mul", _scalar(b, 0.044715, s), x3))
    t = b.emit("tanh", b.emit("mul", _scalar(b, math.sqrt(2 / math.pi), s), inner))
    y = b.emit("mul", b.emit("mul", _scalar(b, 0.5, s), x), b.emit("add", _scalar(b, 1.0, s), t))
    return b.build([y])


def silu_exp(n: int) -> Function:
    """x / (1 + exp(-x))."""
    b = Builder("silu_exp")
    x = b.input(TensorType((n,), float32))
    denom = b.emit("add", _scalar(b, 1.0, (n,)), b.emit("exp", b.emit("neg", x)))
    return b.build([b.emit("div", x, denom)])


def gelu_erf_phi(n: int) -> Function:
    """x * Phi(x) with Phi = 0.5 * (1 + erf(x * 0.70710678))."""
    b = Builder("gelu_erf_phi")
    x = b.input(TensorType((n,), float32))
    erf = b.emit("erf", b.emit("mul", x, _scalar(b, 0.70710678, (n,))))
    phi = b.emit("mul", _scalar(b, 0.5, (n,)), b.emit("add", erf, _scalar(b, 1.0, (n,))))
    return b.build([b.emit("mul", x, phi)])


def log_softmax_bcast(rows: int, cols: int) -> Function:
    """(x - max) - log(sum(exp(x - max))) with keepdims through broadcast dims."""
    b = Builder("log_softmax_bcast")
    x = b.input(TensorType((rows, cols), float32))
    shape = (rows, cols)
    t = b.emit("sub", x, b.emit("broadcast_in_dim", b.emit("reduce_max", x, axes=(1,)),
                                shape=shape, dims=(0,)))
    lse = b.emit("log", b.emit("reduce_sum", b.emit("exp", t), axes=(1,)))
    return b.build([b.emit("sub", t, b.emit("broadcast_in_dim", lse, shape=shape, dims=(0,)))])


def ptir_workloads(rng: np.random.Generator, only: set[str]) -> list[tuple[
        str, str, Function, list[Array], Callable[..., Any] | None]]:
    """(key, title, function, numpy inputs, torch function) per workload."""
    x = rng.normal(size=(ROWS, COLS)).astype(np.float32)
    w, bias = (rng.normal(size=COLS).astype(np.float32) for _ in range(2))
    flat = (rng.normal(size=FLAT) * 2).astype(np.float32)
    full_w = np.ascontiguousarray(np.broadcast_to(w, (ROWS, COLS)))
    have = torch is not None
    out: list[tuple[str, str, Function, list[Array], Callable[..., Any] | None]] = []
    if "softmax" in only:
        out.append(("softmax", "softmax, broadcast-dims keepdims", softmax_bcast(ROWS, COLS), [x],
                    (lambda a: torch.softmax(a, -1)) if have else None))
    if "rms_norm" in only:
        out.append(("rms_norm", "RMS norm, x / sqrt(sum * 1/n + eps) * w[full]",
                    rms_norm_sqrt(ROWS, COLS), [x, full_w],
                    (lambda a, w_: TF.rms_norm(a, (COLS,), w_[0], 1e-6)) if have else None))
    if "layer_norm" in only:
        out.append(("layer_norm", "layer norm, reshape keepdims, sum * 1/n",
                    layer_norm_mul(ROWS, COLS), [x, w, bias],
                    (lambda a, w_, b_: TF.layer_norm(a, (COLS,), w_, b_, 1e-5)) if have else None))
    if "gelu_tanh" in only:
        out.append(("gelu_tanh", "tanh-GELU term by term 16M", gelu_tanh_terms(FLAT), [flat],
                    (lambda a: TF.gelu(a, approximate="tanh")) if have else None))
    if "silu" in only:
        out.append(("silu", "SiLU as x / (1 + exp(-x)) 16M", silu_exp(FLAT), [flat],
                    (lambda a: TF.silu(a)) if have else None))
    if "gelu" in only:
        out.append(("gelu", "erf-GELU as x * Phi(x) 16M", gelu_erf_phi(FLAT), [flat],
                    (lambda a: TF.gelu(a)) if have else None))
    if "log_softmax" in only:
        out.append(("log_softmax", "log-softmax, broadcast-dims keepdims",
                    log_softmax_bcast(ROWS, COLS), [x],
                    (lambda a: torch.log_softmax(a, -1)) if have else None))
    return out


# --- timing ----------------------------------------------------------------------------------


def race(systems: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Median seconds per system, timed interleaved round by round after one warm-up call."""
    for fn in systems.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):
        for name, fn in systems.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def report(title: str, first_s: float, med: dict[str, float], err: float | None,
           labels: list[str], key: str) -> None:
    """One workload's lines (and its figure ``kernel.<key>.x_torch`` for `run.py`)."""
    ours = med["omnitensor"]
    if "torch" in med:
        record(f"kernel.{key}.x_torch", med["torch"] / ours, steps=_short(labels))
    ratio = f"  {med['torch'] / ours:5.2f}x torch" if "torch" in med else ""
    error = "" if err is None else f"  max|diff| vs torch {err:.1e}"
    print(f"\n{title}\n  omnitensor {ours * 1e3:8.2f} ms{ratio}  (first call {first_s:.2f} s)"
          f"{error}")
    for name, t in med.items():
        if name != "omnitensor":
            print(f"  {name:10s} {t * 1e3:8.2f} ms")
    print(f"  steps: {_short(labels)}")


def _diff(ours: Array, theirs: Any) -> float:
    return float(np.max(np.abs(np.asarray(ours, np.float64) - theirs.numpy())))


def run_api(rounds: int, only: set[str]) -> None:
    """Part 1: ``ot.compile`` of the functionals."""
    print("\n== public API: ot.compile(F.<functional>) on cpu ==")
    with ot.use_backend("cpu"):
        for key, title, fn, inputs, ref in api_workloads(np.random.default_rng(0), only):
            compiled = ot.compile(fn)
            tensors = [ot.from_numpy(a) for a in inputs]
            t0 = time.perf_counter()
            result = compiled(*tensors).numpy()
            first = time.perf_counter() - t0
            systems: dict[str, Callable[[], Any]] = {
                "omnitensor": lambda c=compiled, t=tensors: c(*t)}
            err = None
            if ref is not None:
                targs = [torch.from_numpy(a) for a in inputs]
                err = _diff(result, ref(*targs))
                systems["torch"] = lambda r=ref, a=targs: r(*a)
            report(title, first, race(systems, rounds), err, _api_labels(compiled), f"api.{key}")


def run_ptir(rounds: int, only: set[str]) -> None:
    """Part 2: hand-built PTIR through the default pipeline and the cpu backend."""
    print("\n== hand-built PTIR in other equivalent forms (optimizer pipeline, then cpu) ==")
    backend = get_backend("cpu")
    for key, title, fn, inputs, ref in ptir_workloads(np.random.default_rng(0), only):
        t0 = time.perf_counter()
        optimized = optimize_for_backend(fn, backend, passes=backend_passes("cpu"))
        exe = backend.compile(optimized)
        buffers = [backend.upload(a) for a in inputs]
        result = backend.run(exe, buffers)[0]
        first = time.perf_counter() - t0
        systems: dict[str, Callable[[], Any]] = {
            "omnitensor": lambda e=exe, b=buffers: backend.run(e, b)}
        err = None
        if ref is not None:
            targs = [torch.from_numpy(a) for a in inputs]
            err = _diff(result, ref(*targs))
            systems["torch"] = lambda r=ref, a=targs: r(*a)
        report(title, first, race(systems, rounds), err, _labels(exe), f"ptir.{key}")


ALL = "softmax,log_softmax,layer_norm,rms_norm,gelu,gelu_tanh,silu,cross_entropy,attention"


def main() -> None:
    """Run the selected parts and workloads."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", default=ALL)
    parser.add_argument("--part", default="api,ptir")
    args = parser.parse_args()
    only, parts = set(args.only.split(",")), set(args.part.split(","))
    backend = get_backend("cpu")
    if torch is not None:
        torch.set_num_threads(threads())
    print(f"backend cpu {backend.device_info()}; torch "
          f"{torch.__version__ if torch is not None else 'not installed'} "
          f"({torch.get_num_threads() if torch is not None else 0} threads); medians of "
          f"{args.rounds} interleaved rounds; ratio = torch time / omnitensor time")
    if "api" in parts:
        run_api(args.rounds, only)
    if "ptir" in parts:
        run_ptir(args.rounds, only)


if __name__ == "__main__":
    main()
