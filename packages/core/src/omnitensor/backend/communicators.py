"""Communicators: the contract multi-process plugins implement, launch detection and selection.

A communicator (``omnitensor-comm-mpi``; NCCL next) moves host numpy buffers between the ranks
of a job. Plugins register them through ``omnitensor_register_communicators`` (see `hookspecs`);
``omnitensor.distributed`` picks one when the process was started by a launcher, and uses the
built-in `LocalCommunicator` (world size 1, no library at all) otherwise. Nothing here imports
a communication library.
"""

from __future__ import annotations

import abc
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ..errors import BackendNotInstalledError, BackendUnavailableError, OmnitensorError
from .isolation import PluginFailure, call_plugin, probe_timeout
from .registry import CommunicatorEntry, communicator_entries

__all__ = [
    "COMMUNICATOR_CONTRACT_VERSION",
    "CommunicatorInfo",
    "Communicator",
    "Launch",
    "LocalCommunicator",
    "create_communicator",
    "detect_launch",
    "list_communicators",
]

#: Version of the `Communicator` contract; a `CommunicatorSpec` declares the one it implements.
COMMUNICATOR_CONTRACT_VERSION: Final = 1

Array = np.ndarray[Any, Any]

# (variable holding the rank, variable holding the world size, launcher) in the order checked:
# MPICH/Intel MPI hydra (PMI), Open MPI, PMIx-based launchers, then SLURM's srun.
_LAUNCH_VARIABLES: Final = (
    ("PMI_RANK", "PMI_SIZE", "mpiexec (PMI)"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)"),
    ("PMIX_RANK", "PMIX_SIZE", "mpiexec (PMIx)"),
    ("SLURM_PROCID", "SLURM_NTASKS", "srun"),
)


@dataclass(frozen=True)
class Launch:
    """How this process was started, from the launcher's environment variables.

    Attributes:
        launcher: ``"mpiexec (PMI)"``, ``"mpirun (Open MPI)"``, ``"mpiexec (PMIx)"``, ``"srun"``,
            or None for a plain single process.
        rank: this process's rank as the launcher says (0 for a single process).
        world_size: the number of processes (1 for a single process; None when the launcher
            does not say, as PMIx).
        variable: the environment variable that told (None for a single process).
    """

    launcher: str | None
    rank: int
    world_size: int | None
    variable: str | None

    @property
    def multi_process(self) -> bool:
        """True when a launcher started more than one process (or did not say how many)."""
        return self.launcher is not None and self.world_size != 1


def detect_launch(environ: Mapping[str, str] | None = None) -> Launch:
    """Read how this process was launched (mpiexec/mpirun, srun, or none) from `environ`.

    A SLURM allocation alone (``SLURM_PROCID`` set in a batch script, ``SLURM_NTASKS`` 1) is a
    single process.
    """
    env = os.environ if environ is None else environ
    for rank_var, size_var, launcher in _LAUNCH_VARIABLES:
        raw = env.get(rank_var)
        if raw is None or not raw.strip().isdigit():
            continue
        size_raw = env.get(size_var, "")
        size = int(size_raw) if size_raw.strip().isdigit() else None
        return Launch(launcher, int(raw), size, rank_var)
    return Launch(None, 0, 1, None)


class Communicator(abc.ABC):
    """Collectives on host numpy arrays among the ranks of one job.

    Every rank must call the same collectives in the same order with the same shapes, dtypes
    and attributes; an implementation should detect a mismatch (`CollectiveMismatchError`), a
    rank that failed (`RankFailedError`) and a wait longer than `timeout`
    (`DistributedTimeoutError`), naming the ranks. Inputs may be non-contiguous; results are
    new arrays of the input's dtype (float16/bfloat16 are reduced in float32).
    """

    #: The communicator's name (``"mpi"``, ``"local"``).
    name: str = "?"

    @property
    @abc.abstractmethod
    def rank(self) -> int:
        """This process's rank, 0 <= rank < world_size."""

    @property
    @abc.abstractmethod
    def world_size(self) -> int:
        """The number of ranks."""

    @property
    @abc.abstractmethod
    def timeout(self) -> float:
        """Seconds a collective waits for the other ranks before raising."""

    @abc.abstractmethod
    def set_timeout(self, seconds: float) -> None:
        """Change `timeout` (positive seconds)."""

    @abc.abstractmethod
    def all_reduce(self, x: Array, *, reduction: str) -> Array:
        """Elementwise `reduction` ("sum", "mean", "max", "min") of `x` over the ranks."""

    @abc.abstractmethod
    def all_gather(self, x: Array, *, axis: int) -> Array:
        """Every rank's `x` concatenated along `axis` (non-negative) in rank order."""

    @abc.abstractmethod
    def reduce_scatter(self, x: Array, *, reduction: str, axis: int) -> Array:
        """Block `rank` along `axis` of ``all_reduce(x)``; ``x.shape[axis]`` divides evenly."""

    @abc.abstractmethod
    def broadcast(self, x: Array, *, root: int) -> Array:
        """Rank `root`'s `x` on every rank."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Return once every rank has called `barrier`."""

    @abc.abstractmethod
    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every rank's `data` (any length), in rank order."""

    def all_gather_object(self, obj: Any) -> list[Any]:
        """Every rank's picklable `obj`, in rank order (pickle between ranks of one job)."""
        # NOTE: pickle only crosses between processes of the same job started by the user.
        return [pickle.loads(b) for b in self.all_gather_bytes(pickle.dumps(obj))]

    def broadcast_object(self, obj: Any, *, root: int = 0) -> Any:
        """Rank `root`'s picklable `obj` on every rank."""
        return self.all_gather_object(obj if self.rank == root else None)[root]

    def close(self) -> None:  # noqa: B027  (optional: most communicators need nothing)
        """Release resources; the communicator is not used afterwards."""


