"""PTIR: the portable IR (op declarations, types, SSA functions, builder, verifier, text)."""

from .builder import Builder as Builder
from .opdef import OpDef as OpDef
from .opdef import OpView as OpView
from .opdef import Trait as Trait
from .opdef import all_ops as all_ops
from .opdef import get_op as get_op
from .program import Function as Function
from .program import Input as Input
from .program import Instruction as Instruction
from .program import Role as Role
from .types import QTensorType as QTensorType
from .types import TensorType as TensorType
from .types import Value as Value

__all__ = [
    "Builder", "Function", "Input", "Instruction", "OpDef", "OpView", "QTensorType", "Role",
    "TensorType", "Trait", "Value", "all_ops", "get_op",
]
