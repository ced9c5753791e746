"""The kernel basis against scikit-learn's kernels and SVR's gamma convention."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.svm import SVR

from bayes_rvm.kernels import KERNELS, KernelBasis, resolve_gamma


@pytest.fixture
def data(rng):
    return rng.normal(size=(30, 3)), rng.normal(size=(7, 3))


@pytest.mark.parametrize("kernel", KERNELS)
def test_named_kernels_match_pairwise_kernels(data, kernel):
    X, Z = data
    basis = KernelBasis(kernel, gamma=0.3, degree=2, coef0=0.5).fit(X)
    params = {}
    if kernel in {"rbf", "poly", "polynomial", "laplacian", "sigmoid"}:
        params["gamma"] = 0.3
    if kernel in {"poly", "polynomial"}:
        params["degree"] = 2
    if kernel in {"poly", "polynomial", "sigmoid"}:
        params["coef0"] = 0.5
    Phi = basis.transform(Z)
    np.testing.assert_allclose(Phi[:, :-1], pairwise_kernels(Z, X, metric=kernel, **params))
    np.testing.assert_array_equal(Phi[:, -1], 1.0)


def test_gamma_scale_is_svr_convention(data):
    X, _ = data
    X = 5.0 * X
    svr = SVR(gamma="scale").fit(X, X[:, 0])
    assert resolve_gamma("scale", X) == pytest.approx(svr._gamma)
    assert resolve_gamma("auto", X) == pytest.approx(1 / 3)


def test_callable_and_gp_kernel_equal_rbf(data):
    X, Z = data
    ref = KernelBasis("rbf", gamma=0.5).fit(X).transform(Z)
    # exp(-||x-y||^2 / (2 l^2)) with l = 1 is gamma = 0.5.
    gp = KernelBasis(RBF(length_scale=1.0)).fit(X).transform(Z)
    fn = (
        KernelBasis(
            lambda A, B, g: np.exp(-g * ((A[:, None] - B[None]) ** 2).sum(-1)),
            kernel_params={"g": 0.5},
        )
        .fit(X)
        .transform(Z)
    )
    np.testing.assert_allclose(gp, ref)
    np.testing.assert_allclose(fn, ref)


def test_precomputed_passes_columns_through(data):
    X, Z = data
    K = pairwise_kernels(Z, X, metric="rbf", gamma=0.2)
    basis = KernelBasis("precomputed").fit(pairwise_kernels(X, X, metric="rbf", gamma=0.2))
    np.testing.assert_allclose(basis.transform(K)[:, :-1], K)
    np.testing.assert_allclose(basis.transform(K, columns=[4, 30]), np.c_[K[:, 4], np.ones(7)])


def test_column_subset_and_chunks_equal_full(data):
    X, Z = data
    basis = KernelBasis("rbf", bias=True).fit(X)
    full = basis.transform(Z)
    cols = [29, 3, 30, 0]
    np.testing.assert_allclose(basis.transform(Z, columns=cols), full[:, cols])
    np.testing.assert_allclose(basis.transform(Z, chunk_size=2), full)
    assert KernelBasis("rbf", bias=False).fit(X).transform(Z).shape == (7, 30)


def test_given_centres(data):
    X, Z = data
    basis = KernelBasis("rbf", gamma=1.0).fit(X, centres=Z)
    assert basis.n_basis_ == 8
    np.testing.assert_allclose(
        basis.transform(X)[:, :-1], pairwise_kernels(X, Z, metric="rbf", gamma=1.0)
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kernel": "nope"}, "kernel must be one of"),
        ({"kernel": 3}, "kernel must be"),
        ({"gamma": -1.0}, "gamma"),
        ({"gamma": "wide"}, "gamma"),
        ({"degree": 0, "kernel": "poly"}, "degree"),
    ],
)
def test_bad_parameters(data, kwargs, match):
    X, _ = data
    with pytest.raises((ValueError, TypeError), match=match):
        KernelBasis(**kwargs).fit(X)


def test_wrong_feature_count_and_bad_kernel_output(data):
    X, Z = data
    with pytest.raises(ValueError, match="features"):
        KernelBasis().fit(X).transform(Z[:, :2])
    with pytest.raises(ValueError, match="shape"):
        KernelBasis(lambda A, B: np.ones((len(A), 2))).fit(X).transform(Z)
    with pytest.raises(ValueError, match="non-finite"):
        KernelBasis(lambda A, B: np.full((len(A), len(B)), np.nan)).fit(X).transform(Z)
