"""CPU kernel figures of the speed table: the cpu backend against numpy (and torch if present).

Each workload is built once as PTIR (``omnitensor.ir.Builder``), compiled by the ``cpu`` backend
and run through ``backend.run``; the competitors compute the same thing. All systems are timed
interleaved, round by round, in this one process, and medians and ratios are printed (the
ratios are what counts on a shared machine).

    python benchmarks/cpu_kernels.py [--rounds 15] [--only gelu,softmax,rms_norm,layer_norm,matmul]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from omnitensor.backend import get_backend
from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType

try:  # optional competitor
    import torch
except ImportError:  # pragma: no cover
    torch = None

Array = np.ndarray[Any, Any]


def _scalar(b: Builder, value: float, shape: tuple[int, ...]) -> Any:
    return b.emit("broadcast_in_dim", b.constant(value, "float32"), shape=shape, dims=())


def gelu_tanh(n: int) -> Function:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over n float32."""
    b = Builder("gelu_tanh")
    x = b.input(TensorType((n,), float32))
    s = (n,)
    x3 = b.emit("mul", b.emit("mul", x, x), x)
    inner = b.emit("add", x, b.emit("mul", _scalar(b, 0.044715, s), x3))
    t = b.emit("tanh", b.emit("mul", _scalar(b, 0.7978845608028654, s), inner))
    y = b.emit("mul", b.emit("mul", _scalar(b, 0.5, s), x), b.emit("add", _scalar(b, 1.0, s), t))
    return b.build([y])


def softmax_rows(rows: int, cols: int) -> Function:
    """Row softmax as the functional decomposes it: max, sub, exp, sum, div."""
    b = Builder("softmax")
    x = b.input(TensorType((rows, cols), float32))
    m = b.emit("reduce_max", x, axes=(1,))
    e = b.emit("exp", b.emit("sub", x, b.emit("broadcast_in_dim", m, shape=(rows, cols),
                                                dims=(0,))))
    s = b.emit("reduce_sum", e, axes=(1,))
    y = b.emit("div", e, b.emit("broadcast_in_dim", s, shape=(rows, cols), dims=(0,)))
    return b.build([y])


def rms_norm_rows(rows: int, cols: int) -> Function:
    """RMS norm with a weight, as the functional decomposes it (x * rsqrt(mean(x^2) + eps) * w)."""
    b = Builder("rms_norm")
    x = b.input(TensorType((rows, cols), float32))
    w = b.input(TensorType((cols,), float32))
    shape, keep = (rows, cols), (rows, 1)
    s = b.emit("reshape", b.emit("reduce_sum", b.emit("mul", x, x), axes=(1,)), shape=keep)
    mean = b.emit("div", s, _scalar(b, float(cols), keep))
    r = b.emit("rsqrt", b.emit("add", mean, _scalar(b, 1e-6, keep)))
    y = b.emit("mul", x, b.emit("broadcast_in_dim", r, shape=shape, dims=(0, 1)))
    return b.build([b.emit("mul", y, b.emit("broadcast_in_dim", w, shape=shape, dims=(1,)))])


def layer_norm_rows(rows: int, cols: int) -> Function:
    """Layer norm with weight and bias, as the functional decomposes it."""
    b = Builder("layer_norm")
    x = b.input(TensorType((rows, cols), float32))
    w = b.input(TensorType((cols,), float32))
    bias = b.input(TensorType((cols,), float32))
    shape, keep = (rows, cols), (rows, 1)

    def mean(v: Any) -> Any:
        s = b.emit("reshape", b.emit("reduce_sum", v, axes=(1,)), shape=keep)
        return b.emit("broadcast_in_dim", b.emit("div", s, _scalar(b, float(cols), keep)),
                      shape=shape, dims=(0, 1))

    c = b.emit("sub", x, mean(x))
    var = mean(b.emit("mul", c, c))
    y = b.emit("mul", c, b.emit("rsqrt", b.emit("add", var, _scalar(b, 1e-5, shape))))
    y = b.emit("mul", y, b.emit("broadcast_in_dim", w, shape=shape, dims=(1,)))
    return b.build([b.emit("add", y, b.emit("broadcast_in_dim", bias, shape=shape, dims=(1,)))])


def matmul(n: int) -> Function:
    """An n x n float32 matrix product."""
    b = Builder("matmul")
    lhs = b.input(TensorType((n, n), float32))
    rhs = b.input(TensorType((n, n), float32))
    return b.build([b.emit("dot_general", lhs, rhs, contracting=((1,), (0,)))])


