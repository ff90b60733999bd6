"""Tiny randomly initialized Hugging Face models against omnitensor's `load_model`.

GPT-2, Llama and Qwen2 (saved with ``save_pretrained``) give logits within 1e-4 and identical
greedy continuations; a BERT encoder gives the same mean-pooled, normalized embeddings; the Llama
written as GGUF F32/F16/Q8_0 the way llama.cpp's converter writes it (the ``gguf`` package's
writer and quantizer, llama's rotary q/k row permutation, a SentencePiece vocabulary) gives the
same greedy tokens (F32/F16) and close logits (Q8_0). Runs in the `parity` tox environment, where
a skip is a failure.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.io.tokenizer import Tokenizer, char_tokenizer
from omnitensor.runtime import CausalLM, Encoder, load_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

# 29 characters + <s> + </s> = 31 ids; Llama's GGUF vocabulary below has 32 (unk, bos, eos, "▁",
# 26 letters, "." and ","), so the models get 32 rows and the char vocabulary leaves id 31 unused.
ALPHABET = string.ascii_lowercase + " .,"
VOCAB = 32
BOS, EOS = 29, 30  # char_tokenizer ids of <s> and </s>
PROMPTS = ("hello world", "the cat sat on", "a")
NEW_TOKENS = 10
ATOL = 1e-4


def _char_tokenizer() -> Tokenizer:
    return char_tokenizer(ALPHABET, bos="<s>", eos="</s>")


def _save(model: Any, path: Path, tokenizer: Tokenizer | None = None) -> Path:
    model.save_pretrained(path)
    (tokenizer or _char_tokenizer()).save(path / "tokenizer.json")
    return path


def _config_kwargs() -> dict[str, Any]:
    # A wide initializer spreads the logits, so greedy choices are not decided by rounding.
    return dict(vocab_size=VOCAB, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=None,
                initializer_range=0.3)


def _llama(tie: bool = False) -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=tie, **_config_kwargs())
    return transformers.LlamaForCausalLM(config).eval()  # eval(): no dropout


def _qwen2() -> Any:
    torch.manual_seed(1)
    config = transformers.Qwen2Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
        **_config_kwargs())
    model = transformers.Qwen2ForCausalLM(config).eval()
    with torch.no_grad():  # HF initializes biases to zero: give q/k/v biases real values
        for name, p in model.named_parameters():
            if name.endswith("proj.bias"):
                p.normal_(0.0, 0.3)
    return model


def _gpt2() -> Any:
    torch.manual_seed(2)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=64,
                                     **_config_kwargs())
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # LayerNorm starts at (1, 0) and biases at 0: make them matter
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def _qwen3() -> Any:
    torch.manual_seed(4)
    config = transformers.Qwen3Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, **_config_kwargs())
    model = transformers.Qwen3ForCausalLM(config).eval()
    with torch.no_grad():  # q/k norms start at one: make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


def _mistral() -> Any:
    torch.manual_seed(5)
    config = transformers.MistralConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=10000.0, sliding_window=4, **_config_kwargs())
    return transformers.MistralForCausalLM(config).eval()


def _phi3() -> Any:
    torch.manual_seed(6)
    config = transformers.Phi3Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_theta=10000.0, sliding_window=None, **_config_kwargs())
    return transformers.Phi3ForCausalLM(config).eval()


def _llama3_scaled() -> Any:
    """Llama 3.1's rotary scaling (small original context so that it changes the frequencies)."""
    torch.manual_seed(9)
    config = transformers.LlamaConfig(
        hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 16},
        **_config_kwargs())
    return transformers.LlamaForCausalLM(config).eval()


def _gemma_norms(model: Any) -> Any:
    with torch.no_grad():  # Gemma's norms start at zero (scale 1 + w): make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, 0.3)
    return model


def _gemma2() -> Any:
    torch.manual_seed(7)
    config = transformers.Gemma2Config(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
        max_position_embeddings=64, rms_norm_eps=1e-6, sliding_window=4,
        attn_logit_softcapping=2.0, final_logit_softcapping=5.0, **_config_kwargs())
    return _gemma_norms(transformers.Gemma2ForCausalLM(config).eval())


def _gemma3() -> Any:
    torch.manual_seed(8)
    config = transformers.Gemma3TextConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
        max_position_embeddings=64, rms_norm_eps=1e-6, sliding_window=4,
        **_config_kwargs())  # layers 0-4 slide (local rotary base), layer 5 is global
    return _gemma_norms(transformers.Gemma3ForCausalLM(config).eval())


