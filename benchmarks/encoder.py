"""Sentence-embedding figure of the speed table: omnitensor vs sentence-transformers/transformers.

Same weights, same run. A BERT with all-MiniLM-L6-v2's shape (6 layers, hidden 384, 12 heads,
intermediate 1536, vocab 30522) gets random weights (seed 0) and is saved with transformers'
``save_pretrained`` to a temporary folder, with a WordPiece ``tokenizer.json`` (built with the
``tokenizers`` library, the vocabulary padded to 30522 entries). 256 synthetic sentences of
about 23 tokens each (drawn from a word list, seed 1) are embedded in batches of 32 by:

- ``omni-<backend>``: `omnitensor.runtime.load_model(folder, backend).embed(...)` (mean pooling
  and L2 normalization come from the BERT spec);
- ``sentence-transformers``: ``Transformer(folder) + Pooling(384, "mean") + Normalize()`` built
  from the same folder, ``encode(..., batch_size=32)``;
- ``transformers``: ``AutoModel`` + the fast tokenizer, masked mean pooling and ``normalize`` in
  torch under ``inference_mode``.

Systems alternate round by round; medians are printed (what counts on a shared machine) with
sentences/s and the ratio to transformers, and every system's embeddings are checked against
transformers' (max abs difference). omnitensor pads a batch to a length bucket
(`encoder_bucket`: 21-25 tokens run as 22, 24 or 26); the torch systems pad to the longest
sentence of the batch.

    python benchmarks/encoder.py [--backends cpu[,ref]] [--rounds 5] [--small]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from figures import record, threads

SENTENCES = 256
BATCH = 32

FULL = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
        "intermediate_size": 1536, "vocab_size": 30522}
SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 128, "vocab_size": 1024}

WORDS = """the a of to and in is it you that he was for on are with as his they be at one have
this from or had by hot word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so these
her long make thing see him two has look more day could go come did number sound no most people
my over know water than call first who may down side been now find any new work part take get
place made live where after back little only round man year came show every good me give our
under name very through just form sentence great think say help low line differ turn cause much
mean before move right boy old too same tell does set three want air well also play small end
put home read hand port large spell add even land here must big high such follow act why ask men
change went light kind off need house picture try us again animal point mother world near build
self earth father head stand own page should country found answer school grow study still learn
plant cover food sun four between state keep eye never last let thought city tree cross farm
hard start might story saw far sea draw left late run while press close night real life few
north open seem together next white children begin got walk example ease paper group always
music those both mark often letter until mile river car feet care second book carry took science
eat room friend began idea fish mountain stop once base hear horse cut sure watch color face
wood main enough plain girl usual young ready above ever red list though feel talk bird soon
body dog family direct pose leave song measure door product black short numeral class wind
question happen complete ship area half rock order fire south problem piece told knew pass since
top whole king space heard best hour better true during hundred five remember step early hold
west ground interest reach fast verb sing listen six table travel less morning ten simple
several vowel toward war lay against pattern slow center love person money serve appear road map
rain rule govern pull cold notice voice unit power town fine certain fly fall lead cry dark
machine note wait plan figure star box noun field rest correct able pound done beauty drive
stood contain front teach week final gave green oh quick develop ocean warm free minute strong
special mind behind clear tail produce fact street inch multiply nothing course stay wheel full
force blue object decide surface deep moon island foot system busy test record boat common gold
possible plane stead dry wonder laugh thousand ago ran check game shape equate miss brought heat
snow tire bring yes distant fill east paint language among""".split()


# --- the model folder -----------------------------------------------------------------------


def _tokenizer(vocab_size: int) -> Any:
    """A bert-base-like WordPiece tokenizer whose vocabulary is padded to `vocab_size`."""
    import string

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = [*string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase)]
    vocab = [*specials, *letters, *dict.fromkeys(WORDS), ".", ","]
    vocab += [f"[unused{i}]" for i in range(vocab_size - len(vocab))]
    backend = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    backend.add_special_tokens(specials)
    return backend


def save_model(folder: Path, shape: dict[str, int]) -> Path:
    """Random BERT (seed 0) + tokenizer saved with ``save_pretrained``; returns its folder."""
    import torch
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = BertConfig(**shape, max_position_embeddings=512, torch_dtype="float32")
    model = BertModel(config).eval()  # the pooler is saved too (unused by mean pooling)
    hf = folder / "bert"
    model.save_pretrained(hf, safe_serialization=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=_tokenizer(shape["vocab_size"]),
                                   pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]",
                                   model_max_length=512)
    fast.save_pretrained(hf)  # tokenizer.json + tokenizer_config.json
    return hf


def make_sentences(n: int, seed: int = 1) -> list[str]:
    """`n` sentences of 18..22 words plus a period: 21..25 tokens with [CLS]/[SEP] (mean 23)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = [WORDS[i] for i in rng.integers(0, len(WORDS), int(rng.integers(18, 23)))]
        out.append(" ".join(words).capitalize() + ".")
    return out


# --- systems --------------------------------------------------------------------------------


