"""omnitensor.distributed in one process: launch detection, world size 1 semantics, communicator
plugins (selection, contract, errors), the collectives' declarations and the optimizer's respect
for their effects. Multi-rank behaviour is tested under mpiexec in packages/comm-mpi/tests.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import omnitensor as ot
from omnitensor import distributed as dist
from omnitensor import nn
from omnitensor.backend import CommunicatorSpec, hookimpl, registry
from omnitensor.backend.communicators import (
    Communicator,
    LocalCommunicator,
    detect_launch,
    list_communicators,
)
from omnitensor.errors import (
    ArgumentTypeError,
    BackendNotInstalledError,
    DistributedError,
    DTypeError,
    FormatError,
    OmnitensorError,
    ShapeError,
)
from omnitensor.functional import cross_entropy
from omnitensor.ir import Builder, TensorType
from omnitensor.optimizer.pipeline import optimize

LAUNCH_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
               "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "OMNITENSOR_COMMUNICATOR",
               "OMNITENSOR_DIST_TIMEOUT")


@pytest.fixture(autouse=True)
def _single_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    dist.shutdown()
    with ot.use_backend("ref"):
        yield
    dist.shutdown()
    registry.reset()


@pytest.mark.parametrize(("env", "launcher", "rank", "size"), [
    ({}, None, 0, 1),
    ({"PMI_RANK": "3", "PMI_SIZE": "4"}, "mpiexec (PMI)", 3, 4),
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, "mpirun (Open MPI)", 1, 2),
    ({"PMIX_RANK": "0"}, "mpiexec (PMIx)", 0, None),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, "srun", 0, 1),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "8"}, "srun", 5, 8),
])
def test_detect_launch(env: dict[str, str], launcher: str | None, rank: int,
                       size: int | None) -> None:
    launch = detect_launch(env)
    assert (launch.launcher, launch.rank, launch.world_size) == (launcher, rank, size)
    assert launch.multi_process == (launcher is not None and size != 1)


def test_a_plain_process_is_world_size_one_without_any_library() -> None:
    registry.reset(entry_points=False)  # not even a communicator plugin installed
    assert isinstance(dist.init(), LocalCommunicator)
    assert (dist.rank(), dist.world_size()) == (0, 1)
    dist.barrier()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for got in (dist.all_reduce(x, "mean"), dist.all_gather(x, axis=1),
                dist.reduce_scatter(x, "sum", axis=0), dist.broadcast(x)):
        np.testing.assert_array_equal(got.numpy(), x)


def test_launched_without_a_communicator_names_the_distribution(
        monkeypatch: pytest.MonkeyPatch) -> None:
    registry.reset(entry_points=False)
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(BackendNotInstalledError, match="pip install omnitensor-comm-mpi"):
        dist.init()


class _Fake(LocalCommunicator):
    name = "fake"


def _plugin(version: int = 1, world: int = 1) -> types.SimpleNamespace:
    class Sized(_Fake):
        @property
        def world_size(self) -> int:
            return world

    @hookimpl
    def omnitensor_register_communicators() -> list[CommunicatorSpec]:
        return [CommunicatorSpec(name="fake", contract_version=version, priority=5,
                                 factory=lambda timeout: Sized(timeout),
                                 distribution="omnitensor-comm-fake")]

    return types.SimpleNamespace(omnitensor_register_communicators=(
        omnitensor_register_communicators))


def test_a_communicator_plugin_is_listed_and_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.reset(entry_points=False)
    registry.register_plugin(_plugin(), "fake")
    (info,) = list_communicators()
    assert (info.name, info.available, info.distribution) == ("fake", True,
                                                              "omnitensor-comm-fake")
    monkeypatch.setenv("OMNITENSOR_COMMUNICATOR", "fake")
    comm = dist.init(timeout=7)
    assert isinstance(comm, _Fake) and comm.timeout == 7.0


def test_a_wrong_contract_version_is_listed_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    registry.reset(entry_points=False)
    registry.register_plugin(_plugin(version=99), "fake")
    (info,) = list_communicators()
    assert not info.available and "got version 99, expected 1" in str(info.reason)
    monkeypatch.setenv("OMNITENSOR_COMMUNICATOR", "fake")
    with pytest.raises(OmnitensorError, match="incompatible communicator contract"):
        dist.init()


def test_a_world_that_disagrees_with_the_launcher_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    registry.reset(entry_points=False)
    registry.register_plugin(_plugin(world=1), "fake")
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "2")
    with pytest.raises(DistributedError, match="started 2 processes but communicator 'fake' "
                       "sees a world of 1"):
        dist.init()


def test_cli_lists_communicators(capsys: pytest.CaptureFixture[str]) -> None:
    from omnitensor.cli.backends import collect, render

    registry.reset(entry_points=False)
    registry.register_plugin(_plugin(), "fake")
    text = render(collect(with_smoke=False))
    assert "communicators (multi-process" in text and "omnitensor-comm-fake" in text
    assert "launched by: nothing (a single process: world size 1)" in text


@pytest.mark.parametrize(("call", "error"), [
    (lambda: dist.init(timeout=-1), ArgumentTypeError),
    (lambda: dist.init(timeout="soon"), ArgumentTypeError),
    (lambda: dist.all_reduce(np.ones(2, np.float32), "avg"), ArgumentTypeError),
    (lambda: dist.all_reduce(np.ones(2, np.int32), "mean"), DTypeError),
    (lambda: dist.all_gather(np.float32(1.0)), ShapeError),
    (lambda: dist.all_gather(np.ones((2, 2), np.float32), axis=2), ShapeError),
    (lambda: dist.broadcast(np.ones(2, np.float32), root=1), OmnitensorError),
    (lambda: dist.shard(np.ones((3, 2)), np.ones((4, 2))), ShapeError),
    (lambda: dist.data_parallel(nn.Linear(2, 2), bucket_bytes=0), ArgumentTypeError),
    (lambda: dist.embed(None, "one text"), ArgumentTypeError),
    (lambda: dist.shard(5), ArgumentTypeError),
    (lambda: dist.shard(np.float32(1.0)), ArgumentTypeError),
    (lambda: dist.data_parallel(nn.Linear(2, 2), root=3), ArgumentTypeError),
    (lambda: dist.data_parallel("params"), ArgumentTypeError),
    (lambda: dist.load_checkpoint("/nonexistent/ckpt.safetensors", nn.Linear(2, 2)),
     FormatError),
])
def test_bad_inputs_raise_house_errors(call: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        call()  # type: ignore[operator]


def test_env_timeout_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMNITENSOR_DIST_TIMEOUT", "-3")
    with pytest.raises(ArgumentTypeError, match="OMNITENSOR_DIST_TIMEOUT"):
        dist.init()
    monkeypatch.setenv("OMNITENSOR_DIST_TIMEOUT", "12.5")
    assert dist.init().timeout == 12.5


def test_reduce_scatter_needs_a_divisible_dim_and_a_matching_world() -> None:
    b = Builder("rs")
    x = b.input(TensorType((3, 4), ot.float32))
    with pytest.raises(ShapeError, match="not divisible by the world size"):
        b.emit("reduce_scatter", x, reduction="sum", axis=0, world_size=2)
    y = b.emit("reduce_scatter", x, reduction="sum", axis=1, world_size=2)
    assert y.type.shape == (3, 2)
    from omnitensor.ir.interpret import evaluate

    with pytest.raises(OmnitensorError, match="recorded for world size 2 but this process runs "
                       "in world size 1"):
        evaluate(b.build([y]), [np.zeros((3, 4), np.float32)])


def test_the_optimizer_keeps_every_collective() -> None:
    b = Builder("keep")
    x = b.input(TensorType((4,), ot.float32))
    c = b.emit("constant", value=np.ones(4, np.float32))
    folded = b.emit("all_reduce", c, reduction="sum", world_size=1)  # constant operand
    twin_a = b.emit("all_reduce", x, reduction="sum", world_size=1)
    twin_b = b.emit("all_reduce", x, reduction="sum", world_size=1)  # CSE must not merge
    b.emit("all_gather", x, axis=0, world_size=1)  # unused: DCE must keep it
    fn = b.build([b.emit("add", b.emit("add", twin_a, twin_b), folded)])
    optimized, _ = optimize(fn)
    ops = [inst.op for inst in optimized.body]
    assert ops.count("all_reduce") == 3 and ops.count("all_gather") == 1, ops


def test_data_parallel_at_world_size_one_is_compile() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    y = rng.integers(0, 2, 8).astype(np.int32)

    def run(wrap: Callable[[nn.SGD], Any]) -> tuple[list[float], int]:
        ot.manual_seed(0)
        model = nn.Linear(3, 2)
        opt = nn.SGD(model.parameters(), lr=0.5)

        @wrap(opt)
        def step(a: ot.Tensor, b: ot.Tensor) -> ot.Tensor:
            loss = cross_entropy(model(a), b)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        losses = [float(step(ot.from_numpy(x), ot.from_numpy(y)).item()) for _ in range(3)]
        return losses, step.traces

    assert run(dist.data_parallel) == run(lambda opt: ot.compile)


@pytest.mark.parametrize("world", [1, 2, 3, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 14, 100])
def test_shard_range_partitions_in_order(world: int, n: int) -> None:
    ranges = [dist.shard_range(n, rank_=r, world=world) for r in range(world)]
    assert [i for r in ranges for i in r] == list(range(n))
    assert max(len(r) for r in ranges) - min(len(r) for r in ranges) <= 1


def test_checkpoint_round_trip_in_one_process(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "sub" / "model.safetensors"
    ot.manual_seed(1)
    model = nn.Linear(3, 2)
    opt = nn.AdamW(model.parameters(), lr=0.1)
    (model(ot.ones((2, 3))) ** 2).sum().backward()
    opt.step()
    dist.save_checkpoint(path, model, opt)
    ot.manual_seed(2)
    other = nn.Linear(3, 2)
    other_opt = nn.AdamW(other.parameters(), lr=0.1)
    dist.load_checkpoint(path, other, other_opt)
    np.testing.assert_array_equal(other.weight.numpy(), model.weight.numpy())
    assert other_opt.steps == 1
    for key in ("step", "exp_avg", "exp_avg_sq"):
        np.testing.assert_array_equal(other_opt.state[0][key].numpy(),
                                      opt.state[0][key].numpy())


def test_communicator_contract_is_abstract() -> None:
    with pytest.raises(TypeError):
        Communicator()  # type: ignore[abstract]


def test_the_core_never_imports_mpi4py() -> None:
    import ast
    from pathlib import Path

    root = Path(ot.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "mpi4py" for n in names):
                offenders.append(str(path.relative_to(root)))
    assert not offenders
