"""``omnitensor serve MODEL...``: an OpenAI-compatible HTTP server on 127.0.0.1.

Serves ``/v1/models``, ``/v1/chat/completions`` and ``/v1/completions`` (with ``stream``) for
causal LMs and ``/v1/embeddings`` for encoders, with continuous batching of concurrent
requests. Needs the ``serve`` extra (FastAPI and uvicorn): ``pip install 'omnitensor[serve]'``.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys

from ..errors import OmnitensorError
from ._common import add_backend_arg, load_named

__all__ = ["register", "run"]

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``serve`` verb."""
    parser = subparsers.add_parser(
        "serve",
        usage="omnitensor serve [-h] [options] MODEL [MODEL ...]",
        help="serve models over an OpenAI-compatible HTTP API (needs omnitensor[serve])",
        description="Serve each MODEL (a name from `omnitensor models`, a .gguf file or a "
        "Hugging Face directory; the API's model id is the name as given) at "
        "http://HOST:PORT/v1: models, chat/completions and completions (streaming with "
        "server-sent events) for causal LMs, embeddings for encoders. Concurrent requests "
        "share decode steps (continuous batching).",
    )
    parser.add_argument("models", nargs="+", metavar="MODEL", help="models to serve")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to bind (default 127.0.0.1: this machine only; "
                        "0.0.0.0 exposes the server to the network)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--max-batch", type=int, default=8, metavar="N",
                        help="sequences decoded together per model; more requests wait "
                        "(default 8)")
    parser.add_argument("--context", type=int, default=None, metavar="N",
                        help="KV-cache slots per model: prompt plus answer must fit; the "
                        "cache takes max-batch x N slots (default: the model's context length, "
                        "at most 2048)")
    add_backend_arg(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Load the models and serve until interrupted; returns the exit status."""
    missing = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"omnitensor serve: needs {' and '.join(missing)}: pip install "
              "'omnitensor[serve]' (from a checkout: pip install './packages/core[serve]')",
              file=sys.stderr)
        return 4
    if args.max_batch < 1 or (args.context is not None and args.context < 2) or not (
            0 < args.port < 65536):
        print("omnitensor serve: need --max-batch >= 1, --context >= 2 and a port in "
              "1..65535", file=sys.stderr)
        return 2
    import uvicorn

    from ..serve import create_app

    try:
        models = {name: load_named(name, args.backend)[0] for name in args.models}
    except OmnitensorError as exc:
        print(f"omnitensor serve: {exc}", file=sys.stderr)
        return 1
    context = args.context or min(2048, *(m.model.context_length for m in models.values()))
    app = create_app(models, max_batch=args.max_batch, context=context)
    print(f"serving {', '.join(models)} at http://{args.host}:{args.port}/v1 "
          f"(max batch {args.max_batch}, context {context}); Ctrl-C stops", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
