"""Real programs as backends receive them: functionals and tiny llama/gpt2 prefill + decode.

Programs are recorded from the code users run (`omnitensor.functional`, `omnitensor.models`)
by a backend that runs them on the reference; their launch lists then run on the host against
it. Checks that softmax / layer norm / RMS norm become row kernels, that every op of a decode
step lowers, and that a donated KV cache is updated in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import omnitensor.functional as F
from omnitensor.dtypes import DType, bfloat16, float16, float32, float64
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.program import Function
from omnitensor.models import Checkpoint, ModelBuilder
from omnitensor.optimizer.passes.composites import expand_composites
from omnitensor.tensor.interop import from_numpy
from omnitensor_backend_cuda.backend import supports
from omnitensor_backend_cuda.lower import lower
from omnitensor_backend_cuda.nvcc import compile_checked, run_on_host

Array = np.ndarray[Any, Any]
Recorded = tuple[Function, list[Array], frozenset[int]]
FLOATS = (float32, float16, bfloat16, float64)
TOL = {float32: 2e-5, float64: 1e-12, float16: 4e-3, bfloat16: 3e-2}


def _functionals(recorder_type: Any, dtype: DType) -> dict[str, Recorded]:
    backend = recorder_type("recorder")
    rng = np.random.default_rng(3)

    def put(*shape: int) -> Any:
        return from_numpy((rng.normal(size=shape) * 2).astype(dtype.np)).to(backend)

    x, w, b = put(2, 3, 40), put(40), put(40)
    F.softmax(x).numpy()
    F.rms_norm(x, 40, w, eps=1e-5).numpy()
    F.layer_norm(x, 40, w, b).numpy()
    F.layer_norm(x, 40).numpy()
    names = ["softmax", "rms_norm", "layer_norm", "layer_norm-plain"]
    return {f"{n}-{dtype.name}": (fn, run[1], run[2])
            for n, fn, run in zip(names, backend.compiled, backend.runs, strict=True)}


def _checkpoint(arch: str) -> Checkpoint:
    rng = np.random.default_rng(0)
    vocab, c, ffn, heads = 20, 16, 24, 4
    kv = 2 if arch == "llama" else heads
    d = c // heads

    def mat(*shape: int) -> Array:
        return (rng.standard_normal(shape) * 0.5).astype(np.float32)

    w: dict[str, Any] = {"token_embd.weight": mat(vocab, c), "output_norm.weight": 1 + mat(c) * 0.1,
         "output.weight": mat(vocab, c)}
    if arch == "gpt2":
        w |= {"position_embd.weight": mat(32, c), "output_norm.bias": mat(c)}
    for i in range(2):
        p = f"blk.{i}."
        w |= {p + "attn_norm.weight": 1 + mat(c) * 0.1, p + "ffn_norm.weight": 1 + mat(c) * 0.1,
              p + "attn_output.weight": mat(c, c), p + "ffn_up.weight": mat(ffn, c),
              p + "ffn_down.weight": mat(c, ffn)}
        if arch == "llama":
            w |= {p + "attn_q.weight": mat(c, c), p + "attn_k.weight": mat(kv * d, c),
                  p + "attn_v.weight": mat(kv * d, c), p + "ffn_gate.weight": mat(ffn, c)}
        else:
            w[p + "attn_qkv.weight"] = mat(3 * c, c)
            for name, n in (("attn_norm", c), ("ffn_norm", c), ("attn_qkv", 3 * c),
                            ("attn_output", c), ("ffn_up", ffn), ("ffn_down", c)):
                w[p + name + ".bias"] = mat(n)
    hparams = {"arch": arch, "context_length": 32, "embedding_length": c, "block_count": 2,
               "feed_forward_length": ffn, "head_count": heads, "head_count_kv": kv,
               "vocab_size": vocab, "rope_freq_base": 10000.0, "norm_epsilon": 1e-5}
    return Checkpoint(arch, hparams, w)


def _model(recorder_type: Any, arch: str) -> dict[str, Recorded]:
    backend = recorder_type("recorder")
    model = ModelBuilder().with_spec(arch).with_checkpoint(_checkpoint(arch)).build(backend)
    capacity, t = 16, 3
    cache = model.new_cache(1, capacity)
    mask = np.ones((1, 1, t, capacity), bool)
    _, cache = model.step(np.array([[1, 2, 3]]), np.arange(t)[None], mask, 0, cache,
                          np.array([t - 1]))
    model.step(np.array([[4]]), np.array([[t]]), np.ones((1, 1, 1, capacity), bool), t, cache,
               np.array([0]))
    runs = [r for r in backend.runs if r[0].function.outputs]
    assert len(runs) >= 2
    return {f"{arch}-{kind}": (run[0].function, run[1], run[2])
            for kind, run in zip(("prefill", "decode"), runs[-2:], strict=True)}


@pytest.fixture(scope="module")
def programs(nvcc: str, recorder_type: Any) -> tuple[dict[str, tuple[Recorded, Any]], Any]:
    found: dict[str, Recorded] = {}
    for dtype in FLOATS:
        found |= _functionals(recorder_type, dtype)
    found |= _model(recorder_type, "llama") | _model(recorder_type, "gpt2")
    for fn, _, _ in found.values():  # what cuda does not lower runs as its decomposition
        expand_composites(fn, supports)
    lowered = {name: (rec, lower(rec[0])) for name, rec in found.items()}
    sources = {s.name: s.source for _, low in lowered.values() for s in low.steps
               if s.kind != "matmul"}
    return lowered, compile_checked(sources)


_ROWS = [f"{n}-{d.name}" for d in FLOATS
         for n in ("softmax", "rms_norm", "layer_norm", "layer_norm-plain")]


@pytest.mark.parametrize("name", _ROWS)
def test_row_functionals_become_one_row_kernel(programs: Any, name: str) -> None:
    lowered, library = programs
    (fn, inputs, _), low = lowered[name]
    kind = name.split("-")[0]
    assert [s.name for s in low.steps] == [f"ot_{kind}_{fn.inputs[0].value.type.dtype.name}"]
    want = evaluate(fn, [np.array(x) for x in inputs])
    got = run_on_host(low, [np.array(x) for x in inputs], library=library)
    tol = TOL[fn.inputs[0].value.type.dtype]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol,
                                   atol=tol)


@pytest.mark.parametrize("name", ["llama-prefill", "llama-decode", "gpt2-prefill",
                                  "gpt2-decode"])
def test_model_step_launch_list_matches_reference(programs: Any, name: str) -> None:
    lowered, library = programs
    (fn, inputs, donated), low = lowered[name]
    kinds = {s.name.split("_")[1] if s.kind != "matmul" else "matmul" for s in low.steps}
    norm = "rms" if name.startswith("llama") else "layer"
    assert {"softmax", norm, "gather", "matmul"} <= kinds, kinds
    want = evaluate(fn, [np.array(x) for x in inputs])
    caches = [np.array(x) for x in inputs]
    got = run_on_host(low, caches, donated=donated, library=library)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    # the donated KV caches are updated in place: no copy launch, the inputs hold the result
    assert donated and set(low.aliases.values()) == set(donated)
    steps, _ = low.plan(donated)
    assert len(steps) == len(low.steps) - len(donated)
    for k in donated:
        out = next(i for i, v in enumerate(low.outputs) if low.aliases.get(v.slot) == k)
        np.testing.assert_array_equal(caches[k], got[out])
