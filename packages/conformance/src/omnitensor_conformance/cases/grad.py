"""Gradient cases (mode ``grad``): the backward program of every differentiable op.

Each case is the vector-Jacobian product of one op sample from `omnitensor.autograd.samples`
(the same table the core checks against finite differences): inputs are the op's float operands
plus the cotangent of its result, outputs are the operands' cotangents, recorded by autograd with
the op's own rule. Running it on a backend checks that backend's execution of the backward pass
against the reference. Rows are named ``grad.<op>``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from omnitensor.dtypes import DType, float32, float64
from omnitensor.ir.builder import Builder
from omnitensor.ir.types import TensorType, Value

from ..case import Arg, Case, register_case_source
from ._trace import emit as _emit
from ._trace import placeholder as _placeholder

_DTYPES = (float32, float64)


def _fill(kind: str) -> Any:
    from omnitensor.autograd.samples import fill_array

    def fill(rng: np.random.Generator, type: Any) -> Any:
        return fill_array(kind, rng, type.shape, type.dtype.np)

    return fill


def _vjp_tensors(sample: Any, primals: Sequence[Any], cotangent: Any) -> list[Any]:
    """The cotangents of `primals` (lazy tensors over placeholders)."""
    from omnitensor.autograd.engine import run_backward
    from omnitensor.autograd.mode import enable_grad
    from omnitensor.tensor.creation import zeros_like

    for p in primals:
        p.requires_grad = True
    with enable_grad():
        out = sample.fn(*primals)
    found = run_backward([out], [cotangent]) if out.requires_grad else {}
    grads = []
    for p in primals:
        hit = found.get(id(p._grad_fn))
        grads.append(zeros_like(p) if hit is None else hit[1])
    return grads


def _out_type(sample: Any, dtype: DType) -> TensorType:
    from omnitensor.autograd.mode import no_grad
    from omnitensor.tensor.interop import from_numpy

    with no_grad():
        out = sample.fn(*(from_numpy(np.zeros(s, dtype.np)) for s in sample.shapes))
    return TensorType(out.shape, out.dtype)


def _portable(sample: Any) -> bool:
    """False for samples of quantized ops: they read large constant weights, not inputs.

    Anything else that fails to build is a broken gradient rule or sample and must fail (it is
    not caught here).
    """
    from omnitensor.ir.opdef import Trait, get_op

    return not get_op(sample.op).has(Trait.QUANTIZED)


def grad_cases() -> Iterator[Case]:
    """One case per (gradient sample, float dtype)."""
    from omnitensor.autograd.samples import grad_samples

    for sample in grad_samples():
        if not _portable(sample):
            continue
        for dtype in _DTYPES:
            types = [TensorType(s, dtype) for s in sample.shapes] + [_out_type(sample, dtype)]
            args = tuple(Arg(t, _fill(sample.fill)) for t in types[:-1]) + (
                Arg(types[-1], "normal"),)

            def build(builder: Builder, *values: Value, sample: Any = sample,
                      types: list[TensorType] = types) -> list[Value]:
                holders = [_placeholder(i, t) for i, t in enumerate(types)]
                grads = _vjp_tensors(sample, holders[:-1], holders[-1])
                return _emit(builder, values, grads)

            yield Case(f"grad.{sample.op}", dtype.name, sample.name, args, build,
                       source="grad", mode="grad", check="nmse")


register_case_source("grad", grad_cases, mode="grad")
