"""ModelSpec parsing and its errors; step registration (custom kinds used by a spec)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from omnitensor.errors import FormatError, ShapeError
from omnitensor.models import ModelBuilder, ModelSpec, StepContext, builtin_spec, step
from omnitensor.models import steps as steps_module
from omnitensor.models.spec import builtin_specs

MINIMAL = {"name": "tiny", "kind": "causal_lm",
           "forward": [{"op": "Embedding", "input": "tokens", "weight": "token_embd.weight",
                        "output": "x"}]}


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_builtin_specs_parse_and_round_trip(name: str) -> None:
    spec = builtin_spec(name)
    assert spec.name == name
    assert spec.kind == ("encoder" if name == "bert" else "causal_lm")
    again = ModelSpec.from_json(spec.to_json())
    assert (again.name, again.kind, again.forward, dict(again.hparams)) == (
        spec.name, spec.kind, spec.forward, dict(spec.hparams))
    assert set(builtin_specs()) >= {"llama", "gpt2", "bert"}


def test_aliases_and_unknown_architecture() -> None:
    assert builtin_spec("qwen2") is not None and builtin_spec("qwen2").name == "llama"
    assert builtin_spec("mistral").name == "llama"
    with pytest.raises(FormatError, match=r"no spec for architecture 'mamba' \(known: .*llama"):
        builtin_spec("mamba")


def test_from_json_path_and_text(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(MINIMAL))
    from_path = ModelSpec.from_json(path)
    assert from_path.source == str(path)
    assert ModelSpec.from_json(json.dumps(MINIMAL)).forward == from_path.forward


def test_unknown_step_kind_lists_known_ones() -> None:
    data = {**MINIMAL, "forward": [*MINIMAL["forward"], {"op": "Frobnicate", "output": "y"}]}
    with pytest.raises(FormatError) as info:
        ModelSpec.from_dict(data)
    message = str(info.value)
    assert "step 1 has unknown op 'Frobnicate'" in message
    for known in ("Attention", "Embedding", "LMHead", "MLP", "RmsNorm"):
        assert known in message


def test_unknown_kind_inside_repeat_names_its_position() -> None:
    data = {**MINIMAL, "forward": [*MINIMAL["forward"],
                                   {"repeat": 2, "steps": [{"op": "Add", "inputs": ["x", "x"],
                                                            "output": "x"},
                                                           {"op": "Nope", "output": "x"}]}]}
    with pytest.raises(FormatError, match=r"step 1\.1 has unknown op 'Nope'"):
        ModelSpec.from_dict(data)


@pytest.mark.parametrize("text, match", [
    ('{"name": "x", "kind": "causal_lm", "forward": [', "invalid JSON"),
    ("[1, 2]", "a model spec is a JSON object"),
    ('{"name": "x", "forward": []}', "missing field 'kind'"),
    ('{"name": "x", "kind": "vision", "forward": [{"op": "Add"}]}', "kind 'vision' is not"),
    ('{"name": "x", "kind": "encoder", "forward": []}', "non-empty list"),
    ('{"name": "x", "kind": "encoder", "forward": [{"output": "y"}]}', "step 0 needs an 'op'"),
    ('{"name": "x", "kind": "encoder", "forward": [{"repeat": 2}]}', "needs a steps list"),
])
def test_bad_specs_are_format_errors(text: str, match: str) -> None:
    with pytest.raises(FormatError, match=match) as info:
        ModelSpec.from_json(text)
    assert info.value.path == "<json>"


def test_bad_json_reports_offset(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "name": "x",\n  "kind": oops\n}')
    with pytest.raises(FormatError, match=r"bad\.json: invalid JSON .* line 3") as info:
        ModelSpec.from_json(path)
    assert info.value.path == str(path)
    assert info.value.offset == path.read_text().index("oops")


# --- errors when a spec meets its weights -----------------------------------------------------


def test_missing_weight_names_weight_step_and_layer(make_llama: Any) -> None:
    checkpoint = make_llama()
    del checkpoint.weights["blk.1.ffn_up.weight"]
    with pytest.raises(FormatError) as info:
        ModelBuilder().with_spec("llama").with_checkpoint(checkpoint).build("ref")
    message = str(info.value)
    assert "missing weight 'blk.1.ffn_up.weight'" in message
    assert "(MLP, layer 1)" in message and "step 1.4" in message
    assert "blk.1.ffn_down.weight" in message  # what the checkpoint does have there
    assert info.value.fields["step"] == "1.4"


def test_missing_hyper_parameter_names_it(make_llama: Any) -> None:
    checkpoint = make_llama()
    del checkpoint.hparams["head_count_kv"]
    with pytest.raises(FormatError, match=r"Attention, layer 0\): missing hyper-parameter "
                                          r"'head_count_kv'"):
        ModelBuilder().with_spec("llama").with_checkpoint(checkpoint).build("ref")


def test_shape_mismatch_is_shape_error_naming_op_and_shapes(make_llama: Any) -> None:
    checkpoint = make_llama()
    checkpoint.weights["blk.0.ffn_down.weight"] = np.zeros((16, 24), np.float32)  # not (16, 32)
    with pytest.raises(ShapeError) as info:
        ModelBuilder().with_spec("llama").with_checkpoint(checkpoint).build("ref")
    error = info.value
    assert error.op is not None and error.op in str(error)
    assert "(MLP, layer 0)" in str(error)
    assert "32" in str(error) and "24" in str(error)
    assert error.shapes is not None and any(24 in s for s in error.shapes)


def test_value_used_before_set() -> None:
    data = {**MINIMAL, "forward": [{"op": "Add", "inputs": ["nothing", "x"], "output": "y"}]}
    spec = ModelSpec.from_dict(data)
    from omnitensor.models import Checkpoint

    with pytest.raises(FormatError, match=r"step 0 \(Add\): value 'nothing' is used before it "
                                          r"is set \(have \['tokens'\]\)"):
        ModelBuilder().with_spec(spec).with_checkpoint(Checkpoint("tiny", {}, {})).build("ref")


def test_bad_activation_lists_known(make_llama: Any) -> None:
    spec = builtin_spec("llama")
    data = json.loads(spec.to_json())
    data["forward"][1]["steps"][4]["activation"] = "swish9"
    with pytest.raises(FormatError, match=r"activation 'swish9' is not one of .*silu"):
        ModelBuilder().with_spec(json.dumps(data)).with_checkpoint(make_llama()).build("ref")


# --- custom step kinds ------------------------------------------------------------------------


@pytest.fixture
def scale_step() -> Iterator[str]:
    name = "TestScaleBy"

    @step(name)
    def _scale(ctx: StepContext, s: Mapping[str, Any]) -> None:
        """out = input * factor (a third-party step kind)."""
        ctx.values[s["output"]] = ctx.value(s["input"]) * float(s["factor"])

    yield name
    steps_module._STEPS.pop(name)


def test_custom_step_kind_is_used_by_a_spec(scale_step: str, make_llama: Any) -> None:
    base = json.loads(builtin_spec("llama").to_json())
    scaled = json.loads(builtin_spec("llama").to_json())
    # Scaling the final hidden state by 1 changes nothing; by 0 zeroes the logits.
    for factor in (1.0, 0.0):
        scaled["forward"] = [*base["forward"][:-1],
                             {"op": scale_step, "input": "x", "factor": factor, "output": "x"},
                             base["forward"][-1]]
        spec = ModelSpec.from_dict(scaled)
        model = ModelBuilder().with_spec(spec).with_checkpoint(make_llama()).build("ref")
        reference = ModelBuilder().with_spec("llama").with_checkpoint(make_llama()).build("ref")
        got, want = (_last_logits(m) for m in (model, reference))
        np.testing.assert_allclose(got, want * factor, atol=1e-5)


def _last_logits(model: Any) -> np.ndarray:
    tokens = np.array([[29, 7, 4, 11]])
    cache = model.new_cache(1, 8)
    logits, _ = model.step(tokens, np.arange(4)[None], np.ones((1, 1, 1, 8), bool), 0, cache,
                           np.array([3]))
    return np.asarray(logits.numpy())


def test_registering_a_kind_twice_fails(scale_step: str) -> None:
    with pytest.raises(FormatError, match="registered twice"):
        step(scale_step)(lambda ctx, s: None)
    assert scale_step in steps_module.known_steps()
