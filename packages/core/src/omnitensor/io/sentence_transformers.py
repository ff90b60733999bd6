"""The sentence-transformers layout of a model directory, read as sentence-transformers reads it.

``modules.json`` lists the pipeline (Transformer, Pooling, Normalize); ``1_Pooling/config.json``
names the pooling mode (legacy ``pooling_mode_*`` booleans or a ``pooling_mode`` string) and
``include_prompt``; ``sentence_bert_config.json`` gives ``max_seq_length`` (else the
tokenizer's ``model_max_length``) and ``do_lower_case``; ``config_sentence_transformers.json``
the named ``prompts`` and ``default_prompt_name``. The result: runtime settings for the encoder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import FormatError

__all__ = ["read_sentence_transformers"]

# Legacy boolean keys of 1_Pooling/config.json -> sentence-transformers' mode names.
_LEGACY_MODES = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
_SUPPORTED = ("Transformer", "Pooling", "Normalize")


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FormatError(f"{path}: cannot read JSON ({exc})", path=str(path)) from None


def _pooling(path: Path) -> dict[str, Any]:
    config = _json(path) if path.is_file() else {}
    if not isinstance(config, dict):
        raise FormatError(f"{path}: expected a JSON object", path=str(path))
    mode: Any = config.get("pooling_mode")
    if mode is None:
        mode = [name for key, name in _LEGACY_MODES.items() if config.get(key)] or ["mean"]
    modes = [mode] if isinstance(mode, str) else list(mode)
    if len(modes) != 1:
        raise FormatError(f"{path}: pooling modes {modes} are concatenated; omnitensor pools "
                          "with one mode", path=str(path))
    return {"pooling": str(modes[0]), "include_prompt": bool(config.get("include_prompt", True))}


def read_sentence_transformers(directory: str | Path) -> dict[str, Any]:
    """Runtime settings from a sentence-transformers directory (empty without ``modules.json``).

    Returns:
        ``pooling`` (mode name), ``normalize`` (bool), ``include_prompt`` (bool) and, when the
        files give them, ``max_seq_length``, ``do_lower_case``, ``prompts`` (name -> text) and
        ``default_prompt_name``.

    Raises:
        FormatError: unreadable JSON, or a module omnitensor cannot run (Dense, ...), which
            would otherwise be skipped silently and give wrong embeddings.
    """
    root = Path(directory)
    modules_file = root / "modules.json"
    if not modules_file.is_file():
        return {}
    modules = _json(modules_file)
    if not isinstance(modules, list):
        raise FormatError(f"{modules_file}: expected a list of modules", path=str(modules_file))
    settings: dict[str, Any] = {"pooling": "mean", "normalize": False, "include_prompt": True}
    for module in modules:
        kind = str(module.get("type", "")).rsplit(".", 1)[-1] if isinstance(module, dict) else ""
        if kind not in _SUPPORTED:
            raise FormatError(f"{modules_file}: module {module!r} is not supported (omnitensor "
                              f"runs {', '.join(_SUPPORTED)})", path=str(modules_file))
        if kind == "Pooling":
            settings |= _pooling(root / str(module.get("path", "1_Pooling")) / "config.json")
        elif kind == "Normalize":
            settings["normalize"] = True
    bert_config = root / "sentence_bert_config.json"
    if bert_config.is_file():
        config = _json(bert_config)
        if isinstance(config, dict):
            if isinstance(config.get("max_seq_length"), int):
                settings["max_seq_length"] = int(config["max_seq_length"])
            settings["do_lower_case"] = bool(config.get("do_lower_case", False))
    tok_config = root / "tokenizer_config.json"
    if "max_seq_length" not in settings and tok_config.is_file():
        # sentence-transformers >= 5 keeps max_seq_length as the tokenizer's model_max_length
        config = _json(tok_config)
        limit = config.get("model_max_length") if isinstance(config, dict) else None
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            settings["max_seq_length"] = limit
    st_config = root / "config_sentence_transformers.json"
    if st_config.is_file():
        config = _json(st_config)
        prompts = config.get("prompts") if isinstance(config, dict) else None
        if isinstance(prompts, dict):
            settings["prompts"] = {str(k): str(v) for k, v in prompts.items()}
        default = config.get("default_prompt_name") if isinstance(config, dict) else None
        if isinstance(default, str):
            settings["default_prompt_name"] = default
    return settings
