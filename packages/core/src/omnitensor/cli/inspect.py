"""``omnitensor inspect FILE_OR_DIR``: what a weight file holds, without building a model.

Shows the format, architecture, hyper-parameters, a metadata summary, every tensor (shape, type,
bytes) and the tokenizer. GGUF files, ``.safetensors`` files and Hugging Face directories.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..errors import FormatError, OmnitensorError
from ..io.gguf import MAGIC, read_gguf
from ..io.safetensors import read_hf_dir, read_safetensors
from ..io.tokenizer import Tokenizer
from ..io.weights import QuantizedArray, WeightFile

__all__ = ["describe", "register", "run"]

_ARRAY_PREVIEW = 4


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``inspect`` verb."""
    parser = subparsers.add_parser(
        "inspect",
        help="show a GGUF / safetensors file or Hugging Face directory: tensors, metadata",
        description="Show the format, architecture, metadata, tensors (shapes, types, sizes) "
        "and tokenizer of a GGUF file, a .safetensors file or a Hugging Face model directory. "
        "Only headers are read unless --stats is given.",
    )
    parser.add_argument("path", metavar="FILE_OR_DIR", help="a .gguf / .safetensors / .onnx "
                        "file, a directory with config.json, or a name from `omnitensor "
                        "models`")
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
    parser.add_argument("--stats", action="store_true",
                        help="load every tensor and show min / max / mean (slow on big files)")
    parser.add_argument("--max-tensors", type=int, default=None, metavar="N",
                        help="show at most N tensors (default: all)")
    parser.set_defaults(func=run)


def _short(value: Any) -> Any:
    """Metadata value for display: long arrays and strings are summarized."""
    from ..io.gguf import NumberArray

    if isinstance(value, NumberArray) and len(value) <= _ARRAY_PREVIEW:
        return value.tolist()
    if isinstance(value, list | NumberArray) and len(value) > _ARRAY_PREVIEW:
        kind = type(value[0]).__name__
        return f"[{len(value)} x {kind}: {', '.join(map(repr, value[:_ARRAY_PREVIEW]))}, ...]"
    if isinstance(value, str) and len(value) > 80:
        return value[:77] + "..."
    return value


def _open(path: Path) -> tuple[str, WeightFile, dict[str, Any], Tokenizer | str | None]:
    """(format, weights, {architecture, metadata}, tokenizer) for any supported path."""
    if path.is_dir():
        hf = read_hf_dir(path)
        tok: Tokenizer | str | None
        try:
            tok = hf.load_tokenizer()
        except FormatError as exc:  # the weights are still worth showing
            tok = str(exc)
        info: dict[str, Any] = {"architecture": hf.architecture,
                                "metadata": dict(hf.weights.metadata), "config": hf.config}
        return "huggingface", hf.weights, info, tok
    with open(path, "rb") as stream:
        magic = stream.read(4)
    if magic == MAGIC:
        gguf = read_gguf(path)
        tokenizer: Tokenizer | str | None = None
        if "tokenizer.ggml.tokens" in gguf.metadata:
            try:
                tokenizer = Tokenizer.from_gguf_metadata(gguf.metadata)
            except FormatError as exc:  # the weights are still worth showing
                tokenizer = str(exc)
        info = {"architecture": gguf.architecture, "version": gguf.version,
                "metadata": dict(gguf.metadata)}
        return "gguf", gguf, info, tokenizer
    file = read_safetensors(path)
    return "safetensors", file, {"architecture": None, "metadata": dict(file.metadata)}, None


def _stats(weights: WeightFile, names: list[str], err: TextIO) -> dict[str, dict[str, float]]:
    from tqdm import tqdm

    out: dict[str, dict[str, float]] = {}
    total = sum(weights.tensor_info(n).nbytes for n in names)
    with tqdm(total=total, unit="B", unit_scale=True, desc="loading", file=err,
              disable=None) as bar:
        for name in names:
            value = weights.load(name)
            array = value.dequantize() if isinstance(value, QuantizedArray) else value
            array = np.asarray(array, dtype=np.float64)
            if array.size:
                out[name] = {"min": float(array.min()), "max": float(array.max()),
                             "mean": float(array.mean())}
            bar.update(weights.tensor_info(name).nbytes)
    return out


