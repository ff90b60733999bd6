"""Op declarations, one module per family; importing this package registers every op."""

from .collective import *  # noqa: F403
from .composite import *  # noqa: F403
from .creation import *  # noqa: F403
from .custom import *  # noqa: F403
from .elementwise import *  # noqa: F403
from .indexing import *  # noqa: F403
from .linalg import *  # noqa: F403
from .movement import *  # noqa: F403
from .quant import *  # noqa: F403
from .reduce import *  # noqa: F403
