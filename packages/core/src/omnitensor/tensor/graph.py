"""The lazy graph behind tensors: `Node`s recorded op by op, and their capture into PTIR.

A node is either a leaf (a realized backend buffer, a host array not yet uploaded, or a traced
placeholder) or an op applied to earlier nodes' results. Capture walks the graph iteratively (no
recursion limit), turns leaves into function inputs and computes the plan-cache key.
"""

from __future__ import annotations

import hashlib
import itertools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend.contract import Backend
from ..backend.registry import scoped_backend
from ..errors import OmnitensorError
from ..ir.builder import Builder, infer_types, normalize_attrs
from ..ir.opdef import get_op
from ..ir.program import Function, Role
from ..ir.types import Type, Value

__all__ = ["Capture", "Node", "Ref", "aliases_of", "capture", "record"]

_versions = itertools.count(1)

#: Constants with at most this many elements are part of the program (and of the cache key);
#: larger ones are inputs (DESIGN §4).
SMALL_CONSTANT = 16


class Node:
    """One value-producing step of the lazy graph, or a leaf.

    Attributes:
        op: op name, or None for a leaf.
        inputs: ``(node, result_index)`` pairs the op reads.
        attrs: complete, normalized attributes.
        types: result types.
        buffers: backend buffers once realized (leaf), one per result.
        host: host arrays of a leaf that has not been uploaded to a backend yet.
        backend: the backend holding `buffers` (or, for an op, the one its operands belong
            to or the ``use_backend`` scope it was recorded in); None while it has none.
        home: for a host leaf, the ``use_backend`` scope it was created in (its upload goes
            there), else None.
        role: the function-input role this leaf takes when captured.
        name: a human name for dumps (parameter names).
        placeholder: index of the traced argument this leaf stands for (inside `compile`).
        version: a process-unique number, renewed whenever the node's buffers change (the
            hoisted-work cache keys on parameter leaves' versions).
        deleted: set when the buffer was donated to a compiled call.
    """

    __slots__ = ("attrs", "backend", "buffers", "deleted", "home", "host", "inputs", "name",
                 "op", "placeholder", "role", "storages", "types", "version", "__weakref__")

    def __init__(self, op: str | None, inputs: tuple[Ref, ...], attrs: dict[str, Any],
                 types: tuple[Type, ...], backend: Backend | None = None) -> None:
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.types = types
        self.backend = backend
        self.buffers: list[Any] | None = None
        self.host: list[np.ndarray[Any, Any]] | None = None
        self.home: Backend | None = None
        self.role = Role.DATA
        self.name = ""
        self.placeholder: int | None = None
        self.version = next(_versions)
        self.deleted = False
        self.storages: tuple[Any, ...] = ()  # set by `_track_aliases` for views

    @property
    def owner(self) -> Backend | None:
        """The backend this value belongs to (where it is or will be computed), if any."""
        return self.backend if self.backend is not None else self.home

    @property
    def is_leaf(self) -> bool:
        """True once the node holds data (or stands for a traced argument)."""
        return self.op is None

    @classmethod
    def from_host(cls, array: np.ndarray[Any, Any], type: Type) -> Node:
        """A leaf holding a host array (uploaded to a backend when first used there)."""
        node = cls(None, (), {}, (type,))
        node.host = [array]
        node.home = scoped_backend()
        return node

    @classmethod
    def from_buffer(cls, buffer: Any, type: Type, backend: Backend) -> Node:
        """A leaf holding one backend buffer."""
        node = cls(None, (), {}, (type,), backend)
        node.buffers = [buffer]
        _track_aliases(node)
        return node

    def bind(self, buffers: list[Any], backend: Backend) -> None:
        """Turn this node into a realized leaf holding `buffers` (drops the graph behind it)."""
        self.op, self.inputs, self.attrs = None, (), {}
        self.buffers, self.host, self.backend = buffers, None, backend
        self.version = next(_versions)
        _track_aliases(self)


# Live nodes whose buffers view memory they do not own, by id of that memory's owner (the
# backend's `storage`). A donated buffer written in place invalidates them (`aliases_of`).
# NOTE: keyed by id: a member keeps its storage alive, so an id is only reused once every
# member of its set has died (empty sets are pruned as the table grows).
_aliases: dict[int, weakref.WeakSet[Node]] = {}
_prune_at = 256


#: How many times a tensor handle has been pointed at another value (`rebind`). A compiled
#: call resolves the tensors it captured (a model's weights) again only when this moved.
rebinds = 0


def rebind(handle: Any, node: Node, index: int) -> None:
    """Point the tensor `handle` at value `index` of `node` (every rebinding goes here)."""
    global rebinds
    handle._node, handle._index = node, index
    rebinds += 1


#: How many times a realized node has been marked deleted (`delete`). A compiled call reuses
#: the buffers of the tensors it captured only while neither this nor `rebinds` moved.
deletions = 0


def delete(node: Node) -> None:
    """Mark `node`'s buffers as given up (donated, or overwritten through a donated view)."""
    global deletions
    node.deleted = True
    deletions += 1


