"""`ModelSpec`: a model architecture as JSON data, separate from its weights.

A spec names hyper-parameters and lists the forward plan as steps
(``{"op": "RmsNorm", "input": "x", "weight": "blk.{layer}.attn_norm.weight", "output": "h"}``).
``{"repeat": "block_count", "steps": [...]}`` repeats a block once per layer with ``{layer}``
substituted in weight names. Step kinds live in `steps`; this module only parses and checks.
A spec is refused (`SpecError`) before anything is built when a step's fields have the wrong
kind or it breaks a limit (`MAX_DEPTH`, `MAX_REPEAT`, `MAX_STEPS`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, final

from ..errors import FormatError, SpecError

__all__ = ["MAX_DEPTH", "MAX_REPEAT", "MAX_STEPS", "ModelSpec", "builtin_spec", "builtin_specs",
           "repeat_count"]

#: What a model can do once built: generate text, or embed it.
KINDS = ("causal_lm", "encoder")
#: Repeat blocks nest at most this deep (a layer block inside the forward is depth 1).
MAX_DEPTH = 4
#: A repeat block runs at most this many times (the largest released models have ~128 layers).
MAX_REPEAT = 1024
#: Steps of the whole forward once every repeat is expanded (a 128-layer llama has ~1,300).
MAX_STEPS = 10_000
#: Fields that name a value, a weight or a setting: non-empty strings when present.
_NAME_FIELDS = ("input", "output", "weight", "prefix", "fallback", "bias", "of", "mode",
                "activation", "when")
#: Fields that switch a behaviour: JSON booleans when present.
_FLAG_FIELDS = ("rope", "qk_norm", "causal", "gated", "fused_gate")


@final
@dataclass(frozen=True)
class ModelSpec:
    """An architecture: hyper-parameter defaults, the forward plan and runtime settings.

    Attributes:
        name: the architecture's name (``"llama"``).
        kind: ``"causal_lm"`` or ``"encoder"``.
        hparams: hyper-parameter defaults; the weight file's values override them.
        forward: the steps, in order (dicts; ``repeat`` blocks nest).
        runtime: settings such as ``functional_overrides`` and ``pooling``.
        source: where the spec came from (for error messages).
    """

    name: str
    kind: str
    forward: tuple[Mapping[str, Any], ...]
    hparams: Mapping[str, Any] = field(default_factory=dict)
    runtime: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<spec>"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<spec>") -> ModelSpec:
        """A spec from its JSON object, checked (every step kind must be registered).

        Raises:
            FormatError: naming the source and the offending field or step.
        """
        if not isinstance(data, Mapping):
            raise FormatError(f"{source}: a model spec is a JSON object (got "
                              f"{type(data).__name__})", path=source)
        for key in ("name", "kind", "forward"):
            if key not in data:
                raise FormatError(f"{source}: missing field {key!r} (expected name, kind, forward)",
                                  path=source)
        if data["kind"] not in KINDS:
            raise FormatError(f"{source}: kind {data['kind']!r} is not one of {KINDS}", path=source)
        if not isinstance(data["forward"], list) or not data["forward"]:
            raise FormatError(f"{source}: forward must be a non-empty list of steps", path=source)
        if len(data["forward"]) > MAX_STEPS:
            raise SpecError(f"{source}: forward has {len(data['forward'])} steps (at most "
                            f"{MAX_STEPS})", path=source)
        for key in ("hparams", "runtime"):
            if not isinstance(data.get(key, {}), Mapping):
                raise SpecError(f"{source}: {key} must be a JSON object (got "
                                f"{type(data[key]).__name__})", path=source)
        if not isinstance(data["name"], str) or not data["name"]:
            raise SpecError(f"{source}: name must be a non-empty string (got {data['name']!r})",
                            path=source)
        spec = cls(str(data["name"]), str(data["kind"]), tuple(data["forward"]),
                   dict(data.get("hparams", {})), dict(data.get("runtime", {})), source)
        spec.check()
        return spec

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> ModelSpec:
        """A spec from JSON text or a path to a JSON file."""
        raw = str(text_or_path)
        is_text = isinstance(text_or_path, str) and raw.lstrip()[:1] in ("{", "[")
        path = None if is_text else Path(text_or_path)
        source = str(path) if path is not None else "<json>"
        try:
            text = path.read_text(encoding="utf-8") if path is not None else raw
        except (OSError, UnicodeDecodeError) as error:
            raise FormatError(f"{source}: cannot read the model spec ({error})",
                              path=source) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise FormatError(f"{source}: invalid JSON ({error.msg} at line {error.lineno})",
                              path=source, offset=error.pos) from None
        except RecursionError:
            raise SpecError(f"{source}: JSON nested too deeply to be a model spec (repeat "
                            f"blocks nest at most {MAX_DEPTH} deep)", path=source) from None
        return cls.from_dict(data, source)

    def to_json(self) -> str:
        """The spec as JSON text (round-trips through `from_json`)."""
        return json.dumps({"name": self.name, "kind": self.kind, "hparams": dict(self.hparams),
                           "runtime": dict(self.runtime), "forward": list(self.forward)},
                          indent=2)

    def check(self) -> None:
        """Check every step: a registered kind, an output, fields of the right kind, limits.

        Repeats named by a hyper-parameter count once here; `expanded_steps` counts them with
        the checkpoint's values before a model is built.

        Raises:
            SpecError: an unknown kind (listing the known ones), a malformed step or block, or
                a limit broken (`MAX_DEPTH`, `MAX_REPEAT`, `MAX_STEPS`).
        """
        from .steps import known_steps

        known = known_steps()
        for where, step in self.walk():
            kind = step.get("op")
            if not isinstance(kind, str) or kind not in known:
                raise SpecError(
                    f"{self.source}: step {where} has unknown op {kind!r} (known: "
                    f"{', '.join(sorted(known))})", path=self.source, step=where)
            self._check_fields(where, kind, step)
        self.expanded_steps(self.hparams)

    def _check_fields(self, where: str, kind: str, step: Mapping[str, Any]) -> None:
        def bad(field: str, expected: str) -> SpecError:
            return SpecError(f"{self.source}: step {where} ({kind}): field {field!r} must be "
                             f"{expected} (got {step[field]!r})", path=self.source, step=where)

        if "output" not in step:
            raise SpecError(f"{self.source}: step {where} ({kind}) has no 'output'",
                            path=self.source, step=where)
        for name in _NAME_FIELDS:
            if name in step and (not isinstance(step[name], str) or not step[name]):
                raise bad(name, "a non-empty string")
        for name in _FLAG_FIELDS:
            if name in step and not isinstance(step[name], bool):
                raise bad(name, "true or false")
        if "inputs" in step and (not isinstance(step["inputs"], list) or not step["inputs"]
                                 or not all(isinstance(n, str) and n for n in step["inputs"])):
            raise bad("inputs", "a non-empty list of value names")
        eps = step.get("eps")
        if eps is not None and not isinstance(eps, str) and not (
                isinstance(eps, int | float) and not isinstance(eps, bool)
                and 0 < eps < 1 and eps == eps):
            raise bad("eps", "a hyper-parameter name or a number in (0, 1)")

    def expanded_steps(self, hparams: Mapping[str, Any]) -> int:
        """Steps of the forward with every repeat expanded (hyper-parameters from `hparams`).

        A repeat named by a hyper-parameter missing from `hparams` counts once.

        Raises:
            SpecError: a repeat count that is not an integer in ``0..MAX_REPEAT``, or more than
                `MAX_STEPS` steps in all.
        """
        def count(steps: Any, prefix: str) -> int:
            total = 0
            for i, step in enumerate(steps):
                where = f"{prefix}{i}"
                if isinstance(step, Mapping) and "repeat" in step:
                    times = repeat_count(self.source, step["repeat"], hparams, where)
                    total += max(times, 1) * count(step["steps"], f"{where}.")
                else:
                    total += 1
                if total > MAX_STEPS:
                    raise SpecError(
                        f"{self.source}: the forward expands to more than {MAX_STEPS} steps "
                        f"(at step {where}); split the model or lower the repeat counts",
                        path=self.source, step=where)
            return total

        return count(self.forward, "")

    def walk(self, steps: tuple[Mapping[str, Any], ...] | None = None,
             prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every plain step with its position (``"3.1"`` for step 1 of repeat block 3).

        Raises:
            SpecError: a step that is not an object, a repeat block without a steps list, or
                blocks nested deeper than `MAX_DEPTH`.
        """
        for i, step in enumerate(self.forward if steps is None else steps):
            where = f"{prefix}{i}"
            if isinstance(step, Mapping) and "repeat" in step:
                inner = step.get("steps")
                if not isinstance(inner, list):
                    raise SpecError(f"{self.source}: repeat block {where} needs a steps list",
                                    path=self.source, step=where)
                if where.count(".") >= MAX_DEPTH:
                    raise SpecError(f"{self.source}: repeat block {where} is nested deeper than "
                                    f"{MAX_DEPTH} blocks", path=self.source, step=where)
                yield from self.walk(tuple(inner), f"{where}.")
            elif not isinstance(step, Mapping) or "op" not in step:
                raise SpecError(f"{self.source}: step {where} needs an 'op'", path=self.source,
                                step=where)
            else:
                yield where, step


