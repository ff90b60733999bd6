"""The gradient of scaled_dot_product_attention as one composite (dq, dk, dv in one op).

Differentiated through its decomposition, attention's backward is a dozen primitives (the
weights recomputed, four batched products, the softmax's backward, the masks again); as one
composite a backend may run it as one kernel per head, as a fused forward runs. Its
decomposition is that chain, written out once here.
"""

from __future__ import annotations

from ....dtypes import ALL, FLOATING
from ....errors import ShapeError
from ...builder import Builder, dense
from ...opdef import OpView, Trait, attribute, composite, operand
from ...types import TensorType, Value
from ._emit import binary, broadcast, scalar
from .attention import ScaledDotProductAttentionView, attention_weights

__all__ = ["ScaledDotProductAttentionBackwardView"]


@composite("scaled_dot_product_attention_backward", traits=Trait.MULTI_RESULT, dtypes=FLOATING,
           ulp=16)
class ScaledDotProductAttentionBackwardView(OpView):
    """The cotangents (dq, dk, dv) of `scaled_dot_product_attention` for the cotangent `grad`.

    `q`, `k`, `v`, `extras` and every attribute are the forward's (see
    scaled_dot_product_attention); `grad` has the forward result's shape (B, Hq, T, Dv).
    Results have the shapes of q, k and v; grouped query heads sum into their shared kv head's
    dk and dv. Masked keys get no gradient (a row with no key left weighs every key, and its
    scores still get none, as the select in the forward's decomposition passes none). The
    additive mask's own cotangent is not a result: a rule that needs it differentiates the
    forward's decomposition instead.
    """

    q = operand()
    k = operand()
    v = operand()
    grad = operand()
    extras = operand(variadic=True, min_count=0, dtypes=ALL)
    scale: float = attribute()
    is_causal: bool = attribute(False)
    mask_kind: str = attribute("none")
    has_q_positions: bool = attribute(False)
    has_kv_length: bool = attribute(False)
    softcap: float = attribute(0.0)

    @staticmethod
    def infer(q: TensorType, k: TensorType, v: TensorType, grad: TensorType,
              extras: tuple[TensorType, ...], *, scale: float, is_causal: bool,
              mask_kind: str, has_q_positions: bool, has_kv_length: bool, softcap: float
              ) -> tuple[TensorType, TensorType, TensorType]:
        out = ScaledDotProductAttentionView.infer(
            q, k, v, extras, scale=scale, is_causal=is_causal, mask_kind=mask_kind,
            has_q_positions=has_q_positions, has_kv_length=has_kv_length, softcap=softcap)
        if grad != out:
            op = "scaled_dot_product_attention_backward"
            raise ShapeError(f"{op}: grad is {grad} (expected the forward result's type {out})",
                             op=op, shapes=[grad.shape, out.shape])
        return q, k, v

    @staticmethod
    def decompose(b: Builder, q: Value, k: Value, v: Value, grad: Value,
                  extras: tuple[Value, ...], *, scale: float, is_causal: bool, mask_kind: str,
                  has_q_positions: bool, has_kv_length: bool, softcap: float
                  ) -> tuple[Value, Value, Value]:
        bq, hq, t, d = dense(q.type).shape
        hkv, s, dv = dense(k.type).shape[1], dense(k.type).shape[2], dense(v.type).shape[3]
        rows = (bq, hkv, hq // hkv * t)  # the query rows each kv head serves
        full = (bq, hq, t, s)
        batch = ((0, 1), (0, 1))
        w = attention_weights(b, q, k, extras, scale=scale, is_causal=is_causal,
                              mask_kind=mask_kind, has_q_positions=has_q_positions,
                              has_kv_length=has_kv_length, softcap=softcap)
        probs = b.emit("reshape", w.probs, shape=(*rows, s))
        g = b.emit("reshape", grad, shape=(*rows, dv))
        dv_ = b.emit("dot_general", probs, g, contracting=((2,), (2,)), batch=batch)
        dp = b.emit("dot_general", g, v, contracting=((3,), (3,)), batch=batch)
        dp = b.emit("reshape", dp, shape=full)
        # the softmax's backward: p (dp - sum_s(dp p))
        dot = b.emit("reduce_sum", b.emit("mul", dp, w.probs), axes=(3,))
        centred = b.emit("sub", dp, b.emit("broadcast_in_dim", dot, shape=full, dims=(0, 1, 2)))
        ds = b.emit("mul", w.probs, centred)
        if w.keep is not None:
            ds = b.emit("select", w.keep, ds, broadcast(b, scalar(b, 0.0, q), full))
        if w.capped is not None:  # d(c tanh(x / c)) / dx = 1 - tanh^2
            ds = b.emit("mul", ds, binary(b, "sub", 1.0, b.emit("mul", w.capped, w.capped)))
        ds = b.emit("reshape", binary(b, "mul", ds, float(scale)), shape=(*rows, s))
        qr = b.emit("reshape", q, shape=(*rows, d))
        dq = b.emit("dot_general", ds, k, contracting=((3,), (2,)), batch=batch)
        dk = b.emit("dot_general", ds, qr, contracting=((2,), (2,)), batch=batch)
        return b.emit("reshape", dq, shape=(bq, hq, t, d)), dk, dv_
