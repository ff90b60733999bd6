"""Module bookkeeping, custom module backward, layers, optimizers and their one-program steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import nn
from omnitensor.errors import OmnitensorError, ShapeError
from omnitensor.tensor.realize import stats


def _model() -> nn.Module:
    ot.manual_seed(0)
    return nn.MLP(3, 4, 2)


def test_dotted_names_and_state_dict_round_trip() -> None:
    m = _model()
    assert [n for n, _ in m.named_parameters()] == ["fc1.weight", "fc1.bias", "fc2.weight",
                                                     "fc2.bias"]
    state = {k: v.numpy() for k, v in m.state_dict().items()}
    other = _model()
    ot.manual_seed(5)
    other = nn.MLP(3, 4, 2)
    assert other.load_state_dict(state) == ([], [])
    np.testing.assert_array_equal(other.fc1.weight.numpy(), state["fc1.weight"])


def test_load_state_dict_reports_missing_and_unexpected() -> None:
    m = _model()
    state = {k: v.numpy() for k, v in m.state_dict().items()}
    del state["fc2.bias"]
    state["extra"] = np.zeros(1)
    with pytest.raises(OmnitensorError, match=r"missing: \['fc2.bias'\].*unexpected: \['extra'\]"):
        m.load_state_dict(state)
    keys = m.load_state_dict(state, strict=False)
    assert keys.missing_keys == ["fc2.bias"] and keys.unexpected_keys == ["extra"]
    state["fc1.bias"] = np.zeros(7)
    with pytest.raises(ShapeError, match="fc1.bias"):
        m.load_state_dict(state, strict=False)


def test_train_eval_and_dropout_keys() -> None:
    drop = nn.Dropout(0.5, seed=1)
    x = ot.ones(64)
    a, b = drop(x).numpy(), drop(x).numpy()
    assert not np.array_equal(a, b)  # the key advances: a new mask each call
    assert set(np.unique(a)) <= {0.0, 2.0}
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), np.ones(64))


class LinearManual(nn.Linear):
    """A Linear whose whole forward has a hand-written backward: one autograd node."""

    def backward(self, ctx: object, grad: ot.Tensor) -> tuple[tuple[ot.Tensor], dict[str, object]]:
        (x,) = ctx.args  # type: ignore[attr-defined]
        return (grad @ self.weight,), {"weight": grad.T @ x, "bias": grad.sum(axis=0)}


def test_module_custom_backward_matches_autograd() -> None:
    ot.manual_seed(3)
    manual = LinearManual(3, 2)
    auto = nn.Linear(3, 2)
    auto.load_state_dict(manual.state_dict())
    data = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    x1, x2 = ot.from_numpy(data).requires_grad_(), ot.from_numpy(data).requires_grad_()
    y = manual(x1)
    assert y.grad_fn.name == "LinearManual"  # one node for the module
    assert y.grad_fn.edges[0][0] is x1._grad_fn
    (y * y).sum().backward()
    (auto(x2) ** 2).sum().backward()
    np.testing.assert_allclose(x1.grad.numpy(), x2.grad.numpy(), rtol=1e-5)
    for name in ("weight", "bias"):
        np.testing.assert_allclose(getattr(manual, name).grad.numpy(),
                                   getattr(auto, name).grad.numpy(), rtol=1e-5)


def _train_steps(opt_factory: object, steps: int = 3) -> tuple[nn.Module, list[int]]:
    m = _model()
    opt = opt_factory(m.parameters())  # type: ignore[operator]
    x = ot.from_numpy(np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32))
    counts = []
    for _ in range(steps):
        loss = (m(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        before = stats.realizations
        opt.step()
        counts.append(stats.realizations - before)
    return m, counts


@pytest.mark.parametrize("factory", [
    lambda p: nn.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
    lambda p: nn.AdamW(p, lr=0.01),
], ids=["sgd", "adamw"])
def test_step_is_one_program_and_graphs_do_not_grow(factory: object) -> None:
    m, counts = _train_steps(factory)
    assert counts == [1, 1, 1]
    assert all(p.is_realized and p.is_leaf and p.requires_grad for p in m.parameters())


def test_adamw_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    w0 = np.array([[0.5, -1.0], [2.0, 0.1]], dtype=np.float32)
    mine = nn.Parameter(ot.from_numpy(w0.copy()))
    theirs = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = nn.AdamW([mine], lr=0.1, weight_decay=0.1)
    topt = torch.optim.AdamW([theirs], lr=0.1, weight_decay=0.1)
    for _ in range(3):
        opt.zero_grad()
        (mine * mine * mine).sum().backward()
        opt.step()
        topt.zero_grad()
        (theirs ** 3).sum().backward()
        topt.step()
    np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda groups: nn.AdamW(groups, lr=0.1, weight_decay=0.1),
    lambda groups: nn.SGD(groups, lr=0.1, momentum=0.9, dampening=0.3),
], ids=["adamw", "sgd"])
def test_parameters_skipped_by_a_step_keep_their_own_counts(make: Any) -> None:
    # one group shares its per-step scalars while every parameter steps; once a step skips a
    # parameter, the counts differ: the same updates as one group per parameter (never shared)
    def run(grouped: bool) -> tuple[list[np.ndarray], list[float]]:
        ps = [nn.Parameter(ot.from_numpy(np.array([0.5, -1.0 + i], np.float32)))
              for i in range(3)]
        opt = make([{"params": ps}] if grouped else [{"params": [p]} for p in ps])
        for step in range(5):
            opt.zero_grad()
            used = ps if step in (0, 3, 4) else ps[:2]  # steps 1, 2 leave the last one out
            sum((p * p * p).sum() for p in used).backward()
            opt.step()
            if step == 2:  # a resumed optimizer sees the differing counts too
                saved = opt.state_dict()
                opt = make([{"params": ps}] if grouped else [{"params": [p]} for p in ps])
                opt.load_state_dict(saved)
        state = opt.state_dict()["state"]
        return [p.numpy() for p in ps], [float(state[i]["step"]) for i in range(3)
                                         if "step" in state[i]]

    shared, alone = run(True), run(False)
    for a, b in zip(shared[0], alone[0], strict=True):
        np.testing.assert_array_equal(a, b)
    assert shared[1] == alone[1] == [5.0, 5.0, 3.0]


def test_optimizer_state_dict_resumes_identically() -> None:
    def run(resume: bool) -> np.ndarray:
        m = _model()
        opt = nn.AdamW(m.parameters(), lr=0.05)
        x = ot.from_numpy(np.ones((2, 3), np.float32))
        for i in range(4):
            if resume and i == 2:
                saved_m = {k: v.numpy() for k, v in m.state_dict().items()}
                saved_o = opt.state_dict()
                m = _model()
                m.load_state_dict(saved_m)
                opt = nn.AdamW(m.parameters(), lr=0.05)
                opt.load_state_dict(saved_o)
            opt.zero_grad()
            (m(x) ** 2).sum().backward()
            opt.step()
        return m.fc1.weight.numpy()

    np.testing.assert_allclose(run(False), run(True), rtol=1e-6)


def test_clip_grad_norm_and_schedule() -> None:
    p = nn.Parameter(ot.tensor([3.0, 4.0]))
    (p * p).sum().backward()  # grad (6, 8), norm 10
    norm = nn.clip_grad_norm_([p], 1.0)
    assert norm.item() == pytest.approx(10.0)
    assert np.linalg.norm(p.grad.numpy()) == pytest.approx(1.0, rel=1e-4)
    opt = nn.SGD([p], lr=1.0)
    sched = nn.CosineWithWarmup(opt, warmup_steps=2, total_steps=10, min_lr=0.1)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    assert lrs[0] == pytest.approx(0.5) and lrs[1] == pytest.approx(1.0)
    assert lrs[-1] < lrs[2] and opt.param_groups[0]["lr"] == pytest.approx(0.1)


def test_clip_grad_norm_joins_every_gradient() -> None:
    a, w = nn.Parameter(ot.tensor([3.0, 4.0])), nn.Parameter(ot.tensor([[1.0, 2.0], [2.0, 4.0]]))
    unused = nn.Parameter(ot.tensor([5.0]))
    ((a * a).sum() + (w * w).sum()).backward()  # grads (6, 8) and 2w: norm sqrt(100 + 100)
    norm = nn.clip_grad_norm_([a, unused, w], 2.0)
    assert norm.item() == pytest.approx(np.sqrt(200.0))
    scale = 2.0 / np.sqrt(200.0)
    np.testing.assert_allclose(a.grad.numpy(), [6 * scale, 8 * scale], rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), [[2 * scale, 4 * scale], [4 * scale, 8 * scale]],
                               rtol=1e-5)
    assert unused.grad is None


def test_param_groups_have_their_own_hyperparameters() -> None:
    a, b = nn.Parameter(ot.tensor([1.0])), nn.Parameter(ot.tensor([1.0]))
    opt = nn.SGD([{"params": [a]}, {"params": [b], "lr": 0.0}], lr=0.5)
    (a + b).sum().backward()
    opt.step()
    assert a.item() == pytest.approx(0.5) and b.item() == pytest.approx(1.0)
    with pytest.raises(OmnitensorError, match="unknown hyperparameters"):
        nn.SGD([{"params": [a], "betas": 1}])


def test_kv_cache_decoding_matches_full_attention() -> None:
    ot.manual_seed(2)
    attn = nn.MultiHeadAttention(16, 4, n_kv_heads=2, rope=True)
    x = ot.randn(1, 6, 16).realize()
    full = attn(x).numpy()
    cache = attn.make_cache(1, 8)
    first = attn(x[:, :4], cache=cache, pos=0).numpy()
    rest = [attn(x[:, i : i + 1], cache=cache, pos=ot.tensor(i)).numpy() for i in (4, 5)]
    np.testing.assert_allclose(np.concatenate([first] + rest, axis=1), full, atol=1e-5)


def test_conv_and_pool_layers_shapes() -> None:
    ot.manual_seed(0)
    conv = nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
    y = nn.MaxPool2d(2)(conv(ot.randn(2, 4, 8, 8)))
    assert y.shape == (2, 8, 2, 2)
    assert nn.AvgPool2d(2)(y).shape == (2, 8, 1, 1)
