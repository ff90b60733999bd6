"""``python -m omnitensor.cli``: the same as the ``omnitensor`` console script."""

from __future__ import annotations

import sys

from . import main

sys.exit(main())
