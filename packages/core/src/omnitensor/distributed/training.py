"""Data-parallel training: replicated parameters, sharded batches, bucketed gradients.

Parameters are broadcast from a root, batches sharded by rank, gradients all-reduced in buckets
inside ``backward``; checkpoints are written by rank 0 and load at any world size.

The one-line change that makes a training script data-parallel is its decorator:
``@omnitensor.compile`` becomes ``@omnitensor.distributed.data_parallel(optimizer)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..autograd.engine import gradient_transform
from ..autograd.mode import no_grad
from ..errors import ArgumentTypeError, FormatError, OmnitensorError, ShapeError
from ..nn.module import Module, assign
from ..nn.optim import Optimizer
from ..tensor.jit import compile as compile_fn
from ..tensor.shape import concat
from ..tensor.tensor import Tensor, realize
from .group import all_reduce, broadcast, communicator, rank, world_size

__all__ = [
    "DataParallel",
    "all_reduce_gradients",
    "broadcast_parameters",
    "data_parallel",
    "load_checkpoint",
    "save_checkpoint",
    "shard",
    "shard_range",
]

#: Default bucket size of the gradient all-reduce (bytes): a few collectives per step.
DEFAULT_BUCKET_BYTES = 25 * 2**20


def shard_range(n: int, *, rank_: int | None = None, world: int | None = None) -> range:
    """The rows ``[start, stop)`` of `n` that rank `rank_` owns: contiguous, sizes differ by <= 1.

    Concatenating every rank's rows in rank order gives ``range(n)`` back (input order).
    """
    r = rank() if rank_ is None else rank_
    w = world_size() if world is None else world
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ArgumentTypeError(f"shard_range: n must be a non-negative int (got {n!r})")
    base, extra = divmod(n, w)
    start = r * base + min(r, extra)
    return range(start, start + base + (1 if r < extra else 0))


def shard(*arrays: Any, even: bool = True) -> Any:
    """This rank's contiguous block of rows of each array (numpy arrays, tensors or lists).

    Args:
        *arrays: arrays sharing their first dimension.
        even: require the rows to divide evenly over the ranks (so that every rank's mean loss
            weighs the same and ``world x B`` equals one process with the whole batch).

    Returns:
        One shard (a single array given) or a tuple of shards, of the same kinds as given.

    Raises:
        ShapeError: first dimensions differ, or (with `even`) do not divide by the world size.
    """
    if not arrays:
        raise ArgumentTypeError("shard: needs at least one array")
    for a in arrays:
        if not hasattr(a, "__len__") or not hasattr(a, "__getitem__") or getattr(
                a, "ndim", 1) == 0:
            raise ArgumentTypeError(f"shard: expected arrays, tensors or lists with a first "
                                    f"dimension (got {type(a).__name__})")
    lengths = {len(a) for a in arrays}
    if len(lengths) != 1:
        raise ShapeError(f"shard: arrays must share their first dimension (got lengths "
                         f"{sorted(lengths)})", op="shard")
    n = lengths.pop()
    w = world_size()
    if even and n % w:
        raise ShapeError(f"shard: {n} rows do not divide evenly over {w} ranks (expected a "
                         f"multiple of {w}); drop the remainder or pass even=False", op="shard")
    rows = shard_range(n)
    out = tuple(a[rows.start:rows.stop] for a in arrays)
    return out[0] if len(out) == 1 else out


def _params_of(source: Optimizer | Module | Iterable[Tensor]) -> list[Tensor]:
    if isinstance(source, Optimizer):
        return [p for g in source.param_groups for p in g["params"]]
    if isinstance(source, Module):
        return list(source.parameters())
    params = list(source)
    if not all(isinstance(p, Tensor) for p in params):
        raise ArgumentTypeError("data_parallel: expected an Optimizer, a Module or tensors")
    return params


def broadcast_parameters(source: Optimizer | Module | Iterable[Tensor], *, root: int = 0
                         ) -> None:
    """Overwrite every rank's parameters with rank `root`'s (one program, one bucket per dtype)."""
    params = _params_of(source)
    if world_size() == 1 or not params:
        return
    with no_grad():
        news = _bucketed(params, [p.detach() for p in params],
                         lambda flat: broadcast(flat, root=root), DEFAULT_BUCKET_BYTES)
        realize(*news)
        for p, new in zip(params, news, strict=True):
            assign(p, new)


def _bucketed(keys: Sequence[Tensor], values: Sequence[Tensor], collective: Callable[
        [Tensor], Tensor], bucket_bytes: int) -> list[Tensor]:
    """`collective` applied to `values` concatenated in buckets (per dtype, <= bucket_bytes)."""
    out: list[Tensor | None] = [None] * len(values)
    buckets: list[list[int]] = []
    open_: dict[str, tuple[list[int], int]] = {}
    for i, v in enumerate(values):
        size = v.size * v.dtype.itemsize
        members, used = open_.get(v.dtype.name, ([], 0))
        if members and used + size > bucket_bytes:
            buckets.append(members)
            members, used = [], 0
        members.append(i)
        open_[v.dtype.name] = (members, used + size)
    buckets.extend(members for members, _ in open_.values() if members)
    for members in buckets:
        if len(members) == 1:
            i = members[0]
            out[i] = collective(values[i])
            continue
        flat = concat([values[i].reshape((-1,)) for i in members], axis=0)  # (sum of sizes,)
        reduced = collective(flat)
        offset = 0
        for i in members:
            size = values[i].size
            out[i] = reduced[offset:offset + size].reshape(values[i].shape)  # (n,) -> param
            offset += size
    assert all(t is not None for t in out)
    return [t for t in out if t is not None]


def all_reduce_gradients(source: Optimizer | Module | Iterable[Tensor], *,
                         bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
    """Average ``.grad`` of the parameters over the ranks, in buckets (for hand-written loops).

    Parameters without a gradient on this rank must have none on every rank.
    """
    params = [p for p in _params_of(source) if p.grad is not None]
    if world_size() == 1 or not params:
        return
    with no_grad():
        grads = [p.grad for p in params if p.grad is not None]
        for p, g in zip(params, _bucketed(params, grads, _mean, bucket_bytes), strict=True):
            p.grad = g


def _mean(flat: Tensor) -> Tensor:
    return all_reduce(flat, "mean")


class DataParallel:
    """Data-parallel training over the ranks of the job (DDP's behaviour, JAX pmap's shape).

    Creating it broadcasts the parameters from `root`. Used as a decorator of the training step,
    it compiles the step (as ``omnitensor.compile``), gives each rank its block of the rows of
    every array argument, all-reduces (averages) the gradients each ``backward`` produces in
    buckets of `bucket_bytes` (so clipping and the update see the global gradient), and averages
    the step's floating outputs (the loss) over the ranks. With world size 1 it is exactly
    ``omnitensor.compile``.

    Args:
        source: the optimizer (or module, or parameters) whose parameters are replicated.
        root: the rank whose initial parameters every rank takes.
        bucket_bytes: most bytes per gradient all-reduce.
        shard_inputs: split array arguments by rank (False: the caller already did).

    Raises:
        ArgumentTypeError: a bad `bucket_bytes` or `source`.
    """

    def __init__(self, source: Optimizer | Module | Iterable[Tensor], *, root: int = 0,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, shard_inputs: bool = True) -> None:
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or (
                bucket_bytes <= 0):
            raise ArgumentTypeError(f"data_parallel: bucket_bytes must be a positive int (got "
                                    f"{bucket_bytes!r})")
        if isinstance(root, bool) or not isinstance(root, int) or not (
                0 <= root < world_size()):
            raise ArgumentTypeError(f"data_parallel: root must be a rank in [0, "
                                    f"{world_size()}) (got {root!r})")
        self.params = _params_of(source)
        self.bucket_bytes = bucket_bytes
        self.shard_inputs = shard_inputs
        self._ids = {id(p): i for i, p in enumerate(self.params)}
        communicator()
        broadcast_parameters(self.params, root=root)

    @contextmanager
    def synchronize(self) -> Iterator[None]:
        """Within the block, every ``backward`` averages this model's new gradients over ranks."""
        with gradient_transform(self._sync):
            yield

    def _sync(self, leaves: Sequence[Tensor], grads: Sequence[Tensor]) -> list[Tensor]:
        out = list(grads)
        if world_size() == 1:
            return out
        # NOTE: buckets follow the parameter order, identical on every rank.
        mine = sorted((self._ids[id(t)], k) for k, t in enumerate(leaves) if id(t) in self._ids)
        if not mine:
            return out
        picked = [grads[k] for _, k in mine]
        with no_grad():
            reduced = _bucketed([leaves[k] for _, k in mine], picked, _mean, self.bucket_bytes)
        for (_, k), g in zip(mine, reduced, strict=True):
            out[k] = g
        return out

    def shard(self, *arrays: Any) -> Any:
        """This rank's rows of each array (see `shard`)."""
        return shard(*arrays)

    def __call__(self, fn: Callable[..., Any]) -> _Step:
        """Wrap the training step `fn` (see the class docstring)."""
        return _Step(self, fn)


