"""The typestate `ModelBuilder`: spec -> weights -> `build(backend)` -> `CompiledModel`.

Each stage is its own class, so calling in the wrong order is an attribute error at runtime and
a type error under mypy (``tests/typing`` proves it).
"""

from __future__ import annotations

from pathlib import Path
from typing import final

from ..backend.contract import Backend
from ..errors import FormatError
from .checkpoint import Checkpoint, Progress, from_gguf, from_hf_dir
from .compiled import CompiledModel
from .spec import ModelSpec, builtin_spec

__all__ = ["ModelBuilder", "SpecBuilder", "WeightsBuilder"]


@final
class ModelBuilder:
    """Start here: ``ModelBuilder().with_spec(spec).with_gguf(path).build()``."""

    def with_spec(self, spec: ModelSpec | str | Path) -> SpecBuilder:
        """Choose the architecture: a `ModelSpec`, a JSON path/text, or a shipped spec's name."""
        if isinstance(spec, ModelSpec):
            return SpecBuilder(spec)
        text = str(spec)
        if not text.lstrip().startswith("{") and not Path(text).exists():
            return SpecBuilder(builtin_spec(text))
        return SpecBuilder(ModelSpec.from_json(spec))


@final
class SpecBuilder:
    """A builder with a spec; next, its weights."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def with_gguf(self, path: str | Path, progress: Progress | None = None) -> WeightsBuilder:
        """Weights, hyper-parameters and tokenizer from a GGUF file."""
        return WeightsBuilder(self.spec, from_gguf(path, progress))

    def with_safetensors(self, path: str | Path, progress: Progress | None = None
                         ) -> WeightsBuilder:
        """Weights, hyper-parameters and tokenizer from a Hugging Face directory."""
        return WeightsBuilder(self.spec, from_hf_dir(path, progress))

    def with_checkpoint(self, checkpoint: Checkpoint) -> WeightsBuilder:
        """Weights already in memory (tests, conversions)."""
        return WeightsBuilder(self.spec, checkpoint)


@final
class WeightsBuilder:
    """A builder with a spec and weights; `build` makes the model."""

    def __init__(self, spec: ModelSpec, checkpoint: Checkpoint) -> None:
        self.spec = spec
        self.checkpoint = checkpoint

    def build(self, backend: Backend | str | None = None, *, quant_policy: str = "auto"
              ) -> CompiledModel:
        """Upload the weights to `backend` (the selected one by default) and check the spec.

        Args:
            backend: a Backend, a backend name, or None for the selected backend.
            quant_policy: ``"auto"`` keeps quantized weights quantized where the backend runs
                `qmatmul` on them and dequantizes them once here elsewhere; ``"dequantize"``
                always dequantizes.

        Raises:
            FormatError: an unknown policy, a missing weight or hyper-parameter (naming the step).
        """
        if quant_policy not in ("auto", "dequantize"):
            raise FormatError(f"build: quant_policy {quant_policy!r} is not 'auto' or "
                              "'dequantize'")
        from ..backend.registry import get_backend

        chosen = get_backend(backend) if not isinstance(backend, Backend) else backend
        return CompiledModel(self.spec, self.checkpoint, chosen, quant_policy=quant_policy)


