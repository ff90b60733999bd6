"""Functionals against numpy formulas (and PyTorch where it is installed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import functional as F
from omnitensor.autograd.gradcheck import gradcheck

RNG = np.random.default_rng(0)


def _np(x: np.ndarray) -> ot.Tensor:
    return ot.from_numpy(x)


def test_softmax_family() -> None:
    x = RNG.normal(size=(3, 5)) * 10
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(F.softmax(_np(x), axis=1).numpy(), e / e.sum(1, keepdims=True))
    np.testing.assert_allclose(F.log_softmax(_np(x), axis=0).numpy(),
                               x - np.log(np.exp(x).sum(0, keepdims=True)), rtol=1e-10)


def test_activations() -> None:
    x = RNG.normal(size=(10,))
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(F.gelu(_np(x)).numpy(), 0.5 * x * (1 + erf(x / math.sqrt(2))))
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(F.gelu(_np(x), approximate="tanh").numpy(), tanh)
    np.testing.assert_allclose(F.silu(_np(x)).numpy(), x / (1 + np.exp(-x)))
    np.testing.assert_allclose(F.relu(_np(x)).numpy(), np.maximum(x, 0))


def test_norms_and_linear() -> None:
    x, w, b = RNG.normal(size=(4, 6)), RNG.normal(size=6), RNG.normal(size=6)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(F.layer_norm(_np(x), 6, _np(w), _np(b)).numpy(),
                               (x - mu) / np.sqrt(var + 1e-5) * w + b, rtol=1e-9)
    rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(F.rms_norm(_np(x), 6, _np(w)).numpy(), rms, rtol=1e-9)
    W = RNG.normal(size=(3, 6))
    np.testing.assert_allclose(F.linear(_np(x), _np(W), _np(b[:3])).numpy(), x @ W.T + b[:3])


def test_embedding_and_cross_entropy() -> None:
    table = RNG.normal(size=(5, 3))
    idx = np.array([[4, 0], [1, 1]], np.int32)
    np.testing.assert_allclose(F.embedding(_np(idx), _np(table)).numpy(), table[idx])
    logits = RNG.normal(size=(4, 5))
    target = np.array([0, 3, -100, 2], np.int32)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -np.mean([logp[i, t] for i, t in enumerate(target) if t >= 0])
    assert F.cross_entropy(_np(logits), _np(target)).item() == pytest.approx(expected)
    assert F.mse_loss(_np(logits), _np(logits * 0)).item() == pytest.approx((logits**2).mean())


def test_dropout_uses_the_key() -> None:
    x = ot.ones(1000)
    a = F.dropout(x, 0.3, key=ot.key(1)).numpy()
    assert F.dropout(x, 0.3, key=ot.key(1)).numpy().tolist() == a.tolist()
    assert F.dropout(x, 0.3, key=ot.key(2)).numpy().tolist() != a.tolist()
    assert 0.2 < (a == 0).mean() < 0.4
    assert F.dropout(x, 0.3, key=ot.key(1), training=False) is x


def test_attention_masks_and_gqa() -> None:
    q, k, v = RNG.normal(size=(1, 4, 3, 8)), RNG.normal(size=(1, 2, 5, 8)), RNG.normal(
        size=(1, 2, 5, 8))
    kr, vr = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)  # GQA = repeated kv heads
    s = q @ kr.transpose(0, 1, 3, 2) / math.sqrt(8)
    causal = np.arange(5)[None, :] <= (np.arange(3) + 2)[:, None]
    s = np.where(causal, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    expected = (p / p.sum(-1, keepdims=True)) @ vr
    got = F.scaled_dot_product_attention(_np(q), _np(k), _np(v), is_causal=True).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
    pad = np.array([True, True, True, False, False]).reshape(1, 1, 1, 5)
    masked = F.scaled_dot_product_attention(_np(q), _np(k), _np(v), _np(pad)).numpy()
    limited = F.scaled_dot_product_attention(_np(q), _np(k), _np(v),
                                             kv_length=ot.tensor(3)).numpy()
    np.testing.assert_allclose(masked, limited)


def test_rotary_embedding_preserves_norm_and_variants() -> None:
    x = RNG.normal(size=(2, 4, 8))
    cos, sin = F.rope_tables(4, 8, dtype=ot.float64)
    for interleaved in (False, True):
        y = F.rotary_embedding(_np(x), cos, sin, interleaved=interleaved).numpy()
        np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1))
    base = F.rope_frequencies(8)
    np.testing.assert_allclose(F.rope_frequencies(8, scaling={"type": "linear", "factor": 2}),
                               base / 2)
    assert F.rope_frequencies(8, scaling={"type": "llama3", "factor": 8.0,
                                          "original_max_position_embeddings": 16}).shape == (4,)


def test_conv2d_and_pools_against_torch() -> None:
    torch = pytest.importorskip("torch")
    x, w, b = RNG.normal(size=(2, 4, 7, 7)), RNG.normal(size=(6, 2, 3, 3)), RNG.normal(size=6)
    got = F.conv2d(_np(x), _np(w), _np(b), stride=2, padding=1, dilation=2, groups=2).numpy()
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                                     torch.from_numpy(b), stride=2, padding=1, dilation=2,
                                     groups=2).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-12)
    tx = torch.from_numpy(x)
    np.testing.assert_allclose(F.max_pool2d(_np(x), 3, 2, 1).numpy(),
                               torch.nn.functional.max_pool2d(tx, 3, 2, 1).numpy())
    np.testing.assert_allclose(F.avg_pool2d(_np(x), 2).numpy(),
                               torch.nn.functional.avg_pool2d(tx, 2).numpy())


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "attention", "conv2d",
                                  "cross_entropy", "rotary"])
def test_functional_gradients(name: str) -> None:
    cases = {
        "softmax": (lambda x: F.softmax(x), [(2, 4)]),
        "layer_norm": (lambda x, w: F.layer_norm(x, 4, w), [(2, 4), (4,)]),
        "attention": (lambda q, k: F.scaled_dot_product_attention(q, k, k, is_causal=True),
                      [(1, 2, 3, 4), (1, 1, 3, 4)]),
        "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [(1, 2, 3, 3), (2, 2, 2, 2)]),
        "cross_entropy": (lambda x: F.cross_entropy(x, ot.tensor([1, 0])), [(2, 3)]),
        "rotary": (lambda x: F.rotary_embedding(x, *F.rope_tables(2, 4, dtype=ot.float64)),
                   [(2, 4)]),
    }
    fn, shapes = cases[name]
    gradcheck(fn, *(RNG.normal(size=s) for s in shapes))
