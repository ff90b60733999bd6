"""``omnitensor generate [MODEL] PROMPT``: stream a causal LM's continuation, then its timings.

MODEL is a name (``char-gpt``, ``smollm2``, one of `omnitensor models`), a ``.gguf`` file or a
Hugging Face directory; omitted, it is the small character-level adder shipped inside the
package. The text goes to stdout as it is generated; load, compile, prompt and decode timings go
to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import OmnitensorError
from ..runtime.names import SHIPPED
from ..runtime.names import resolve_model as _resolve
from ._common import (
    Timings,
    add_backend_arg,
    add_sampling_args,
    busy,
    check_sampling_args,
    load_named,
    load_progress,
    sampling_from_args,
)

__all__ = ["DEFAULT_MODEL", "SHIPPED_MODELS", "load_progress", "register", "resolve_model",
           "run", "shipped_model"]

#: Names of the models shipped as package data -> their path inside ``omnitensor/data``.
SHIPPED_MODELS = SHIPPED
DEFAULT_MODEL = "char-gpt"


def shipped_model(name: str = DEFAULT_MODEL) -> Path:
    """The path of a model shipped inside the omnitensor package (``char-gpt[.gguf]``).

    Raises:
        OmnitensorError: an unknown name, or package data missing from the installation.
    """
    if name not in SHIPPED:
        raise OmnitensorError(f"no shipped model {name!r} (known: {', '.join(SHIPPED)})")
    return _resolve(name)


def resolve_model(model: str | None) -> Path:
    """A model argument as a path (None is the shipped char-gpt); see `runtime.names`."""
    return _resolve(DEFAULT_MODEL if model is None else model)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``generate`` verb."""
    parser = subparsers.add_parser(
        "generate",
        usage="omnitensor generate [-h] [options] [MODEL] PROMPT",
        help="continue a prompt with a causal LM (default model: the shipped char-gpt adder)",
        description="Stream the continuation of PROMPT by MODEL, then the load, compile, prompt "
        "and decode timings on stderr. MODEL is a name from `omnitensor models` (char-gpt, "
        "smollm2, ...), a .gguf file or a Hugging Face directory; default: the shipped "
        "char-gpt, which adds numbers: omnitensor generate char-gpt \"12+34=\".",
    )
    parser.add_argument("words", nargs="+", metavar="[MODEL] PROMPT",
                        help="optional model name or path, then the prompt (quote it)")
    add_sampling_args(parser, max_new_default="64, fewer if the context is shorter")
    add_backend_arg(parser)
    parser.add_argument("--no-echo", action="store_true", help="do not print the prompt first")
    parser.add_argument("--chat", action="store_true",
                        help="wrap PROMPT as a user message in the model's chat template")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the model, stream the continuation, report timings; returns the exit status."""
    from ..models.compiled import bucket
    from ..runtime import CausalLM
    from ..runtime.batching import BatchEngine

    words: list[str] = args.words
    if len(words) > 2:
        print(f"omnitensor generate: expected [MODEL] PROMPT (got {len(words)} arguments); "
              "quote the prompt", file=sys.stderr)
        return 2
    model_arg, prompt = (DEFAULT_MODEL, words[0]) if len(words) == 1 else (words[0], words[1])
    try:
        check_sampling_args(args)
        model, load_s = load_named(model_arg, args.backend)
        if not isinstance(model, CausalLM):
            print(f"omnitensor generate: {model_arg} is an encoder, not a causal LM; use "
                  "`omnitensor embed`", file=sys.stderr)
            return 2
        text = model.apply_chat_template([{"role": "user", "content": prompt}]) if (
            args.chat) else prompt
        ids = list(model.tokenizer.encode(text))
        context = model.model.context_length
        room = context - bucket(len(ids)) + 1
        if len(ids) >= context or room < 1:
            raise OmnitensorError(f"the prompt has {len(ids)} tokens: too long for the context "
                                  f"of {context} tokens")
        max_new = args.max_new_tokens if args.max_new_tokens is not None else min(64, room)
        params = sampling_from_args(args, max_new)
        capacity = min(context, max(bucket(bucket(len(ids)) + max_new),
                                    bucket(len(ids)) + max_new - 1))
        engine = BatchEngine(model, max_batch=1, capacity=capacity)
        handle = engine.submit(ids, params)
        if not args.no_echo:
            sys.stdout.write(prompt if not args.chat else "")
            sys.stdout.flush()
        timings = Timings(load_s)
        with busy("compiling (first run of this model shape)") as first:
            for event in engine.run(handle):
                if event.token is not None:
                    timings.first_token()
                    first.set()
                sys.stdout.write(event.text)
                sys.stdout.flush()
        timings.finish()
        if event.finish_reason == "error":
            raise OmnitensorError(event.error or "generation failed")
    except OmnitensorError as exc:
        print(f"omnitensor generate: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write("\n")
    sys.stdout.flush()
    print(timings.report(len(ids), handle.completion_tokens, model.model.backend.name),
          file=sys.stderr)
    return 0
