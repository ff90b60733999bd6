"""ONNX's own backend tests as a conformance source: node tests and the light model zoo.

The `onnx` wheel ships every node test case (a one-op model with numpy-made inputs and expected
outputs) and nine CNN graphs with reference outputs. `run_onnx_suite` imports each through
`omnitensor.onnx`, runs it on a backend and sorts it into pass, fail or unsupported (the importer
refused it at load time, naming why), per test and per op.
"""

from __future__ import annotations

import glob
import os
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["OnnxCase", "OnnxReport", "light_cases", "load_xfails", "node_cases",
           "run_onnx_suite"]

#: Known failures of the importer on every backend, each with its reason.
XFAILS = os.path.join(os.path.dirname(__file__), "onnx-xfails.txt")


@dataclass
class OnnxCase:
    """One test: a model, its inputs and expected outputs, with onnx's tolerances."""

    name: str
    ops: tuple[str, ...]
    model: Any
    inputs: list[Any]  # arrays; a sequence or optional input is kept as given (unsupported)
    expected: list[Any]
    rtol: float
    atol: float


@dataclass
class OnnxReport:
    """Outcomes per test (`pass`, `fail`, `unsupported`) with the reason, and per-op counts."""

    outcomes: dict[str, tuple[str, str]] = field(default_factory=dict)
    ops: dict[str, tuple[str, ...]] = field(default_factory=dict)
    seconds: float = 0.0

    def apply_xfails(self, xfails: dict[str, str]) -> None:
        """Mark listed failures `xfail`; a listed test that passes becomes `xpass` (a failure).

        A reason that starts with ``unstable:`` marks a test whose outcome depends on float
        rounding the standard leaves free (summation order): it may pass or fail.
        """
        for name, (outcome, reason) in list(self.outcomes.items()):
            if name not in xfails:
                continue
            if outcome == "fail":
                self.outcomes[name] = ("xfail", f"{reason} (known: {xfails[name]})")
            elif outcome == "pass" and not xfails[name].startswith("unstable:"):
                self.outcomes[name] = ("xpass", f"listed as failing ({xfails[name]}) but passes:"
                                       " remove it from the expected failures")

    def totals(self) -> Counter[str]:
        """Outcome -> number of tests."""
        return Counter(outcome for outcome, _ in self.outcomes.values())

    def per_op(self) -> dict[str, Counter[str]]:
        """Op -> outcome counts of the tests that use it."""
        table: dict[str, Counter[str]] = defaultdict(Counter)
        for name, (outcome, _) in self.outcomes.items():
            for op in self.ops[name]:
                table[op][outcome] += 1
        return dict(table)

    def format(self, *, verbose: bool = False) -> str:
        """A printable summary: per-op lines, failures (with reasons) when verbose, totals."""
        lines = [f"{'op':28} {'pass':>5} {'fail':>5} {'xfail':>5} {'unsup':>6}"]
        for op, counts in sorted(self.per_op().items()):
            lines.append(f"{op:28} {counts['pass']:5d} {counts['fail'] + counts['xpass']:5d} "
                         f"{counts['xfail']:5d} {counts['unsupported']:6d}")
        if verbose:
            for name, (outcome, reason) in sorted(self.outcomes.items()):
                if outcome in ("fail", "xpass", "xfail"):
                    lines.append(f"{outcome.upper()} {name}: {reason}")
        totals = self.totals()
        claimed = totals["pass"] + totals["fail"] + totals["xfail"] + totals["xpass"]
        total = sum(totals.values())
        lines.append(
            f"onnx: {total} tests: {totals['pass']} pass, {totals['fail']} fail, "
            f"{totals['xfail']} known failures, {totals['xpass']} unexpected passes, "
            f"{totals['unsupported']} unsupported; claimed {claimed}/{total} "
            f"({100.0 * claimed / max(total, 1):.1f}%), pass rate of claimed "
            f"{100.0 * totals['pass'] / max(claimed, 1):.1f}% ({self.seconds:.1f} s)")
        return "\n".join(lines)


