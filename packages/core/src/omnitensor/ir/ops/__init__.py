"""Op declarations, one module per family; importing this package registers every op."""

from .elementwise import *  # noqa: F403
