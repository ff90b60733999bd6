"""Fuzz the loaders: GGUF, Hugging Face directories, ModelSpec JSON and PTIR text.

Every case is a mutation of a valid seed (the shipped char-gpt as GGUF and as a Hugging Face
directory, a tiny Llama, the shipped llama spec, printed PTIR functions), made deterministically
from ``(format, seed, index)`` and run in a worker process that loads it the way a user would
(``open_checkpoint`` + ``ModelBuilder.build`` on the ref backend + a two-token ``generate`` for
files; ``ModelSpec.from_json`` + build for specs; ``parse_function`` + ``verify`` + print for
PTIR). A case passes when it loads or raises an `omnitensor.errors.OmnitensorError`; it fails on
any other exception (``foreign``), when it runs past the time limit (``timeout``: the worker is
killed and restarted), when the worker dies (``crash``), or when its peak resident memory grows
by more than ``floor + factor x input bytes`` (``memory``; VmHWM is reset before each case).

    python benchmarks/fuzz.py [--formats gguf,gguf-bytes,hf,spec,ptir] [--cases 300]
        [--seed 0] [--time-limit 10] [--show 5]
    python benchmarks/fuzz.py --formats hf --seed 0 --case 17 --save /tmp/case17   # reproduce

Prints per format: cases, outcomes (``ok``, each project error type, each failure class) and
the slowest case; exits 1 when any case failed. ``tests/fuzz`` runs a short seeded campaign.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import math
import multiprocessing as mp
import os
import random
import resource
import shutil
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMATS = ("gguf", "gguf-bytes", "hf", "spec", "ptir")
MEMORY_FLOOR = 96 << 20  # bytes of growth any case may use (tokenizer, model build, compile)
MEMORY_FACTOR = 8  # ... plus this many times the bytes of the case's files

INTS = (0, 1, -1, 2, 3, 5, 7, 13, 31, 32, 33, 63, 64, 65, 255, 256, 1023, 4096, 65535, 2**31 - 1,
        2**31, -(2**31), 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**64 - 1, 100000, 10**9)
FLOATS = (0.0, -0.0, -1.0, 1e-300, 1e300, math.inf, -math.inf, math.nan, 1e-45, 0.5, 2.5)


@dataclass
class Outcome:
    """What one case did."""

    index: int
    kind: str  # "ok", "error", "foreign", "timeout", "crash", "memory", "skip"
    name: str  # exception type (or "" when ok)
    message: str
    seconds: float
    grown: int  # bytes of peak RSS growth
    size: int  # bytes of the case's files
    detail: str = ""  # mutation description

    @property
    def failed(self) -> bool:
        """A failure class: anything but a load, a project error or an unwritable mutation."""
        return self.kind not in ("ok", "error", "skip")


# --- seeds ------------------------------------------------------------------------------------


def _char_gpt() -> Path:
    import omnitensor

    return Path(omnitensor.__file__).parent / "data" / "char-gpt"


_TINY: dict[str, Any] = {}


def _tiny_llama() -> Any:
    """A 2-layer grouped-query Llama over a character vocabulary (a Checkpoint)."""
    if "llama" not in _TINY:
        import numpy as np

        from omnitensor.io.tokenizer import char_tokenizer
        from omnitensor.models import Checkpoint

        tokenizer = char_tokenizer("abcdefgh +=.", bos="<s>", eos="</s>")
        vocab, hidden, ffn, heads, kv = tokenizer.vocab_size, 16, 32, 4, 2
        rng = np.random.default_rng(0)

        def mat(*shape: int) -> Any:
            return (rng.standard_normal(shape) * 0.5).astype(np.float32)

        weights = {"token_embd.weight": mat(vocab, hidden), "output_norm.weight": 1 + mat(hidden),
                   "output.weight": mat(vocab, hidden)}
        for i in range(2):
            weights |= {f"blk.{i}.attn_norm.weight": 1 + mat(hidden),
                        f"blk.{i}.attn_q.weight": mat(hidden, hidden),
                        f"blk.{i}.attn_k.weight": mat(kv * hidden // heads, hidden),
                        f"blk.{i}.attn_v.weight": mat(kv * hidden // heads, hidden),
                        f"blk.{i}.attn_output.weight": mat(hidden, hidden),
                        f"blk.{i}.ffn_norm.weight": 1 + mat(hidden),
                        f"blk.{i}.ffn_gate.weight": mat(ffn, hidden),
                        f"blk.{i}.ffn_up.weight": mat(ffn, hidden),
                        f"blk.{i}.ffn_down.weight": mat(hidden, ffn)}
        hparams = dict(arch="llama", context_length=32, embedding_length=hidden, block_count=2,
                       feed_forward_length=ffn, head_count=heads, head_count_kv=kv,
                       vocab_size=vocab, rope_freq_base=10000.0, norm_epsilon=1e-5)
        _TINY["llama"] = Checkpoint("llama", hparams, weights, tokenizer)
    return _TINY["llama"]


_LLAMA_HF = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight":
             "model.norm.weight", "output.weight": "lm_head.weight"}
_LLAMA_HF_LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj",
                   "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                   "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
                   "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                   "ffn_down": "mlp.down_proj"}


def _write_llama_hf(folder: Path) -> None:
    """The tiny Llama as a Hugging Face directory (config.json, safetensors, tokenizer.json)."""
    from omnitensor.io import write_safetensors

    ck = _tiny_llama()
    tensors = {}
    for name, value in ck.weights.items():
        if name in _LLAMA_HF:
            tensors[_LLAMA_HF[name]] = value
        else:
            _, layer, part, kind = name.split(".")
            tensors[f"model.layers.{layer}.{_LLAMA_HF_LAYER[part]}.{kind}"] = value
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "model.safetensors", tensors)
    hp = ck.hparams
    config = {"model_type": "llama", "hidden_size": hp["embedding_length"],
              "num_hidden_layers": hp["block_count"], "num_attention_heads": hp["head_count"],
              "num_key_value_heads": hp["head_count_kv"],
              "intermediate_size": hp["feed_forward_length"],
              "max_position_embeddings": hp["context_length"], "vocab_size": hp["vocab_size"],
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
              "bos_token_id": ck.tokenizer.bos_id, "eos_token_id": ck.tokenizer.eos_id}
    (folder / "config.json").write_text(json.dumps(config))
    ck.tokenizer.save(folder / "tokenizer.json")


def _seed_gguf(workdir: Path, which: str) -> Path:
    path = workdir / f"seed-{which}.gguf"
    if not path.exists():
        if which == "gpt2":
            shutil.copy(_char_gpt() / "char-gpt.gguf", path)
        else:
            from omnitensor.models import export_gguf

            export_gguf(_tiny_llama(), path)
    return path


def _seed_hf(workdir: Path, which: str) -> Path:
    folder = workdir / f"seed-{which}"
    if not folder.exists():
        if which == "gpt2":
            shutil.copytree(_char_gpt(), folder, ignore=shutil.ignore_patterns("*.gguf"))
        else:
            _write_llama_hf(folder)
    return folder


# --- mutations --------------------------------------------------------------------------------


def _interesting(rng: random.Random, value: Any) -> Any:
    """A value of the kind that breaks loaders, related to `value` when it is a number."""
    if isinstance(value, bool):
        return rng.choice([not value, 0, 2, "true", None])
    if isinstance(value, int):
        return rng.choice([*INTS, value + 1, value - 1, value * 2, value // 2, -value,
                           value + 2**31, float(value) + 0.5, str(value), None, [value]])
    if isinstance(value, float):
        return rng.choice([*FLOATS, value * 1e6, -value, int(value), str(value), None])
    if isinstance(value, str):
        return rng.choice(["", value * 50, value[::-1], value + "\x00", "\ud800"[:0] + "é",
                           0, None, [value], "gpt2", "llama", "bert", "qwen3", "unknown"])
    if isinstance(value, list):
        choices: list[Callable[[], Any]] = [
            lambda: [], lambda: value[: len(value) // 2], lambda: value + value,
            lambda: value[1:], lambda: [[]] * 3, lambda: [value], lambda: list(reversed(value)),
            lambda: [_interesting(rng, v) for v in value[:8]] + value[8:],
            lambda: {"a": value}, lambda: None]
        if value and isinstance(value[0], int) and not isinstance(value[0], bool):
            choices.append(lambda: [v + 2**31 for v in value])
            choices.append(lambda: [rng.choice(INTS) for _ in value])
        return rng.choice(choices)()
    if isinstance(value, dict):
        return rng.choice([{}, [], None, 0, {k: None for k in value}])
    return rng.choice([0, "", None, [], {}])


def _mutate_tree(rng: random.Random, tree: Any, *, max_edits: int = 3) -> tuple[Any, str]:
    """A copy of a JSON-like tree with 1..max_edits edits at random nodes (described)."""
    tree = copy.deepcopy(tree)
    done = []
    for _ in range(rng.randint(1, max_edits)):
        paths: list[tuple[Any, Any, str]] = []

        def walk(node: Any, where: str, paths: list[tuple[Any, Any, str]] = paths) -> None:
            if isinstance(node, dict):
                for key in list(node)[:400]:
                    paths.append((node, key, f"{where}.{key}"))
                    walk(node[key], f"{where}.{key}")
            elif isinstance(node, list):
                for i in range(min(len(node), 400)):
                    paths.append((node, i, f"{where}[{i}]"))
                    walk(node[i], f"{where}[{i}]")

        walk(tree, "$")
        if not paths:
            break
        parent, key, where = rng.choice(paths)
        action = rng.random()
        if action < 0.65:
            parent[key] = _interesting(rng, parent[key])
            done.append(f"{where}={_short(parent[key])}")
        elif action < 0.8 and isinstance(parent, dict):
            del parent[key]
            done.append(f"del {where}")
        elif action < 0.9 and isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
            done.append(f"dup {where}")
        elif isinstance(parent, dict):
            parent[f"{key}_{rng.randint(0, 9)}"] = copy.deepcopy(parent[key])
            done.append(f"copy {where}")
        else:
            del parent[key]
            done.append(f"del {where}")
    return tree, "; ".join(done)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 60 else text[:57] + "..."


def _mutate_bytes(rng: random.Random, data: bytes, *, region: int | None = None
                  ) -> tuple[bytes, str]:
    """Flips, interesting integers, insertions, deletions or a truncation (mostly in `region`)."""
    out = bytearray(data)
    end = min(len(out), region or len(out))
    done = []
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(max(end, 1))
        action = rng.random()
        if action < 0.3:
            out[at] ^= 1 << rng.randrange(8)
            done.append(f"flip@{at}")
        elif action < 0.6:
            width = rng.choice([1, 2, 4, 8])
            value = rng.choice(INTS) % (1 << (8 * width))
            out[at:at + width] = value.to_bytes(width, "little")
            done.append(f"int{width}@{at}={value}")
        elif action < 0.75:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            done.append(f"insert@{at}")
        elif action < 0.9:
            del out[at:at + rng.randint(1, 16)]
            done.append(f"delete@{at}")
        else:
            del out[at:]
            done.append(f"truncate@{at}")
            break
    return bytes(out), " ".join(done)


# --- case builders: (rng, workdir) -> (thing to load, description) ---------------------------


def _gguf_semantic(rng: random.Random, workdir: Path, out: Path) -> str:
    from omnitensor.io import read_gguf, write_gguf

    seed = _seed_gguf(workdir, rng.choice(["gpt2", "llama"]))
    file = read_gguf(seed)
    metadata = dict(file.metadata)
    metadata.pop("general.file_type", None)
    types = dict(file.metadata_types)
    tensors = file.load_all()
    done = []
    for _ in range(rng.randint(1, 3)):
        action = rng.random()
        if action < 0.7:
            key = rng.choice(sorted(metadata))
            if key == "general.architecture" and rng.random() < 0.7:
                continue
            metadata[key] = _interesting(rng, metadata[key])
            types.pop(key, None)
            done.append(f"{key}={_short(metadata[key])}")
            if metadata[key] is None:
                del metadata[key]
        elif action < 0.8:
            key = rng.choice(sorted(metadata))
            del metadata[key]
            done.append(f"del {key}")
        elif action < 0.9 and tensors:
            name = rng.choice(sorted(tensors))
            del tensors[name]
            done.append(f"drop tensor {name}")
        elif tensors:
            name = rng.choice(sorted(tensors))
            value = tensors[name]
            if getattr(value, "ndim", 0) >= 2 and value.shape[0] > 1:
                tensors[name] = value[: rng.randint(1, value.shape[0] - 1)].copy()
            else:
                tensors[name] = value.reshape(-1)[: max(1, value.size // 2)].copy()
            done.append(f"shrink tensor {name}")
    arch = metadata.get("general.architecture")
    arch = arch if isinstance(arch, str) else "llama"
    clean = {k: v for k, v in metadata.items() if not _unwritable(v)}
    write_gguf(out, clean, tensors, arch=arch, types={k: t for k, t in types.items()
                                                       if k in clean})
    return "; ".join(done)


def _unwritable(value: Any) -> bool:
    """Values GGUF has no type for (the writer would refuse them)."""
    if value is None or isinstance(value, dict):
        return True
    if isinstance(value, list):
        return any(_unwritable(v) for v in value) or (
            len({type(v) for v in value}) > 1)
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**63) <= value < 2**64
    return False


def _gguf_bytes(rng: random.Random, workdir: Path, out: Path) -> str:
    seed = _seed_gguf(workdir, rng.choice(["gpt2", "llama"]))
    data = seed.read_bytes()
    from omnitensor.io import read_gguf

    header = read_gguf(seed).data_offset
    mutated, done = _mutate_bytes(rng, data, region=header if rng.random() < 0.9 else None)
    out.write_bytes(mutated)
    return done


def _hf_case(rng: random.Random, workdir: Path, out: Path) -> str:
    seed = _seed_hf(workdir, rng.choice(["gpt2", "llama"]))
    shutil.copytree(seed, out)
    target = rng.choice(["config.json", "config.json", "tokenizer.json", "tokenizer.json",
                         "safetensors-header", "safetensors-bytes", "tokenizer_config.json"])
    if target in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        file = out / target
        if not file.exists():
            return "no-op"
        tree = json.loads(file.read_text())
        if target == "tokenizer.json" and rng.random() < 0.25:
            vocab = tree.get("model", {}).get("vocab")
            shift = rng.choice([2**31, 2**31 - 100, 10**6, -5, 2**20])
            if isinstance(vocab, dict):
                tree["model"]["vocab"] = {k: v + shift for k, v in vocab.items()}
            for added in tree.get("added_tokens") or []:
                added["id"] += shift
            mutated, done = tree, f"ids shifted by {shift}"
        else:
            mutated, done = _mutate_tree(rng, tree)
        file.write_text(json.dumps(mutated))
        return f"{target}: {done}"
    file = out / "model.safetensors"
    data = file.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    if target == "safetensors-header":
        header = json.loads(data[8:8 + length])
        mutated, done = _mutate_tree(rng, header)
        raw = json.dumps(mutated).encode()
        raw += b" " * (-len(raw) % 8)
        file.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length:])
        return f"safetensors header: {done}"
    mutated_bytes, done = _mutate_bytes(rng, data, region=8 + length)
    file.write_bytes(mutated_bytes)
    return f"safetensors bytes: {done}"


def _spec_case(rng: random.Random, workdir: Path, out: Path) -> str:
    from omnitensor.models import builtin_spec

    base = json.loads(builtin_spec("llama").to_json())
    action = rng.random()
    if action < 0.15:
        count = rng.choice([100000, 10**9, 2**31, 5000, -1, 0])
        base["forward"].insert(1, {"repeat": count, "steps": [
            {"op": "Add", "inputs": ["x", "x"], "output": "x"}]})
        done = f"repeat {count}"
    elif action < 0.25:
        # written as text: json.dumps itself recurses too deep for the largest
        depth = rng.choice([50, 200, 2000, 10000])
        inner = '{"op": "Add", "inputs": ["x", "x"], "output": "x"}'
        nested = '{"repeat": 1, "steps": [' * depth + inner + "]}" * depth
        head, tail = json.dumps(base).split('"forward": [', 1)
        out.write_text(f'{head}"forward": [{nested}, {tail}')
        return f"nested {depth}"
    elif action < 0.3:
        steps = base["forward"][1:2] * rng.choice([1000, 30000])
        base["forward"][1:1] = steps
        done = f"{len(steps)} copies of a step"
    else:
        base, done = _mutate_tree(rng, base)
    out.write_text(json.dumps(base))
    return done


_PTIR_SEEDS: list[str] = []


def _ptir_seeds() -> list[str]:
    if not _PTIR_SEEDS:
        import numpy as np

        from omnitensor import dtypes as dt
        from omnitensor.ir.builder import Builder
        from omnitensor.ir.text import print_function
        from omnitensor.ir.types import TensorType

        b = Builder()
        x = b.input(TensorType((2, 3), dt.float32))
        w = b.input(TensorType((3, 4), dt.float32))
        y = b.emit("dot_general", x, w, contracting=((1,), (0,)), batch=((), ()))
        s = b.emit("reduce_sum", b.emit("exp", y), axes=(1,))
        c = b.emit("constant", value=np.arange(2, dtype=np.float32))
        _PTIR_SEEDS.append(print_function(b.build([b.emit("add", s, c)])))
        b = Builder()
        x = b.input(TensorType((4, 8), dt.float32))
        t = b.emit("transpose", x, perm=(1, 0))
        r = b.emit("reshape", t, shape=(2, 16))
        g = b.emit("softmax", r, axes=(1,))
        _PTIR_SEEDS.append(print_function(b.build([g, b.emit("convert", g, dtype=dt.float16)])))
    return _PTIR_SEEDS


def _ptir_case(rng: random.Random, workdir: Path, out: Path) -> str:
    import re

    text = rng.choice(_ptir_seeds())
    tokens = re.findall(r"\d+|[A-Za-z_][\w.]*|\s+|.", text)
    done = []
    if rng.random() < 0.5:  # well-formed text, wrong numbers: reaches the verifier and kernels
        numbers = [i for i, t in enumerate(tokens) if t.isdigit() and tokens[i - 1] != "%"]
        at = rng.choice(numbers)
        old, tokens[at] = tokens[at], str(rng.choice([0, 1, 2, 3, 4, 5, 6, 8, 16, 64, 2**20]))
        out.write_text("".join(tokens))
        return f"{at}:{old!r}->{tokens[at]!r}"
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(tokens))
        token = tokens[at]
        action = rng.random()
        if token.isdigit() and action < 0.6:
            tokens[at] = str(rng.choice([*INTS[:24], 10**30]))
        elif action < 0.4:
            tokens[at] = rng.choice(["f32", "i32", "f16", "bool", "add", "tensor", "x", "(", ")",
                                     "[", "]", ",", "=", "%0", "%9", "-", "inf", "nan", "",
                                     "\n", "{", "}", ":"])
        elif action < 0.7:
            del tokens[at]
        else:
            tokens.insert(at, tokens[rng.randrange(len(tokens))])
        done.append(f"{at}:{token!r}->{tokens[at] if at < len(tokens) else ''!r}")
    out.write_text("".join(tokens))
    return " ".join(done)


BUILDERS: dict[str, Callable[[random.Random, Path, Path], str]] = {
    "gguf": _gguf_semantic, "gguf-bytes": _gguf_bytes, "hf": _hf_case, "spec": _spec_case,
    "ptir": _ptir_case}
SUFFIX = {"gguf": ".gguf", "gguf-bytes": ".gguf", "hf": "", "spec": ".json", "ptir": ".ptir"}


def make_case(fmt: str, seed: int, index: int, workdir: Path) -> tuple[Path, str]:
    """Write case `index` of `fmt` under `workdir` (deterministic in seed and index)."""
    rng = random.Random(f"{fmt}/{seed}/{index}")
    out = workdir / f"case-{fmt}-{index}{SUFFIX[fmt]}"
    if out.is_dir():
        shutil.rmtree(out)
    return out, BUILDERS[fmt](rng, workdir, out)


# --- running a case ---------------------------------------------------------------------------


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size if path.exists() else 0


def run_case(fmt: str, path: Path) -> None:
    """Load the case as a user would; raises whatever the loader raises."""
    from omnitensor.ir.text import parse_function, print_function
    from omnitensor.ir.verify import verify
    from omnitensor.models import ModelBuilder, ModelSpec, builtin_spec, open_checkpoint
    from omnitensor.runtime.loaded import CausalLM

    if fmt == "ptir":
        import math

        import numpy as np

        from omnitensor.ir.interpret import evaluate
        from omnitensor.ir.types import TensorType

        fn = parse_function(path.read_text(encoding="utf-8", errors="replace"))
        verify(fn)
        print_function(fn)
        types = [spec.value.type for spec in fn.inputs]
        if all(isinstance(t, TensorType) for t in types) and sum(
                math.prod(t.shape) for t in types) <= 1 << 16:
            evaluate(fn, [np.ones(t.shape, t.dtype.np) for t in types])
        return
    if fmt == "spec":
        spec = ModelSpec.from_json(path)
        ModelBuilder().with_spec(spec).with_checkpoint(_tiny_llama()).build("ref")
        return
    checkpoint = open_checkpoint(path)
    spec = builtin_spec(checkpoint.arch)
    model = ModelBuilder().with_spec(spec).with_checkpoint(checkpoint).build("ref")
    if spec.kind == "causal_lm" and model.tokenizer is not None:
        CausalLM(model).generate("12+3=" if checkpoint.arch == "gpt2" else "abc", 2)


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def _worker(conn: Any, fmt: str, seed: int, workdir: str, cap: int) -> None:
    """Make and run cases on request: receives indices, sends `Outcome`s."""
    import logging
    import warnings

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    os.environ.setdefault("OMNITENSOR_BACKEND", "ref")
    os.environ["RUST_BACKTRACE"] = "0"  # an abort must end the worker now, not symbolize
    from omnitensor.errors import OmnitensorError

    work = Path(workdir)
    # warm up: the seeds, the imports and a first build, so that the first case is not charged
    for warm in range(2):
        try:
            path, _ = make_case(fmt, seed, -1 - warm, work)
            run_case(fmt, path)
        except BaseException:  # noqa: BLE001 - warm-up only
            pass
    if cap:
        limit = _status("VmSize") + cap
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        index = conn.recv()
        if index is None:
            return
        try:
            path, detail = make_case(fmt, seed, index, work)
        except Exception as exc:  # noqa: BLE001 - a mutation the writers refuse
            conn.send(Outcome(index, "skip", type(exc).__name__, str(exc)[:200], 0, 0, 0))
            continue
        size = _size(path)
        conn.send(("started", detail))  # the parent keeps it in case this case never returns
        _reset_peak()
        base = _status("VmRSS")
        start = time.perf_counter()
        kind, name, message = "ok", "", ""
        try:
            run_case(fmt, path)
        except OmnitensorError as exc:
            kind, name, message = "error", type(exc).__name__, str(exc)[:300]
        except BaseException as exc:  # noqa: BLE001 - that is the finding
            kind, name = "foreign", type(exc).__name__
            message = "".join(traceback.format_exception_only(exc)).strip()[:300]
            message += " | " + " < ".join(
                f"{Path(f.filename).name}:{f.lineno}" for f in
                reversed(traceback.extract_tb(exc.__traceback__)[-4:]))
        seconds = time.perf_counter() - start
        grown = max(0, _status("VmHWM") - base)
        if kind != "foreign" and grown > MEMORY_FLOOR + MEMORY_FACTOR * size:
            kind, name = "memory", f"{name or 'ok'}+{grown >> 20}MB"
        conn.send(Outcome(index, kind, name, message, seconds, grown, size, detail))
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def campaign(fmt: str, *, cases: int, seed: int, time_limit: float, start: int = 0,
             cap: int = 3 << 30, log: Callable[[str], None] | None = None) -> list[Outcome]:
    """Run cases ``start .. start+cases-1`` of `fmt`; one worker, restarted after a kill."""
    ctx = mp.get_context("spawn")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{fmt}-") as workdir:
        proc = conn = None
        index = start
        while index < start + cases:
            if proc is None:
                conn, child = ctx.Pipe()
                proc = ctx.Process(target=_worker, args=(child, fmt, seed, workdir, cap),
                                   daemon=True)
                proc.start()
                child.close()
            assert conn is not None
            conn.send(index)
            began = time.perf_counter()
            # the first case of a fresh worker also waits for its imports and warm-up
            budget = time_limit + (120 if not outcomes or outcomes[-1].kind in (
                "timeout", "crash") else 0)
            detail = ""
            outcome = None
            try:
                while outcome is None and conn.poll(budget):
                    message = conn.recv()
                    if isinstance(message, tuple):  # ("started", detail): the clock starts now
                        detail, began, budget = message[1], time.perf_counter(), time_limit
                    else:
                        outcome = message
            except (EOFError, OSError):
                proc.join(5)
                outcome = Outcome(index, "crash", f"exit {proc.exitcode}", "worker died", 0, 0, 0,
                                  detail)
            if outcome is None:
                outcome = Outcome(index, "timeout", f">{time_limit:g}s", "",
                                  time.perf_counter() - began, 0, 0, detail)
            if outcome.kind in ("timeout", "crash"):
                proc.kill()
                proc.join()
                proc = None
            elif outcome.seconds > time_limit:
                outcome.kind, outcome.name = "timeout", f"{outcome.seconds:.1f}s"
            outcomes.append(outcome)
            if log is not None and outcome.failed:
                log(f"{fmt} #{index}: {outcome.kind} {outcome.name} {outcome.message[:200]} "
                    f"[{outcome.detail[:120]}]")
            index += 1
        if proc is not None and conn is not None:
            conn.send(None)
            proc.join(10)
            if proc.is_alive():
                proc.kill()
    return outcomes


def summarize(fmt: str, outcomes: list[Outcome]) -> str:
    """One line per format: cases, outcome counts, slowest case, largest memory growth."""
    counts = collections.Counter(
        "ok" if o.kind == "ok" else f"{o.kind}:{o.name}" for o in outcomes)
    slow = max(outcomes, key=lambda o: o.seconds, default=None)
    big = max(outcomes, key=lambda o: o.grown, default=None)
    parts = ", ".join(f"{k} {v}" for k, v in counts.most_common())
    failed = sum(o.failed for o in outcomes)
    tail = ""
    if slow is not None and big is not None:
        tail = (f"; slowest #{slow.index} {slow.seconds:.2f}s; most memory #{big.index} "
                f"+{big.grown / 2**20:.1f}MB")
    return f"{fmt}: {len(outcomes)} cases, {failed} failed ({parts}){tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--case", type=int, help="make one case and run it here (reproduce)")
    parser.add_argument("--save", type=Path, help="with --case: keep the case's files here")
    args = parser.parse_args(argv)
    formats = [f for f in args.formats.split(",") if f]
    unknown = set(formats) - set(FORMATS)
    if unknown:
        parser.error(f"unknown formats {sorted(unknown)} (known: {', '.join(FORMATS)})")
    if args.case is not None:
        work = args.save or Path(tempfile.mkdtemp(prefix="fuzz-case-"))
        work.mkdir(parents=True, exist_ok=True)
        for fmt in formats:
            path, detail = make_case(fmt, args.seed, args.case, work)
            print(f"{fmt} #{args.case}: {path} [{detail}]")
            run_case(fmt, path)
            print("loaded")
        return 0
    failed = 0
    for fmt in formats:
        t0 = time.perf_counter()
        outcomes = campaign(fmt, cases=args.cases, seed=args.seed, start=args.start,
                            time_limit=args.time_limit, log=print)
        failed += sum(o.failed for o in outcomes)
        print(summarize(fmt, outcomes) + f" [{time.perf_counter() - t0:.0f}s]", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