def node_cases(pattern: str | None = None) -> Iterator[OnnxCase]:
    """Every node test case of the installed onnx (optionally those whose name has `pattern`)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    for case in cases:
        if (pattern and pattern not in case.name) or case.model is None:
            continue
        for inputs, expected in case.data_sets or []:
            yield OnnxCase(case.name, tuple(sorted({n.op_type for n in case.model.graph.node})),
                           case.model, [_array(x) for x in inputs],
                           [_array(x) for x in expected], case.rtol, case.atol)
            break


def _array(value: Any) -> Any:
    """Test data as numpy: TensorProtos decoded, numpy scalars made 0-d; sequences kept."""
    import onnx

    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def light_cases(pattern: str | None = None) -> Iterator[OnnxCase]:
    """The light model zoo graphs with their reference outputs (inputs made as onnx makes them)."""
    import onnx
    from onnx.backend.test.runner import Runner

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    for path in sorted(glob.glob(os.path.join(folder, "light_*.onnx"))):
        name = "test_" + os.path.basename(path)[len("light_"):-len(".onnx")]
        if pattern and pattern not in name:
            continue
        model = onnx.load(path)
        inits = {i.name for i in model.graph.initializer}
        inputs = [Runner.generate_dummy_data(i, seed=0, name=name[5:], random=False)
                  for i in model.graph.input if i.name not in inits]
        expected = []
        for k in range(len(model.graph.output)):
            with open(path[:-5] + f"_output_{k}.pb", "rb") as f:
                proto = onnx.TensorProto()
                proto.ParseFromString(f.read())
                expected.append(onnx.numpy_helper.to_array(proto))
        ops = tuple(sorted({n.op_type for n in model.graph.node}))
        yield OnnxCase(name, ops, model, inputs, expected, 1e-3, 1e-5)


def run_case(case: OnnxCase) -> tuple[str, str]:
    """Run one case on the current backend: (outcome, reason)."""
    from omnitensor import dtypes
    from omnitensor.errors import DTypeError, UnsupportedError
    from omnitensor.onnx.model import OnnxModel

    for array in case.inputs:
        if not isinstance(array, np.ndarray):
            return "unsupported", f"an input is a {type(array).__name__} (sequence/optional)"
        try:
            dtypes.as_dtype(array.dtype)
        except DTypeError:
            return "unsupported", f"an input has dtype {array.dtype}"

    try:
        model = OnnxModel(case.model, source=case.name)
    except UnsupportedError as exc:
        return "unsupported", str(exc).splitlines()[1].strip() if "\n" in str(exc) else str(exc)
    except Exception as exc:  # noqa: BLE001 - a load error other than "unsupported" fails
        return "fail", f"load: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    try:
        outs = model(*case.inputs)
        got = [o.numpy() for o in outs]
    except UnsupportedError as exc:  # a data-dependent shape found while tracing
        return "unsupported", str(exc)
    except Exception as exc:  # noqa: BLE001 - any other error is a failure of this test
        return "fail", f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    for i, (g, e) in enumerate(zip(got, case.expected, strict=False)):
        e = np.asarray(e)
        if g.shape != e.shape:
            return "fail", f"output {i}: shape {g.shape}, expected {e.shape}"
        if g.dtype != e.dtype:
            return "fail", f"output {i}: dtype {g.dtype}, expected {e.dtype}"
        if e.dtype.kind in "fc" or e.dtype.name == "bfloat16":
            ok = np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=case.rtol,
                             atol=case.atol, equal_nan=True)
        else:
            ok = np.array_equal(g, e)
        if not ok:
            err = np.nanmax(np.abs(g.astype(np.float64) - e.astype(np.float64))) if g.size else 0
            return "fail", f"output {i}: values differ (max abs error {err:.3g})"
    if len(got) != len(case.expected):
        return "fail", f"{len(got)} outputs, expected {len(case.expected)}"
    return "pass", ""


def load_xfails(*paths: str) -> dict[str, str]:
    """Test name -> reason, from files of ``name  # reason`` lines (a reason is required)."""
    entries: dict[str, str] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                text = line.strip()
                if not text or text.startswith("#"):
                    continue
                name, _, reason = text.partition("#")
                if not reason.strip():
                    raise ValueError(f"{path}:{number}: {name.strip()} has no reason (write "
                                     "`name  # why it fails`)")
                entries[name.strip()] = reason.strip()
    return entries


def run_onnx_suite(backend: str, *, pattern: str | None = None, light: bool = True,
                   progress: Callable[[str, str], None] | None = None,
                   xfails: dict[str, str] | None = None) -> OnnxReport:
    """Run the node tests (and the light models) on `backend`; `xfails` marks known failures."""
    import omnitensor as ot

    report = OnnxReport()
    start = time.perf_counter()
    cases = list(node_cases(pattern))
    if light:
        cases += list(light_cases(pattern))
    with ot.use_backend(backend), np.errstate(all="ignore"):
        for case in cases:
            outcome, reason = run_case(case)
            report.outcomes[case.name] = (outcome, reason)
            report.ops[case.name] = case.ops
            if progress is not None:
                progress(case.name, outcome)
    report.seconds = time.perf_counter() - start
    report.apply_xfails(load_xfails(XFAILS) if xfails is None else xfails)
    return report
