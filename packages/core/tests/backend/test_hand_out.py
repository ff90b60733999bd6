"""`hand_out`: what a host backend's run returns is read-only, except the inputs themselves."""

from __future__ import annotations

import numpy as np

from omnitensor.backend.host import hand_out


def test_fresh_outputs_are_sealed_and_inputs_left_as_they_are() -> None:
    cache = np.zeros(3)  # donated and written in place: returned as the same array
    passed = np.ones(2)  # an input returned as it is, not donated
    fresh = np.arange(4.0)
    view = cache[1:]  # a view of an input is not the input
    out = hand_out([cache, passed, fresh, view], [passed, cache], donated=[1])
    assert [o is x for o, x in zip(out, [cache, passed, fresh, view], strict=True)] == [True] * 4
    assert cache.flags.writeable and passed.flags.writeable
    assert not fresh.flags.writeable and not view.flags.writeable


def test_without_donation_every_input_is_still_recognized() -> None:
    x, fresh = np.zeros(2), np.zeros(2)
    hand_out([x, fresh], [x])
    assert x.flags.writeable and not fresh.flags.writeable
