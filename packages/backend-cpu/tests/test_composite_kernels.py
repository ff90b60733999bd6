"""The composites' kernels against float64 numpy forms of the same math (edges included)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from omnitensor_backend_cpu import attention, pointwise, rowops

Array = np.ndarray[Any, Any]

#: float64 erf, element by element (the backend needs no scipy; math.erf is exact to an ulp).
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _rel(actual: Array, expected: Array) -> float:
    """Normalized RMS error, as the conformance suite's NMSE check measures it."""
    keep = np.isfinite(expected)
    diff = np.asarray(actual, np.float64)[keep] - expected[keep]
    return float(np.sqrt(np.mean(diff**2) / max(np.mean(expected[keep] ** 2), 1e-300)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", [pointwise.GELU_ERF, pointwise.GELU_TANH, pointwise.SILU])
@pytest.mark.parametrize("gated", [False, True])
def test_activations(dtype: Any, mode: int, gated: bool) -> None:
    rng = np.random.default_rng(mode)
    size = 70000 if dtype == np.float64 else 300001  # the float32 one crosses into threads
    x = (rng.normal(size=size) * 4).astype(dtype)
    x[:6] = [0.0, -0.0, 1e-30, -30.0, 30.0, -100.0]
    up = rng.normal(size=size).astype(dtype) if gated else None
    out = np.empty_like(x)
    pointwise.activation(x, out, mode, up)
    x64 = x.astype(np.float64)
    want = {
        pointwise.GELU_ERF: 0.5 * x64 * (1 + _erf(x64 / np.sqrt(2))),
        pointwise.GELU_TANH: 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi)
                                                      * (x64 + 0.044715 * x64**3))),
        pointwise.SILU: x64 / (1 + np.exp(-x64)),
    }[mode]
    if up is not None:
        want = want * up
    assert _rel(out, want) < (1e-6 if dtype == np.float32 else 1e-13)
    # NOTE: 1 + erf(x) cancels for negative x in any float32 evaluation (the decomposition's
    # too), so the element bound has an absolute part proportional to |x|.
    assert np.all(np.abs(out - want) <= 1e-6 * np.abs(want) + 2e-7 * np.abs(x64) + 1e-37)
    nan = np.array([np.nan, np.inf, -np.inf], dtype)
    res = np.empty_like(nan)
    pointwise.activation(nan, res, mode)
    assert np.isnan(res[0]) and res[1] == np.inf and np.isnan(res[2])  # -inf * 0, as decomposed


@pytest.mark.parametrize("rows", [3, 16, 40])
def test_gated_activation_reads_the_halves_of_joined_rows_in_place(rows: int) -> None:
    # gate and up as the halves of one (rows, 2 n) product (a joined gate/up projection):
    # each row contiguous, the rows strided; a reusable call that sees later values
    rng = np.random.default_rng(rows)
    n = 4864
    joined = rng.normal(size=(1, rows, 2 * n)).astype(np.float32)
    gate, up = joined[..., :n], joined[..., n:]
    out = np.empty((1, rows, n), np.float32)
    call, reusable = pointwise.prepare_activation(gate, out, pointwise.SILU, up)
    assert reusable
    for _ in range(2):
        call()
        g64 = gate.astype(np.float64)
        assert _rel(out, g64 / (1 + np.exp(-g64)) * up) < 1e-6
        joined *= -0.5  # the same views, new values


def _softmax(x: Array) -> Array:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(3, 5), (700, 513), (2, 3, 40)])
def test_softmax_and_log_softmax(dtype: Any, shape: tuple[int, ...]) -> None:
    x = (np.random.default_rng(1).normal(size=shape) * 5).astype(dtype)
    x64 = x.astype(np.float64)
    out = np.empty_like(x)
    rowops.softmax(x[..., ::-1], out)  # strided input
    assert _rel(out, _softmax(x64[..., ::-1])) < 1e-6
    rowops.log_softmax(x, out)
    assert _rel(out, np.log(_softmax(x64))) < 1e-6


def test_softmax_nan_and_infinite_rows() -> None:
    x = np.array([[1.0, np.nan, 2.0], [-np.inf, 0.0, -np.inf], [np.inf, 0.0, 1.0]], np.float32)
    out = np.empty_like(x)
    rowops.softmax(x, out)
    with np.errstate(all="ignore"):
        want = _softmax(x.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_allclose(out[1], [0.0, 1.0, 0.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)])
