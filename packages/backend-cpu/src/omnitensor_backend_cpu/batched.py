"""Independent fused groups of one structure run as one kernel call: an optimizer's updates.

A training step updates every parameter with the same elementwise chain (AdamW: ~15 ops over
the parameter, its gradient and two moments, and the step's scalar factors). Each parameter's
chain is its own fused group, and each group's call cost 20-40 us of Python and dispatch
whatever its size: a char-gpt step's ~30 updates took ~1 ms, a (128,) bias's as long as a
(128, 128) weight's. Here groups with the same kernel source and operand dtypes, none reading
another's results, become one step at the place of the last of them, which calls the source's
``many`` (`codegen.FusedGroup.source`) once over all of them: operands go in by address (one
int64 table, `addresses`), and each group's elements split over numba's OpenMP workers.

Moving a group later is safe because nothing between its place and the batch's reads its
results (a reader closes the batch before it, see `batch_groups`), and its operands are values
(SSA) whose buffers stay live until their last reader, the batch. At run time, operands that
do not fit the one-kernel form (a broadcast row, a strided view, read-only and writable arrays
mixed in one position) run the groups' own steps instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import codegen, pool
from .codegen import FusedGroup
from .drafts import Array, Draft, Slots, Step, one_element

__all__ = ["batch_groups"]

Key = tuple[str, tuple[str, ...]]


def _key(draft: Draft) -> Key | None:
    """What must match for two fused steps to share one kernel (None: never batched)."""
    group: FusedGroup | None = draft.group
    if group is None or not group.shape:
        return None
    dtypes = {v.id: str(getattr(v.type, "dtype", "")) for i in group.insts
              for v in (*i.operands, *i.results)}
    return group.source(), tuple(dtypes[v] for v in (*group.inputs, *group.outputs))


def batch_groups(drafts: list[Draft], work: Callable[[FusedGroup], int]) -> list[Draft]:
    """`drafts` with each set of batchable fused steps merged into one step (see the module).

    `work` is a group's work in `pool.MIN_SPLIT` units (the plan's measure for splitting).
    """
    open_batches: dict[Key, list[int]] = {}
    writer: dict[int, Key] = {}  # value id -> the open batch that writes it
    batches: list[list[int]] = []

    def close(key: Key) -> None:
        members = open_batches.pop(key)
        for i in members:
            for w in drafts[i].writes:
                writer.pop(w, None)
        if len(members) > 1:
            batches.append(members)

    for i, draft in enumerate(drafts):
        for r in draft.reads:  # a reader of a batch's results runs after the whole batch
            if r in writer and writer[r] in open_batches:
                close(writer[r])
        key = _key(draft)
        if key is None:
            continue
        open_batches.setdefault(key, []).append(i)
        for w in draft.writes:
            writer[w] = key
    for key in list(open_batches):
        close(key)
    if not batches:
        return drafts
    merged = {members[-1]: members for members in batches}
    dropped = {i for members in batches for i in members[:-1]}
    out: list[Draft] = []
    for i, draft in enumerate(drafts):
        if i in merged:
            out.append(_merge([drafts[j] for j in merged[i]], work))
        elif i not in dropped:
            out.append(draft)
    return out


def _merge(members: list[Draft], work_of: Callable[[FusedGroup], int]) -> Draft:
    reads = list(dict.fromkeys(r for d in members for r in d.reads))
    writes = [w for d in members for w in d.writes]
    owned = [o for d in members for o in d.owned]
    groups: list[FusedGroup] = [d.group for d in members]

    def make(getters: dict[int, Callable[[Slots], Array]]) -> Step:
        from .addresses import table  # (numba: compiled groups load it anyway)

        # each group's own step, for operands the batched kernel does not take
        own = [d.make({o.value: getters[o.value] for o in d.owned}) for d in members]
        out_gets = [getters[v] for g in groups for v in g.outputs]
        sizes = np.array([math.prod(g.shape) for g in groups], np.int64)
        total = int(sizes.sum())
        work = max(1, sum(work_of(g) for g in groups))
        kernels: dict[tuple[bool, ...], Callable[..., Any]] = {}

        in_ids = [[g.inputs[k] for g in groups] for k in range(len(groups[0].inputs))]
        out_ids = [v for g in groups for v in g.outputs]
        n_out = len(groups[0].outputs)

        def step(slots: Slots) -> None:
            ranges = pool.worker_ranges(total, work, grain=64)
            operands = None
            if ranges is not None or pool.parts(total, work, grain=64) <= 1:
                operands = _operands(slots, in_ids)
            if operands is None:  # (large work where the pool splits; see `_operands`)
                for s in own:
                    s(slots)
                return
            scalars, columns = operands
            results = [get(slots) for get in out_gets]
            columns += [tuple([r.reshape(-1) for r in results[k::n_out]])
                        for k in range(n_out)]
            kernel = kernels.get(scalars)
            if kernel is None:
                kernel = kernels[scalars] = codegen.batched_kernel(groups[0], scalars)
            kernel(1 if ranges is None else ranges[0], sizes, table(columns))
            for v, r in zip(out_ids, results, strict=True):
                slots[v] = r

        return step

    shapes = ", ".join(str(g.shape) for g in groups[:3]) + (", ..." if len(groups) > 3 else "")
    ops = "+".join(i.op for i in groups[0].insts)
    return Draft(reads, writes, make, owned, "fused",
                 label=f"fused:{len(groups)} x {ops}({shapes})")


def _operands(slots: Slots, in_ids: list[list[int]]
              ) -> tuple[tuple[bool, ...], list[tuple[Array, ...]]] | None:
    """Each input position's arrays as the batched kernel takes them, and which are scalars.

    None where one group's operands do not fit the flat form: a strided or broadcast operand
    (not a scalar where the first group has one), or read-only and writable arrays in one
    position (numba types them apart: no one tuple type).
    """
    scalars: list[bool] = []
    columns: list[tuple[Array, ...]] = []
    for ids in in_ids:
        arrays = [slots[v] for v in ids]
        first = arrays[0]
        scalar = first.ndim > 0 and first.size > 0 and not any(first.strides)
        if scalar:
            if not all([a.ndim and a.size and not any(a.strides) for a in arrays]):
                return None
            column = tuple([one_element(a) for a in arrays])
        elif all([a.flags.c_contiguous for a in arrays]):
            column = tuple([a.reshape(-1) for a in arrays])
        else:
            return None
        writable = [a.flags.writeable for a in column]
        if any(writable) and not all(writable):
            return None
        scalars.append(scalar)
        columns.append(column)
    return tuple(scalars), columns
