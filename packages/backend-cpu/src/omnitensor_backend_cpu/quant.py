"""Quantized matrix products (`qmatmul`) over weights repacked once, at load.

ggml's Q8_0 block (an f16 scale then 32 int8) is a poor layout to stream: a kernel over it runs a
short reduction per block and converts a half float each time (3-6 GB/s here). Repacked as int8
rows with their scales apart (the file's half scales, widened by the kernel once per block of
32: the repacked weight is the file's size), one long vectorized reduction per output row reads
the weight at memory speed. The repacked form is made by `omnitensor_prepare_weight` when a model
is loaded (`plugin.py`) and found again by buffer identity; a weight nobody prepared is repacked
on first use and cached while its (read-only) buffer lives. A buffer viewed in a mapped weight
file has its pages dropped once repacked, so each weight is resident once.

Q4_0, Q4_K and Q6_K are repacked the same way: their integer quants unpacked to int8 rows (Q4_0
``nibble - 8``, Q6_K ``q - 32``, Q4_K the nibble), one float32 scale per sub-block (32 or 16
elements; the K formats' super-block scale already multiplied in, as ggml's dequantizer does),
and for Q4_K one float32 offset per sub-block of 32, applied through the activation's sub-block
sums (``sum_j x_j (d q_j - m) = sum_j x_j d q_j - m sum_j x_j``). One byte per weight is read,
not a dequantized float32.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from omnitensor.backend.host_memory import aligned, aligned_empty, release

from . import dequant, fewrows, fivebit, gemm, intdot, pool, threads
from ._compat import HALF_CONVERSION, jit, prange
from .quant_more import MORE_FORMATS, PACKED_FORMATS, pack_more

__all__ = ["FORMATS", "Packed", "joined_for", "pack", "packed_for", "prepare_qmatmul", "qmatmul"]

Array = np.ndarray[Any, Any]

#: Formats with a kernel of their own (the other ggml formats are repacked by `quant_more`).
FORMATS: Final = PACKED_FORMATS

#: Formats whose repacked quants (0..15, after Q4_0's ``+ 8``) are stored two per byte.
NIBBLE_FORMATS: Final = frozenset({"q4_0", "q4_1", "q4_k"})
#: Formats whose repacked quants (-16..15, after Q5_1's and Q5_K's ``- 16``) are stored as
#: nibbles plus a plane of fifth bits (`fivebit`), where rows are whole lines of 128.
FIVE_BIT_FORMATS: Final = frozenset({"q5_0", "q5_1", "q5_k"})


#: Scales or offsets per sub-block as the kernels take them (`intdot.row_scales`): float32 or
#: half bits (N, B), or factored: (integer levels (N, B), float32 super-block scales (N, S)).
Scales = Array | tuple[Array, Array]


def _columns(form: Scales) -> int:
    """B: sub-blocks per row."""
    return int((form[0] if isinstance(form, tuple) else form).shape[1])


def _values(form: Scales) -> Array:
    """The float32 values of a scale form (the kernels' products, for factored ones)."""
    if isinstance(form, tuple):
        levels, supers = form
        per = levels.shape[1] // supers.shape[1]
        return np.repeat(supers, per, axis=1) * levels.astype(np.float32)
    if form.dtype == np.uint16:
        return form.view(np.float16).astype(np.float32)
    return form


def _each(form: Scales, fn: Any) -> Any:
    """`fn` applied to the form's array, or to each array of a factored one."""
    return tuple(fn(a) for a in form) if isinstance(form, tuple) else fn(form)


class Packed:
    """A repacked weight (N, K): integer quants, scales `d` (N, K >> shift).

    The quants are int8 `qs` (N, K), or for `NIBBLE_FORMATS` 4-bit `nibbles` (N, K / 2):
    in each block of 32 weights, byte i holds weight i in its low and weight 16 + i in its
    high nibble (what `intdot`'s kernel unpacks with two vector operations). For
    `FIVE_BIT_FORMATS` the nibbles hold the low four bits and `highs` the fifth (`fivebit`).

    Attributes:
        format: the ggml format it came from.
        qs: the integer quants, one int8 per weight (unpacked on demand from `nibbles`).
        nibbles: the 4-bit quants, or None.
        d: the scale of each sub-block of ``1 << shift`` weights (`Scales`): float32; (Q8_0,
            Q5_0, where the CPU widens halves in hardware) the file's float16 scales as their
            bits, uint16; or (Q4_K, Q6_K) factored as the file holds them, a byte per
            sub-block and a float32 per 256 weights (`scales` gives float32 values always).
        shift: log2 of the sub-block size (5 or 4).
        mins: (Q4_K, Q4_1, Q4_0's 8 d) the offset of each sub-block of 32, subtracted, in the
            same forms (`offsets` gives float32 values); else None.
        highs: the plane of inverted fifth bits (N, K / 8) of 5-bit `nibbles`, or None.
    """

    __slots__ = ("_qs", "d", "format", "highs", "mins", "nibbles", "shift")

    def __init__(self, qs: Array | None, d: Scales, *, format: str = "q8_0", shift: int = 5,
                 mins: Scales | None = None, nibbles: Array | None = None,
                 highs: Array | None = None) -> None:
        assert (qs is None) != (nibbles is None) and (highs is None or nibbles is not None)
        # the only layouts the kernels take (every format's repacking makes one of them)
        assert shift in intdot.SHIFTS and (mins is None or _columns(mins) == _columns(d))
        self._qs = qs
        self.nibbles = nibbles
        self.highs = highs
        self.d = d
        self.format = format
        self.shift = shift
        self.mins = mins

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K)."""
        if self._qs is not None:
            return self._qs.shape  # type: ignore[no-any-return]
        assert self.nibbles is not None
        return self.nibbles.shape[0], self.nibbles.shape[1] * 2

    @property
    def scales(self) -> Array:
        """`d` as float32 values (a fresh array unless it holds them)."""
        return _values(self.d)

    @property
    def offsets(self) -> Array | None:
        """`mins` as float32 values, or None."""
        return None if self.mins is None else _values(self.mins)

    @property
    def nbytes(self) -> int:
        """Bytes held: quants, plane, scales and offsets."""
        arrays = [self.stored, self.highs]
        for form in (self.d, self.mins):
            arrays += list(form) if isinstance(form, tuple) else [form]
        return sum(int(a.nbytes) for a in arrays if a is not None)

    @property
    def stored(self) -> Array:
        """The quants as stored: int8 `qs`, or the 4-bit `nibbles`."""
        return self._qs if self._qs is not None else self.nibbles  # type: ignore[return-value]

    @property
    def qs(self) -> Array:
        """The int8 quants (N, K); for nibbles a fresh unpacked array."""
        return self.rows(0, self.shape[0])

    def rows(self, lo: int, hi: int) -> Array:
        """The int8 quants of weight rows [lo, hi)."""
        if self._qs is not None:
            return self._qs[lo:hi]
        assert self.nibbles is not None
        if self.highs is not None:
            return fivebit.join(self.nibbles[lo:hi], self.highs[lo:hi])
        packed = self.nibbles[lo:hi].reshape(hi - lo, -1, 16)
        both = np.concatenate([packed & np.uint8(0x0F), packed >> np.uint8(4)], axis=-1)
        return both.reshape(hi - lo, -1).view(np.int8)


def nibble_pack(packed: Packed) -> Packed:
    """`packed` with its quants stored two per byte, when its format allows (else itself)."""
    if packed.format not in NIBBLE_FORMATS or packed.shift != 5 or packed.nibbles is not None:
        return packed
    q = packed.qs
    mins = packed.mins
    if packed.format == "q4_0":  # d (q - 8) = d q' - 8 d with q' = q + 8 in 0..15
        q = q + np.int8(8)
        mins = np.ascontiguousarray(8.0 * packed.scales, dtype=np.float32)
    n, k = q.shape
    blocks = q.view(np.uint8).reshape(n, k // 32, 32)
    nibbles = blocks[..., :16] | (blocks[..., 16:] << np.uint8(4))
    return Packed(None, packed.d, format=packed.format, shift=5, mins=mins,
                  nibbles=np.ascontiguousarray(nibbles.reshape(n, k // 2)))


def five_bit_pack(packed: Packed) -> Packed:
    """`packed` with its 5-bit quants as nibbles and a plane of fifth bits (`fivebit`).

    Where it can be: a format of `FIVE_BIT_FORMATS`, sub-blocks of 32, rows of whole lines of
    128; else `packed` itself.
    """
    n, k = packed.shape
    if (packed.format not in FIVE_BIT_FORMATS or packed.shift != 5 or packed.nibbles is not None
            or k % fivebit.LINE):
        return packed
    q, d, mins = packed.qs, packed.d, packed.mins
    if q.size and int(q.min()) >= 0:  # levels 0..31 with offsets: d q - m = d (q - 16) - m'
        q = q - np.int8(16)
        scales, offsets = packed.scales, packed.offsets
        mins = np.ascontiguousarray((0.0 if offsets is None else offsets) - 16.0 * scales,
                                    dtype=np.float32)
    if q.size and not (int(q.min()) >= -16 and int(q.max()) <= 15):
        return packed
    nibbles, highs = fivebit.split(q)
    return Packed(None, _half_bits_if_exact(d), format=packed.format, shift=5, mins=mins,
                  nibbles=nibbles, highs=highs)


def _half_bits_if_exact(d: Scales) -> Scales:
    """Float32 scales `d` as half bits (uint16) where that loses nothing, else `d` itself.

    Only where every scale is a half (Q5_0's are the file's) and the CPU widens halves in
    hardware (`intdot` widens a row's scales at a time).
    """
    if not HALF_CONVERSION or isinstance(d, tuple) or d.dtype != np.float32:
        return d
    with np.errstate(all="ignore"):
        half = d.astype(np.float16)
    if not np.array_equal(half.astype(np.float32), d):
        return d
    return np.ascontiguousarray(half).view(np.uint16)


def _f16(raw: Array) -> Array:
    """Float32 values of little-endian f16 bytes [..., 2]."""
    out: Array = np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)
    return out


def _unpack_q4_0(raw: Array) -> tuple[Array, Scales, None]:
    d = _f16(raw[:, :2])[:, None]
    qs = raw[:, 2:]
    nibbles = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1)
    return nibbles.astype(np.int8) - np.int8(8), d, None


def _unpack_q4_k(raw: Array) -> tuple[Array, Scales, Scales]:
    n = raw.shape[0]
    d, dmin = _f16(raw[:, 0:2])[:, None], _f16(raw[:, 2:4])[:, None]
    # NOTE: ggml's get_scale_min_k4 for the 8 sub-blocks at once (12 bytes of 6-bit pairs).
    low, mid, high = raw[:, 4:8], raw[:, 8:12], raw[:, 12:16]
    scales = np.concatenate([low & 0x3F, (high & 0x0F) | ((low >> 6) << 4)], axis=-1)
    mins = np.concatenate([mid & 0x3F, (high >> 4) | ((mid >> 6) << 4)], axis=-1)
    shifts = np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    nibbles = (raw[:, 16:].reshape(n, 4, 1, 32) >> shifts) & np.uint8(0x0F)
    return nibbles.reshape(n, 256).astype(np.int8), (scales, d), (mins, dmin)


def _unpack_q6_k(raw: Array) -> tuple[Array, Scales, None]:
    n = raw.shape[0]
    ql, qh = raw[:, :128], raw[:, 128:192]
    scales = raw[:, 192:208].view(np.int8)
    d = _f16(raw[:, 208:210])[:, None]
    shifted = ql.reshape(n, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    low = (shifted & np.uint8(0x0F)).reshape(n, 256)
    high = qh.reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    high = (high & np.uint8(0x03)).reshape(n, 256)
    q = (low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)
    return q, (scales, d), None


#: format -> (elements per block, bytes per block, log2 sub-block, unpacker of raw [n, bytes]).
_LAYOUTS: Final[dict[str, tuple[int, int, int, Any]]] = {
    "q4_0": (32, 18, 5, _unpack_q4_0),
    "q4_k": (256, 144, 5, _unpack_q4_k),
    "q6_k": (256, 210, 4, _unpack_q6_k),
}


def pack(blocks: Array, format: str, shape: tuple[int, ...]) -> Packed:
    """Repack ggml blocks (uint8 [N, K/block*block_bytes]) of logical `shape` (N, K)."""
    assert format in FORMATS, format
    if format in MORE_FORMATS:
        return five_bit_pack(nibble_pack(pack_more(blocks, format, shape)))
    n, k = shape
    if format == "q8_0":
        raw = np.ascontiguousarray(blocks).reshape(n, k // 32, 34)
        # the file's half scales kept as their bits where the CPU widens halves (the repacked
        # weight is then exactly the file's size), else widened to float32 once, here
        bits = np.ascontiguousarray(raw[:, :, :2]).view(np.uint16).reshape(n, k // 32)
        d = bits if HALF_CONVERSION else bits.view(np.float16).astype(np.float32)
        qs = np.ascontiguousarray(raw[:, :, 2:]).view(np.int8).reshape(n, k)
        return Packed(qs, d)
    block, nbytes, shift, unpack = _LAYOUTS[format]
    flat = np.ascontiguousarray(blocks).reshape(n * (k // block), nbytes)
    with np.errstate(all="ignore"):
        q, sub_d, sub_m = unpack(flat)

    def rows(form: Scales) -> Scales:  # per block -> per weight row; values stay float32
        return _each(form, lambda a: np.ascontiguousarray(  # type: ignore[no-any-return]
            a.reshape(n, -1), dtype=np.float32 if a.dtype.kind == "f" else a.dtype))

    return nibble_pack(Packed(np.ascontiguousarray(q.reshape(n, k)), rows(sub_d),
                              format=format, shift=shift,
                              mins=None if sub_m is None else rows(sub_m)))


# NOTE: keyed by id(buffer) with a weak reference that proves it is still the same array; the
# entry goes away with the buffer. Only read-only buffers are cached (a writable one could change
# under the cache).
_CACHE: dict[int, tuple[weakref.ref[Array], Packed]] = {}
_LOCK = threading.Lock()


def _forget(key: int) -> None:
    with _LOCK:
        _CACHE.pop(key, None)


def packed_for(blocks: Array, format: str, shape: tuple[int, ...]) -> Packed:
    """The repacked form of `blocks`, made once per read-only buffer."""
    key = id(blocks)
    entry = _CACHE.get(key)
    if entry is not None and entry[0]() is blocks:
        return entry[1]
    packed = _aligned(pack(blocks, format, shape))
    # NOTE: a weight viewed in its mapped file is now held twice (the file's pages and the
    # repacked form); the pages are dropped (read again only by host lookups of a few rows).
    release(blocks)
    if not blocks.flags.writeable:
        with _LOCK:
            _CACHE[key] = (weakref.ref(blocks, lambda _: _forget(key)), packed)
    return packed


def _join(arrays: Any) -> Array:
    """The arrays concatenated along their first axis into cache-line-aligned memory."""
    first = arrays[0]
    out = aligned_empty((sum(a.shape[0] for a in arrays), *first.shape[1:]), first.dtype)
    return np.concatenate(arrays, out=out)


def _aligned(packed: Packed) -> Packed:
    """`packed` with every array on a cache line, copied only where it is not.

    The kernels' whole-line loads of a misaligned row split over two lines
    (`host_memory.ALIGNMENT`).
    """

    def one(array: Array | None) -> Array | None:
        return None if array is None else aligned(array)

    def form(value: Scales | None) -> Scales | None:
        return None if value is None else _each(value, aligned)

    return Packed(one(packed._qs), _each(packed.d, aligned), format=packed.format,
                  shift=packed.shift, mins=form(packed.mins), nibbles=one(packed.nibbles),
                  highs=one(packed.highs))


def _stack(parts: list[Packed]) -> Packed:
    """The parts' rows one after another (one format, one layout)."""
    def rows(arrays: list[Array | None]) -> Array | None:
        return None if arrays[0] is None else _join(arrays)

    first = parts[0]

    def forms(values: list[Scales | None]) -> Scales | None:
        if values[0] is None:
            return None
        kinds = {str(_each(v, lambda a: a.dtype)) for v in values}  # type: ignore[arg-type]
        if len(kinds) > 1:  # half bits, factored or float32 values mixed: float32 for all
            values = [_values(v) for v in values]  # type: ignore[arg-type]
        if isinstance(values[0], tuple):
            return tuple(_join(c) for c in zip(*values, strict=True))  # type: ignore[return-value]
        return rows(values)  # type: ignore[arg-type]

    return Packed(rows([p._qs for p in parts]), forms([p.d for p in parts]),  # type: ignore[arg-type]
                  format=first.format, shift=first.shift, mins=forms([p.mins for p in parts]),
                  nibbles=rows([p.nibbles for p in parts]), highs=rows([p.highs for p in parts]))


def _slice(packed: Packed, lo: int, hi: int) -> Packed:
    """Weight rows [lo, hi) of `packed`, as views."""
    def rows(array: Array | None) -> Array | None:
        return None if array is None else array[lo:hi]

    def form(value: Scales | None) -> Scales | None:
        return None if value is None else _each(value, lambda a: a[lo:hi])

    return Packed(rows(packed._qs), form(packed.d),  # type: ignore[arg-type]
                  format=packed.format, shift=packed.shift,
                  mins=form(packed.mins), nibbles=rows(packed.nibbles),
                  highs=rows(packed.highs))


# NOTE: keyed by the parts' ids, with weak references proving they are the same arrays.
_JOINED: dict[tuple[int, ...], tuple[list[weakref.ref[Array]], Packed]] = {}


def joined_for(parts: list[Array], format: str, shapes: list[tuple[int, ...]]) -> Packed:
    """One repacked weight holding the rows of every part in turn, made once per parts.

    Products that read the same activations (a layer's q, k and v) run as one product over
    it: one quantization of the activations and one parallel region instead of one per part.
    Each part's own repacked form becomes a view of the joined one, so the rows are held once.
    """
    key = tuple(id(p) for p in parts)
    entry = _JOINED.get(key)
    if entry is not None and all(r() is p for r, p in zip(entry[0], parts, strict=True)):
        return entry[1]
    packed = [packed_for(p, format, s) for p, s in zip(parts, shapes, strict=True)]
    joined = _stack(packed)
    if all(not p.flags.writeable for p in parts):
        with _LOCK:
            lo = 0
            for part, one in zip(parts, packed, strict=True):
                hi = lo + one.shape[0]
                cached = _CACHE.get(id(part))
                if cached is not None and cached[0]() is part:
                    _CACHE[id(part)] = (cached[0], _slice(joined, lo, hi))
                lo = hi
            _JOINED[key] = ([weakref.ref(p, lambda _: _forget_joined(key)) for p in parts],
                            joined)
    return joined


def _forget_joined(key: tuple[int, ...]) -> None:
    with _LOCK:
        _JOINED.pop(key, None)


_NO_MINS: Final = np.zeros((1, 0), np.float32)

#: Activation rows from which a product dequantizes tiles of the weight for BLAS. Below, the
#: integer kernels win (a 4864 x 896 Q8_0 product on 2 threads, interleaved medians: 5.1-5.3
#: against 6.8 ms at 32 rows, 5.7-7.2 against 7.8-9.1 at 64, 9.2-10.0 against 10.6-12.8 at 96;
#: even at 128 and 2.5x slower at 512).
BLAS_MIN_ROWS: Final = 128
#: Activation rows from which a product dequantizes the weight for `gemm`'s tiles where they
#: take the products (`threads.wide_products`). A weight dequantized a tile at a time and
#: multiplied in the cache costs about as much as 20 rows of integer products (4864 x 1024,
#: 2 threads, warm: Q8_0 0.73 ms against 0.68 at 16 rows and 1.03 at 24; Q4_K 0.57 / 0.89,
#: Q6_K 0.94 / 1.45, Q4_0 1.10 against 0.72 / 1.25), but the integer kernels are compiled for
#: decode anyway, and the dequantizing split costs 2-3 s of compilation on a cold cache: a
#: first chat prompt (the quick start's 37 tokens, a 64-row prefill) would pay it (its first
#: run's compile 13.6 against 11.7 s, its prompt as fast). From 65 rows, the prompts that
#: take long anyway.
WIDE_MIN_ROWS: Final = 65
#: Float32 bytes of one dequantized weight tile. Large on purpose: BLAS packs its operands
#: itself, and a product over many small tiles ran 1.3-1.5x slower than over a few large ones
#: (a 4864 x 896 Q8_0 weight by 512 rows: 47 ms with 256 KB tiles, 37 ms with 4 MB, 32 ms for
#: the float32 matrix).
_TILE_BYTES: Final = 1 << 22


def _tile_rows(n: int, k: int) -> int:
    """Weight rows per dequantized tile: at most `_TILE_BYTES`, the tiles of a weight equal.

    Equal tiles, because BLAS runs a narrow last tile (896 x 4864 in tiles of 215 rows: the
    fifth 36) at a fraction of its speed: at 128 activation rows, 4864 x 896 took 11.3 against
    13.0 ms and 896 x 4864 12.0 against 13.0 ms (f32 BLAS on the whole weight 10.5 and 9.7).
    """
    most = max(16, min(n, _TILE_BYTES // (4 * k)))
    count = -(-n // most)
    return -(-n // count)


def _many_rows(x: Array, packed: Packed, out: Array) -> None:
    n, k = packed.shape
    mins = _NO_MINS if packed.mins is None else packed.mins  # one per scale sub-block
    if x.dtype == np.float32 and gemm.suits(x.shape[0], n, k):
        parts = pool.parts(n, x.shape[0] * n * k, grain=gemm.WEIGHTS)
        offsets = (mins[0] if isinstance(mins, tuple) else mins).shape[1]
        panels = gemm.pack(x)
        if packed.shift == 5:
            _wide_split32(panels, packed.stored, packed.d, mins, out, k, offsets,
                          packed.highs, parts)
        else:
            _wide_split16(panels, packed.stored, packed.d, mins, out, k, offsets, parts)
        return
    tile = _tile_rows(n, k)
    scratch = np.empty((tile, k), np.float32)
    quants, shift = packed.stored, packed.shift
    threads.blas_for(2.0 * x.shape[0] * n * k)
    for lo in range(0, n, tile):
        hi = min(lo + tile, n)
        w = scratch[: hi - lo]

        def rows(first: int, last: int, lo: int = lo, w: Array = w) -> None:
            dequant.dequantize_rows(quants, packed.d, mins, lo, w, first, last, shift,
                                    packed.highs)

        pool.parallel_for(hi - lo, rows, work=w.size)
        np.matmul(x, w.T, out=out[:, lo:hi])


@jit(inline=True)
def _wide_split(panels: Any, qs: Any, d: Any, mins: Any, out: Any, k: int, shift: int,
                offsets: int, highs: Any, parts: int) -> None:
    # `gemm`'s tiles on the dequantized weight: each thread dequantizes its share of the
    # rows a tile at a time, in its cache, and multiplies it at once (no weight-sized buffer).
    # `shift` a constant (inlined into the two entry points below), so that only the
    # dequantization for qs's kind is compiled; `highs` None: no fifth bits
    n = out.shape[1]
    rows = gemm.tile_rows(k)
    for p in prange(parts):
        lo, hi = gemm.column_share(n, parts, p)
        tile = np.empty((rows, k), np.float32)
        for start in range(lo, hi, rows):
            end = min(hi, start + rows)
            if shift == 5:
                dequant.rows32(qs, d, mins, start, tile, 0, end - start, offsets, highs)
            else:
                dequant.rows16(qs, d, mins, start, tile, 0, end - start, offsets)
            gemm.multiply_tile(panels, tile, out, start, end)


@jit(parallel=True)
def _wide_split32(panels: Any, qs: Any, d: Any, mins: Any, out: Any, k: int, offsets: int,
                  highs: Any, parts: int) -> None:
    _wide_split(panels, qs, d, mins, out, k, 5, offsets, highs, parts)


@jit(parallel=True)
def _wide_split16(panels: Any, qs: Any, d: Any, mins: Any, out: Any, k: int, offsets: int,
                  parts: int) -> None:
    _wide_split(panels, qs, d, mins, out, k, 4, offsets, None, parts)


# NOTE: a tile's dequantization by numpy (an int8 -> float32 cast, then a broadcast multiply,
# on one thread) took 3-4 ms of a 4864 x 896 product's 12 ms at 128 rows; numba loops were no
# faster (scalar conversions, see `dequant`). The tiles split over the pool's threads, not
# numba's OpenMP workers: those spin after a region and starved the BLAS threads that run next
# (the product took 40 ms).


def qmatmul(x: Array, packed: Packed, out: Array) -> None:
    """Out (M, N) = x (M, K) float32 @ dequantize(packed).T, accumulated in float32.

    Up to `BLAS_MIN_ROWS` activation rows (`WIDE_MIN_ROWS` where `gemm`'s tiles take the
    products) are quantized to int16 per sub-block and multiplied by integer dot products
    (`intdot`, within the op's declared NMSE budget); more rows, and rows holding a NaN or an
    infinity, multiply dequantized tiles of the weight (by BLAS or `gemm`).
    """
    prepare_qmatmul(np.ascontiguousarray(x), packed, out)()


def prepare_qmatmul(x: Array, packed: Packed, out: Array) -> Callable[[], None]:
    """`qmatmul`'s call on these arrays (C-contiguous x), made once (see `prepared`)."""
    m_rows = x.shape[0]
    if out.shape != (m_rows, packed.shape[0]) or x.shape[1] != packed.shape[1]:
        # the compiled kernels index without bounds checks: a wrong buffer would be overrun
        raise ValueError(f"qmatmul of x {x.shape} by a weight {packed.shape} into out "
                         f"{out.shape}: shapes do not match")
    if (m_rows >= BLAS_MIN_ROWS or x.dtype != np.float32
            or (m_rows >= WIDE_MIN_ROWS and gemm.suits(m_rows, *packed.shape))):
        return functools.partial(_many_rows, x, packed, out)
    mins = _NO_MINS if packed.mins is None else packed.mins
    integer = intdot.prepare(x, packed.stored, packed.d, mins, out, packed.shift, packed.highs)

    def call() -> None:
        # NOTE: rows holding a NaN or an infinity, which the integer kernels cannot carry, are
        # dequantized first, as the reference does (through the offsets' sums an infinity
        # would meet itself, inf - inf = NaN, where the reference gives inf).
        if not integer():
            _many_rows(x, packed, out)

    return call


@jit(inline=True)
def _f32_dots(x: Any, w: Any, out: Any, m: int, lo: int, hi: int) -> None:
    # rows m.. of x against weight rows [lo, hi), one output at a time
    for n in range(lo, hi):
        for r in range(m, x.shape[0]):
            out[r, n] = fewrows.row_dot(x, w, r, n)


@jit()
def _f32_rows(x: Any, w: Any, out: Any, lo: int, hi: int) -> None:
    # Two weight rows by four activation rows per pass over K: eight sums, and each element
    # loaded serves two (weight) or four (activation) multiply-adds. The two weight rows stay
    # in L1 across the passes over the activation rows, so the weight streams from memory once.
    # (A call, not inlined: the serial and the OpenMP entry points then compile it once.)
    m_rows, k = x.shape
    n = lo
    while n + 2 <= hi:
        w0, w1 = w[n], w[n + 1]
        m = 0
        while m + 4 <= m_rows:
            x0, x1, x2, x3 = x[m], x[m + 1], x[m + 2], x[m + 3]
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
            for j in range(k):
                u, v = w0[j], w1[j]
                c0, c1, c2, c3 = x0[j], x1[j], x2[j], x3[j]
                a0 += c0 * u
                a1 += c1 * u
                a2 += c2 * u
                a3 += c3 * u
                b0 += c0 * v
                b1 += c1 * v
                b2 += c2 * v
                b3 += c3 * v
            out[m, n], out[m + 1, n], out[m + 2, n], out[m + 3, n] = a0, a1, a2, a3
            out[m, n + 1], out[m + 1, n + 1], out[m + 2, n + 1], out[m + 3, n + 1] = (
                b0, b1, b2, b3)
            m += 4
        _f32_dots(x, w, out, m, n, n + 2)
        n += 2
    _f32_dots(x, w, out, 0, n, hi)


@jit()
def _f32_gemv(x: Any, w: Any, out: Any) -> None:
    _f32_rows(x, w, out, 0, w.shape[0])


#: The `xt` of `_f32_gemv_split` for products that run as row dots only.
_NO_TRANSPOSE: Final = np.zeros((0, 0), np.float32)


@jit(parallel=True)
def _f32_gemv_split(x: Any, xt: Any, w: Any, out: Any, parts: int) -> None:
    # by `fewrows` tiles where x was transposed for them (xt has columns), else row dots; one
    # parallel region for both (each region costs seconds of compilation on a cold cache)
    n = w.shape[0]
    tiled = xt.shape[1] > 0
    grain = fewrows.WEIGHTS if tiled else 2  # whole tiles (or pairs of rows) per part
    share = -(-n // parts)
    step = -(-share // grain) * grain
    for t in prange(parts):
        lo, hi = min(n, t * step), min(n, t * step + step)
        if tiled:
            lo = fewrows.tiles(xt, w, out, lo, hi)
        _f32_rows(x, w, out, lo, hi)  # (tiled: the rows past the last whole tile)


def gemv(x: Array, w: Array, out: Array) -> None:
    """Out (M, N) = x (M, K) @ w (N, K).T for a few rows M, float32, reading w once.

    Why not BLAS: for a matrix-vector product OpenBLAS splits every call over all threads,
    and on a shared 2-core machine each split waits for a descheduled thread (a 3 MB GEMV took
    35 ms under load). For a few rows it packs the weight first, and runs at a fraction of
    memory speed (a 16-token prefill's products ran at 6 GB/s). Here long reductions per
    output stream the weight once, at memory speed; products large enough to pay for it are
    split over numba's spinning workers (see `pool`). From `fewrows.MIN_ROWS` rows on, the
    products run as `fewrows`' outer-product tiles instead.
    """
    prepare_gemv(x, w, out)()


def prepare_gemv(x: Array, w: Array, out: Array) -> Callable[[], None]:
    """`gemv`'s call on these arrays, made once (see `prepared`).

    With `fewrows`' tiles the call transposes x itself, at every run (a copy of its values).
    """
    n, k = w.shape
    parts = pool.parts(n, x.shape[0] * n * k, grain=16)
    tiled = x.shape[0] >= fewrows.MIN_ROWS
    if tiled and x.shape[0] <= gemm.FEW_ROWS and threads.wide_products():
        # 16-float vectors: `gemm.few`'s 16 x 16 tiles (1.3-1.4x `fewrows`' 8-float ones)
        return functools.partial(gemm.few, x, w, out)
    if tiled:
        def call() -> None:
            xt = fewrows.transposed(x)
            if parts > 1:
                _f32_gemv_split(x, xt, w, out, parts)
            else:
                _f32_rows(x, w, out, fewrows.tiles(xt, w, out, 0, n), n)

        return call
    if parts > 1:
        return functools.partial(_f32_gemv_split, x, _NO_TRANSPOSE, w, out, parts)
    return functools.partial(_f32_gemv, x, w, out)
