"""PyTorch and NumPy habits: the snippets people type on their first day, checked against numpy."""

import itertools

import numpy as np
import pytest

import omnitensor as ot
from omnitensor.errors import ArgumentTypeError, DTypeError, IndexOutOfRangeError, ShapeError


def test_iteration_yields_rows_and_stops() -> None:
    rows = [row.tolist() for row in ot.arange(6.0).reshape(2, 3)]
    assert rows == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert len(ot.zeros(4, 2)) == 4
    with pytest.raises(TypeError):
        iter(ot.tensor(1.0)).__next__()


def test_out_of_range_index_is_an_index_error() -> None:
    x = ot.arange(6.0).reshape(2, 3)
    with pytest.raises(IndexError, match="out of range"):
        x[2]
    with pytest.raises(IndexError):
        x[:, [0, 3]]
    with pytest.raises(IndexOutOfRangeError):
        x[0, 0, 0]


@pytest.mark.parametrize("fn", ["sum", "mean", "max", "min", "prod", "std", "var", "amax"])
def test_reductions_take_both_spellings(fn: str) -> None:
    a = np.random.default_rng(0).normal(size=(3, 4, 5)).astype(np.float32)
    x = ot.tensor(a)
    numpy_form = getattr(x, fn)(axis=1, keepdims=True).numpy()
    torch_form = getattr(x, fn)(dim=1, keepdim=True).numpy()
    top_level = getattr(ot, fn)(x, dim=(0, 2)).numpy()
    np.testing.assert_allclose(numpy_form, getattr(np, fn)(a, axis=1, keepdims=True), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(torch_form, numpy_form)
    np.testing.assert_allclose(top_level, getattr(np, fn)(a, axis=(0, 2)), rtol=1e-4, atol=1e-6)
    with pytest.raises(TypeError, match="not both"):
        getattr(x, fn)(axis=0, dim=0)


def test_std_var_corrections() -> None:
    a = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    x = ot.tensor(a)
    np.testing.assert_allclose(x.std(dim=1, unbiased=True).numpy(), a.std(axis=1, ddof=1),
                               rtol=1e-5)
    np.testing.assert_allclose(x.var(correction=1).numpy(), a.var(ddof=1), rtol=1e-5)
    np.testing.assert_allclose(ot.var(x, axis=0, ddof=0).numpy(), a.var(axis=0), rtol=1e-5)


def test_tensor_conveniences() -> None:
    x = ot.arange(12.0).reshape(3, 4)
    assert x.view(4, 3).shape == (4, 3) and x.view(-1).shape == (12,)
    y = x.clone()
    y[0, 0] = 100.0
    assert x[0, 0].item() == 0.0 and y[0, 0].item() == 100.0
    assert isinstance(x.device, str)
    assert x.to(ot.float64).dtype == ot.float64 and x.to("float16").dtype == ot.float16
    assert x.sum().item() == 66.0
    assert x.tolist()[2] == [8.0, 9.0, 10.0, 11.0]
    assert x.transpose(0, 1).shape == (4, 3) and x.t().shape == (4, 3)
    assert x.permute(1, 0).shape == (4, 3) and x.unsqueeze(0).shape == (1, 3, 4)
    assert ot.tensor(3.0, requires_grad=True).requires_grad


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "cos", "tanh", "abs", "floor",
                                  "ceil", "log1p", "expm1", "tan", "sign", "square"])
