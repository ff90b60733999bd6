"""Hook implementations of the ``mpi`` communicator: light on purpose (discovery imports this).

Nothing here imports mpi4py (importing it initializes nothing, but loading the MPI library is
not free); the factory does, on first use.
"""

from __future__ import annotations

import importlib.util

from omnitensor.backend import CommunicatorSpec, hookimpl
from omnitensor.backend.communicators import Communicator

__all__ = ["omnitensor_register_communicators"]

#: The communicator contract version this distribution implements (a literal on purpose).
CONTRACT = 1


def _probe() -> str | None:
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed; pip install mpi4py (and mpich for an mpiexec)"
    return None


def _make(timeout: float) -> Communicator:
    from .communicator import MPICommunicator

    return MPICommunicator(timeout=timeout)


@hookimpl
def omnitensor_register_communicators() -> list[CommunicatorSpec]:
    """Register ``mpi`` (priority 10: NCCL, for GPUs, would rank above)."""
    return [CommunicatorSpec(name="mpi", contract_version=CONTRACT, factory=_make, probe=_probe,
                             priority=10, distribution="omnitensor-comm-mpi")]