class OmniSystem:
    """omnitensor: `load_model(folder, backend).embed(texts, batch_size=32)`."""

    def __init__(self, path: Path, backend: str) -> None:
        from omnitensor.runtime import load_model

        self.model = load_model(path, backend)

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        """(N, C) float32 embeddings of `texts`."""
        return np.asarray(self.model.embed(list(texts), batch_size=BATCH))


class SentenceTransformersSystem:
    """sentence-transformers: Transformer + mean Pooling + Normalize from the same folder."""

    def __init__(self, path: Path, hidden: int) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        try:
            from sentence_transformers.sentence_transformer import modules
        except ImportError:  # before 6.x the modules lived in sentence_transformers.models
            from sentence_transformers import models as modules
        transformer = modules.Transformer(str(path), max_seq_length=512)
        pooling = modules.Pooling(hidden, "mean")
        self.model = SentenceTransformer(modules=[transformer, pooling, modules.Normalize()],
                                         device="cpu").eval()
        self.torch = torch

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        """(N, C) float32 embeddings of `texts`."""
        return np.asarray(self.model.encode(list(texts), batch_size=BATCH, convert_to_numpy=True,
                                            show_progress_bar=False))


class TransformersSystem:
    """transformers: AutoModel + fast tokenizer, masked mean pooling and L2 normalization."""

    def __init__(self, path: Path) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, torch_dtype=torch.float32).eval()

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]:
        """(N, C) float32 embeddings of `texts`."""
        torch = self.torch
        chunks = []
        with torch.inference_mode():
            for start in range(0, len(texts), BATCH):
                batch = self.tokenizer(list(texts[start:start + BATCH]), padding=True,
                                       return_tensors="pt")
                hidden = self.model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                chunks.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(chunks)


# --- main -----------------------------------------------------------------------------------


def main() -> None:
    """Build the model, run the systems interleaved, print medians, ratios and agreement."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cpu",
                        help="omnitensor backends, comma-separated (e.g. cpu,ref)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--small", action="store_true",
                        help="a tiny BERT (2 layers, hidden 64) and 64 sentences for a quick run")
    parser.add_argument("--systems", default="omni,sentence-transformers,transformers",
                        help="which systems run (omni means every --backends entry)")
    args = parser.parse_args()
    shape = SMALL if args.small else FULL
    count = 64 if args.small else SENTENCES
    wanted = args.systems.split(",")
    import torch

    torch.set_num_threads(threads())
    texts = make_sentences(count)
    with tempfile.TemporaryDirectory(prefix="omni-encoder-") as tmp:
        t = time.perf_counter()
        path = save_model(Path(tmp), shape)
        print(f"BERT {shape} written in {time.perf_counter() - t:.1f} s; torch threads "
              f"{torch.get_num_threads()}")
        systems: dict[str, Any] = {}
        for name in wanted:
            makers: list[tuple[str, Any]] = []
            if name == "omni":
                makers = [(f"omni-{b}", lambda b=b: OmniSystem(path, b))
                          for b in args.backends.split(",")]
            elif name == "sentence-transformers":
                makers = [(name, lambda: SentenceTransformersSystem(path, shape["hidden_size"]))]
            elif name == "transformers":
                makers = [(name, lambda: TransformersSystem(path))]
            for label, make in makers:
                t = time.perf_counter()
                try:
                    systems[label] = make()
                except ImportError as error:
                    print(f"{label}: skipped ({error})")
                    continue
                print(f"{label}: loaded in {time.perf_counter() - t:.1f} s")
        tokenizer = _tokenizer(shape["vocab_size"])
        lengths = [len(e.ids) for e in tokenizer.encode_batch(texts)]
        print(f"{count} sentences, {np.mean(lengths):.1f} tokens on average "
              f"({min(lengths)}..{max(lengths)}), batches of {BATCH}")
        outputs: dict[str, np.ndarray[Any, Any]] = {}
        for name, system in systems.items():  # warm-up: compiles, first touch
            t = time.perf_counter()
            outputs[name] = system.embed(texts)
            print(f"{name}: warm-up (compile) {time.perf_counter() - t:.1f} s")
            record(f"compile.encoder.{name}.s", time.perf_counter() - t)
        seconds: dict[str, list[float]] = {n: [] for n in systems}
        for _ in range(args.rounds):
            for name, system in systems.items():
                t = time.perf_counter()
                outputs[name] = system.embed(texts)
                seconds[name].append(time.perf_counter() - t)
        base = "transformers" if "transformers" in systems else None
        ref = statistics.median(seconds[base]) if base else None
        print(f"\n{count} sentences, batch {BATCH}, {args.rounds} rounds interleaved (medians)")
        for name in systems:
            s = statistics.median(seconds[name])
            ratio = f"  {ref / s:5.2f}x transformers' speed" if ref else ""
            agree = ""
            if base and name != base:
                diff = float(np.abs(outputs[name] - outputs[base]).max())
                agree = f"  max |diff| vs transformers {diff:.2e}"
            print(f"  {name:22s} {s:8.3f} s  {count / s:8.1f} sentences/s{ratio}{agree}")
            record(f"encoder.{name}.sent_s", count / s)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
