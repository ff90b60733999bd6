"""Joined products (q/k/v, gate/up) against products apart, in one process, through `generate`.

The 0.5B-shape Llama of `decode.py` is loaded twice with `load_model(gguf, backend)`: once as
users get it, once with joining switched off while its plans compile (the core's
`models.compiled.fuse_projections` returning the weights as they are, and the cpu plan's
`steps._siblings` finding no siblings). The two copies run ``generate`` alternately, round by
round, so the machine's drift hits both alike; medians of prefill time and decode speed.

    python benchmarks/joined_products.py [--format q8_0] [--rounds 6] [--prompt 16] [--small]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import decode  # noqa: E402  (a sibling benchmark: the model and its GGUF export)


def _apart(load: Any) -> Any:
    """`load()` with every product kept apart, the core's joining and the cpu plan's."""
    from omnitensor.models import compiled

    fuse = compiled.fuse_projections
    compiled.fuse_projections = lambda weights, spec, hparams, **_: dict(weights)
    try:
        from omnitensor_backend_cpu import steps
    except ImportError:  # another backend: only the core joins
        steps = None
    siblings = steps._siblings if steps is not None else None
    if steps is not None:
        steps._siblings = lambda inst, function: []
    try:
        return load()
    finally:
        compiled.fuse_projections = fuse
        if steps is not None:
            steps._siblings = siblings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", default="q8_0", help="f32, q8_0, q4_k_m, ...")
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--prompt", type=int, default=16, help="prompt tokens")
    parser.add_argument("--new", type=int, default=17, help="new tokens a round")
    parser.add_argument("--small", action="store_true", help="the small model of decode.py")
    args = parser.parse_args()
    from omnitensor.runtime import load_model

    with tempfile.TemporaryDirectory(prefix="omni-joined-") as tmp:
        folder = Path(tmp)
        hf = decode.save_model(folder, decode.SMALL if args.small else decode.FULL)
        gguf = decode.save_gguf(hf, folder / f"model-{args.format}.gguf", args.format)
        text = decode.prompt_text(args.prompt)

        def load() -> Any:
            lm = load_model(gguf, args.backend)
            lm.generate(text, max_new_tokens=4)  # compiles its plans now
            return lm

        systems = {"joined": load(), "apart": _apart(load)}
        prefill: dict[str, list[float]] = {name: [] for name in systems}
        speed: dict[str, list[float]] = {name: [] for name in systems}
        for _ in range(args.rounds):
            for name, lm in systems.items():
                out = lm.generate(text, max_new_tokens=args.new)
                prefill[name].append(out.prefill_s * 1e3)
                speed[name].append((len(out.token_ids) - 1) / out.decode_s)
        print(f"{args.format} on {args.backend}, {args.prompt}-token prompt, {args.rounds} "
              f"rounds interleaved (medians)")
        for name in systems:
            print(f"  {name:7s} prefill {statistics.median(prefill[name]):8.1f} ms   decode "
                  f"{statistics.median(speed[name]):6.2f} tok/s")
        ratio = statistics.median(speed["joined"]) / statistics.median(speed["apart"])
        print(f"  joined decode / apart decode: {ratio:.2f}x")


if __name__ == "__main__":
    main()
