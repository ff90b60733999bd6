"""omnitensor's MPI communicator (``omnitensor-comm-mpi``), used by ``omnitensor.distributed``.

The plugin module (`plugin`) is what discovery imports; it does not import mpi4py. The
communicator itself (`communicator.MPICommunicator`) is created by ``distributed.init()``.
"""

__all__: list[str] = []
