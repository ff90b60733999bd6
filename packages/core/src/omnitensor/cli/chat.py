"""``omnitensor chat MODEL``: an interactive chat in the terminal.

Each turn goes through the model's own chat template; the answer streams as it is generated.
The conversation is kept while it fits the context: the oldest turns are dropped (with a
notice) when it would not. Commands: ``/reset`` (forget the conversation), ``/system TEXT``
(set the system message and start over), ``/exit`` (or Ctrl-D). Ctrl-C stops the current
answer and keeps the chat open.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ..errors import OmnitensorError
from ._common import (
    add_backend_arg,
    add_sampling_args,
    busy,
    check_sampling_args,
    load_named,
    sampling_from_args,
)

__all__ = ["Conversation", "register", "run"]

_HELP = "commands: /reset, /system TEXT, /exit (or Ctrl-D); Ctrl-C stops an answer"
_DEFAULT_ANSWER = 256


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``chat`` verb."""
    parser = subparsers.add_parser(
        "chat",
        usage="omnitensor chat [-h] [options] MODEL",
        help="chat with an instruct model in the terminal (streamed, multi-turn)",
        description="Chat with MODEL (a name from `omnitensor models` such as smollm2, a .gguf "
        "file or a Hugging Face directory) through its chat template. " + _HELP + ".",
    )
    parser.add_argument("model", metavar="MODEL", help="a model name or path with a chat "
                        "template")
    parser.add_argument("--system", default=None, metavar="TEXT",
                        help="system message (default: the template's own, if any)")
    parser.add_argument("--context", type=int, default=None, metavar="N",
                        help="tokens of conversation kept (default: the model's context "
                        "length, at most 4096)")
    add_sampling_args(parser, max_new_default=f"{_DEFAULT_ANSWER} per answer, fewer if the "
                      "context is full")
    add_backend_arg(parser)
    parser.set_defaults(func=run)


class Conversation:
    """Chat messages that fit a token budget (the oldest turns go first).

    Args:
        lm: the `CausalLM` (its chat template and tokenizer).
        fits: whether a prompt of so many tokens leaves the answer its room.
        system: an optional system message, always kept.
    """

    def __init__(self, lm: Any, fits: Callable[[int], bool], system: str | None = None
                 ) -> None:
        self.lm = lm
        self.fits = fits
        self.system = system
        self.turns: list[dict[str, str]] = []

    def messages(self, extra: list[dict[str, str]] | None = None) -> list[dict[str, str]]:
        """System message (if any), the kept turns, then `extra`."""
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + self.turns + (extra or [])

    def prompt_for(self, user: str) -> tuple[list[int], int]:
        """(token ids of the prompt for `user`'s message, turns dropped to make it fit).

        Raises:
            OmnitensorError: the message alone does not fit.
        """
        dropped = 0
        while True:
            text = self.lm.apply_chat_template(self.messages([{"role": "user",
                                                                 "content": user}]))
            ids = list(self.lm.tokenizer.encode(text))
            if self.fits(len(ids)):
                return ids, dropped
            if not self.turns:
                raise OmnitensorError(f"this message takes {len(ids)} tokens with the "
                                      "template: too long for the context")
            self.turns = self.turns[2:]  # one user message and its answer
            dropped += 1

    def add(self, user: str, answer: str) -> None:
        """Record one exchange."""
        self.turns += [{"role": "user", "content": user}, {"role": "assistant",
                                                          "content": answer}]


def _answer(engine: Any, ids: list[int], params: Any) -> tuple[str, str]:
    """Stream one answer to stdout; (text, finish reason). Ctrl-C cancels it."""
    handle = engine.submit(ids, params)
    parts: list[str] = []
    reason = "error"
    try:
        with busy("compiling (first answer at this length)") as first:
            while True:
                event = handle.get(timeout=0.1)  # a timeout keeps Ctrl-C responsive
                if event is None:
                    continue
                first.set()
                parts.append(event.text)
                sys.stdout.write(event.text)
                sys.stdout.flush()
                if event.finish_reason is not None:
                    reason = event.finish_reason
                    if event.error:
                        raise OmnitensorError(event.error)
                    break
    except KeyboardInterrupt:
        handle.cancel()
        for event in handle:  # the rest of what was already generated, then the end
            parts.append(event.text)
            sys.stdout.write(event.text)
        reason = "cancelled"
        sys.stdout.write(" [stopped]")
    sys.stdout.write("\n")
    sys.stdout.flush()
    return "".join(parts), reason


