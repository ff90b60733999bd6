"""``omnitensor embed MODEL TEXT...``: embed texts with an encoder model (BERT, MiniLM ...).

Prints the embeddings' shape and the first values of each row, or everything as JSON with
``--json``. MODEL is a ``.gguf`` file or a Hugging Face directory of an encoder.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from ..errors import OmnitensorError
from .generate import load_progress, resolve_model

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``embed`` verb."""
    parser = subparsers.add_parser(
        "embed",
        help="embed texts with an encoder model (pooled, normalized as the model says)",
        description="Embed each TEXT with MODEL (a .gguf file or a Hugging Face directory of "
        "an encoder such as a sentence-transformers BERT) and print the result.",
    )
    parser.add_argument("model", metavar="MODEL", help="a .gguf file or a model directory")
    parser.add_argument("texts", nargs="+", metavar="TEXT", help="texts to embed")
    parser.add_argument("--json", action="store_true",
                        help="print {model, shape, embeddings} as JSON (full vectors)")
    parser.add_argument("--values", type=int, default=6, metavar="N",
                        help="values shown per text without --json (default 6)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N")
    parser.add_argument("--backend", default=None, metavar="NAME",
                        help="backend to run on (default: $OMNITENSOR_BACKEND or the best one)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the encoder, embed the texts, print; returns the exit status."""
    from ..runtime import Encoder, load_model

    try:
        path = resolve_model(args.model)
        model = load_model(path, args.backend, progress=load_progress(sys.stderr.isatty()))
        if not isinstance(model, Encoder):
            print(f"omnitensor embed: {path} is a causal LM, not an encoder; use "
                  "`omnitensor generate`", file=sys.stderr)
            return 2
        start = time.perf_counter()
        vectors = model.embed(args.texts, batch_size=args.batch_size)
        seconds = time.perf_counter() - start
    except OmnitensorError as exc:
        print(f"omnitensor embed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        json.dump({"model": str(path), "shape": list(vectors.shape),
                   "embeddings": vectors.tolist()}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"embeddings: shape {tuple(vectors.shape)}, {vectors.dtype}, "
          f"{len(args.texts) / seconds:.1f} texts/s on {model.model.backend.name}")
    for text, row in zip(args.texts, vectors, strict=True):
        shown = ", ".join(f"{v:+.4f}" for v in row[: args.values])
        more = ", ..." if row.shape[0] > args.values else ""
        label = text if len(text) <= 40 else text[:37] + "..."
        print(f"{label!r}: [{shown}{more}]")
    return 0
