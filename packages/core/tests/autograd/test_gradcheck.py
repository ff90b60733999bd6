"""Every differentiable op's gradient rule against finite differences (float64, ref backend)."""

from __future__ import annotations

import numpy as np
import pytest

from omnitensor.autograd.gradcheck import gradcheck, gradgradcheck
from omnitensor.autograd.samples import GradSample, grad_samples
from omnitensor.autograd.vjp import registered
from omnitensor.ir.opdef import Trait, all_ops

SAMPLES = grad_samples()


def _differentiable() -> list[str]:
    return [name for name, op in all_ops().items() if not op.has(Trait.NON_DIFFERENTIABLE)]


def test_every_differentiable_op_has_a_rule() -> None:
    missing = [name for name in _differentiable() if name not in registered()]
    assert not missing, (
        f"ops without a gradient rule (add one or mark NON_DIFFERENTIABLE): {missing}")


def test_every_differentiable_op_has_a_gradcheck_sample() -> None:
    covered = {s.op for s in SAMPLES}
    missing = [name for name in _differentiable() if name not in covered]
    assert not missing, f"ops without a gradient sample in autograd/samples.py: {missing}"


def test_no_rule_for_non_differentiable_ops() -> None:
    marked = [name for name, op in all_ops().items() if op.has(Trait.NON_DIFFERENTIABLE)]
    assert not set(marked) & set(registered())


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: f"{s.op}-{s.name}")
def test_gradient_matches_finite_differences(sample: GradSample) -> None:
    arrays = sample.arrays(np.random.default_rng(0))
    gradcheck(sample.fn, *arrays, eps=sample.eps, atol=sample.atol, rtol=1e-4)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: f"{s.op}-{s.name}")
def test_second_derivative_matches_finite_differences(sample: GradSample) -> None:
    arrays = sample.arrays(np.random.default_rng(1))
    gradgradcheck(sample.fn, *arrays, eps=max(sample.eps, 1e-5), atol=sample.atol, rtol=1e-4)
