"""Layers, one module per family."""

from .activation import GELU as GELU
from .activation import Flatten as Flatten
from .activation import Identity as Identity
from .activation import LogSoftmax as LogSoftmax
from .activation import ReLU as ReLU
from .activation import Sigmoid as Sigmoid
from .activation import SiLU as SiLU
from .activation import Softmax as Softmax
from .activation import Tanh as Tanh
from .attention import KVCache as KVCache
from .attention import MultiHeadAttention as MultiHeadAttention
from .attention import TransformerBlock as TransformerBlock
from .basic import Dropout as Dropout
from .basic import Embedding as Embedding
from .basic import LayerNorm as LayerNorm
from .basic import Linear as Linear
from .basic import RMSNorm as RMSNorm
from .container import ModuleDict as ModuleDict
from .container import ModuleList as ModuleList
from .container import Sequential as Sequential
from .conv import AvgPool2d as AvgPool2d
from .conv import Conv2d as Conv2d
from .conv import MaxPool2d as MaxPool2d
from .mlp import MLP as MLP
from .mlp import SwiGLU as SwiGLU

__all__ = [
    "AvgPool2d", "Conv2d", "Dropout", "Embedding", "Flatten", "GELU", "Identity", "KVCache",
    "LayerNorm", "Linear", "LogSoftmax", "MLP", "MaxPool2d", "ModuleDict", "ModuleList",
    "MultiHeadAttention", "RMSNorm", "ReLU", "Sequential", "SiLU", "Sigmoid", "Softmax",
    "SwiGLU", "Tanh", "TransformerBlock",
]
