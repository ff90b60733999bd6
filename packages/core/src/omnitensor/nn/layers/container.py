"""Containers of modules: Sequential, ModuleList, ModuleDict (children named "0", "1", ...).

Children are registered as submodules, so their parameters appear in `parameters()` and the
state dict under dotted names (``0.weight``, ``blocks.1.fc1.bias``) as in PyTorch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, overload

from ...errors import OmnitensorError
from ..module import Module

__all__ = ["ModuleDict", "ModuleList", "Sequential"]


def _check(owner: str, module: Any) -> Module:
    if not isinstance(module, Module):
        raise OmnitensorError(f"{owner}: expected a Module (got {type(module).__name__})")
    return module


class ModuleList(Module):
    """A list of submodules (indexable, iterable, appendable)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> ModuleList:
        """Add `module` at the end; returns self."""
        self._modules[str(len(self._modules))] = _check(type(self).__name__, module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        """Append every module of `modules`; returns self."""
        for module in modules:
            self.append(module)
        return self

    @overload
    def __getitem__(self, index: int) -> Module: ...

    @overload
    def __getitem__(self, index: slice) -> ModuleList: ...

    def __getitem__(self, index: int | slice) -> Module | ModuleList:
        items = list(self._modules.values())
        if isinstance(index, slice):
            return type(self)(items[index])
        try:
            module: Module = items[index]
        except IndexError:
            raise IndexError(f"{type(self).__name__}: index {index} is out of range for "
                             f"{len(items)} modules") from None
        return module

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))


class Sequential(ModuleList):
    """Modules applied in order: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 1))``.

    Args:
        *modules: the modules, or one mapping of names to modules.
    """

    def __init__(self, *modules: Module | Mapping[str, Module]) -> None:
        if len(modules) == 1 and isinstance(modules[0], Mapping):
            super().__init__()
            for name, module in modules[0].items():
                self._modules[str(name)] = _check("Sequential", module)
            return
        super().__init__([_check("Sequential", m) for m in modules])

    def forward(self, x: Any) -> Any:
        """Apply each module to the previous one's output."""
        for module in self._modules.values():
            x = module(x)
        return x


class ModuleDict(Module):
    """Submodules by name (a dict that registers its values)."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        for name, module in (modules or {}).items():
            self[name] = module

    def __getitem__(self, name: str) -> Module:
        if name not in self._modules:
            raise KeyError(f"ModuleDict: no module named {name!r} (have {list(self._modules)})")
        module: Module = self._modules[name]
        return module

    def __setitem__(self, name: str, module: Module) -> None:
        self._modules[str(name)] = _check("ModuleDict", module)

    def __contains__(self, name: object) -> bool:
        return name in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def keys(self) -> list[str]:
        """The names."""
        return list(self._modules)

    def values(self) -> list[Module]:
        """The modules."""
        return list(self._modules.values())

    def items(self) -> list[tuple[str, Module]]:
        """(name, module) pairs."""
        return list(self._modules.items())
