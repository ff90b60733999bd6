"""Probing wgpu prints nothing: Vulkan's discovery chatter goes to the DEBUG log."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("wgpu")


@pytest.mark.parametrize("argv", [["generate", "char-gpt", "12+34=", "--backend", "ref"],
                                  ["backends"]])
def test_commands_print_no_vulkan_discovery_lines(argv: list[str]) -> None:
    pytest.importorskip("omnitensor_backend_ref")
    # without XDG_RUNTIME_DIR the Vulkan loader complains on stderr while adapters are listed
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR",
                                                             "OMNITENSOR_BACKEND")}
    done = subprocess.run([sys.executable, "-m", "omnitensor.cli", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "XDG_RUNTIME_DIR" not in done.stderr
    assert "error:" not in done.stderr
    assert "WARNING" not in done.stderr
