"""Optimizer dumps: programs before/after in PTIR text and one trace JSON per realization.

Switched on by ``OMNITENSOR_DUMP_DIR=dir`` (read at call time) or `set_dump_dir` (the CLI's
``--dump-dir``). The tensor layer opens a `Trace` per realization with `start_trace`, saying
whether the plan cache hit; on a miss the pipeline adds the programs and the pass and rewrite
events; `Trace.close` writes ``<pid>-<seq>-<signature>.trace.json`` beside the ``.ptir`` files.
A `Trace` always collects events (tests read them); files are written only when a dir is set.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Final, final

from ..errors import OmnitensorError
from ..ir.program import Function

__all__ = ["Trace", "dump_dir", "program_text", "set_dump_dir", "start_trace"]

logger = logging.getLogger(__name__)

ENV_DUMP_DIR: Final = "OMNITENSOR_DUMP_DIR"
# Rewrite events beyond this many per trace are counted, not listed (a big model has thousands).
MAX_EVENTS: Final = 20_000

_override: Path | None = None
_seq = itertools.count()
_seq_lock = threading.Lock()


def set_dump_dir(path: str | os.PathLike[str] | None) -> None:
    """Dump into `path` from now on, whatever the environment says (None: back to the env)."""
    global _override
    _override = None if path is None else Path(path)


def dump_dir() -> Path | None:
    """The directory dumps go to, or None when dumping is off."""
    if _override is not None:
        return _override
    value = os.environ.get(ENV_DUMP_DIR, "").strip()
    return Path(value) if value else None


def program_text(fn: Function) -> str:
    """`fn` in PTIR text (`ir.text.print_function`), or a plain listing if printing fails."""
    try:
        from ..ir.text import print_function

        return print_function(fn)
    except (ImportError, OmnitensorError, ValueError, TypeError, KeyError) as exc:
        logger.warning("dump: PTIR printer failed (%s); writing a plain listing", exc)
        lines = [f"// plain listing of {fn.name}: {exc}"]
        lines += [f"input {i.value!r} {i.role.value} {i.name!r}" for i in fn.inputs]
        lines += [f"{inst!r} {inst.attrs!r}" for inst in fn.body]
        lines.append("return " + ", ".join(f"%{v.id}" for v in fn.outputs))
        return "\n".join(lines) + "\n"


@final
class Trace:
    """Events of one realization (or one optimization), written as JSON when dumping is on.

    Args:
        signature: the plan's structural signature (None when not known yet).
        cache_hit: whether the plan cache hit (None when not known).
        backend: the backend's name.
        kind: what is traced (``"realize"``, ``"compile"``, ``"optimize"``).
    """

    def __init__(self, signature: str | None = None, *, cache_hit: bool | None = None,
                 backend: str | None = None, kind: str = "realize") -> None:
        with _seq_lock:
            self.seq = next(_seq)
        self.signature = signature
        self.cache_hit = cache_hit
        self.backend = backend
        self.kind = kind
        self.events: list[dict[str, Any]] = []
        self.dropped = 0
        self.programs: dict[str, str] = {}
        self.sizes: dict[str, int] = {}
        self.extra: dict[str, Any] = {}
        self.started = time.perf_counter()
        self.directory = dump_dir()
        self.path: Path | None = None
        self.closed = False

    @property
    def prefix(self) -> str:
        """The file-name stem shared by this trace's files."""
        sig = (self.signature or "nosig")[:16]
        return f"{os.getpid()}-{self.seq:05d}-{sig}"

    def record(self, kind: str, **fields: Any) -> None:
        """Append one event (``kind`` plus JSON-able fields)."""
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        self.events.append({"kind": kind, **fields})

    def program(self, stage: str, fn: Function) -> Path | None:
        """Write `fn` as ``<prefix>.<stage>.ptir`` when dumping; remember its size."""
        self.sizes[stage] = len(fn.body)
        if self.directory is None:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self.prefix}.{stage}.ptir"
        path.write_text(program_text(fn))
        self.programs[stage] = path.name
        return path

    def to_json(self) -> dict[str, Any]:
        """The trace as a JSON-able dict."""
        hit = None if self.cache_hit is None else ("hit" if self.cache_hit else "miss")
        return {
            "seq": self.seq,
            "kind": self.kind,
            "signature": self.signature,
            "plan_cache": hit,
            "backend": self.backend,
            "programs": self.programs,
            "instructions": self.sizes,
            "elapsed_s": round(time.perf_counter() - self.started, 6),
            "events": self.events,
            "dropped_events": self.dropped,
            "extra": self.extra,
        }

    def close(self) -> Path | None:
        """Write the trace JSON (once) when dumping; return its path."""
        if self.closed:
            return self.path
        self.closed = True
        if self.directory is None:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self.prefix}.trace.json"
        path.write_text(json.dumps(self.to_json(), indent=1, default=str))
        self.path = path
        return path

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self.record("error", type=type(exc).__name__, message=str(exc))
        self.close()


def start_trace(signature: str | None = None, *, cache_hit: bool | None = None,
                backend: str | None = None, kind: str = "realize") -> Trace:
    """Open a trace for one realization; the tensor layer calls this on every realization.

    Example:
        >>> with start_trace(sig, cache_hit=False, backend="cpu") as trace:
        ...     fn, stats = optimize(fn, PassContext(trace=trace))
    """
    return Trace(signature, cache_hit=cache_hit, backend=backend, kind=kind)
