"""`load_model(path)`: detect format and architecture, build, and wrap with capabilities."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..backend.contract import Backend
from ..models.builder import ModelBuilder
from ..models.checkpoint import Progress, open_checkpoint
from ..models.spec import builtin_spec
from .loaded import CausalLM, Encoder, LoadedModel
from .names import resolve_model

__all__ = ["load_model"]

log = logging.getLogger(__name__)


def load_model(path: str | Path, backend: Backend | str | None = None, *,
               quant_policy: str = "auto", progress: Progress | None = None) -> Any:
    """Load a model by name or path and return a `CausalLM` or an `Encoder`.

    Args:
        path: a name from `runtime.names` (``"char-gpt"``, ``"smollm2"``, a model in
            ``$OMNITENSOR_MODELS``), a ``.gguf`` file or a directory with ``config.json`` and
            safetensors weights.
        backend: a Backend, a name, or None for the selected backend (`OMNITENSOR_BACKEND`).
        quant_policy: see `models.builder.WeightsBuilder.build`.
        progress: called as ``progress(tensor_name, done, total)`` while weights load.

    Raises:
        ModelNotFoundError: neither a path nor a known name (the message lists the names).
        FormatError: an unreadable file, an unknown architecture or a missing weight.
    """
    path = resolve_model(path)
    checkpoint = open_checkpoint(path, progress)
    spec = builtin_spec(checkpoint.arch)
    model = ModelBuilder().with_spec(spec).with_checkpoint(checkpoint).build(
        backend, quant_policy=quant_policy)
    loaded: LoadedModel = CausalLM(model) if spec.kind == "causal_lm" else Encoder(model)
    log.info("loaded %s (%s) from %s on %s", checkpoint.arch, spec.kind, path,
             model.backend.name)
    return loaded
