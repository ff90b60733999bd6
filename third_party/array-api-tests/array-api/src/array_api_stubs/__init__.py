from . import _2023_12