def _track_aliases(node: Node) -> None:
    """Register `node` under the storages of those of its buffers that are views."""
    global _prune_at
    backend = node.backend
    if backend is None or node.buffers is None:
        return
    # NOTE: this runs for every result of every call (a decode step has ~50); most are one
    # buffer that owns its memory, and that case is kept to one storage lookup
    buffers = node.buffers
    if len(buffers) == 1 and backend.storage(buffers[0]) is buffers[0]:
        return
    storages = tuple([backend.storage(buf) for buf in buffers])
    views = [i for i, buf in enumerate(buffers) if storages[i] is not buf]
    if not views:
        return
    node.storages = storages
    for i in views:
        members = _aliases.get(id(storages[i]))
        if members is None:
            members = _aliases[id(storages[i])] = weakref.WeakSet()
        members.add(node)
    if len(_aliases) > _prune_at:
        for key in [k for k, members in _aliases.items() if not members]:
            del _aliases[key]
        _prune_at = max(256, 2 * len(_aliases))


def aliases_of(storage: Any) -> list[Node]:
    """Live nodes holding a view of the memory owned by `storage`."""
    members = _aliases.get(id(storage))
    if not members:
        return []
    return [n for n in members if any(st is storage for st in n.storages)]


Ref = tuple[Node, int]


def common_backend(refs: Sequence[Ref], op: str) -> Backend | None:
    """The one backend the operands live on, or None when none is bound yet.

    Raises:
        OmnitensorError: when operands live on two backends, naming both.
    """
    found: Backend | None = None
    for node, _ in refs:
        owner = node.owner
        if owner is not None:
            if found is not None and owner is not found:
                raise OmnitensorError(
                    f"{op}: operands belong to two backends ({found.name!r} and "
                    f"{owner.name!r}); move one with .to({found.name!r}) or "
                    f".to({owner.name!r})",
                    op=op,
                    backend=owner.name,
                )
            found = owner
    return found


def record(op: str, inputs: Sequence[Ref], attrs: dict[str, Any]) -> Node:
    """Record one op application: check it with the op's own rule now, return its node."""
    opdef = get_op(op)
    full = opdef.attr_defaults(normalize_attrs(attrs))
    types = infer_types(opdef, [n.types[i] for n, i in inputs], full)
    backend = common_backend(inputs, op)
    return Node(op, tuple(inputs), full, types, backend or scoped_backend())


@dataclass
class Capture:
    """A captured graph: op nodes in order, leaves in input order, roots, and the cache key.

    The PTIR function is built only when asked for (`function()`), i.e. on a plan-cache miss.
    """

    order: list[Node]
    leaves: list[Ref]
    roots: list[Ref]
    key: str
    name: str = "main"

    def function(self) -> Function:
        """The captured PTIR function (inputs = leaves, outputs = roots)."""
        builder = Builder(self.name)
        values: dict[tuple[int, int], Value] = {}
        for node, index in self.leaves:
            values[(id(node), index)] = builder.input(node.types[index], node.role, node.name)
        for node in self.order:
            operands = [values[(id(n), i)] for n, i in node.inputs]
            results = builder.emit_multi(node.op or "", *operands, **node.attrs)
            for i, value in enumerate(results):
                values[(id(node), i)] = value
        return builder.build([values[(id(n), i)] for n, i in self.roots])


def _attr_key(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, Function):
        return ("function", value.signature())
    if isinstance(value, float) and value != value:
        return ("nan",)
    return value


def _toposort(roots: Sequence[Ref]) -> list[Node]:
    """Op nodes reachable from `roots` (stopping at leaves), dependencies first. Iterative."""
    order: list[Node] = []
    done: set[int] = set()
    stack: list[tuple[Node, bool]] = [(node, False) for node, _ in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if node.is_leaf or (id(node) in done and not expanded):
            continue
        if expanded:
            if id(node) not in done:
                done.add(id(node))
                order.append(node)
            continue
        stack.append((node, True))
        for child, _ in reversed(node.inputs):
            if not child.is_leaf and id(child) not in done:
                stack.append((child, False))
    return order


def capture(roots: Sequence[Ref], *, name: str = "main", extra_key: Any = None) -> Capture:
    """Capture the graph behind `roots`.

    Leaves become inputs: traced placeholders first (by argument index), then the others in
    first-use order. The key hashes the structure, every attribute and small constant, the leaf
    types and roles, and `extra_key` (backend, layouts, optimizer knobs).
    """
    order = _toposort(roots)
    found: dict[tuple[int, int], Ref] = {}
    for node in order:
        for ref in node.inputs:
            if ref[0].is_leaf:
                found.setdefault((id(ref[0]), ref[1]), ref)
    for ref in roots:
        if ref[0].is_leaf:
            found.setdefault((id(ref[0]), ref[1]), ref)
    leaves = sorted(found.values(), key=lambda r: (0, r[0].placeholder) if r[0].placeholder
                    is not None else (1, 0))
    slots: dict[tuple[int, int], int] = {}
    parts: list[Any] = [extra_key]
    for node, index in leaves:
        slots[(id(node), index)] = len(slots)
        parts.append((str(node.types[index]), node.role.value, node.placeholder))
    for node in order:
        parts.append((node.op, tuple(slots[(id(n), i)] for n, i in node.inputs),
                      tuple((k, _attr_key(v)) for k, v in node.attrs.items())))
        for i in range(len(node.types)):
            slots[(id(node), i)] = len(slots)
    parts.append(tuple(slots[(id(n), i)] for n, i in roots))
    key = hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()
    return Capture(order, leaves, list(roots), key, name)
