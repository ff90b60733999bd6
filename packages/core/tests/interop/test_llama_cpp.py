"""llama.cpp loads omnitensor's GGUF files and answers the same (needs llama-cpp-python).

llama-cpp-python has no binary wheel and takes ~12 minutes to build on 2 cores, so CI does not
install it; the test skips there. Build it as ../shared/ANCHORS.md describes to run it.
"""

from __future__ import annotations

from pathlib import Path

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
