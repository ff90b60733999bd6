"""GGUF export round trips: the exported file loads and answers like the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from omnitensor.models import export_gguf, open_checkpoint
from omnitensor.runtime import load_model

CHAR_GPT = Path(__file__).parents[2] / "src" / "omnitensor" / "data" / "char-gpt"
PROMPTS = ["12+34=", "7+8=", "40+2="]


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0"])
def test_exported_char_gpt_answers_like_the_source(tmp_path: Path, dtype: str) -> None:
    pytest.importorskip("omnitensor_backend_ref")
    source = load_model(CHAR_GPT, backend="ref")
    path = export_gguf(open_checkpoint(CHAR_GPT), tmp_path / f"char-{dtype}.gguf", dtype=dtype)
    exported = load_model(path, backend="ref")
    for prompt in PROMPTS:
        want = source.generate(prompt, max_new_tokens=4).text
        got = exported.generate(prompt, max_new_tokens=4).text
        assert got == want, (dtype, prompt, got, want)
