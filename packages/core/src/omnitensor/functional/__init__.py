"""Portable functionals (DESIGN §6): composite math built only from PTIR primitives.

Each function is a family of the `FunctionalRegistry`: the portable implementation runs unless
an alternative is chosen with ``with omnitensor.functional.overrides({...}):`` or a model
config's ``runtime.functional_overrides``. Arguments follow numpy for axes (``axis=``,
``keepdims=``) and PyTorch otherwise (``gelu(x, approximate="tanh")``).
"""

from .activations import geglu as geglu
from .activations import gelu as gelu
from .activations import log_softmax as log_softmax
from .activations import relu as relu
from .activations import silu as silu
from .activations import softmax as softmax
from .activations import swiglu as swiglu
from .attention import rope_frequencies as rope_frequencies
from .attention import rope_tables as rope_tables
from .attention import rotary_embedding as rotary_embedding
from .attention import scaled_dot_product_attention as scaled_dot_product_attention
from .basic import dropout as dropout
from .basic import embedding as embedding
from .basic import linear as linear
from .capping import softcap as softcap
from .conv import avg_pool2d as avg_pool2d
from .conv import conv2d as conv2d
from .conv import max_pool2d as max_pool2d
from .losses import cross_entropy as cross_entropy
from .losses import mse_loss as mse_loss
from .norms import layer_norm as layer_norm
from .norms import rms_norm as rms_norm
from .pooling import l2_normalize as l2_normalize
from .pooling import pool as pool
from .registry import FunctionalRegistry as FunctionalRegistry
from .registry import overrides as overrides
from .registry import overrides_from_config as overrides_from_config
from .registry import registry as registry
from .registry import stats as stats

__all__ = [
    "FunctionalRegistry", "avg_pool2d", "conv2d", "cross_entropy", "dropout", "embedding",
    "gelu", "layer_norm", "linear", "log_softmax", "max_pool2d", "mse_loss", "overrides",
    "overrides_from_config", "registry", "relu", "rms_norm", "rope_frequencies", "rope_tables",
    "rotary_embedding", "scaled_dot_product_attention", "silu", "softmax", "stats",
    "l2_normalize", "pool", "softcap", "swiglu", "geglu",
]