def describe(path: str | Path, *, stats: bool = False, err: TextIO | None = None
             ) -> dict[str, Any]:
    """Everything `inspect` shows, as a JSON-able dict.

    Raises:
        FormatError: for a malformed or unknown file.
    """
    fmt, weights, info, tokenizer = _open(Path(path))
    names = list(weights.tensor_names)
    tensors: list[dict[str, Any]] = []
    for name in names:
        t = weights.tensor_info(name)
        tensors.append({"name": name, "shape": list(t.shape), "type": t.type,
                        "nbytes": t.nbytes, "elements": t.size})
    result: dict[str, Any] = {
        "path": str(path), "format": fmt, **info,
        "tensor_count": len(tensors),
        "total_bytes": sum(t["nbytes"] for t in tensors),
        "parameters": sum(t["elements"] for t in tensors),
        "types": dict(sorted(_count(t["type"] for t in tensors).items())),
        "tensors": tensors,
        "tokenizer": (tokenizer.summary() if isinstance(tokenizer, Tokenizer)
                      else {"error": tokenizer} if tokenizer is not None else None),
    }
    if stats:
        values = _stats(weights, names, err or sys.stderr)
        for tensor in tensors:
            tensor["stats"] = values.get(tensor["name"])
    return result


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _size(nbytes: int) -> str:
    value = float(nbytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def _print_text(result: Mapping[str, Any], out: TextIO, max_tensors: int | None) -> None:
    out.write(f"{result['path']}\n")
    out.write(f"  format:       {result['format']}"
              + (f" v{result['version']}" if "version" in result else "") + "\n")
    out.write(f"  architecture: {result['architecture']}\n")
    types = ", ".join(f"{k} x{v}" for k, v in result["types"].items())
    out.write(f"  tensors:      {result['tensor_count']} ({_size(result['total_bytes'])}, "
              f"{result['parameters']:,} parameters; {types})\n")
    if result.get("config"):
        out.write("config:\n")
        for key, value in result["config"].items():
            out.write(f"  {key} = {_short(value)}\n")
    if result["metadata"]:
        out.write("metadata:\n")
        for key, value in result["metadata"].items():
            out.write(f"  {key} = {_short(value)}\n")
    tok = result["tokenizer"]
    if tok is not None and "error" in tok:
        out.write(f"tokenizer: unavailable ({tok['error']})\n")
    elif tok is not None:
        out.write(f"tokenizer: {tok['model']}, {tok['vocab_size']} tokens, bos={tok['bos_id']}, "
                  f"eos={tok['eos_ids']}, add_bos={tok['add_bos']}, "
                  f"chat_template={'yes' if tok['chat_template'] else 'no'}\n")
    tensors = result["tensors"]
    shown = tensors if max_tensors is None else tensors[:max_tensors]
    width = max((len(t["name"]) for t in shown), default=4)
    out.write("tensors:\n")
    for t in shown:
        shape = "[" + ", ".join(map(str, t["shape"])) + "]"
        line = f"  {t['name']:<{width}}  {t['type']:<6} {shape:<20} {_size(t['nbytes']):>10}"
        if t.get("stats"):
            s = t["stats"]
            line += f"  min {s['min']:.4g} max {s['max']:.4g} mean {s['mean']:.4g}"
        out.write(line + "\n")
    if len(shown) < len(tensors):
        out.write(f"  ... {len(tensors) - len(shown)} more (use --max-tensors)\n")


def run(args: argparse.Namespace) -> int:
    """Run ``omnitensor inspect``; returns the exit status (1 on a malformed file)."""
    from ..runtime.names import resolve_model

    if str(args.path).endswith(".onnx"):
        return _run_onnx(args)
    try:
        result = describe(resolve_model(args.path), stats=args.stats)
    except (OmnitensorError, OSError) as exc:
        sys.stderr.write(f"omnitensor inspect: {exc}\n")
        return 1
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
    else:
        _print_text(result, sys.stdout, args.max_tensors)
    return 0


def _run_onnx(args: argparse.Namespace) -> int:
    """``inspect model.onnx``: inputs, outputs, ops and whether omnitensor imports each."""
    from ..onnx.describe import describe_onnx, print_onnx

    try:
        info = describe_onnx(args.path)
    except (OmnitensorError, OSError) as exc:
        sys.stderr.write(f"omnitensor inspect: {exc}\n")
        return 1
    if args.json:
        sys.stdout.write(json.dumps(info, indent=2, default=str) + "\n")
    else:
        print_onnx(info, sys.stdout)
    return 0
