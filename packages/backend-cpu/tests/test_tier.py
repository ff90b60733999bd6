"""Small kernel steps run the reference kernels (no numba); larger ones compile."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu import codegen
from omnitensor_backend_cpu.backend import CpuBackend


def _gelu_like(n: int) -> Function:
    b = Builder()
    x = b.input(TensorType((n,), float32))
    half = b.emit("broadcast_in_dim", b.constant(0.5, "float32"), shape=(n,), dims=())
    y = b.emit("mul", b.emit("mul", x, half), b.emit("tanh", x))
    return b.build([b.emit("add", y, x)])


@pytest.mark.parametrize("size", [1000, 5000])
def test_small_groups_run_numpy_larger_ones_compile(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    monkeypatch.setenv(codegen.MIN_ELEMENTS_ENV, "4096")
    loads: list[object] = []
    original = codegen.kernel_for
    monkeypatch.setattr(codegen, "kernel_for",
                        lambda g, *flags: loads.append(g) or original(g, *flags))
    fn = _gelu_like(size)
    exe = backend.compile(fn)
    assert exe.plan.kinds == (["ref"] if size < 4096 else ["fused"])  # labels say what runs
    x = np.linspace(-4, 4, size, dtype=np.float32)
    for _ in range(2):
        (got,) = backend.run(exe, [x])
        np.testing.assert_allclose(got, evaluate(fn, [x])[0], rtol=1e-6, atol=1e-7)
    assert len(loads) == (0 if size < 4096 else 1)


def test_a_small_program_never_imports_numba() -> None:
    import subprocess
    import sys

    script = (
        "import sys, numpy as np, omnitensor as ot\n"
        "with ot.use_backend('cpu'):\n"
        "    x = ot.from_numpy(np.ones((8, 64), np.float32))\n"
        "    y = ot.functional.softmax(x * 2 + 1, axis=-1).tanh()\n"
        "    F = ot.functional\n"  # activations too: their lowering once imported numba
        "    (F.gelu(y) + F.gelu(y, approximate='tanh') + F.silu(y)).numpy()\n"
        "print('numba' in sys.modules)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != codegen.MIN_ELEMENTS_ENV}
    out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                         capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def _composites() -> Function:
    b = Builder()
    x = b.input(TensorType((2, 3, 16), float32))
    w = b.input(TensorType((16,), float32))
    cos = b.input(TensorType((3, 8), float32))
    sin = b.input(TensorType((3, 8), float32))
    y = b.emit("rms_norm", x, w, axes=(2,), eps=1e-6)
    y = b.emit("layer_norm", y, w, w, axes=(2,), eps=1e-5)
    y = b.emit("rotary_embedding", y, cos, sin, interleaved=False)
    q = b.emit("reshape", y, shape=(2, 1, 3, 16))
    y = b.emit("scaled_dot_product_attention", q, q, q, scale=0.25, is_causal=True)
    return b.build([b.emit("softmax", y, axes=(3,)), b.emit("gelu", y, approximate="tanh")])


def test_small_composites_run_their_decompositions_inlined(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(codegen.MIN_ELEMENTS_ENV, "1000000")
    fn = _composites()
    exe = backend.compile(fn)
    assert set(exe.plan.kinds) == {"ref"}  # every composite below the threshold: numpy
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=(2, 3, 16)).astype(np.float32),
          rng.normal(size=16).astype(np.float32),
          *np.split(rng.normal(size=(3, 16)).astype(np.float32), 2, axis=1)]
    xs = [np.ascontiguousarray(a) for a in xs]
    for got, want in zip(backend.run(exe, xs), evaluate(fn, xs), strict=True):
        np.testing.assert_array_equal(got, want)  # the same kernels in the same order


def test_a_large_programs_small_composites_run_kernels(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    # A decode step: a (1, 64) rms_norm next to a weight of LARGE_PROGRAM elements.
    from omnitensor_backend_cpu.plan import LARGE_PROGRAM

    monkeypatch.delenv(codegen.MIN_ELEMENTS_ENV, raising=False)  # the default threshold
    for rows, kind in ((LARGE_PROGRAM // 64, "rows"), (8, "ref")):
        b = Builder()
        x = b.input(TensorType((1, 64), float32))
        w = b.input(TensorType((rows, 64), float32))
        y = b.emit("rms_norm", x, axes=(1,), eps=1e-6)
        fn = b.build([b.emit("dot_general", y, w, contracting=((1,), (1,)))])
        exe = backend.compile(fn)
        assert exe.plan.kinds[0] == kind, exe.plan.labels
        xs = [np.ones((1, 64), np.float32), np.ones((rows, 64), np.float32)]
        np.testing.assert_allclose(backend.run(exe, xs)[0], evaluate(fn, xs)[0], rtol=1e-5)


def test_a_program_with_a_compiled_group_compiles_its_small_ones_too(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    # a training step: its (128,) bias updates beside (512, 128) weight updates
    monkeypatch.setenv(codegen.MIN_ELEMENTS_ENV, "4096")
    b = Builder()
    outs = []
    for n in (5000, 100):
        x = b.input(TensorType((n,), float32))
        half = b.emit("broadcast_in_dim", b.constant(0.5, "float32"), shape=(n,), dims=())
        outs.append(b.emit("add", b.emit("mul", b.emit("mul", x, half), b.emit("tanh", x)), x))
    fn = b.build(outs)
    exe = backend.compile(fn)
    # (both compiled, and of one structure: one batched call, see test_batched.py)
    assert exe.plan.kinds == ["fused"] and exe.plan.labels[0].startswith("fused:2 x ")
    xs = [np.linspace(-4, 4, n, dtype=np.float32) for n in (5000, 100)]
    for got, want in zip(backend.run(exe, xs), evaluate(fn, xs), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    # alone, the small one stays on numpy
    assert backend.compile(_gelu_like(100)).plan.kinds == ["ref"]


def test_the_tier_takes_a_float32_erf_within_two_ulp() -> None:
    """The reference erf calls math.erf per element; the tier's numpy form (mathlib's) is
    within the compiled kernels' 2 ulp of it, special values included."""
    import math

    from omnitensor_backend_cpu import tier

    rng = np.random.default_rng(11)
    x = np.concatenate([rng.normal(scale=3.0, size=200_000), np.linspace(-10, 10, 20_001),
                        [0.0, -0.0, 0.927734375, -0.927734375, 9.0, 1e-30, -1e-38, 3.4e38,
                         np.inf, -np.inf, np.nan]]).astype(np.float32)
    got = tier._erf32(x)
    want = np.array([math.erf(v) for v in x.astype(np.float64)]).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    ulps = np.abs(got[finite].view(np.int32).astype(np.int64)
                  - want[finite].view(np.int32).astype(np.int64))
    assert ulps.max() <= 2
    assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


def test_a_small_program_runs_its_float32_erf_on_the_numpy_form(
        backend: CpuBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor_backend_cpu import tier

    monkeypatch.delenv(codegen.MIN_ELEMENTS_ENV, raising=False)  # the default bound
    calls: list[int] = []
    fast = tier._erf32
    monkeypatch.setitem(tier._FLOAT32_KERNELS, "erf",
                        lambda x: calls.append(x.size) or fast(x))
    b = Builder()
    x = b.input(TensorType((300, 64), float32))
    fn = b.build([b.emit("gelu", x, approximate="none")])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["ref"]  # (300, 64): under the default tier bound
    xs = [np.linspace(-5, 5, 300 * 64, dtype=np.float32).reshape(300, 64)]
    (got,) = backend.run(exe, xs)
    # (in the far negative tail 1 + erf cancels: erf's 2 ulp there are ~1.2e-7 absolute)
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=2e-6, atol=4e-7)
    assert calls == [300 * 64]
