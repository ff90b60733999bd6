"""Second derivatives against torch's double backward (float64, same inputs).

Each row applies one differentiable op through the public API in both libraries; the scalar
``L = sum(w * f(x) + f(x) ** 2)`` is differentiated twice (nested `omnitensor.grad` against
``torch.autograd.grad(..., create_graph=True)``) and the Hessian-vector products must agree.
Runs in the `parity` tox environment (torch==2.13.0), where a skip counts as a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import omnitensor as ot
import omnitensor.functional as F

torch = pytest.importorskip("torch")
tF = torch.nn.functional

Fn = Callable[..., Any]


GATHER_OT, GATHER_T = ot.tensor([2, 0, 2, 3], dtype=ot.int32), torch.tensor([2, 0, 2, 3])


def _attention_t(q: Any, k: Any, v: Any, is_causal: bool = False) -> Any:
    # torch's fused CPU attention kernels have no double backward: the math form, written out.
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.softmax(scores, -1) @ v

# name -> (shapes, fill, omnitensor fn, torch fn)
ROWS: dict[str, tuple[tuple[tuple[int, ...], ...], str, Fn, Fn]] = {
    "exp": (((2, 3),), "normal", ot.exp, torch.exp),
    "log": (((2, 3),), "positive", ot.log, torch.log),
    "log1p": (((2, 3),), "unit", ot.log1p, torch.log1p),
    "expm1": (((2, 3),), "normal", ot.expm1, torch.expm1),
    "sqrt": (((2, 3),), "positive", ot.sqrt, torch.sqrt),
    "rsqrt": (((2, 3),), "positive", ot.rsqrt, torch.rsqrt),
    "tanh": (((2, 3),), "normal", ot.tanh, torch.tanh),
    "sigmoid": (((2, 3),), "normal", ot.sigmoid, torch.sigmoid),
    "sin": (((2, 3),), "normal", ot.sin, torch.sin),
    "cos": (((2, 3),), "normal", ot.cos, torch.cos),
    "erf": (((2, 3),), "normal", ot.erf, torch.erf),
    "abs": (((2, 3),), "distinct", ot.abs, torch.abs),
    "neg": (((2, 3),), "normal", ot.neg, torch.neg),
    "mul": (((2, 3), (2, 3)), "normal", ot.mul, torch.mul),
    "div": (((2, 3), (2, 3)), "positive", ot.div, torch.div),
    "pow": (((2, 3), (2, 3)), "positive", ot.pow, torch.pow),
    "atan2": (((2, 3), (2, 3)), "positive", ot.atan2, torch.atan2),
    "maximum": (((2, 3), (2, 3)), "distinct", ot.maximum, torch.maximum),
    "minimum": (((2, 3), (2, 3)), "distinct", ot.minimum, torch.minimum),
    "broadcast_mul": (((2, 3), (3,)), "normal", ot.mul, torch.mul),
    "where": (((2, 3), (2, 3)), "normal",
              lambda a, b: ot.where(a > b, a * b, a - b),
              lambda a, b: torch.where(a > b, a * b, a - b)),
    "clamp": (((2, 3),), "distinct", lambda x: ot.clamp(x, -0.3, 0.4),
              lambda x: torch.clamp(x, -0.3, 0.4)),
    "matmul": (((3, 4), (4, 2)), "normal", ot.matmul, torch.matmul),
    "batched_matmul": (((2, 3, 4), (2, 4, 5)), "normal", ot.matmul, torch.matmul),
    "matmul_rhs_t": (((3, 4), (2, 4)), "normal", lambda a, b: a @ b.T, lambda a, b: a @ b.T),
    "sum": (((3, 4),), "normal", lambda x: (x * x).sum(axis=0), lambda x: (x * x).sum(0)),
    "prod": (((3, 4),), "positive", lambda x: ot.prod(x, axis=1),
             lambda x: torch.prod(x, 1)),
    "amax": (((3, 4),), "distinct", lambda x: ot.amax(x, axis=1),
             lambda x: torch.amax(x, 1)),
    "cumsum": (((3, 4),), "normal", lambda x: ot.cumsum(x * x, axis=1),
               lambda x: torch.cumsum(x * x, 1)),
    "softmax": (((3, 4),), "normal", lambda x: F.softmax(x, axis=-1),
                lambda x: torch.softmax(x, -1)),
    "log_softmax": (((3, 4),), "normal", lambda x: F.log_softmax(x, axis=-1),
                    lambda x: torch.log_softmax(x, -1)),
    "layer_norm": (((3, 4), (4,), (4,)), "normal",
                   lambda x, w, b: F.layer_norm(x, (4,), w, b, eps=1e-5),
                   lambda x, w, b: tF.layer_norm(x, (4,), w, b, eps=1e-5)),
    "rms_norm": (((3, 4), (4,)), "normal", lambda x, w: F.rms_norm(x, (4,), w, eps=1e-6),
                 lambda x, w: tF.rms_norm(x, (4,), w, eps=1e-6)),
    "gelu": (((3, 4),), "normal", F.gelu, tF.gelu),
    "gelu_tanh": (((3, 4),), "normal", lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: tF.gelu(x, approximate="tanh")),
    "silu": (((3, 4),), "normal", F.silu, tF.silu),
    "attention": (((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)), "normal",
                  lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                  _attention_t),
    "attention_causal": (((1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4)), "normal",
                         lambda q, k, v: F.scaled_dot_product_attention(q, k, v,
                                                                        is_causal=True),
                         lambda q, k, v: _attention_t(q, k, v, is_causal=True)),
    "transpose_reshape": (((2, 3, 4),), "normal",
                          lambda x: ot.permute_dims(x * x, (2, 0, 1)).reshape((4, 6)),
                          lambda x: (x * x).permute(2, 0, 1).reshape(4, 6)),
    "slice_step": (((5, 6),), "normal", lambda x: (x * x)[1::2, ::-2],
                   lambda x: (x * x)[1::2].flip(1)[:, ::2]),
    "concat_pad": (((2, 3), (2, 2)), "normal",
                   lambda a, b: ot.concat([a * a, b], axis=1),
                   lambda a, b: torch.cat([a * a, b], 1)),
    "gather": (((4, 3),), "normal", lambda x: (x * x)[GATHER_OT],
               lambda x: (x * x)[GATHER_T]),
    "sort": (((3, 4),), "distinct", lambda x: ot.array_api.sort(x * x * x, axis=1),
             lambda x: torch.sort(x * x * x, 1).values),
    "flip": (((3, 4),), "normal", lambda x: ot.flip(x * x, axis=1),
             lambda x: torch.flip(x * x, (1,))),
    "amin": (((3, 4),), "distinct", lambda x: ot.amin(x * x * x, axis=0),
             lambda x: torch.amin(x * x * x, 0)),
    "swiglu": (((3, 4), (3, 4)), "normal", F.swiglu, lambda g, u: tF.silu(g) * u),
    "rotary": (((2, 3, 6), (3, 3), (3, 3)), "normal",
               lambda x, c, s: F.rotary_embedding(x, c, s),
               lambda x, c, s: torch.cat([x[..., :3] * c - x[..., 3:] * s,
                                          x[..., 3:] * c + x[..., :3] * s], -1)),
    "cross_entropy": (((3, 5),), "normal",
                      lambda x: F.cross_entropy(x, ot.tensor([1, 4, 0], dtype=ot.int32)),
                      lambda x: tF.cross_entropy(x, torch.tensor([1, 4, 0]))),
}


def _fill(kind: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    from omnitensor.autograd.samples import fill_array

    return np.asarray(fill_array(kind, rng, shape))


@pytest.mark.parametrize("name", sorted(ROWS))
def test_hessian_vector_product_matches_torch(name: str) -> None:
    shapes, fill, fn_ot, fn_t = ROWS[name]
    rng = np.random.default_rng(0)
    arrays = [_fill(fill, rng, s) for s in shapes]
    xt = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    out_t = fn_t(*xt)
    w = rng.normal(size=tuple(out_t.shape))
    vs = [rng.normal(size=a.shape) for a in arrays]
    loss_t = (out_t * torch.from_numpy(w) + out_t * out_t).sum()
    grads_t = torch.autograd.grad(loss_t, xt, create_graph=True)
    dot_t = sum((g * torch.from_numpy(v)).sum() for g, v in zip(grads_t, vs, strict=True))
    hvp_t = torch.autograd.grad(dot_t, xt)

    argnums = tuple(range(len(arrays)))

    def loss(*xs: ot.Tensor) -> ot.Tensor:
        out = fn_ot(*xs)
        return (out * ot.from_numpy(w) + out * out).sum()

    def directional(*xs: ot.Tensor) -> ot.Tensor:
        grads = ot.grad(loss, argnums)(*xs)
        total = (grads[0] * ot.from_numpy(vs[0])).sum()
        for g, v in zip(grads[1:], vs[1:], strict=True):
            total = total + (g * ot.from_numpy(v)).sum()
        return total

    grads = ot.grad(loss, argnums)(*(ot.from_numpy(a.copy()) for a in arrays))
    hvp = ot.grad(directional, argnums)(*(ot.from_numpy(a.copy()) for a in arrays))
    for i in argnums:
        np.testing.assert_allclose(grads[i].numpy(), grads_t[i].detach().numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=f"{name}: first derivative, arg {i}")
        np.testing.assert_allclose(hvp[i].numpy(), hvp_t[i].numpy(), rtol=1e-9, atol=1e-11,
                                   err_msg=f"{name}: second derivative, arg {i}")
