"""Where the time goes on the cpu backend: per-step profiles (`Plan.labels`) of real workloads.

Each workload runs once to compile and warm up, then a few more times with every plan step
timed; the steps are summed by label (``kind:op shape``) and by kind, next to the wall time of
the whole call (what is not inside a step is Python overhead: tensor layer, plan lookup,
uploads). Workloads: ``decode`` (one token against a 16-token KV cache) and ``prefill`` (a
16-token prompt) of the 0.5B-shape Llama of `decode.py` (f32 and Q8_0), ``encoder`` (one batch
of 32 sentences through the MiniLM-shape BERT of `encoder.py`), ``train`` (one compiled
char-gpt training step of `train_step.py`).

    python benchmarks/profile_steps.py [--only decode,prefill,encoder,train] [--small] [--top 12]
                                       [--again] [--prompt 16] [--formats F32,Q8_0]

``--again`` runs each step a second time right after itself and prints that time beside the
step's own: what the step costs warm, against what it costs in sequence, after the steps before
it (a decode step's weight stream) left its code and data cold. A small decode step costs ~3x
in sequence what it costs again (`rms_norm` 25 against 7 us). The second run starts from the
slots as the first found them, and a step never writes a buffer it reads (in-place steps write
the same values again), so the workload still computes what it did.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class Profile:
    """Step times summed by label over every plan run while it is installed."""

    def __init__(self, again: bool = False) -> None:
        #: label -> [seconds in sequence, runs, seconds run again at once]
        self.by_label: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0.0])
        self.compiled: set[int] = set()
        self.again = again

    @contextmanager
    def installed(self) -> Iterator[Profile]:
        from omnitensor_backend_cpu import plan as cpu_plan

        original = cpu_plan.Plan.run
        profile = self

        def timed_run(plan: Any, inputs: Any, *rest: Any) -> Any:
            steps = plan.steps
            wrapped = []
            for step, label in zip(steps, plan.labels, strict=True):
                def timed(slots: Any, step: Any = step, label: str = label) -> None:
                    before = list(slots) if profile.again else slots
                    t = time.perf_counter()
                    step(slots)
                    entry = profile.by_label[label]
                    entry[0] += time.perf_counter() - t
                    entry[1] += 1
                    if profile.again:
                        # from the slots as the step found them: a step may replace the slot
                        # of its own buffer by a view (the joined products), and run on
                        # that view it would write past it
                        after = list(slots)
                        slots[:] = before
                        t = time.perf_counter()
                        step(slots)
                        entry[2] += time.perf_counter() - t
                        slots[:] = after
                wrapped.append(timed)
            plan.steps = wrapped
            try:
                return original(plan, inputs, *rest)
            finally:
                plan.steps = steps

        cpu_plan.Plan.run = timed_run  # type: ignore[method-assign]
        try:
            yield self
        finally:
            cpu_plan.Plan.run = original  # type: ignore[method-assign]


def profile(title: str, fn: Callable[[], Any], repeats: int, top: int,
            again: bool = False) -> None:
    """Warm `fn` up, time it `repeats` times with steps profiled, print the breakdown."""
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    prof = Profile(again)
    with prof.installed():
        t = time.perf_counter()
        for _ in range(repeats):
            fn()
        reruns = sum(v[2] for v in prof.by_label.values())
        wall = (time.perf_counter() - t - reruns) / repeats
    inside = sum(v[0] for v in prof.by_label.values()) / repeats
    kinds: dict[str, float] = defaultdict(float)
    for label, (spent, _, _) in prof.by_label.items():
        kinds[label.split(":", 1)[0]] += spent / repeats
    print(f"\n== {title}: {wall * 1e3:.2f} ms per call (first call {first:.1f} s); inside "
          f"steps {inside * 1e3:.2f} ms, outside (Python) {(wall - inside) * 1e3:.2f} ms "
          f"= {(wall - inside) / wall * 100:.1f} %")
    print("   by kind: " + ", ".join(f"{k} {v * 1e3:.2f} ms ({v / wall * 100:.0f} %)"
                                     for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])))
    ranked = sorted(prof.by_label.items(), key=lambda kv: -kv[1][0])
    for label, (spent, count, rerun) in ranked[:top]:
        warm = f"  (again at once: {rerun / count * 1e6:7.1f} us a step, in sequence " \
               f"{spent / count * 1e6:7.1f})" if again else ""
        print(f"   {spent / repeats * 1e3:8.3f} ms {spent / repeats / wall * 100:5.1f} %  "
              f"x{int(count) // repeats:<4d} {label[:110]}{warm}")


def _llama_steps(system: Any) -> tuple[Callable[[], None], Callable[[], None]]:
    """(prefill, decode step) closures over one model and its KV cache."""
    import decode

    model, cap = system.model, system.capacity
    key_mask = np.ones((1, 1, 1, cap), np.bool_)
    prompt = np.arange(3, 3 + decode.PROMPT)[None]
    state = {"cache": model.new_cache(1, cap)}

    def prefill() -> None:
        logits, state["cache"] = model.step(prompt, np.arange(decode.PROMPT)[None], key_mask, 0,
                                            state["cache"], np.array([decode.PROMPT - 1]))
        logits.numpy()

    def step() -> None:
        slot = decode.PROMPT
        logits, state["cache"] = model.step(np.array([[5]]), np.array([[slot]]), key_mask, slot,
                                            state["cache"], np.zeros(1))
        logits.numpy()

    return prefill, step


def decode_workloads(small: bool, top: int, only: set[str], again: bool = False,
                     formats: tuple[str, ...] = ("F32", "Q8_0")) -> None:
    """Profile prefill and decode of the Llama of `decode.py` in each of `formats`."""
    import decode

    shape = decode.SMALL if small else decode.FULL
    with tempfile.TemporaryDirectory(prefix="omni-profile-") as tmp:
        hf = decode.save_model(Path(tmp), shape)
        files = {name: decode.save_gguf(hf, Path(tmp) / f"model-{name}.gguf", name.lower())
                 for name in formats}  # GGUF: the byte vocabulary of `decode.py`
        for name, path in files.items():
            t = time.perf_counter()
            system = decode.OmniSystem(path, "cpu")
            print(f"\nllama {name}: built in {time.perf_counter() - t:.1f} s")
            prefill, step = _llama_steps(system)
            if "prefill" in only:
                profile(f"prefill {decode.PROMPT} tokens, {name}", prefill, 3, top, again)
            if "decode" in only:
                prefill()
                profile(f"decode step, {name}", step, 16, top, again)


def encoder_workload(small: bool, top: int, again: bool = False) -> None:
    """Profile one batch of 32 sentences through the BERT of `encoder.py`."""
    import encoder

    shape = encoder.SMALL if small else encoder.FULL
    with tempfile.TemporaryDirectory(prefix="omni-profile-") as tmp:
        folder = encoder.save_model(Path(tmp), shape)
        system = encoder.OmniSystem(folder, "cpu")
        texts = encoder.make_sentences(encoder.BATCH)
        profile(f"encoder batch of {encoder.BATCH}", lambda: system.embed(texts), 3, top,
                again)


def train_workload(top: int, again: bool = False) -> None:
    """Profile one compiled char-gpt training step of `train_step.py`."""
    import train_step

    args = argparse.Namespace(dim=128, layers=2, heads=4, batch=64)
    data = train_step.example.batch(np.random.default_rng(0), args.batch, set())
    step = train_step.omnitensor_step("cpu", args, data)
    step()
    profile("char-gpt training step 2x128, batch 64", step, 5, top, again)


def main() -> None:
    """Profile the selected workloads."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="decode,prefill,encoder,train")
    parser.add_argument("--small", action="store_true", help="small model shapes")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--again", action="store_true",
                        help="also time each step run again at once (warm), beside its own time")
    parser.add_argument("--formats", default="F32,Q8_0",
                        help="the Llama's GGUF file types (F32, Q8_0, Q4_K_M)")
    parser.add_argument("--prompt", type=int, default=None,
                        help="prompt tokens of the Llama's prefill (decode.py's 16 by default)")
    args = parser.parse_args()
    if args.prompt:
        import decode

        decode.PROMPT = args.prompt
    only = set(args.only.split(","))
    if only & {"decode", "prefill"}:
        decode_workloads(args.small, args.top, only, args.again,
                         tuple(args.formats.upper().split(",")))
    if "encoder" in only:
        encoder_workload(args.small, args.top, args.again)
    if "train" in only:
        train_workload(args.top, args.again)


if __name__ == "__main__":
    main()
