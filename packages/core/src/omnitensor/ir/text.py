"""PTIR text: `print_function` and `parse_function`, which round-trip exactly.

The form is MLIR-like::

    func @main(%0: f32[2,3] param "w", %1: i32[] data) -> (f32[2,2]) {
      %2 = add(%0, %0) : f32[2,3]
      %3, %4 = top_k(%2) {k=2} : f32[2,2], i32[2,2] #7
      return %3
    }

Values print as ``%id``; an instruction whose id differs from its position in the body carries a
trailing ``#id``. Attribute values are ints, floats (``nan``, ``inf``, ``-0.0`` exact), ``true`` /
``false``, ``none``, ``"strings"``, dtypes (``f32``), types (``f32[2]``, ``q8_0[4,32]``), tuples
``(1, 2)``, dense arrays ``dense<f32[2]>[1.0, 2.5]`` (large ones as little-endian hex bytes) and
nested functions (``func @decomposition(...) {...}``). ``//`` starts a comment. The parser
re-infers every instruction with the op's own rule and checks the printed result types.
Checking whole functions (SSA order, attribute completeness) is `verify`'s business, not this
module's.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from ..dtypes import ALL, DType, as_dtype
from ..errors import DTypeError, OmnitensorError, ParseError
from .builder import infer_types
from .opdef import OpDef, get_op
from .program import Function, Input, Instruction, Role
from .types import QTENSOR_FORMATS, QTensorType, TensorType, Type, Value

__all__ = ["format_attr_value", "format_type", "parse_function", "print_function"]

Array = np.ndarray[Any, Any]

# Arrays up to this many elements print their values; larger ones print exact hex bytes.
READABLE_ELEMENTS: Final = 32

_DTYPES: Final[dict[str, DType]] = {d.short: d for d in ALL} | {d.name: d for d in ALL}
#: IR text spelling of a quantized element type -> its format (`QuantFormat.text`).
_QTYPES: Final[dict[str, str]] = {f.text: name for name, f in QTENSOR_FORMATS.items()}
_ROLES: Final[dict[str, Role]] = {r.value: r for r in Role}
# What a rule may raise, besides OmnitensorError, when handed attributes of the wrong kind.
_RULE_ERRORS: Final = (TypeError, ValueError, IndexError, KeyError, AttributeError)
_NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*\Z")


# --- printing ----------------------------------------------------------------------------------


def format_type(type: Type) -> str:
    """``f32[2,3]`` for a TensorType, ``q8_0[4,32]`` for a QTensorType."""
    return str(type)


def _format_float(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    # NOTE: repr of a float64 round-trips exactly, and every f16/bf16/f32 value is a float64.
    return repr(float(x))


def _format_name(name: str) -> str:
    return name if _NAME_RE.match(name) else json.dumps(name)


def _format_elements(values: Any) -> str:
    if isinstance(values, list):
        return "[" + ", ".join(_format_elements(v) for v in values) + "]"
    if isinstance(values, bool):
        return "true" if values else "false"
    if isinstance(values, float):
        return _format_float(values)
    return str(values)


def _format_dense(array: Array) -> str:
    try:
        dtype = as_dtype(array.dtype)
    except DTypeError as exc:
        raise OmnitensorError(f"text: cannot print an array of dtype {array.dtype}") from exc
    head = f"dense<{TensorType(array.shape, dtype)}>"
    if array.size > READABLE_ELEMENTS:
        little = np.ascontiguousarray(array, dtype=dtype.np.newbyteorder("<"))
        return f'{head}"{little.tobytes().hex()}"'
    if dtype.is_floating:
        values = array.astype(np.float64).tolist()
    else:
        values = array.tolist()
    return head + _format_elements(values)


def format_attr_value(value: Any, *, canonical: bool = False, indent: str = "") -> str:
    """The PTIR text of one attribute value (also used by the op docs for defaults).

    Args:
        value: an attribute value (see the module docstring for the kinds).
        canonical: print nested functions canonically.
        indent: indentation of the line the value sits on (for nested functions).

    Raises:
        OmnitensorError: for a value of a kind PTIR text cannot represent.
    """
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _format_float(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, DType):
        return value.short
    if isinstance(value, (TensorType, QTensorType)):
        return format_type(value)
    if isinstance(value, (tuple, list)):
        items = [format_attr_value(v, canonical=canonical, indent=indent) for v in value]
        return "(" + items[0] + ",)" if len(items) == 1 else "(" + ", ".join(items) + ")"
    if isinstance(value, np.ndarray):
        return _format_dense(value)
    if isinstance(value, np.generic):
        return format_attr_value(value.item(), canonical=canonical, indent=indent)
    if isinstance(value, np.dtype):
        return as_dtype(value).short
    if isinstance(value, Function):
        return _Printer(canonical).function(value, indent)
    raise OmnitensorError(
        f"text: cannot print an attribute value of type {type(value).__name__} (got {value!r})"
    )


def _attr_order(inst: Instruction) -> list[str]:
    """Declared attribute order (stable text for signatures), then any undeclared names sorted."""
    try:
        declared = [a.name for a in get_op(inst.op).attributes]
    except OmnitensorError:
        declared = []
    order = [name for name in declared if name in inst.attrs]
    return order + sorted(set(inst.attrs) - set(order))


class _Printer:
    """Prints one function; in canonical mode numbers values in order of definition."""

    def __init__(self, canonical: bool) -> None:
        self.canonical = canonical
        self.numbers: dict[Value, int] = {}

    def value(self, value: Value) -> str:
        if not self.canonical:
            return f"%{value.id}"
        # A value that was never defined (a broken function) still gets a deterministic number.
        number = self.numbers.setdefault(value, len(self.numbers))
        return f"%{number}"

    def function(self, fn: Function, indent: str = "") -> str:
        name = "fn" if self.canonical else fn.name
        params = []
        for spec in fn.inputs:
            text = f"{self.value(spec.value)}: {format_type(spec.value.type)} {spec.role.value}"
            if spec.name and not self.canonical:
                text += f" {json.dumps(spec.name)}"
            params.append(text)
        results = ", ".join(format_type(v.type) for v in fn.outputs)
        lines = [f"func @{_format_name(name)}({', '.join(params)}) -> ({results}) {{"]
        inner = indent + "  "
        for position, inst in enumerate(fn.body):
            lines.append(inner + self.instruction(inst, position, inner))
        returned = ", ".join(self.value(v) for v in fn.outputs)
        lines.append(f"{inner}return {returned}".rstrip())
        lines.append(indent + "}")
        return "\n".join(lines)

    def instruction(self, inst: Instruction, position: int, indent: str) -> str:
        operands = ", ".join(self.value(v) for v in inst.operands)
        text = f"{inst.op}({operands})"
        if inst.results:
            text = ", ".join(self.value(v) for v in inst.results) + " = " + text
        if inst.attrs:
            attrs = [
                f"{name}="
                + format_attr_value(inst.attrs[name], canonical=self.canonical, indent=indent)
                for name in _attr_order(inst)
            ]
            text += " {" + ", ".join(attrs) + "}"
        types = ", ".join(format_type(v.type) for v in inst.results) if inst.results else "()"
        text += f" : {types}"
        if not self.canonical and inst.id != position:
            text += f" #{inst.id}"
        return text


def print_function(fn: Function, *, canonical: bool = False) -> str:
    """The PTIR text of `fn` (no trailing newline).

    Args:
        fn: the function.
        canonical: renumber values in order of definition, drop instruction ids, input names and
            the function's name, so that two captures of one computation print identically
            (`Function.signature` hashes this form).

    Returns:
        Text that `parse_function` turns back into an equal function.
    """
    return _Printer(canonical).function(fn)


# --- lexing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Token:
    kind: str  # value, int, float, string, ident, punct, eof
    text: str
    offset: int


_TOKEN_RE: Final = re.compile(
    r"""
    (?P<skip>\s+|//[^\n]*)
    | (?P<arrow>->)
    | (?P<value>%\d+)
    | (?P<float>-?\d+(?:\.\d*)?[eE][+-]?\d+|-?\d+\.\d*|-(?:inf|nan)(?![A-Za-z0-9_]))
    | (?P<int>-?\d+)
    | (?P<string>"(?:[^"\\\n]|\\.)*")
    | (?P<ident>[A-Za-z_][A-Za-z0-9_.$]*)
    | (?P<punct>[(){}\[\]<>,:=#@])
    """,
    re.VERBOSE,
)


def _location(source: str, offset: int) -> tuple[int, int]:
    line = source.count("\n", 0, offset) + 1
    column = offset - (source.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _error(source: str, offset: int, problem: str) -> ParseError:
    line, column = _location(source, offset)
    return ParseError(
        f"ptir text: line {line}, column {column}: {problem}",
        offset=offset,
        line=line,
        column=column,
    )


def _tokenize(source: str) -> list[_Token]:
    tokens: list[_Token] = []
    offset = 0
    while offset < len(source):
        match = _TOKEN_RE.match(source, offset)
        if match is None:
            raise _error(source, offset, f"unexpected character {source[offset]!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "skip":
            tokens.append(_Token(kind, match.group(), offset))
        offset = match.end()
    tokens.append(_Token("eof", "", len(source)))
    return tokens


# --- parsing -----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = _tokenize(source)
        self.pos = 0

    # token helpers

    def peek(self, ahead: int = 0) -> _Token:
        return self.tokens[min(self.pos + ahead, len(self.tokens) - 1)]

    def advance(self) -> _Token:
        token = self.peek()
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def error(self, token: _Token, problem: str) -> ParseError:
        return _error(self.source, token.offset, problem)

    def at(self, text: str) -> bool:
        token = self.peek()
        return token.kind in ("punct", "arrow", "ident") and token.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.advance()
            return True
        return False

    def expect(self, text: str) -> _Token:
        if not self.at(text):
            raise self.error(self.peek(), f"expected {text!r} (got {self._describe(self.peek())})")
        return self.advance()

    def expect_kind(self, kind: str, what: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            raise self.error(token, f"expected {what} (got {self._describe(token)})")
        return self.advance()

    @staticmethod
    def _describe(token: _Token) -> str:
        return "end of text" if token.kind == "eof" else repr(token.text)

    def comma_list(self, close: str, item: Callable[[], Any]) -> list[Any]:
        """Items separated by commas up to `close` (consumed); a trailing comma is allowed."""
        items: list[Any] = []
        while not self.accept(close):
            items.append(item())
            if not self.accept(","):
                self.expect(close)
                break
        return items

    # types

    def type(self) -> Type:
        token = self.expect_kind("ident", "a type such as f32[2,3]")
        self.expect("[")
        dims = self.comma_list("]", self.dimension)
        if token.text in _DTYPES:
            return TensorType(tuple(dims), _DTYPES[token.text])
        if token.text in _QTYPES:
            try:
                return QTensorType(_QTYPES[token.text], tuple(dims))
            except OmnitensorError as exc:
                raise self.error(token, exc.message) from exc
        known = ", ".join([d.short for d in ALL] + list(_QTYPES))
        raise self.error(token, f"unknown element type {token.text!r} (expected one of {known})")

    def dimension(self) -> int:
        token = self.expect_kind("int", "a dimension size")
        if token.text.startswith("-"):
            raise self.error(token, f"negative dimension (got {token.text})")
        return int(token.text)

    # attribute values

    def attr_value(self) -> Any:
        token = self.peek()
        if token.kind == "int":
            self.advance()
            return int(token.text)
        if token.kind == "float":
            self.advance()
            return float(token.text)
        if token.kind == "string":
            return self.string()
        if self.accept("("):
            return tuple(self.comma_list(")", self.attr_value))
        if token.kind != "ident":
            raise self.error(token, f"expected an attribute value (got {self._describe(token)})")
        keywords = {"true": True, "false": False, "none": None, "inf": math.inf, "nan": math.nan}
        if token.text in keywords:
            self.advance()
            return keywords[token.text]
        if token.text == "func":
            return self.function()
        if token.text == "dense" and self.peek(1).text == "<":
            return self.dense()
        if self.peek(1).text == "[":
            return self.type()
        if token.text in _DTYPES:
            self.advance()
            return _DTYPES[token.text]
        raise self.error(token, f"unknown attribute value {token.text!r}")

    def string(self) -> str:
        token = self.expect_kind("string", "a string")
        try:
            text: str = json.loads(token.text)
        except ValueError as exc:
            raise self.error(token, f"bad string literal ({exc})") from exc
        return text

    def dense(self) -> Array:
        self.expect("dense")
        self.expect("<")
        type_token = self.peek()
        type = self.type()
        self.expect(">")
        if not isinstance(type, TensorType):
            raise self.error(type_token, f"dense arrays need a dense type (got {type})")
        np_dtype = type.dtype.np
        if self.peek().kind == "string":
            token = self.peek()
            try:
                raw = bytes.fromhex(self.string())
            except ValueError as exc:
                raise self.error(token, f"bad hex bytes ({exc})") from exc
            if len(raw) != type.nbytes:
                raise self.error(
                    token,
                    f"dense {type}: wrong byte count (got {len(raw)}, expected {type.nbytes})",
                )
            little = np.frombuffer(raw, dtype=np_dtype.newbyteorder("<"))
            return little.astype(np_dtype).reshape(type.shape)
        token = self.peek()
        flat: list[Any] = []
        self.elements(type.shape, type.dtype, flat)
        try:
            if type.dtype.is_floating:
                array = np.array(flat, dtype=np.float64).astype(np_dtype)
            else:
                array = np.array(flat, dtype=np_dtype)
        except (OverflowError, ValueError) as exc:
            raise self.error(token, f"dense {type}: value out of range ({exc})") from exc
        return array.reshape(type.shape)

    def elements(self, shape: tuple[int, ...], dtype: DType, out: list[Any]) -> None:
        if not shape:
            out.append(self.scalar(dtype))
            return
        start = self.expect("[")
        items = self.comma_list("]", lambda: self.elements(shape[1:], dtype, out))
        if len(items) != shape[0]:
            raise self.error(
                start,
                f"dense array: wrong number of elements (got {len(items)}, expected {shape[0]})",
            )

    def scalar(self, dtype: DType) -> Any:
        token = self.advance()
        if dtype.is_bool and token.kind == "ident" and token.text in ("true", "false"):
            return token.text == "true"
        if dtype.is_integer and token.kind == "int":
            return int(token.text)
        if dtype.is_floating:
            if token.kind in ("int", "float"):
                return float(token.text)
            if token.kind == "ident" and token.text in ("inf", "nan"):
                return float(token.text)
        raise self.error(token, f"expected a {dtype.name} element (got {self._describe(token)})")

    # functions

    def function(self) -> Function:
        self.expect("func")
        self.expect("@")
        token = self.peek()
        name = self.string() if token.kind == "string" else self.expect_kind("ident", "a name").text
        scope: dict[int, Value] = {}
        self.expect("(")
        inputs = self.comma_list(")", lambda: self.input(scope))
        self.expect("->")
        self.expect("(")
        result_types = self.comma_list(")", self.type)
        self.expect("{")
        body: list[Instruction] = []
        inst_ids: set[int] = set()
        while not self.at("return"):
            body.append(self.instruction(scope, len(body), inst_ids))
        return_token = self.expect("return")
        outputs: list[Value] = []
        if not self.at("}"):
            outputs.append(self.use(scope))
            while self.accept(","):
                outputs.append(self.use(scope))
        self.expect("}")
        got = [v.type for v in outputs]
        if got != result_types:
            raise self.error(
                return_token,
                f"return types differ from the signature (got "
                f"({', '.join(map(str, got))}), expected ({', '.join(map(str, result_types))}))",
            )
        return Function(name, inputs, body, outputs)

    def define(self, scope: dict[int, Value], token: _Token, type: Type) -> Value:
        number = int(token.text[1:])
        if number in scope:
            raise self.error(token, f"value %{number} is defined twice")
        scope[number] = Value(number, type)
        return scope[number]

    def use(self, scope: dict[int, Value]) -> Value:
        token = self.expect_kind("value", "a value such as %0")
        number = int(token.text[1:])
        if number not in scope:
            raise self.error(token, f"value %{number} is used before it is defined")
        return scope[number]

    def input(self, scope: dict[int, Value]) -> Input:
        token = self.expect_kind("value", "an input such as %0")
        self.expect(":")
        type = self.type()
        role_token = self.expect_kind("ident", "a role (param, state or data)")
        if role_token.text not in _ROLES:
            raise self.error(
                role_token, f"unknown role {role_token.text!r} (expected param, state or data)"
            )
        name = self.string() if self.peek().kind == "string" else ""
        return Input(self.define(scope, token, type), _ROLES[role_token.text], name)

    def instruction(self, scope: dict[int, Value], position: int, ids: set[int]) -> Instruction:
        result_tokens: list[_Token] = []
        if self.peek().kind == "value":
            result_tokens.append(self.advance())
            while self.accept(","):
                result_tokens.append(self.expect_kind("value", "a result value"))
            self.expect("=")
        op_token = self.expect_kind("ident", "an op name")
        opdef = self.opdef(op_token)
        self.expect("(")
        operands = self.comma_list(")", lambda: self.use(scope))
        attrs: dict[str, Any] = {}
        if self.accept("{"):
            self.comma_list("}", lambda: self.attribute(attrs))
        colon = self.expect(":")
        if self.accept("("):
            self.expect(")")
            printed: list[Type] = []
        else:
            printed = [self.type()]
            while self.accept(","):
                printed.append(self.type())
        inst_id = position
        if self.accept("#"):
            id_token = self.expect_kind("int", "an instruction id")
            inst_id = int(id_token.text)
            if inst_id < 0:
                raise self.error(id_token, f"negative instruction id (got {inst_id})")
        if inst_id in ids:
            raise self.error(op_token, f"instruction id #{inst_id} is used twice")
        ids.add(inst_id)
        try:
            full = opdef.attr_defaults(attrs)
            inferred = infer_types(opdef, [v.type for v in operands], full)
        except OmnitensorError as exc:
            raise self.error(op_token, exc.message) from exc
        except _RULE_ERRORS as exc:
            # An op's rule fed an attribute of the wrong kind (``axes=1.5``) may fail in Python
            # before it can say so itself; in text that is still a parse error.
            raise self.error(op_token, f"{opdef.name}: attributes rejected ({exc!r})") from exc
        if list(inferred) != printed or len(result_tokens) != len(inferred):
            raise self.error(
                colon,
                f"{opdef.name}: result types differ from the op's rule (got "
                f"{len(result_tokens)} result(s) typed ({', '.join(map(str, printed))}), expected "
                f"({', '.join(map(str, inferred))}))",
            )
        results = [self.define(scope, t, ty) for t, ty in zip(result_tokens, inferred, strict=True)]
        return Instruction(inst_id, opdef.name, operands, full, results)

    def opdef(self, token: _Token) -> OpDef:
        try:
            return get_op(token.text)
        except OmnitensorError as exc:
            raise self.error(token, exc.message) from exc

    def attribute(self, attrs: dict[str, Any]) -> None:
        token = self.expect_kind("ident", "an attribute name")
        if token.text in attrs:
            raise self.error(token, f"attribute {token.text!r} is given twice")
        self.expect("=")
        attrs[token.text] = self.attr_value()


def parse_function(text: str) -> Function:
    """Parse PTIR text (as `print_function` writes it) into a `Function`.

    Every instruction is re-inferred with its op's rule; the printed result types must match.

    Args:
        text: one ``func`` definition.

    Returns:
        The function, with the printed value and instruction ids.

    Raises:
        ParseError: naming the line and column (and carrying ``offset``) of the first problem.
    """
    parser = _Parser(text)
    try:
        fn = parser.function()
    except RecursionError:
        raise parser.error(parser.peek(), "nesting is too deep") from None
    token = parser.peek()
    if token.kind != "eof":
        raise parser.error(token, f"unexpected text after the function ({token.text!r})")
    return fn