def repeat_count(source: str, repeat: Any, hparams: Mapping[str, Any], where: str) -> int:
    """How many times a ``repeat`` block runs: a literal or a hyper-parameter's value.

    A hyper-parameter missing from `hparams` counts once (its value is checked at build).

    Raises:
        SpecError: not an integer in ``0..MAX_REPEAT`` (names the block and the source).
    """
    value = hparams.get(repeat, 1) if isinstance(repeat, str) and repeat else repeat
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPEAT:
        what = (f"hyper-parameter {repeat!r} = {value!r}" if isinstance(repeat, str)
                else repr(repeat))
        raise SpecError(f"{source}: repeat block {where} runs {what} times (expected an integer "
                        f"in 0..{MAX_REPEAT} or a hyper-parameter's name)", path=source,
                        step=where)
    return value


def builtin_specs() -> dict[str, ModelSpec]:
    """The specs that ship with omnitensor, by architecture name."""
    out: dict[str, ModelSpec] = {}
    for entry in resources.files(__package__).joinpath("specs").iterdir():
        if entry.name.endswith(".json"):
            spec = ModelSpec.from_json(entry.read_text())
            out[spec.name] = spec
    return out


def builtin_spec(arch: str) -> ModelSpec:
    """The shipped spec for `arch` (``qwen2``, ``mistral`` map onto ``llama``).

    Raises:
        FormatError: for an architecture without a spec, listing those there are.
    """
    specs = builtin_specs()
    name = {"qwen2": "llama", "mistral": "llama"}.get(arch, arch)
    if name not in specs:
        raise FormatError(f"model: no spec for architecture {arch!r} (known: "
                          f"{', '.join(sorted(specs))})")
    return specs[name]
