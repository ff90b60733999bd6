"""Backend-neutral code generation for kernel-source backends (cuda, wgpu, third parties).

- `views`: view/stride arithmetic over numbered buffer slots (movement ops as views).
- `lower`: the shared lowering walk: value bookkeeping, elementwise-chain fusion grouping,
  buffer/slot planning (`Plan`), inlined decompositions, reduction and matmul layouts.
- `printer`: a C-style expression printer (`CPrinter`) with its dialects `cuda` (CUDA C) and
  `wgsl` (WGSL), each with the helper prelude its expressions call.

No backend is imported here; backends subclass `KernelLowering` and pick a printer.
"""

from .lower import Iota as Iota
from .lower import KernelLowering as KernelLowering
from .lower import Node as Node
from .lower import Plan as Plan
from .lower import tensor_type as tensor_type
from .printer import CPrinter as CPrinter
from .views import VIEW_OPS as VIEW_OPS
from .views import View as View
from .views import merge_dims as merge_dims
from .views import reduce_params as reduce_params
from .views import row_major as row_major
from .views import view_op as view_op
from .views import words as words

__all__ = [
    "VIEW_OPS",
    "CPrinter",
    "Iota",
    "KernelLowering",
    "Node",
    "Plan",
    "View",
    "merge_dims",
    "reduce_params",
    "row_major",
    "tensor_type",
    "view_op",
    "words",
]
