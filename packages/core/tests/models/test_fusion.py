"""Joining q/k/v and gate/up at load (`models.fusion`): fewer products, the same results."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.io.weights import QuantizedArray
from omnitensor.models import Checkpoint, ModelBuilder, builtin_spec
from omnitensor.models import compiled as compiled_module
from omnitensor.models.fusion import fuse_projections

BACKENDS = ["ref", "cpu"]


def _build(checkpoint: Checkpoint, backend: str, spec: str = "llama") -> Any:
    if backend != "ref":
        pytest.importorskip(f"omnitensor_backend_{backend}")
    return ModelBuilder().with_spec(spec).with_checkpoint(checkpoint).build(backend)


def _apart(monkeypatch: Any) -> None:
    """Build models with every projection apart, as before joining existed."""
    monkeypatch.setattr(compiled_module, "fuse_projections", lambda w, spec, hp, **_: dict(w))


def _logits(model: Any, ids: list[int]) -> list[np.ndarray]:
    """Logits of a prefill of `ids` and of two greedy decode steps after it."""
    with ot.use_backend(model.backend):  # host inputs bind to the model's backend
        return _steps(model, ids)


def _steps(model: Any, ids: list[int]) -> list[np.ndarray]:
    capacity = 16
    cache = model.new_cache(1, capacity)
    mask = np.ones((1, 1, 1, capacity), bool)
    logits, cache = model.step(np.array([ids]), np.arange(len(ids))[None], mask, 0, cache,
                               np.array([len(ids) - 1]))
    out = [logits.numpy()]
    for t in range(2):
        token = int(out[-1][0].argmax())
        at = len(ids) + t
        logits, cache = model.step(np.array([[token]]), np.array([[at]]), mask, at, cache,
                                   np.array([0]))
        out.append(logits.numpy())
    return out


def _with_biases(checkpoint: Checkpoint) -> Checkpoint:
    """Qwen2's layout: biases on q, k and v."""
    rng = np.random.default_rng(1)
    for name in [n for n in checkpoint.weights if n.endswith(("attn_q.weight", "attn_k.weight",
                                                              "attn_v.weight"))]:
        rows = checkpoint.weights[name].shape[0]
        checkpoint.weights[name.replace(".weight", ".bias")] = rng.standard_normal(
            rows).astype(np.float32)
    return checkpoint


def _quantized(checkpoint: Checkpoint, formats: dict[str, str]) -> Checkpoint:
    """Every layer matrix in q8_0, or in ``formats[part]`` for the parts named there."""
    for name, value in list(checkpoint.weights.items()):
        if name.startswith("blk.") and value.ndim == 2:
            part = name.split(".")[2]
            checkpoint.weights[name] = QuantizedArray.quantize(value, formats.get(part, "q8_0"))
    return checkpoint


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["f32-biases", "q8_0", "mixed"])
def test_a_joined_llama_computes_what_its_parts_compute(make_llama: Any, monkeypatch: Any,
                                                        backend: str, kind: str) -> None:
    def checkpoint() -> Checkpoint:
        made = make_llama(hidden=64, ffn=128, heads=4, kv_heads=2)
        if kind == "f32-biases":
            return _with_biases(made)
        # "mixed": v in another format than q and k (Q4_K_M's Q6_K attn_v): kept apart
        return _quantized(made, {"attn_v": "q4_0"} if kind == "mixed" else {})

    joined = _build(checkpoint(), backend)
    names = set(joined.weights)
    q8 = joined.weights["blk.0.ffn_down.weight"]._node.types[0]
    if kind != "f32-biases" and joined.backend.repacks(q8):
        # cpu repacks these formats: stacked bytes would be held beside the repacked copy
        assert "blk.0.ffn_gate_up.weight" not in names and "blk.0.attn_qkv.weight" not in names
    elif kind == "mixed":
        assert "blk.0.ffn_gate_up.weight" in names
        assert {"blk.0.attn_q.weight", "blk.0.attn_v.weight"} <= names
        assert "blk.0.attn_qkv.weight" not in names
    else:
        assert "blk.0.ffn_gate_up.weight" in names and "blk.0.ffn_gate.weight" not in names
        assert "blk.0.attn_qkv.weight" in names and "blk.0.attn_q.weight" not in names
        assert ("blk.0.attn_qkv.bias" in names) == (kind == "f32-biases")
    ids = [1, 5, 9, 3, 7]
    got = _logits(joined, ids)
    _apart(monkeypatch)
    apart = _build(checkpoint(), backend)
    assert "blk.0.attn_q.weight" in apart.weights
    want = _logits(apart, ids)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_an_encoder_keeps_its_products_apart(make_bert: Any) -> None:
    """Encoders run hundreds of rows a batch, where joining saves nothing (see `compiled`)."""
    names = set(_build(make_bert(hidden=32), "ref", "bert").weights)
    assert "blk.1.attn_q.weight" in names and "blk.1.attn_qkv.weight" not in names


def test_groups_that_cannot_be_stacked_as_they_are_stay_apart(make_llama: Any) -> None:
    weights = make_llama().weights
    spec, hparams = builtin_spec("llama"), make_llama().hparams
    weights["blk.0.attn_q.bias"] = np.zeros(weights["blk.0.attn_q.weight"].shape[0], np.float32)
    weights["blk.1.ffn_up.weight"] = weights["blk.1.ffn_up.weight"].astype(np.float16)
    joined = fuse_projections(weights, spec, hparams)
    assert "blk.0.attn_q.weight" in joined  # a bias on q alone
    assert "blk.1.ffn_gate.weight" in joined  # float32 gate beside a float16 up
    assert "blk.1.attn_qkv.weight" in joined and "blk.0.ffn_gate_up.weight" in joined
    np.testing.assert_array_equal(
        joined["blk.0.ffn_gate_up.weight"],
        np.concatenate([weights["blk.0.ffn_gate.weight"], weights["blk.0.ffn_up.weight"]]))
    assert "blk.0.attn_qkv.weight" not in weights  # the caller's mapping is left as it was
