"""`FunctionalRegistry`: one portable implementation per family, any number of named alternatives.

A family (``"attention"``, ``"softmax"``) has a portable implementation made only of PTIR
primitives (the default, named ``"portable"``) and named alternatives, registered here or by
backends through the ``omnitensor_register_functionals`` plugin hook. Which one runs is chosen
per call from, in order: the innermost ``with overrides({...})`` scope (context-local), the
process-wide choices of a loaded model's ``runtime.functional_overrides``, then the portable one.
`stats` counts which implementation ran, so tests can prove an alternative was used.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

from ..errors import OmnitensorError

__all__ = [
    "PORTABLE", "Alternative", "FunctionalRegistry", "functional", "overrides",
    "overrides_from_config", "registry", "stats",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The name of every family's default implementation.
PORTABLE = "portable"


@dataclass(frozen=True)
class Alternative:
    """One implementation of a family.

    Attributes:
        family: the family it implements.
        name: unique within the family (``"portable"`` for the default).
        fn: same signature as the portable implementation.
        backends: backends it is meant for (empty: any).
        doc: one line for listings.
    """

    family: str
    name: str
    fn: Callable[..., Any]
    backends: tuple[str, ...] = ()
    doc: str = ""


_NO_OVERRIDES: Mapping[str, str] = MappingProxyType({})
_scoped: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "omnitensor_functional_overrides", default=_NO_OVERRIDES
)


class FunctionalRegistry:
    """Families of functionals and their implementations."""

    def __init__(self) -> None:
        self._families: dict[str, dict[str, Alternative]] = {}
        self._defaults: dict[str, str] = {}
        self._plugins_loaded = False
        self._lock = threading.Lock()
        #: How many times each ``(family, name)`` ran.
        self.calls: Counter[tuple[str, str]] = Counter()

    # --- registration -------------------------------------------------------------------------

    def define(self, family: str, fn: Callable[..., Any]) -> None:
        """Register `fn` as the portable implementation of a new `family`."""
        if family in self._families and PORTABLE in self._families[family]:
            raise OmnitensorError(f"functional: family {family!r} is defined twice")
        self._families.setdefault(family, {})[PORTABLE] = Alternative(
            family, PORTABLE, fn, doc="portable PTIR implementation")

    def register(self, family: str, name: str, fn: Callable[..., Any], *,
                 backends: tuple[str, ...] = (), doc: str = "", replace: bool = False) -> None:
        """Register a named alternative of `family`.

        Raises:
            OmnitensorError: for an unknown family (listing the known ones) or a duplicate name.
        """
        self._load_plugins()
        impls = self._family(family)
        if name in impls and not replace:
            raise OmnitensorError(
                f"functional: {family!r} already has an implementation named {name!r}; pass "
                "replace=True to replace it")
        impls[name] = Alternative(family, name, fn, tuple(backends), doc)

    def unregister(self, family: str, name: str) -> None:
        """Forget an alternative (the portable implementation stays)."""
        if name != PORTABLE:
            self._family(family).pop(name, None)

    def _load_plugins(self) -> None:
        with self._lock:
            if self._plugins_loaded:
                return
            self._plugins_loaded = True
        from ..backend.registry import functional_alternatives

        for alt in functional_alternatives():
            impls = self._families.setdefault(alt.family, {})
            impls.setdefault(alt.name, Alternative(alt.family, alt.name, alt.fn,
                                                   tuple(alt.backends), alt.doc))

    # --- lookup ---------------------------------------------------------------------------------

    def families(self) -> list[str]:
        """Known family names."""
        self._load_plugins()
        return sorted(self._families)

    def names(self, family: str) -> list[str]:
        """Implementation names of `family` (``"portable"`` first)."""
        self._load_plugins()
        impls = self._family(family)
        return [PORTABLE] + sorted(n for n in impls if n != PORTABLE)

    def get(self, family: str, name: str = PORTABLE) -> Alternative:
        """The implementation `name` of `family`.

        Raises:
            OmnitensorError: for an unknown family or name, listing the known ones.
        """
        self._load_plugins()
        impls = self._family(family)
        if name not in impls:
            raise OmnitensorError(
                f"functional: {family!r} has no implementation {name!r} (known: "
                f"{', '.join(self.names(family))})")
        return impls[name]

    def _family(self, family: str) -> dict[str, Alternative]:
        if family not in self._families:
            raise OmnitensorError(
                f"functional: unknown family {family!r} (known: "
                f"{', '.join(sorted(self._families))})")
        return self._families[family]

    def chosen(self, family: str) -> str:
        """The implementation name a call of `family` would use now."""
        scoped = _scoped.get()
        if family in scoped:
            return scoped[family]
        return self._defaults.get(family, PORTABLE)

    def check(self, choices: Mapping[str, str]) -> dict[str, str]:
        """`choices` validated: every family and name must exist."""
        for family, name in choices.items():
            self.get(family, name)
        return dict(choices)

    def set_defaults(self, choices: Mapping[str, str]) -> None:
        """Process-wide choices (a loaded model's ``runtime.functional_overrides``)."""
        self._defaults.update(self.check(choices))

    def reset_defaults(self) -> None:
        """Forget the process-wide choices."""
        self._defaults.clear()

    def call(self, family: str, *args: Any, **kwargs: Any) -> Any:
        """Run the chosen implementation of `family` (counted in `calls`)."""
        name = self.chosen(family)
        impl = self.get(family, name) if name != PORTABLE else self._families[family][PORTABLE]
        self.calls[(family, name)] += 1
        return impl.fn(*args, **kwargs)


registry = FunctionalRegistry()
#: Alias of ``registry.calls``: ``stats[("attention", "cpu.fused")]`` counts its runs.
stats = registry.calls


def functional(family: str) -> Callable[[F], F]:
    """Define the portable implementation of `family`; returns the dispatching function."""

    def wrap(fn: F) -> F:
        registry.define(family, fn)
        signature = inspect.signature(fn)
        tensor_args = {name for name, p in signature.parameters.items()
                       if str(p.annotation).split(" |")[0] == "Tensor"}

        @functools.wraps(fn)
        def dispatch(*args: Any, **kwargs: Any) -> Any:
            if tensor_args:
                args, kwargs = _convert(family, signature, tensor_args, args, kwargs)
            try:
                return registry.call(family, *args, **kwargs)
            except OmnitensorError as exc:  # name the user-level function, not only the op
                if not exc.message.startswith(f"{family}:"):
                    exc.message = f"{family}: {exc.message}"
                    exc.args = (exc.message,)
                raise

        dispatch.portable = fn  # type: ignore[attr-defined]
        dispatch.family = family  # type: ignore[attr-defined]
        return dispatch  # type: ignore[return-value]

    return wrap


def _convert(family: str, signature: inspect.Signature, tensor_args: set[str],
             args: tuple[Any, ...], kwargs: dict[str, Any]
             ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Tensor arguments given as numpy arrays, lists or scalars, converted (TypeError otherwise)."""
    from ..tensor.tensor import Tensor, as_tensor

    if all(isinstance(a, Tensor) for a in args) and not kwargs:
        return args, kwargs  # the common case stays cheap
    bound = signature.bind_partial(*args, **kwargs)
    for name in tensor_args:
        value = bound.arguments.get(name)
        if value is not None and not isinstance(value, Tensor):
            bound.arguments[name] = as_tensor(value, fn=family, arg=name)
    return bound.args, bound.kwargs


@contextmanager
def overrides(choices: Mapping[str, str]) -> Iterator[None]:
    """Use the named alternatives in this scope (context-local, nests).

    Example:
        >>> with omnitensor.functional.overrides({"attention": "cpu.fused"}):
        ...     y = model(x)

    Raises:
        OmnitensorError: for an unknown family or name, listing the known ones.
    """
    checked = registry.check(choices)
    token = _scoped.set({**_scoped.get(), **checked})
    try:
        yield
    finally:
        _scoped.reset(token)


def overrides_from_config(config: Mapping[str, Any]) -> Any:
    """The `overrides` scope for a model config's ``runtime.functional_overrides`` (or none)."""
    runtime = config.get("runtime", {}) or {}
    return overrides(dict(runtime.get("functional_overrides", {}) or {}))
