"""5-bit weights as 4-bit nibbles plus a plane of fifth bits, in the integer kernels' layout.

Why: Q5_0 (and Q5_1, Q5_K) repacked to one int8 per weight stream 9 bits a weight where the
file holds 5.5; a decode step reads every weight once and is bound by memory. Here the low
four bits go to `quant.Packed.nibbles` (the 4-bit formats' layout) and the fifth bits, inverted,
to a plane of K / 8 bytes a row that `intdot`'s pairs of blocks read with one 16-byte load per
line of 128 weights: lane j of a pair holds four weights (its nibbles: `intdot.interleave_pairs`),
and byte j of the line's plane holds their four fifth bits for the line's first pair (bits
0..3) and its second (bits 4..7). A weight is then ``nibble - 16 * bit``, in -16..15.

Only rows whose length is a multiple of 128 (whole lines) are stored so.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

__all__ = ["LINE", "join", "split"]

Array = np.ndarray[Any, Any]

#: Weights per line of the plane (four blocks of 32: two pairs).
LINE: Final = 128

# NOTE: a block's 32 elements e = 16 ph + 2 jj + pl are lane jj's nibble p = pl + 2 ph; viewed
# as (ph, jj, pl) and moved next to the pair u, a lane's eight bits (u, ph, pl) are bit 4u + p
# of its byte: `np.packbits` makes the plane in one pass (a fancy-indexed gather and OR
# reductions took 0.11 s for a 4864 x 896 weight, 7 s for a 0.5B model's load).
#: (n, line, u, hb, ph, jj, pl) -> (n, line, hb, jj, u, ph, pl)
_BLOCK_AXES: Final = (0, 1, 3, 5, 2, 4, 6)


def split(q: Array) -> tuple[Array, Array]:
    """(nibbles (N, K / 2), plane (N, K / 8)) of int8 weights q (N, K) in -16..15."""
    n, k = q.shape
    assert k % LINE == 0
    v = (q.astype(np.int16) + 16).astype(np.uint8)
    blocks = (v & np.uint8(15)).reshape(n, k // 32, 32)
    nibbles = blocks[..., :16] | (blocks[..., 16:] << np.uint8(4))
    inverted = (np.uint8(1) - (v >> np.uint8(4))).reshape(n, k // LINE, 2, 2, 2, 8, 2)
    lanes = inverted.transpose(_BLOCK_AXES).reshape(n, k // 8, 8)
    plane = np.packbits(lanes, axis=-1, bitorder="little")
    return (np.ascontiguousarray(nibbles.reshape(n, k // 2)),
            np.ascontiguousarray(plane.reshape(n, k // 8)))


def join(nibbles: Array, plane: Array) -> Array:
    """The int8 weights (N, K) that `split` stored as `nibbles` and `plane`."""
    n, k = nibbles.shape[0], nibbles.shape[1] * 2
    packed = nibbles.reshape(n, k // 32, 16)
    low = np.concatenate([packed & np.uint8(15), packed >> np.uint8(4)], axis=-1)
    bits = np.unpackbits(plane.reshape(n, k // 8, 1), axis=-1, bitorder="little")
    inverted = bits.reshape(n, k // LINE, 2, 8, 2, 2, 2).transpose(0, 1, 4, 2, 5, 3, 6)
    q = low.reshape(n, k).astype(np.int8) - (inverted.reshape(n, k).astype(np.int8) << 4)
    return q.astype(np.int8)
