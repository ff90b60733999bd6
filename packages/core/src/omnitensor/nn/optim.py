"""Optimizers (SGD, AdamW), gradient clipping and the cosine-with-warmup schedule.

`step()` computes every new parameter and optimizer state lazily and realizes them all in ONE
program (``omnitensor.realize``), so graphs never grow across steps. Per-step scalars enter as
0-d tensors, not baked-in constants: the learning rate is a float64 handle per parameter group
(rebound whenever ``group["lr"]`` is set, e.g. by a schedule) and step counters are optimizer
state, so every step hits the same cached plan.

The whole training step (forward, ``backward``, clipping, ``step``) can run under
``omnitensor.compile``: state is created as zeros on first use, so the first step has the same
program as the others, and every counter lives in a tensor the compiled call rebinds. Other
hyperparameters (betas, eps, weight decay, momentum) are read when the step is traced.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..autograd.mode import no_grad
from ..errors import OmnitensorError
from ..ir.program import Role
from ..tensor.interop import from_numpy
from ..tensor.realize import tracing
from ..tensor.shape import concat
from ..tensor.tensor import Tensor, realize
from .module import assign

__all__ = ["SGD", "AdamW", "CosineWithWarmup", "Optimizer", "clip_grad_norm_"]


def _scalar(value: float) -> Tensor:
    """A 0-d float64 input tensor (a leaf, so its value is not part of the plan-cache key)."""
    return from_numpy(np.asarray(value, dtype=np.float64))


def _zeros_like(p: Tensor) -> Tensor:
    """Zero optimizer state shaped like `p`: a host leaf, so it can be made inside a trace."""
    t = from_numpy(np.zeros(p.shape, dtype=p.dtype.np))
    t._node.role = Role.STATE
    return t


def _counter() -> Tensor:
    t = _scalar(0.0)  # float64 counts exactly up to 2**53
    t._node.role = Role.STATE
    return t


class _Group(dict[str, Any]):
    """A parameter group whose learning rate is also held in a 0-d tensor handle.

    Setting ``group["lr"]`` (a schedule, `load_state_dict`) rebinds the handle, so a compiled
    training step, which reads the handle at every call, sees the new rate.
    """

    def __init__(self, items: Mapping[str, Any]) -> None:
        super().__init__(items)
        self.lr_tensor = _scalar(float(self["lr"]))

    def __setitem__(self, key: str, value: Any) -> None:
        super().__setitem__(key, value)
        if key == "lr":
            assign(self.lr_tensor, _scalar(float(value)))

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Set several entries (through `__setitem__`)."""
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


