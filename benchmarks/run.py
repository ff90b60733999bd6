"""The cpu speed table of issue 14: every workload, its competitors in the same run, the targets.

Each benchmark runs in its own process (so one part's threads and caches do not disturb the
next), with its competitors timed interleaved in that process; the figures come back through
`figures.record` and are printed as one table with each target and whether it is met.

- kernels: `cpu_kernels.py` (``ot.compile`` of the functionals against torch);
- decode and prefill (16 tokens): `decode.py` with omnitensor f32/Q8_0, torch and llama.cpp,
  numba's cache empty first (``cold`` compile figures), then again in a second process on the
  same cache (``cached``); prefill at 128 and 512 tokens; peak memory of fresh Q8_0 processes
  (omnitensor and llama.cpp); decode at context 2048 against llama.cpp;
- embeddings: `encoder.py`; training: `train_step.py`;
- small workloads: ``omnitensor generate char-gpt "12+34="`` and `examples/train_mlp.py`, whole
  processes, cpu against ref, alternating.

Every system gets the same thread count (``--threads``, default all cores). A step whose process
fails (a competitor that crashes it) is reported with its exit status and its rows read "not
measured"; the other steps still run.

llama.cpp is `llama-cpp-python`, built from source (``pip install llama-cpp-python``). On a
CPU with AMX (Intel's matrix tiles), a build for the host's features (its default) faulted in
ggml's AMX kernels on a virtual machine that does not grant the tiles (``ldtilecfg``: a general
protection fault at the first Q8_0 prompt); build it without them there:
``CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON
-DGGML_AVX512_BF16=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"``.

    python benchmarks/run.py --backend cpu [--threads N] [--small] [--quick]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from figures import ENV, TAG_ENV, read

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

Figures = dict[str, dict[str, Any]]


def _run(command: list[str], env: dict[str, str], tag: str = "") -> int:
    print(f"\n$ {' '.join(command[1:])}" + (f"   [{tag}]" if tag else ""), flush=True)
    return subprocess.call(command, env={**env, TAG_ENV: tag} if tag else env)


def small_workloads(env: dict[str, str], rounds: int) -> dict[str, float]:
    """Median wall seconds of the two small programs per backend, alternating."""
    programs = {
        "generate": [sys.executable, "-m", "omnitensor.cli", "generate", "char-gpt", "12+34="],
        "train_mlp": [sys.executable, str(ROOT / "examples" / "train_mlp.py")],
    }
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, command in programs.items():
            for backend in ("ref", "cpu"):
                extra = ["--backend", backend] if name == "generate" else []
                t = time.perf_counter()
                subprocess.run(command + extra, env={**env, "OMNITENSOR_BACKEND": backend},
                               check=True, capture_output=True)
                times.setdefault(f"{name}.{backend}", []).append(time.perf_counter() - t)
    return {key: statistics.median(ts) for key, ts in times.items()}


def _value(figures: Figures, name: str) -> float | None:
    entry = figures.get(name)
    return None if entry is None else float(entry["value"])


Row = tuple[str, str, str, str, str]


def table(f: Figures, small: dict[str, float]) -> list[Row]:
    """(workload, omnitensor, competitor, target, verdict) rows of the issue's table."""
    rows: list[Row] = []

    def ratio_row(label: str, ours: float | None, theirs: float | None, unit: str,
                  who: str, target: float, higher_better: bool = True) -> None:
        if ours is None or theirs is None:
            rows.append((label, _fmt(ours, unit), f"{who} {_fmt(theirs, unit)}",
                         f">= {target:g}x", "not measured"))
            return
        ratio = ours / theirs if higher_better else theirs / ours
        verdict = "met" if ratio >= target else f"missed ({ratio:.2f}x of {target:g}x)"
        rows.append((label, _fmt(ours, unit), f"{who} {_fmt(theirs, unit)}",
                     f">= {target:g}x {who}", f"{ratio:.2f}x: {verdict}"))

    for fmt, target in (("f32", 1.0), ("q8_0", 1.0), ("q4_k_m", 0.9)):
        ratio_row(f"decode 0.5B {fmt}, batch 1", _value(f, f"cold.decode.omni-{fmt}.tok_s"),
                  _value(f, f"cold.decode.llama.cpp-{fmt}.tok_s"), "tok/s", f"llama.cpp {fmt}",
                  target)
    torch_tps = _value(f, "cold.decode.torch.tok_s")
    if torch_tps is not None:
        rows.append(("decode 0.5B, torch f32 (reference)", "", f"torch {torch_tps:.2f} tok/s",
                     "", ""))
    for tag, tokens in (("cold", 16), ("p128", 128), ("p512", 512)):
        for fmt in ("f32", "q8_0"):
            ratio_row(f"prefill {tokens} tokens {fmt}",
                      _value(f, f"{tag}.prefill{tokens}.omni-{fmt}.ms"),
                      _value(f, f"{tag}.prefill{tokens}.llama.cpp-{fmt}.ms"), "ms",
                      f"llama.cpp {fmt}", 1.0, higher_better=False)
    ratio_row("sentence embeddings MiniLM shape, batch 32",
              _value(f, "encoder.encoder.omni-cpu.sent_s"),
              _value(f, "encoder.encoder.sentence-transformers.sent_s"), "sent/s",
              "sentence-transformers", 1.5)
    ratio_row("training step char-gpt 2x128, batch 64x9",
              _value(f, "train.train.omnitensor-cpu.ms"), _value(f, "train.train.torch-cpu.ms"),
              "ms", "torch", 1.5, higher_better=False)
    for key, label, target in (("gelu_tanh", "F.gelu(tanh) 16M via ot.compile", 3.0),
                               ("softmax", "F.softmax rows 4096^2 via ot.compile", 1.5),
                               ("layer_norm", "F.layer_norm 4096^2 via ot.compile", 1.5),
                               ("rms_norm", "F.rms_norm 4096^2 via ot.compile", 1.5)):
        x = _value(f, f"kernels.kernel.api.{key}.x_torch")
        rows.append((label, "" if x is None else f"{x:.2f}x torch", "torch", f">= {target:g}x",
                     "not measured" if x is None else
                     ("met" if x >= target else f"missed ({x:.2f}x)")))
    for fmt in ("f32", "q8_0"):
        cold = _value(f, f"cold.compile.omni-{fmt}.s")
        cached = _value(f, f"cached.compile.omni-{fmt}.s")
        ok = cold is not None and cached is not None and cold <= 15 and cached <= 3
        rows.append((f"first run 0.5B decode {fmt}: cold / cached process",
                     f"{_fmt(cold, 's')} / {_fmt(cached, 's')}",
                     f"llama.cpp {_fmt(_value(f, f'cold.compile.llama.cpp-{fmt}.s'), 's')}",
                     "<= 15 s / <= 3 s", "met" if ok else "missed or not measured"))
    for name in ("generate", "train_mlp"):
        cpu, ref = small.get(f"{name}.cpu"), small.get(f"{name}.ref")
        label = ("omnitensor generate char-gpt" if name == "generate"
                 else "examples/train_mlp.py")
        ok = cpu is not None and ref is not None and cpu <= ref
        rows.append((label, _fmt(cpu, "s"), f"ref {_fmt(ref, 's')}", "never slower than ref",
                     "met" if ok else "missed or not measured"))
    for fmt in ("f32", "q8_0"):
        pct = _value(f, f"cold.overhead.omni-{fmt}.pct")
        rows.append((f"Python overhead per decode step {fmt}", _fmt(pct, "%"), "", "<= 5 %",
                     "not measured" if pct is None else ("met" if pct <= 5 else "missed")))
    mem = f.get("mem.memory.omni-q8_0.peak_mb")
    if mem is None:
        rows.append(("peak memory 0.5B Q8_0 decode", "", "", "<= 1.3x file + KV",
                     "not measured"))
    else:
        x = mem["value"] / mem["budget_mb"]
        theirs = f.get("mem.memory.llama.cpp-q8_0.peak_mb")
        other = (f"llama.cpp {theirs['value']:.0f} MB, file + KV {mem['budget_mb']:.0f} MB"
                 if theirs else f"file + KV {mem['budget_mb']:.0f} MB")
        above = (mem["value"] - mem.get("base_mb", 0.0)) / mem["budget_mb"]
        rows.append(("peak memory 0.5B Q8_0 decode", f"{mem['value']:.0f} MB", other,
                     "<= 1.3x file + KV",
                     f"{x:.2f}x ({above:.2f}x above the process after imports): "
                     f"{'met' if x <= 1.3 else 'missed'}"))
    ratio_row("decode 0.5B Q8_0 at context 2048", _value(f, "ctx2048.decode.omni-q8_0.tok_s"),
              _value(f, "ctx2048.decode.llama.cpp-q8_0.tok_s"), "tok/s", "llama.cpp q8_0", 1.0)
    return rows


