"""``omnitensor generate [MODEL] PROMPT``: stream a causal LM's continuation, then its speed.

MODEL is a ``.gguf`` file or a Hugging Face directory; omitted (or ``char-gpt``) it is the small
character-level adder that ships inside the package (``char-gpt.gguf`` picks its GGUF copy).
The text goes to stdout as it is generated; the prompt/decode speeds go to stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import OmnitensorError

__all__ = ["SHIPPED_MODELS", "load_progress", "register", "resolve_model", "run",
           "shipped_model"]

#: Names of the models shipped as package data -> their path inside ``omnitensor/data``.
SHIPPED_MODELS = {"char-gpt": "char-gpt", "char-gpt.gguf": "char-gpt/char-gpt.gguf"}
DEFAULT_MODEL = "char-gpt"


def shipped_model(name: str = DEFAULT_MODEL) -> Path:
    """The path of a model shipped inside the omnitensor package.

    Args:
        name: ``"char-gpt"`` (the Hugging Face directory) or ``"char-gpt.gguf"`` (its GGUF).

    Raises:
        OmnitensorError: an unknown name, or package data missing from the installation.
    """
    if name not in SHIPPED_MODELS:
        raise OmnitensorError(f"generate: no shipped model {name!r} (known: "
                              f"{', '.join(SHIPPED_MODELS)})")
    path = Path(str(resources.files("omnitensor").joinpath("data", SHIPPED_MODELS[name])))
    if not path.exists():
        raise OmnitensorError(f"generate: the shipped model {name!r} is missing from this "
                              f"installation (expected {path}); reinstall omnitensor or run "
                              "examples/train_char_gpt.py")
    return path


def resolve_model(model: str | None) -> Path:
    """A model argument as a path: None or a shipped name gives the shipped model."""
    if model is None:
        return shipped_model()
    if model in SHIPPED_MODELS and not Path(model).exists():
        return shipped_model(model)
    return Path(model)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``generate`` verb."""
    parser = subparsers.add_parser(
        "generate",
        help="continue a prompt with a causal LM (default: the shipped char-gpt adder)",
        description="Stream the continuation of PROMPT by MODEL (a .gguf file or a Hugging Face "
        "directory; default: the shipped char-gpt, which adds numbers: "
        "omnitensor generate char-gpt \"12+34=\"), then prompt and decode tokens per second.",
    )
    parser.add_argument("words", nargs="+", metavar="[MODEL] PROMPT",
                        help="optional model path or shipped name, then the prompt")
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                        help="most tokens to generate (default: 64, fewer if the context is "
                        "shorter)")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T",
                        help="sampling temperature; 0 is greedy (default)")
    parser.add_argument("--top-k", type=int, default=None, metavar="K")
    parser.add_argument("--top-p", type=float, default=None, metavar="P")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="sampling seed")
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT",
                        help="stop when TEXT is generated (repeatable)")
    parser.add_argument("--backend", default=None, metavar="NAME",
                        help="backend to run on (default: $OMNITENSOR_BACKEND or the best one)")
    parser.add_argument("--no-echo", action="store_true", help="do not print the prompt first")
    parser.set_defaults(func=run)


def load_progress(enabled: bool) -> Any:
    """A ``progress(name, done, total)`` callback drawing a bar on stderr, or None."""
    if not enabled:
        return None
    from tqdm import tqdm

    bar: dict[str, Any] = {}

    def progress(name: str, done: int, total: int) -> None:
        if "bar" not in bar:
            bar["bar"] = tqdm(total=total, desc="loading", unit="tensor", file=sys.stderr,
                              leave=False)
        bar["bar"].update(1)
        if done == total:
            bar.pop("bar").close()

    return progress


def run(args: argparse.Namespace) -> int:
    """Load the model, stream the continuation, report speeds; returns the exit status."""
    from ..runtime import CausalLM, load_model

    words: list[str] = args.words
    if len(words) > 2:
        print(f"omnitensor generate: expected [MODEL] PROMPT (got {len(words)} arguments); "
              "quote the prompt", file=sys.stderr)
        return 2
    model_arg, prompt = (None, words[0]) if len(words) == 1 else (words[0], words[1])
    try:
        path = resolve_model(model_arg)
        model = load_model(path, args.backend, progress=load_progress(sys.stderr.isatty()))
        if not isinstance(model, CausalLM):
            print(f"omnitensor generate: {path} is an encoder, not a causal LM; use "
                  "`omnitensor embed`", file=sys.stderr)
            return 2
        prompt_tokens = len(model.tokenizer.encode(prompt))
        room = model.model.context_length - prompt_tokens
        max_new = args.max_new_tokens if args.max_new_tokens is not None else min(64, room)
        if not args.no_echo:
            sys.stdout.write(prompt)
            sys.stdout.flush()
        start = time.perf_counter()
        first = last = start
        count = 0
        for piece in model.stream(prompt, max_new, temperature=args.temperature,
                                  top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                                  stop=args.stop):
            last = time.perf_counter()
            if count == 0:
                first = last
            count += 1
            sys.stdout.write(piece)
            sys.stdout.flush()
    except OmnitensorError as exc:
        print(f"\nomnitensor generate: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write("\n")
    sys.stdout.flush()
    prefill = first - start if count else time.perf_counter() - start
    decode = last - first
    print(f"prompt: {prompt_tokens} tokens, {_rate(prompt_tokens, prefill)} | decode: {count} "
          f"tokens, {_rate(count - 1, decode)} | {model.model.backend.name} backend",
          file=sys.stderr)
    return 0


def _rate(tokens: int, seconds: float) -> str:
    if tokens <= 0 or seconds <= 0:
        return "- tok/s"
    return f"{tokens / seconds:.1f} tok/s"
