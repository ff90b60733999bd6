"""One or more gradient samples per differentiable op.

Each sample is a small function of float tensors that applies the op (integer operands such as
indices are built inside it, kept at 16 elements or fewer so that they stay program constants).
The core's finite-difference tests and the conformance suite's gradient cases both read this
table, and a completeness test requires a sample for every differentiable op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dtypes import bool_, float32, float64, int32

__all__ = ["GradSample", "fill_array", "grad_samples"]


@dataclass(frozen=True)
class GradSample:
    """A gradient sample.

    Attributes:
        op: the op under test.
        name: sample name (unique per op).
        shapes: shapes of the float inputs.
        fn: ``(*tensors) -> tensor`` applying the op.
        fill: ``normal``, ``positive`` (in [0.5, 2)), ``unit`` (in (-0.9, 0.9)) or ``distinct``
            (well-separated values, no ties: for max/min/sort).
        eps: finite-difference step.
        atol: absolute tolerance of the check (samples that round through float32 need more).
    """

    op: str
    name: str
    shapes: tuple[tuple[int, ...], ...]
    fn: Callable[..., Any]
    fill: str = "normal"
    eps: float = 1e-6
    atol: float = 1e-5

    def arrays(self, rng: np.random.Generator, dtype: Any = np.float64) -> list[Any]:
        """Input arrays for this sample."""
        return [fill_array(self.fill, rng, shape, dtype) for shape in self.shapes]


def fill_array(kind: str, rng: np.random.Generator, shape: tuple[int, ...],
               dtype: Any = np.float64) -> Any:
    """One input array of a sample (see `GradSample.fill`)."""
    n = int(np.prod(shape))
    if kind == "positive":
        a = rng.uniform(0.5, 2.0, size=shape)
    elif kind == "unit":
        a = rng.uniform(-0.9, 0.9, size=shape)
    elif kind == "distinct":
        a = (rng.permutation(n).reshape(shape) - n / 2) * 0.25 + rng.uniform(
            -0.05, 0.05, size=shape)
    else:
        a = rng.normal(size=shape)
    return np.asarray(a, dtype=dtype)


def _op(op_name: str, *xs: Any, **attrs: Any) -> Any:
    from ..tensor.tensor import Tensor

    return Tensor._apply(op_name, *xs, **attrs)


def _ints(values: Any) -> Any:
    # A `constant` op (not a host array) so that the value is part of the program.
    return _op("constant", value=np.asarray(values, dtype=np.int32))


def _zero_d(value: int) -> Any:
    from ..tensor.creation import full

    return full((), value, int32)


def grad_samples() -> list[GradSample]:
    """The sample table (built on each call; cheap)."""
    s: list[GradSample] = []
    add = s.append
    for name in ("neg", "abs", "exp", "tanh", "logistic", "sin", "cos", "erf", "expm1", "floor",
                 "ceil", "round", "sign"):
        add(GradSample(name, "vec", ((2, 3),), lambda x, n=name: _op(n, x),
                       "distinct" if name in ("abs", "floor", "ceil", "round", "sign")
                       else "normal"))
    for name in ("log", "sqrt", "rsqrt"):
        add(GradSample(name, "vec", ((2, 3),), lambda x, n=name: _op(n, x), "positive"))
    add(GradSample("log1p", "vec", ((2, 3),), lambda x: _op("log1p", x), "unit"))
    for name in ("add", "sub", "mul", "atan2"):
        add(GradSample(name, "vec", ((2, 3), (2, 3)), lambda a, b, n=name: _op(n, a, b)))
    add(GradSample("div", "vec", ((2, 3), (2, 3)), lambda a, b: _op("div", a, b), "positive"))
    add(GradSample("pow", "vec", ((2, 3), (2, 3)), lambda a, b: _op("pow", a, b), "positive"))
    add(GradSample("rem", "vec", ((2, 3), (2, 3)), lambda a, b: _op("rem", a * 3.0, b),
                   "positive"))
    for name in ("max", "min"):
        add(GradSample(name, "vec", ((2, 3), (2, 3)), lambda a, b, n=name: _op(n, a, b),
                       "distinct"))
    add(GradSample("select", "vec", ((2, 3), (2, 3)),
                   lambda a, b: _op("select", _ints([[1, 0, 1], [0, 0, 1]]).astype(bool_), a, b)))
    add(GradSample("clamp", "vec", ((2, 3), (2, 3), (2, 3)),
                   lambda lo, x, hi: _op("clamp", lo - 1.0, x, hi + 1.0), "distinct"))
    add(GradSample("convert", "f32", ((2, 3),),
                   lambda x: _op("convert", x, dtype=float32).astype(float64), eps=1e-2,
                   atol=1e-4))
    add(GradSample("reshape", "mat", ((2, 6),), lambda x: _op("reshape", x, shape=(3, 4))))
    add(GradSample("broadcast_in_dim", "expand", ((3, 1),),
                   lambda x: _op("broadcast_in_dim", x, shape=(2, 4, 3), dims=(2, 1))))
    add(GradSample("broadcast_in_dim", "permuted", ((3, 2),),
                   lambda x: _op("broadcast_in_dim", x, shape=(2, 4, 3), dims=(2, 0))))
    add(GradSample("transpose", "3d", ((2, 3, 4),),
                   lambda x: _op("transpose", x, perm=(2, 0, 1))))
    add(GradSample("slice", "strided", ((5, 6),),
                   lambda x: _op("slice", x, start=(1, 0), limit=(5, 5), stride=(2, 2))))
    add(GradSample("concatenate", "axis1", ((2, 3), (2, 2)),
                   lambda a, b: _op("concatenate", a, b, axis=1)))
    add(GradSample("pad", "mixed", ((3, 4), ()),
                   lambda x, v: _op("pad", x, v, low=(1, -1), high=(2, 0), interior=(1, 0))))
    add(GradSample("reverse", "both", ((2, 3),), lambda x: _op("reverse", x, axes=(0, 1))))
    add(GradSample("reduce_sum", "axis0", ((3, 4),), lambda x: _op("reduce_sum", x, axes=(0,))))
    add(GradSample("reduce_prod", "axis1", ((3, 4),), lambda x: _op("reduce_prod", x, axes=(1,)),
                   "positive"))
    for name in ("reduce_max", "reduce_min"):
        add(GradSample(name, "axis1", ((3, 4),), lambda x, n=name: _op(n, x, axes=(1,)),
                       "distinct"))
    add(GradSample("cumsum", "reverse", ((3, 4),),
                   lambda x: _op("cumsum", x, axis=1, reverse=True)))
    add(GradSample("cumsum", "forward", ((3, 4),), lambda x: _op("cumsum", x, axis=0)))
    # collectives at world size 1 (the identity): the rules' single-process meaning
    for reduction in ("sum", "mean", "max", "min"):
        add(GradSample("all_reduce", reduction, ((2, 3),), lambda x, r=reduction: _op(
            "all_reduce", x, reduction=r, world_size=1)))
    add(GradSample("all_gather", "axis1", ((2, 3),),
                   lambda x: _op("all_gather", x, axis=1, world_size=1)))
    add(GradSample("reduce_scatter", "axis0", ((2, 3),), lambda x: _op(
        "reduce_scatter", x, reduction="sum", axis=0, world_size=1)))
    add(GradSample("collective_broadcast", "root0", ((2, 3),),
                   lambda x: _op("collective_broadcast", x, root=0, world_size=1)))
    add(GradSample("constant", "scaled", ((2,),),
                   lambda x: x * _op("constant", value=np.asarray(2.0, np.float64))))
    add(GradSample("dot_general", "matmul", ((3, 4), (4, 2)),
                   lambda a, b: _op("dot_general", a, b, contracting=((1,), (0,)))))
    add(GradSample("dot_general", "batched_odd", ((2, 4, 3), (4, 2, 5)),
                   lambda a, b: _op("dot_general", a, b, contracting=((1,), (0,)),
                                    batch=((0,), (1,)))))
    add(GradSample("gather", "rows", ((4, 3),),
                   lambda x: _op("gather", x, _ints([2, 0, 2, 3]), axis=0)))
    add(GradSample("gather", "batched", ((2, 5),),
                   lambda x: _op("gather", x, _ints([[4, 1], [0, 0]]), axis=1, batch_dims=1)))
    add(GradSample("scatter_add", "rows", ((4, 3), (3, 3)),
                   lambda x, u: _op("scatter_add", x, _ints([1, 1, 3]), u, axis=0)))
    add(GradSample("dynamic_slice", "block", ((4, 5),),
                   lambda x: _op("dynamic_slice", x, _zero_d(1), _zero_d(2), sizes=(2, 3))))
    add(GradSample("dynamic_update_slice", "block", ((4, 5), (2, 3)),
                   lambda x, u: _op("dynamic_update_slice", x, u, _zero_d(1), _zero_d(4))))
    add(GradSample("sort", "axis0", ((3, 4),),
                   lambda x: _op_multi("sort", x, axis=0)[0], "distinct"))
    add(GradSample("sort", "last_desc", ((3, 4),),
                   lambda x: _op_multi("sort", x, axis=-1, descending=True)[0], "distinct"))
    add(GradSample("top_k", "k2", ((3, 5),), lambda x: _op_multi("top_k", x, k=2)[0],
                   "distinct"))
    add(GradSample("custom_call", "square_plus", ((2, 3), (2, 3)), _custom_square_plus))
    add(GradSample("qmatmul", "q8_0", ((2, 32),), _qmatmul_sample))
    _composite_samples(add)
    return s


def _composite_samples(add: Callable[[GradSample], None]) -> None:
    """One sample per composite form (checked, like every op, against finite differences)."""
    add(GradSample("softmax", "last", ((3, 4),), lambda x: _op("softmax", x, axes=(1,))))
    add(GradSample("softmax", "two_trailing", ((2, 3, 4),),
                   lambda x: _op("softmax", x, axes=(1, 2))))
    add(GradSample("log_softmax", "last", ((3, 4),),
                   lambda x: _op("log_softmax", x, axes=(1,))))
    add(GradSample("layer_norm", "affine", ((3, 4), (4,), (4,)),
                   lambda x, w, b: _op("layer_norm", x, w, b, axes=(1,), eps=1e-5)))
    add(GradSample("layer_norm", "plain", ((2, 3, 4),),
                   lambda x: _op("layer_norm", x, axes=(1, 2), eps=1e-5)))
    add(GradSample("rms_norm", "weight", ((3, 4), (4,)),
                   lambda x, w: _op("rms_norm", x, w, axes=(1,), eps=1e-6)))
    add(GradSample("rms_norm", "plain", ((3, 4),), lambda x: _op("rms_norm", x, axes=(1,))))
    # (the backward composites' own gradients: a norm's second derivative)
    add(GradSample("layer_norm_backward", "dx_affine", ((3, 4), (3, 4), (4,), (4,)),
                   lambda x, g, w, b: _op_multi("layer_norm_backward", x, g, w, b, axes=(1,),
                                                eps=1e-5)[0]))
    add(GradSample("layer_norm_backward", "dweight_two_axes", ((2, 3, 4), (2, 3, 4), (3, 4)),
                   lambda x, g, w: _op_multi("layer_norm_backward", x, g, w, axes=(1, 2),
                                             eps=1e-5)[1]))
    add(GradSample("rms_norm_backward", "dx_plus_dweight", ((3, 4), (3, 4), (4,)),
                   lambda x, g, w: (lambda r: r[0] + r[1])(
                       _op_multi("rms_norm_backward", x, g, w, axes=(1,), eps=1e-6))))
    for approximate in ("none", "tanh"):
        add(GradSample("gelu", approximate, ((3, 4),),
                       lambda x, a=approximate: _op("gelu", x, approximate=a)))
    add(GradSample("silu", "vec", ((3, 4),), lambda x: _op("silu", x)))
    add(GradSample("swiglu", "vec", ((3, 4), (3, 4)), lambda g, u: _op("swiglu", g, u)))
    add(GradSample("geglu", "tanh", ((3, 4), (3, 4)),
                   lambda g, u: _op("geglu", g, u, approximate="tanh")))
    for causal in (False, True):
        add(GradSample("scaled_dot_product_attention", "gqa_causal" if causal else "gqa",
                       ((1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3)),
                       lambda q, k, v, c=causal: _op("scaled_dot_product_attention", q, k, v,
                                                     scale=0.5, is_causal=c)))
    add(GradSample("cross_entropy", "ignored_row", ((3, 5),),
                   lambda x: _op("cross_entropy", x, _ints([1, 4, -100]))))
    add(GradSample("cross_entropy", "smoothed", ((2, 2, 4),),
                   lambda x: _op("cross_entropy", x, _ints([[0, 3], [2, 7]]),
                                 ignore_index=7, label_smoothing=0.2)))
    add(GradSample("scaled_dot_product_attention", "additive_mask_softcap",
                   ((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 3), (1, 1, 3, 5)),
                   lambda q, k, v, m: _op("scaled_dot_product_attention", q, k, v, m, scale=0.5,
                                          mask_kind="additive", softcap=2.0)))
    add(GradSample("scaled_dot_product_attention", "constant_additive_mask_softcap",
                   ((2, 2, 3, 4), (2, 1, 5, 4), (2, 1, 5, 3)),
                   lambda q, k, v: _op("scaled_dot_product_attention", q, k, v,
                                       _op("constant", value=np.linspace(
                                           -1, 1, 15, dtype=q.dtype.np).reshape(1, 1, 3, 5)),
                                       scale=0.5, mask_kind="additive", softcap=2.0)))
    backward = "scaled_dot_product_attention_backward"
    add(GradSample(backward, "dq_causal_softcap",
                   ((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 3), (1, 2, 3, 3)),
                   lambda q, k, v, g: _op_multi(backward, q, k, v, g, scale=0.5,
                                                is_causal=True, softcap=2.0)[0]))
    add(GradSample(backward, "dk_plus_dv",
                   ((1, 2, 3, 4), (1, 1, 5, 4), (1, 1, 5, 4), (1, 2, 3, 4)),
                   lambda q, k, v, g: sum(_op_multi(backward, q, k, v, g, scale=0.5)[1:])))
    add(GradSample("scaled_dot_product_attention", "bool_mask_positions_cache",
                   ((1, 2, 2, 4), (1, 1, 6, 4), (1, 1, 6, 3)),
                   lambda q, k, v: _op("scaled_dot_product_attention", q, k, v,
                                       _ints([[[[1, 0, 1, 1, 1, 0]]]]).astype(bool_),
                                       _ints([2, 3]), _ints(5), scale=0.5, is_causal=True,
                                       mask_kind="bool", has_q_positions=True,
                                       has_kv_length=True)))
    for interleaved in (False, True):
        add(GradSample("rotary_embedding", "interleaved" if interleaved else "halves",
                       ((2, 3, 6), (3, 3), (3, 3)),
                       lambda x, c, s, i=interleaved: _op("rotary_embedding", x, c, s,
                                                          interleaved=i)))


def _op_multi(op_name: str, *xs: Any, **attrs: Any) -> Any:
    from ..tensor.tensor import Tensor

    return Tensor._apply_multi(op_name, *xs, **attrs)


def _custom_square_plus(a: Any, b: Any) -> Any:
    from ..ir.builder import Builder
    from ..ir.types import TensorType

    builder = Builder("square_plus")
    x = builder.input(TensorType(a.shape, a.dtype))
    y = builder.input(TensorType(b.shape, b.dtype))
    decomposition = builder.build([builder.emit("add", builder.emit("mul", x, x), y)])
    return _op_multi("custom_call", a, b, name="test.square_plus",
                     decomposition=decomposition)[0]


def _qmatmul_sample(x: Any) -> Any:
    from ..ir.quant_blocks import quantize
    from ..ir.types import QTensorType
    from ..tensor.graph import Node
    from ..tensor.tensor import Tensor

    rng = np.random.default_rng(7)
    w = rng.normal(size=(3, 32)).astype(np.float32)
    q = Tensor(Node.from_host(quantize(w, "q8_0"), QTensorType("q8_0", (3, 32))))
    return _op("qmatmul", x, q, format="q8_0")
