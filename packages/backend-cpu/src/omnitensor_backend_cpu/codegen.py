"""Fused elementwise kernels: numba source generated per group, written to a cache folder.

numba does not cache functions made by ``exec``, so each group's source is written to
``<cache>/k_<hash>.py`` (hash of the source) and imported from there; ``cache=True`` then keeps
the machine code across processes. One file serves every shape of its group: a flat loop
over C-contiguous operands (strided ones are copied first), so numba compiles one version per
group, whatever the sizes. What an op means in scalar code is the table `_EXPR`; anything
absent is not fused.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Final

from omnitensor.dtypes import DType, bool_, float32, float64
from omnitensor.ir.program import Instruction
from omnitensor.ir.types import TensorType, Type

__all__ = ["FUSIBLE_DTYPES", "FusedGroup", "batched_kernel", "cache_dir", "can_fuse",
           "load_kernel"]

logger = logging.getLogger(__name__)

#: dtypes a fused kernel computes on (numba has no float16 arithmetic; integers keep numpy's
#: wrapping semantics in the reference kernels).
FUSIBLE_DTYPES: Final = frozenset({float32, float64, bool_})

#: Transcendental ops whose float32 form uses `mathlib` (vectorizable, within the op's ULPs).
FAST_F32: Final = {"exp": "exp32", "tanh": "tanh32", "erf": "erf32", "logistic": "logistic32"}

#: Of those, the ones with a float32-arithmetic form (twice the lanes), all within the budget.
_NATIVE_F32: Final = {"exp": "exp32f", "tanh": "tanh32f", "erf": "erf32f",
                      "logistic": "logistic32f"}

_F64_LIBM: Final = {
    "exp": "math.exp", "log": "math.log", "log1p": "math.log1p", "expm1": "math.expm1",
    "tanh": "math.tanh", "sin": "math.sin", "cos": "math.cos", "erf": "math.erf",
}

_CMP: Final = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH: Final = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_LOGIC: Final = {"and": "&", "or": "|", "xor": "^"}

#: ``OMNITENSOR_CPU_KERNEL_MIN_ELEMENTS``: elements below which work runs as numpy kernels.
MIN_ELEMENTS_ENV: Final = "OMNITENSOR_CPU_KERNEL_MIN_ELEMENTS"


def min_elements() -> int:
    """Elements below which a group or composite runs as numpy kernels instead (default 32768).

    A compiled kernel saves a few microseconds per call on small arrays, but loading it (and
    numba, once per process) costs tens of milliseconds to a second, which small programs never
    earn back (`omnitensor generate char-gpt`; `examples/train_mlp.py`, whose (300, 64)
    activations compiled under the former 8192: 0.96-1.1 s for the process, against 0.60-0.62
    on numpy and 0.87-0.91 on the reference backend). The kernels compute the same thing at
    every size, so tests and the conformance run set this to 0 to check them on small cases.
    """
    raw = os.environ.get(MIN_ELEMENTS_ENV, "").strip()
    return int(raw) if raw.isdigit() else 1 << 15

_FASTMATH: Final = "{'contract', 'reassoc', 'arcp'}"


def _np(dtype: DType) -> str:
    return {"float32": "np.float32", "float64": "np.float64", "bool": "np.bool_"}[dtype.name]


def _dtype(type: Type) -> DType:
    assert isinstance(type, TensorType), type
    return type.dtype


def _expr(inst: Instruction, args: Sequence[str]) -> str | None:
    """Scalar numba expression computing `inst` from its operand expressions (None: unfusable)."""
    op = inst.op
    out = _dtype(inst.results[0].type)
    cast = _np(out)
    if op in _ARITH:
        return f"({args[0]} {_ARITH[op]} {args[1]})"
    if op in _CMP:
        return f"({args[0]} {_CMP[op]} {args[1]})"
    if op in _LOGIC and out == bool_:
        return f"({args[0]} {_LOGIC[op]} {args[1]})"
    if op == "not" and out == bool_:
        return f"(not {args[0]})"
    if op == "neg":
        return f"(-{args[0]})"
    if op == "abs":
        return f"abs({args[0]})"
    if op == "sqrt":
        return f"math.sqrt({args[0]})"
    if op == "rsqrt":
        return f"{cast}(1.0 / math.sqrt(np.float64({args[0]})))"
    if op in ("floor", "ceil"):
        return f"np.{op}({args[0]})"
    if op == "max":
        a, b = args
        return f"({a} if ({a} > {b} or {a} != {a}) else {b})"
    if op == "min":
        a, b = args
        return f"({a} if ({a} < {b} or {a} != {a}) else {b})"
    if op == "clamp":
        lo, x, hi = args
        low = f"({x} if ({x} > {lo} or {x} != {x}) else {lo})"
        return f"({low} if ({low} < {hi} or {low} != {low}) else {hi})"
    if op == "select":
        return f"({args[1]} if {args[0]} else {args[2]})"
    if op == "pow":
        return f"{cast}(math.pow(np.float64({args[0]}), np.float64({args[1]})))"
    if op == "convert":
        if out == bool_:
            return f"({args[0]} != 0)"
        return f"{cast}({args[0]})"
    if op in _ACTIVATIONS:
        return _activation(inst, args)
    if out == float32 and op in _NATIVE_F32:
        return f"{_NATIVE_F32[op]}(np.float32({args[0]}))"
    if out == float32 and op in FAST_F32:
        return f"np.float32({FAST_F32[op]}(np.float64({args[0]})))"
    if op in _F64_LIBM:
        return f"{cast}({_F64_LIBM[op]}(np.float64({args[0]})))"
    return None


#: The elementwise activation composites, fused by their `mathlib` scalar forms (the same
#: functions `pointwise`'s kernels run), so a bias add before one joins its kernel.
_ACTIVATIONS: Final = frozenset({"gelu", "silu", "swiglu", "geglu"})


def _activation(inst: Instruction, args: Sequence[str]) -> str | None:
    out = _dtype(inst.results[0].type)
    approximate = inst.attrs.get("approximate", "none")
    gated = inst.op in ("swiglu", "geglu")
    if out not in (float32, float64) or approximate not in ("none", "tanh") or len(args) != (
            2 if gated else 1):
        return None
    silu = inst.op in ("silu", "swiglu")
    if out == float32:
        name = "silu32f" if silu else "gelu_tanh32f" if approximate == "tanh" else "gelu_erf32f"
        value = f"{name}({args[0]})"
    else:
        value = f"activation64({args[0]}, {2 if silu else 1 if approximate == 'tanh' else 0})"
    return f"({value} * {args[1]})" if gated else value


def can_fuse(inst: Instruction) -> bool:
    """True when `inst` is an elementwise op on fusible dtypes that `_EXPR` knows."""
    types = [v.type for v in inst.operands] + [v.type for v in inst.results]
    if len(inst.results) != 1 or any(getattr(t, "dtype", None) not in FUSIBLE_DTYPES
                                     for t in types):
        return False
    return _expr(inst, ["a"] * len(inst.operands)) is not None


#: `FusedGroup._components`' chain of the values computed from scalars and literals only.
_BEFORE_LOOPS: Final = -(1 << 62)


@dataclass
class FusedGroup:
    """A run of elementwise instructions executed as one kernel.

    Attributes:
        insts: the instructions, in program order.
        shape: the common result shape.
        inputs: value ids read from outside (arrays of `shape`, possibly broadcast views).
        literals: value id -> scalar (Python float/bool) inlined into the source.
        outputs: value ids written to memory (used after the group or function outputs).
    """

    insts: list[Instruction]
    shape: tuple[int, ...]
    inputs: list[int]
    literals: dict[int, Any]
    outputs: list[int]

    def _components(self, scalar: Sequence[bool]) -> dict[int, int]:
        """Value id -> its chain: values joined by an instruction, scalars and literals apart.

        A group of several independent chains (an optimizer's updates of three parameters of
        one shape: 12 arrays read, 12 written) gets one loop per chain. In one loop, LLVM's
        vectorizer gave up on the runtime checks that so many arrays do not overlap and ran
        the whole loop scalar (AdamW's square root and division one float at a time); a
        chain's loop over its own 8 arrays is vectorized. Chains that read one array stay in
        one loop (the array is read once). Nothing a loop writes is read by another: a step's
        results never share memory with its operands (the plan's buffers).
        """
        parent: dict[int, int] = {}

        def find(v: int) -> int:
            while parent.setdefault(v, v) != v:
                parent[v] = parent[parent[v]]
                v = parent[v]
            return v

        apart = {vid for k, vid in enumerate(self.inputs) if scalar[k]} | set(self.literals)
        for inst in self.insts:
            result = find(inst.results[0].id)
            if all(v.id in apart for v in inst.operands):
                apart.add(inst.results[0].id)  # (computed once, before the loops)
            for v in inst.operands:
                if v.id not in apart:
                    parent[find(v.id)] = result
        chains = {v: find(v) for v in [*self.inputs, *(i.results[0].id for i in self.insts)]}
        return {v: _BEFORE_LOOPS if v in apart else chain for v, chain in chains.items()}

    def source(self, vectors: Sequence[bool] = (), scalars: Sequence[bool] = (),
               columns: Sequence[bool] = (), batched: bool = False) -> str:
        """The kernel module's source (its hash names the file).

        Without `vectors`, ``flat(n, *ins, *outs)`` over 1-D operands. With them (one flag per
        input), ``rows(n, m, *ins, *outs)`` over (n, m) operands, where a flagged input is one
        (m,) row read by every row (a bias broadcast over the leading axes, not copied). An
        input flagged in `scalars` is one element (a 1-element array), read once before the
        loops: a runtime scalar broadcast to the group's shape (an optimizer's per-step
        factor), not copied out to the whole shape. An input flagged in `columns` (rows kernel
        only) is one (n,) column, one value per row: a per-row statistic broadcast along the
        row (a layer norm's mean in its backward pass), not copied out either.

        `batched` (flat kernels only) adds ``many(parts, ns, addrs)`` over several groups of
        this structure (`batched.batch_groups`): operand k of group j at address
        ``addrs[k, j]``, group j ``ns[j]`` elements long, each group split into `parts` ranges
        on numba's OpenMP workers.
        """
        dtypes = {v.id: _dtype(v.type) for i in self.insts
                  for v in (*i.operands, *i.results)}
        names = {vid: f"x{k}" for k, vid in enumerate(self.inputs)}
        consts: list[str] = []
        for k, (vid, value) in enumerate(sorted(self.literals.items())):
            names[vid] = f"C{k}"
            # repr(inf) is `inf`, not a Python name: spell non-finite floats out.
            text = f"float('{value}')" if isinstance(value, float) and not (
                value - value == 0) else repr(value)
            consts.append(f"C{k} = {_np(dtypes[vid])}({text})")
        scalar = [k < len(scalars) and scalars[k] for k in range(len(self.inputs))]
        hoisted = [f"x{k} = in{k}[0]" for k in range(len(self.inputs)) if scalar[k]]
        vector = [k < len(vectors) and vectors[k] for k in range(len(self.inputs))]
        column = [k < len(columns) and columns[k] for k in range(len(self.inputs))]
        component = self._components(scalar)
        bodies: dict[int, list[str]] = {c: [] for c in dict.fromkeys(component.values())}
        bodies[_BEFORE_LOOPS] = hoisted
        for k, vid in enumerate(self.inputs):
            if not scalar[k]:
                at = "c" if vector[k] else "r" if column[k] else "IDX"
                bodies[component[vid]].append(f"x{k} = in{k}[{at}]")
        for k, inst in enumerate(self.insts):
            expr = _expr(inst, [names[v.id] for v in inst.operands])
            assert expr is not None, inst
            # NOTE: local names, not value ids: groups of the same structure (the parts of a
            # long chain, the same layer in two programs) share one source, one compile.
            name = f"v{k}"
            bodies[component[inst.results[0].id]].append(f"{name} = {expr}")
            names[inst.results[0].id] = name
        for k, vid in enumerate(self.outputs):
            chain = component.get(vid, _BEFORE_LOOPS)
            if chain == _BEFORE_LOOPS:  # (a value computed before the loops, stored in each)
                chain = -1 - k
            bodies.setdefault(chain, []).append(f"out{k}[IDX] = {names[vid]}")
        # one loop per chain that shares no array with the others (see `_components`)
        loops = [body for chain, body in bodies.items() if body and chain != _BEFORE_LOOPS]
        params = ", ".join([f"in{k}" for k in range(len(self.inputs))]
                           + [f"out{k}" for k in range(len(self.outputs))])
        # NOTE: imported here: grouping runs for every plan, numba only for kernels that pay.
        from . import mathlib
        from ._compat import NUMBA_VERSION

        lines = [
            f"# omnitensor fused kernel (mathlib {mathlib.SOURCE_HASH}, numba {NUMBA_VERSION})",
            "import math",
            "import numpy as np",
            "from omnitensor_backend_cpu._compat import jit, prange",
            *(["from numba import carray",
               "from omnitensor_backend_cpu.addresses import pointer_at"] if batched else []),
            ("from omnitensor_backend_cpu.mathlib import activation64, erf32, erf32f, exp32, "
             "exp32f, gelu_erf32f, gelu_tanh32f, logistic32, logistic32f, silu32f, tanh32, "
             "tanh32f"),
            "",
            *consts,
            f"FM = {_FASTMATH}",
            "",
        ]
        # the parts of `split` take ranges of every operand but the whole ones (scalars, rows)
        whole = [scalar[k] or vector[k] for k in range(len(self.inputs))]
        ranged = ", ".join([f"in{k}" if whole[k] else f"in{k}[lo:hi]"
                            for k in range(len(self.inputs))]
                           + [f"out{k}[lo:hi]" for k in range(len(self.outputs))])
        if any(vector) or any(column):
            lines += ["@jit(fastmath=FM)", f"def rows(n, m, {params}):",
                      *[f"    {line}" for line in hoisted]]
            for body in loops:
                lines += ["    for r in range(n):", "        for c in range(m):",
                          *[f"            {line.replace('IDX', 'r, c')}" for line in body]]
            call = f"rows(hi - lo, m, {ranged})"
            head = f"def split(parts, step, n, m, {params}):"
        else:
            lines += ["@jit(fastmath=FM)", f"def flat(n, {params}):",
                      *[f"    {line}" for line in hoisted]]
            for body in loops:
                lines += ["    for i in range(n):",
                          *[f"        {line.replace('IDX', 'i')}" for line in body]]
            call = f"flat(hi - lo, {ranged})"
            head = f"def split(parts, step, n, {params}):"
        # NOTE: the parallel twin is compiled on its first call only (a large call where
        # `threads.wide_products`): see `kernel_for`
        lines += ["", "", "@jit(fastmath=FM, parallel=True)", head,
                  "    for p in prange(parts):", "        lo = min(n, p * step)",
                  "        hi = min(n, lo + step)", f"        {call}"]
        if batched:
            # operands by address (`batched.addresses`): a tuple of arrays per operand, indexed
            # by the group at run time, took numba 28 s to compile for 21 groups
            assert not any(vector) and not any(column), "batched kernels are flat"
            kinds = [_np(dtypes[v]) for v in (*self.inputs, *self.outputs)]
            one = [k < len(whole) and whole[k] for k in range(len(kinds))]
            views = [f"carray(pointer_at(addrs[{k}, j]), {'1' if one[k] else 'n'}, {kind})"
                     for k, kind in enumerate(kinds)]
            member = ", ".join([f"a{k}" if one[k] else f"a{k}[lo:hi]" for k in range(len(kinds))])
            lines += ["", "", "@jit(fastmath=FM, parallel=True)", "def many(parts, ns, addrs):",
                      "    for p in prange(parts):", "        for j in range(ns.shape[0]):",
                      "            n = ns[j]", "            step = -(-n // parts)",
                      "            step = -(-step // 64) * 64",
                      "            lo = min(n, p * step)", "            hi = min(n, lo + step)",
                      "            if lo < hi:",
                      *[f"                a{k} = {view}" for k, view in enumerate(views)],
                      f"                flat(hi - lo, {member})"]
        lines.append("")
        return "\n".join(lines)


def cache_dir() -> Path:
    """Where generated kernel sources live.

    ``OMNITENSOR_CPU_CACHE_DIR``, else ``$NUMBA_CACHE_DIR/omnitensor-cpu-kernels``, else
    ``~/.cache/omnitensor/cpu-kernels``.
    """
    explicit = os.environ.get("OMNITENSOR_CPU_CACHE_DIR")
    if explicit:
        return Path(explicit)
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        return Path(numba_dir) / "omnitensor-cpu-kernels"
    return Path.home() / ".cache" / "omnitensor" / "cpu-kernels"


_LOADED: dict[str, ModuleType] = {}
_LOCK = threading.Lock()


def load_kernel(source: str) -> ModuleType:
    """Import (writing it first when absent) the kernel module whose text is `source`."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _LOCK:
        module = _LOADED.get(digest)
        if module is not None:
            return module
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"k_{digest}.py"
        if not path.exists() or path.read_text() != source:
            # NOTE: write-then-rename, so a concurrent process never imports half a file.
            tmp = folder / f".k_{digest}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(source)
            os.replace(tmp, path)
            logger.debug("wrote fused kernel %s", path)
        name = f"omnitensor_cpu_kernels.k_{digest}"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _LOADED[digest] = module
        return module


def kernel_for(group: FusedGroup, vectors: Sequence[bool] = (), scalars: Sequence[bool] = (),
               columns: Sequence[bool] = ()) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """`group`'s kernels: ``flat`` over 1-D operands, or ``rows`` (any `vectors` or `columns`).

    Inputs flagged in `scalars` are 1-element arrays (see `FusedGroup.source`). Returns the
    serial kernel, which the plan splits over `pool`'s threads, and its parallel twin
    ``split(parts, step, *args)`` running ``parts`` ranges of ``step`` (rows or elements) on
    numba's OpenMP workers, for where those run the products (`threads.wide_products`) and
    would spin beside the pool's threads.
    """
    module = load_kernel(group.source(vectors, scalars, columns))
    kernel: Callable[..., Any] = module.rows if any(vectors) or any(columns) else module.flat
    return kernel, module.split


def batched_kernel(group: FusedGroup, scalars: Sequence[bool]) -> Callable[..., Any]:
    """``many(parts, ns, addrs)`` of `group`'s structure (see `FusedGroup.source`)."""
    many: Callable[..., Any] = load_kernel(group.source(scalars=scalars, batched=True)).many
    return many