class _Step:
    """A compiled, data-parallel training step (what `DataParallel` returns as a decorator)."""

    def __init__(self, owner: DataParallel, fn: Callable[..., Any]) -> None:
        self.owner = owner
        self.fn = fn

        def step(*args: Any, **kwargs: Any) -> Any:
            with owner.synchronize():
                result = fn(*args, **kwargs)
            return _average_outputs(result) if world_size() > 1 else result

        self.compiled = compile_fn(step)
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", "step")

    @property
    def traces(self) -> int:
        """How many times the step was traced (as ``CompiledFunction.traces``)."""
        return int(self.compiled.traces)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the step on this rank's shard of every array argument."""
        if self.owner.shard_inputs and world_size() > 1:
            args = tuple(_shard_arg(a) for a in args)
        return self.compiled(*args, **kwargs)


def _shard_arg(value: Any) -> Any:
    if isinstance(value, (Tensor, np.ndarray)) and value.ndim >= 1:
        return shard(value)
    return value


def _average_outputs(result: Any) -> Any:
    if isinstance(result, Tensor):
        return all_reduce(result, "mean") if result.dtype.is_floating else result
    if isinstance(result, tuple):
        return tuple(_average_outputs(r) for r in result)
    if isinstance(result, list):
        return [_average_outputs(r) for r in result]
    if isinstance(result, dict):
        return {k: _average_outputs(v) for k, v in result.items()}
    return result


