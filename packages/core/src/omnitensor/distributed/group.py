"""The process group (`init`, `rank`, `world_size`, `barrier`) and collectives on tensors.

`init` detects the launcher and picks a communicator; the collectives are recorded as PTIR
ops, so they live inside compiled programs.

No communication library is imported here: a multi-process launch uses the communicator a
plugin registers (``omnitensor-comm-mpi``); a plain process runs as world size 1.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from ..backend.communicators import Communicator, LocalCommunicator, create_communicator
from ..backend.communicators import detect_launch as detect_launch
from ..errors import ArgumentTypeError, BackendNotInstalledError, DistributedError
from ..ir.ops.collective import REDUCTIONS, collective_runtime, set_collective_runtime
from ..tensor.tensor import Tensor, as_tensor

__all__ = [
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "communicator",
    "detect_launch",
    "init",
    "is_initialized",
    "rank",
    "reduce_scatter",
    "set_timeout",
    "shutdown",
    "world_size",
]

logger = logging.getLogger(__name__)

_DEFAULT_TIMEOUT = 300.0
_STATE: dict[str, Communicator] = {}


def _timeout_from_env() -> float:
    raw = os.environ.get("OMNITENSOR_DIST_TIMEOUT", "").strip()
    if not raw:
        return _DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ArgumentTypeError(f"OMNITENSOR_DIST_TIMEOUT must be a positive number of seconds "
                                f"(got {raw!r})")
    return value


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ArgumentTypeError(
            f"distributed.init: timeout must be a positive number of seconds (got {timeout!r})")
    return float(timeout)


def init(*, timeout: float | None = None, communicator: str | None = None) -> Communicator:
    """Join the job this process was launched in (idempotent: later calls return the same).

    mpiexec/mpirun (``PMI_RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMIX_RANK``) or srun
    (``SLURM_PROCID`` with more than one task) start several processes: the communicator named by
    `communicator` or ``OMNITENSOR_COMMUNICATOR`` (else the highest-priority installed one) joins
    them. A plain process is world size 1 and needs no communication library.

    Args:
        timeout: seconds a collective waits for the other ranks before raising
            `DistributedTimeoutError` naming them (default ``OMNITENSOR_DIST_TIMEOUT`` or 300).
        communicator: a communicator name (``"mpi"``); forces it even in a plain process.

    Returns:
        The communicator in use.

    Raises:
        BackendNotInstalledError: launched by a launcher but no communicator is installed.
        DistributedError: the communicator's world disagrees with the launcher's (mpi4py built
            against another MPI than the mpiexec that started the process).
        ArgumentTypeError: a bad `timeout`.
    """
    seconds = _timeout_from_env() if timeout is None else _check_timeout(timeout)
    existing = _STATE.get("comm")
    if existing is not None:
        if timeout is not None:
            existing.set_timeout(seconds)
        return existing
    launch = detect_launch()
    if communicator is None and not launch.multi_process and not os.environ.get(
            "OMNITENSOR_COMMUNICATOR", "").strip():
        comm: Communicator = LocalCommunicator(seconds)
    else:
        try:
            comm = create_communicator(communicator, timeout=seconds)
        except BackendNotInstalledError as exc:
            if launch.launcher is None:
                raise
            raise BackendNotInstalledError(
                f"distributed.init: started by {launch.launcher} ({launch.variable}="
                f"{launch.rank}) but {exc}", backend=exc.backend) from exc
        if launch.world_size is not None and launch.multi_process and (
                comm.world_size != launch.world_size):
            raise DistributedError(
                f"distributed.init: {launch.launcher} started {launch.world_size} processes but "
                f"communicator {comm.name!r} sees a world of {comm.world_size}; the MPI library "
                "mpi4py uses is not the one behind this mpiexec (run the mpiexec of the same "
                "installation, e.g. the one `pip install mpich` puts next to python)")
    _STATE["comm"] = comm
    set_collective_runtime(comm)
    if comm.world_size > 1:
        # NOTE: launchers report a killed process by PID; this line maps it to its rank.
        logger.info("distributed: rank %d of %d is pid %d on %s (%s, communicator %s)",
                    comm.rank, comm.world_size, os.getpid(), socket.gethostname(),
                    launch.launcher or "forced", comm.name)
    return comm


def is_initialized() -> bool:
    """True after `init` (explicit, or implicit through `rank` and the others)."""
    return "comm" in _STATE


def communicator() -> Communicator:
    """The communicator in use (`init` runs first if needed)."""
    return _STATE.get("comm") or init()


def rank() -> int:
    """This process's rank (0 in a single process)."""
    return communicator().rank


def world_size() -> int:
    """How many processes take part (1 in a single process)."""
    return communicator().world_size


def set_timeout(seconds: float) -> None:
    """Change how long collectives wait for other ranks (positive seconds)."""
    communicator().set_timeout(_check_timeout(seconds))


def barrier() -> None:
    """Return once every rank has called `barrier` (raises on timeout or a failed rank)."""
    communicator().barrier()


def shutdown() -> None:
    """Leave the job: release the communicator; collectives afterwards start a new `init`."""
    comm = _STATE.pop("comm", None)
    if comm is not None and collective_runtime() is comm:
        set_collective_runtime(None)
    if comm is not None:
        comm.close()


def _reduction(name: str, reduction: Any) -> str:
    if reduction not in REDUCTIONS:
        raise ArgumentTypeError(f"{name}: unknown reduction {reduction!r} (expected one of "
                                f"{', '.join(REDUCTIONS)})")
    return str(reduction)


def all_reduce(x: Any, reduction: str = "sum") -> Tensor:
    """Elementwise `reduction` ("sum", "mean", "max", "min") of `x` over all ranks.

    Recorded as the PTIR op ``all_reduce`` (lazy; inside ``omnitensor.compile`` it is part of
    the program). Gradient: ``all_reduce`` of the cotangents (sum; mean divides by the world).

    Args:
        x: a tensor (or array-like) with the same shape and dtype on every rank.
        reduction: how to combine; "mean" needs a floating dtype.

    Returns:
        A tensor of x's shape and dtype, equal on every rank.
    """
    return Tensor._apply("all_reduce", as_tensor(x), reduction=_reduction("all_reduce", reduction),
                         world_size=world_size())


def all_gather(x: Any, axis: int = 0) -> Tensor:
    """Every rank's `x` concatenated along `axis` in rank order (that dim grows world-fold)."""
    return Tensor._apply("all_gather", as_tensor(x), axis=axis, world_size=world_size())


def reduce_scatter(x: Any, reduction: str = "sum", axis: int = 0) -> Tensor:
    """`all_reduce` of `x`, then this rank's block along `axis` (divisible by the world size)."""
    return Tensor._apply("reduce_scatter", as_tensor(x),
                         reduction=_reduction("reduce_scatter", reduction), axis=axis,
                         world_size=world_size())


def broadcast(x: Any, root: int = 0) -> Tensor:
    """Rank `root`'s `x` on every rank (same shape and dtype everywhere)."""
    return Tensor._apply("collective_broadcast", as_tensor(x), root=root,
                         world_size=world_size())
