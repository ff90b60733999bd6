"""Models from JSON specs: `ModelSpec`, step kinds, the typestate builder, `CompiledModel`."""

from .builder import ModelBuilder as ModelBuilder
from .builder import SpecBuilder as SpecBuilder
from .builder import WeightsBuilder as WeightsBuilder
from .checkpoint import Checkpoint as Checkpoint
from .checkpoint import open_checkpoint as open_checkpoint
from .compiled import CompiledModel as CompiledModel
from .export import export_gguf as export_gguf
from .spec import ModelSpec as ModelSpec
from .spec import builtin_spec as builtin_spec
from .steps import StepContext as StepContext
from .steps import step as step

__all__ = ["Checkpoint", "CompiledModel", "ModelBuilder", "ModelSpec", "SpecBuilder",
           "StepContext", "WeightsBuilder", "builtin_spec", "export_gguf", "open_checkpoint",
           "step"]
