"""The fused layer and RMS norm backward: against float64 closed forms, its split, its reach.

The composites' semantics are the conformance suite's (every backend); here what only this
kernel does: per-part sums of the parameters' cotangents over a split, strided rows, and that a
compiled training step runs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from omnitensor_backend_cpu import norm_backward, pool, threads

Array = np.ndarray[Any, Any]


def _closed_form(x: Array, g: Array, w: Array, centre: bool, eps: float
                 ) -> tuple[Array, Array, Array]:
    """dx, dweight, dbias of a norm over the last axis, in float64."""
    x, g, w = (np.asarray(a, np.float64) for a in (x, g, w))
    c = x - x.mean(-1, keepdims=True) if centre else x
    r = 1 / np.sqrt((c * c).mean(-1, keepdims=True) + eps)
    xhat, gy = c * r, g * w
    shift = gy.mean(-1, keepdims=True) if centre else 0.0
    dx = r * (gy - shift - xhat * (gy * xhat).mean(-1, keepdims=True))
    rows = tuple(range(x.ndim - 1))
    return dx, (g * xhat).sum(rows), g.sum(rows)


def _rel(actual: Array, expected: Array) -> float:
    diff = np.asarray(actual, np.float64) - expected
    return float(np.sqrt(np.mean(diff**2) / max(np.mean(expected**2), 1e-300)))


@pytest.mark.parametrize("centre", [True, False])
@pytest.mark.parametrize("split", [False, True])
def test_backward_against_the_closed_form(centre: bool, split: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows of 130 read through a transposed view (copied once), one part or three, whose
    parameter sums add up."""
    monkeypatch.setattr(threads, "_COUNT", [3])
    monkeypatch.setattr(pool, "MIN_SPLIT", 1 if split else 1 << 40)
    rng = np.random.default_rng(int(centre))
    x = (rng.normal(size=(130, 4, 37)) * 3 + 1).astype(np.float32).transpose(1, 2, 0)
    g, w = rng.normal(size=x.shape).astype(np.float32), rng.normal(size=130).astype(np.float32)
    dx, dw, db = np.empty(x.shape, np.float32), np.empty(130, np.float32), np.empty(130, np.float32)
    call = norm_backward.prepare_norm_backward(x, g, w, dx, dw, db if centre else None,
                                               eps=1e-5, centre=centre, axes=1)
    call()
    db[...] = 7.0 if not centre else db
    call()  # (a second run starts its sums from zero again)
    want = _closed_form(x, g, w, centre, 1e-5)
    assert _rel(dx, want[0]) < 1e-5 and _rel(dw, want[1]) < 1e-5
    if centre:
        assert _rel(db, want[2]) < 1e-6
    else:
        assert (db == 7.0).all()  # RMS norm has no bias: left alone


def _loss64(x: Array, w: Array, b: Array) -> float:
    """`test_a_compiled_training_step_runs_the_fused_backward`'s loss in float64 numpy."""
    c = x - x.mean(-1, keepdims=True)
    y = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b
    z = y * y
    return float((z / np.sqrt((z * z).mean(-1, keepdims=True) + 1e-6) * w * x).sum())


def _differences(arrays: list[Array], h: float = 1e-6) -> list[Array]:
    """The loss's gradients by central differences in float64."""
    at = [np.asarray(a, np.float64) for a in arrays]
    grads = []
    for i, a in enumerate(at):
        grad = np.empty_like(a)
        for j in np.ndindex(a.shape):
            up, down = [v.copy() for v in at], [v.copy() for v in at]
            up[i][j] += h
            down[i][j] -= h
            grad[j] = (_loss64(*up) - _loss64(*down)) / (2 * h)
        grads.append(grad)
    return grads


def test_a_compiled_training_step_runs_the_fused_backward(plan_labels: list[str]) -> None:
    """Autograd records the norms' gradients as the composites, and the plan runs the kernel."""
    import omnitensor as ot
    import omnitensor.functional as F

    labels = plan_labels

    def loss(x: Any, w: Any, b: Any) -> Any:
        y = F.layer_norm(x, (16,), w, b)
        return (F.rms_norm(y * y, (16,), w) * x).sum()

    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=s).astype(np.float32) for s in ((5, 16), (16,), (16,))]
    with ot.use_backend("cpu"):
        got = ot.compile(ot.grad(loss, argnums=(0, 1, 2)))(*map(ot.tensor, arrays))
        got = [np.asarray(t.numpy()) for t in got]
    want = _differences(arrays)
    assert any(label.startswith("rows:layer_norm_backward") for label in labels), labels
    assert any(label.startswith("rows:rms_norm_backward") for label in labels), labels
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
