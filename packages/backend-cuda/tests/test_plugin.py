"""Discovery stays light; without a GPU the probe names the reason instead of crashing."""

from __future__ import annotations

import subprocess
import sys

from omnitensor_backend_cuda import plugin


def test_discovery_does_not_import_cupy() -> None:
    code = ("import sys, omnitensor_backend_cuda.plugin as p; p.omnitensor_register_backends();"
            "print('cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_spec_priority_and_contract() -> None:
    (spec,) = plugin.omnitensor_register_backends()
    assert (spec.name, spec.priority, spec.contract_version) == ("cuda", 100, 1)


def test_probe_gives_a_reason_or_facts() -> None:
    plugin._reset_probe()
    reason = plugin._probe()
    if reason is None:
        assert {"device", "memory", "compute capability"} <= set(plugin._devices())
    else:
        assert reason.startswith("no CUDA device: ")
