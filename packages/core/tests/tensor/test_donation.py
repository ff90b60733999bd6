"""Donation cannot corrupt: every view or alias of a donated tensor raises like the tensor.

The same table runs on the cpu backend (which writes donated buffers in place) in
packages/backend-cpu/tests/test_donation.py; here it runs on ref, which defines the semantics.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.errors import OmnitensorError

# view kind -> how to take it from a realized (4, 3) tensor
VIEWS: dict[str, Callable[[ot.Tensor], ot.Tensor]] = {
    "slice": lambda x: x[0:2],
    "row": lambda x: x[1],
    "step": lambda x: x[::2],
    "negative_step": lambda x: x[::-1],
    "transpose": lambda x: x.T,
    "broadcast": lambda x: ot.broadcast_to(x[0:1], (5, 3)),
    "reshape": lambda x: x.reshape((12,)),
    "view_of_view": lambda x: x[0:3].T[1:],
    "detach": lambda x: x.detach(),
}


def _update(c: ot.Tensor, v: ot.Tensor) -> ot.Tensor:
    c[0:2] = v
    return c


def _donor() -> ot.Tensor:
    return (ot.tensor(np.zeros((4, 3))) + 0).realize()


@pytest.mark.parametrize("kind", sorted(VIEWS))
def test_view_taken_before_donation_raises(kind: str) -> None:
    f = ot.compile(_update, donate=(0,))
    x = _donor()
    view = VIEWS[kind](x).realize()
    y = f(x, ot.tensor(np.ones((2, 3))))
    np.testing.assert_array_equal(y.numpy()[:, 0], [1, 1, 0, 0])
    for t in (x, view):
        with pytest.raises(OmnitensorError, match="donated"):
            t.numpy()
    with pytest.raises(OmnitensorError, match="donated"):
        (view + 1).numpy()


def test_view_taken_after_donation_raises() -> None:
    f = ot.compile(_update, donate=(0,))
    x = _donor()
    f(x, ot.tensor(np.ones((2, 3))))
    with pytest.raises(OmnitensorError, match="donated"):
        x[0:2].numpy()


def test_compiled_output_aliasing_a_donated_input_raises() -> None:
    rows = ot.compile(lambda a: a[1:3])  # its output may be a view of its input
    f = ot.compile(_update, donate=(0,))
    x = _donor()
    out = rows(x)
    f(x, ot.tensor(np.ones((2, 3))))
    with pytest.raises(OmnitensorError, match="donated"):
        out.numpy()


def test_donating_a_view_copies_and_leaves_its_base_intact() -> None:
    f = ot.compile(_update, donate=(0,))
    x = (ot.tensor(np.zeros((6, 3))) + 0).realize()
    part = x[2:6]
    y = f(part, ot.tensor(np.ones((2, 3))))
    np.testing.assert_array_equal(y.numpy()[:, 0], [1, 1, 0, 0])
    np.testing.assert_array_equal(x.numpy(), np.zeros((6, 3)))  # the base was not donated
    with pytest.raises(OmnitensorError, match="donated"):
        part.numpy()


def test_donated_memory_read_by_another_input_is_copied() -> None:
    def update_then_read(c: ot.Tensor, other: ot.Tensor) -> tuple[ot.Tensor, ot.Tensor]:
        c[0:2] = ot.ones((2, 3), dtype=c.dtype)
        return c, other * 2.0

    f = ot.compile(update_then_read, donate=(0,))
    x = _donor()
    y, doubled = f(x, x[0:2])
    np.testing.assert_array_equal(doubled.numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(y.numpy()[:, 0], [1, 1, 0, 0])


def test_unrelated_tensors_stay_valid() -> None:
    f = ot.compile(_update, donate=(0,))
    x, other = _donor(), _donor()
    keep = other[0:2]
    f(x, ot.tensor(np.ones((2, 3))))
    np.testing.assert_array_equal(keep.numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(other.numpy(), np.zeros((4, 3)))


def test_donated_memory_read_by_a_captured_tensor_is_copied() -> None:
    x = _donor()
    seen = x[0:2].realize()  # a view of x's memory that the function reads from outside

    def update_then_read(c: ot.Tensor) -> tuple[ot.Tensor, ot.Tensor]:
        c[0:2] = ot.ones((2, 3), dtype=c.dtype)
        return c, seen * 2.0

    f = ot.compile(update_then_read, donate=(0,))
    y, doubled = f(x)
    np.testing.assert_array_equal(doubled.numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(y.numpy()[:, 0], [1, 1, 0, 0])


def test_captured_tensor_donated_elsewhere_raises_at_the_next_call() -> None:
    update = ot.compile(_update, donate=(0,))
    update(_donor(), ot.tensor(np.ones((2, 3))))  # traced first (tracing rebinds handles)
    w = _donor()
    plus_w = ot.compile(lambda a: a + w)  # captures w
    for _ in range(2):
        np.testing.assert_array_equal(plus_w(ot.tensor(np.ones((4, 3)))).numpy(),
                                      np.ones((4, 3)))
    update(w, ot.tensor(np.ones((2, 3))))  # rebinds no handle: only w's deletion tells
    with pytest.raises(OmnitensorError, match="donated"):
        plus_w(ot.tensor(np.ones((4, 3))))


def test_call_donating_a_tensor_it_captures_raises_at_its_next_call() -> None:
    w = _donor()

    def update_plus_w(c: ot.Tensor, v: ot.Tensor) -> ot.Tensor:
        c[0:2] = v
        return c + w

    f = ot.compile(update_plus_w, donate=(0,))
    for _ in range(2):  # traced, then its captured tensors are kept
        f(_donor(), ot.tensor(np.ones((2, 3))))
    y = f(w, ot.tensor(np.ones((2, 3))))  # reads w (copied, not written) and donates it
    np.testing.assert_array_equal(y.numpy()[:, 0], [1, 1, 0, 0])
    with pytest.raises(OmnitensorError, match="donated"):
        f(_donor(), ot.tensor(np.ones((2, 3))))


def test_an_argument_assigned_inside_is_returned_not_an_extra_output() -> None:
    # the trace's placeholder for `c` is rebound by `c[0:2] = v`; the caller's tensor is not,
    # so the new value is only the result (a KV cache of a decode step is such an argument)
    f = ot.compile(_update, donate=(0,))
    y = f(_donor(), ot.tensor(np.ones((2, 3))))
    y = f(y, ot.tensor(np.full((2, 3), 2.0)))
    np.testing.assert_array_equal(y.numpy()[:, 0], [2, 2, 0, 0])
    (trace,) = [t for traces in f._cache.values() for t in traces]
    assert trace.rebound == []
    assert len(trace.plan.function.outputs) == 1