def test_norms(dtype: Any, affine: tuple[bool, bool]) -> None:
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(600, 2, 300)) * 3 + 1).astype(dtype)
    w = rng.normal(size=(2, 300)).astype(dtype) if affine[0] else None
    b = rng.normal(size=(2, 300)).astype(dtype) if affine[1] else None
    out = np.empty_like(x)
    x64 = x.astype(np.float64).reshape(600, 600)
    rowops.layer_norm(x, w, b, out, 1e-5, axes=2)
    c = x64 - x64.mean(-1, keepdims=True)
    want = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
    want = want * (1 if w is None else w.reshape(-1)) + (0 if b is None else b.reshape(-1))
    assert _rel(out.reshape(600, 600), want) < 1e-6
    rowops.rms_norm(x, w, out, 1e-6, axes=2)
    want = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-6)
    want = want * (1 if w is None else w.reshape(-1))
    assert _rel(out.reshape(600, 600), want) < 1e-6


def _attention(q: Array, k: Array, v: Array, scale: float, keep: Array,
               add: Array | float = 0.0) -> Array:
    groups = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    s = np.einsum("bhtd,bhsd->bhts", q.astype(np.float64), k) * scale + add
    s = np.where(keep, s, np.finfo(q.dtype).min)
    return np.einsum("bhts,bhsd->bhtd", _softmax(s), v)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("capacity,used", [(32, 10), (4096, 3000)])  # one thread; split heads
