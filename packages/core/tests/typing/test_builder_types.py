"""The typestate `ModelBuilder` under mypy: the right order type-checks, wrong orders do not.

Runs ``python -m mypy`` (the repository's ``--strict`` configuration) over two small files; skips
when mypy is not installed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[4]

RIGHT_ORDER = '''
    from pathlib import Path
    from typing import assert_type

    from omnitensor.models import (
        Checkpoint, CompiledModel, ModelBuilder, ModelSpec, SpecBuilder, WeightsBuilder,
    )


    def build(spec: ModelSpec, checkpoint: Checkpoint, path: Path) -> CompiledModel:
        start = ModelBuilder()
        with_spec = start.with_spec(spec)
        assert_type(with_spec, SpecBuilder)
        assert_type(ModelBuilder().with_spec("llama"), SpecBuilder)
        assert_type(with_spec.with_gguf(path), WeightsBuilder)
        assert_type(with_spec.with_safetensors(path), WeightsBuilder)
        weights = with_spec.with_checkpoint(checkpoint)
        assert_type(weights, WeightsBuilder)
        model = weights.build("ref", quant_policy="dequantize")
        assert_type(model, CompiledModel)
        return ModelBuilder().with_spec(spec).with_gguf(path).build()
'''

# Each wrong call, with the attribute mypy must report as missing on that line.
WRONG_ORDER = '''
    from pathlib import Path

    from omnitensor.models import ModelBuilder, ModelSpec


    def wrong(spec: ModelSpec, path: Path) -> None:
        ModelBuilder().with_gguf(path)  # expect: "ModelBuilder" has no attribute "with_gguf"
        ModelBuilder().build()  # expect: "ModelBuilder" has no attribute "build"
        staged = ModelBuilder().with_spec(spec)
        staged.build()  # expect: "SpecBuilder" has no attribute "build"
        weights = staged.with_gguf(path)
        weights.with_safetensors(path)  # expect: "WeightsBuilder" has no attribute "with_safe
        staged.with_checkpoint(spec).build()  # expect: incompatible type "ModelSpec"
'''


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("typing")
    files = {"right_order.py": RIGHT_ORDER, "wrong_order.py": WRONG_ORDER}
    for name, text in files.items():
        (folder / name).write_text(textwrap.dedent(text).lstrip())
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--strict", "--no-error-summary", "--show-error-codes", "--hide-error-context",
               "--cache-dir", str(folder / ".mypy_cache"), *(str(folder / n) for n in files)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=540)
    if result.returncode not in (0, 1):  # 2: mypy itself failed (bad config, crash)
        pytest.fail(f"mypy did not run:\n{result.stdout}\n{result.stderr}")
    out: dict[str, list[str]] = {name: [] for name in files}
    for line in result.stdout.splitlines():
        for name in files:
            if f"{name}:" in line and ": error:" in line:
                out[name].append(line)
    return out


def test_right_order_type_checks(mypy_output: dict[str, list[str]]) -> None:
    assert mypy_output["right_order.py"] == []


def test_wrong_order_is_a_type_error(mypy_output: dict[str, list[str]]) -> None:
    lines = textwrap.dedent(WRONG_ORDER).lstrip().splitlines()
    expected = {number: line.split("# expect: ")[1]
                for number, line in enumerate(lines, start=1) if "# expect: " in line}
    errors = mypy_output["wrong_order.py"]
    reported: dict[int, str] = {}
    for error in errors:
        match = re.search(r"wrong_order\.py:(\d+): error: (.*)$", error)
        assert match, error
        reported[int(match.group(1))] = match.group(2)
    assert set(reported) == set(expected), errors
    for number, message in expected.items():
        assert message in reported[number], (number, reported[number])
        code = "[arg-type]" if "incompatible type" in message else "[attr-defined]"
        assert reported[number].endswith(code), reported[number]
