"""The memory planner (buffer reuse, no steady-state allocation) and BLAS products."""

from __future__ import annotations

import tracemalloc

import numpy as np

from omnitensor.dtypes import float32
from omnitensor.ir.builder import Builder
from omnitensor.ir.interpret import evaluate
from omnitensor.ir.types import TensorType
from omnitensor_backend_cpu.backend import CpuBackend


def _mlp(n: int = 64, layers: int = 4):  # type: ignore[no-untyped-def]
    b = Builder()
    x = b.input(TensorType((n, n), float32))
    ws = [b.input(TensorType((n, n), float32)) for _ in range(layers)]
    h = x
    for w in ws:
        h = b.emit("dot_general", h, w, contracting=((1,), (0,)))
        h = b.emit("tanh", b.emit("mul", h, h))
    return b.build([h])


def test_intermediate_buffers_are_reused(backend: CpuBackend) -> None:
    fn = _mlp()
    exe = backend.compile(fn)
    plan = exe.plan
    owned = len(plan.arena_spec)
    # 4 matmul results + 3 fused results live in the arena (the last fused one is the output);
    # at most two are alive at a time, so two buffers serve all of them.
    assert owned == 7
    assert len(plan.arena_sizes) == 2


def test_repeated_run_allocates_only_its_output(backend: CpuBackend) -> None:
    n = 128
    fn = _mlp(n)
    exe = backend.compile(fn)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, n)).astype(np.float32) * 0.1 for _ in range(5)]
    first = backend.run(exe, xs)
    arena = list(exe.plan._arena or [])
    tracemalloc.start()
    second = backend.run(exe, xs)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out_bytes = n * n * 4
    assert peak < out_bytes + 16 * 1024, peak  # the fresh output, nothing else of size
    assert all(a is b for a, b in zip(arena, exe.plan._arena or [], strict=True))
    np.testing.assert_array_equal(first[0], second[0])
    np.testing.assert_allclose(second[0], evaluate(fn, xs)[0], rtol=1e-4, atol=1e-6)
    assert not np.shares_memory(first[0], second[0])  # handed-out buffers are never reused


def test_outputs_are_read_only_and_inputs_untouched(backend: CpuBackend) -> None:
    fn = _mlp(16, 2)
    xs = [np.ones((16, 16), np.float32) * 0.1 for _ in range(3)]
    copies = [x.copy() for x in xs]
    (out,) = backend.run(backend.compile(fn), xs)
    assert not out.flags.writeable
    for x, c in zip(xs, copies, strict=True):
        np.testing.assert_array_equal(x, c)


def test_batched_and_transposed_dot_general(backend: CpuBackend) -> None:
    b = Builder()
    lhs = b.input(TensorType((3, 4, 5), float32))
    rhs = b.input(TensorType((3, 6, 5), float32))  # contract the last dims: x @ W.T per batch
    out = b.emit("dot_general", lhs, rhs, contracting=((2,), (2,)), batch=((0,), (0,)))
    fn = b.build([out])
    exe = backend.compile(fn)
    assert exe.plan.kinds == ["blas"]
    rng = np.random.default_rng(3)
    xs = [rng.normal(size=(3, 4, 5)).astype(np.float32), rng.normal(size=(3, 6, 5)).astype(
        np.float32)]
    (got,) = backend.run(exe, xs)
    np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=1e-5, atol=1e-6)


def test_capabilities_and_support_come_from_the_lowering_table(backend: CpuBackend) -> None:
    from omnitensor.backend.host import reference_op_table
    from omnitensor_backend_cpu.lowering import LOWERINGS

    caps = backend.capabilities().ops
    assert caps == LOWERINGS.capabilities()
    primitives = reference_op_table()  # every declared primitive: a kernel or its reference
    assert {name: caps[name] for name in primitives} == primitives
    b = Builder()
    x = b.input(TensorType((4, 4), float32))
    fn = b.build([b.emit("dot_general", x, x, contracting=((1,), (0,)))])
    assert backend.supports(fn.body[0]) is None
    assert backend.compile(fn).plan.kinds == ["blas"]


