"""A C-style expression printer: one table of elementwise templates, dialect hooks per language.

`CPrinter` writes the expression of every elementwise PTIR op from a handful of hooks (types,
literals, casts, math function names, integer wrap-around, ternaries). A kernel language is a
subclass overriding those hooks (`omnitensor.backend.codegen.cuda.CudaPrinter`,
`omnitensor.backend.codegen.wgsl.WgslPrinter`), the way tinygrad's renderers share one base.
Operands arrive as expressions in their compute type; results leave in the compute type of the
result (a dialect that computes narrow floats wide rounds them in `narrow`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Final

from omnitensor.dtypes import DType, bool_
from omnitensor.errors import UnsupportedError

__all__ = ["TEMPLATES", "CPrinter"]


class CPrinter:
    """The base printer: dialects override the hooks below; `expr` prints an op."""

    #: The language's name (in error messages).
    language: ClassVar[str] = "C"
    #: dtype name -> the element type a buffer stores.
    storage_types: ClassVar[Mapping[str, str]] = {}
    #: dtype name -> the type values are computed in.
    compute_types: ClassVar[Mapping[str, str]] = {}
    #: The compute types that are floating point.
    float_types: ClassVar[tuple[str, ...]] = ()
    #: The boolean compute type.
    bool_type: ClassVar[str] = "bool"
    #: dtype name -> format of a stored element as a compute value (absent: as it is).
    loads: ClassVar[Mapping[str, str]] = {}
    #: dtype name -> format of a compute value as the element stored.
    stores: ClassVar[Mapping[str, str]] = {}
    #: dtype name -> format of a compute value rounded to the dtype (an op's result).
    narrows: ClassVar[Mapping[str, str]] = {}
    #: float compute type -> format of a literal (of the Python float's repr).
    float_literals: ClassVar[Mapping[str, str]] = {}
    #: Format of an integer literal of type `ctype`.
    int_literal: ClassVar[str] = "({ctype}){value}"
    #: Operators of and/or/xor on booleans.
    bool_ops: ClassVar[Mapping[str, str]] = {"and": "&&", "or": "||", "xor": "!="}

    def __init__(self, backend: str) -> None:
        self.backend = backend

    # --- types ----------------------------------------------------------------------------------

    def _type(self, table: Mapping[str, str], dtype: DType) -> str:
        found = table.get(dtype.name)
        if found is None:
            raise UnsupportedError(f"{dtype.name} has no {self.language} type (backend "
                                   f"'{self.backend}')", dtype=dtype.name, backend=self.backend)
        return found

    def storage_type(self, dtype: DType) -> str:
        """The element type of a buffer holding `dtype`."""
        return self._type(self.storage_types, dtype)

    def compute_type(self, dtype: DType) -> str:
        """The type values of `dtype` are computed in."""
        return self._type(self.compute_types, dtype)

    def is_float(self, ctype: str) -> bool:
        """True for a floating-point compute type."""
        return ctype in self.float_types

    def load(self, dtype: DType, raw: str) -> str:
        """A stored element `raw` as a compute-type value."""
        return self.loads.get(dtype.name, "{}").format(raw)

    def store(self, dtype: DType, value: str) -> str:
        """A compute-type value as the element it is stored as."""
        return self.stores.get(dtype.name, "{}").format(value)

    def narrow(self, dtype: DType, value: str) -> str:
        """`value` rounded to `dtype` but kept in the compute type (an op's result)."""
        return self.narrows.get(dtype.name, "{}").format(value)

    # --- dialect hooks --------------------------------------------------------------------------

    def literal(self, ctype: str, value: float) -> str:
        """A constant of compute type `ctype`."""
        if ctype == self.bool_type:
            return "true" if value else "false"
        if ctype in self.float_literals:
            return self.float_literals[ctype].format(float(value))
        return self.int_literal.format(ctype=ctype, value=int(value))

    def cast(self, src: str, dst: str, value: str) -> str:
        """`value` of compute type `src` as compute type `dst` (neither is bool, src != dst)."""
        raise NotImplementedError

    def bitcast(self, src: DType, dst: DType, value: str) -> str:
        """The bits of `value` (compute type of `src`) as a compute-type value of `dst`."""
        raise NotImplementedError

    def ternary(self, cond: str, a: str, b: str) -> str:
        """`a` where `cond`, else `b`."""
        return f"({cond} ? {a} : {b})"

    def declare(self, name: str, ctype: str, code: str) -> str:
        """A statement binding `code` to the new local `name` of type `ctype`."""
        raise NotImplementedError

    def math(self, fn: str, ctype: str, args: Sequence[str]) -> str:
        """A float function call (`fn` is the PTIR op name: exp, rem, max ...)."""
        return f"{fn}({', '.join(args)})"

    def int_result(self, ctype: str, code: str) -> str:
        """`code` (an integer operator expression) in `ctype` (C promotes narrow operands)."""
        return f"({code})"

    def wrapping(self, symbol: str, ctype: str, args: Sequence[str]) -> str:
        """Integer `+ - *` that wraps around."""
        return f"({args[0]} {symbol} {args[1]})"

    def int_neg(self, ctype: str, a: str) -> str:
        """Wrapping integer negation."""
        return self.wrapping("-", ctype, [self.literal(ctype, 0), a])

    def int_abs(self, ctype: str, a: str) -> str:
        """Wrapping integer absolute value."""
        return self.ternary(f"{a} < {self.literal(ctype, 0)}", self.int_neg(ctype, a), a)

    def int_sign(self, ctype: str, a: str) -> str:
        """Integer sign (-1, 0, 1)."""
        zero, one = self.literal(ctype, 0), self.literal(ctype, 1)
        return self.ternary(f"{a} > {zero}", one,
                            self.ternary(f"{a} < {zero}", self.int_neg(ctype, one), zero))

    def int_div(self, ctype: str, args: Sequence[str]) -> str:
        """Integer division (x/0 is unspecified in PTIR: it must never trap)."""
        raise NotImplementedError

    def int_rem(self, ctype: str, args: Sequence[str]) -> str:
        """Integer remainder (x%0 is unspecified in PTIR: it must never trap)."""
        raise NotImplementedError

    def int_call(self, fn: str, ctype: str, args: Sequence[str]) -> str:
        """An integer helper call: ``pow``, ``max``, ``min``."""
        return f"{fn}({', '.join(args)})"

    def compare(self, symbol: str, ctype: str, args: Sequence[str]) -> str:
        """A comparison (``!=`` must be true for NaN operands)."""
        return f"({args[0]} {symbol} {args[1]})"

    # --- printing -------------------------------------------------------------------------------

    def convert(self, src: DType, dst: DType, value: str) -> str:
        """`value` (compute type of `src`) as the compute type of `dst` (PTIR `convert`)."""
        s, d = self.compute_type(src), self.compute_type(dst)
        if dst == bool_:
            return value if s == self.bool_type else f"!({value} == {self.literal(s, 0)})"
        if s == self.bool_type:
            return self.ternary(value, self.literal(d, 1), self.literal(d, 0))
        return value if s == d else self.cast(s, d, value)

    def op(self, op: str, ctype: str, args: Sequence[str]) -> str:
        """Elementwise `op` on compute-type `args` of compute type `ctype` (not yet narrowed)."""
        template = TEMPLATES.get(op)
        if template is None:
            raise UnsupportedError(f"{op}: no {self.language} template (backend "
                                   f"'{self.backend}')", op=op, backend=self.backend)
        return template(self, ctype, args)

    def expr(self, op: str, dtype: DType, args: Sequence[str], attrs: Mapping[str, Any],
             result: DType) -> str:
        """The expression of elementwise `op`, rounded to `result`.

        Args:
            op: the PTIR op name.
            dtype: the dtype of the op's (main) operands (`select`: of its branches).
            args: expressions of the operands, already in compute types.
            attrs: the instruction's attributes.
            result: the result dtype.
        """
        if op == "convert":
            return self.narrow(result, self.convert(dtype, result, args[0]))
        if op == "bitcast":
            return self.bitcast(dtype, result, args[0])
        if op in ("gelu", "geglu"):
            op += "_tanh" if attrs.get("approximate") == "tanh" else "_erf"
        return self.narrow(result, self.op(op, self.compute_type(dtype), args))


Template = Callable[[CPrinter, str, Sequence[str]], str]


def _float_or(float_fn: Template, int_fn: Template) -> Template:
    return lambda p, c, a: float_fn(p, c, a) if p.is_float(c) else int_fn(p, c, a)


def _math(fn: str) -> Template:
    return lambda p, c, a: p.math(fn, c, a)


def _arith(symbol: str) -> Template:
    return _float_or(lambda p, c, a: f"({a[0]} {symbol} {a[1]})",
                     lambda p, c, a: p.wrapping(symbol, c, a))


def _logic(name: str, symbol: str) -> Template:
    def make(p: CPrinter, c: str, a: Sequence[str]) -> str:
        if c == p.bool_type:
            return f"({a[0]} {p.bool_ops[name]} {a[1]})"
        return p.int_result(c, f"{a[0]} {symbol} {a[1]}")

    return make


def _compare(symbol: str) -> Template:
    return lambda p, c, a: p.compare(symbol, c, a)


def _minmax(fn: str) -> Template:
    return _float_or(_math(fn), lambda p, c, a: p.int_call(fn, c, a))


def _clamp(p: CPrinter, c: str, a: Sequence[str]) -> str:
    lo, x, hi = a
    return _MIN(p, c, [_MAX(p, c, [x, lo]), hi])


def _gelu(tanh: bool) -> Template:
    """GELU of a local (its name repeats): 0.5 x (1 + erf(x / sqrt 2)) or the tanh form."""

    def make(p: CPrinter, c: str, a: Sequence[str]) -> str:
        x = a[0]

        def lit(v: float) -> str:
            return p.literal(c, v)

        if tanh:
            inner = f"({lit(0.7978845608028654)} * ({x} + {lit(0.044715)} * {x} * {x} * {x}))"
            core = p.math("tanh", c, [inner])
        else:
            core = p.math("erf", c, [f"({x} * {lit(0.7071067811865476)})"])
        return f"({lit(0.5)} * {x} * ({lit(1)} + {core}))"

    return make


def _silu(p: CPrinter, c: str, a: Sequence[str]) -> str:
    return f"({a[0]} * {p.math('logistic', c, a[:1])})"


def _gated(activation: Template) -> Template:
    return lambda p, c, a: f"({activation(p, c, a[:1])} * {a[1]})"


_SILU: Final = _silu
_MAX: Final = _minmax("max")
_MIN: Final = _minmax("min")

#: op name -> template(printer, compute type, operand expressions) -> expression.
TEMPLATES: Final[dict[str, Template]] = {
    "neg": _float_or(lambda p, c, a: f"(-{a[0]})", lambda p, c, a: p.int_neg(c, a[0])),
    "abs": _float_or(_math("abs"), lambda p, c, a: p.int_abs(c, a[0])),
    "sign": _float_or(_math("sign"), lambda p, c, a: p.int_sign(c, a[0])),
    **{op: _math(op) for op in ("exp", "log", "log1p", "expm1", "sqrt", "tanh", "sin", "cos",
                                "erf", "floor", "ceil", "round", "logistic", "atan2")},
    "rsqrt": lambda p, c, a: f"({p.literal(c, 1)} / {p.math('sqrt', c, a)})",
    "not": lambda p, c, a: f"(!{a[0]})" if c == p.bool_type else p.int_result(c, f"~{a[0]}"),
    "add": _arith("+"), "sub": _arith("-"), "mul": _arith("*"),
    "div": _float_or(lambda p, c, a: f"({a[0]} / {a[1]})", lambda p, c, a: p.int_div(c, a)),
    "rem": _float_or(_math("rem"), lambda p, c, a: p.int_rem(c, a)),
    "pow": _float_or(_math("pow"), lambda p, c, a: p.int_call("pow", c, a)),
    "max": _MAX, "min": _MIN, "clamp": _clamp,
    "and": _logic("and", "&"), "or": _logic("or", "|"), "xor": _logic("xor", "^"),
    "eq": _compare("=="), "ne": _compare("!="), "lt": _compare("<"), "le": _compare("<="),
    "gt": _compare(">"), "ge": _compare(">="),
    "select": lambda p, c, a: p.ternary(a[0], a[1], a[2]),
    # elementwise composites (operands are locals, so repeating them is free)
    "gelu_erf": _gelu(tanh=False), "gelu_tanh": _gelu(tanh=True),
    "silu": _SILU,
    # gated units: activation(gate) * up
    "geglu_erf": _gated(_gelu(tanh=False)), "geglu_tanh": _gated(_gelu(tanh=True)),
    "swiglu": _gated(_SILU),
}
