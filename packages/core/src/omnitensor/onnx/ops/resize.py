"""ONNX `Resize` (and the old `Upsample`): one interpolation matrix per resized axis.

Resize is separable and linear in its data, so along each axis it is an (out, in) matrix, plus
a constant where `tf_crop_and_resize` extrapolates. Rather than re-deriving every coordinate
mode, rounding rule and cubic variant, the matrix is read off onnx's own reference operator by
resizing an identity (and zeros, for the constant), once per trace. Nearest modes become a
gather (exact for inf/NaN), the others a matrix product along the axis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...tensor.interop import from_numpy
from ...tensor.tensor import Tensor
from ..registry import Ctx, Value, handler

Attrs = Mapping[str, Any]

_ATTRS = ("antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a",
          "exclude_outside", "extrapolation_value", "keep_aspect_ratio_policy", "mode",
          "nearest_mode")


def _check(attrs: Attrs) -> str | None:
    mode = attrs.get("mode", "nearest")
    return None if mode in ("nearest", "linear", "cubic") else f"mode={mode!r}"


def _plan(shape: tuple[int, ...], scales: np.ndarray[Any, Any] | None,
          sizes: np.ndarray[Any, Any] | None, axes: list[int], policy: str
          ) -> tuple[list[float], list[int]]:
    """Per-axis scale and output size, as the operator defines them."""
    rank = len(shape)
    full_scales = [1.0] * rank
    out = list(shape)
    if sizes is not None and sizes.size:
        wanted = [int(v) for v in sizes.reshape(-1)]
        if policy == "stretch":
            for a, size in zip(axes, wanted, strict=True):
                full_scales[a], out[a] = size / shape[a], size
        else:
            ratios = [size / shape[a] for a, size in zip(axes, wanted, strict=True)]
            common = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a] = common
                out[a] = int(np.floor(common * shape[a] + 0.5))
    elif scales is not None and scales.size:
        for a, scale in zip(axes, scales.reshape(-1), strict=True):
            full_scales[a] = float(scale)
            out[a] = int(np.floor(shape[a] * float(scale)))
    return full_scales, out


def _axis_matrix(attrs: Attrs, opset: int, length: int, scale: float, out: int,
                 roi: tuple[float, float] | None, dtype: np.dtype[Any]
                 ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """(W, c) with ``resize(x) = W @ x + c`` along one axis of `length` -> `out`."""
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    node_attrs = {k: v for k, v in attrs.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], **node_attrs)
    graph = helper.make_graph(
        [node], "probe",
        [helper.make_tensor_value_info("x", onnx.TensorProto.DOUBLE, [length, length]),
         helper.make_tensor_value_info("roi", onnx.TensorProto.FLOAT, [4]),
         helper.make_tensor_value_info("scales", onnx.TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 13))])
    run = ReferenceEvaluator(model)
    lo, hi = roi if roi is not None else (0.0, 1.0)
    feeds = {"roi": np.asarray([0, lo, 1, hi], np.float32),
             "scales": np.asarray([1.0, scale], np.float32)}
    eye: dict[str, Any] = {"x": np.eye(length), **feeds}
    zeros: dict[str, Any] = {"x": np.zeros((length, length)), **feeds}
    on_eye: Any = run.run(None, eye)  # onnx types this loosely: a list of arrays
    on_zeros: Any = run.run(None, zeros)
    identity = np.asarray(on_eye[0])  # (length, out)
    const = np.asarray(on_zeros[0])[0]
    if identity.shape[1] != out:  # float scales can land one short: pad with the last column
        identity = identity[:, :out] if identity.shape[1] > out else np.pad(
            identity, ((0, 0), (0, out - identity.shape[1])), mode="edge")
        const = np.resize(const, out)
    weights = (identity - const[None, :]).T  # (out, length)
    return weights.astype(dtype), const.astype(dtype)


def _resize(ctx: Ctx, attrs: Attrs, x: Value, roi: Value, scales: Value, sizes: Value
            ) -> Tensor:
    t = ctx.tensor(x)
    shape = tuple(t.shape)
    rank = len(shape)
    axes = [a + rank if a < 0 else a for a in attrs.get("axes", list(range(rank)))]
    scale_arr = None if scales is None else np.asarray(scales, np.float64)
    size_arr = None if sizes is None else np.asarray(sizes, np.int64)
    per_scale, out = _plan(shape, scale_arr, size_arr, axes,
                           attrs.get("keep_aspect_ratio_policy", "stretch"))
    roi_arr = None if roi is None or np.asarray(roi).size == 0 else np.asarray(
        roi, np.float64).reshape(-1)
    mode = attrs.get("mode", "nearest")
    tf_crop = attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize"
    work = t if mode == "nearest" or t.dtype.is_floating else t.astype(dt.float32)
    for a in range(rank):
        if a not in axes:
            continue
        k = axes.index(a)
        roi_a = None
        if roi_arr is not None and tf_crop:
            n = len(axes) if roi_arr.size == 2 * len(axes) else rank
            idx = k if n == len(axes) else a
            roi_a = (float(roi_arr[idx]), float(roi_arr[idx + n]))
        if out[a] == shape[a] and per_scale[a] == 1.0 and not tf_crop:
            continue
        weights, const = _axis_matrix(attrs, ctx.opset, shape[a], per_scale[a], out[a],
                                      roi_a, np.dtype(np.float64))
        if mode == "nearest" and not const.any() and np.all(
                (weights == 0) | (weights == 1)) and np.all(weights.sum(1) == 1):
            index = from_numpy(weights.argmax(1).astype(np.int32))
            work = Tensor._apply("gather", work, index, axis=a)
            continue
        moved = work if a == rank - 1 else work.permute(
            *[d for d in range(rank) if d != a], a)
        w = from_numpy(weights.T.astype(work.dtype.np))  # (in, out)
        res = moved @ w
        if const.any():
            res = res + from_numpy(const.astype(work.dtype.np))
        if a != rank - 1:
            back = list(range(rank - 1))
            back.insert(a, rank - 1)
            res = res.permute(*back)
        work = res
    return work if work.dtype == t.dtype else work.astype(t.dtype)


@handler("Resize", since=11, attributes=_ATTRS, check=_check, static=(1, 2, 3))
def _resize_handler(ctx: Ctx, attrs: Attrs, x: Value, roi: Value = None, scales: Value = None,
                    sizes: Value = None) -> Tensor:
    return _resize(ctx, attrs, x, roi, scales, sizes)


@handler("Upsample", since=9, attributes=("mode",), check=_check, static=(1,))
def _upsample(ctx: Ctx, attrs: Attrs, x: Value, scales: Value) -> Tensor:
    return _resize(ctx, {"mode": attrs.get("mode", "nearest"),
                         "coordinate_transformation_mode": "asymmetric",
                         "nearest_mode": "floor"}, x, None, scales, None)
