"""LLM decode figure of the speed table: omnitensor against PyTorch + transformers, same run.

A Llama with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads, intermediate
4864, vocab 32000, tied embeddings, rope_theta 1e6) gets random weights (seed 0) and is saved with
transformers' ``save_pretrained`` to a temporary folder, and written as GGUF (F32, F16, Q8_0,
Q4_K_M) through `omnitensor.models.export_gguf`, with a byte-level vocabulary (token i < 256 is
byte i) so that a text prompt is the same token ids for every system. Each system runs batch 1,
a 16-token prompt (``--context N``: an N - 64 token prompt, so that the last tokens are decoded
at context N) and 64 greedy new tokens; systems alternate round by round and medians are printed
with their ratio to llama.cpp of the same type (else torch) (what counts on a shared machine).
llama.cpp (``llama_cpp``) joins only when importable.

omnitensor runs go through the user's path, ``load_model(gguf).generate(text)``. For the cpu
backend the per-step Python overhead (everything that is not inside a plan step) is measured
and printed.

    python benchmarks/decode.py [--backend cpu] [--rounds 3] [--small] [--systems ...]
        [--prompt 16] [--new 64] [--context 2048]

Under `run.py` the medians are recorded as figures (``decode.<system>.tok_s``,
``prefill<N>.<system>.ms``, ``compile.<system>.s``, ``overhead.<system>.pct``, and with a single
omnitensor system ``memory.<system>.peak_mb`` next to the file size plus KV cache).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from figures import record, threads

PROMPT = 16
NEW = 64

FULL = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14,
        "num_key_value_heads": 2, "intermediate_size": 4864, "vocab_size": 32000}
SMALL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "intermediate_size": 768, "vocab_size": 4096}


def save_model(folder: Path, shape: dict[str, int]) -> Path:
    """Random Llama (seed 0) saved with ``save_pretrained``; returns its folder."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**shape, tie_word_embeddings=True, rope_theta=1e6,
                         max_position_embeddings=2048, rms_norm_eps=1e-6,
                         torch_dtype="float32")
    model = LlamaForCausalLM(config).eval()
    hf = folder / "hf"
    model.save_pretrained(hf, safe_serialization=True)
    return hf


def save_gguf(hf: Path, out: Path, dtype: str) -> Path:
    """The HF folder exported as a llama.cpp GGUF of `dtype` (``f32`` or ``q8_0``).

    The random model has no tokenizer; llama.cpp still needs ``tokenizer.ggml.*`` keys, so a
    placeholder byte-level vocabulary of the model's size is written (prompts are token ids).
    """
    from omnitensor.models import export_gguf
    from omnitensor.models.checkpoint import from_hf_dir

    ck = from_hf_dir(hf)
    vocab = int(ck.hparams["vocab_size"])
    # GPT-2's byte-level alphabet: token i < 256 is byte i, so text prompts are byte ids
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    shifted = iter(range(256, 512))
    alphabet = [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]
    # one merge, of the NUL byte with itself (llama.cpp needs one; prompts never hold NUL)
    tokens = alphabet + [f"<t{i}>" for i in range(256, vocab - 1)] + [alphabet[0] * 2]
    tokenizer = {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": [1] * vocab,
        "tokenizer.ggml.merges": [f"{alphabet[0]} {alphabet[0]}"],
        "tokenizer.ggml.eos_token_id": vocab - 2,
        "tokenizer.ggml.add_bos_token": False,
    }
    return export_gguf(ck, out, dtype=dtype, tokenizer_metadata=tokenizer)


def prompt_text(n: int) -> str:
    """n random lowercase letters (seed 1): n byte tokens for every system."""
    rng = np.random.default_rng(1)
    return "".join(chr(97 + int(c)) for c in rng.integers(0, 26, n))


# --- systems --------------------------------------------------------------------------------


