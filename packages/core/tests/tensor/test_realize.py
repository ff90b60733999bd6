"""Plan cache, views, interop and compile."""

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.errors import OmnitensorError
from omnitensor.tensor.realize import stats


def _step(x: ot.Tensor) -> ot.Tensor:
    return ((x * 2 + 1).exp().sum(axis=0) / 3).max()


def test_second_identical_step_runs_no_optimizer_and_no_compile() -> None:
    _step(ot.ones(4, 5)).numpy()
    before = stats.snapshot()
    _step(ot.ones(4, 5)).numpy()
    after = stats.snapshot()
    assert after["compiles"] == before["compiles"]
    assert after["optimizer_runs"] == before["optimizer_runs"]
    assert after["cache_hits"] == before["cache_hits"] + 1


def test_constants_are_part_of_the_key() -> None:
    a = (ot.ones(3) * 2).numpy()
    b = (ot.ones(3) * 3).numpy()
    assert a.tolist() == [2, 2, 2] and b.tolist() == [3, 3, 3]


def test_views_share_storage_with_the_realized_tensor() -> None:
    t = ot.arange(12.0).reshape(3, 4).realize()
    storage = t._node.buffers[0]
    for view in (t.T, t[::2], t[:1].expand(5, 4), t.flip(0), t[1:, 2:]):
        assert view.is_realized, "a view of a realized tensor must not be a lazy op"
        assert np.shares_memory(view._node.buffers[0], storage)


def test_from_numpy_copies_unless_asked() -> None:
    a = np.ones(3, np.float32)
    copied, aliased = ot.from_numpy(a), ot.from_numpy(a, copy=False)
    a[0] = 5
    assert copied.numpy()[0] == 1 and aliased.numpy()[0] == 5
    assert ot.from_numpy(np.ones(2, np.float64)).dtype == ot.float64


def test_dlpack_round_trip_with_numpy() -> None:
    x = ot.arange(6.0).reshape(2, 3) * 2
    back = np.from_dlpack(x)
    np.testing.assert_array_equal(back, np.arange(6.0).reshape(2, 3) * 2)
    y = ot.from_dlpack(back)
    np.testing.assert_array_equal(y.numpy(), back)
    np.testing.assert_array_equal(np.asarray(x), back)


def test_dlpack_round_trip_with_torch() -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    x = ot.from_dlpack(t)
    np.testing.assert_array_equal(x.numpy(), t.numpy())
    np.testing.assert_array_equal(torch.from_dlpack(x * 1).numpy(), t.numpy())


def test_compile_traces_once_per_signature_and_retraces_on_new_shape() -> None:
    calls = []

    @ot.compile
    def f(x: ot.Tensor, scale: ot.Tensor) -> ot.Tensor:
        calls.append(1)
        return (x * scale).sum(axis=-1)

    out = f(ot.ones(2, 3), ot.tensor(2.0))
    assert out.numpy().tolist() == [6, 6]
    compiles = stats.compiles
    assert f(ot.ones(2, 3), ot.tensor(3.0)).numpy().tolist() == [9, 9]
    assert len(calls) == 1 and stats.compiles == compiles and f.traces == 1
    assert f(ot.ones(4, 3), ot.tensor(1.0)).numpy().tolist() == [3] * 4
    assert f.traces == 2


def test_compile_reads_outside_tensors_through_their_handles() -> None:
    w = ot.ones(3).realize()

    @ot.compile
    def f(x: ot.Tensor) -> ot.Tensor:
        return (x * w).sum()

    assert f(ot.ones(3)).item() == 3
    w.assign(w * 2)  # what an optimizer step does
    assert f(ot.ones(3)).item() == 6 and f.traces == 1
    w[0] = 5.0  # indexed assignment rebinds the handle too
    assert f(ot.ones(3)).item() == 9 and f.traces == 1


def test_compile_rebinds_handles_the_function_updates() -> None:
    counter = ot.zeros(()).realize()

    @ot.compile
    def tick() -> ot.Tensor:
        counter[()] = counter + 1
        return counter * 10

    assert tick().item() == 10
    assert tick().item() == 20
    assert counter.item() == 2 and tick.traces == 1


