"""Train a small MLP on a synthetic classification task (three interleaved spirals).

Runs on the selected backend: ``OMNITENSOR_BACKEND=ref python examples/train_mlp.py``.
With the default seed the loss falls from about 1.12 to below 0.05 within 150 AdamW steps on
the reference backend (measured: 1.119 -> 0.009 on ref and cpu), and training accuracy reaches
100%. The step (forward, backward, clipping and update) runs under ``omnitensor.compile``: it is
traced once and each later step replays the compiled program, running no Python per op.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import omnitensor as ot
from omnitensor import nn
from omnitensor.functional import cross_entropy
from omnitensor.tensor.realize import stats


def spirals(n_per_class: int, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Points on `classes` noisy spiral arms in 2-D and their arm index."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        theta = np.linspace(c * 2 * np.pi / classes, c * 2 * np.pi / classes + 3.0, n_per_class)
        theta = theta + rng.normal(scale=0.15, size=n_per_class)
        xs.append(np.stack([r * np.sin(theta), r * np.cos(theta)], axis=1))
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int32)


class Classifier(nn.Module):
    """2 -> 64 -> 64 -> classes, GELU activations."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.body = nn.MLP(2, 64, 64, activation="gelu")
        self.head = nn.Linear(64, classes)

    def forward(self, x: ot.Tensor) -> ot.Tensor:
        """Apply the layer (see the class docstring)."""
        return self.head(ot.functional.gelu(self.body(x)))


def main() -> None:
    """Train and report the loss curve, accuracy and plan-cache counters."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args()

    ot.manual_seed(args.seed)
    x_np, y_np = spirals(100, seed=args.seed)
    x, y = ot.from_numpy(x_np), ot.from_numpy(y_np)
    model = Classifier(3)
    opt = nn.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = nn.CosineWithWarmup(opt, warmup_steps=20, total_steps=args.steps,
                                   min_lr=args.lr / 10)

    @ot.distributed.data_parallel(opt)  # was @ot.compile: one process or `mpiexec -n N`
    def train_step(x: ot.Tensor, y: ot.Tensor) -> ot.Tensor:
        """Forward, backward, clipping and AdamW update: traced once, then replayed."""
        loss = cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        nn.clip_grad_norm_(model.parameters(), 5.0)
        opt.step()
        return loss

    start = time.perf_counter()
    first = last = float("nan")
    for step in range(args.steps):
        loss = train_step(x, y)  # parameters, gradients and optimizer state are rebound
        schedule.step()  # rebinds the learning-rate tensor the compiled step reads
        if step == 0 or (step + 1) % 50 == 0:
            last = loss.item()
            first = last if step == 0 else first
            print(f"step {step + 1:4d}  loss {last:.4f}")
    with ot.no_grad():
        accuracy = float((model(x).argmax(axis=-1) == y).astype("float32").mean().item())
    print(f"loss {first:.3f} -> {last:.3f}, accuracy {accuracy:.1%}, "
          f"{time.perf_counter() - start:.1f}s, step traced {train_step.traces}x, plan cache "
          f"{stats.cache_hits} hits / {stats.compiles} compiles on {ot.get_backend().name}")


if __name__ == "__main__":
    main()