def test_one_plan_from_two_threads_never_shares_scratch(backend: CpuBackend) -> None:
    """Concurrent runs of one plan get private arenas and the single-threaded answers."""
    import threading

    fn = _mlp(n=48, layers=3)
    exe = backend.compile(fn)
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((48, 48)).astype(np.float32) * 0.2 for _ in range(3)]
    xs = [rng.standard_normal((48, 48)).astype(np.float32) for _ in range(2)]
    expected = [backend.download(backend.run(exe, [backend.upload(a) for a in [x, *weights]])[0])
                for x in xs]
    arenas: list[int] = []
    plan = exe.plan
    real_new_arena = plan.new_arena

    def recording_new_arena() -> list[object]:
        slots = real_new_arena()
        arenas.append(id(slots))
        return slots

    plan.new_arena = recording_new_arena  # type: ignore[method-assign]
    # hold the plan's own arena, as a first thread mid-run does: the next run must not use it
    assert plan._lock.acquire(blocking=False)
    try:
        out = plan.run([xs[0], *weights])
        assert arenas, "a run while the arena is busy must build a private one"
        assert not any(np.shares_memory(o, a) for o in out for a in (plan._arena or [])
                       if isinstance(a, np.ndarray))
    finally:
        plan._lock.release()
    barrier = threading.Barrier(2)
    results: list[list[np.ndarray]] = [[], []]

    def work(i: int) -> None:
        barrier.wait()
        for _ in range(50):
            results[i].append(np.array(plan.run([xs[i], *weights])[0]))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads)
    for i in range(2):
        for got in results[i]:
            np.testing.assert_allclose(got, expected[i], rtol=1e-6, atol=1e-6)


def test_concatenation_writes_into_a_plan_buffer(backend: CpuBackend) -> None:
    # a decode step stacks each layer's key and value rows: stacked rows read inside the plan
    # live in the arena (the same buffer every run); a stacked result that is an output is new
    # at every run
    def stacked(escapes: bool):  # type: ignore[no-untyped-def]
        b = Builder()
        k, v = (b.input(TensorType((1, 2, 1, 4), float32)) for _ in range(2))
        both = b.emit("concatenate", k, v, axis=0)
        doubled = b.emit("add", both, both)
        return backend.compile(b.build([doubled, both] if escapes else [doubled]))

    inner, outer = stacked(False), stacked(True)
    assert len(inner.plan.arena_spec) == 1 and not outer.plan.arena_spec
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(2):
        ks, vs = (rng.normal(size=(1, 2, 1, 4)).astype(np.float32) for _ in range(2))
        runs.append((ks, vs, backend.run(inner, [ks, vs]), backend.run(outer, [ks, vs])))
    for ks, vs, (doubled,), (doubled_too, both) in runs:  # the first run's survive the second
        np.testing.assert_array_equal(both, np.concatenate([ks, vs]))
        np.testing.assert_array_equal(doubled, 2 * np.concatenate([ks, vs]))
        np.testing.assert_array_equal(doubled_too, doubled)


def test_attention_heads_are_stored_in_the_order_their_readers_merge_them(
        backend: CpuBackend) -> None:
    # sdpa (B, H, T, D) -> transpose (B, T, H, D) -> reshape (B, T, H * D): the attention
    # result lives in a (B, T, H, D) buffer, so transpose and reshape are views (no copy); one
    # query row, or a result read otherwise, keeps the plain layout
    b_, h, t, d = 3, 4, 20, 16
    for rows, merged in ((t, True), (1, True), (t, False)):
        b = Builder()
        q = b.input(TensorType((b_, h, rows, d), float32))
        k, v = (b.input(TensorType((b_, h, t, d), float32)) for _ in range(2))
        attn = b.emit("scaled_dot_product_attention", q, k, v, scale=0.25)
        if merged:
            heads = b.emit("reshape", b.emit("transpose", attn, perm=(0, 2, 1, 3)),
                           shape=(b_, rows, h * d))
            out = b.emit("mul", heads, heads)  # (the attention result is the plan's buffer)
        else:
            out = b.emit("exp", attn)
        fn = b.build([out])
        exe = backend.compile(fn)
        stored = exe.plan.arena_spec[attn.id][1]
        assert stored == ((b_, rows, h, d) if merged and rows > 1 else (b_, h, rows, d))
        rng = np.random.default_rng(rows)
        xs = [rng.normal(size=s).astype(np.float32)
              for s in ((b_, h, rows, d), (b_, h, t, d), (b_, h, t, d))]
        (got,) = backend.run(exe, xs)
        np.testing.assert_allclose(got, evaluate(fn, xs)[0], rtol=1e-5, atol=1e-6)
