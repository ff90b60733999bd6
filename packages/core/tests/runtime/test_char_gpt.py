"""The shipped char-gpt adder (both formats, the CLI) and one compile per decode bucket."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.cli.generate import resolve_model, shipped_model
from omnitensor.cli.main import main
from omnitensor.io.safetensors import write_safetensors
from omnitensor.io.tokenizer import char_tokenizer
from omnitensor.runtime import CausalLM, load_model
from omnitensor.tensor.realize import stats


@pytest.fixture(autouse=True)
def _ref_backend() -> Iterator[None]:
    pytest.importorskip("omnitensor_backend_ref")
    with ot.use_backend("ref"):
        yield


def _heldout(count: int) -> list[tuple[int, int]]:
    """Problems the example held out of training (recorded in the shipped config.json)."""
    config = json.loads((shipped_model() / "config.json").read_text())
    return [tuple(p) for p in config["omnitensor_training"]["heldout_sample"][:count]]


@pytest.fixture(scope="module")
def models() -> dict[str, CausalLM]:
    with ot.use_backend("ref"):
        return {fmt: load_model(shipped_model(name), "ref")
                for fmt, name in (("hf", "char-gpt"), ("gguf", "char-gpt.gguf"))}


def test_shipped_model_files() -> None:
    directory = shipped_model()
    names = {p.name for p in directory.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "char-gpt.gguf"} <= names
    assert sum(p.stat().st_size for p in directory.iterdir()) < 5_000_000
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    assert resolve_model(None) == directory
    assert resolve_model("char-gpt.gguf") == directory / "char-gpt.gguf"


@pytest.mark.parametrize("fmt", ["hf", "gguf"])
def test_shipped_model_adds_heldout_problems(models: dict[str, CausalLM], fmt: str) -> None:
    # The example reports 88.7% exact match on 512 held-out problems; these 32 are among them.
    problems = _heldout(32)
    gens = models[fmt].generate([f"{a}+{b}=" for a, b in problems], 4, temperature=0)
    right = sum(g.text == str(a + b) for g, (a, b) in zip(gens, problems, strict=True))
    assert right >= 24, f"{fmt}: {right}/32 held-out problems right"
    assert all(g.stop_reason == "eos" for g in gens)


def test_both_formats_agree(models: dict[str, CausalLM]) -> None:
    prompts = [f"{a}+{b}=" for a, b in _heldout(32)]
    hf = [g.token_ids for g in models["hf"].generate(prompts, 4)]
    gguf = [g.token_ids for g in models["gguf"].generate(prompts, 4)]
    assert hf == gguf
    assert models["hf"].tokenizer.encode(prompts[0]) == models["gguf"].tokenizer.encode(
        prompts[0])


def _solved(models: dict[str, CausalLM], count: int) -> list[tuple[int, int]]:
    """Held-out problems the model answers right (most of them; see above)."""
    problems = _heldout(32)
    gens = models["hf"].generate([f"{a}+{b}=" for a, b in problems], 4)
    solved = [(a, b) for g, (a, b) in zip(gens, problems, strict=True) if g.text == str(a + b)]
    assert len(solved) >= count
    return solved[:count]


def test_cli_generate_prints_the_answer(models: dict[str, CausalLM],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _solved(models, 1)[0]
    assert main(["generate", "char-gpt", f"{a}+{b}=", "--backend", "ref"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"{a}+{b}={a + b}"
    assert "prompt: " in captured.err and "decode" in captured.err and "load" in captured.err
    assert "WARNING" not in captured.err


def test_cli_generate_default_model_and_gguf(models: dict[str, CausalLM],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _solved(models, 2)[1]
    assert main(["generate", f"{a}+{b}=", "--backend", "ref", "--no-echo"]) == 0
    assert capsys.readouterr().out.strip() == str(a + b)
    assert main(["generate", "char-gpt.gguf", f"{a}+{b}=", "--backend", "ref"]) == 0
    assert capsys.readouterr().out.strip() == f"{a}+{b}={a + b}"


def test_cli_generate_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["generate", str(tmp_path / "missing"), "1+1=", "--backend", "ref"]) == 1
    err = capsys.readouterr().err
    assert "no model file, directory or name" in err and "char-gpt" in err
    assert main(["generate", "char-gpt", "1+1=", "--max-new-tokens", "100",
                 "--backend", "ref"]) == 1
    assert "context" in capsys.readouterr().err
    # a prompt longer than the context is an error, not a silent echo
    assert main(["generate", "char-gpt", "1+" * 40, "--backend", "ref"]) == 1
    captured = capsys.readouterr()
    assert "too long" in captured.err and captured.out == ""
    # sampling flags are checked before anything loads (the missing model is never reached)
    assert main(["generate", str(tmp_path / "missing"), "1+1=", "--top-p", "2"]) == 1
    assert "top_p" in capsys.readouterr().err


def test_cli_generate_stop_text_is_not_printed(models: dict[str, CausalLM],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _solved(models, 1)[0]
    answer = str(a + b)
    assert main(["generate", "char-gpt", f"{a}+{b}=", "--stop", answer[-1], "--no-echo",
                 "--backend", "ref"]) == 0
    assert capsys.readouterr().out.strip() == answer[:-1]


def test_cli_embed_rejects_a_causal_lm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["embed", "char-gpt", "1+1=", "--backend", "ref"]) == 2
    assert "not an encoder" in capsys.readouterr().err


# --- one compile per bucket ---------------------------------------------------------------------


def _tiny_gpt2(directory: Path, *, context: int = 512, dim: int = 16, seed: int = 0) -> Path:
    """A random 1-layer GPT-2 in the Hugging Face layout; no EOS, so it never stops early."""
    rng = np.random.default_rng(seed)
    tokenizer = char_tokenizer("abcdefgh ")
    vocab = tokenizer.vocab_size

    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    weights = {"transformer.wte.weight": mat(vocab, dim),
               "transformer.wpe.weight": mat(context, dim),
               "transformer.ln_f.weight": 1 + mat(dim), "transformer.ln_f.bias": mat(dim)}
    h = "transformer.h.0."
    for name, shape in (("ln_1", None), ("ln_2", None), ("attn.c_attn", (dim, 3 * dim)),
                        ("attn.c_proj", (dim, dim)), ("mlp.c_fc", (dim, 4 * dim)),
                        ("mlp.c_proj", (4 * dim, dim))):
        out = shape[1] if shape else dim
        weights[h + name + ".weight"] = mat(*shape) if shape else 1 + mat(dim)
        weights[h + name + ".bias"] = mat(out)
    directory.mkdir()
    write_safetensors(directory / "model.safetensors", weights)
    (directory / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": vocab,
        "n_positions": context, "n_embd": dim, "n_layer": 1, "n_head": 2}))
    tokenizer.save(directory / "tokenizer.json")
    return directory


def test_256_decode_tokens_cost_one_compile_per_bucket(tmp_path: Path) -> None:
    lm = load_model(_tiny_gpt2(tmp_path / "tiny"), "ref")
    before = stats.snapshot()
    gen = lm.generate("abc", 256, temperature=0)
    compiles = stats.compiles - before["compiles"]
    assert len(gen.token_ids) == 256
    # One prefill program (length bucket 4) and one decode program (length 1), each possibly
    # split into a hoisted parameter prelude and its main part: never one per token.
    assert lm.model._prefill.traces == 2
    assert 2 <= compiles <= 4
    again = stats.compiles
    lm.generate("abd", 256, temperature=0)  # same buckets: nothing compiles
    assert stats.compiles == again
    assert lm.model._prefill.traces == 2


# --- embed --------------------------------------------------------------------------------------


def _tiny_bert(directory: Path) -> Path:
    """A random 1-layer BERT saved by transformers, with a small WordPiece vocabulary."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch").manual_seed(0)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "a", "b", "c"]
    directory.mkdir()
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=32)
    transformers.BertModel(config).save_pretrained(directory)
    tokenizer = transformers.BertTokenizerFast(str(directory / "vocab.txt"))
    tokenizer.save_pretrained(directory)
    return directory