def test_top_level_elementwise(name: str) -> None:
    a = np.random.default_rng(2).uniform(0.1, 2.0, (3, 4)).astype(np.float32)
    np.testing.assert_allclose(getattr(ot, name)(ot.tensor(a)).numpy(), getattr(np, name)(a),
                               rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(getattr(ot, name)(a).numpy(), getattr(np, name)(a), rtol=2e-5,
                               atol=1e-6)  # numpy arrays are converted


def test_joins_and_where() -> None:
    a, b = np.ones((2, 3), np.float32), np.zeros((2, 3), np.float32)
    for join in (ot.cat, ot.concat, ot.concatenate):
        np.testing.assert_array_equal(join([ot.tensor(a), ot.tensor(b)], dim=1).numpy(),
                                      np.concatenate([a, b], axis=1))
    np.testing.assert_array_equal(ot.stack([ot.tensor(a), ot.tensor(b)], axis=1).numpy(),
                                  np.stack([a, b], axis=1))
    np.testing.assert_array_equal(ot.where(ot.tensor(a) > 0, 1.0, -1.0).numpy(),
                                  np.where(a > 0, 1.0, -1.0))


@pytest.mark.parametrize("spec, shapes", [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(2, 3)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("ij,ij->", [(2, 3), (2, 3)]),
    ("i,j->ij", [(3,), (4,)]), ("...ij,...jk", [(2, 3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("ijk->k", [(2, 3, 4)]),
])
def test_einsum_matches_numpy(spec: str, shapes: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=s).astype(np.float32) for s in shapes]
    got = ot.einsum(spec, *[ot.tensor(a) for a in arrays]).numpy()
    np.testing.assert_allclose(got, np.einsum(spec, *arrays), rtol=1e-4, atol=1e-5)


def test_two_integer_array_indices() -> None:
    a = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(ot.tensor(a)[[0, 1], [2, 0]].numpy(), a[[0, 1], [2, 0]])


def _random_key(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[object, ...]:
    """A random mix of ints, slices, None and integer arrays (broadcastable) for `shape`."""
    key: list[object] = []
    index_shape = tuple(int(d) for d in rng.integers(1, 3, size=int(rng.integers(0, 3))))
    for size in shape:
        kind = rng.choice(["int", "slice", "array", "array", "full"])
        if kind == "int":
            key.append(int(rng.integers(-size, size)))
        elif kind == "slice":
            start, stop = sorted(int(v) for v in rng.integers(-size, size + 1, 2))
            key.append(slice(start, stop, int(rng.choice([1, 2, -1]))))
        elif kind == "array":
            sub = index_shape[int(rng.integers(0, len(index_shape) + 1)):]
            key.append(rng.integers(-size, size, size=sub))
        else:
            key.append(slice(None))
        if rng.random() < 0.1:
            key.append(None)
    return tuple(key)


def test_advanced_indexing_matches_numpy_on_random_keys() -> None:
    rng = np.random.default_rng(4)
    checked = 0
    for shape in itertools.islice(itertools.cycle([(4, 5, 6), (3, 4), (2, 3, 4, 5), (5,)]), 240):
        a = rng.normal(size=shape).astype(np.float32)
        key = _random_key(rng, shape)
        try:
            expected = a[key]
        except IndexError:
            with pytest.raises(IndexError):
                ot.tensor(a)[key]
            continue
        got = ot.tensor(a)[key].numpy()
        assert got.shape == expected.shape, (key, got.shape, expected.shape)
        np.testing.assert_array_equal(got, expected, err_msg=repr(key))
        checked += 1
    assert checked > 150


def test_advanced_indexing_with_tensor_indices_and_setitem() -> None:
    a = np.arange(24.0, dtype=np.float32).reshape(2, 3, 4)
    rows, cols = np.array([[0, 2], [1, 1]]), np.array([3, -1])
    x = ot.tensor(a)
    np.testing.assert_array_equal(x[:, ot.tensor(rows), ot.tensor(cols)].numpy(),
                                  a[:, rows, cols])
    np.testing.assert_array_equal(x[1, :, [0, 2]].numpy(), a[1, :, [0, 2]])
    x[[0, 1], [2, 0]] = -1.0
    b = a.copy()
    b[[0, 1], [2, 0]] = -1.0
    np.testing.assert_array_equal(x.numpy(), b)


def test_linear_promotes_float64_input_like_matmul() -> None:
    layer = ot.nn.Linear(2, 2)
    x64 = ot.ones(1, 2, dtype=ot.float64)
    out = layer(x64)
    assert out.dtype == (x64 @ layer.weight.T).dtype == ot.float64


def test_numpy_input_to_a_layer_is_converted() -> None:
    layer = ot.nn.Linear(2, 2)
    out = layer(np.ones((1, 2), np.float32))
    np.testing.assert_allclose(out.numpy(), layer(ot.ones(1, 2)).numpy())


def test_bad_arguments_are_type_errors_naming_them() -> None:
    with pytest.raises(ArgumentTypeError, match="exp: argument 'x'"):
        ot.exp("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'x2'"):
        ot.ones(2) + "a"  # type: ignore[operator]
    with pytest.raises(TypeError, match="linear: argument 'x'"):
        ot.nn.Linear(2, 2)("not a tensor")
    with pytest.raises(DTypeError, match="bitwise_and"):
        ot.bitwise_and(ot.ones(2), ot.ones(2))


def test_backend_mixing_names_both_and_to() -> None:
    with ot.use_backend("ref"):
        a = ot.ones(3) * 2.0
    assert a.device == "ref"
    assert (a + 1.0).numpy().tolist() == [3.0, 3.0, 3.0]  # runs on ref after the block
    b = ot.ones(3).to("cpu") if "cpu" in {i.name for i in ot.list_backends() if i.available} \
        else None
    if b is None:
        pytest.skip("needs a second backend (cpu) to mix")
    with pytest.raises(ot.errors.OmnitensorError, match=r"'ref' and 'cpu'.*\.to\("):
        (a + b).numpy()
    assert (a.to("cpu") + b).device == "cpu"


def test_shape_errors_keep_numpy_wording() -> None:
    with pytest.raises(ShapeError, match=r"add: cannot broadcast \(2, 3\) with \(4,\)"):
        ot.ones(2, 3) + ot.ones(4)


def test_sequential_training_loop_learns() -> None:
    ot.manual_seed(0)
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(64, 3)).astype(np.float32)
    ys = (xs @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    model = ot.nn.Sequential(ot.nn.Linear(3, 16), ot.nn.ReLU(), ot.nn.Linear(16, 1))
    opt = ot.nn.AdamW(model.parameters(), lr=0.02, weight_decay=0.0)
    loader = ot.nn.DataLoader(ot.nn.TensorDataset(xs, ys), batch_size=16, shuffle=True, seed=1)
    first = last = None
    for _ in range(30):
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            first = loss.item() if first is None else first
            last = loss.item()
    assert first is not None and last is not None and last < 0.1 * first
    assert [name for name, _ in model.named_parameters()] == [
        "0.weight", "0.bias", "2.weight", "2.bias"]


def test_module_containers_and_activations() -> None:
    blocks = ot.nn.ModuleList([ot.nn.Linear(2, 2), ot.nn.GELU(), ot.nn.SiLU(), ot.nn.Tanh()])
    heads = ot.nn.ModuleDict({"a": ot.nn.Linear(2, 1)})
    assert len(blocks) == 4 and isinstance(blocks[1], ot.nn.GELU) and "a" in heads
    x = ot.tensor([[-1.0, 2.0]])
    np.testing.assert_allclose(ot.nn.ReLU()(x).numpy(), [[0.0, 2.0]])
    np.testing.assert_allclose(ot.nn.Tanh()(x).numpy(), np.tanh([[-1.0, 2.0]]), rtol=1e-6)
    with pytest.raises(IndexError):
        blocks[7]


def test_dropout_train_and_eval() -> None:
    drop = ot.nn.Dropout(0.5, seed=3)
    x = ot.ones(1000)
    kept = drop(x).numpy()
    assert 300 < int((kept == 0).sum()) < 700 and set(np.unique(kept)) <= {0.0, 2.0}
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())


def test_save_load_round_trip(tmp_path: object) -> None:
    import pathlib

    path = pathlib.Path(str(tmp_path))
    model = ot.nn.Sequential(ot.nn.Linear(3, 4), ot.nn.ReLU(), ot.nn.Linear(4, 2))
    ot.save(model.state_dict(), path / "model.safetensors")
    clone = ot.nn.Sequential(ot.nn.Linear(3, 4), ot.nn.ReLU(), ot.nn.Linear(4, 2))
    clone.load_state_dict(ot.load(path / "model.safetensors"))
    x = ot.randn(5, 3, seed=1)
    np.testing.assert_array_equal(clone(x).numpy(), model(x).numpy())
    t = ot.arange(6.0).reshape(2, 3).astype(ot.bfloat16)
    ot.save(t, path / "t.safetensors")
    back = ot.load(path / "t.safetensors")
    assert back.dtype == ot.bfloat16 and back.tolist() == t.tolist()
    with pytest.raises(TypeError, match="never pickles"):
        ot.save(object(), path / "x.safetensors")


def test_data_loader_is_seeded_and_drops_last() -> None:
    xs = np.arange(10)
    loader = ot.nn.DataLoader(xs, batch_size=3, shuffle=True, drop_last=True, seed=7)
    assert len(loader) == 3
    epoch1 = [b.tolist() for b in loader]
    epoch2 = [b.tolist() for b in loader]
    again = [b.tolist() for b in ot.nn.DataLoader(xs, batch_size=3, shuffle=True,
                                                  drop_last=True, seed=7)]
    assert epoch1 == again and epoch1 != epoch2 and all(len(b) == 3 for b in epoch1)
    assert sorted(sum(epoch1, [])) != list(range(10))  # one row was dropped
    assert [b.tolist() for b in ot.nn.DataLoader(xs, batch_size=4)][-1] == [8, 9]


def test_requires_grad_on_creation_functions() -> None:
    for t in (ot.zeros(2, requires_grad=True), ot.ones(2, 2, requires_grad=True),
              ot.randn(3, requires_grad=True), ot.full((2,), 3.0, requires_grad=True),
              ot.arange(3.0, requires_grad=True), ot.eye(2, requires_grad=True),
              ot.tensor([1.0, 2.0], requires_grad=True)):
        assert t.requires_grad and t.is_leaf
    w = ot.tensor([1.0, -2.0], requires_grad=True)
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, -4.0])


def test_sklearn_style_array_namespace() -> None:
    x = ot.ones(3)
    xp = x.__array_namespace__()
    assert xp is ot.array_api and xp.__array_api_version__ == "2023.12"
    assert xp.exp is ot.exp and xp.sum is ot.sum  # one definition, two spellings
