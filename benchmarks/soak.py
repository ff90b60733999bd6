"""Soak: many decode steps with varying prompt lengths; resident memory and compiles must stay flat.

One model decodes again and again, through the compiled prefill and decode programs
`CausalLM.generate` uses (its buckets, KV capacities and masks; greedy, never stopping early),
prompts of random token ids that are short (1-3 tokens), typical (a quarter to half of the
context) or near the context limit, each asking for a random number of new tokens that fits,
until `--steps` decode steps have run. Every `--every`
steps it prints the resident set size (VmRSS), the compiled programs so far and what the
compile caches hold. At the end it prints the least-squares slope of the resident size after
warm-up (MB per 1,000 steps; target < 1) and the compiled programs against their bound: the
prefill programs of every (width bucket, KV capacity) pair and the decode programs of every
capacity that a request can ask for, whatever the run length.

    python benchmarks/soak.py [--backend cpu] [--model char-gpt] [--steps 10000]
        [--every 500] [--warmup 0.2] [--seed 0]

`--model` is a shipped model name, a directory or a GGUF file (see `omnitensor models`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from typing import Any

import numpy as np


def rss_mb() -> float:
    """The current resident set size in MB (VmRSS; not the peak)."""
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("soak: no VmRSS in /proc (Linux only)")


def slope_per_1000(steps: list[int], rss: list[float]) -> float:
    """Least-squares slope of `rss` over `steps`, in MB per 1,000 steps."""
    if len(steps) < 2:
        return float("nan")
    return float(np.polyfit(np.asarray(steps, float), np.asarray(rss, float), 1)[0]) * 1000


def program_bound(context: int) -> int:
    """How many programs `generate` may compile for batch 1, over every request that fits."""
    from omnitensor.models.compiled import bucket
    from omnitensor.runtime.loaded import kv_capacity

    prefill, decode = set(), set()
    for longest in range(1, context):
        width = bucket(longest)
        for new in range(1, context - longest + 1):
            capacity = kv_capacity(width, new, context)
            prefill.add((width, capacity))
            if new > 1:
                decode.add(capacity)
    return len(prefill) + len(decode)


def generate_ids(model: Any, ids: list[int], new: int) -> int:
    """Greedy decoding of `new` tokens after `ids`, as `CausalLM.generate` runs it for one
    prompt (same buckets, KV capacity, masks and compiled programs) but without stopping at
    an end-of-sequence token, so every request runs all its decode steps. Returns the steps.
    """
    from omnitensor.models.compiled import bucket
    from omnitensor.runtime.loaded import kv_capacity

    width = bucket(len(ids))
    capacity = kv_capacity(width, new, model.context_length)
    pad = width - len(ids)
    tokens = np.zeros((1, width), np.int64)
    tokens[0, pad:] = ids
    key_mask = (np.arange(capacity) >= pad).reshape(1, 1, 1, capacity)
    positions = np.maximum(np.arange(width) - pad, 0).reshape(1, width)
    cache = model.new_cache(1, capacity)
    logits, cache = model.step(tokens, positions, key_mask, 0, cache, np.full(1, width - 1))
    for i in range(new - 1):
        token = np.asarray(logits.numpy()).reshape(1, -1).argmax(axis=-1)
        slot = width + i
        logits, cache = model.step(token.reshape(1, 1), np.full((1, 1), slot - pad), key_mask,
                                   slot, cache, np.zeros(1))
    np.asarray(logits.numpy())
    return new - 1


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--model", default="char-gpt")
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="fraction of the steps left out of the slope")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from omnitensor.cli.generate import resolve_model
    from omnitensor.runtime import load_model
    from omnitensor.tensor.jit import cache_sizes
    from omnitensor.tensor.realize import stats

    lm = load_model(resolve_model(args.model), args.backend)
    context = lm.model.context_length
    vocab = int(lm.model.hparams.get("vocab_size") or lm.tokenizer.vocab_size)
    rng = np.random.default_rng(args.seed)
    kinds = {"short": (1, min(3, context - 1)),
             "typical": (max(1, context // 4), max(1, context // 2)),
             "near_limit": (max(1, context - 8), context - 2)}
    print(f"soak: {args.model} on {args.backend}, context {context}, {args.steps} decode steps, "
          f"load {os.getloadavg()[0]:.2f}")
    print(f"{'steps':>7} {'rss_mb':>8} {'compiles':>8} {'traces':>6} {'plans':>5} {'calls':>6}")
    start_rss, began = rss_mb(), time.perf_counter()
    compiles0 = stats.compiles
    steps = calls = 0
    marks: list[tuple[int, float, int]] = []
    next_mark = 0
    counts = dict.fromkeys(kinds, 0)
    while steps < args.steps:
        kind = list(kinds)[calls % len(kinds)]
        low, high = kinds[kind]
        length = int(rng.integers(low, high + 1))
        ids = [int(t) for t in rng.integers(0, vocab, size=length)]
        new = int(rng.integers(1, context - length + 1))
        steps += generate_ids(lm.model, ids, new)  # the first token comes from the prefill
        calls += 1
        counts[kind] += 1
        if steps >= next_mark:
            sizes = cache_sizes()
            marks.append((steps, rss_mb(), stats.compiles - compiles0))
            print(f"{steps:>7} {marks[-1][1]:>8.1f} {marks[-1][2]:>8} {sizes['traces']:>6} "
                  f"{sizes['plans']:>5} {calls:>6}")
            sys.stdout.flush()
            next_mark += args.every
    marks.append((steps, rss_mb(), stats.compiles - compiles0))
    elapsed = time.perf_counter() - began
    warm = args.warmup * steps
    after = [(s, r) for s, r, _ in marks if s >= warm]
    slope = slope_per_1000([s for s, _ in after], [r for _, r in after])
    compiled_at_warm = next((c for s, _, c in marks if s >= warm), marks[-1][2])
    bound = program_bound(context)
    print(f"calls {calls} ({', '.join(f'{k} {v}' for k, v in counts.items())}), "
          f"{steps} decode steps in {elapsed:.1f} s ({steps / elapsed:.0f} steps/s)")
    print(f"rss: start {start_rss:.1f} MB, end {marks[-1][1]:.1f} MB; slope after warm-up "
          f"({warm:.0f} steps) {slope:+.3f} MB per 1,000 steps (target < 1)")
    print(f"compiled programs: {marks[-1][2]} (bound {bound} for context {context}; "
          f"{marks[-1][2] - compiled_at_warm} after warm-up); caches {cache_sizes()}")
    flat = math.isfinite(slope) and slope < 1.0 and marks[-1][2] <= bound
    print("soak: " + ("flat" if flat else "NOT flat"))
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
