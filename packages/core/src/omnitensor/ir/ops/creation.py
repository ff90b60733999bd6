"""Creation ops: iota, constant and the counter-based `rng`, plus the threefry2x32 helper.

Random numbers are a pure function of (key, shape, dtype, distribution, stream), so every
backend reproduces them bit for bit; key splitting is done by the tensor layer on top of `rng`.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from ...dtypes import ALL, FLOATING, NUMERIC, DType, as_dtype, bfloat16, float16, float32, float64
from ...dtypes import uint32 as u32
from ...errors import DTypeError, OmnitensorError, ShapeError
from ..opdef import OpView, Trait, attribute, operand, primitive
from ..types import TensorType
from . import _checks

__all__ = [
    "ConstantView",
    "IotaView",
    "RngView",
    "match_constant",
    "match_iota",
    "match_rng",
    "threefry2x32",
]

Array = np.ndarray[Any, Any]


def _dtype_attr(op: str, dtype: Any) -> DType:
    if not isinstance(dtype, DType):
        raise DTypeError(f"{op}: attribute 'dtype' must be a DType (got {dtype!r})", op=op)
    return dtype


@primitive("iota", traits=Trait.CREATION | Trait.NON_DIFFERENTIABLE, dtypes=NUMERIC)
class IotaView(OpView):
    """``0, 1, 2, ...`` along `dimension` of a tensor of `shape`, repeated along the other dims.

    ``out[i0, ..., ik] = i_dimension`` converted to `dtype`. For integer dtypes an index beyond
    the dtype's range wraps (as `convert` does); float16/bfloat16 round indices they cannot hold
    to nearest even (float16 is exact up to 2048, bfloat16 up to 256). A 0-d shape has no
    dimension, so `shape` needs rank >= 1.
    """

    shape: tuple[int, ...] = attribute()
    dimension: int = attribute()
    dtype: DType = attribute()

    @staticmethod
    def infer(*, shape: tuple[int, ...], dimension: int, dtype: DType) -> TensorType:
        out = TensorType(_checks.shape_attr("iota", shape), _dtype_attr("iota", dtype))
        _checks.axis("iota", out, dimension)
        return out

    @staticmethod
    def reference(*, shape: tuple[int, ...], dimension: int, dtype: DType) -> Array:
        dim = dimension % len(shape)
        line = np.arange(shape[dim], dtype=np.int64).astype(dtype.np)
        expanded = [1] * len(shape)
        expanded[dim] = shape[dim]
        return np.ascontiguousarray(np.broadcast_to(line.reshape(expanded), shape))


@primitive("constant", traits=Trait.CREATION, dtypes=ALL)
class ConstantView(OpView):
    """A literal tensor: `value` is a numpy ndarray whose shape and dtype are the result type.

    The array's dtype must be an omnitensor dtype (float64 stays float64: convert a Python
    literal before recording it). The reference returns a read-only view of `value`, so no
    later kernel can change the literal in place.
    """

    value: Array = attribute()

    @staticmethod
    def infer(*, value: Array) -> TensorType:
        if not isinstance(value, np.ndarray):
            raise DTypeError(
                f"constant: value must be a numpy ndarray (got {type(value).__name__}); "
                f"wrap it with numpy.asarray",
                op="constant",
            )
        return TensorType(value.shape, as_dtype(value.dtype))

    @staticmethod
    def reference(*, value: Array) -> Array:
        out = value.view()
        out.flags.writeable = False
        return out


# --- threefry2x32 ------------------------------------------------------------------------------

_MASK: Final = 0xFFFFFFFF
# Rotation constants and key-schedule parity of Threefry-2x32 (Salmon et al., SC'11; Random123).
_ROTATIONS: Final = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY: Final = 0x1BD11BDA


def threefry2x32(key0: Any, key1: Any, ctr0: Any, ctr1: Any) -> tuple[Array, Array]:
    """Threefry-2x32 with 20 rounds, as Random123 and JAX define it, on uint32 arrays.

    Args:
        key0: first key word (uint32 scalar or array, broadcast with the others).
        key1: second key word.
        ctr0: first counter word.
        ctr1: second counter word.

    Returns:
        The two output words, uint32 arrays of the broadcast shape.
    """
    k0, k1, c0, c1 = (np.asarray(v, dtype=np.uint32) for v in (key0, key1, ctr0, ctr1))
    k0, k1, c0, c1 = np.broadcast_arrays(k0, k1, c0, c1)
    # NOTE: everything stays a uint32 *array* (never a numpy scalar), so additions wrap modulo
    # 2**32 silently, which is the arithmetic Threefry is defined in.
    k0, k1 = k0.astype(np.uint32).reshape(-1), k1.astype(np.uint32).reshape(-1)
    shape = c0.shape
    ks = (k0, k1, k0 ^ k1 ^ np.uint32(_PARITY))
    x0 = c0.astype(np.uint32).reshape(-1) + ks[0]
    x1 = c1.astype(np.uint32).reshape(-1) + ks[1]
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = (x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))
            x1 = x1 ^ x0
        # Key injection after every 4 rounds: words ks[(s) % 3], ks[(s + 1) % 3] + s.
        s = group + 1
        x0 = x0 + ks[s % 3]
        x1 = x1 + ks[(s + 1) % 3] + np.uint32(s)
    return x0.reshape(shape), x1.reshape(shape)


_MANTISSA: Final[dict[DType, int]] = {float16: 10, bfloat16: 7, float32: 23, float64: 52}
_DISTRIBUTIONS: Final = ("bits", "uniform", "normal")


@primitive(
    "rng",
    traits=Trait.CREATION | Trait.RANDOM | Trait.NON_DIFFERENTIABLE,
    dtypes=FLOATING + (u32,),
    ulp=2,
)
class RngView(OpView):
    """Counter-based random numbers of `shape` and `dtype` from a uint32[2] `key`.

    Backend-independent recipe (reproduce it exactly). Let ``i`` be the row-major flat index of
    an element (``0 <= i < size <= 2**32``) and ``(w0, w1) = threefry2x32(key[0], key[1], i,
    stream)``: Threefry-2x32, 20 rounds, as Random123/JAX define it, counter words ``(i,
    stream)``. Then, per `distribution`:

    - ``"bits"`` (dtype uint32): ``w0``.
    - ``"uniform"`` (float dtypes, values in [0, 1)): with ``m`` the dtype's mantissa width
      (float16 10, bfloat16 7, float32 23, float64 52), ``(w0 >> (32 - m)) * 2**-m`` for
      ``m <= 23`` and ``((w0 << 20) | (w1 >> 12)) * 2**-52`` for float64. The value is exact in
      the dtype, so every backend gives the same bits (it equals setting the top mantissa bits
      of 1.0 and subtracting 1.0).
    - ``"normal"`` (float dtypes, standard normal): Box-Muller on ``u1 = w0 * 2**-32`` and
      ``u2 = w1 * 2**-32`` (exact in float64): ``sqrt(-2 * log(1 - u1)) * cos(2 * pi * u2)``,
      evaluated in float64; float64 returns it, the other dtypes round it to float32 and then
      (float16/bfloat16) from float32 to `dtype`, nearest-even each time. ``1 - u1 >= 2**-32``,
      so the result is finite and ``|z| <= 6.67``. Only here may backends differ (within the
      op's ULP budget: log and cos need not be correctly rounded).

    `stream` (a uint32) separates independent draws from one key. Keys are derived by the
    tensor layer: ``split(key, n)`` is ``rng(key, shape=(n, 2), dtype=uint32,
    distribution="bits", stream=s)`` with a stream reserved for key derivation, and a
    ``fold_in``-style derivation is ``rng(key, shape=(2,), dtype=uint32, distribution="bits",
    stream=data)``; the words of the result are the new key.
    """

    key = operand(dtypes=(u32,))
    shape: tuple[int, ...] = attribute()
    dtype: DType = attribute()
    distribution: str = attribute(default="uniform")
    stream: int = attribute(default=0)

    @staticmethod
    def infer(key: TensorType, *, shape: tuple[int, ...], dtype: DType, distribution: str,
              stream: int) -> TensorType:
        out = TensorType(_checks.shape_attr("rng", shape), _dtype_attr("rng", dtype))
        if key.shape != (2,):
            raise ShapeError(
                f"rng: key must have shape (2,) (got {key.shape}, expected (2,))",
                op="rng",
                shapes=[key.shape],
            )
        if distribution not in _DISTRIBUTIONS:
            raise OmnitensorError(
                f"rng: unknown distribution {distribution!r} (expected one of "
                f"{', '.join(_DISTRIBUTIONS)})",
                op="rng",
            )
        allowed = (u32,) if distribution == "bits" else FLOATING
        if dtype not in allowed:
            raise DTypeError(
                f"rng: distribution {distribution!r} cannot give dtype {dtype} (expected one "
                f"of {', '.join(d.name for d in allowed)})",
                op="rng",
                dtype=dtype.name,
            )
        word = _checks.int_scalar("rng", "stream", stream)
        if not 0 <= word <= _MASK:
            raise OmnitensorError(
                f"rng: stream must be a uint32 (got {word}, expected 0 <= stream < 2**32)",
                op="rng",
            )
        if out.size > _MASK + 1:
            raise ShapeError(
                f"rng: too many elements for 32-bit counters (got shape {out.shape}, expected "
                f"at most 2**32 elements); draw in pieces with different streams",
                op="rng",
                shapes=[out.shape],
            )
        return out

    @staticmethod
    def reference(key: Array, *, shape: tuple[int, ...], dtype: DType, distribution: str,
                  stream: int) -> Array:
        size = int(np.prod(shape, dtype=np.int64))
        counter = np.arange(size, dtype=np.uint64).astype(np.uint32)
        w0, w1 = threefry2x32(key[0], key[1], counter, np.uint32(stream))
        if distribution == "bits":
            return w0.reshape(shape)
        if distribution == "uniform":
            m = _MANTISSA[dtype]
            if m <= 23:
                mantissa = (w0 >> np.uint32(32 - m)).astype(np.float64)
            else:
                high = w0.astype(np.uint64) << np.uint64(20)
                mantissa = (high | (w1 >> np.uint32(12)).astype(np.uint64)).astype(np.float64)
            return (mantissa * 2.0**-m).astype(dtype.np).reshape(shape)
        u1 = w0.astype(np.float64) * 2.0**-32
        u2 = w1.astype(np.float64) * 2.0**-32
        z = np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * np.pi * u2)
        if dtype != float64:
            # The documented float32 step: ml_dtypes rounds float64 -> bfloat16 through float32
            # anyway, and saying so keeps float16 and bfloat16 on one rule.
            z = z.astype(np.float32)
        return z.astype(dtype.np).reshape(shape)


match_iota = IotaView.match
match_constant = ConstantView.match
match_rng = RngView.match
