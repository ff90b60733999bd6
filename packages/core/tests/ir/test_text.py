"""PTIR text: exact round trips of every attribute kind, canonical signatures, parse errors."""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnitensor import dtypes as dt
from omnitensor.errors import FormatError, OmnitensorError, ParseError
from omnitensor.ir import opdef as opdef_module
from omnitensor.ir.builder import Builder
from omnitensor.ir.opdef import OpView, Trait, all_ops, attribute, operand, primitive
from omnitensor.ir.program import Function, Input, Instruction, Role
from omnitensor.ir.text import READABLE_ELEMENTS, parse_function, print_function
from omnitensor.ir.types import QTensorType, TensorType, Value
from omnitensor.ir.verify import verify

F32 = TensorType((2, 3), dt.float32)


# --- test-only ops -----------------------------------------------------------------------------


@pytest.fixture
def probe_ops(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Register `_probe` (any attribute value), `_probe2` (two results) and `_qprobe` (quantized).

    They go into a copy of the registry that is dropped after the test, so no other test (the
    docs, the kernel completeness check) ever sees them.
    """
    all_ops()  # register the real families into the real registry first
    monkeypatch.setattr(opdef_module, "_REGISTRY", dict(opdef_module._REGISTRY))

    @primitive("_probe")
    class ProbeView(OpView):
        """Test op: returns `x`; `value` may be any attribute value."""

        x = operand()
        value = attribute()

        @staticmethod
        def infer(x: TensorType, *, value: Any) -> TensorType:
            return x

        @staticmethod
        def reference(x: Any, *, value: Any) -> Any:
            return x

    @primitive("_probe2", traits=Trait.MULTI_RESULT)
    class Probe2View(OpView):
        """Test op with two results: `x` and `x` as int32."""

        x = operand()
        k = attribute(default=1)

        @staticmethod
        def infer(x: TensorType, *, k: int) -> tuple[TensorType, TensorType]:
            return x, TensorType(x.shape, dt.int32)

        @staticmethod
        def reference(x: Any, *, k: int) -> Any:
            return x, x.astype(np.int32)

    @primitive("_qprobe", traits=Trait.QUANTIZED)
    class QProbeView(OpView):
        """Test op: the logical f32 type of a quantized operand."""

        w = operand(quantized=True)

        @staticmethod
        def infer(w: QTensorType) -> TensorType:
            return TensorType(w.logical_shape, dt.float32)

        @staticmethod
        def reference(w: Any) -> Any:
            raise NotImplementedError

    yield


def _probe_fn(value: Any) -> Function:
    b = Builder()
    x = b.input(F32, Role.PARAMETER, "w")
    y = b.emit("_probe", x, value=value)
    return b.build([y])


def _same(a: Any, b: Any) -> bool:
    """Exact equality of attribute values: types, -0.0, NaN, array dtype/shape/bits."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind == "f" or a.dtype == ml_dtypes.bfloat16:
            wide_a, wide_b = a.astype(np.float64), b.astype(np.float64)
            nan = np.isnan(wide_a)
            return bool(
                np.array_equal(nan, np.isnan(wide_b))
                and np.array_equal(np.signbit(wide_a[~nan]), np.signbit(wide_b[~nan]))
                and np.array_equal(wide_a[~nan], wide_b[~nan])
            )
        return bool(a.tobytes() == b.tobytes())
    if isinstance(a, Function):
        return print_function(a) == print_function(b)
    return bool(a == b)


def _round_trip(fn: Function) -> Function:
    text = print_function(fn)
    parsed = parse_function(text)
    assert print_function(parsed) == text
    assert print_function(parsed, canonical=True) == print_function(fn, canonical=True)
    assert parsed.signature() == fn.signature()
    verify(parsed)
    return parsed


# --- attribute values --------------------------------------------------------------------------

_SPECIAL = [0.0, -0.0, 1.5, -2.25, math.inf, -math.inf, math.nan, 1e-8, 65504.0, 3.0e38]


def _arrays() -> list[np.ndarray[Any, Any]]:
    out: list[np.ndarray[Any, Any]] = []
    for d in dt.ALL:
        if d.is_floating:
            with np.errstate(over="ignore"):  # 3e38 is inf in f16/bf16: that is the point
                out.append(np.array(_SPECIAL, dtype=np.float64).astype(d.np).reshape(2, 5))
            out.append(np.array(0.1, dtype=np.float64).astype(d.np))  # 0-d, inexact
            out.append(np.linspace(-3, 3, 100).astype(d.np))  # large: hex bytes
        elif d.is_bool:
            out.append(np.array([[True, False, True]]))
            out.append(np.ones(READABLE_ELEMENTS + 1, dtype=bool))
        else:
            info = np.iinfo(d.np)
            out.append(np.array([info.min, 0, 1, info.max], dtype=d.np))
            out.append(np.arange(READABLE_ELEMENTS + 7, dtype=d.np).reshape(-1, 1))
        out.append(np.zeros((2, 0, 3), dtype=d.np))
    return out


ATTR_VALUES: list[Any] = [
    0,
    -7,
    2**70,
    True,
    False,
    None,
    0.0,
    -0.0,
    0.1,
    -1e-300,
    5e-324,
    1e300,
    1.0e16,
    math.inf,
    -math.inf,
    math.nan,
    "",
    "plain",
    'quote " and \\ backslash',
    "new\nline\ttab",
    "unicode ü ∑ 😀",
    *dt.ALL,
    TensorType((), dt.bfloat16),
    TensorType((0, 4), dt.uint8),
    QTensorType("q8_0", (4, 32)),
    QTensorType("q4_k", (256,)),
    (),
    (1,),
    (1, 2, 3),
    (1, (2.5, ("a", None)), dt.float16, -0.0),
    ((), ((),)),
    *_arrays(),
]


@pytest.mark.usefixtures("probe_ops")
@pytest.mark.parametrize("value", ATTR_VALUES, ids=lambda v: type(v).__name__)
def test_attribute_value_round_trips(value: Any) -> None:
    parsed = _round_trip(_probe_fn(value))
    assert _same(parsed.body[0].attrs["value"], value)


@pytest.mark.usefixtures("probe_ops")
def test_small_arrays_print_readably() -> None:
    array = np.array([[1.0, -0.0], [math.nan, -math.inf]], dtype=ml_dtypes.bfloat16)
    text = print_function(_probe_fn(array))
    assert "dense<bf16[2,2]>[[1.0, -0.0], [nan, -inf]]" in text
    assert "dense<i32[]>7" in print_function(_probe_fn(np.array(7, dtype=np.int32)))


@pytest.mark.usefixtures("probe_ops")
def test_distinct_values_print_differently() -> None:
    texts = {print_function(_probe_fn(v), canonical=True) for v in (1, 1.0, True, "1", (1,))}
    assert len(texts) == 5
    assert _probe_fn(0.0).signature() != _probe_fn(-0.0).signature()


@pytest.mark.usefixtures("probe_ops")
def test_unprintable_attribute_value() -> None:
    with pytest.raises(OmnitensorError, match="cannot print an attribute value of type object"):
        print_function(_probe_fn(object()))


@pytest.mark.usefixtures("probe_ops")
def test_list_attribute_prints_as_tuple() -> None:
    fn = _probe_fn((1, 2))
    fn.body[0].attrs["value"] = [1, 2]
    assert parse_function(print_function(fn)).body[0].attrs["value"] == (1, 2)


# --- functions ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("probe_ops")
def test_hand_written_program_round_trips() -> None:
    text = (
        (
            'func @main(%0: f32[2,3] param "w", %1: i32[] data, %2: q8_0[4,32] state "k\\"v") '
            "-> (f32[2,3], i32[2,3]) {\n"
        )
        + """\
  %3 = add(%0, %0) : f32[2,3]
  %4, %5 = _probe2(%3) {k=2} : f32[2,3], i32[2,3]
  %6 = _qprobe(%2) : f32[4,32]
  return %4, %5
}"""
    )
    fn = parse_function(text)
    assert print_function(fn) == text
    assert [i.role for i in fn.inputs] == [Role.PARAMETER, Role.DATA, Role.STATE]
    assert [i.name for i in fn.inputs] == ["w", "", 'k"v']
    assert fn.inputs[2].value.type == QTensorType("q8_0", (4, 32))
    assert [v.id for v in fn.body[1].results] == [4, 5]
    assert fn.body[1].attrs == {"k": 2}
    _round_trip(fn)


@pytest.mark.usefixtures("probe_ops")
def test_defaults_are_filled_and_comments_ignored() -> None:
    fn = parse_function(
        "// a comment\nfunc @f(%0: f32[2] data) -> (f32[2]) {\n"
        "  %1, %2 = _probe2(%0) : f32[2], i32[2]  // k defaults to 1\n  return %1\n}"
    )
    assert fn.body[0].attrs == {"k": 1}
    assert "{k=1}" in print_function(fn)


def test_ids_are_kept() -> None:
    x = Value(10, F32)
    y, z = Value(3, F32), Value(42, F32)
    body = [Instruction(7, "exp", [x], {}, [y]), Instruction(0, "neg", [y], {}, [z])]
    fn = Function("odd.name", [Input(x)], body, [z, x])
    text = print_function(fn)
    assert "%3 = exp(%10) : f32[2,3] #7" in text
    assert "%42 = neg(%3) : f32[2,3] #0" in text
    parsed = _round_trip(fn)
    assert [i.id for i in parsed.body] == [7, 0]
    assert [v.id for v in parsed.outputs] == [42, 10]
    assert parsed.name == "odd.name"
    canonical = print_function(fn, canonical=True)
    assert "#" not in canonical and "%1 = exp(%0)" in canonical and "return %2, %0" in canonical


def test_odd_function_name_and_empty_function() -> None:
    fn = Function("has space", [], [], [])
    assert print_function(fn) == 'func @"has space"() -> () {\n  return\n}'
    assert parse_function(print_function(fn)).name == "has space"


def test_custom_call_prints_nested_decomposition() -> None:
    if "custom_call" not in all_ops():
        pytest.skip("custom_call is not declared")
    inner = Builder("decomp")
    a = inner.input(F32, name="a")
    decomposition = inner.build([inner.emit("exp", a), inner.emit("neg", a)])
    b = Builder()
    x = b.input(F32, Role.DATA, "x")
    results = b.emit_multi("custom_call", x, name="fused_exp_neg", decomposition=decomposition)
    fn = b.build([b.emit("add", *results)])
    text = print_function(fn)
    assert 'decomposition=func @decomp(%0: f32[2,3] data "a")' in text
    assert "\n    %1 = exp(%0) : f32[2,3]\n" in text  # nested body is indented one more level
    parsed = _round_trip(fn)
    nested = parsed.body[0].attrs["decomposition"]
    assert isinstance(nested, Function) and print_function(nested) == print_function(decomposition)
    canonical = print_function(fn, canonical=True)
    assert '"a"' not in canonical and "@decomp" not in canonical


def test_constant_round_trips_with_builder() -> None:
    if "constant" not in all_ops():
        pytest.skip("constant is not declared")
    b = Builder()
    c = b.constant(np.array([1.0, math.nan, -0.0], dtype=np.float16))
    fn = b.build([b.emit("add", c, c)])
    assert "constant() {value=dense<f16[3]>[1.0, nan, -0.0]} : f16[3]" in print_function(fn)
    _round_trip(fn)


# --- canonical form and signature --------------------------------------------------------------


def _capture(name: str, scale: float, input_name: str, role: Role = Role.DATA) -> Function:
    b = Builder(name)
    x = b.input(F32, role, input_name)
    y = b.emit("mul", x, b.emit("exp", x))
    if "constant" in all_ops():
        y = b.emit("add", y, b.constant(np.full((2, 3), scale, dtype=np.float32)))
    return b.build([b.emit("convert", y, dtype=dt.float16)])


def test_signature_is_structural() -> None:
    first, second = _capture("main", 1.0, "x"), _capture("other", 1.0, "input_0")
    assert print_function(first) != print_function(second)
    assert first.signature() == second.signature()
    assert first.signature() != _capture("main", 1.0, "x", Role.PARAMETER).signature()
    if "constant" in all_ops():
        assert first.signature() != _capture("main", 2.0, "x").signature()
    changed = first.copy()
    changed.body[-1].attrs["dtype"] = dt.bfloat16
    assert changed.signature() != first.signature()


def test_signature_ignores_ids() -> None:
    fn = _capture("main", 1.0, "x")
    mapping = {v: Value(v.id * 7 + 100, v.type) for v in fn.input_values}
    body = []
    for n, inst in enumerate(fn.body):
        results = [Value(r.id * 7 + 100, r.type) for r in inst.results]
        mapping.update(zip(inst.results, results, strict=True))
        body.append(
            Instruction(
                50 - n, inst.op, [mapping[v] for v in inst.operands], dict(inst.attrs), results
            )
        )
    inputs = [Input(mapping[i.value], i.role, i.name) for i in fn.inputs]
    moved = Function(fn.name, inputs, body, [mapping[v] for v in fn.outputs])
    assert print_function(moved) != print_function(fn)
    assert moved.signature() == fn.signature()
    _round_trip(moved)


# --- parse errors ------------------------------------------------------------------------------

_HEAD = "func @f(%0: f32[2] data) -> (f32[2]) {\n"


def _parse_error(text: str) -> ParseError:
    with pytest.raises(ParseError) as info:
        parse_function(text)
    assert isinstance(info.value, FormatError)
    assert info.value.offset is not None and 0 <= info.value.offset <= len(text)
    return info.value


@pytest.mark.parametrize(
    ("body", "line", "column", "message"),
    [
        (
            "  %1 = ad(%0, %0) : f32[2]\n  return %1\n}",
            2,
            8,
            r"unknown op 'ad'; did you mean .*add",
        ),
        ("  %1 = add(%0, %9) : f32[2]\n  return %1\n}", 2, 16, r"%9 is used before"),
        ("  %1 = add(%0, %0) : f32[3]\n  return %1\n}", 2, 20, r"result types differ"),
        ("  %1 = add(%0, %0) : f32[2], f32[2]\n  return %1\n}", 2, 20, r"result types differ"),
        ("  %1 = add(%0) : f32[2]\n  return %1\n}", 2, 8, r"wrong number of operands"),
        ("  %0 = exp(%0) : f32[2]\n  return %0\n}", 2, 3, r"%0 is defined twice"),
        ("  %1 = exp(%0) : x32[2]\n  return %1\n}", 2, 18, r"unknown element type 'x32'"),
        ("  %1 = exp(%0) {dtype=f32} : f32[2]\n  return %1\n}", 2, 8, r"unknown attribute"),
        ("  %1 = convert(%0) : f32[2]\n  return %1\n}", 2, 8, r"missing required attribute"),
        (
            "  %1 = convert(%0) {dtype=f99} : f32[2]\n  return %1\n}",
            2,
            27,
            r"unknown attribute value 'f99'",
        ),
        ("  %1 = exp(%0) : f32[2] $\n  return %1\n}", 2, 25, r"unexpected character '\$'"),
        ("  %1 = exp(%0) : f32[2]\n  return %1\n} extra", 4, 3, r"unexpected text after"),
        ("  %1 = exp(%0) : f32[2]\n", 3, 1, r"expected an op name \(got end of text\)"),
        (
            "  %1 = exp(%0) : f32[2]\n  %2 = exp(%1) : f32[2] #0\n  return %2\n}",
            3,
            8,
            r"instruction id #0 is used twice",
        ),
        (
            "  %1 = convert(%0) {dtype=i32} : i32[2]\n  return %1\n}",
            3,
            3,
            r"return types differ from the signature",
        ),
    ],
)
def test_parse_errors_name_line_and_column(body: str, line: int, column: int, message: str) -> None:
    error = _parse_error(_HEAD + body)
    assert re.search(message, str(error)), str(error)
    assert f"line {line}, column {column}:" in str(error)
    assert (error.fields["line"], error.fields["column"]) == (line, column)


@pytest.mark.usefixtures("probe_ops")
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("dense<i8[2]>[1, 300]", "out of range"),
        ("dense<f32[2]>[1.0]", "wrong number of elements"),
        ("dense<f32[2]>[1.0, true]", "expected a float32 element"),
        ('dense<f32[2]>"00"', "wrong byte count"),
        ('dense<f32[1]>"zz"', "bad hex bytes"),
        ("q8_0[4,31]", "multiple of 32"),
        ("dense<q8_0[1,32]>[]", "dense type"),
        ('"bad \\q escape"', "bad string literal"),
    ],
)
def test_bad_attribute_values(value: str, message: str) -> None:
    text = _HEAD.replace("f32[2]", "f32[2,3]") + f"  %1 = _probe(%0) {{value={value}}} : "
    text += "f32[2,3]\n  return %1\n}"
    error = _parse_error(text)
    assert message in str(error)
    assert "line 2, column" in str(error)


