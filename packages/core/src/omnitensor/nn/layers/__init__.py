"""Layers, one module per family."""

from .attention import KVCache as KVCache
from .attention import MultiHeadAttention as MultiHeadAttention
from .attention import TransformerBlock as TransformerBlock
from .basic import Dropout as Dropout
from .basic import Embedding as Embedding
from .basic import LayerNorm as LayerNorm
from .basic import Linear as Linear
from .basic import RMSNorm as RMSNorm
from .conv import AvgPool2d as AvgPool2d
from .conv import Conv2d as Conv2d
from .conv import MaxPool2d as MaxPool2d
from .mlp import MLP as MLP
from .mlp import SwiGLU as SwiGLU

__all__ = [
    "MLP", "AvgPool2d", "Conv2d", "Dropout", "Embedding", "KVCache", "LayerNorm", "Linear",
    "MaxPool2d", "MultiHeadAttention", "RMSNorm", "SwiGLU", "TransformerBlock",
]