class OmniSystem:
    """omnitensor through the user's path: ``load_model(gguf).generate(text)``."""

    def __init__(self, path: Path, backend: str) -> None:
        from omnitensor.runtime import load_model

        self.lm = load_model(path, backend)
        self.model = self.lm.model  # the CompiledModel (for the overhead measurement)
        self.capacity = 1 << (PROMPT + NEW - 1).bit_length()

    def run(self, prompt: list[int], new: int) -> tuple[float, float, list[int]]:
        text = bytes(prompt).decode("latin-1")
        assert list(self.lm.tokenizer.encode(text)) == prompt, "prompt ids differ"
        out = self.lm.generate(text, max_new_tokens=new)
        done = len(out.token_ids) - 1
        return out.prefill_s, done / out.decode_s if out.decode_s else 0.0, out.token_ids


class TorchSystem:
    """PyTorch + transformers, float32, greedy ``generate`` with a static number of tokens."""

    def __init__(self, hf: Path) -> None:
        import torch
        from transformers import LlamaForCausalLM

        self.torch = torch
        torch.set_num_threads(threads())
        self.model = LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).eval()

    def run(self, prompt: list[int], new: int) -> tuple[float, float, list[int]]:
        torch = self.torch
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = self.model(ids, use_cache=True)
            past = out.past_key_values
            token = int(out.logits[0, -1].argmax())
            t1 = time.perf_counter()
            toks = [token]
            for _ in range(new - 1):
                out = self.model(torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = int(out.logits[0, -1].argmax())
                toks.append(token)
            t2 = time.perf_counter()
        return t1 - t0, (new - 1) / (t2 - t1), toks


class LlamaCppSystem:
    """llama.cpp through its Python binding (only when ``llama_cpp`` imports)."""

    def __init__(self, gguf: Path) -> None:
        import llama_cpp

        self.lib = llama_cpp
        n_ctx = max(256, 1 << (PROMPT + NEW - 1).bit_length())
        self.llm = llama_cpp.Llama(str(gguf), n_ctx=n_ctx, n_batch=n_ctx, n_threads=threads(),
                                   use_mmap=False, verbose=False, logits_all=False)

    def _next(self) -> int:
        # NOTE: llama-cpp-python 0.3 keeps no scores without logits_all (sampling moved into
        # its sampler): read the last token's logits from the context.
        logits = self.lib.llama_get_logits_ith(self.llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(logits, shape=(self.llm.n_vocab(),))))

    def run(self, prompt: list[int], new: int) -> tuple[float, float, list[int]]:
        llm = self.llm
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(prompt)
        token = self._next()
        t1 = time.perf_counter()
        toks = [token]
        for _ in range(new - 1):
            llm.eval([token])
            token = self._next()
            toks.append(token)
        t2 = time.perf_counter()
        return t1 - t0, (new - 1) / (t2 - t1), toks


# --- Python overhead of a decode step on the cpu backend --------------------------------------


def step_overhead(system: OmniSystem, steps: int = 16) -> tuple[float, float] | None:
    """(median step seconds, median seconds outside plan runs) of a decode step on cpu."""
    from omnitensor_backend_cpu import plan as cpu_plan

    kernel_time = [0.0]
    original = cpu_plan.Plan.run

    def timed_run(self: Any, inputs: Any, *rest: Any) -> Any:
        # NOTE: the plan's run is timed as a whole: its steps and the loop over them (about
        # 0.05 us a step) count as inside, and what is left of the call is Python overhead
        # (tensor layer, trace lookup, input realization, result wrapping). Timers around
        # each of the ~600 steps added about 1 ms to what they left outside (Q8_0, same
        # process: 2.1-2.4 ms that way against 1.2-1.7 ms this way).
        t = time.perf_counter()
        try:
            return original(self, inputs, *rest)
        finally:
            kernel_time[0] += time.perf_counter() - t

    model, cap = system.model, system.capacity
    key_mask = np.ones((1, 1, 1, cap), np.bool_)
    cache = model.new_cache(1, cap)
    prompt = min(PROMPT, 16)  # the steps' cost does not depend on it; a long prefill would
    tokens = np.zeros((1, prompt), np.int64)
    logits, cache = model.step(tokens, np.arange(prompt)[None], key_mask, 0, cache,
                               np.array([prompt - 1]))
    totals, outside = [], []
    cpu_plan.Plan.run = timed_run  # type: ignore[method-assign]
    try:
        for i in range(steps):
            slot = prompt + i
            kernel_time[0] = 0.0
            t = time.perf_counter()
            logits, cache = model.step(np.array([[1]]), np.array([[slot]]), key_mask, slot,
                                       cache, np.zeros(1))
            logits.numpy()
            total = time.perf_counter() - t
            totals.append(total)
            outside.append(total - kernel_time[0])
    finally:
        cpu_plan.Plan.run = original  # type: ignore[method-assign]
    return statistics.median(totals), statistics.median(outside)