def _exit_reason(code: int) -> str:
    """A subprocess exit status in words (a negative one is the signal that ended it)."""
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} {unit}" if value < 100 else f"{value:.0f} {unit}"


def main() -> int:
    """Run every benchmark, then print the table; returns the first failing exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--small", action="store_true", help="tiny models, few rounds")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and no prefill-128/512 or memory runs")
    parser.add_argument("--rounds", type=int, default=15)
    # NOTE: 4 interleaved rounds (medians): with 2, the decode ratios of two runs of the same
    # commit differed by up to 7 % (Q8_0 1.05x and 0.98x, f32 0.98x and 0.91x)
    parser.add_argument("--decode-rounds", type=int, default=4)
    args = parser.parse_args()
    if args.backend != "cpu":
        print(f"run.py: the speed table is the cpu backend's (got {args.backend!r})")
        return 2
    py, small_flag = sys.executable, ["--small"] if args.small else []
    rounds = 3 if args.small or args.quick else args.rounds
    dr = str(1 if args.small else args.decode_rounds)
    with tempfile.TemporaryDirectory(prefix="omni-run-") as tmp:
        figures_path = Path(tmp) / "figures.jsonl"
        env = {**os.environ, ENV: str(figures_path), "NUMBA_CACHE_DIR": str(Path(tmp) / "numba"),
               "OMNITENSOR_NUM_THREADS": str(args.threads)}
        steps: list[tuple[list[str], str]] = [
            ([py, str(HERE / "cpu_kernels.py"), "--rounds", str(rounds), "--part", "api"],
             "kernels"),
            ([py, str(HERE / "decode.py"), "--rounds", dr, "--systems",
              "omni-f32,omni-q8_0,omni-q4_k_m,torch,llama.cpp-f32,llama.cpp-q8_0,"
              "llama.cpp-q4_k_m", *small_flag], "cold"),
            ([py, str(HERE / "decode.py"), "--rounds", "1", "--new", "8", "--systems",
              "omni-f32,omni-q8_0", *small_flag], "cached"),
            ([py, str(HERE / "encoder.py"), "--rounds", "1" if args.small else "3",
              "--systems", "omni,sentence-transformers,transformers", *small_flag], "encoder"),
            ([py, str(HERE / "train_step.py"), "--rounds", str(min(rounds, 7)), "--threads",
              str(args.threads), "--backends", "cpu"], "train"),
        ]
        if not args.quick:
            steps += [([py, str(HERE / "decode.py"), "--rounds", "2", "--prompt", str(n), "--new",
                        "4", "--systems", "omni-f32,omni-q8_0,llama.cpp-f32,llama.cpp-q8_0",
                        *small_flag], f"p{n}") for n in (128, 512)]
            steps.append(([py, str(HERE / "decode.py"), "--rounds", "1", "--systems",
                           "omni-q8_0,llama.cpp-q8_0", "--memory", *small_flag], "mem"))
            steps.append(([py, str(HERE / "decode.py"), "--rounds", "1", "--context",
                           "256" if args.small else "2048", "--systems",
                           "omni-q8_0,llama.cpp-q8_0", *small_flag], "ctx2048"))
        status = 0
        for command, tag in steps:
            # every step runs even after one failed (a competitor that crashes its process
            # takes only that step's rows with it), and the first failure is the exit code
            code = _run(command, env, tag)
            if code:
                print(f"run.py: step {tag!r} exited with {_exit_reason(code)}; its rows are "
                      "'not measured'", flush=True)
            status = status or code
        print("\n$ small workloads (whole processes, ref and cpu alternating)", flush=True)
        small = small_workloads(env, 1 if args.small else 5)
        for key, seconds in small.items():
            print(f"  {key:18s} {seconds:6.2f} s")
        rows = table(read(figures_path), small)
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    header = ("workload", "omnitensor cpu", "competitor, same run", "target", "result")
    widths = [max(w, len(h)) for w, h in zip(widths, header, strict=True)]
    line: Callable[[tuple[str, ...]], str] = lambda r: "| " + " | ".join(  # noqa: E731
        c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
    print(f"\n== issue 14 table: {args.threads} thread(s) for every system ==")
    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))
    return status


if __name__ == "__main__":
    sys.exit(main())
