"""Conformance cases and the registries that produce them (the suite's extension points).

A `Case` is one PTIR program plus seeded inputs, named ``<op>-<dtype>-<sample>``. Cases come from
*case sources* registered with `register_case_source` (whole families: generic trait-derived
samples, fused graphs, gradients, models) or from per-op sample functions registered with
`@cases("dot_general")`. The built-in sources register through the same API as third parties.
Nothing here runs a backend; see `runner`.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, as_dtype
from omnitensor.errors import OmnitensorError
from omnitensor.ir.builder import Builder
from omnitensor.ir.program import Function
from omnitensor.ir.types import QTensorType, TensorType, Value

from . import values

__all__ = [
    "MODES",
    "Arg",
    "Case",
    "CaseSource",
    "Sample",
    "all_cases",
    "case_sources",
    "cases",
    "find_case",
    "load_entry_point_sources",
    "op_sample_functions",
    "register_case_source",
    "sample",
]

_log = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]
#: A fill makes one input array from a generator and the input's type (see `values.FILLS`).
Fill = str | Callable[[np.random.Generator, Any], Array]
#: The modes a case source may serve (see the plugin's ``--omnitensor-mode``).
MODES = ("test", "grad", "perf")
#: How outputs are compared: ``auto`` picks ``exact`` for integers and booleans, ``ulp`` for
#: single elementwise/movement ops and ``nmse`` for everything that accumulates.
CHECKS = ("auto", "exact", "ulp", "nmse")


@dataclass(frozen=True)
class Arg:
    """One function input of a case: its type, how its data is made, and its role name.

    Attributes:
        type: the input's PTIR type.
        fill: a fill name from `values.FILLS` (``"normal"``, ``"edges"``, ``"positive"`` ...)
            or a callable ``(rng, type) -> array``.
    """

    type: TensorType | QTensorType
    fill: Fill = "normal"


@dataclass(frozen=True)
class Sample:
    """An op-specific sample, before it is named by op and dtype (what `@cases` functions yield).

    Attributes:
        name: short, id-safe sample name (``"batched"``); unique per (op, dtype).
        args: the function inputs.
        build: ``(builder, *input_values) -> output value or values``; records the program.
        check: one of ``auto``, ``exact``, ``ulp``, ``nmse``.
        ulp: ULP budget override (default: the op's declared ``OpDef.ulp``).
        perf: also (or only, with `test` False) a perf-mode case at a realistic size.
        test: part of the ``test`` mode.
        flops: floating-point operations of one run (perf mode prints GFLOP/s when set,
            otherwise GB/s from the bytes moved).
    """

    name: str
    args: tuple[Arg, ...]
    build: Callable[..., Value | Sequence[Value]]
    check: str = "auto"
    ulp: int | None = None
    perf: bool = False
    test: bool = True
    flops: float | None = None


def sample(name: str, args: Sequence[Arg | TensorType], build: Callable[..., Any],
           **options: Any) -> Sample:
    """Shorthand for `Sample`: bare TensorTypes become ``Arg(type)``."""
    wrapped = tuple(a if isinstance(a, Arg) else Arg(a) for a in args)
    return Sample(name, wrapped, build, **options)


@dataclass(frozen=True)
class Case:
    """One conformance case: a PTIR program, its seeded inputs, and how to compare its outputs.

    Attributes:
        op: the matrix row: the op under test (``"add"``) or a graph name (``"graph.softmax"``).
        dtype: the matrix column (a dtype name).
        sample: the sample name.
        args: the function inputs.
        build: records the program (see `Sample.build`).
        source: the name of the case source that produced it.
        mode: ``test``, ``grad`` or ``perf``.
        check: comparison kind (see `CHECKS`).
        ulp: ULP budget override.
        flops: floating-point operations of one run (perf mode).
        oracle: when set, the reference outputs come from this program (same inputs) instead
            of `build`'s: a functional alternative is checked against the portable
            implementation this way.
        layouts: per input, the memory layout of the buffer the backend receives (see
            `layout.LAYOUTS`: ``transposed``, ``reversed``, ``stepped``, ``broadcast``; ``""``
            is dense). Empty: every input dense.
    """

    op: str
    dtype: str
    sample: str
    args: tuple[Arg, ...]
    build: Callable[..., Value | Sequence[Value]] = field(repr=False)
    source: str = ""
    mode: str = "test"
    check: str = "auto"
    ulp: int | None = None
    flops: float | None = None
    oracle: Callable[..., Value | Sequence[Value]] | None = field(default=None, repr=False)
    layouts: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The test id ``<op>-<dtype>-<sample>`` (xfail files and ``--omnitensor-case`` use it)."""
        return f"{self.op}-{self.dtype}-{self.sample}"

    def seed(self, base: int = 0) -> int:
        """The input seed: a hash of the id mixed with the session's base seed (order-free)."""
        return (zlib.crc32(self.id.encode()) ^ (base * 0x9E3779B1)) & 0xFFFFFFFF

    def function(self, *, oracle: bool = False) -> Function:
        """Record the case's PTIR program (fresh on each call); the oracle's with `oracle`."""
        builder = Builder(self.id.replace("-", "_").replace(".", "_"))
        inputs = [builder.input(a.type) for a in self.args]
        build = self.oracle if oracle and self.oracle is not None else self.build
        outputs = build(builder, *inputs)
        if isinstance(outputs, Value):
            outputs = [outputs]
        return builder.build(list(outputs))

    def inputs(self, seed: int) -> list[Array]:
        """The input arrays for `seed` (deterministic: same seed, same bits)."""
        rng = np.random.default_rng(seed)
        arrays = [values.fill(rng, a.type, a.fill) for a in self.args]
        if self.layouts:
            from .layout import effective_values

            arrays = [effective_values(a, kind) for a, kind in zip(arrays, self.layouts,
                                                                     strict=True)]
        return arrays


#: A case source: ``() -> iterable of Case``. Called lazily, once per session and mode.
CaseSource = Callable[[], Iterable[Case]]


@dataclass
class _Source:
    name: str
    fn: CaseSource
    mode: str


_SOURCES: dict[str, _Source] = {}
_OP_SAMPLES: dict[str, list[Callable[[DType], Iterable[Sample]]]] = {}
_ENTRY_POINTS_LOADED = False
#: mode -> cases; cleared whenever a source or sample function is registered.
_CACHE: dict[str, list[Case]] = {}
#: Entry-point group through which other distributions add case sources: each entry point names
#: a module that calls `register_case_source` or `@cases` when imported.
ENTRY_POINT_GROUP = "omnitensor_conformance.cases"


def register_case_source(name: str, fn: CaseSource, *, mode: str = "test",
                         replace: bool = False) -> CaseSource:
    """Register a source of cases: the extension point for whole families of cases.

    Functionals, gradients, models and fused graphs add their cases this way. A source is a
    callable returning `Case` objects; it runs when a session collects cases for `mode`.

    Args:
        name: unique source name (shown in reports: ``"graph"``, ``"grad.elementwise"``).
        fn: ``() -> iterable of Case``.
        mode: the mode it serves (``test``, ``grad`` or ``perf``).
        replace: allow replacing a source of the same name (otherwise an error).

    Returns:
        `fn`, so that this can be used as a decorator through `functools.partial`.

    Raises:
        OmnitensorError: for an unknown mode or a duplicate name.
    """
    if mode not in MODES:
        raise OmnitensorError(f"conformance: unknown mode {mode!r} (expected one of {MODES})")
    if name in _SOURCES and not replace:
        raise OmnitensorError(
            f"conformance: case source {name!r} is registered twice; pass replace=True to "
            f"replace it"
        )
    _SOURCES[name] = _Source(name, fn, mode)
    _CACHE.clear()
    return fn


def cases(*ops: str) -> Callable[[Callable[[DType], Iterable[Sample]]],
                                 Callable[[DType], Iterable[Sample]]]:
    """Register op-specific samples: ``@cases("dot_general")`` on ``def _(dtype) -> samples``.

    The function is called once per dtype the op declares and yields `Sample` objects (it may
    yield none for a dtype). Samples with ``perf=True`` also serve perf mode.

    Args:
        *ops: the op names the function makes samples for.
    """

    def register(fn: Callable[[DType], Iterable[Sample]]) -> Callable[[DType], Iterable[Sample]]:
        for op in ops:
            _OP_SAMPLES.setdefault(op, []).append(fn)
        _CACHE.clear()
        return fn

    return register


def op_sample_functions() -> dict[str, list[Callable[[DType], Iterable[Sample]]]]:
    """The `@cases` registry: op name -> sample functions (after importing the built-ins)."""
    _load_builtin()
    return {k: list(v) for k, v in _OP_SAMPLES.items()}


def case_sources(mode: str | None = None) -> list[str]:
    """Names of the registered case sources (for `mode`, or all)."""
    _load_builtin()
    return [s.name for s in _SOURCES.values() if mode is None or s.mode == mode]


def load_entry_point_sources() -> list[str]:
    """Import every module of the ``omnitensor_conformance.cases`` entry-point group once.

    Returns:
        Messages for entry points that failed to load (they are logged and skipped, never fatal:
        a broken plugin must not hide the rest of the suite).
    """
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return []
    _ENTRY_POINTS_LOADED = True
    problems = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # noqa: BLE001 (a broken plugin is reported, not fatal)
            problems.append(f"case plugin {ep.name!r} failed to load: {exc!r}")
            _log.warning(problems[-1])
    return problems


def _load_builtin() -> None:
    # NOTE: by module path: the package attribute `cases` is the decorator, not the subpackage.
    importlib.import_module(f"{__package__}.cases")  # registers the built-in sources


def all_cases(mode: str = "test") -> list[Case]:
    """Every case of every registered source for `mode`, ids unique, in a stable order.

    Raises:
        OmnitensorError: when two cases share an id (names the id and both sources).
    """
    _load_builtin()
    load_entry_point_sources()
    if mode in _CACHE:
        return list(_CACHE[mode])
    seen: dict[str, Case] = {}
    for source in list(_SOURCES.values()):
        if source.mode != mode:
            continue
        for case in source.fn():
            if case.id in seen:
                raise OmnitensorError(
                    f"conformance: duplicate case id {case.id!r} (from sources "
                    f"{seen[case.id].source!r} and {source.name!r}); rename one sample"
                )
            seen[case.id] = case
    _CACHE[mode] = list(seen.values())
    return list(_CACHE[mode])


def find_case(case_id: str, mode: str = "test") -> Case:
    """The case named `case_id` (to reproduce a failure from Python).

    Raises:
        OmnitensorError: for an unknown id, with close matches.
    """
    found = {c.id: c for c in all_cases(mode)}
    if case_id in found:
        return found[case_id]
    import difflib

    close = difflib.get_close_matches(case_id, found, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise OmnitensorError(f"conformance: unknown case {case_id!r}{hint}")


def samples_to_cases(op: str, dtypes: Iterable[DType], source: str, *,
                     mode: str = "test") -> Iterator[Case]:
    """Cases of the `@cases` functions registered for `op` over `dtypes` (for `mode`)."""
    for fn in _OP_SAMPLES.get(op, []):
        for dtype in dtypes:
            for s in fn(as_dtype(dtype)):
                if (mode == "perf" and not s.perf) or (mode == "test" and not s.test):
                    continue
                yield Case(op, as_dtype(dtype).name, s.name, s.args, s.build, source=source,
                           mode=mode, check=s.check, ulp=s.ulp, flops=s.flops)
