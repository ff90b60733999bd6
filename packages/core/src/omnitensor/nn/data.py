"""Batching arrays for training loops: `TensorDataset` and a seeded `DataLoader`.

Batches are host values: they move to the backend of the model on first use, so the loader has
no device logic. Shuffling uses numpy's generator seeded by ``(seed, epoch)``, so a run is
reproducible and each epoch sees a different order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, ShapeError
from ..tensor.tensor import Tensor, as_tensor

__all__ = ["DataLoader", "TensorDataset"]


class TensorDataset:
    """Arrays of equal length, indexed together: ``dataset[i]`` is a tuple of their rows.

    Args:
        *arrays: tensors, numpy arrays or nested lists with the same first dimension.
    """

    def __init__(self, *arrays: Any) -> None:
        if not arrays:
            raise ArgumentTypeError("TensorDataset: needs at least one array")
        self.arrays = [a.numpy() if isinstance(a, Tensor) else np.asarray(a) for a in arrays]
        lengths = {len(a) if a.ndim else -1 for a in self.arrays}
        if len(lengths) != 1 or -1 in lengths:
            raise ShapeError(f"TensorDataset: arrays must share their first dimension (got "
                             f"shapes {[a.shape for a in self.arrays]})")

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(as_tensor(a[index]) for a in self.arrays)


class DataLoader:
    """Mini-batches over a `TensorDataset` (or one array), shuffled with a seed.

    ``for x, y in DataLoader(TensorDataset(xs, ys), batch_size=32, shuffle=True, seed=0)``
    yields tuples of tensors (a single tensor when there is one array).

    Args:
        dataset: a `TensorDataset`, or one array (tensor, numpy array or list).
        batch_size: rows per batch.
        shuffle: visit rows in a new random order every epoch.
        drop_last: skip the final batch when it has fewer than `batch_size` rows.
        seed: seeds the order; epoch ``e`` uses ``numpy.random.default_rng((seed, e))``.
    """

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int = 0) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ArgumentTypeError(f"DataLoader: batch_size must be a positive integer (got "
                                    f"{batch_size!r})")
        self.dataset = dataset if isinstance(dataset, TensorDataset) else TensorDataset(dataset)
        self.batch_size, self.shuffle, self.drop_last, self.seed = (
            batch_size, shuffle, drop_last, seed)
        self.epoch = 0

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(n)
        else:
            order = np.arange(n)
        self.epoch += 1
        for batch in range(len(self)):
            rows = order[batch * self.batch_size:(batch + 1) * self.batch_size]
            items = self.dataset[rows]
            yield items[0] if len(items) == 1 else items
