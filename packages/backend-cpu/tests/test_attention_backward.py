"""The fused attention backward: against float64 forms of the gradient, its split, its reach.

The composite's semantics are the conformance suite's (every backend); here what only this
kernel does: the task split over threads, NaN rows, where the lowering takes it and where it
leaves the composite to its decomposition, and that a compiled training step reaches it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor.dtypes import float32, float64
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu import attention_backward, pool, threads
from omnitensor_backend_cpu.lowering import BACKWARD_MAX_KEYS, LOWERINGS

Array = np.ndarray[Any, Any]
OP = "scaled_dot_product_attention_backward"


def _grads64(q: Array, k: Array, v: Array, g: Array, scale: float, keep: Array,
             softcap: float) -> tuple[Array, Array, Array]:
    """dq, dk, dv in float64 by the chain rule, grouped heads repeated then summed back."""
    q, k, v, g = (np.asarray(a, np.float64) for a in (q, k, v, g))
    groups = q.shape[1] // k.shape[1]
    kr, vr = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    raw = np.einsum("bhtd,bhsd->bhts", q, kr) * scale
    capped = np.tanh(raw / softcap) if softcap else None
    scores = softcap * capped if softcap else raw
    scores = np.where(keep, scores, np.finfo(np.float32).min)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    dp = np.einsum("bhtd,bhsd->bhts", g, vr)
    ds = np.where(keep, p * (dp - (dp * p).sum(-1, keepdims=True)), 0.0)
    if softcap:
        ds = ds * (1 - capped**2)
    ds = ds * scale
    dq = np.einsum("bhts,bhsd->bhtd", ds, kr)
    dk = np.einsum("bhts,bhtd->bhsd", ds, q)
    dv = np.einsum("bhts,bhtd->bhsd", p, g)
    fold = (k.shape[0], k.shape[1], groups, *k.shape[2:])
    return dq, dk.reshape(fold).sum(2), dv.reshape(fold[:-1] + (v.shape[3],)).sum(2)


def _rel(actual: Array, expected: Array) -> float:
    diff = np.asarray(actual, np.float64) - expected
    return float(np.sqrt(np.mean(diff**2) / max(np.mean(expected**2), 1e-300)))


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("split", [False, True])
def test_backward_against_the_chain_rule(kv_heads: int, split: bool,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Grouped heads, strided queries (a (B, T, H, D) view), a bool mask with a row that sees
    no key, the causal rule, the soft cap; one task list, or split over two threads."""
    monkeypatch.setattr(threads, "_COUNT", [2])
    monkeypatch.setattr(pool, "MIN_SPLIT", 1 if split else 1 << 40)
    rng = np.random.default_rng(kv_heads)
    q = rng.normal(size=(6, 9, 4, 16)).astype(np.float32).transpose(0, 2, 1, 3)
    k = rng.normal(size=(6, kv_heads, 9, 16)).astype(np.float32)
    v = rng.normal(size=(6, kv_heads, 9, 8)).astype(np.float32)
    g = rng.normal(size=(6, 4, 9, 8)).astype(np.float32)
    mask = rng.random((6, 1, 9, 9)) > 0.2
    mask[2, :, 0] = False  # entry 2's first row sees no key: uniform weights, no gradient
    outs = [np.empty(a.shape, np.float32) for a in (q, k, v)]
    attention_backward.prepare_backward(q, k, v, g, *outs, scale=0.3, causal=True,
                                        softcap=2.0)(mask, None, None)
    keep = mask & (np.arange(9)[None, :] <= np.arange(9)[:, None])
    for got, want in zip(outs, _grads64(q, k, v, g, 0.3, keep, 2.0), strict=True):
        assert _rel(got, want) < 1e-5


def test_a_nan_key_spreads_as_the_reference_spreads_it() -> None:
    """Key 1 NaN: causal rows 1 and 2 see it and are NaN rows, whose later keys the reference's
    softmax weighs NaN too; row 3 does not see it (masked), so key 3's dv is NaN through those
    rows' weights only."""
    from omnitensor.ir.opdef import get_op

    rng = np.random.default_rng(3)
    q, k, v, g = (rng.normal(size=(1, 2, 4, 8)).astype(np.float32) for _ in range(4))
    k[0, 1, 1, 3] = np.nan
    mask = np.ones((1, 1, 4, 4), np.bool_)
    mask[..., 3, 1] = False
    outs = [np.empty_like(q) for _ in range(3)]
    attention_backward.prepare_backward(q, k, v, g, *outs, scale=0.5, causal=True)(
        mask, None, None)
    want = get_op(OP).reference(q, k, v, g, (mask,), scale=0.5, is_causal=True,
                                mask_kind="bool", has_q_positions=False, has_kv_length=False,
                                softcap=0.0)
    assert np.isnan(want[2][0, 1, 3]).all() and not np.isnan(want[2][0, 0]).any()
    for got, ref in zip(outs, want, strict=True):
        assert np.array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _backward_inst(dtype: Any, keys: int) -> Any:
    b = Builder("backward")
    ins = [b.input(TensorType(shape, dtype)) for shape in
           ((2, 4, 3, 8), (2, 2, keys, 8), (2, 2, keys, 8), (2, 4, 3, 8))]
    b.emit_multi(OP, *ins, scale=0.5)
    return b.build([]).body[-1]


def test_the_lowering_takes_short_float32_rows_only() -> None:
    assert LOWERINGS.supports(_backward_inst(float32, BACKWARD_MAX_KEYS)) is None
    assert "keys" in str(LOWERINGS.supports(_backward_inst(float32, BACKWARD_MAX_KEYS + 1)))
    assert LOWERINGS.supports(_backward_inst(float64, 5)) is not None


def test_a_compiled_gradient_runs_the_fused_backward(plan_labels: list[str]) -> None:
    """Autograd records attention's gradient as the composite, and the plan runs its kernel."""
    import omnitensor as ot
    import omnitensor.functional as F

    labels = plan_labels

    def loss(q: Any, k: Any, v: Any) -> Any:
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) ** 2).sum()

    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(2, 2, 5, 8)).astype(np.float32) for _ in range(3)]
    with ot.use_backend("cpu"):
        got = ot.compile(ot.grad(loss, argnums=(0, 1, 2)))(*map(ot.tensor, arrays))
        got = [np.asarray(t.numpy()) for t in got]
    assert any(label.startswith(f"attn:{OP}") for label in labels), labels
    keep = np.arange(5)[None, :] <= np.arange(5)[:, None]
    q, k, v = arrays
    out = np.einsum("bhts,bhsd->bhtd", _softmax_keep(q, k, keep), v.astype(np.float64))
    want = _grads64(q, k, v, 2 * out, 1 / np.sqrt(8), keep, 0.0)
    for a, b in zip(got, want, strict=True):
        assert _rel(a, b) < 1e-5


def _softmax_keep(q: Array, k: Array, keep: Array) -> Array:
    s = np.einsum("bhtd,bhsd->bhts", q.astype(np.float64), k) / np.sqrt(q.shape[-1])
    s = np.where(keep, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)