def _numpy_gelu(x: Array) -> Array:
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def _numpy_softmax(x: Array) -> Array:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _workloads(only: set[str]) -> list[tuple[str, Function, list[Array], dict[str, Callable[
        ..., Any]]]]:
    rng = np.random.default_rng(0)
    out = []
    if "gelu" in only:
        x = rng.normal(size=16 * 2**20).astype(np.float32)
        comp: dict[str, Callable[..., Any]] = {"numpy": lambda: _numpy_gelu(x)}
        if torch is not None:
            tx = torch.from_numpy(x)
            comp["torch"] = lambda: torch.nn.functional.gelu(tx, approximate="tanh")
        out.append(("tanh-GELU 16M f32", gelu_tanh(x.size), [x], comp))
    if "softmax" in only:
        x = rng.normal(size=(4096, 4096)).astype(np.float32)
        comp = {"numpy": lambda: _numpy_softmax(x)}
        if torch is not None:
            tx = torch.from_numpy(x)
            comp["torch"] = lambda: torch.softmax(tx, dim=1)
        out.append(("row softmax 4096x4096 f32", softmax_rows(4096, 4096), [x], comp))
    if "rms_norm" in only:
        x = rng.normal(size=(4096, 4096)).astype(np.float32)
        w = rng.normal(size=4096).astype(np.float32)
        comp = {"numpy": lambda: x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w}
        if torch is not None and hasattr(torch.nn.functional, "rms_norm"):
            tx, tw = torch.from_numpy(x), torch.from_numpy(w)
            comp["torch"] = lambda: torch.nn.functional.rms_norm(tx, (4096,), tw, 1e-6)
        out.append(("RMS norm 4096x4096 f32", rms_norm_rows(4096, 4096), [x, w], comp))
    if "layer_norm" in only:
        x = rng.normal(size=(4096, 4096)).astype(np.float32)
        w, bias = (rng.normal(size=4096).astype(np.float32) for _ in range(2))

        def np_ln() -> Array:
            c = x - x.mean(axis=1, keepdims=True)
            return c / np.sqrt((c * c).mean(axis=1, keepdims=True) + 1e-5) * w + bias

        comp = {"numpy": np_ln}
        if torch is not None:
            tx, tw, tb = (torch.from_numpy(a) for a in (x, w, bias))
            comp["torch"] = lambda: torch.nn.functional.layer_norm(tx, (4096,), tw, tb, 1e-5)
        out.append(("layer norm 4096x4096 f32", layer_norm_rows(4096, 4096), [x, w, bias],
                    comp))
    if "matmul" in only:
        for n in (1024, 2048):
            a, c = (rng.normal(size=(n, n)).astype(np.float32) for _ in range(2))
            comp = {"numpy": lambda a=a, c=c: a @ c}
            if torch is not None:
                ta, tc = torch.from_numpy(a), torch.from_numpy(c)
                comp["torch"] = lambda ta=ta, tc=tc: ta @ tc
            out.append((f"matmul {n}^2 f32", matmul(n), [a, c], comp))
    return out


def main() -> None:
    """Run the selected workloads and print medians and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--only", default="gelu,softmax,rms_norm,layer_norm,matmul")
    args = parser.parse_args()
    backend = get_backend("cpu")
    print(f"backend: {backend!r} {backend.device_info()}; torch: "
          f"{'yes ' + torch.__version__ if torch is not None else 'not installed'}")
    for title, fn, inputs, competitors in _workloads(set(args.only.split(","))):
        start = time.perf_counter()
        exe = backend.compile(fn)
        buffers = [backend.upload(a) for a in inputs]
        got = backend.run(exe, buffers)[0]
        compile_s = time.perf_counter() - start
        want = evaluate(fn, inputs)[0] if "matmul" not in title else competitors["numpy"]()
        err = float(np.max(np.abs(np.asarray(got, np.float64) - want)))
        systems: dict[str, Callable[[], Any]] = {
            "cpu": lambda exe=exe, buffers=buffers: backend.run(exe, buffers)}
        systems.update(competitors)
        times: dict[str, list[float]] = {name: [] for name in systems}
        for fn_ in systems.values():  # warm-up
            fn_()
        for _ in range(args.rounds):
            for name, fn_ in systems.items():
                t0 = time.perf_counter()
                fn_()
                times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(ts) for name, ts in times.items()}
        print(f"\n{title}  (compile+first run {compile_s:.2f} s, max |err| {err:.2e}, "
              f"kinds {exe.plan.kinds})")
        for name, t in med.items():
            ratio = "" if name == "cpu" else f"  cpu is {t / med['cpu']:.2f}x faster"
            print(f"  {name:6s} {t * 1e3:9.2f} ms{ratio}")


if __name__ == "__main__":
    main()