def test_cli_embed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = str(_tiny_bert(tmp_path / "bert"))
    assert main(["embed", model, "hello world", "a b c", "--backend", "ref"]) == 0
    out = capsys.readouterr().out
    assert "shape (2, 16)" in out and "'hello world': [" in out
    assert main(["embed", model, "hello", "--json", "--backend", "ref"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["shape"] == [1, 16] and len(data["embeddings"][0]) == 16
    direct = load_model(model, "ref").embed(["hello"])
    np.testing.assert_allclose(np.asarray(data["embeddings"]), direct, rtol=1e-5, atol=1e-6)


def test_transformers_loads_the_shipped_directory(models: dict[str, CausalLM]) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.GPT2LMHeadModel.from_pretrained(shipped_model()).eval()
    lm = models["hf"]
    for a, b in _heldout(4):
        ids = lm.tokenizer.encode(f"{a}+{b}=")
        t = len(ids)
        logits, _ = lm.model.step(np.asarray([ids]), np.arange(t)[None],
                                  np.ones((1, 1, 1, t), bool), 0, lm.model.new_cache(1, t),
                                  np.asarray([t - 1]))
        with torch.no_grad():
            expected = hf(torch.tensor([ids])).logits[0, -1].numpy()
        np.testing.assert_allclose(logits.numpy()[0], expected, rtol=1e-4, atol=1e-4)


def test_prompt_filling_the_last_bucket_compiles_once_for_every_length(
        models: dict[str, CausalLM]) -> None:
    # issue #19: the KV capacity followed max_new_tokens here (29 compiles for n = 1..15)
    lm = models["hf"]
    prompt = "1" * 17  # fills the last length bucket: left padding takes slots past the context
    longest = lm.generate(prompt, 15, temperature=0)
    before = stats.compiles
    outputs = [lm.generate(prompt, n, temperature=0) for n in range(1, 16)]
    assert stats.compiles - before <= 2  # at most the context-sized programs of n = 1
    for n, out in enumerate(outputs, start=1):
        assert out.token_ids == longest.token_ids[:n]
