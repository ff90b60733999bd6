"""llama.cpp loads omnitensor's GGUF files and answers the same (needs llama-cpp-python).

llama-cpp-python has no binary wheel and takes ~12 minutes to build on 2 cores, so CI does not
install it; the test skips there. Build it as ../shared/ANCHORS.md describes to run it.
"""

from __future__ import annotations

from pathlib import Path

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
@pytest.mark.parametrize("dtype", ["shipped", "f32", "f16", "q8_0"])
def test_llama_cpp_answers_like_omnitensor(tmp_path: Path, dtype: str) -> None:
    pytest.importorskip("llama_cpp")
    pytest.importorskip("omnitensor_backend_ref")
    ours = load_model(CHAR_GPT, backend="ref")
    want = [ours.generate(p, max_new_tokens=4).text for p in PROMPTS]
    path = CHAR_GPT / "char-gpt.gguf" if dtype == "shipped" else export_gguf(
        open_checkpoint(CHAR_GPT), tmp_path / f"char-{dtype}.gguf", dtype=dtype)
    assert _llama_cpp_answers(path) == want
