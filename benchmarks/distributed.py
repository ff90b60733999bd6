"""Scale-out on MPI: training and embedding throughput at 1 and 2 ranks, collective overhead.

Run ``python benchmarks/distributed.py`` (needs omnitensor-comm-mpi, mpi4py and an mpiexec; the
one next to this python is used, as ``pip install mpich`` installs it). It starts this file under
``mpiexec -n 1`` and ``mpiexec -n 2`` (one thread per rank: ``OMNITENSOR_NUM_THREADS=1``, BLAS
and OpenMP 1) and prints, from one run:

- **training**: a data-parallel step (MLP 256 -> 1024 -> 1024 -> 16, 1.3M float32 parameters,
  AdamW, `omnitensor.distributed.data_parallel`) with a fixed batch per rank (weak scaling):
  samples/s at 1 and 2 ranks and the scaling efficiency ``throughput(2) / (2 x throughput(1))``;
- **embedding**: `omnitensor.distributed.embed` of 512 sentences with a random BERT (hidden
  128, 2 layers), texts/s at 1 and 2 ranks and the efficiency;
- **all-reduce** on 2 ranks, float32 buffers of 1, 8 and 32 MiB: omnitensor's collective (the
  tensor op ``distributed.all_reduce(t).realize()``: recording, plan-cache hit, descriptor
  check, nonblocking ``Iallreduce`` on the tensor's own buffer into a pooled result buffer)
  against mpi4py's raw blocking ``Allreduce`` of the same numpy buffer into a preallocated
  output, rounds interleaved; the medians, the bus bandwidth ``2 (n-1)/n x bytes / time`` and
  omnitensor's overhead (target: <= 10 %), with and without the descriptor check
  (``OMNITENSOR_MPI_CHECK=0``).

``--backend`` picks the backend (default cpu). Timings are medians of rounds on a shared
machine; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SIZES_MIB = (1, 8, 32)
BATCH_PER_RANK = 64
SENTENCES = 512


# --- worker side (runs under mpiexec) -------------------------------------------------------


def _bert(folder: Path) -> Path:
    """A random BERT (hidden 128, 2 layers, 4 heads) + WordPiece tokenizer, without torch."""
    import string

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    from omnitensor.io.safetensors import write_safetensors

    hidden, layers, ffn, positions = 128, 2, 512, 128
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = [*specials, *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase),
             *dict.fromkeys(_words()), ".", ","]
    rng = np.random.default_rng(0)

    def mat(*shape: int, scale: float = 0.05) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"embeddings.word_embeddings.weight": mat(len(vocab), hidden),
         "embeddings.position_embeddings.weight": mat(positions, hidden),
         "embeddings.token_type_embeddings.weight": mat(2, hidden),
         "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
         "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32)}
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, shape in (("attention.self.query", (hidden, hidden)),
                            ("attention.self.key", (hidden, hidden)),
                            ("attention.self.value", (hidden, hidden)),
                            ("attention.output.dense", (hidden, hidden)),
                            ("intermediate.dense", (ffn, hidden)),
                            ("output.dense", (hidden, ffn))):
            w[f"{p}{name}.weight"] = mat(*shape)
            w[f"{p}{name}.bias"] = np.zeros(shape[0], np.float32)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[f"{p}{norm}.weight"] = np.ones(hidden, np.float32)
            w[f"{p}{norm}.bias"] = np.zeros(hidden, np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_size": hidden,
        "num_hidden_layers": layers, "num_attention_heads": 4, "intermediate_size": ffn,
        "max_position_embeddings": positions, "vocab_size": len(vocab),
        "layer_norm_eps": 1e-12, "hidden_act": "gelu", "type_vocab_size": 2}))
    write_safetensors(folder / "model.safetensors", w)
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.add_special_tokens(specials)
    (folder / "tokenizer.json").write_text(tok.to_str())
    return folder


def _words() -> list[str]:
    return ("the a of to and in is it you that he was for on are with as his they be at one "
            "have this from or had by hot word but what some we can out other were all there "
            "when up use your how said an each she which do their time if will way about many "
            "then them write would like so these her long make thing see him two has look more "
            "day could go come did number sound no most people my over know water than call "
            "first who may down side been now find any new work part take get place made").split()


def _sentences(n: int) -> list[str]:
    rng = np.random.default_rng(1)
    words = _words()
    return [" ".join(words[i] for i in rng.integers(0, len(words), int(rng.integers(12, 20))))
            + "." for _ in range(n)]


def _train(rounds: int) -> dict[str, Any]:
    import omnitensor as ot
    from omnitensor import distributed as dist
    from omnitensor import nn
    from omnitensor.functional import cross_entropy

    ot.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                          nn.Linear(1024, 16))
    opt = nn.AdamW(model.parameters(), lr=1e-3)

    @dist.data_parallel(opt)
    def step(x: ot.Tensor, y: ot.Tensor) -> ot.Tensor:
        loss = cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    world = dist.world_size()
    rng = np.random.default_rng(0)
    x = ot.from_numpy(rng.standard_normal((BATCH_PER_RANK * world, 256)).astype(np.float32))
    y = ot.from_numpy(rng.integers(0, 16, BATCH_PER_RANK * world).astype(np.int32))
    for _ in range(3):  # trace, compile, warm
        step(x, y).item()
    times = []
    for _ in range(rounds):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(5):
            loss = step(x, y)
        loss.item()
        times.append((time.perf_counter() - start) / 5)
    median = statistics.median(times)
    params = sum(p.size for p in model.parameters())
    return {"step_s": median, "samples_per_s": BATCH_PER_RANK * world / median,
            "params": params}


def _embed(rounds: int, folder: Path) -> dict[str, Any]:
    from omnitensor import distributed as dist
    from omnitensor.runtime import load_model

    encoder = load_model(folder)
    texts = _sentences(SENTENCES)
    dist.embed(encoder, texts[: 64 * dist.world_size()], batch_size=32)  # compile the buckets
    times = []
    for _ in range(rounds):
        dist.barrier()
        start = time.perf_counter()
        dist.embed(encoder, texts, batch_size=32)
        dist.barrier()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"embed_s": median, "texts_per_s": SENTENCES / median}


def _allreduce(rounds: int) -> list[dict[str, Any]]:
    from mpi4py import MPI

    import omnitensor as ot
    from omnitensor import distributed as dist

    world = MPI.COMM_WORLD
    rows = []
    for mib in SIZES_MIB:
        n = mib * 2**20 // 4
        buf = np.random.default_rng(dist.rank()).standard_normal(n).astype(np.float32)
        out = np.empty_like(buf)
        tensor = ot.from_numpy(buf, copy=False)
        got = dist.all_reduce(tensor, "sum").numpy()  # compiles the one-op plan
        world.Allreduce(buf, out)
        if not np.array_equal(got, out):
            raise SystemExit("all_reduce: omnitensor and mpi4py disagree")
        comm: Any = dist.communicator()
        raw_t, omni_t, bare_t = [], [], []
        for _ in range(rounds):
            world.Barrier()
            start = time.perf_counter()
            world.Allreduce(buf, out)
            raw_t.append(time.perf_counter() - start)
            for checks, times in ((True, omni_t), (False, bare_t)):
                comm.checks = checks
                world.Barrier()
                start = time.perf_counter()
                # realize, not .numpy(): numpy() hands the caller a copy, not the collective's
                dist.all_reduce(tensor, "sum").realize()
                times.append(time.perf_counter() - start)
        comm.checks = True
        raw, omni = statistics.median(raw_t), statistics.median(omni_t)
        bare = statistics.median(bare_t)
        rows.append({"mib": mib, "raw_s": raw, "omni_s": omni,
                     "raw_busbw_gbs": 2 * (world.Get_size() - 1) / world.Get_size()
                     * buf.nbytes / raw / 1e9,
                     "omni_busbw_gbs": 2 * (world.Get_size() - 1) / world.Get_size()
                     * buf.nbytes / omni / 1e9,
                     "overhead": omni / raw - 1, "bare_s": bare, "bare_overhead": bare / raw - 1})
    return rows


def worker(args: argparse.Namespace) -> None:
    """One rank of a measurement job; rank 0 prints one JSON line."""
    import omnitensor as ot
    from omnitensor import distributed as dist

    dist.init(timeout=600)
    with ot.use_backend(args.backend):
        result: dict[str, Any] = {"world": dist.world_size()}
        result["train"] = _train(args.rounds)
        result["embed"] = _embed(args.rounds, Path(args.model))
        if dist.world_size() > 1:
            result["allreduce"] = _allreduce(args.rounds * 6)
    if dist.rank() == 0:
        print("RESULT " + json.dumps(result), flush=True)


# --- driver ---------------------------------------------------------------------------------


def _mpiexec() -> str:
    local = Path(sys.executable).with_name("mpiexec")
    if local.exists():
        return str(local)
    found = subprocess.run(["which", "mpiexec"], capture_output=True, text=True).stdout.strip()
    if not found:
        raise SystemExit("no mpiexec: pip install mpich (or use your cluster's MPI)")
    return found


def _job(n: int, args: argparse.Namespace, model: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "OMPI_", "SLURM_"))}
    env.update(OMNITENSOR_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    command = [_mpiexec(), "-n", str(n), sys.executable, __file__, "--worker", "--backend",
               args.backend, "--rounds", str(args.rounds), "--model", str(model)]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT "):]))
    raise SystemExit(f"mpiexec -n {n} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def main() -> None:
    """Run the 1-rank and 2-rank jobs and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model = _bert(Path(tmp) / "bert")
        print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores: {os.cpu_count()})")
        one = _job(1, args, model)
        two = _job(2, args, model)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    t1, t2 = one["train"], two["train"]
    e1, e2 = one["embed"], two["embed"]
    print(f"\nbackend {args.backend}, one thread per rank, medians of {args.rounds} rounds\n")
    print(f"{'workload':<44} {'1 rank':>12} {'2 ranks':>12} {'efficiency':>11}")
    print(f"{'training step, samples/s (batch 64/rank)':<44} {t1['samples_per_s']:>12.1f} "
          f"{t2['samples_per_s']:>12.1f} {t2['samples_per_s'] / 2 / t1['samples_per_s']:>10.0%}")
    print(f"{'  step time, ms':<44} {t1['step_s'] * 1e3:>12.1f} {t2['step_s'] * 1e3:>12.1f}")
    print(f"{'embedding, texts/s (512 texts, batch 32)':<44} {e1['texts_per_s']:>12.1f} "
          f"{e2['texts_per_s']:>12.1f} {e2['texts_per_s'] / 2 / e1['texts_per_s']:>10.0%}")
    print(f"\nall-reduce (sum, float32) on 2 ranks, {t1['params']} training parameters = "
          f"{t1['params'] * 4 / 2**20:.1f} MiB of gradients per step")
    print(f"{'size':>8} {'mpi4py Allreduce':>18} {'omnitensor':>12} {'busbw raw':>11} "
          f"{'busbw omni':>11} {'overhead':>9} {'unchecked':>12} {'overhead':>9}")
    for row in two["allreduce"]:
        print(f"{row['mib']:>5} MiB {row['raw_s'] * 1e3:>15.2f} ms {row['omni_s'] * 1e3:>9.2f} ms "
              f"{row['raw_busbw_gbs']:>7.2f} GB/s {row['omni_busbw_gbs']:>6.2f} GB/s "
              f"{row['overhead']:>+8.1%} {row['bare_s'] * 1e3:>9.2f} ms "
              f"{row['bare_overhead']:>+8.1%}")
    print("(unchecked: OMNITENSOR_MPI_CHECK=0, no descriptor exchange before the collective)")


if __name__ == "__main__":
    main()
