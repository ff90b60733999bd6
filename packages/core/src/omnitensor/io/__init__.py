"""Weight files and tokenizers: GGUF, safetensors (Hugging Face layout), name maps, tokenizers.

Readers return `WeightFile`s whose tensors load by name into memory; nothing here builds models.
"""

from .gguf import GGUFFile as GGUFFile
from .gguf import read_gguf as read_gguf
from .gguf import write_gguf as write_gguf
from .safetensors import HFDirectory as HFDirectory
from .safetensors import read_hf_dir as read_hf_dir
from .safetensors import read_safetensors as read_safetensors
from .safetensors import write_safetensors as write_safetensors
from .tokenizer import Tokenizer as Tokenizer
from .tokenizer import char_tokenizer as char_tokenizer
from .weights import QuantizedArray as QuantizedArray
from .weights import TensorInfo as TensorInfo
from .weights import WeightFile as WeightFile

__all__ = [
    "GGUFFile",
    "HFDirectory",
    "QuantizedArray",
    "TensorInfo",
    "Tokenizer",
    "WeightFile",
    "char_tokenizer",
    "read_gguf",
    "read_hf_dir",
    "read_safetensors",
    "write_gguf",
    "write_safetensors",
]
