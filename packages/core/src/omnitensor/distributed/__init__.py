"""Scale-out across processes and machines (``docs/distributed.md``).

The process group, collectives on tensors, data-parallel training and sharded inference.

Run a script under ``mpiexec -n 2 python script.py`` (or ``srun``) with
``omnitensor-comm-mpi`` installed; a plain ``python script.py`` is world size 1 and needs no MPI.
"""

from .group import all_gather as all_gather
from .group import all_reduce as all_reduce
from .group import barrier as barrier
from .group import broadcast as broadcast
from .group import communicator as communicator
from .group import detect_launch as detect_launch
from .group import init as init
from .group import is_initialized as is_initialized
from .group import rank as rank
from .group import reduce_scatter as reduce_scatter
from .group import set_timeout as set_timeout
from .group import shutdown as shutdown
from .group import world_size as world_size
from .inference import embed as embed
from .inference import generate as generate
from .training import DataParallel as DataParallel
from .training import all_reduce_gradients as all_reduce_gradients
from .training import broadcast_parameters as broadcast_parameters
from .training import data_parallel as data_parallel
from .training import load_checkpoint as load_checkpoint
from .training import save_checkpoint as save_checkpoint
from .training import shard as shard
from .training import shard_range as shard_range

__all__ = [
    "DataParallel",
    "all_gather",
    "all_reduce",
    "all_reduce_gradients",
    "barrier",
    "broadcast",
    "broadcast_parameters",
    "communicator",
    "data_parallel",
    "detect_launch",
    "embed",
    "generate",
    "init",
    "is_initialized",
    "load_checkpoint",
    "rank",
    "reduce_scatter",
    "save_checkpoint",
    "set_timeout",
    "shard",
    "shard_range",
    "shutdown",
    "world_size",
]
