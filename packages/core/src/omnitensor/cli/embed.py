"""``omnitensor embed MODEL TEXT...``: embed texts with an encoder model (BERT, MiniLM ...).

Prints the embeddings' shape and the first values of each row, or everything as JSON with
``--json``. MODEL is a ``.gguf`` file or a Hugging Face directory of an encoder. A corpus comes
from ``--input FILE`` (one text per line) and goes to ``--output FILE.npy``; started by
``mpiexec -n N`` (or srun), the texts are split across the ranks and rank 0 writes them in input
order, with one progress bar.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

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
    parser.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed")
    parser.add_argument("--input", type=Path, metavar="FILE",
                        help="embed every line of FILE (UTF-8; empty lines skipped)")
    parser.add_argument("--output", type=Path, metavar="FILE.npy",
                        help="write the (N, C) float32 embeddings to FILE.npy (numpy format)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (shown with --input on a terminal or file)")
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
    from .. import distributed
    from ..runtime import Encoder
    from ..runtime.names import resolve_model
    from ..tensor.realize import stats

    if args.batch_size < 1:
        print(f"omnitensor embed: --batch-size must be >= 1 (got {args.batch_size})",
              file=sys.stderr)
        return 2
    texts = list(args.texts)
    if args.input is not None:
        try:
            texts += [line for line in args.input.read_text(encoding="utf-8").splitlines()
                      if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            print(f"omnitensor embed: cannot read --input {args.input}: {exc}", file=sys.stderr)
            return 2
    if not texts:
        print("omnitensor embed: no texts (give TEXT arguments or --input FILE)",
              file=sys.stderr)
        return 2
    sharded = distributed.detect_launch().multi_process
    try:
        path = resolve_model(args.model)
        rank = distributed.rank() if sharded else 0
        model, load_s = load_named(args.model, args.backend)
        if not isinstance(model, Encoder):
            print(f"omnitensor embed: {args.model} is a causal LM, not an encoder; use "
                  "`omnitensor generate`", file=sys.stderr)
            return 2
        compile0 = stats.compile_seconds
        start = time.perf_counter()
        bar = _progress_bar(rank == 0 and args.input is not None and not args.no_progress,
                            distributed.world_size() if sharded else 1)
        if sharded:
            vectors = distributed.embed(model, texts, batch_size=args.batch_size,
                                        progress=bar)
        else:
            vectors = _embed_local(model, texts, args.batch_size, bar)
        compile_s = stats.compile_seconds - compile0
        seconds = max(time.perf_counter() - start - compile_s, 0.0)
    except OmnitensorError as exc:
        print(f"omnitensor embed: {exc}", file=sys.stderr)
        return 1
    if vectors is None:  # another rank than 0: rank 0 reports and writes
        return 0
    ranks = f" | {distributed.world_size()} ranks" if sharded else ""
    print(f"load {load_s:.2f} s | compile {compile_s:.2f} s | embed: "
          f"{rate(len(texts), seconds, 'texts')} | {model.model.backend.name} backend{ranks}",
          file=sys.stderr)
    if args.output is not None:
        import numpy as np

        np.save(args.output, vectors)
        print(f"embeddings: shape {tuple(vectors.shape)}, {vectors.dtype} -> {args.output}")
        return 0
    if args.json:
        json.dump({"model": str(path), "shape": list(vectors.shape),
                   "embeddings": vectors.tolist()}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"embeddings: shape {tuple(vectors.shape)}, {vectors.dtype}")
    for text, row in zip(texts, vectors, strict=True):
        shown = ", ".join(f"{v:+.4f}" for v in row[: args.values])
        more = ", ..." if row.shape[0] > args.values else ""
        label = text if len(text) <= 40 else text[:37] + "..."
        print(f"{label!r}: [{shown}{more}]")
    return 0


def _progress_bar(enabled: bool, world: int) -> Any:
    """A ``(done, total)`` callback drawing one tqdm bar (rank 0's share when sharded)."""
    if not enabled:
        return None
    from tqdm import tqdm

    state: dict[str, Any] = {}
    desc = "embedding" if world == 1 else f"embedding (rank 0 of {world})"

    def progress(done: int, total: int) -> None:
        bar = state.get("bar")
        if bar is None:
            bar = state["bar"] = tqdm(total=total, desc=desc, unit="text", file=sys.stderr)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    return progress


def _embed_local(model: Any, texts: list[str], batch_size: int, progress: Any) -> Any:
    """`model.embed` in chunks of `batch_size` so that `progress` moves (one process)."""
    import numpy as np

    if progress is None:
        return model.embed(texts, batch_size=batch_size)
    parts = []
    for start in range(0, len(texts), batch_size):
        parts.append(model.embed(texts[start:start + batch_size], batch_size=batch_size))
        progress(min(start + batch_size, len(texts)), len(texts))
    return np.concatenate(parts)
