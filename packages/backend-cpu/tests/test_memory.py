"""Resident memory of a quantized model on cpu: each weight held once (issue 15's budget).

A fresh process compiles the kernels on a tiny model first, then loads a Q8_0 GGUF of about
35 MB and decodes: what the second model adds to the resident memory after load must stay
within 1.2 x (file + KV cache), and its peak while decoding within that plus 16 MB (plans and
activations, which do not grow with the weights). Holding the ggml blocks next to their
repacked form (2x), or a float32 copy of any weight (4x), fails it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.models import Checkpoint, export_gguf

_CHILD = r"""
import gc, json, sys
import numpy as np
from omnitensor.runtime import load_model

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key)) * 1024

def decode(path, new):
    model = load_model(path, "cpu").model
    loaded.append(status("VmRSS"))
    cap = 64
    mask = np.ones((1, 1, 1, cap), np.bool_)
    cache = model.new_cache(1, cap)
    logits, cache = model.step(np.arange(3, 19)[None], np.arange(16)[None], mask, 0, cache,
                               np.array([15]))
    tokens = [int(np.argmax(logits.numpy()[0]))]
    for i in range(new):
        logits, cache = model.step(np.array([[tokens[-1]]]), np.array([[16 + i]]), mask,
                                   16 + i, cache, np.zeros(1))
        tokens.append(int(np.argmax(logits.numpy()[0])))
    return tokens

loaded = []
decode(sys.argv[1], 2)          # compiles every kernel (and imports numba) on a tiny model
gc.collect()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")            # resets VmHWM to the current resident size
except OSError:
    pass
base = status("VmRSS")
tokens = decode(sys.argv[2], 8)
print(json.dumps({"base": base, "loaded": loaded[-1], "peak": status("VmHWM"),
                  "tokens": tokens}))
"""


def _llama(path: Path, *, hidden: int, layers: int, ffn: int, vocab: int, heads: int,
           kv_heads: int) -> Path:
    rng = np.random.default_rng(0)

    def mat(*shape: int) -> Any:
        return rng.standard_normal(shape, dtype=np.float32) * 0.05

    head = hidden // heads
    weights = {"token_embd.weight": mat(vocab, hidden),
               "output_norm.weight": np.ones(hidden, np.float32)}  # tied LM head
    for i in range(layers):
        weights |= {f"blk.{i}.attn_norm.weight": np.ones(hidden, np.float32),
                    f"blk.{i}.ffn_norm.weight": np.ones(hidden, np.float32),
                    f"blk.{i}.attn_q.weight": mat(heads * head, hidden),
                    f"blk.{i}.attn_k.weight": mat(kv_heads * head, hidden),
                    f"blk.{i}.attn_v.weight": mat(kv_heads * head, hidden),
                    f"blk.{i}.attn_output.weight": mat(hidden, heads * head),
                    f"blk.{i}.ffn_gate.weight": mat(ffn, hidden),
                    f"blk.{i}.ffn_up.weight": mat(ffn, hidden),
                    f"blk.{i}.ffn_down.weight": mat(hidden, ffn)}
    hparams = dict(arch="llama", context_length=256, embedding_length=hidden,
                   block_count=layers, feed_forward_length=ffn, head_count=heads,
                   head_count_kv=kv_heads, vocab_size=vocab, rope_freq_base=1e4,
                   norm_epsilon=1e-6)
    tokens = [f"<t{i}>" for i in range(vocab - 1)] + ["<t0><t0>"]
    tokenizer = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
                 "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": [1] * vocab,
                 "tokenizer.ggml.merges": ["<t0> <t0>"], "tokenizer.ggml.add_bos_token": False}
    return export_gguf(Checkpoint("llama", hparams, weights), path, dtype="q8_0",
                       tokenizer_metadata=tokenizer)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
def test_q8_0_model_is_resident_about_once(tmp_path: Path) -> None:
    # (ffn 2048: its down projection's rows are long enough for `intdot`'s weight-row pairs,
    # which the second model's 2816 take too)
    tiny = _llama(tmp_path / "tiny.gguf", hidden=64, layers=2, ffn=2048, vocab=512, heads=4,
                  kv_heads=2)
    shape = dict(hidden=512, layers=6, ffn=2816, vocab=8192, heads=8, kv_heads=2)
    model = _llama(tmp_path / "model.gguf", **shape)
    # every kernel the second model runs is compiled on the tiny one (no size tiers)
    env = dict(os.environ, OMNITENSOR_CPU_KERNEL_MIN_ELEMENTS="0")
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tiny), str(model)], env=env,
                         check=True, capture_output=True, text=True, timeout=600)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    head = shape["hidden"] // shape["heads"]
    kv = 2 * shape["layers"] * shape["kv_heads"] * 64 * head * 4
    budget = model.stat().st_size + kv
    assert len(got["tokens"]) == 9
    loaded, peak = got["loaded"] - got["base"], got["peak"] - got["base"]
    assert loaded <= 1.2 * budget, (
        f"loading a {budget / 2**20:.1f} MB model (file + KV cache) added "
        f"{loaded / 2**20:.1f} MB to the resident memory ({loaded / budget:.2f}x)")
    # NOTE: the slack is for the allocator: the first model's freed buffers leave holes in
    # glibc's heap, and whether the second one's fit them varies from run to run with the
    # order of allocations (identical runs peaked 51.5 or 59.7 MB above the base for a 35 MB
    # budget); a second copy of the weights would still be 35 MB more
    assert peak <= 1.2 * budget + (24 << 20), (
        f"loading and decoding a {budget / 2**20:.1f} MB model (file + KV cache) added "
        f"{peak / 2**20:.1f} MB to the peak resident memory ({peak / budget:.2f}x)")
