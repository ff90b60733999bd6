"""Row kernels: softmax, layer norm and RMS norm composites.

The functionals emit composites the lowering table sends to row kernels, so the programs traced
from `F.softmax`, `F.layer_norm` and `F.rms_norm` must each run as one kernel and agree with a
float64 numpy computation; the core's raise pass finds hand-built decompositions (not the
backend), and a decomposition whose intermediate escapes stays unfused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import functional as F
from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType
from omnitensor.optimizer.pipeline import optimize_for_backend

Array = np.ndarray[Any, Any]
C = 70  # more than one element per thread of the 64-thread workgroup


def _softmax(x: Array, w: Array, b: Array) -> Array:
    e = np.exp(x - x.max(-1, keepdims=True))
    return np.asarray(e / e.sum(-1, keepdims=True))


def _layer_norm(x: Array, w: Array, b: Array) -> Array:
    c = x - x.mean(-1, keepdims=True)
    return np.asarray(c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b)


def _rms_norm(x: Array, w: Array, b: Array) -> Array:
    return np.asarray(x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w)


CASES: dict[str, tuple[Callable[..., Any], Callable[[Array, Array, Array], Array], str]] = {
    "softmax": (lambda x, w, b: F.softmax(x, -1), _softmax, "softmax"),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, C, w, b), _layer_norm, "layer_norm"),
    "layer_norm_plain": (lambda x, w, b: F.layer_norm(x, C),
                         lambda x, w, b: _layer_norm(x, np.ones_like(w), np.zeros_like(b)),
                         "layer_norm"),
    "rms_norm": (lambda x, w, b: F.rms_norm(x, C, w), _rms_norm, "rms_norm"),
    "strided_softmax": (lambda x, w, b: F.softmax(x[:, ::2], -1),
                        lambda x, w, b: _softmax(x[:, ::2], w, b), "softmax"),
}


def _spy(backend: Any) -> list[Any]:
    seen: list[Any] = []
    original = backend.compile

    def spy(function: Any) -> Any:
        exe = original(function)
        seen.append(exe)
        return exe

    backend.compile = spy
    return seen


@pytest.mark.parametrize("name", sorted(CASES))
def test_functional_runs_as_one_kernel(backend: Any, name: str) -> None:
    fn, reference, kind = CASES[name]
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5, C)) * 3).astype(np.float32)
    w, b = (rng.standard_normal(C).astype(np.float32) for _ in range(2))
    seen = _spy(backend)
    try:
        out = ot.compile(fn)(*[ot.from_numpy(a).to(backend) for a in (x, w, b)]).numpy()
    finally:
        del backend.compile
    assert [step.kind for step in seen[-1].lowered.steps] == [kind]
    want = reference(*(a.astype(np.float64) for a in (x, w, b)))
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)


def test_escaping_intermediate_is_not_fused(backend: Any) -> None:  # (the raise pass's rule too)
    b = Builder("softmax_and_exp")
    x = b.input(TensorType((4, 8), float32))
    m = b.emit("reshape", b.emit("reduce_max", x, axes=(1,)), shape=(4, 1))
    e = b.emit("exp", b.emit("sub", x, b.emit("broadcast_in_dim", m, shape=(4, 8), dims=(0, 1))))
    s = b.emit("reshape", b.emit("reduce_sum", e, axes=(1,)), shape=(4, 1))
    fn = b.build([b.emit("div", e, b.emit("broadcast_in_dim", s, shape=(4, 8), dims=(0, 1))),
                  e])
    exe = backend.compile(fn)
    assert "softmax" not in [step.kind for step in exe.lowered.steps]
    xs = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    got, exp = (backend.download(o) for o in backend.run(exe, [backend.upload(xs)]))
    np.testing.assert_allclose(got, _softmax(xs, xs, xs), rtol=1e-6)
    np.testing.assert_allclose(exp, np.exp(xs - xs.max(-1, keepdims=True)), rtol=1e-6)


def test_softmax_row_edges(backend: Any) -> None:
    x = np.array([[0.0, -np.inf, 1.0], [np.nan, 0.0, 1.0], [-np.inf] * 3, [1e30, 1e30, 0.0]],
                 np.float32)
    out = ot.compile(lambda t: F.softmax(t, -1))(ot.from_numpy(x).to(backend)).numpy()
    with np.errstate(invalid="ignore"):
        want = _softmax(x.astype(np.float64), x, x)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def test_hand_built_layer_norm_without_keepdims_fuses(backend: Any) -> None:
    # The shape graph builders write: (rows,) statistics scaled by 1/n, broadcast on dims (0,).
    b = Builder("ln")
    x = b.input(TensorType((6, 40), float32))

    def scalar(v: float, shape: tuple[int, ...]) -> Any:
        return b.emit("broadcast_in_dim", b.constant(v, float32), shape=shape, dims=())

    def keep(v: Any) -> Any:
        return b.emit("broadcast_in_dim", v, shape=(6, 40), dims=(0,))

    mean = b.emit("mul", b.emit("reduce_sum", x, axes=(1,)), scalar(1 / 40, (6,)))
    c = b.emit("sub", x, keep(mean))
    var = b.emit("mul", b.emit("reduce_sum", b.emit("mul", c, c), axes=(1,)), scalar(1 / 40, (6,)))
    inv = b.emit("rsqrt", b.emit("add", var, scalar(1e-5, (6,))))
    fn = optimize_for_backend(b.build([b.emit("mul", c, keep(inv))]), backend)
    exe = backend.compile(fn)
    if "layer_norm" not in [inst.op for inst in fn.body]:
        pytest.skip("the optimizer raises no layer_norm composite from this form yet")
    assert [step.kind for step in exe.lowered.steps] == ["layer_norm"]
    xs = np.random.default_rng(2).standard_normal((6, 40)).astype(np.float32)
    got = backend.download(backend.run(exe, [backend.upload(xs)])[0])
    w = np.ones(40)
    np.testing.assert_allclose(got, _layer_norm(xs.astype(np.float64), w, 0 * w), rtol=2e-5,
                               atol=2e-6)


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "layer_norm", "rms_norm"])
def test_row_composite_lowering(backend: Any, kind: str) -> None:
    from omnitensor.ir.interpret import evaluate

    b = Builder("rows")
    x = b.input(TensorType((3, 2, 33), float32))
    params = [b.input(TensorType((2, 33), float32)) for _ in range(2 if kind == "layer_norm"
                                                                    else kind == "rms_norm")]
    if kind.endswith("softmax"):  # one axis, x transposed (strided rows)
        x_t = b.emit("transpose", x, perm=(1, 0, 2))
        fn = b.build([b.emit(kind, x_t, axes=(2,))])
    else:  # norms over both trailing axes
        fn = b.build([b.emit(kind, x, *params, axes=(1, 2), eps=1e-5)])
    exe = backend.compile(fn)
    assert kind in [step.kind for step in exe.lowered.steps]
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=s).astype(np.float32) for s in ((3, 2, 33), *[(2, 33)] * len(params))]
    got = backend.download(backend.run(exe, [backend.upload(a) for a in xs])[0])
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=2e-5, atol=2e-5)
