"""``omnitensor run MODEL.onnx --input name=file.npy ...``: run an ONNX model on a backend.

Inputs come from ``.npy`` files (or ``name=@shape:dtype`` for zeros, handy for a smoke test);
outputs are printed (shape, dtype, a preview) or saved with ``--output DIR`` as ``.npy`` files.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import OmnitensorError

__all__ = ["register", "run"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` verb."""
    parser = subparsers.add_parser(
        "run",
        help="run an ONNX model on inputs from .npy files",
        description="Import an ONNX model (pip install 'omnitensor[onnx]'), run it on the "
        "selected backend (OMNITENSOR_BACKEND or --backend) with inputs read from .npy files, "
        "and print or save the outputs.",
    )
    parser.add_argument("model", metavar="MODEL.onnx", help="the ONNX model file")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                        help="a graph input from a .npy file (repeat for each input); "
                        "NAME=@2x3:float32 feeds zeros of that shape and dtype")
    parser.add_argument("--output", metavar="DIR", default=None,
                        help="save each output as DIR/<name>.npy instead of printing it")
    parser.add_argument("--backend", default=None, help="backend name (default: the selected "
                        "one)")
    parser.set_defaults(func=run)


def _read_input(spec: str) -> tuple[str, np.ndarray[Any, Any]]:
    name, sep, source = spec.partition("=")
    if not sep or not name or not source:
        raise ValueError(f"--input {spec!r}: expected NAME=FILE.npy or NAME=@SHAPE:DTYPE")
    if source.startswith("@"):
        shape_text, _, dtype = source[1:].partition(":")
        shape = tuple(int(d) for d in shape_text.split("x") if d) if shape_text else ()
        return name, np.zeros(shape, dtype=dtype or "float32")
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"--input {name}: no such file {source!r}")
    return name, np.load(path, allow_pickle=False)


def run(args: argparse.Namespace) -> int:
    """Run the model; exit 1 on a bad model or input, 2 on bad arguments."""
    from .. import use_backend
    from ..onnx import load

    try:
        feeds = dict(_read_input(spec) for spec in args.input)
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"omnitensor run: {exc}\n")
        return 2
    try:
        model = load(args.model)
        missing = [i.name for i in model.inputs if i.name not in feeds]
        if missing:
            sys.stderr.write(f"omnitensor run: missing --input for {', '.join(missing)} (the "
                             f"model's inputs: {', '.join(i.name for i in model.inputs)})\n")
            return 2
        start = time.perf_counter()
        if args.backend:
            with use_backend(args.backend):
                outputs = model.run(feeds)
        else:
            outputs = model.run(feeds)
        seconds = time.perf_counter() - start
    except (OmnitensorError, OSError, TypeError) as exc:
        sys.stderr.write(f"omnitensor run: {exc}\n")
        return 1
    if args.output:
        folder = Path(args.output)
        folder.mkdir(parents=True, exist_ok=True)
        for name, value in outputs.items():
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            np.save(folder / f"{safe}.npy", value)
            print(f"{name}: {value.dtype}{list(value.shape)} -> {folder / (safe + '.npy')}")
    else:
        with np.printoptions(threshold=20, edgeitems=3, precision=5):
            for name, value in outputs.items():
                print(f"{name}: {value.dtype}{list(value.shape)}\n{value}")
    print(f"ran in {seconds:.3f} s (first call includes tracing and compiling)", file=sys.stderr)
    return 0