CAUSAL: dict[str, Callable[[], Any]] = {"llama": _llama, "qwen2": _qwen2, "gpt2": _gpt2,
                                        "qwen3": _qwen3, "mistral": _mistral, "phi3": _phi3,
                                        "gemma2": _gemma2, "gemma3": _gemma3,
                                        "llama3": _llama3_scaled}


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    root = tmp_path_factory.mktemp("hf")
    return {name: (make(), _save(make(), root / name)) for name, make in CAUSAL.items()}


def _hf_logits(model: Any, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()  # (T, V)


def _hf_greedy(model: Any, ids: list[int], new_tokens: int, eos: int | None) -> list[int]:
    """transformers' greedy continuation, cut at (and without) the first EOS."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                             dtype=torch.long), max_new_tokens=new_tokens, do_sample=False,
                             eos_token_id=eos, pad_token_id=0)
    tokens = out[0, len(ids):].tolist()
    return tokens[: tokens.index(eos)] if eos in tokens else tokens


def _ot_logits(lm: CausalLM, ids: list[int]) -> np.ndarray:
    """omnitensor's logits at every prompt position (one prefill per position, same plan)."""
    model = lm.model
    t = len(ids)
    tokens = np.asarray([ids])
    positions = np.arange(t)[None, :]
    rows = []
    for last in range(t):
        cache = model.new_cache(1, 64)
        key_mask = np.ones((1, 1, 1, 64), np.bool_)
        logits, _ = model.step(tokens, positions, key_mask, 0, cache, np.asarray([last]))
        rows.append(logits.numpy()[0])
    return np.stack(rows)


@pytest.mark.parametrize("arch", sorted(CAUSAL))
def test_hf_logits_match(arch: str, hf_dirs: dict[str, tuple[Any, Path]]) -> None:
    model, path = hf_dirs[arch]
    lm = load_model(path, "ref")
    assert isinstance(lm, CausalLM)
    assert lm.model.arch == {"mistral": "llama", "llama3": "llama"}.get(arch, arch)
    for prompt in PROMPTS:
        ids = lm.tokenizer.encode(prompt)
        assert ids[0] == BOS
        expected = _hf_logits(model, ids)
        assert np.abs(expected).max() > 0.5  # the comparison is not between near-zeros
        np.testing.assert_allclose(_ot_logits(lm, ids), expected, atol=ATOL, rtol=ATOL,
                                   err_msg=f"{arch} {prompt!r}")


@pytest.mark.parametrize("arch", sorted(CAUSAL))
def test_hf_greedy_continuations_match(arch: str, hf_dirs: dict[str, tuple[Any, Path]]) -> None:
    model, path = hf_dirs[arch]
    lm = load_model(path, "ref")
    for prompt in PROMPTS:
        ids = lm.tokenizer.encode(prompt)
        gen = lm.generate(prompt, max_new_tokens=NEW_TOKENS, temperature=0)
        expected = _hf_greedy(model, ids, NEW_TOKENS, EOS)
        assert gen.token_ids == expected, f"{arch} {prompt!r}"
        assert gen.prompt_tokens == len(ids)
        assert gen.stop_reason == ("eos" if len(expected) < NEW_TOKENS else "length")
        assert gen.text == lm.tokenizer.decode(expected)


@pytest.mark.parametrize("arch", sorted(CAUSAL))
def test_batched_prompts_match_one_by_one(arch: str,
                                          hf_dirs: dict[str, tuple[Any, Path]]) -> None:
    _, path = hf_dirs[arch]
    lm = load_model(path, "ref")
    batched = lm.generate(list(PROMPTS), max_new_tokens=NEW_TOKENS)
    assert len(batched) == len(PROMPTS)
    for prompt, gen in zip(PROMPTS, batched, strict=True):
        single = lm.generate(prompt, max_new_tokens=NEW_TOKENS)
        assert gen.token_ids == single.token_ids, f"{arch} {prompt!r}"
        assert gen.text == single.text


@pytest.mark.parametrize("arch", ["qwen3", "mistral", "phi3", "gemma2", "gemma3", "llama3"])
def test_exported_gguf_matches_transformers(arch: str, hf_dirs: dict[str, tuple[Any, Path]],
                                            tmp_path: Path) -> None:
    """The same model through GGUF (llama.cpp's names and metadata keys) gives the same logits."""
    from omnitensor.io.gguf import read_gguf
    from omnitensor.models import export_gguf, open_checkpoint

    model, path = hf_dirs[arch]
    gguf_path = export_gguf(open_checkpoint(path), tmp_path / f"{arch}.gguf")
    metadata = read_gguf(gguf_path).metadata
    if arch == "qwen3":
        assert metadata["qwen3.attention.key_length"] == 16
        assert "blk.0.attn_q_norm.weight" in read_gguf(gguf_path).tensor_names
    elif arch == "mistral":
        assert metadata["llama.attention.sliding_window"] == 4
    elif arch == "llama3":  # written as llama.cpp's converter does: per-frequency divisors
        factors = read_gguf(gguf_path).load("rope_freqs.weight")
        assert factors.shape == (16,) and factors.max() > 1.5
    lm = load_model(gguf_path, "ref")
    for prompt in PROMPTS:
        ids = lm.tokenizer.encode(prompt)
        np.testing.assert_allclose(_ot_logits(lm, ids), _hf_logits(model, ids), atol=ATOL,
                                   rtol=ATOL, err_msg=f"{arch} {prompt!r}")


def test_eos_stops_like_transformers(tmp_path: Path) -> None:
    """With the model's own first greedy token declared EOS, both stop at once."""
    model = _llama()
    ids = _char_tokenizer().encode("hello")
    first = _hf_greedy(model, ids, 1, None)[0]
    # tokenizer.json has no EOS id: generation_config.json / config.json name it
    model.config.eos_token_id = model.generation_config.eos_token_id = first
    lm = load_model(_save(model, tmp_path / "m"), "ref")
    assert lm.tokenizer.eos_id == first
    gen = lm.generate("hello", max_new_tokens=5)
    assert gen.token_ids == _hf_greedy(model, ids, 5, first) == []
    assert gen.stop_reason == "eos" and gen.text == ""


# --- GGUF, the way llama.cpp's converter writes it ------------------------------------------

SPIECE = "\u2581"
GGUF_TOKENS = ["<unk>", "<s>", "</s>", SPIECE, *string.ascii_lowercase, ".", ","]


def _llama_cpp_permute(w: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """``LlamaModel.permute`` from llama.cpp's convert_hf_to_gguf.py, verbatim in numpy."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _gguf_name(hf_name: str) -> str:
    if hf_name in _GGUF_NAMES:
        return _GGUF_NAMES[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)  # model.layers.{i}.<rest>
    return f"blk.{layer}.{_GGUF_NAMES[rest]}"


def _write_llama_gguf(model: Any, path: Path, ftype: str) -> Path:
    """Write `model` as llama.cpp's converter would, with tensors in `ftype` (f32/f16/q8_0)."""
    qtype = gguf.GGMLQuantizationType
    config = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
    writer.add_rope_freq_base(theta)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(VOCAB)
    writer.add_file_type({"f32": 0, "f16": 1, "q8_0": 7}[ftype])
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(GGUF_TOKENS)
    writer.add_token_scores([0.0] * 3 + [-float(i) for i in range(len(GGUF_TOKENS) - 3)])
    writer.add_token_types([2, 3, 3] + [1] * (len(GGUF_TOKENS) - 3))
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    for hf_name, tensor in model.state_dict().items():
        data = tensor.detach().numpy().astype(np.float32)
        if hf_name.endswith("q_proj.weight"):
            data = _llama_cpp_permute(data, heads, heads)
        elif hf_name.endswith("k_proj.weight"):
            data = _llama_cpp_permute(data, heads, kv_heads)
        if data.ndim == 1 or ftype == "f32":  # norms stay f32, as in llama.cpp
            writer.add_tensor(_gguf_name(hf_name), data)
        elif ftype == "f16":
            writer.add_tensor(_gguf_name(hf_name), data.astype(np.float16))
        else:
            blocks = gguf.quants.quantize(data, qtype.Q8_0)
            writer.add_tensor(_gguf_name(hf_name), blocks, raw_dtype=qtype.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def gguf_llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Path]]:
    root = tmp_path_factory.mktemp("gguf")
    model = _llama()
    return model, {t: _write_llama_gguf(model, root / f"llama-{t}.gguf", t)
                   for t in ("f32", "f16", "q8_0")}


def test_gguf_tokenizer_from_metadata(gguf_llama: tuple[Any, dict[str, Path]]) -> None:
    lm = load_model(gguf_llama[1]["f32"], "ref")
    assert lm.tokenizer.bos_id == 1 and lm.tokenizer.eos_id == 2
    ids = lm.tokenizer.encode("hello world")
    assert ids == [1] + [GGUF_TOKENS.index(c) for c in "hello"] + [3] + [
        GGUF_TOKENS.index(c) for c in "world"]
    assert lm.tokenizer.decode(ids) == "hello world"


@pytest.mark.parametrize("ftype", ["f32", "f16"])
def test_gguf_greedy_matches_transformers(ftype: str,
                                          gguf_llama: tuple[Any, dict[str, Path]]) -> None:
    model, paths = gguf_llama
    lm = load_model(paths[ftype], "ref")
    assert isinstance(lm, CausalLM)
    for prompt in PROMPTS:
        ids = lm.tokenizer.encode(prompt)
        gen = lm.generate(prompt, max_new_tokens=NEW_TOKENS)
        assert gen.token_ids == _hf_greedy(model, ids, NEW_TOKENS, 2), f"{ftype} {prompt!r}"


def test_gguf_f32_logits_match_transformers(gguf_llama: tuple[Any, dict[str, Path]]) -> None:
    model, paths = gguf_llama
    lm = load_model(paths["f32"], "ref")
    ids = lm.tokenizer.encode("the cat sat on")
    np.testing.assert_allclose(_ot_logits(lm, ids), _hf_logits(model, ids), atol=ATOL,
                               rtol=ATOL)


def _dequantized_copy(model: Any) -> Any:
    """`model` with every matrix replaced by its Q8_0 round trip (gguf's own quantizer)."""
    qtype = gguf.GGMLQuantizationType.Q8_0
    copy = _llama()
    copy.load_state_dict(model.state_dict())
    with torch.no_grad():
        for p in copy.parameters():
            if p.ndim == 2:
                blocks = gguf.quants.quantize(p.numpy(), qtype)
                p.copy_(torch.from_numpy(gguf.quants.dequantize(blocks, qtype).reshape(p.shape)))
    return copy.eval()


@pytest.mark.parametrize("quant_policy", ["auto", "dequantize"])
def test_gguf_q8_0_logits_close(quant_policy: str,
                                gguf_llama: tuple[Any, dict[str, Path]]) -> None:
    model, paths = gguf_llama
    lm = load_model(paths["q8_0"], "ref", quant_policy=quant_policy)
    ids = lm.tokenizer.encode("the cat sat on")
    got = _ot_logits(lm, ids)
    # Against the float model: Q8_0 keeps ~8 bits per weight, so the logits move by a few
    # percent of their range at most, and the argmax rarely changes.
    expected = _hf_logits(model, ids)
    error = np.abs(got - expected).max() / np.abs(expected).max()
    assert 0 < error < 0.05, error
    assert (got.argmax(-1) == expected.argmax(-1)).mean() >= 0.8
    # Against the same weights dequantized by gguf: the same computation, so f32 closeness.
    np.testing.assert_allclose(got, _hf_logits(_dequantized_copy(model), ids), atol=ATOL,
                               rtol=ATOL)


# --- BERT encoder ------------------------------------------------------------------------------


def _bert_tokenizer() -> Any:
    """A WordPiece tokenizer.json like bert-base's (built with the tokenizers library)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    words = ["the", "cat", "sat", "on", "mat", "dog"]
    vocab = [*specials, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
             *words, ".", ","]
    backend = HFTokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)},
                                           unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    backend.add_special_tokens(specials)
    return backend, len(vocab)


SENTENCES = ["The cat sat on the mat.", "a dog", "Zebras quietly, quickly cross the road",
             "x"]


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    backend, vocab = _bert_tokenizer()
    torch.manual_seed(3)
    config = transformers.BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64, initializer_range=0.3)
    model = transformers.BertModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or "LayerNorm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    path = tmp_path_factory.mktemp("bert") / "bert"
    model.save_pretrained(path)
    backend.save(str(path / "tokenizer.json"))
    return model, path


def _hf_embed(model: Any, path: Path, texts: list[str]) -> np.ndarray:
    """sentence-transformers' recipe: mean over real tokens, then L2-normalize."""
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"),
                                               pad_token="[PAD]")
    batch = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


def test_bert_embeddings_match(bert_dir: tuple[Any, Path]) -> None:
    model, path = bert_dir
    encoder = load_model(path, "ref")
    assert isinstance(encoder, Encoder)
    got = encoder.embed(SENTENCES)
    assert got.shape == (len(SENTENCES), 32) and got.dtype == np.float32
    np.testing.assert_allclose(got, _hf_embed(model, path, SENTENCES), atol=ATOL, rtol=ATOL)
    np.testing.assert_allclose(np.linalg.norm(got, axis=-1), 1.0, atol=1e-5)


def test_bert_batched_equals_single(bert_dir: tuple[Any, Path]) -> None:
    encoder = load_model(bert_dir[1], "ref")
    together = encoder.embed(SENTENCES)
    one_by_one = np.concatenate([encoder.embed(s) for s in SENTENCES])
    small_batches = encoder.embed(SENTENCES, batch_size=3)
    np.testing.assert_allclose(together, one_by_one, atol=1e-5)
    np.testing.assert_allclose(together, small_batches, atol=1e-5)