def run(args: argparse.Namespace) -> int:
    """The chat loop; returns the exit status."""
    from ..runtime import CausalLM
    from ..runtime.batching import BatchEngine

    try:
        check_sampling_args(args)
        if args.context is not None and args.context < 2:
            raise OmnitensorError(f"--context must be >= 2 (got {args.context})")
        lm, _ = load_named(args.model, args.backend)
        if not isinstance(lm, CausalLM):
            raise OmnitensorError(f"{args.model} is an encoder, not a causal LM")
        if not lm.tokenizer.chat_template:
            raise OmnitensorError(f"{args.model} has no chat template; use `omnitensor "
                                  "generate` for plain continuation")
        context = min(args.context or min(lm.model.context_length, 4096),
                      lm.model.context_length)
        answer = args.max_new_tokens or min(_DEFAULT_ANSWER, context // 4)
        if answer >= context:
            raise OmnitensorError(f"--max-new-tokens {answer} leaves no room for the prompt "
                                  f"in a context of {context}")
        engine = BatchEngine(lm, max_batch=1, capacity=context)
    except OmnitensorError as exc:
        print(f"omnitensor chat: {exc}", file=sys.stderr)
        return 1
    from ..models.compiled import bucket

    # the prompt takes its power-of-two length bucket in the cache; the answer comes after it
    chat = Conversation(lm, lambda n: bucket(n) + answer - 1 <= context, args.system)
    engine.start()
    _interruptible()
    print(f"chatting with {args.model} on {lm.model.backend.name}; {_HELP}", file=sys.stderr)
    try:
        return _loop(engine, chat, args, answer, context)
    finally:
        engine.shutdown()


def _interruptible() -> None:
    """Make Ctrl-C stop an answer even when the chat was started with SIGINT ignored.

    A process started as a background job of a non-interactive shell (a script, CI, ``cmd &``)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler: Ctrl-C at
    the chat's terminal did nothing and an answer ran to its end. A chat that reads a terminal
    is interactive whatever started it, so it takes Python's default handler back.
    """
    import signal

    if sys.stdin.isatty() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _loop(engine: Any, chat: Conversation, args: argparse.Namespace, answer: int,
          context: int) -> int:
    while True:
        try:
            line = input("> ")
        except EOFError:
            print(file=sys.stderr)
            return 0
        except KeyboardInterrupt:
            print("\n(Ctrl-D or /exit leaves)", file=sys.stderr)
            continue
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return 0
        if text == "/reset":
            chat.turns = []
            print("(conversation cleared)", file=sys.stderr)
            continue
        if text.startswith("/system"):
            chat.system = text[len("/system"):].strip() or None
            chat.turns = []
            print(f"(system message {'set' if chat.system else 'cleared'}; conversation "
                  "cleared)", file=sys.stderr)
            continue
        if text.startswith("/"):
            print(f"(unknown command {text.split()[0]!r}; {_HELP})", file=sys.stderr)
            continue
        try:
            ids, dropped = chat.prompt_for(text)
        except OmnitensorError as exc:
            print(f"({exc})", file=sys.stderr)
            continue
        except KeyboardInterrupt:  # before the answer started: nothing to keep
            print(" [stopped]")
            continue
        if dropped:
            print(f"(the {dropped} oldest exchange{'s' if dropped > 1 else ''} dropped to fit "
                  f"the context of {context} tokens)", file=sys.stderr)
        try:
            reply, _ = _answer(engine, ids, sampling_from_args(args, answer))
        except OmnitensorError as exc:
            print(f"omnitensor chat: {exc}", file=sys.stderr)
            return 1
        chat.add(text, reply)