_PEAK_CHILD = """
import sys; sys.path.insert(0, {here!r})
import decode
from pathlib import Path
decode.PROMPT, decode.NEW = {prompt}, {new}
def rss(key):
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))
import numpy, omnitensor.runtime
{imports}
base = rss('VmRSS')
system = decode.{cls}(Path({path!r}){args})
system.run(list({prompt_ids!r}), {new})
print(base, rss('VmHWM'))
"""


def peak_memory(name: str, path: Path, shape: dict[str, int], capacity: int,
                prompt: list[int]) -> None:
    """Print (and record) the peak RSS of a fresh process that loads `path` and decodes.

    A fresh process, so the torch model this one built to write the files does not count; the
    interpreter, numpy, numba and omnitensor themselves do (about 110 MB after imports, 200 MB
    with the compiled kernels), so the peak is printed with what the process held after its
    imports and before loading (``base``) too.
    """
    import subprocess

    omni = name.startswith("omni-")
    # NOTE: VmHWM, not ru_maxrss: the latter survives fork+exec, so a child would report the
    # parent's peak (the torch model this process built).
    code = _PEAK_CHILD.format(
        here=str(Path(__file__).parent), prompt=PROMPT, new=NEW, path=str(path),
        prompt_ids=prompt, cls="OmniSystem" if omni else "LlamaCppSystem",
        args=", 'cpu'" if omni else "",
        imports="import omnitensor_backend_cpu.backend, numba" if omni else "import llama_cpp")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    base_kb, peak_kb = (int(v) for v in out.stdout.strip().splitlines()[-1].split())
    peak, base = peak_kb / 1024, base_kb / 1024
    heads = shape["num_attention_heads"]
    head = shape["hidden_size"] // heads
    kv = 2 * shape["num_hidden_layers"] * shape["num_key_value_heads"] * capacity * head * 4
    budget = (path.stat().st_size + kv) / 2**20
    print(f"  {name}: peak RSS of a fresh process decoding {NEW} tokens {peak:.0f} MB "
          f"({peak / budget:.2f}x file + KV cache {budget:.0f} MB); after imports {base:.0f} MB, "
          f"so loading and decoding added {peak - base:.0f} MB ({(peak - base) / budget:.2f}x)")
    record(f"memory.{name}.peak_mb", peak, budget_mb=budget, base_mb=base)


