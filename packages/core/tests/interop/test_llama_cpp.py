"""llama.cpp loads omnitensor's GGUF files and answers the same (needs llama-cpp-python).

llama-cpp-python has no binary wheel and takes ~12 minutes to build on 2 cores, so CI does not
install it; the test skips there. Build it as ../shared/ANCHORS.md describes to run it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.models import export_gguf, open_checkpoint
from omnitensor.runtime import load_model

CHAR_GPT = Path(__file__).parents[2] / "src" / "omnitensor" / "data" / "char-gpt"
PROMPTS = ["12+34=", "7+8=", "40+2=", "57+68="]


def _llama_cpp_answers(path: Path) -> list[str]:
    llama_cpp = pytest.importorskip("llama_cpp")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=32, n_threads=2, use_mmap=False,
                          verbose=False)
    answers = []
    for prompt in PROMPTS:
        tokens = llm.tokenize(prompt.encode(), add_bos=False, special=False)
        out: list[int] = []
        for token in llm.generate(tokens, temp=0.0, top_k=1, reset=True):
            if token == llm.token_eos() or len(out) >= 4:
                break
            out.append(token)
        answers.append(llm.detokenize(out).decode())
    return answers


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["shipped", "f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0",
                                   "q5_1", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"])
def test_llama_cpp_answers_like_omnitensor(tmp_path: Path, dtype: str) -> None:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("omnitensor_backend_ref")
    path = CHAR_GPT / "char-gpt.gguf" if dtype == "shipped" else export_gguf(
        open_checkpoint(CHAR_GPT), tmp_path / f"char-{dtype}.gguf", dtype=dtype)
    # float files answer as the float model does; a quantized file as omnitensor runs that file
    ours = load_model(CHAR_GPT if dtype in ("shipped", "f32", "f16") else path, backend="ref")
    want = [ours.generate(p, max_new_tokens=4).text for p in PROMPTS]
    assert _llama_cpp_answers(path) == want


@pytest.mark.slow
@pytest.mark.parametrize("dtype,ftype", [("q4_0", 2), ("q5_1", 9), ("q4_k_m", 15),
                                         ("q5_k_m", 17), ("q6_k", 18)])
def test_export_matches_llama_cpp_quantize(tmp_path: Path, dtype: str, ftype: int) -> None:
    """llama.cpp's own quantizer on the f32 export gives the same tensor types and bytes."""
    llama_cpp = pytest.importorskip("llama_cpp")
    from omnitensor.io.gguf import read_gguf

    checkpoint = open_checkpoint(CHAR_GPT)
    source = export_gguf(checkpoint, tmp_path / "f32.gguf", dtype="f32")
    theirs = tmp_path / f"llama-{dtype}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype, params.nthread = ftype, 1
    params.pure = dtype in ("q4_0", "q5_1", "q6_k")  # plain types: every matrix the same
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(theirs).encode(),
                                          params) == 0
    ours = read_gguf(export_gguf(checkpoint, tmp_path / f"ours-{dtype}.gguf", dtype=dtype))
    reference = read_gguf(theirs)
    assert set(ours.tensor_names) == set(reference.tensor_names)
    for name in ours.tensor_names:
        assert ours.tensor_info(name).type == reference.tensor_info(name).type, name
        a, b = ours.load(name), reference.load(name)
        if hasattr(a, "blocks"):
            np.testing.assert_array_equal(a.blocks, b.blocks, err_msg=name)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def _checkpoint(arch: str) -> Any:
    """A random 2-layer Qwen3 or Gemma (q/k norms, explicit head size) over characters."""
    import string

    from omnitensor.io.tokenizer import char_tokenizer
    from omnitensor.models import Checkpoint

    tokenizer = char_tokenizer(string.ascii_lowercase + " ", bos="<s>", eos="</s>")
    # one spare row: the GGUF vocabulary gains a reserved merge token (gguf_tokenizer_metadata)
    vocab, hidden, heads, kv, ffn = tokenizer.vocab_size + 1, 64, 4, 2, 128
    head_dim = 16 if arch == "phi3" else 32  # llama.cpp's Phi-3 has no explicit head size
    rng = np.random.default_rng(0)

    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    weights = {"token_embd.weight": mat(vocab, hidden), "output_norm.weight": 1 + mat(hidden)}
    for i in range(2):
        weights |= {
            f"blk.{i}.attn_norm.weight": 1 + mat(hidden),
            f"blk.{i}.attn_q.weight": mat(heads * head_dim, hidden),
            f"blk.{i}.attn_k.weight": mat(kv * head_dim, hidden),
            f"blk.{i}.attn_v.weight": mat(kv * head_dim, hidden),
            f"blk.{i}.attn_q_norm.weight": 1 + mat(head_dim),
            f"blk.{i}.attn_k_norm.weight": 1 + mat(head_dim),
            f"blk.{i}.attn_output.weight": mat(hidden, heads * head_dim),
            f"blk.{i}.ffn_norm.weight": 1 + mat(hidden),
            f"blk.{i}.ffn_gate.weight": mat(ffn, hidden),
            f"blk.{i}.ffn_up.weight": mat(ffn, hidden),
            f"blk.{i}.ffn_down.weight": mat(hidden, ffn),
        }
        if arch.startswith("gemma"):  # embeddings are scaled by sqrt(hidden): keep them small
            weights["token_embd.weight"] = weights["token_embd.weight"] * np.float32(0.05)
            weights |= {f"blk.{i}.post_attention_norm.weight": 1 + mat(hidden),
                        f"blk.{i}.post_ffw_norm.weight": 1 + mat(hidden)}
            if arch == "gemma2":
                del weights[f"blk.{i}.attn_q_norm.weight"], weights[f"blk.{i}.attn_k_norm.weight"]
    hparams: dict[str, Any] = dict(
        arch=arch, context_length=64, embedding_length=hidden, block_count=2,
        feed_forward_length=ffn, head_count=heads, head_count_kv=kv, vocab_size=vocab,
        rope_freq_base=1000000.0, norm_epsilon=1e-6, head_dim=head_dim)
    if arch == "phi3":  # fused q/k/v and gate/up, no q/k norms, head size hidden / heads
        for i in range(2):
            w = weights
            w[f"blk.{i}.attn_qkv.weight"] = np.concatenate(
                [w.pop(f"blk.{i}.attn_{n}.weight") for n in ("q", "k", "v")])
            w[f"blk.{i}.ffn_up.weight"] = np.concatenate(
                [w.pop(f"blk.{i}.ffn_gate.weight"), w[f"blk.{i}.ffn_up.weight"]])
            del w[f"blk.{i}.attn_q_norm.weight"], w[f"blk.{i}.attn_k_norm.weight"]
    if arch == "gemma2":  # llama.cpp's fixed pattern: layer 0 slides
        hparams |= dict(sliding_window=4, sliding_layers=[True, False],
                        attn_logit_softcapping=20.0, final_logit_softcapping=15.0)
    if arch == "gemma3":  # with 2 layers, both slide (llama.cpp: 5 of every 6)
        hparams |= dict(sliding_window=4, sliding_layers=[True, True],
                        rope_freq_base_swa=10000.0)
    return Checkpoint(arch, hparams, weights, tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen3", "phi3", "gemma2", "gemma3"])
def test_llama_cpp_runs_exported_architectures_like_omnitensor(tmp_path: Path, arch: str) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    pytest.importorskip("omnitensor_backend_ref")
    # NOTE: llama.cpp gives a model *named* like Phi-3 special handling of Phi-3's own tokens,
    # which this character vocabulary does not have: the file gets a neutral general.name.
    path = export_gguf(_checkpoint(arch), tmp_path / f"{arch}.gguf", name="tiny")
    ours = load_model(path, backend="ref")
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=2, use_mmap=False,
                          verbose=False)
    for prompt in ("hello world", "the cat sat on the mat", "a"):
        ids = ours.tokenizer.encode(prompt)
        want = ours.generate(prompt, max_new_tokens=8).token_ids
        got: list[int] = []
        for token in llm.generate(ids, temp=0.0, top_k=1, reset=True):
            if token == llm.token_eos() or len(got) >= len(want):
                break
            got.append(token)
        assert got == want, prompt
