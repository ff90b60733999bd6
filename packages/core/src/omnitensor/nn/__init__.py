"""Neural-network building blocks: `Module`, layers, optimizers and schedules (DESIGN §7)."""

from . import optim as optim
from .layers import MLP as MLP
from .layers import AvgPool2d as AvgPool2d
from .layers import Conv2d as Conv2d
from .layers import Dropout as Dropout
from .layers import Embedding as Embedding
from .layers import KVCache as KVCache
from .layers import LayerNorm as LayerNorm
from .layers import Linear as Linear
from .layers import MaxPool2d as MaxPool2d
from .layers import MultiHeadAttention as MultiHeadAttention
from .layers import RMSNorm as RMSNorm
from .layers import SwiGLU as SwiGLU
from .layers import TransformerBlock as TransformerBlock
from .module import IncompatibleKeys as IncompatibleKeys
from .module import Module as Module
from .module import Parameter as Parameter
from .optim import SGD as SGD
from .optim import AdamW as AdamW
from .optim import CosineWithWarmup as CosineWithWarmup
from .optim import clip_grad_norm_ as clip_grad_norm_

__all__ = [
    "MLP", "SGD", "AdamW", "AvgPool2d", "Conv2d", "CosineWithWarmup", "Dropout", "Embedding",
    "IncompatibleKeys", "KVCache", "LayerNorm", "Linear", "MaxPool2d", "Module",
    "MultiHeadAttention", "Parameter", "RMSNorm", "SwiGLU", "TransformerBlock",
    "clip_grad_norm_", "optim",
]