def data_parallel(source: Optimizer | Module | Iterable[Tensor], **options: Any) -> DataParallel:
    """``@data_parallel(optimizer)`` replaces ``@omnitensor.compile`` on a training step.

    See `DataParallel` for what it does and for `options`.
    """
    return DataParallel(source, **options)


# --- checkpoints ---------------------------------------------------------------------------------


def _optimizer_paths(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".optimizer.safetensors"), path.with_name(
        path.name + ".optimizer.json")


def save_checkpoint(path: str | os.PathLike[str], model: Module,
                    optimizer: Optimizer | None = None) -> None:
    """Rank 0 writes the model (and optimizer) state; every rank waits until it is written.

    Parameters are identical on every rank, so the files do not depend on the world size:
    `load_checkpoint` reads them at any world size. Files: `path` (the model's state dict as
    safetensors, `omnitensor.io.save`), and with an optimizer ``<path>.optimizer.safetensors``
    (state tensors) and ``<path>.optimizer.json`` (step count, hyperparameters).
    """
    from ..io.save import save

    target = Path(path)
    if rank() == 0:
        target.parent.mkdir(parents=True, exist_ok=True)
        save(model, target)
        if optimizer is not None:
            state = optimizer.state_dict()
            tensors = {f"{i}.{k}": v for i, s in state["state"].items() for k, v in s.items()
                       if isinstance(v, np.ndarray)}
            plain = {str(i): {k: v for k, v in s.items() if not isinstance(v, np.ndarray)}
                     for i, s in state["state"].items()}
            tensor_path, json_path = _optimizer_paths(target)
            save(tensors, tensor_path)
            json_path.write_text(json.dumps({"steps": state["steps"], "param_groups":
                                             state["param_groups"], "plain": plain}))
    communicator().barrier()


def load_checkpoint(path: str | os.PathLike[str], model: Module,
                    optimizer: Optimizer | None = None, *, root: int = 0) -> None:
    """Rank `root` reads a `save_checkpoint` checkpoint (any world size); every rank gets it.

    The files need to exist on `root` only.

    Raises:
        FormatError: a malformed file (on `root`; other ranks get a `RankFailedError`).
        OmnitensorError: the checkpoint does not fit the model or optimizer.
    """
    from ..io.save import load

    target = Path(path)
    payload: Any = None
    if rank() == root:
        if not target.is_file():
            raise FormatError(f"load_checkpoint: {target} does not exist or is not a file "
                              f"(on rank {root})", path=str(target))
        state = {k: v.numpy() for k, v in load(target).items()}
        extra = None
        if optimizer is not None:
            tensor_path, json_path = _optimizer_paths(target)
            if not json_path.exists():
                raise OmnitensorError(f"load_checkpoint: {json_path} is missing (the "
                                      "checkpoint was saved without an optimizer)")
            extra = (json.loads(json_path.read_text()),
                     {k: v.numpy() for k, v in load(tensor_path).items()})
        payload = (state, extra)
    state, extra = communicator().broadcast_object(payload, root=root)
    model.load_state_dict(state)
    if optimizer is not None and extra is not None:
        meta, tensors = extra
        restored: dict[int, dict[str, Any]] = {int(i): dict(s) for i, s in meta["plain"].items()}
        for key, value in tensors.items():
            index, name = key.split(".", 1)
            restored.setdefault(int(index), {})[name] = value
        optimizer.load_state_dict({"steps": meta["steps"], "param_groups": meta["param_groups"],
                                   "state": restored})
