"""Installs the toy backend into a fresh virtual environment and uses it from there.

Slow (creates a venv and builds a wheel). The fresh venv sees the site-packages of the environment
running the test (through a ``.pth`` file, which also works when that environment is itself a
venv, as under tox), so omnitensor comes from there and only this distribution is installed into
the fresh one, offline. The build needs ``hatchling`` in the running environment.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import json, numpy as np
    from omnitensor.backend import registry
    from omnitensor.dtypes import float32
    from omnitensor.errors import UnsupportedError
    from omnitensor.ir import Builder, TensorType
    from omnitensor.ir.interpret import evaluate

    info = {i.name: i for i in registry.list_backends()}["toy"]
    backend = registry.get_backend()
    b = Builder()
    x = b.input(TensorType((5,), float32))
    fn = b.build([b.emit("mul", b.emit("add", b.emit("exp", x), x), x)])
    data = np.linspace(-1, 1, 5, dtype=np.float32)
    (out,) = backend.run(backend.compile(fn), [backend.upload(data)])
    b2 = Builder()
    y = b2.input(TensorType((5,), float32))
    try:
        backend.compile(b2.build([b2.emit("sin", y)]))
        unsupported = None
    except UnsupportedError as exc:
        unsupported = str(exc)
    print(json.dumps({
        "selected": registry.current_backend_name(),
        "type": type(backend).__module__,
        "distribution": info.distribution, "version": info.version, "value": info.value,
        "available": info.available,
        "close": bool(np.allclose(backend.download(out), evaluate(fn, [data])[0])),
        "unsupported": unsupported,
    }))
    """
)


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.mark.slow
def test_installed_toy_backend_is_discovered_selected_and_runs(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    parents = [p for p in site.getsitepackages() if Path(p).is_dir()]
    # NOTE: an "import" line in a .pth runs; addsitedir also processes the parent's own .pth
    # files (editable installs of omnitensor and the first-party backends).
    (Path(purelib.stdout.strip()) / "_parent_env.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in parents)
    )
    before = _run([str(python), "-c", "import omnitensor_backend_toy"])
    if before.returncode == 0:
        pytest.fail("omnitensor_backend_toy is already importable outside the fresh venv")
    installed = _run([
        sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
        "--no-build-isolation", "--no-index", "--quiet", str(EXAMPLE),
    ])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    env = {**os.environ, "OMNITENSOR_BACKEND": "toy", "OMNITENSOR_LOG": "info"}
    env.pop("OMNITENSOR_DISABLE_PLUGINS", None)
    result = _run([str(python), "-c", SCRIPT], env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = __import__("json").loads(result.stdout.strip().splitlines()[-1])
    assert doc["selected"] == "toy" and doc["type"] == "omnitensor_backend_toy.backend"
    assert doc["distribution"] == "omnitensor-backend-toy" and doc["version"] == "0.1.0"
    assert doc["value"] == "omnitensor_backend_toy.plugin" and doc["available"]
    assert doc["close"]
    assert doc["unsupported"] and "sin" in doc["unsupported"] and "toy" in doc["unsupported"]
    assert "using backend 'toy'" in result.stderr  # the choice is logged at INFO
    cli = "import sys; from omnitensor.cli import main; sys.exit(main(['backends']))"
    listing = _run([str(python), "-c", cli], env=env, cwd=tmp_path)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert "* toy" in listing.stdout and "omnitensor-backend-toy 0.1.0" in listing.stdout
