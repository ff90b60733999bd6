"""Repository-wide pytest setup: the hypothesis profiles.

``ci`` (deadline=None, derandomize=True: this machine is shared and noisy) is loaded when
``HYPOTHESIS_PROFILE=ci`` or ``CI`` is set; tox sets it.
"""

from __future__ import annotations

import os

try:
    from hypothesis import settings
except ImportError:  # core-alone environments may run without hypothesis
    settings = None  # type: ignore[assignment]

if settings is not None:
    settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
    settings.register_profile("dev", deadline=None)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI")
                                                                    else "dev"))
