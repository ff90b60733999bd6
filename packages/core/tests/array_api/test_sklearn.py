"""scikit-learn fits on omnitensor tensors through the Array API (array_api_dispatch=True).

Runs in the array-api tox environments (which install scikit-learn and set SCIPY_ARRAY_API=1);
elsewhere it skips with the reason.
"""

import os

import numpy as np
import pytest

import omnitensor as ot

sklearn = pytest.importorskip("sklearn")
if os.environ.get("SCIPY_ARRAY_API") != "1":
    pytest.skip("scikit-learn's array API dispatch needs SCIPY_ARRAY_API=1 before scipy loads",
                allow_module_level=True)

from sklearn import config_context  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis  # noqa: E402


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 6)) * np.array([3.0, 2.0, 1.5, 1.0, 0.5, 0.2])
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return x, y


def test_pca_on_tensors_matches_numpy() -> None:
    x, _ = _data()
    expected = PCA(n_components=3, svd_solver="full").fit(x)
    with config_context(array_api_dispatch=True):
        got = PCA(n_components=3, svd_solver="full").fit(ot.tensor(x))
        projected = got.transform(ot.tensor(x))
    assert isinstance(got.components_, ot.Tensor) and isinstance(projected, ot.Tensor)
    np.testing.assert_allclose(got.explained_variance_.numpy(), expected.explained_variance_,
                               rtol=1e-10)
    np.testing.assert_allclose(np.abs(got.components_.numpy()), np.abs(expected.components_),
                               rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(np.abs(projected.numpy()), np.abs(expected.transform(x)),
                               rtol=1e-8, atol=1e-10)


def test_lda_on_tensors_matches_numpy() -> None:
    x, y = _data()
    expected = LinearDiscriminantAnalysis().fit(x, y)
    with config_context(array_api_dispatch=True):
        got = LinearDiscriminantAnalysis().fit(ot.tensor(x), ot.tensor(y))
        predicted = got.predict(ot.tensor(x))
        scores = got.decision_function(ot.tensor(x))
    np.testing.assert_array_equal(predicted.numpy(), expected.predict(x))
    np.testing.assert_allclose(scores.numpy(), expected.decision_function(x), rtol=1e-8,
                               atol=1e-10)
