"""Weight files and tokenizers: GGUF, safetensors (Hugging Face layout), name maps, tokenizers.

Readers return `WeightFile`s whose tensors load by name into memory; nothing here builds models.
"""

from .weights import QuantizedArray as QuantizedArray
from .weights import TensorInfo as TensorInfo
from .weights import WeightFile as WeightFile

__all__ = ["QuantizedArray", "TensorInfo", "WeightFile"]
