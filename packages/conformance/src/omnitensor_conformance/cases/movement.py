"""Op-specific samples of the movement family (compared exactly: no arithmetic happens).

reshape, broadcast_in_dim, transpose, slice, concatenate, pad, reverse.
"""

from __future__ import annotations

from collections.abc import Iterator

from omnitensor.dtypes import DType
from omnitensor.ir.types import TensorType

from ..case import Arg, Sample, cases, sample


def _t(dtype: DType, *shape: int) -> Arg:
    return Arg(TensorType(shape, dtype), "edges" if dtype.is_floating else "full")


@cases("reshape")
def _reshape(dtype: DType) -> Iterator[Sample]:
    yield sample("split", [_t(dtype, 6, 10)], lambda b, x: b.emit("reshape", x, shape=(3, 2, 5, 2)))
    yield sample("flatten", [_t(dtype, 3, 4, 5)], lambda b, x: b.emit("reshape", x, shape=(60,)))
    yield sample("to_scalar", [_t(dtype, 1, 1)], lambda b, x: b.emit("reshape", x, shape=()))
    yield sample("empty", [_t(dtype, 0, 4)], lambda b, x: b.emit("reshape", x, shape=(2, 0, 3)))
    yield sample("of_transpose", [_t(dtype, 4, 6)], lambda b, x: b.emit(
        "reshape", b.emit("transpose", x, perm=(1, 0)), shape=(24,)))  # (6, 4) -> (24,)


@cases("broadcast_in_dim")
def _broadcast(dtype: DType) -> Iterator[Sample]:
    bid = "broadcast_in_dim"
    yield sample("scalar", [_t(dtype)], lambda b, x: b.emit(bid, x, shape=(3, 4), dims=()))
    yield sample("row", [_t(dtype, 5)], lambda b, x: b.emit(bid, x, shape=(3, 5), dims=(1,)))
    yield sample("col", [_t(dtype, 3)], lambda b, x: b.emit(bid, x, shape=(3, 5), dims=(0,)))
    yield sample("unit", [_t(dtype, 3, 1)], lambda b, x: b.emit(bid, x, shape=(2, 3, 4),
                                                                dims=(1, 2)))
    yield sample("permuting", [_t(dtype, 4, 3)], lambda b, x: b.emit(bid, x, shape=(3, 4),
                                                                     dims=(1, 0)))
    yield sample("empty", [_t(dtype, 0)], lambda b, x: b.emit(bid, x, shape=(2, 0), dims=(1,)))


@cases("transpose")
def _transpose(dtype: DType) -> Iterator[Sample]:
    yield sample("2d", [_t(dtype, 7, 13)], lambda b, x: b.emit("transpose", x, perm=(1, 0)))
    yield sample("3d", [_t(dtype, 2, 3, 5)], lambda b, x: b.emit("transpose", x, perm=(2, 0, 1)))
    yield sample("0d", [_t(dtype)], lambda b, x: b.emit("transpose", x, perm=()))
    yield sample("empty", [_t(dtype, 0, 3)], lambda b, x: b.emit("transpose", x, perm=(1, 0)))
    yield sample("large", [_t(dtype, 129, 257)], lambda b, x: b.emit("transpose", x, perm=(1, 0)))


@cases("slice")
def _slice(dtype: DType) -> Iterator[Sample]:
    yield sample("strided", [_t(dtype, 9, 10)], lambda b, x: b.emit(
        "slice", x, start=(1, 0), limit=(9, 10), stride=(3, 2)))
    yield sample("empty", [_t(dtype, 4, 5)], lambda b, x: b.emit(
        "slice", x, start=(2, 0), limit=(2, 5), stride=(1, 1)))
    yield sample("of_transpose", [_t(dtype, 6, 8)], lambda b, x: b.emit(
        "slice", b.emit("transpose", x, perm=(1, 0)), start=(1, 1), limit=(8, 6), stride=(2, 2)))


@cases("concatenate")
def _concatenate(dtype: DType) -> Iterator[Sample]:
    yield sample("axis0", [_t(dtype, 2, 3), _t(dtype, 4, 3)],
                 lambda b, x, y: b.emit("concatenate", x, y, axis=0))
    yield sample("axis_neg", [_t(dtype, 2, 3), _t(dtype, 2, 0), _t(dtype, 2, 5)],
                 lambda b, x, y, z: b.emit("concatenate", x, y, z, axis=-1))
    yield sample("single", [_t(dtype, 3)], lambda b, x: b.emit("concatenate", x, axis=0))


@cases("pad")
def _pad(dtype: DType) -> Iterator[Sample]:
    yield sample("edges", [_t(dtype, 3, 4), _t(dtype)], lambda b, x, v: b.emit(
        "pad", x, v, low=(1, 0), high=(2, 3), interior=(0, 0)))
    yield sample("interior", [_t(dtype, 3, 4), _t(dtype)], lambda b, x, v: b.emit(
        "pad", x, v, low=(0, 1), high=(0, 1), interior=(1, 2)))
    yield sample("crop", [_t(dtype, 5, 6), _t(dtype)], lambda b, x, v: b.emit(
        "pad", x, v, low=(-1, -2), high=(1, -1), interior=(0, 1)))


@cases("reverse")
def _reverse(dtype: DType) -> Iterator[Sample]:
    yield sample("one_axis", [_t(dtype, 4, 5)], lambda b, x: b.emit("reverse", x, axes=(1,)))
    yield sample("all_axes", [_t(dtype, 2, 3, 4)], lambda b, x: b.emit("reverse", x,
                                                                       axes=(0, 1, 2)))
    yield sample("none", [_t(dtype, 3)], lambda b, x: b.emit("reverse", x, axes=()))