def main() -> None:
    """Build the model, run the systems interleaved, print medians and ratios."""
    global PROMPT, NEW
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--small", action="store_true", help="a tiny model for a quick run")
    parser.add_argument("--systems", default="omni-f32,omni-q8_0,torch,llama.cpp-f32,"
                        "llama.cpp-q8_0", help="omni-<type>, llama.cpp-<type> (type: f32, f16, "
                        "bf16, q8_0, q4_k_m, ...) and torch")
    parser.add_argument("--prompt", type=int, default=PROMPT, help="prompt tokens")
    parser.add_argument("--new", type=int, default=NEW, help="new tokens per round")
    parser.add_argument("--context", type=int, default=0,
                        help="decode the last NEW tokens at this context (prompt = N - NEW)")
    parser.add_argument("--memory", action="store_true",
                        help="also the peak RSS of each GGUF system in a fresh process")
    args = parser.parse_args()
    PROMPT, NEW = (args.context - args.new if args.context else args.prompt), args.new
    wanted = args.systems.split(",")
    shape = SMALL if args.small else FULL
    with tempfile.TemporaryDirectory(prefix="omni-decode-") as tmp:
        folder = Path(tmp)
        t = time.perf_counter()
        hf = save_model(folder, shape)
        types = sorted({n.split("-", 1)[1] for n in wanted if n != "torch"})
        ggufs = {d: save_gguf(hf, folder / f"model-{d}.gguf", d) for d in types}
        print(f"model {shape} written in {time.perf_counter() - t:.1f} s")
        systems: dict[str, Any] = {}
        for name in wanted:
            t = time.perf_counter()
            try:
                if name.startswith("omni-"):
                    systems[name] = OmniSystem(ggufs[name[5:]], args.backend)
                elif name == "torch":
                    systems[name] = TorchSystem(hf)
                elif name.startswith("llama.cpp-"):
                    systems[name] = LlamaCppSystem(ggufs[name[10:]])
            except ImportError as error:
                print(f"{name}: skipped ({error})")
                continue
            print(f"{name}: loaded in {time.perf_counter() - t:.1f} s")
        prompt = list(prompt_text(PROMPT).encode())
        for name, system in systems.items():  # warm-up: compiles, first-touch
            t = time.perf_counter()
            system.run(prompt, 4)
            warm = time.perf_counter() - t
            print(f"{name}: warm-up (compile) {warm:.1f} s")
            record(f"compile.{name}.s", warm)
            # NOTE: then a full-length run, untimed: its KV cache grows through the buckets the
            # timed rounds use (each a plan to build once), which the first round paid before.
            system.run(prompt, NEW)
        prefill: dict[str, list[float]] = {n: [] for n in systems}
        tps: dict[str, list[float]] = {n: [] for n in systems}
        tokens: dict[str, list[int]] = {}
        for _ in range(args.rounds):
            for name, system in systems.items():
                # NOTE: a pause first, so that the previous system's threads (OpenMP, BLAS,
                # llama.cpp's pool spin for a while after their work) are asleep again and each
                # system gets the cores to itself.
                time.sleep(0.3)
                p, r, toks = system.run(prompt, NEW)
                prefill[name].append(p)
                tps[name].append(r)
                tokens[name] = toks
        print(f"\nbatch 1, {PROMPT}-token prompt, {NEW} new tokens greedy (decoded at context "
              f"{PROMPT + 1}..{PROMPT + NEW}), {args.rounds} rounds interleaved (medians)")
        for name in systems:
            r = statistics.median(tps[name])
            # the competitor: llama.cpp on the same file type, else torch
            other = f"llama.cpp-{name[5:]}" if name.startswith("omni-") else None
            other = other if other in systems else ("torch" if "torch" in systems else None)
            ratio = agree = ""
            if other and other != name:
                ratio = f"  {r / statistics.median(tps[other]):5.2f}x {other}"
                same = sum(a == b for a, b in zip(tokens[name], tokens[other], strict=False))
                agree = f"  tokens equal to {other}: {same}/{len(tokens[name])}"
            print(f"  {name:15s} prefill {statistics.median(prefill[name]) * 1e3:8.1f} ms  "
                  f"decode {r:7.2f} tok/s{ratio}{agree}")
            record(f"decode.{name}.tok_s", r)
            record(f"prefill{PROMPT}.{name}.ms", statistics.median(prefill[name]) * 1e3)
        if args.backend == "cpu":
            for name, system in systems.items():
                if name.startswith("omni-"):
                    got = step_overhead(system)
                    if got:
                        total, outside = got
                        print(f"  {name}: decode step {total * 1e3:.2f} ms, Python overhead "
                              f"(outside kernels) {outside * 1e3:.2f} ms = "
                              f"{outside / total * 100:.1f} %")
                        record(f"overhead.{name}.pct", outside / total * 100)
        omni = [n for n in systems if n.startswith("omni-")]
        if args.memory or (len(systems) == 1 and omni):
            for name in systems:
                if name != "torch":
                    capacity = 1 << (PROMPT + NEW - 1).bit_length()
                    peak_memory(name, ggufs[name.split("-", 1)[1]], shape, capacity, prompt)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
