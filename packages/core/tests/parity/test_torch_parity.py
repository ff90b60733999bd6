"""An MLP and a transformer block against torch.autograd: same weights, same inputs, same grads.

Runs in CI in the `parity` tox environment (torch==2.13.0), where a skip counts as a failure.
"""

from __future__ import annotations

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import nn
from omnitensor.functional import cross_entropy

torch = pytest.importorskip("torch")


def _load(module: nn.Module, torch_module: object) -> None:
    state = {k: v.detach().numpy() for k, v in torch_module.state_dict().items()}  # type: ignore[attr-defined]
    module.load_state_dict(state)


def _check_grads(module: nn.Module, torch_module: object, rtol: float = 1e-4,
                 atol: float = 1e-5) -> None:
    theirs = dict(torch_module.named_parameters())  # type: ignore[attr-defined]
    for name, p in module.named_parameters():
        assert p.grad is not None, name
        np.testing.assert_allclose(p.grad.numpy(), theirs[name].grad.numpy(), rtol=rtol,
                                   atol=atol, err_msg=name)


class _TorchMLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: object) -> object:
        return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh"))


def test_mlp_matches_torch_autograd() -> None:
    torch.manual_seed(0)
    ref = _TorchMLP().double()
    mine = nn.MLP(6, 16, 4, activation="gelu_tanh", dtype=ot.float64)
    _load(mine, ref)
    x = np.random.default_rng(0).normal(size=(5, 6))
    y = np.array([0, 3, 1, 2, 3])
    loss_t = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
    loss_t.backward()
    loss = cross_entropy(mine(ot.from_numpy(x)), ot.from_numpy(y.astype(np.int32)))
    loss.backward()
    assert loss.item() == pytest.approx(loss_t.item(), rel=1e-10)
    _check_grads(mine, ref, rtol=1e-8, atol=1e-10)


class _TorchBlock(torch.nn.Module):
    """Pre-norm GPT-2-style block written with torch ops, names matching TransformerBlock."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(dim)
        self.norm2 = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.ModuleDict({n: torch.nn.Linear(dim, dim) for n in "qkvo"})
        self.mlp = torch.nn.ModuleDict({"fc1": torch.nn.Linear(dim, 4 * dim),
                                        "fc2": torch.nn.Linear(4 * dim, dim)})

    def forward(self, x: object) -> object:
        b, t, d = x.shape  # type: ignore[attr-defined]
        h = self.norm1(x)

        def heads(z: object) -> object:
            return z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)  # type: ignore[attr-defined]

        q, k, v = (heads(self.attn[n](h)) for n in "qkv")
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn["o"](a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp["fc2"](torch.nn.functional.gelu(self.mlp["fc1"](self.norm2(x))))


def test_transformer_block_matches_torch_autograd() -> None:
    torch.manual_seed(1)
    ref = _TorchBlock(16, 4).double()
    mine = nn.TransformerBlock(16, 4, dtype=ot.float64)
    _load(mine, ref)
    x = np.random.default_rng(1).normal(size=(2, 5, 16))
    xt = torch.from_numpy(x).requires_grad_()
    out_t = ref(xt)
    (out_t * out_t).mean().backward()
    xo = ot.from_numpy(x).requires_grad_()
    out = mine(xo)
    (out * out).mean().backward()
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-8, atol=1e-10)
    _check_grads(mine, ref, rtol=1e-8, atol=1e-10)
