"""What the model verbs share: loading by name, sampling flags, progress and timing reports."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import OmnitensorError

__all__ = ["MIN_TIMED_TOKENS", "Timings", "add_backend_arg", "add_sampling_args", "busy",
           "load_named", "load_progress", "rate", "sampling_from_args"]

#: fewer decoded tokens than this give no tokens/s (one or two steps say nothing about speed)
MIN_TIMED_TOKENS = 4


def add_backend_arg(parser: argparse.ArgumentParser) -> None:
    """``--backend NAME``."""
    parser.add_argument("--backend", default=None, metavar="NAME",
                        help="backend to run on (default: $OMNITENSOR_BACKEND or the highest "
                        "priority available; see `omnitensor backends`)")


def add_sampling_args(parser: argparse.ArgumentParser, *, max_new_default: str) -> None:
    """The sampling flags of ``generate`` and ``chat``."""
    parser.add_argument("--max-new-tokens", type=int, default=None, metavar="N",
                        help=f"most tokens to generate (default: {max_new_default})")
    parser.add_argument("--temperature", type=float, default=0.0, metavar="T",
                        help="sampling temperature >= 0; 0 is greedy (default)")
    parser.add_argument("--top-k", type=int, default=None, metavar="K",
                        help="sample among the K most likely tokens (K >= 1; default: all)")
    parser.add_argument("--top-p", type=float, default=None, metavar="P",
                        help="sample among the most likely tokens whose probabilities add up "
                        "to P (0 < P <= 1; default: all)")
    parser.add_argument("--seed", type=int, default=0, metavar="S",
                        help="sampling seed: the same seed gives the same text (default 0)")
    parser.add_argument("--stop", action="append", default=[], metavar="TEXT",
                        help="end the answer where TEXT appears; TEXT itself is not printed "
                        "(repeatable)")


def sampling_from_args(args: argparse.Namespace, max_new_tokens: int) -> Any:
    """`SamplingParams` from the flags, checked (raises OmnitensorError naming the flag)."""
    from ..runtime.batching import SamplingParams

    params = SamplingParams(max_new_tokens, args.temperature, args.top_k, args.top_p,
                            args.seed, tuple(args.stop))
    params.check()
    return params


def check_sampling_args(args: argparse.Namespace) -> None:
    """Check the sampling flags before anything loads (raises OmnitensorError)."""
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise OmnitensorError(f"--max-new-tokens must be >= 1 (got {args.max_new_tokens})")
    sampling_from_args(args, 1)


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


def load_named(model: str, backend: str | None) -> tuple[Any, float]:
    """(loaded model, seconds) for a name or path, with a progress bar on a terminal."""
    from ..runtime import load_model

    began = time.perf_counter()
    loaded = load_model(model, backend, progress=load_progress(sys.stderr.isatty()))
    return loaded, time.perf_counter() - began


@contextmanager
def busy(desc: str, *, after_s: float = 1.0) -> Iterator[threading.Event]:
    """Show ``desc`` with a running clock on a terminal's stderr until the event is set.

    Used around first compiles, which can take a minute and print nothing otherwise. Nothing is
    drawn when stderr is not a terminal or when the work ends within `after_s`.
    """
    done = threading.Event()
    if not sys.stderr.isatty():
        yield done
        return

    def draw() -> None:
        if done.wait(after_s):
            return
        from tqdm import tqdm

        with tqdm(desc=desc, bar_format="{desc} {elapsed}", file=sys.stderr,
                  leave=False) as bar:
            while not done.wait(0.5):
                bar.refresh()

    thread = threading.Thread(target=draw, daemon=True)
    thread.start()
    try:
        yield done
    finally:
        done.set()
        thread.join()


def rate(count: int, seconds: float, unit: str) -> str:
    """``"N unit in S s, R unit/s"``, the rate only when enough were timed."""
    text = f"{count} {unit} in {seconds:.2f} s"
    if count >= MIN_TIMED_TOKENS and seconds > 0:
        text += f", {count / seconds:.1f} {unit}/s"
    return text


class Timings:
    """Wall time split into load, compile, prompt and decode for one generation.

    Compile time (tracing and compiling programs: `tensor.realize.stats.compile_seconds`) is
    taken out of the prompt and decode phases it happened in.
    """

    def __init__(self, load_s: float) -> None:
        from ..tensor.realize import stats

        self._stats = stats
        self.load_s = load_s
        self.start = time.perf_counter()
        self._compile0 = stats.compile_seconds
        self.first: float | None = None
        self._compile_first = 0.0
        self.end = self.start

    def first_token(self) -> None:
        """Mark the first generated token."""
        if self.first is None:
            self.first = time.perf_counter()
            self._compile_first = self._stats.compile_seconds - self._compile0

    def finish(self) -> None:
        """Mark the end."""
        self.end = time.perf_counter()

    def report(self, prompt_tokens: int, generated: int, backend: str) -> str:
        """The one-line summary printed on stderr."""
        compile_s = self._stats.compile_seconds - self._compile0
        first = self.first if self.first is not None else self.end
        prompt_s = max(first - self.start - self._compile_first, 0.0)
        decode_s = max(self.end - first - (compile_s - self._compile_first), 0.0)
        decoded = max(generated - 1, 0)  # the first token comes out of the prompt's step
        parts = [f"load {self.load_s:.2f} s"]
        if compile_s >= 0.005:
            parts.append(f"compile {compile_s:.2f} s")
        parts.append(f"prompt: {rate(prompt_tokens, prompt_s, 'tokens')}")
        parts.append(f"decode: {rate(decoded, decode_s, 'tokens')} after the first"
                     if decoded else "decode: -")
        return f"{generated} tokens generated | " + " | ".join(parts) + f" | {backend} backend"
