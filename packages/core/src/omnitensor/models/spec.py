"""`ModelSpec`: a model architecture as JSON data, separate from its weights.

A spec names hyper-parameters and lists the forward plan as steps
(``{"op": "RmsNorm", "input": "x", "weight": "blk.{layer}.attn_norm.weight", "output": "h"}``).
``{"repeat": "block_count", "steps": [...]}`` repeats a block once per layer with ``{layer}``
substituted in weight names. Step kinds live in `steps`; this module only parses and checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, final

from ..errors import FormatError

__all__ = ["ModelSpec", "builtin_spec", "builtin_specs"]

#: What a model can do once built: generate text, or embed it.
KINDS = ("causal_lm", "encoder")


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
        return cls.from_dict(data, source)

    def to_json(self) -> str:
        """The spec as JSON text (round-trips through `from_json`)."""
        return json.dumps({"name": self.name, "kind": self.kind, "hparams": dict(self.hparams),
                           "runtime": dict(self.runtime), "forward": list(self.forward)},
                          indent=2)

    def check(self) -> None:
        """Check every step names a registered kind and has an output.

        Raises:
            FormatError: for an unknown kind (listing the known ones) or a malformed step.
        """
        from .steps import known_steps

        known = known_steps()
        for where, step in self.walk():
            kind = step.get("op")
            if kind not in known:
                raise FormatError(
                    f"{self.source}: step {where} has unknown op {kind!r} (known: "
                    f"{', '.join(sorted(known))})", path=self.source)

    def walk(self, steps: tuple[Mapping[str, Any], ...] | None = None,
             prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Every plain step with its position (``"3.1"`` for step 1 of repeat block 3)."""
        for i, step in enumerate(self.forward if steps is None else steps):
            where = f"{prefix}{i}"
            if "repeat" in step:
                inner = step.get("steps")
                if not isinstance(inner, list):
                    raise FormatError(f"{self.source}: repeat block {where} needs a steps list",
                                      path=self.source)
                yield from self.walk(tuple(inner), f"{where}.")
            elif not isinstance(step, Mapping) or "op" not in step:
                raise FormatError(f"{self.source}: step {where} needs an 'op'", path=self.source)
            else:
                yield where, step


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