def test_bad_role() -> None:
    error = _parse_error("func @f(%0: f32[2] weights) -> () {\n  return\n}")
    assert "unknown role 'weights'" in str(error) and "line 1, column 20" in str(error)


# --- random programs ---------------------------------------------------------------------------

_DTYPES = [dt.float32, dt.float16, dt.bfloat16, dt.float64, dt.int32, dt.int8, dt.uint8, dt.bool_]


def _elementwise_ops() -> list[str]:
    """Elementwise ops whose only attribute (if any) is `dtype`."""
    return [
        op.name
        for op in all_ops().values()
        if op.has(Trait.ELEMENTWISE)
        and all(a.name == "dtype" for a in op.attributes)
        and not any(s.variadic or s.quantized for s in op.operands)
    ]


@st.composite
def _constant(draw: st.DrawFn, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    dtype = draw(st.sampled_from(_DTYPES))
    size = math.prod(shape)
    if dtype.is_floating:
        values = draw(
            st.lists(st.floats(width=32 if dtype.bits == 32 else 64), min_size=size, max_size=size)
        )
        with np.errstate(over="ignore"):
            return np.array(values, dtype=np.float64).astype(dtype.np).reshape(shape)
    if dtype.is_bool:
        return np.array(
            draw(st.lists(st.booleans(), min_size=size, max_size=size)), dtype=bool
        ).reshape(shape)
    info = np.iinfo(dtype.np)
    values = draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=size, max_size=size))
    return np.array(values, dtype=dtype.np).reshape(shape)


