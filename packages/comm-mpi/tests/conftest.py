"""Shared fixtures of the MPI tests: a tiny random BERT folder (no torch) and the ref backend.

Every test module except ``test_faults.py`` runs under ``mpiexec -n 2 python -m pytest``; each
rank runs the same tests, so collectives line up. Expected values are computed from every rank's
known inputs (a function of the rank), so the tests hold at any world size.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import distributed as dist

HIDDEN, LAYERS, HEADS, FFN, POSITIONS = 16, 2, 4, 32, 64
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS = ["the", "cat", "sat", "on", "mat", "dog", "query", ":"]
VOCAB = [*SPECIALS, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
         *WORDS, ".", ","]


@pytest.fixture(scope="session", autouse=True)
def _joined() -> Iterator[None]:
    if dist.detect_launch().multi_process:
        dist.init(timeout=300.0)  # generous: CI runs many environments on 2 cores
    yield


@pytest.fixture(autouse=True)
def _ref_backend() -> Iterator[None]:
    with ot.use_backend("ref"):
        yield


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(VOCAB)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    backend.add_special_tokens(SPECIALS)
    return str(backend.to_str())


def write_bert(path: Path) -> Path:
    """A tiny random BERT in the Hugging Face layout (mean pooling, seed 0)."""
    from omnitensor.io.safetensors import write_safetensors

    rng = np.random.default_rng(0)

    def mat(*shape: int, scale: float = 0.5) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": mat(len(VOCAB), HIDDEN),
         "embeddings.position_embeddings.weight": mat(POSITIONS, HIDDEN),
         "embeddings.token_type_embeddings.weight": mat(2, HIDDEN),
         "embeddings.LayerNorm.weight": 1 + mat(HIDDEN, scale=0.1),
         "embeddings.LayerNorm.bias": mat(HIDDEN, scale=0.1)}
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."
        for name, shape in (("attention.self.query", (HIDDEN, HIDDEN)),
                            ("attention.self.key", (HIDDEN, HIDDEN)),
                            ("attention.self.value", (HIDDEN, HIDDEN)),
                            ("attention.output.dense", (HIDDEN, HIDDEN)),
                            ("intermediate.dense", (FFN, HIDDEN)),
                            ("output.dense", (HIDDEN, FFN))):
            w[f"{p}{name}.weight"] = mat(*shape)
            w[f"{p}{name}.bias"] = mat(shape[0], scale=0.1)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{p}{norm}.weight"] = 1 + mat(HIDDEN, scale=0.1)
            w[f"{p}{norm}.bias"] = mat(HIDDEN, scale=0.1)
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FFN,
        "max_position_embeddings": POSITIONS, "vocab_size": len(VOCAB),
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "type_vocab_size": 2}))
    write_safetensors(path / "model.safetensors", w)
    (path / "tokenizer.json").write_text(_tokenizer_json())
    return path


@pytest.fixture(scope="session")
def shared_tmp() -> Path:
    """A folder every rank of this job sees (rank 0 picks it; same machine)."""
    import tempfile

    name = tempfile.mkdtemp(prefix="ot-dist-") if dist.rank() == 0 else None
    return Path(dist.communicator().broadcast_object(name))


@pytest.fixture(scope="session")
def bert(shared_tmp: Path) -> Path:
    """The tiny BERT folder, written by rank 0 into the shared folder."""
    folder = shared_tmp / "bert"
    if dist.rank() == 0:
        write_bert(folder)
    dist.barrier()
    return folder