def test_compile_rebinds_handles_it_only_writes() -> None:
    # handles assigned without being read in the function (one value assigned to two state
    # handles, as an optimizer's shared per-step scalars would be) are rebound at every call
    total = ot.zeros(3).realize()
    first, second = ot.zeros(3).realize(), ot.zeros(3).realize()

    @ot.compile
    def add(x: ot.Tensor) -> ot.Tensor:
        new = total + x
        total.assign(new)
        first.assign(new)
        second.assign(new * 2)
        return new

    for _ in range(3):
        add(ot.ones(3))
    assert first.numpy().tolist() == [3, 3, 3] and second.numpy().tolist() == [6, 6, 6]
    assert add.traces == 1


def test_a_call_brings_its_own_rebindings_up_to_date() -> None:
    # after each call only the handles it rebound are looked up again (`_bind`'s `since`):
    # every later call must still see the newest values, whoever rebound them
    state, scale = ot.zeros(3).realize(), ot.ones(3).realize()
    history: list[float] = []

    @ot.compile
    def step(x: ot.Tensor) -> ot.Tensor:
        new = state * scale + x
        state.assign(new)
        return new.sum()

    for _ in range(3):
        history.append(step(ot.ones(3)).item())
    assert history == [3, 6, 9]
    state.assign(ot.full((3,), 10.0))  # rebound outside: looked up in full at the next call
    assert step(ot.ones(3)).item() == 33
    scale.assign(ot.full((3,), 2.0))  # never rebound by the call
    assert step(ot.ones(3)).item() == 69
    assert state.numpy().tolist() == [23, 23, 23] and step.traces == 1


def test_donated_input_cannot_be_reused() -> None:
    f = ot.compile(lambda x: x + 1, donate=(0,))
    x = ot.ones(3).realize()
    y = f(x)
    assert y.numpy().tolist() == [2, 2, 2]
    with pytest.raises(OmnitensorError, match="donated"):
        x.numpy()


def test_plan_cache_is_bounded() -> None:
    from omnitensor.tensor.realize import PlanCache

    cache = PlanCache(capacity=2)
    for key in "abc":
        cache.put(key, object())  # type: ignore[arg-type]
    assert len(cache) == 2 and cache.get("a") is None and cache.get("c") is not None


def test_compiled_function_traces_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor.tensor.jit import cache_sizes
    from omnitensor.tensor.realize import stats

    monkeypatch.setenv("OMNITENSOR_TRACE_CACHE_SIZE", "3")
    f = ot.compile(lambda x: x * 2.0)
    evicted = stats.trace_evictions
    for n in range(1, 8):  # seven signatures
        assert f(ot.ones(n)).numpy().tolist() == [2.0] * n
    assert len(f) == 3 and f.traces == 7 and stats.trace_evictions - evicted == 4
    f(ot.ones(7))  # most recent: still kept
    assert f.traces == 7
    f(ot.ones(1))  # evicted: traced again
    assert f.traces == 8 and len(f) == 3
    sizes = cache_sizes()
    assert sizes["traces"] >= 3 and sizes["compiled_functions"] >= 1
    assert sizes["plans"] <= sizes["plan_capacity"]


def test_kernels_a_backend_compiles_on_first_use_count_as_compile_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from omnitensor.backend.registry import get_backend

    f = ot.compile(lambda x: x * 2)
    x = ot.ones(3)
    f(x).numpy()  # traced and compiled: the runs below only run the plan
    backend = get_backend("ref")
    clock = iter([10.0, 12.5])  # the backend's count before and after the run: 2.5 s compiling
    monkeypatch.setattr(backend, "compile_seconds", lambda: next(clock))
    before = stats.compile_seconds
    assert f(x).numpy().tolist() == [2, 2, 2]
    assert stats.compile_seconds - before == pytest.approx(2.5)
    monkeypatch.undo()
    before = stats.compile_seconds
    f(x).numpy()
    assert stats.compile_seconds == before  # the reference backend compiles nothing on first use
