"""A model's products of one activation run joined in the plan: the same logits, fewer steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.io.weights import QuantizedArray
from omnitensor.models import Checkpoint, ModelBuilder
from omnitensor_backend_cpu import steps


def _checkpoint(fmt: str) -> Checkpoint:
    rng = np.random.default_rng(0)
    hidden, ffn, layers, heads, kv, vocab = 256, 512, 2, 4, 2, 40  # whole K super-blocks

    def mat(*shape: int) -> Any:
        value = (rng.standard_normal(shape) * 0.3).astype(np.float32)
        return QuantizedArray.quantize(value, fmt) if len(shape) == 2 else value

    weights = {"token_embd.weight": mat(vocab, hidden), "output_norm.weight": np.ones(hidden,
                                                                                    np.float32)}
    head = hidden // heads
    for i in range(layers):
        weights |= {f"blk.{i}.attn_norm.weight": np.ones(hidden, np.float32),
                    f"blk.{i}.ffn_norm.weight": np.ones(hidden, np.float32),
                    f"blk.{i}.attn_q.weight": mat(heads * head, hidden),
                    f"blk.{i}.attn_k.weight": mat(kv * head, hidden),
                    f"blk.{i}.attn_v.weight": mat(kv * head, hidden),
                    f"blk.{i}.attn_q.bias": rng.standard_normal(heads * head).astype(np.float32),
                    f"blk.{i}.attn_k.bias": rng.standard_normal(kv * head).astype(np.float32),
                    f"blk.{i}.attn_v.bias": rng.standard_normal(kv * head).astype(np.float32),
                    f"blk.{i}.attn_output.weight": mat(hidden, heads * head),
                    f"blk.{i}.ffn_gate.weight": mat(ffn, hidden),
                    f"blk.{i}.ffn_up.weight": mat(ffn, hidden),
                    f"blk.{i}.ffn_down.weight": mat(hidden, ffn)}
    hparams = dict(arch="llama", context_length=64, embedding_length=hidden, block_count=layers,
                   feed_forward_length=ffn, head_count=heads, head_count_kv=kv,
                   vocab_size=vocab, rope_freq_base=1e4, norm_epsilon=1e-6)
    return Checkpoint("llama", hparams, weights)


def _run(model: Any, prompt: int) -> list[np.ndarray]:
    """Logits of a `prompt`-token prefill and three decode steps (the cache kept between)."""
    capacity = 64
    cache = model.new_cache(1, capacity)
    mask = np.ones((1, 1, 1, capacity), bool)
    ids = (np.arange(prompt) * 7 % 40)[None]
    with ot.use_backend(model.backend):
        logits, cache = model.step(ids, np.arange(prompt)[None], mask, 0, cache,
                                   np.array([prompt - 1]))
        out = [logits.numpy()]
        for t in range(3):
            at = prompt + t
            logits, cache = model.step(np.array([[int(out[-1][0].argmax())]]),
                                       np.array([[at]]), mask, at, cache, np.array([0]))
            out.append(logits.numpy())
    return out


@pytest.mark.parametrize("fmt", ["q8_0", "q4_k"])
@pytest.mark.parametrize("prompt", [5, 20])  # one-row and few-row integer products
def test_joined_products_give_the_logits_of_products_apart(monkeypatch: Any, fmt: str,
                                                           prompt: int) -> None:
    joined = ModelBuilder().with_spec("llama").with_checkpoint(_checkpoint(fmt)).build("cpu")
    assert "blk.0.attn_q.weight" in joined.weights  # cpu repacks q8_0: not stacked at load
    got = _run(joined, prompt)
    monkeypatch.setattr(steps, "_siblings", lambda inst, function: [])
    apart = ModelBuilder().with_spec("llama").with_checkpoint(_checkpoint(fmt)).build("cpu")
    want = _run(apart, prompt)
    for g, w in zip(got, want, strict=True):
        # the same integer products, the same activation quantization: equal to float32
        # rounding (BLAS row sums may differ in order)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [8, 16])
def test_the_joined_buffer_lives_while_any_product_in_it_is_read(m: int) -> None:
    """v is a view of the joined result: its buffer is not handed on once q is last read."""
    from omnitensor.dtypes import float32
    from omnitensor.ir import quant_blocks
    from omnitensor.ir.builder import Builder
    from omnitensor.ir.interpret import evaluate
    from omnitensor.ir.types import QTensorType, TensorType
    from omnitensor_backend_cpu.backend import CpuBackend

    backend, rng, k = CpuBackend(), np.random.default_rng(4), 256
    rows = (2048, 512, 512)  # big enough for pooled buffers (small results are not pooled)
    b = Builder()
    x = b.input(TensorType((m, k), float32))
    ws = [b.input(QTensorType("q8_0", (n, k))) for n in rows]
    q, kk, v = (b.emit("qmatmul", x, w, format="q8_0") for w in ws)
    a = b.emit("mul", b.emit("mul", q, q), q)  # q's last read (a fused step, its own buffer)
    e = b.input(TensorType((rows[0], sum(rows)), float32))
    # a new buffer of the joined result's size, made while v is still to be read
    big = b.emit("dot_general", a, e, contracting=((1,), (0,)))
    head = b.emit("slice", big, start=(0, 0), limit=(m, 512), stride=(1, 1))
    fn = b.build([b.emit("mul", b.emit("add", v, kk), head)])
    blocks = [backend.upload(quant_blocks.quantize(
        rng.normal(size=(n, k)).astype(np.float32), "q8_0")) for n in rows]
    dense = rng.normal(size=(rows[0], sum(rows))).astype(np.float32) / 64
    xs = [rng.normal(size=(m, k)).astype(np.float32), *blocks, dense]
    (got,) = backend.run(backend.compile(fn), xs)
    (want,) = evaluate(fn, [xs[0], *[np.asarray(w) for w in blocks], dense])
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))
