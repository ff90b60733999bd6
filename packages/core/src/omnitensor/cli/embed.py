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
from ._common import add_backend_arg, load_named, rate

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``embed`` verb."""
    parser = subparsers.add_parser(
        "embed",
        help="embed texts with an encoder model (pooled, normalized as the model says)",
        description="Embed each TEXT with MODEL (a .gguf file or a Hugging Face directory of "
        "an encoder such as a sentence-transformers BERT) and print the result.",
    )
    parser.add_argument("model", metavar="MODEL",
                        help="a name from `omnitensor models`, a .gguf file or a model directory")
    parser.add_argument("texts", nargs="+", metavar="TEXT", help="texts to embed")
    parser.add_argument("--json", action="store_true",
                        help="print {model, shape, embeddings} as JSON (full vectors)")
    parser.add_argument("--values", type=int, default=6, metavar="N",
                        help="values shown per text without --json (default 6)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N",
                        help="texts embedded per compiled call (default 32)")
    add_backend_arg(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the encoder, embed the texts, print; returns the exit status."""
    from ..runtime import Encoder
    from ..runtime.names import resolve_model
    from ..tensor.realize import stats

    if args.batch_size < 1:
        print(f"omnitensor embed: --batch-size must be >= 1 (got {args.batch_size})",
              file=sys.stderr)
        return 2
    try:
        path = resolve_model(args.model)
        model, load_s = load_named(args.model, args.backend)
        if not isinstance(model, Encoder):
            print(f"omnitensor embed: {args.model} is a causal LM, not an encoder; use "
                  "`omnitensor generate`", file=sys.stderr)
            return 2
        compile0 = stats.compile_seconds
        start = time.perf_counter()
        vectors = model.embed(args.texts, batch_size=args.batch_size)
        compile_s = stats.compile_seconds - compile0
        seconds = max(time.perf_counter() - start - compile_s, 0.0)
    except OmnitensorError as exc:
        print(f"omnitensor embed: {exc}", file=sys.stderr)
        return 1
    print(f"load {load_s:.2f} s | compile {compile_s:.2f} s | embed: "
          f"{rate(len(args.texts), seconds, 'texts')} | {model.model.backend.name} backend",
          file=sys.stderr)
    if args.json:
        json.dump({"model": str(path), "shape": list(vectors.shape),
                   "embeddings": vectors.tolist()}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"embeddings: shape {tuple(vectors.shape)}, {vectors.dtype}")
    for text, row in zip(args.texts, vectors, strict=True):
        shown = ", ".join(f"{v:+.4f}" for v in row[: args.values])
        more = ", ..." if row.shape[0] > args.values else ""
        label = text if len(text) <= 40 else text[:37] + "..."
        print(f"{label!r}: [{shown}{more}]")
    return 0