class Optimizer:
    """Base class: parameter groups, per-parameter state, one-program steps, state dicts.

    Args:
        params: tensors, or dicts ``{"params": [...], **hyperparameters}`` (parameter groups).
        defaults: hyperparameters a group does not set.
    """

    def __init__(self, params: Iterable[Any], defaults: Mapping[str, Any]) -> None:
        self.defaults = dict(defaults)
        items = list(params)
        if not items:
            raise OmnitensorError(f"{type(self).__name__}: got an empty parameter list")
        groups = items if isinstance(items[0], dict) else [{"params": items}]
        self.param_groups: list[_Group] = []
        for group in groups:
            full = {**self.defaults, **group, "params": list(group["params"])}
            unknown = set(full) - set(self.defaults) - {"params"}
            if unknown:
                raise OmnitensorError(f"{type(self).__name__}: unknown hyperparameters "
                                      f"{sorted(unknown)} (known: {sorted(self.defaults)})")
            self.param_groups.append(_Group(full))
        self.state: dict[int, dict[str, Any]] = {}  # by parameter position
        self._steps = _counter()
        # per group: whether every step so far updated every parameter of the group, so that
        # their step counters are equal and the per-step scalars (AdamW's bias corrections)
        # are computed once for the group, not once per parameter (see `step`)
        self._lockstep = [True] * len(self.param_groups)

    @property
    def steps(self) -> int:
        """How many times `step` ran (kept in a tensor, so compiled steps count too)."""
        return int(self._steps.item())

    @steps.setter
    def steps(self, value: int) -> None:
        assign(self._steps, _scalar(float(value)))

    def _params(self) -> list[Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    def zero_grad(self) -> None:
        """Forget every parameter's gradient."""
        for p in self._params():
            p.grad = None

    def step(self, *, realize_with: Sequence[Tensor] = ()) -> None:
        """Update every parameter that has a gradient; one program realizes the results.

        Args:
            realize_with: tensors to compute in the same program (the loss of the step), so
                reading them afterwards runs nothing more.
        """
        updated: list[Tensor] = []
        index = 0
        with no_grad():
            assign(self._steps, self._steps + 1.0)
            for at, group in enumerate(self.param_groups):
                # NOTE: a group whose parameters all step together shares one set of per-step
                # scalars: AdamW's two bias corrections were two small steps per parameter in
                # every plan (72 in a char-gpt training step). The counters stay per parameter
                # (what a state dict holds), and equal as long as no step skips a parameter.
                lockstep = self._lockstep[at] and all(p.grad is not None
                                                      for p in group["params"])
                self._lockstep[at] = lockstep
                shared: dict[str, Tensor] | None = {} if lockstep else None
                for p in group["params"]:
                    if p.grad is not None:
                        state = self.state.setdefault(index, {})
                        new = self._update(p, p.grad.astype(p.dtype), state, group, shared)
                        new._node.role = Role.PARAMETER
                        assign(p, new)
                        updated.append(p)
                        updated.extend(v for v in state.values() if isinstance(v, Tensor))
                    index += 1
            updated.append(self._steps)
        if tracing.get() is not None:
            return  # inside `omnitensor.compile`: the compiled call realizes and rebinds them
        if updated or realize_with:
            realize(*updated, *realize_with)
            for t in updated:
                if t._node.role is not Role.PARAMETER:
                    t._node.role = Role.STATE

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Any], group: _Group,
                shared: dict[str, Tensor] | None) -> Tensor:
        """The new value of `p` given its gradient `g`; updates `state` (its tensors).

        `shared` is a dict common to every parameter of `group` in this step when their step
        counters are known to be equal (None otherwise): scalars computed from the counter
        are made once there, by `_counted`, and reused.
        """
        raise NotImplementedError

    @staticmethod
    def _counted(state: dict[str, Any], shared: dict[str, Tensor] | None,
                 scalars: Any = None) -> tuple[Tensor, dict[str, Tensor]]:
        """(the step count before this step, scalars) for a parameter, counting this step.

        Increments ``state["step"]`` and returns ``scalars(count)`` (a dict of per-step
        tensors). With `shared`, the scalars are made for the group's first parameter and
        reused by the others (their counts are equal).
        """
        previous = state["step"]
        assign_state(state, "step", previous + 1.0)
        if shared is not None and "previous" in shared:
            return shared["previous"], shared
        made = {"previous": previous,
                **(scalars(state["step"]) if scalars is not None else {})}
        if shared is not None:
            shared.update(made)
        return previous, made

    def state_dict(self) -> dict[str, Any]:
        """Hyperparameters per group and state per parameter position (numpy copies)."""
        return {
            "steps": self.steps,
            "param_groups": [{k: v for k, v in g.items() if k != "params"} | {
                "n_params": len(g["params"])} for g in self.param_groups],
            "state": {i: {k: (v.numpy() if isinstance(v, Tensor) else v) for k, v in s.items()}
                      for i, s in self.state.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what `state_dict` returned (same parameter layout).

        Raises:
            OmnitensorError: when the group layout differs.
        """
        groups = state["param_groups"]
        if [g["n_params"] for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise OmnitensorError(
                f"{type(self).__name__}.load_state_dict: parameter groups differ (got sizes "
                f"{[g['n_params'] for g in groups]}, expected "
                f"{[len(g['params']) for g in self.param_groups]})")
        for mine, saved in zip(self.param_groups, groups, strict=True):
            mine.update({k: v for k, v in saved.items() if k != "n_params"})
        self.steps = int(state["steps"])
        self.state = {}
        for i, s in state["state"].items():
            restored: dict[str, Any] = {}
            for k, v in s.items():
                if isinstance(v, np.ndarray):
                    t = from_numpy(v.copy())
                    t._node.role = Role.STATE
                    restored[k] = t
                else:
                    restored[k] = v
            self.state[int(i)] = restored
        self._lockstep = [self._counts_equal(at) for at in range(len(self.param_groups))]

    def _counts_equal(self, group: int) -> bool:
        """Whether the parameters of group `group` all have the same step count (or none)."""
        first = sum(len(g["params"]) for g in self.param_groups[:group])
        counts: set[tuple[float, ...] | None] = set()
        for i in range(first, first + len(self.param_groups[group]["params"])):
            step = self.state.get(i, {}).get("step")
            value = step.numpy() if isinstance(step, Tensor) else step
            counts.add(None if step is None else tuple(np.asarray(value, np.float64).ravel()))
        return len(counts) <= 1


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, Nesterov and (coupled) weight decay.

    Math: ``g += wd p; buf = m buf + (1 - dampening) g; p -= lr (g + m buf if nesterov else buf)``.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov})

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Any], group: _Group,
                shared: dict[str, Tensor] | None) -> Tensor:
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        m = group["momentum"]
        if m:
            if "momentum_buffer" not in state:
                state["momentum_buffer"], state["step"] = _zeros_like(p), _counter()
            # buf = g on the first step (step == 0), m buf + (1 - dampening) g after: one
            # program for both, so a compiled step does not depend on which step it traced
            previous, _ = self._counted(state, shared)
            scale = (1.0 - previous.clip(max=1.0) * float(group["dampening"])).astype(g.dtype)
            buf = state["momentum_buffer"] * m + g * scale
            assign_state(state, "momentum_buffer", buf)
            g = g + buf * m if group["nesterov"] else buf
        return p - g * group.lr_tensor.astype(p.dtype)


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter).

    Math: ``p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
    p -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)``.
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: Sequence[float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                  "weight_decay": weight_decay})

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Any], group: _Group,
                shared: dict[str, Tensor] | None) -> Tensor:
        b1, b2 = group["betas"]
        if "exp_avg" not in state:  # zeros: m b1 + g (1 - b1) is then exactly g (1 - b1)
            state["step"], state["exp_avg"], state["exp_avg_sq"] = (
                _counter(), _zeros_like(p), _zeros_like(p))
        elif not isinstance(state["step"], Tensor):  # a state dict from before step tensors
            state["step"] = _scalar(float(state["step"]))
        lr = group.lr_tensor

        def corrections(t: Tensor) -> dict[str, Tensor]:
            # bias corrections and the decay factor in float64 (as Python floats were before)
            return {"step_size": lr / (1.0 - b1**t), "inv_corr": 1.0 / (1.0 - b2**t).sqrt(),
                    "decay": 1.0 - lr * float(group["weight_decay"])}

        _, scalars = self._counted(state, shared, corrections)
        m = state["exp_avg"] * b1 + g * (1.0 - b1)
        v = state["exp_avg_sq"] * b2 + g * g * (1.0 - b2)
        assign_state(state, "exp_avg", m)
        assign_state(state, "exp_avg_sq", v)
        step_size = scalars["step_size"].astype(p.dtype)
        inv_corr = scalars["inv_corr"].astype(p.dtype)
        decayed = p * scalars["decay"].astype(p.dtype)
        new: Tensor = decayed - step_size * m / (v.sqrt() * inv_corr + group["eps"])
        return new


def assign_state(state: dict[str, Any], name: str, value: Tensor) -> None:
    """Store a state tensor, rebinding the existing handle (so compiled steps see the update)."""
    if name in state:
        assign(state[name], value)
    else:
        state[name] = Tensor(value._node, value._index)


def clip_grad_norm_(params: Iterable[Tensor], max_norm: float) -> Tensor:
    """Scale gradients in place so that their global L2 norm is at most `max_norm`.

    Returns:
        The norm before clipping (a lazy 0-d tensor; realized with the optimizer step).
    """
    grads = [p for p in params if p.grad is not None]
    if not grads:
        return from_numpy(np.asarray(0.0, np.float32))
    with no_grad():
        # NOTE: every gradient joined into one vector and one dot product (BLAS on the cpu
        # backend): a char-gpt step's 36 dot products and 35 scalar sums took ~0.19 ms as
        # 71 plan steps, the copy and the one product ~0.06 ms
        flats = [p.grad.astype("float32").reshape(-1) for p in grads if p.grad is not None]
        joined = flats[0] if len(flats) == 1 else concat(flats)
        norm: Tensor = (joined @ joined).sqrt()
        factor = (max_norm / (norm + 1e-6)).clip(max=1.0)
        for p in grads:
            if p.grad is not None:
                p.grad = p.grad * factor.astype(p.grad.dtype)
    return norm


class CosineWithWarmup:
    """Linear warmup to the base rate, then cosine decay to ``min_lr`` at `total_steps`.

    Call `step()` once per optimizer step; it sets ``lr`` of every parameter group.
    """

    def __init__(self, optimizer: Optimizer, warmup_steps: int, total_steps: int,
                 min_lr: float = 0.0) -> None:
        self.optimizer = optimizer
        self.warmup, self.total, self.min_lr = warmup_steps, total_steps, min_lr
        self.base = [g["lr"] for g in optimizer.param_groups]
        self.count = 0
        self._apply()

    def lr_at(self, step: int, base: float) -> float:
        """The learning rate at `step` for a group whose base rate is `base`."""
        if step < self.warmup:
            return base * (step + 1) / self.warmup
        progress = min(1.0, (step - self.warmup) / max(1, self.total - self.warmup))
        return self.min_lr + 0.5 * (base - self.min_lr) * (1.0 + math.cos(math.pi * progress))

    def _apply(self) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base, strict=True):
            group["lr"] = self.lr_at(self.count, base)

    def step(self) -> None:
        """Advance one step."""
        self.count += 1
        self._apply()

    def state_dict(self) -> dict[str, Any]:
        """The schedule position."""
        return {"count": self.count, "base": list(self.base)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the schedule position."""
        self.count, self.base = int(state["count"]), list(state["base"])
        self._apply()
