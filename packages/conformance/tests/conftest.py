"""Make the fake backends importable as ``fake_backends:...`` in pytester subprocesses."""

from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
