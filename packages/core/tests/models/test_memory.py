"""A quantized GGUF model stays quantized in memory: resident size after load <= 1.2x the file.

A few-MB Llama whose matrices use every common ggml format (a different one per layer, as the
``_K_M`` mixes do) is written as GGUF, loaded on the reference backend, and the memory still
allocated after loading (numpy buffers and Python objects, traced by `tracemalloc`, after a
warm-up load) is compared with the file size. A float32 copy of the weights would be 4-12x the
file.
"""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path
from typing import Any

from omnitensor.io.weights import QuantizedArray
from omnitensor.ir.types import QTensorType
from omnitensor.models import Checkpoint, export_gguf
from omnitensor.runtime import CausalLM, load_model

FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
           "iq4_nl", "iq4_xs"]


def _quantized_llama(make_llama: Any) -> Checkpoint:
    checkpoint: Checkpoint = make_llama(hidden=256, ffn=512, layers=len(FORMATS), heads=4,
                                        kv_heads=2, context=64)
    for name, value in list(checkpoint.weights.items()):
        if value.ndim == 2:
            layer = int(name.split(".")[1]) if name.startswith("blk.") else 0
            checkpoint.weights[name] = QuantizedArray.quantize(value, FORMATS[layer])
    return checkpoint


def test_resident_memory_after_load_is_at_most_1_2x_the_file(tmp_path: Path,
                                                              make_llama: Any) -> None:
    path = export_gguf(_quantized_llama(make_llama), tmp_path / "mix.gguf")
    size = path.stat().st_size
    assert size > 2_000_000  # a few MB
    # a first load and generation import what loading imports lazily and fill the process-wide
    # caches, so that the traced load below measures the model alone
    warm = load_model(path, "ref")
    warm.generate("ab", max_new_tokens=2)
    del warm
    gc.collect()
    tracemalloc.start()
    try:
        model = load_model(path, "ref")
        gc.collect()
        resident, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(model, CausalLM)
    formats = {t.format for w in model.model.weights.values()
               if isinstance(t := w._node.types[w._index], QTensorType)}
    assert formats == set(FORMATS)  # every matrix kept in its own format
    print(f"file {size} B, resident after load {resident} B ({resident / size:.3f}x), "
          f"peak {peak / size:.3f}x")
    assert resident <= 1.2 * size, (resident / size, peak / size)
    out = model.generate("abc", max_new_tokens=3)  # and it runs
    assert len(out.token_ids) == 3


def test_formats_a_backend_does_not_run_are_dequantized_at_load(
        tmp_path: Path, make_llama: Any, monkeypatch: Any, caplog: Any) -> None:
    """A backend that implements only some formats (cuda) still loads every file."""
    from omnitensor.backend.registry import get_backend

    checkpoint: Checkpoint = make_llama(hidden=256, ffn=512, layers=2, heads=4, kv_heads=2)
    for name, value in list(checkpoint.weights.items()):
        if value.ndim == 2:
            checkpoint.weights[name] = QuantizedArray.quantize(
                value, "q5_k" if name.startswith("blk.0.") else "q8_0")
    path = export_gguf(checkpoint, tmp_path / "m.gguf")
    backend = get_backend("ref")
    refuse = backend.supports

    def supports(inst: Any) -> str | None:
        if inst.op == "qmatmul" and inst.attrs["format"] == "q5_k":
            return "qmatmul: format 'q5_k' has no kernel here"
        return refuse(inst)

    monkeypatch.setattr(backend, "supports", supports)
    with caplog.at_level("WARNING"):
        model = load_model(path, backend)
    assert "q5_k weights are dequantized to float32" in caplog.text
    kinds = {n: type(w._node.types[w._index]).__name__ for n, w in model.model.weights.items()}
    assert kinds["blk.0.attn_qkv.weight"] == "TensorType"  # q, k and v joined at load
    assert kinds["blk.1.attn_qkv.weight"] == "QTensorType"
    assert len(model.generate("ab", max_new_tokens=2).token_ids) <= 2


def test_quantized_lookup_table_is_never_held_as_float32(tmp_path: Path, make_llama: Any) -> None:
    """Generating reads a quantized token table row by row: no float32 copy stays cached."""
    import numpy as np

    checkpoint: Checkpoint = make_llama(hidden=256, ffn=512, layers=2, heads=4, kv_heads=2,
                                        eos=False)
    rng = np.random.default_rng(0)
    vocab = 4096  # a table large enough to see (4 MB as float32)
    for name in ("token_embd.weight", "output.weight"):
        checkpoint.weights[name] = (rng.standard_normal((vocab, 256)) * 0.3).astype(np.float32)
    checkpoint.hparams["vocab_size"] = vocab
    for name, value in list(checkpoint.weights.items()):
        if value.ndim == 2:
            checkpoint.weights[name] = QuantizedArray.quantize(value, "q4_k")
    path = export_gguf(checkpoint, tmp_path / "vocab.gguf", tokenizer_metadata={})
    from omnitensor.models import ModelBuilder, open_checkpoint
    from omnitensor.models.spec import builtin_spec

    def build() -> CausalLM:
        loaded = open_checkpoint(path)
        loaded.tokenizer = checkpoint.tokenizer  # the character tokenizer (ids < 31)
        return CausalLM(ModelBuilder().with_spec(builtin_spec("llama"))
                        .with_checkpoint(loaded).build("ref"))

    warm = build()
    warm.generate("ab", max_new_tokens=2)
    del warm
    gc.collect()
    tracemalloc.start()
    try:
        model = build()
        gc.collect()
        loaded, _ = tracemalloc.get_traced_memory()
        out = model.generate("hello", max_new_tokens=4)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(out.token_ids) == 4
    table_f32 = vocab * 256 * 4
    assert after - loaded < table_f32 / 2, (after - loaded, table_f32)