# head sizes: vector rows (16, 128: two register groups of values, 80: a group and two single
# vectors), and 12, not a multiple of 8 (numba's loops)
@pytest.mark.parametrize("head", [16, 12, 80, 128])
def test_attention_decode_against_a_cache(dtype: Any, capacity: int, used: int, head: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor_backend_cpu import threads

    monkeypatch.setattr(threads, "_COUNT", [2])  # a long cache splits heads over two workers
    rng = np.random.default_rng(3)
    q = rng.normal(size=(2, 6, 1, head)).astype(dtype)
    cache_k = rng.normal(size=(2, 2, capacity, head)).astype(dtype)
    cache_v = rng.normal(size=(2, 2, capacity, head)).astype(dtype)
    out = np.empty((2, 6, 1, head), dtype)
    attention.sdpa(q, cache_k, cache_v, out, scale=0.25, q_positions=np.array([used - 1]),
                   kv_length=used, causal=True)
    keep = np.arange(capacity) < used
    # (float32 scores of 128-wide heads over 3000 keys: 1.2-1.3e-6, in numba's loops as in IR)
    assert _rel(out, _attention(q, cache_k, cache_v, 0.25, keep)) < 2e-6


@pytest.mark.parametrize("t_len", [1, 3])
@pytest.mark.parametrize("kv_heads", [1, 2])  # one kv head: its query heads cut into chunks
@pytest.mark.parametrize("split", [False, True])
def test_attention_rows_share_key_blocks_across_query_heads(
        t_len: int, kv_heads: int, split: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor_backend_cpu import pool, threads

    monkeypatch.setattr(threads, "_COUNT", [2])
    if split:
        monkeypatch.setattr(pool, "MIN_SPLIT", 1)
        monkeypatch.setattr(pool, "MIN_WORKER_SPLIT", 1)
    rng = np.random.default_rng(7)
    # strided (B, T, H, D) queries; 150 keys: two blocks of 64 and a ragged one
    q = rng.normal(size=(2, t_len, 6, 16)).astype(np.float32).transpose(0, 2, 1, 3)
    k = rng.normal(size=(2, kv_heads, 150, 16)).astype(np.float32)
    v = rng.normal(size=(2, kv_heads, 150, 16)).astype(np.float32)
    out = np.empty((2, 6, t_len, 16), np.float32)
    keep = rng.random((2, 1, t_len, 150)) > 0.3
    keep[1, :, 0] = False  # entry 1's first row sees no key: the average of every value
    attention.sdpa(q, k, v, out, scale=0.3, mask=keep, softcap=2.0)
    g = 6 // kv_heads
    s = 2.0 * np.tanh(np.einsum("bhtd,bhsd->bhts", q.astype(np.float64),
                                np.repeat(k, g, axis=1)) * 0.3 / 2.0)
    s = np.where(keep, s, np.finfo(np.float32).min)
    assert _rel(out, np.einsum("bhts,bhsd->bhtd", _softmax(s), np.repeat(v, g, axis=1))) < 1e-6
    add = rng.normal(size=(1, 6, 1, 150)).astype(np.float32)
    attention.sdpa(q, k, v, out, scale=0.3, mask=add)
    assert _rel(out, _attention(q, k, v, 0.3, np.ones(150, bool), add)) < 1e-6
    q = q.copy()
    q[0, 1, 0, 3] = np.nan  # a NaN query makes its own row NaN, and no other
    attention.sdpa(q, k, v, out, scale=0.3, mask=keep, q_positions=np.arange(100, 100 + t_len),
                   kv_length=120, causal=True)
    assert np.isnan(out[0, 1, 0]).all()
    out[0, 1, 0] = 0.0
    want = _attention(q, k, v, 0.3, keep & (np.arange(150) < np.minimum(
        np.arange(101, 101 + t_len)[:, None], 120)))
    want[0, 1, 0] = 0.0
    assert _rel(out, want) < 1e-6


@pytest.mark.parametrize("kv_heads", [1, 3])
@pytest.mark.parametrize("split", [False, True])
def test_short_rows_run_one_task_per_head(kv_heads: int, split: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A prompt over a few keys (a training step's attention, a short first prompt) takes
    `_short32`: grouped kv heads, strided queries, masks, the soft cap, the cache length."""
    from omnitensor_backend_cpu import pool, threads

    monkeypatch.setattr(threads, "_COUNT", [2])
    if split:
        monkeypatch.setattr(pool, "MIN_SPLIT", 1)
        monkeypatch.setattr(pool, "MIN_WORKER_SPLIT", 1)
    taken: list[int] = []
    short = attention._short32
    monkeypatch.setattr(attention, "_short32", lambda *a: (taken.append(1), short(*a)))
    monkeypatch.setattr(attention, "_short32_split", lambda *a: (taken.append(2),
                                                                 short(*a[:-1], 0, 12 * 6)))
    rng = np.random.default_rng(9)
    q = rng.normal(size=(12, 5, 6, 24)).astype(np.float32).transpose(0, 2, 1, 3)
    k = rng.normal(size=(12, kv_heads, 40, 24)).astype(np.float32)
    v = rng.normal(size=(12, kv_heads, 40, 24)).astype(np.float32)
    out = np.empty((12, 6, 5, 24), np.float32)
    keep = rng.random((12, 1, 5, 40)) > 0.3
    keep[1, :, 0] = False  # entry 1's first row sees no key: the average of every value
    attention.sdpa(q, k, v, out, scale=0.3, mask=keep, q_positions=np.arange(20, 25),
                   kv_length=30, causal=True, softcap=2.0)
    g = 6 // kv_heads
    s = 2.0 * np.tanh(np.einsum("bhtd,bhsd->bhts", q.astype(np.float64),
                                np.repeat(k, g, axis=1)) * 0.3 / 2.0)
    keys = np.arange(40)
    s = np.where(keep & (keys < np.minimum(np.arange(21, 26)[:, None], 30)), s,
                 np.finfo(np.float32).min)
    want = np.einsum("bhts,bhsd->bhtd", _softmax(s), np.repeat(v, g, axis=1))
    assert _rel(out, want) < 1e-6
    assert taken and set(taken) == {2 if split else 1}


@pytest.mark.parametrize("masking", ["causal", "bool", "additive", "none-left"])
def test_attention_masks(masking: str) -> None:
    rng = np.random.default_rng(4)
    q = rng.normal(size=(3, 4, 24, 8)).astype(np.float32)
    k = rng.normal(size=(3, 4, 24, 8)).astype(np.float32).transpose(0, 1, 2, 3)[..., ::-1]
    v = rng.normal(size=(3, 4, 24, 8)).astype(np.float32)
    out = np.empty_like(q)
    keep: Array = np.ones((24, 24), bool)
    add: Array | float = 0.0
    if masking == "causal":
        attention.sdpa(q, k, v, out, scale=0.3, causal=True)
        keep = np.tril(keep)
    elif masking == "bool":
        keep = rng.random((3, 1, 1, 24)) > 0.3
        attention.sdpa(q, k, v, out, scale=0.3, mask=keep)
    elif masking == "additive":
        add = rng.normal(size=(1, 1, 24, 24)).astype(np.float32)
        attention.sdpa(q, k, v, out, scale=0.3, mask=add)
    else:
        keep = np.zeros((3, 1, 1, 24), bool)
        attention.sdpa(q, k, v, out, scale=0.3, mask=keep)
    assert _rel(out, _attention(q, k, v, 0.3, keep, add)) < 1e-6


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary(interleaved: bool) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 3, 5, 8)).astype(np.float32)
    cos, sin = (rng.normal(size=(5, 4)).astype(np.float32) for _ in range(2))
    out = np.empty_like(x)
    attention.rotary(x, cos, sin, out, interleaved=interleaved)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        want = np.stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(x.shape)
    else:
        a, b = x[..., :4], x[..., 4:]
        want = np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("batch", [1, 3])  # one entry: kv heads split; three: entries split
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_prefill_reads_strided_heads_on_two_threads(
        batch: int, dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor_backend_cpu import pool, threads

    monkeypatch.setattr(threads, "_COUNT", [2])
    monkeypatch.setattr(pool, "MIN_SPLIT", 1)
    monkeypatch.setattr(pool, "MIN_WORKER_SPLIT", 1)
    rng = np.random.default_rng(5)
    # (B, T, H, D) projections seen as (B, H, T, D), GQA 6 query heads over 2 kv heads
    q = rng.normal(size=(batch, 40, 6, 16)).astype(dtype).transpose(0, 2, 1, 3)
    k = rng.normal(size=(batch, 40, 2, 16)).astype(dtype).transpose(0, 2, 1, 3)
    v = rng.normal(size=(batch, 40, 2, 16)).astype(dtype).transpose(0, 2, 1, 3)
    out = np.empty((batch, 6, 40, 16), dtype)
    attention.sdpa(q, k, v, out, scale=0.3, causal=True)
    assert _rel(out, _attention(q, k, v, 0.3, np.tril(np.ones((40, 40), bool)))) < 1e-6
    keep = rng.random((batch, 1, 1, 40)) > 0.3
    attention.sdpa(q, k, v, out, scale=0.3, mask=keep, softcap=2.0)
    s = 2.0 * np.tanh(np.einsum("bhtd,bhsd->bhts", q.astype(np.float64),
                                np.repeat(k, 3, axis=1)) * 0.3 / 2.0)
    s = np.where(keep, s, np.finfo(dtype).min)
    assert _rel(out, np.einsum("bhts,bhsd->bhtd", _softmax(s), np.repeat(v, 3, axis=1))) < 1e-6


def test_attention_prefill_into_a_larger_cache() -> None:
    # 20 queries at positions 0..19 against a 64-slot cache holding 20 keys (the rest stale)
    rng = np.random.default_rng(6)
    q = rng.normal(size=(1, 6, 20, 16)).astype(np.float32)
    cache_k = rng.normal(size=(1, 2, 64, 16)).astype(np.float32)
    cache_v = rng.normal(size=(1, 2, 64, 16)).astype(np.float32)
    out = np.empty_like(q)
    attention.sdpa(q, cache_k, cache_v, out, scale=0.25, q_positions=np.arange(20),
                   kv_length=20, causal=True)
    keep = np.tril(np.ones((20, 64), bool))
    assert _rel(out, _attention(q, cache_k, cache_v, 0.25, keep)) < 1e-6


@pytest.mark.parametrize("t_len", [37, 64, 65])
def test_causal_prompts_run_per_row_up_to_64_rows(t_len: int) -> None:
    # a prompt into a 128-slot cache, 14 query heads on 2 kv heads of 64: per query row up to
    # 64 rows (the keys past each row's position skipped), as products from 65
    rng = np.random.default_rng(8)
    q = rng.normal(size=(1, 14, t_len, 64)).astype(np.float32)
    cache_k = rng.normal(size=(1, 2, 128, 64)).astype(np.float32)
    cache_v = rng.normal(size=(1, 2, 128, 64)).astype(np.float32)
    assert attention._by_products(q, cache_k, causal=True) == (t_len > 64)
    assert attention._by_products(q, cache_k, causal=False)  # (an encoder's rows)
    out = np.empty_like(q)
    attention.sdpa(q, cache_k, cache_v, out, scale=0.125, q_positions=np.arange(t_len),
                   kv_length=t_len, causal=True)
    keep = np.tril(np.ones((t_len, 128), bool))
    assert _rel(out, _attention(q, cache_k, cache_v, 0.125, keep)) < 1e-6
    # small tasks (one head of 32 per kv head, many sequences) stay products
    assert attention._by_products(q[:, :2, :, :32], cache_k[:, :2, :, :32], causal=True)


@pytest.mark.parametrize("kv_length", [70, 0])
def test_causal_products_read_only_the_keys_a_block_of_queries_sees(kv_length: int) -> None:
    # 70 queries (blocks of 32, 32 and 6 queries) at positions 0..69 of a 128-slot cache:
    # each block reads the keys up to its last query's position; with no key left (a cache
    # length of 0) every row averages all 128 values, as the reference does
    rng = np.random.default_rng(12)
    q = rng.normal(size=(1, 4, 70, 32)).astype(np.float32)
    cache_k = rng.normal(size=(1, 2, 128, 32)).astype(np.float32)
    cache_v = rng.normal(size=(1, 2, 128, 32)).astype(np.float32)
    assert attention._by_products(q, cache_k, causal=True)
    out = np.empty_like(q)
    attention.sdpa(q, cache_k, cache_v, out, scale=0.2, q_positions=np.arange(70),
                   kv_length=kv_length, causal=True)
    keep = np.tril(np.ones((70, 128), bool)) & (np.arange(128) < kv_length)
    assert _rel(out, _attention(q, cache_k, cache_v, 0.2, keep)) < 1e-6
    seen = attention._keys_seen.py_func
    positions = np.arange(70)
    blocks = [seen(positions, True, kv_length, 128, False, t0, min(32, 70 - t0))
              for t0 in (0, 32, 64)]
    assert blocks == ([32, 64, 70] if kv_length else [128] * 3)
    assert seen(positions, True, kv_length, 128, True, 0, 32) == 128  # (a mask: all read)


@pytest.mark.parametrize("masking", ["none", "key", "bool", "key-additive", "additive"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("softcap", [0.0, 2.0])
def test_prompt_attention_products_against_float64(masking: str, causal: bool,
                                                   softcap: float) -> None:
    # 40 queries (two blocks of 32) of 4 heads on 2 kv heads over 70 keys (three panels),
    # heads strided out of (B, T, H, D): every mask form, the causal rule, the soft cap
    rng = np.random.default_rng(13)
    q = rng.normal(size=(2, 40, 4, 16)).astype(np.float32).transpose(0, 2, 1, 3)
    k = rng.normal(size=(2, 70, 2, 16)).astype(np.float32).transpose(0, 2, 1, 3)
    v = rng.normal(size=(2, 70, 2, 16)).astype(np.float32).transpose(0, 2, 1, 3)
    keep: Array = np.ones((2, 4, 40, 70), bool)
    add: Array | float = 0.0
    mask: Array | None = None
    if masking == "key":
        mask = rng.random((2, 1, 1, 70)) > 0.3
    elif masking == "bool":
        mask = rng.random((2, 1, 40, 70)) > 0.3
        mask[0, 0, 5] = False  # a row that sees no key: the average of every value
    elif masking == "key-additive":
        mask = add = rng.normal(size=(2, 1, 1, 70)).astype(np.float32)
    elif masking == "additive":
        mask = add = rng.normal(size=(1, 4, 40, 70)).astype(np.float32)
    if mask is not None and mask.dtype == np.bool_:
        keep = keep & mask
    positions = np.arange(30, 70)
    if causal:
        keep = keep & (np.arange(70) <= positions[:, None])
    out = np.empty((2, 4, 40, 16), np.float32)
    attention.sdpa(q, k, v, out, scale=0.3, mask=mask, q_positions=positions, causal=causal,
                   softcap=softcap)
    g = np.repeat
    s = np.einsum("bhtd,bhsd->bhts", q.astype(np.float64), g(k, 2, axis=1)) * 0.3
    s = (softcap * np.tanh(s / softcap) if softcap else s) + add
    s = np.where(keep, s, np.finfo(np.float32).min)
    assert _rel(out, np.einsum("bhts,bhsd->bhtd", _softmax(s), g(v, 2, axis=1))) < 1e-6
