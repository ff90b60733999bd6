"""Running models: `load_model`, `CausalLM.generate`/`stream`, `Encoder.embed`, sampling."""

from .load import load_model as load_model
from .loaded import CausalLM as CausalLM
from .loaded import Encoder as Encoder
from .loaded import Generation as Generation
from .loaded import LoadedModel as LoadedModel

__all__ = ["CausalLM", "Encoder", "Generation", "LoadedModel", "load_model"]
