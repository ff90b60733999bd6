"""How a primitive op is declared once: `OpDef`, typed views, `@primitive` and the op registry.

A declaration class *is* the typed view of its instructions (`AddView.match(inst).lhs`).
`@primitive` reads its `operand()`/`attribute()` fields, checks that `infer` and the reference
kernel take exactly those (operands positional, attributes keyword-only), and registers the
`OpDef`. Op families live in `ir/ops/`; nothing here names a particular op.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, TypeVar, final, overload

from ..dtypes import ALL, DType, as_dtype
from ..errors import DTypeError, OmnitensorError
from .types import TensorType

if TYPE_CHECKING:
    from .program import Function, Instruction

__all__ = [
    "AttributeSpec",
    "MISSING",
    "OpDef",
    "OpView",
    "OperandSpec",
    "Trait",
    "all_ops",
    "attribute",
    "composite",
    "decomposition",
    "get_op",
    "operand",
    "primitive",
]


class Trait(enum.Flag):
    """Properties of an op that passes, backends and the conformance suite read."""

    NONE = 0
    ELEMENTWISE = enum.auto()  # out[i] depends on in[i] only; all operands share one shape
    UNARY = enum.auto()
    BINARY = enum.auto()
    COMPARISON = enum.auto()  # result is bool
    COMMUTATIVE = enum.auto()
    REDUCTION = enum.auto()  # removes `axes`
    MOVEMENT = enum.auto()  # rearranges elements, no arithmetic
    VIEW = enum.auto()  # a strided backend can express the result as a view of the operand
    CREATION = enum.auto()  # no tensor operands
    INDEXING = enum.auto()  # reads or writes at data-dependent positions
    LINALG = enum.auto()
    RANDOM = enum.auto()
    QUANTIZED = enum.auto()  # takes a QTensorType operand
    NON_DIFFERENTIABLE = enum.auto()  # no gradient rule: integer/boolean results or piecewise
    MULTI_RESULT = enum.auto()
    COMPOSITE = enum.auto()  # declared with `@composite`: defined by its `decompose`
    COLLECTIVE = enum.auto()  # communicates across ranks: never folded, merged, hoisted or dropped


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@final
@dataclass(frozen=True)
class OperandSpec:
    """One declared operand.

    Attributes:
        name: the field name (``lhs``).
        variadic: takes any number (>= `min_count`) of values, as a tuple.
        dtypes: allowed dtypes; None means the op's own `dtypes`.
        quantized: the operand is a `QTensorType` (quantized blocks).
    """

    name: str
    variadic: bool = False
    dtypes: tuple[DType, ...] | None = None
    quantized: bool = False
    min_count: int = 1


@final
@dataclass(frozen=True)
class AttributeSpec:
    """One declared attribute; `default` is MISSING when it is required."""

    name: str
    default: Any = MISSING


@final
@dataclass(frozen=True)
class OpDef:
    """Everything omnitensor knows about one primitive op (kept small on purpose).

    Attributes:
        name: the op's name in IR text, registries, test ids and docs.
        operands: declared operands, in order.
        attributes: declared attributes, in order.
        traits: properties read by passes and the conformance suite.
        dtypes: the dtypes its (primary) operands or its `dtype` attribute may have.
        infer: the shape/dtype rule; raises ShapeError/DTypeError naming the op.
        reference: the numpy reference kernel (the op's living definition).
        doc: the docstring, which states edge cases.
        view: the typed view class.
        ulp: how many units in the last place a backend may differ by (0: exact/correctly rounded
            as numpy computes it; the conformance suite also applies per-dtype tolerances).
        nmse: the normalized mean squared error a backend's float32 (and narrower) result may
            have where it is compared by NMSE (0: the suite's per-dtype default). An op whose
            contract allows a cheaper arithmetic (`qmatmul` quantizing its activation) says by
            how much here, once, instead of each backend loosening every op.
        unspecified: optional ``(*inputs, **attrs) -> bool mask`` of result elements the doc
            calls unspecified (masked out by the conformance suite).
        decompose: for composites (`Trait.COMPOSITE`), ``(builder, *operands, **attrs) ->
            value or tuple of values`` emitting the portable primitive decomposition.
    """

    name: str
    operands: tuple[OperandSpec, ...]
    attributes: tuple[AttributeSpec, ...]
    traits: Trait
    dtypes: tuple[DType, ...]
    infer: Callable[..., Any]
    reference: Callable[..., Any]
    doc: str
    view: type[OpView]
    ulp: int = 0
    nmse: float = 0.0
    unspecified: Callable[..., Any] | None = None
    decompose: Callable[..., Any] | None = None

    @property
    def summary(self) -> str:
        """First line of the docstring."""
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""

    def has(self, trait: Trait) -> bool:
        """True when every flag of `trait` is set."""
        return (self.traits & trait) == trait

    def attr_defaults(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """`attrs` completed with defaults and checked against the declaration.

        Raises:
            OmnitensorError: for an unknown or missing attribute, naming the op.
        """
        known = {a.name for a in self.attributes}
        unknown = set(attrs) - known
        if unknown:
            raise OmnitensorError(
                f"{self.name}: unknown attribute(s) {sorted(unknown)} (expected {sorted(known)})",
                op=self.name,
            )
        out: dict[str, Any] = {}
        for spec in self.attributes:
            if spec.name in attrs:
                out[spec.name] = attrs[spec.name]
            elif spec.default is MISSING:
                raise OmnitensorError(
                    f"{self.name}: missing required attribute {spec.name!r}", op=self.name
                )
            else:
                out[spec.name] = spec.default
        return out

    def check_dtypes(self, operand_types: Sequence[Any], attrs: dict[str, Any]) -> None:
        """Check operand dtypes (and a ``dtype`` attribute) against the declaration.

        Raises:
            DTypeError: naming the op, the operand and the allowed dtypes.
        """
        for spec, value in zip(self.operands, _group(self.operands, operand_types), strict=True):
            allowed = spec.dtypes if spec.dtypes is not None else self.dtypes
            for t in value if spec.variadic else (value,):
                if spec.quantized or not hasattr(t, "dtype"):
                    continue
                if t.dtype not in allowed:
                    raise DTypeError(
                        f"{self.name}: operand {spec.name!r} has dtype {t.dtype} "
                        f"(expected one of {', '.join(d.name for d in allowed)})",
                        op=self.name,
                        dtype=t.dtype.name,
                    )
        if "dtype" in attrs and not self.operands and attrs["dtype"] not in self.dtypes:
            raise DTypeError(
                f"{self.name}: dtype {attrs['dtype']} is not supported "
                f"(expected one of {', '.join(d.name for d in self.dtypes)})",
                op=self.name,
                dtype=str(attrs["dtype"]),
            )

    def group(self, values: Sequence[Any]) -> list[Any]:
        """Split a flat operand list into one entry per declared operand (tuples for variadic)."""
        return _group(self.operands, values)


def _group(specs: Sequence[OperandSpec], values: Sequence[Any]) -> list[Any]:
    """Flat operands -> per-spec entries. At most one variadic operand, which takes the rest."""
    values = list(values)
    fixed = sum(1 for s in specs if not s.variadic)
    n_var = len(values) - fixed
    out: list[Any] = []
    i = 0
    for s in specs:
        if s.variadic:
            out.append(tuple(values[i : i + n_var]))
            i += n_var
        else:
            out.append(values[i] if i < len(values) else MISSING)
            i += 1
    return out


_T = TypeVar("_T")


class _Field(Generic[_T]):
    """Descriptor for a declared operand or attribute; reads from the wrapped instruction."""

    def __init__(self, kind: str, **options: Any) -> None:
        self.kind = kind
        self.options = options
        self.name = ""
        self.index = -1

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, view: None, owner: type) -> _Field[_T]: ...
    @overload
    def __get__(self, view: OpView, owner: type) -> _T: ...
    def __get__(self, view: OpView | None, owner: type) -> Any:
        if view is None:
            return self
        if self.kind == "attribute":
            return view.inst.attrs[self.name]
        return view.operand_groups[self.index]


def operand(
    *,
    variadic: bool = False,
    dtypes: Sequence[DType] | None = None,
    quantized: bool = False,
    min_count: int = 1,
) -> Any:
    """Declare an operand field of an op view (see `OperandSpec`)."""
    return _Field(
        "operand",
        variadic=variadic,
        dtypes=None if dtypes is None else tuple(dtypes),
        quantized=quantized,
        min_count=min_count,
    )


def attribute(default: Any = MISSING) -> Any:
    """Declare an attribute field of an op view, with an optional default."""
    return _Field("attribute", default=default)


class OpView:
    """Typed, read-only view of one instruction of a known op.

    Subclasses are declared with `@primitive`; their fields read the instruction's operands and
    attributes by name, and ``View.match(inst)`` returns a view or None.
    """

    opdef: ClassVar[OpDef]

    __slots__ = ("inst", "operand_groups")

    def __init__(self, inst: Instruction) -> None:
        self.inst = inst
        self.operand_groups = self.opdef.group(inst.operands)

    @classmethod
    def match(cls: type[_V], inst: Instruction) -> _V | None:
        """A view of `inst` when it is an instance of this op, else None."""
        return cls(inst) if inst.op == cls.opdef.name else None

    @property
    def result(self) -> Any:
        """The (first) result value."""
        return self.inst.results[0]


_V = TypeVar("_V", bound=OpView)

_REGISTRY: dict[str, OpDef] = {}


def _fields(cls: type) -> list[_Field[Any]]:
    seen: dict[str, _Field[Any]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, _Field):
                seen.pop(name, None)
                seen[name] = value
    return list(seen.values())


def _check_signature(name: str, what: str, fn: Callable[..., Any], ops: list[str],
                     attrs: list[str]) -> None:
    params = list(inspect.signature(fn).parameters.values())
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    keyword = [p.name for p in params if p.kind is p.KEYWORD_ONLY]
    if positional != ops or sorted(keyword) != sorted(attrs):
        raise TypeError(
            f"{name}: {what} signature ({', '.join(positional)}, *, {', '.join(keyword)}) does not "
            f"match the declared operands {ops} and attributes {attrs}"
        )


def _declare(cls: type[_V], name: str, traits: Trait, dtypes: Sequence[DType],
             reference: Callable[..., Any] | None, ulp: int,
             decompose: Callable[..., Any] | None = None, nmse: float = 0.0) -> type[_V]:
    if name in _REGISTRY:
        raise TypeError(f"op {name!r} is declared twice")
    operands: list[OperandSpec] = []
    attributes: list[AttributeSpec] = []
    for f in _fields(cls):
        if f.kind == "operand":
            f.index = len(operands)
            operands.append(OperandSpec(f.name, **f.options))
        else:
            attributes.append(AttributeSpec(f.name, f.options["default"]))
    if sum(o.variadic for o in operands) > 1:
        raise TypeError(f"{name}: at most one variadic operand")
    infer = cls.__dict__.get("infer") or getattr(cls, "infer", None)
    kernel = reference or getattr(cls, "reference", None)
    if infer is None or kernel is None:
        raise TypeError(f"{name}: an op needs `infer` and a reference kernel")
    infer_fn = infer.__func__ if isinstance(infer, staticmethod) else infer
    op_names = [o.name for o in operands]
    attr_names = [a.name for a in attributes]
    _check_signature(name, "infer", infer_fn, op_names, attr_names)
    if reference is None:
        _check_signature(name, "reference", kernel, op_names, attr_names)
    if decompose is not None:
        _check_signature(name, "decompose", decompose, ["b", *op_names], attr_names)
    cls.opdef = OpDef(
        name=name,
        operands=tuple(operands),
        attributes=tuple(attributes),
        traits=traits,
        dtypes=tuple(dtypes),
        infer=infer_fn,
        reference=kernel,
        doc=inspect.cleandoc(cls.__doc__ or ""),
        view=cls,
        ulp=ulp,
        nmse=nmse,
        unspecified=getattr(cls, "unspecified", None),
        decompose=decompose,
    )
    _REGISTRY[name] = cls.opdef
    return cls


def primitive(
    name: str,
    *,
    traits: Trait = Trait.NONE,
    dtypes: Sequence[DType] = ALL,
    reference: Callable[..., Any] | None = None,
    ulp: int = 0,
    nmse: float = 0.0,
) -> Callable[[type[_V]], type[_V]]:
    """Declare a primitive op from its view class and register it.

    The class provides the fields (`operand()`, `attribute()`), a docstring stating edge cases,
    a static ``infer`` (types -> result type or tuple of types), and either a static
    ``reference`` or the `reference` argument (numpy kernel, same calling convention). An
    optional static ``unspecified`` marks results the docstring leaves unspecified.

    Args:
        name: the op's name.
        traits: its traits.
        dtypes: dtypes of its primary operands (or of its ``dtype`` attribute for creation ops).
        reference: numpy kernel for simple ops (``np.exp``); otherwise ``cls.reference``.
        ulp: the op's ULP budget for backends (fast approximations within it pass).
        nmse: the op's float32 NMSE budget (`OpDef.nmse`; 0: the suite's default).
    """

    def wrap(cls: type[_V]) -> type[_V]:
        return _declare(cls, name, traits, dtypes, reference, ulp, nmse=nmse)

    return wrap


def composite(
    name: str,
    *,
    traits: Trait = Trait.NONE,
    dtypes: Sequence[DType] = ALL,
    ulp: int = 0,
) -> Callable[[type[_V]], type[_V]]:
    """Declare a composite op: a named op defined by its portable decomposition.

    Like `primitive`, the class provides the fields, a docstring and a static ``infer``; instead
    of a numpy kernel it provides a static ``decompose(b, *operands, **attrs)`` that emits the
    decomposition with a `Builder` `b` (operands are `Value`s) and returns the result value(s).
    The reference kernel is the interpreter running that decomposition; backends lower the
    composite through their lowering table or get it expanded (`optimizer.passes.composites`).

    Args:
        name: the op's name (the functional's name).
        traits: its traits (`Trait.COMPOSITE` is added).
        dtypes: dtypes of its primary operand.
        ulp: the ULP budget a backend's fused kernel may differ from the decomposition by.
    """

    def wrap(cls: type[_V]) -> type[_V]:
        raw = cls.__dict__.get("decompose")
        if raw is None:
            raise TypeError(f"{name}: a composite needs a static `decompose`")
        decompose = raw.__func__ if isinstance(raw, staticmethod) else raw

        def reference(*operands: Any, **attrs: Any) -> Any:
            from .interpret import evaluate  # the interpreter imports this module

            flat = [a for group in operands
                    for a in (group if isinstance(group, tuple) else (group,))]
            fn = decomposition(cls.opdef, [_type_of(a) for a in flat], attrs)
            outs = evaluate(fn, flat)
            return tuple(outs) if len(outs) > 1 else outs[0]

        return _declare(cls, name, traits | Trait.COMPOSITE, dtypes, reference, ulp, decompose)

    return wrap


def _type_of(array: Any) -> TensorType:
    return TensorType(tuple(array.shape), as_dtype(array.dtype))


def decomposition(op: OpDef, operand_types: Sequence[Any], attrs: dict[str, Any]) -> Function:
    """The portable decomposition of composite `op` on `operand_types`, as a PTIR `Function`.

    Args:
        op: a composite's OpDef.
        operand_types: the instruction's operand types (flat, in order).
        attrs: its complete attributes.

    Raises:
        OmnitensorError: when `op` is not a composite.
    """
    from .builder import Builder  # the builder imports this module

    if op.decompose is None:
        raise OmnitensorError(f"{op.name}: not a composite (no decomposition)", op=op.name)
    # NOTE: building a decomposition costs about 0.4 ms (every instruction's `infer`, then the
    # verifier); reference kernels call this per run, so results are kept per (op, types,
    # attributes). Functions are never modified after `build`, so sharing one is safe.
    try:
        key: Any = (op.name, tuple(operand_types), tuple(sorted(attrs.items())))
        hash(key)
    except TypeError:  # an unhashable attribute value: build it every time
        key = None
    if key is not None and key in _DECOMPOSITIONS:
        return _DECOMPOSITIONS[key]
    b = Builder(op.name)
    inputs = [b.input(t) for t in operand_types]
    result = op.decompose(b, *op.group(inputs), **attrs)
    fn = b.build(list(result) if isinstance(result, tuple) else [result])
    if key is not None:
        if len(_DECOMPOSITIONS) >= _DECOMPOSITION_CACHE_SIZE:
            _DECOMPOSITIONS.pop(next(iter(_DECOMPOSITIONS)))
        _DECOMPOSITIONS[key] = fn
    return fn


#: (op name, operand types, attributes) -> decomposition, oldest first (`decomposition`).
_DECOMPOSITIONS: dict[Any, Function] = {}
_DECOMPOSITION_CACHE_SIZE: Final = 512


def all_ops() -> dict[str, OpDef]:
    """Every registered op, by name (declaration order)."""
    from . import ops  # noqa: F401  (importing the families registers them)

    return dict(_REGISTRY)


def get_op(name: str) -> OpDef:
    """The OpDef named `name`.

    Raises:
        OmnitensorError: for an unknown name, with the closest known names.
    """
    ops = all_ops()
    if name in ops:
        return ops[name]
    import difflib

    close = difflib.get_close_matches(name, ops, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise OmnitensorError(f"unknown op {name!r}{hint}", op=name)
