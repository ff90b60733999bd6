"""Neural-network building blocks: `Module`, layers, optimizers and schedules (DESIGN §7)."""

from . import optim as optim
from .data import DataLoader as DataLoader
from .data import TensorDataset as TensorDataset
from .layers import GELU as GELU
from .layers import MLP as MLP
from .layers import AvgPool2d as AvgPool2d
from .layers import Conv2d as Conv2d
from .layers import Dropout as Dropout
from .layers import Embedding as Embedding
from .layers import Flatten as Flatten
from .layers import Identity as Identity
from .layers import KVCache as KVCache
from .layers import LayerNorm as LayerNorm
from .layers import Linear as Linear
from .layers import LogSoftmax as LogSoftmax
from .layers import MaxPool2d as MaxPool2d
from .layers import ModuleDict as ModuleDict
from .layers import ModuleList as ModuleList
from .layers import MultiHeadAttention as MultiHeadAttention
from .layers import ReLU as ReLU
from .layers import RMSNorm as RMSNorm
from .layers import Sequential as Sequential
from .layers import Sigmoid as Sigmoid
from .layers import SiLU as SiLU
from .layers import Softmax as Softmax
from .layers import SwiGLU as SwiGLU
from .layers import Tanh as Tanh
from .layers import TransformerBlock as TransformerBlock
from .module import IncompatibleKeys as IncompatibleKeys
from .module import Module as Module
from .module import Parameter as Parameter
from .optim import SGD as SGD
from .optim import AdamW as AdamW
from .optim import CosineWithWarmup as CosineWithWarmup
from .optim import clip_grad_norm_ as clip_grad_norm_

__all__ = [
    "DataLoader", "TensorDataset",
    "AdamW", "AvgPool2d", "Conv2d", "CosineWithWarmup", "Dropout", "Embedding", "Flatten",
    "GELU", "Identity", "IncompatibleKeys", "KVCache", "LayerNorm", "Linear", "LogSoftmax",
    "MLP", "MaxPool2d", "Module", "ModuleDict", "ModuleList", "MultiHeadAttention", "Parameter",
    "RMSNorm", "ReLU", "SGD", "Sequential", "SiLU", "Sigmoid", "Softmax", "SwiGLU", "Tanh",
    "TransformerBlock", "clip_grad_norm_", "optim",
]