class LocalCommunicator(Communicator):
    """World size 1: every collective returns a copy of its input; no library is needed."""

    name = "local"

    def __init__(self, timeout: float = 300.0) -> None:
        self._timeout = float(timeout)

    @property
    def rank(self) -> int:
        """Always 0."""
        return 0

    @property
    def world_size(self) -> int:
        """Always 1."""
        return 1

    @property
    def timeout(self) -> float:
        """Unused (nothing waits), kept for the contract."""
        return self._timeout

    def set_timeout(self, seconds: float) -> None:
        """Store `seconds` (nothing waits in a single process)."""
        self._timeout = float(seconds)

    def all_reduce(self, x: Array, *, reduction: str) -> Array:
        """A copy of `x`."""
        return np.array(x, copy=True)

    def all_gather(self, x: Array, *, axis: int) -> Array:
        """A copy of `x`."""
        return np.array(x, copy=True)

    def reduce_scatter(self, x: Array, *, reduction: str, axis: int) -> Array:
        """A copy of `x`."""
        return np.array(x, copy=True)

    def broadcast(self, x: Array, *, root: int) -> Array:
        """A copy of `x`."""
        return np.array(x, copy=True)

    def barrier(self) -> None:
        """Returns at once."""

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        """``[data]``."""
        return [bytes(data)]


@dataclass(frozen=True)
class CommunicatorInfo:
    """One row of `list_communicators`.

    Attributes:
        name: the communicator's name.
        plugin: the plugin that registered it.
        distribution: the distribution providing it, when known.
        contract_version: the contract version it declared (None when its plugin failed).
        available: it can be created here.
        reason: why not (None when available).
        priority: its priority.
    """

    name: str
    plugin: str
    distribution: str | None
    contract_version: int | None
    available: bool
    reason: str | None
    priority: int


def _availability(entry: CommunicatorEntry) -> str | None:
    if entry.reason is not None:
        return entry.reason
    if entry.spec is None:
        return "registered no communicator"
    if entry.spec.probe is None:
        return None
    try:  # isolated like backend probes: a raising or hanging probe only disables its entry
        reason = call_plugin(entry.spec.probe, timeout=probe_timeout())
    except PluginFailure as failure:
        return f"probe failed: {failure.reason}"
    return None if reason is None else str(reason)


def list_communicators() -> list[CommunicatorInfo]:
    """Every communicator plugins registered, with availability (runs the cheap probes)."""
    rows = []
    for entry in communicator_entries():
        reason = _availability(entry)
        rows.append(CommunicatorInfo(
            name=entry.name, plugin=entry.plugin, distribution=entry.distribution,
            contract_version=entry.spec.contract_version if entry.spec else None,
            available=reason is None, reason=reason,
            priority=entry.spec.priority if entry.spec else 0))
    return rows


def create_communicator(name: str | None, *, timeout: float) -> Communicator:
    """Create the communicator `name` (None: ``OMNITENSOR_COMMUNICATOR``, else the best one).

    Raises:
        BackendNotInstalledError: no communicator (or not `name`) is installed; names the
            distribution to install.
        BackendUnavailableError: it is installed but cannot run here (with the reason).
        PluginError: its factory returned something else than a `Communicator`.
    """
    from ..errors import PluginError

    wanted = name or os.environ.get("OMNITENSOR_COMMUNICATOR", "").strip() or None
    entries = {e.name: e for e in communicator_entries()}
    if wanted is not None:
        candidates = [wanted]
        if wanted not in entries:
            raise BackendNotInstalledError(
                f"communicator {wanted!r} is not installed (installed: "
                f"{', '.join(sorted(entries)) or 'none'}); pip install omnitensor-comm-{wanted}",
                backend=wanted)
    else:
        candidates = [e.name for e in sorted(
            entries.values(), key=lambda e: (-(e.spec.priority if e.spec else 0), e.name))]
        if not candidates:
            raise BackendNotInstalledError(
                "no omnitensor communicator is installed; pip install omnitensor-comm-mpi "
                "(it installs mpi4py; pip install mpich gives an mpiexec)")
    reasons = []
    for candidate in candidates:
        entry = entries[candidate]
        reason = _availability(entry)
        if reason is not None or entry.spec is None:
            reasons.append(f"{candidate}: {reason}")
            continue
        try:
            created = call_plugin(entry.spec.factory, timeout)
        except PluginFailure as failure:
            raise BackendUnavailableError(
                f"communicator {candidate!r}: factory failed: {failure.reason}",
                backend=candidate) from failure
        if not isinstance(created, Communicator):
            raise PluginError(
                f"communicator {candidate!r}: factory returned {type(created).__name__} "
                f"(expected an omnitensor Communicator); fix plugin {entry.plugin!r}",
                plugin=entry.plugin)
        return created
    raise BackendUnavailableError(
        f"no installed communicator can run here ({'; '.join(reasons)})")


def check_reduction(reduction: str) -> None:
    """Raise `OmnitensorError` unless `reduction` is one the collectives know."""
    from ..ir.ops.collective import REDUCTIONS

    if reduction not in REDUCTIONS:
        raise OmnitensorError(
            f"all_reduce: unknown reduction {reduction!r} (expected one of "
            f"{', '.join(REDUCTIONS)})", op="all_reduce")
