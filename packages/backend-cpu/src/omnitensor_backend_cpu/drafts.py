"""Plan steps before buffers are assigned: what a kernel step reads, writes and owns."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Array", "Draft", "Owned", "Slots", "Step", "one_element"]

Array = np.ndarray[Any, Any]
Slots = list[Any]
Step = Callable[[Slots], None]


@dataclass
class Owned:
    """A value a step writes into a buffer the planner provides."""

    value: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    step: int

    @property
    def nbytes(self) -> int:
        """Bytes of the buffer."""
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass
class Draft:
    """A step before buffers are assigned: `make(out_getters)` builds the closure."""

    reads: list[int]
    writes: list[int]
    make: Callable[[dict[int, Callable[[Slots], Array]]], Step]
    owned: list[Owned] = field(default_factory=list)
    kind: str = "ref"
    label: str = ""
    #: the reads whose memory the results may view (None: any of them); an in-place cache
    #: update's result is its cache, never the row it copies in
    viewed: list[int] | None = None
    #: a compiled fused group's group (`codegen.FusedGroup`): groups of one structure may run
    #: as one call (`batched`)
    group: Any = None


def one_element(a: Array) -> Array:
    """A broadcast scalar (every stride 0) as a 1-element array, for a kernel's scalar input."""
    one: Array = a.reshape(-1)[:1] if a.flags.c_contiguous else a[(0,) * (a.ndim - 1)][:1]
    return one
