"""Composite ops (`@composite`): named ops defined by their portable decomposition.

One module per family; importing this package registers them. See docs/architecture.md
("Composites") for how they are emitted, lowered, expanded and raised.
"""

from .activations import *  # noqa: F403
from .attention import *  # noqa: F403
from .attention_backward import *  # noqa: F403
from .losses import *  # noqa: F403
from .norms import *  # noqa: F403
from .norms_backward import *  # noqa: F403
