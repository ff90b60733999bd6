"""Every kernel template compiles to PTX, and its logic runs on the host against the reference.

The host checks compile the very source text the backend hands to CuPy (plus nothing but the
``-DOT_HOST_HARNESS`` define), so what is checked here is what runs on the GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.backend.codegen.rows import ROW_KINDS
from omnitensor.dtypes import ALL, INTEGER, DType, bfloat16, float16, float32, float64
from omnitensor.ir import all_ops, quant_blocks
from omnitensor.ir.opdef import Trait
from omnitensor_backend_cuda import indexing, kernels
from omnitensor_backend_cuda.nvcc import HostLibrary, check_ptx, compile_checked
from omnitensor_backend_cuda.source import CUDA

FLOATS = (float32, float16, bfloat16, float64)


def _all_sources() -> dict[str, str]:
    out: dict[str, str] = {}
    for op in ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin"):
        for dtype in all_ops()[op].dtypes:
            name, src = kernels.reduce_source(op, dtype)
            out[name] = src
    for kind in ROW_KINDS:
        for dtype in FLOATS:
            name, src = kernels.row_source(kind, dtype)
            out[name] = src
    for fmt in kernels.QUANT_BLOCKS:
        for dtype in FLOATS:
            for make in (kernels.qmatmul_source, kernels.dequantize_source):
                name, src = make(fmt, dtype)
                out[name] = src
    for dtype in FLOATS:
        for d in (64, 128):
            name, src = kernels.attention_source(dtype, d)
            out[name] = src
    return out | _indexing_sources()


def _indexing_sources() -> dict[str, str]:
    """Every kernel `indexing` can generate (pure copies come per element size)."""
    made = [indexing.pad_source(size) for size in indexing.BITS]
    for index in INTEGER:
        made += [indexing.gather_source(size, index) for size in indexing.BITS]
        made += [indexing.scatter_add_source(dtype, index) for dtype in
                 all_ops()["scatter_add"].dtypes if dtype not in (float16, bfloat16)]
    for dtype in all_ops()["cumsum"].dtypes:
        made.append(indexing.cumsum_source(dtype))
        made += [indexing.sort_source(dtype, top_k=k) for k in (False, True)]
    for distribution, dtypes in indexing.RNG_DISTRIBUTIONS.items():
        made += [indexing.rng_source(dtype, distribution) for dtype in dtypes]
    return dict(made)


def test_every_fixed_kernel_compiles_to_ptx(nvcc: str) -> None:
    sources = _all_sources()
    assert len(sources) > 200
    check_ptx(sources)  # two concurrent nvcc runs; every text verbatim; every entry present


def test_every_elementwise_template_x_dtype_compiles(nvcc: str) -> None:
    from omnitensor.ir.builder import Builder
    from omnitensor.ir.types import TensorType
    from omnitensor_backend_cuda.lower import lower

    sources: dict[str, str] = {}
    for name, opdef in all_ops().items():
        if not opdef.has(Trait.ELEMENTWISE) or name in ("convert", "bitcast"):
            continue
        for dtype in opdef.dtypes:
            b = Builder()
            xs = [b.input(TensorType((3,), dtype)) for _ in opdef.operands]
            if name == "select":
                from omnitensor.dtypes import bool_

                xs[0] = b.input(TensorType((3,), bool_))
            fn = b.build([b.emit(name, *xs)])
            for step in lower(fn).steps:
                sources[step.name] = step.source
    for src_t in ALL:
        for dst_t in ALL:
            b = Builder()
            x = b.input(TensorType((3,), src_t))
            fn = b.build([b.emit("convert", x, dtype=dst_t)])
            for step in lower(fn).steps:
                sources[step.name] = step.source
    check_ptx(sources)
    assert CUDA.expr("add", float16, ["a", "b"], {}, float16) == "ot_rh((a + b))"


@pytest.fixture(scope="module")
def host(nvcc: str) -> HostLibrary:
    """One host library (and PTX) of every kernel the logic tests below run."""
    made = [kernels.row_source(k, float32) for k in ROW_KINDS]
    made.append(kernels.attention_source(float32, 64))
    for fmt in kernels.QUANT_BLOCKS:
        made += [kernels.qmatmul_source(fmt, float32), kernels.dequantize_source(fmt, float32)]
    return compile_checked(dict(made))


@pytest.mark.parametrize("fmt", list(kernels.QUANT_BLOCKS))
def test_qmatmul_and_dequantize_logic_on_host(host: HostLibrary, fmt: str) -> None:
    rng = np.random.default_rng(0)
    w = rng.normal(size=(5, 512)).astype(np.float32)
    q = quant_blocks.quantize(w, fmt)
    x = rng.normal(size=(3, 512)).astype(np.float32)
    qk, qb = kernels.QUANT_BLOCKS[fmt]
    name, _ = kernels.qmatmul_source(fmt, float32)
    dname, _ = kernels.dequantize_source(fmt, float32)
    lib = host
    y = np.zeros((3, 5), np.float32)
    lib.launch(name, 15, [15, 5, 512, qk, qb], [x, q, y])
    deq = quant_blocks.dequantize(q, fmt)
    np.testing.assert_allclose(y, x @ deq.T, rtol=1e-4, atol=1e-4)
    d = np.zeros(5 * 512, np.float32)
    lib.launch(dname, d.size, [qk, qb], [q, d])
    np.testing.assert_array_equal(d.reshape(5, 512), deq)


def test_row_kernels_logic_on_host(host: HostLibrary) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 77)).astype(np.float32)
    w, bias = rng.normal(size=77).astype(np.float32), rng.normal(size=77).astype(np.float32)
    names = {k: kernels.row_source(k, float32) for k in ROW_KINDS}
    lib = host
    eps = np.float64(1e-5).view(np.int64)
    out = {}
    for kind, (name, _) in names.items():
        y = np.zeros_like(x)
        lib.launch(name, 4, [4, 77, int(eps), 1, 1], [x, w, bias, y])
        out[kind] = y
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out["softmax"], e / e.sum(1, keepdims=True), rtol=1e-5)
    shifted = x - x.max(1, keepdims=True)
    np.testing.assert_allclose(out["log_softmax"],
                               shifted - np.log(np.exp(shifted).sum(1, keepdims=True)),
                               rtol=1e-5, atol=1e-6)
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    np.testing.assert_allclose(out["layer_norm"], (x - mu) / np.sqrt(var + 1e-5) * w + bias,
                               rtol=1e-4, atol=1e-5)
    rms = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(out["rms_norm"], rms, rtol=1e-4, atol=1e-5)


def test_decode_attention_logic_on_host(host: HostLibrary) -> None:
    rng = np.random.default_rng(2)
    b, hq, hkv, s, d, length = 1, 4, 2, 40, 64, 37
    q = rng.normal(size=(b * hq, d)).astype(np.float32)
    k = rng.normal(size=(b * hkv, s, d)).astype(np.float32)
    v = rng.normal(size=(b * hkv, s, d)).astype(np.float32)
    name, _ = kernels.attention_source(float32, d)
    y = np.zeros_like(q)
    scale = np.float64(1 / np.sqrt(d)).view(np.int64)
    host.launch(name, b * hq, [b * hq, hq, hkv, s, int(scale)],
                            [q, k, v, np.array([length], np.int32), y])
    kv = np.repeat(k[:, :length], hq // hkv, axis=0)
    vv = np.repeat(v[:, :length], hq // hkv, axis=0)
    scores = np.einsum("hd,hsd->hs", q, kv) / np.sqrt(d)
    p = np.exp(scores - scores.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(y, np.einsum("hs,hsd->hd", p, vv), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [float32, float64])
def test_elementwise_composite_templates_on_host(nvcc: str, dtype: DType) -> None:
    import math

    from omnitensor_backend_cuda.source import PRELUDE, Arg, thread_kernel

    forms = {"gelu_erf": ("gelu", {"approximate": "none"}),
             "gelu_tanh": ("gelu", {"approximate": "tanh"}), "silu": ("silu", {}),
             "geglu_tanh": ("geglu", {"approximate": "tanh"}), "swiglu": ("swiglu", {})}
    ct, st = CUDA.compute_type(dtype), CUDA.storage_type(dtype)
    sources = {}
    for name, (op, attrs) in forms.items():
        args = ["v", "u"] if op in ("geglu", "swiglu") else ["v"]
        body = (f"  {ct} v = {CUDA.load(dtype, 'x[t]')};\n  {ct} u = {CUDA.load(dtype, 'z[t]')};\n"
                f"  y[t] = {CUDA.store(dtype, CUDA.expr(op, dtype, args, attrs, dtype))};")
        kernel = f"ot_test_{name}_{dtype.name}"
        sources[kernel] = PRELUDE + thread_kernel(kernel, [Arg("x", f"const {st}*"),
                                                          Arg("z", f"const {st}*"),
                                                          Arg("y", f"{st}*")], body)
    lib = compile_checked(sources)
    x = np.linspace(-6, 6, 101).astype(dtype.np)
    erf = np.vectorize(math.erf)(x.astype(np.float64) / math.sqrt(2))
    k = math.sqrt(2 / math.pi)
    want = {"gelu_erf": 0.5 * x * (1 + erf),
            "gelu_tanh": 0.5 * x * (1 + np.tanh(k * (x + 0.044715 * x ** 3))),
            "silu": x / (1 + np.exp(-x.astype(np.float64)))}
    up = np.linspace(2, -1, x.size).astype(dtype.np)
    want |= {"geglu_tanh": want["gelu_tanh"] * up, "swiglu": want["silu"] * up}
    for name in forms:
        y = np.zeros_like(x)
        lib.launch(f"ot_test_{name}_{dtype.name}", x.size, [0], [x, up, y])
        np.testing.assert_allclose(y, want[name], rtol=1e-5, atol=1e-6)