@st.composite
def programs(draw: st.DrawFn) -> Function:
    """Random well-typed programs over one shape, from the elementwise ops that exist."""
    ops = _elementwise_ops()
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    b = Builder(draw(st.sampled_from(["main", "step", "blk.0"])))
    pool = [
        b.input(
            TensorType(shape, draw(st.sampled_from(_DTYPES))),
            draw(st.sampled_from(Role)),
            draw(st.text(max_size=4)),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    for _ in range(draw(st.integers(0, 10))):
        if "constant" in all_ops() and draw(st.integers(0, 5)) == 0:
            pool.append(b.constant(draw(_constant(shape))))
            continue
        name = draw(st.sampled_from(ops))
        opdef = all_ops()[name]
        first = draw(st.sampled_from(pool))
        same = [v for v in pool if v.type == first.type]
        operands = [first] + [draw(st.sampled_from(same)) for _ in opdef.operands[1:]]
        if name == "select":
            preds = [v for v in pool if v.type == TensorType(shape, dt.bool_)]
            if not preds:
                continue
            operands = [draw(st.sampled_from(preds)), first, draw(st.sampled_from(same))]
        attrs = {a.name: draw(st.sampled_from(_DTYPES)) for a in opdef.attributes}
        try:
            pool.extend(b.emit_multi(name, *operands, **attrs))
        except OmnitensorError:
            continue  # this op does not take these dtypes: draw another
    outputs = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
    return b.build(outputs)


def _relabel(fn: Function, value_ids: list[int], inst_ids: list[int]) -> Function:
    mapping: dict[Value, Value] = {}
    for value in fn.input_values + [r for inst in fn.body for r in inst.results]:
        mapping[value] = Value(value_ids[len(mapping)], value.type)
    body = [
        Instruction(
            inst_ids[n],
            inst.op,
            [mapping[v] for v in inst.operands],
            dict(inst.attrs),
            [mapping[v] for v in inst.results],
        )
        for n, inst in enumerate(fn.body)
    ]
    inputs = [Input(mapping[i.value], i.role, i.name) for i in fn.inputs]
    return Function(fn.name, inputs, body, [mapping[v] for v in fn.outputs])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fn=programs(), data=st.data())
def test_random_programs_round_trip(fn: Function, data: st.DataObject) -> None:
    verify(fn)
    parsed = _round_trip(fn)
    assert len(parsed.body) == len(fn.body)
    n_values = len(fn.inputs) + sum(len(i.results) for i in fn.body)
    value_ids = data.draw(
        st.lists(st.integers(0, 10_000), min_size=n_values, max_size=n_values, unique=True)
    )
    inst_ids = data.draw(st.permutations(range(len(fn.body) + 5)))[: len(fn.body)]
    moved = _relabel(fn, value_ids, list(inst_ids))
    verify(moved)
    _round_trip(moved)
    assert moved.signature() == fn.signature()


# --- robustness --------------------------------------------------------------------------------

_CORPUS = (
    _HEAD + "  %1 = convert(%0) {dtype=i32} : i32[2]\n  %2 = exp(%0) : f32[2] #5\n  return %2\n}"
)


@settings(max_examples=300, deadline=None)
@given(
    position=st.integers(0, len(_CORPUS)),
    cut=st.integers(0, 4),
    insert=st.text(alphabet='%#@()[]{}<>,:=-"\\ \n0123456789.eafix_', max_size=4),
)
def test_mangled_text_raises_only_parse_errors(position: int, cut: int, insert: str) -> None:
    text = _CORPUS[:position] + insert + _CORPUS[position + cut :]
    try:
        fn = parse_function(text)
    except ParseError as error:
        assert error.offset is not None and "line " in str(error)
        return
    assert parse_function(print_function(fn)) is not None


def test_deep_nesting_is_a_parse_error() -> None:
    text = _HEAD + "  %1 = exp(%0) {x=" + "(" * 5000 + "} : f32[2]\n  return %1\n}"
    assert "nesting is too deep" in str(_parse_error(text))


def test_every_registered_op_with_builder_samples_round_trips() -> None:
    """Ops of other families, when declared: their attributes must survive the text form."""
    samples: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
        ("reshape", (2, 3), {"shape": (3, 2)}),
        ("transpose", (2, 3), {"perm": (1, 0)}),
        ("broadcast_in_dim", (3,), {"shape": (2, 3), "dims": (1,)}),
        ("slice", (4, 3), {"start": (0, 1), "limit": (4, 3), "stride": (2, 1)}),
        ("reduce_sum", (2, 3), {"axes": (1,)}),
        ("cumsum", (2, 3), {"axis": 0, "reverse": True}),
        ("argmax", (2, 3), {"axis": -1}),
    ]
    tried = 0
    for op, shape, attrs in samples:
        if op not in all_ops():
            continue
        b = Builder()
        x = b.input(TensorType(shape, dt.float32))
        fn = b.build(list(b.emit_multi(op, x, **attrs)))
        _round_trip(fn)
        tried += 1
    if "iota" in all_ops():
        b = Builder()
        _round_trip(b.build([b.emit("iota", shape=(2, 3), dimension=1, dtype=dt.int32)]))
    assert tried or not all_ops().keys() & {s[0] for s in samples}
