"""The MacKay evidence engine against closed forms, dense references and scikit-learn's ARD."""

import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ARDRegression

from bayes_rvm.evidence import fit_mackay, gaussian_posterior
from tests.conftest import random_design


def dense_log_evidence(Phi, T, alpha, beta):
    """``sum_d ln N(t_d | 0, C)``, ``C = I / beta + Phi A^-1 Phi^T`` (reference document 001)."""
    C = np.eye(Phi.shape[0]) / beta + (Phi / alpha) @ Phi.T
    T = T.reshape(Phi.shape[0], -1)
    return sum(multivariate_normal(np.zeros(len(C)), C).logpdf(t) for t in T.T)


def posterior(Phi, T, alpha, beta):
    T = T.reshape(Phi.shape[0], -1)
    return gaussian_posterior(
        Phi.T @ Phi, Phi.T @ T, float(np.sum(T**2)), Phi.shape[0], alpha, beta
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("shape", [(30, 8, 1), (20, 35, 1), (25, 10, 3)])
def test_log_evidence_two_closed_forms_agree(seed, shape):
    # Eq. 1.10 of document 000 (through the posterior) against ln N(t | 0, C) of document 001.
    rng = np.random.default_rng(seed)
    n, m, d = shape
    Phi = rng.normal(size=(n, m))
    T = rng.normal(size=(n, d))
    alpha = np.exp(rng.uniform(-3, 3, m))
    beta = float(np.exp(rng.uniform(-1, 2)))
    got = posterior(Phi, T, alpha, beta).log_evidence
    want = dense_log_evidence(Phi, T, alpha, beta)
    assert got == pytest.approx(want, rel=1e-10)


def test_posterior_moments_equal_dense_inverse(rng):
    Phi, t = random_design(rng)
    alpha = np.exp(rng.uniform(-2, 2, Phi.shape[1]))
    beta = 4.0
    post = posterior(Phi, t, alpha, beta)
    Sigma = np.linalg.inv(np.diag(alpha) + beta * Phi.T @ Phi)
    np.testing.assert_allclose(post.mean[:, 0], beta * Sigma @ Phi.T @ t, rtol=1e-9)
    np.testing.assert_allclose(post.sigma_diag, np.diag(Sigma), rtol=1e-9)
    np.testing.assert_allclose(post.gamma, 1 - alpha * np.diag(Sigma), rtol=1e-9, atol=1e-12)


def test_optimum_is_a_stationary_point_of_the_dense_evidence(rng):
    # At convergence the gradient of ln N(T | 0, C) in log alpha (retained) and log beta vanishes.
    Phi, _ = random_design(rng, n=50, m=10)
    W = np.zeros((10, 2))
    W[[1, 4, 6]] = rng.normal(scale=2, size=(3, 2))
    T = Phi @ W + 0.3 * rng.normal(size=(50, 2))
    fit = fit_mackay(Phi, T, tol=1e-10, evidence_tol=0.0)
    assert fit.converged
    a = fit.active
    base = np.concatenate([np.log(fit.alpha[a]), [np.log(fit.beta)]])

    def f(theta):
        return dense_log_evidence(Phi[:, a], T, np.exp(theta[:-1]), np.exp(theta[-1]))

    h = 1e-5
    grad = [(f(base + h * e) - f(base - h * e)) / (2 * h) for e in np.eye(base.size)]
    np.testing.assert_allclose(grad, 0.0, atol=1e-5)
    # ... and the returned log evidence is that of the returned hyperparameters.
    assert fit.log_evidence == pytest.approx(f(base), rel=1e-10)


@pytest.mark.parametrize(
    ("lambda_12", "seed"),
    [((1e-6, 1e-6), 0), ((1e-6, 1e-6), 1), ((0.5, 0.5), 2), ((0.05, 0.05), 3)],
)
def test_matches_sklearn_ard_regression(lambda_12, seed):
    # Same design, no intercept, same start (weight precisions 1, noise precision 1/var(y)), same
    # Gamma hyperpriors and pruning threshold: the same fixed point. lambda_1 = lambda_2 = nu/2
    # is the Student-t prior of document 002.
    rng = np.random.default_rng(seed)
    Phi, y = random_design(rng, n=80, m=15)
    ard = ARDRegression(
        fit_intercept=False,
        tol=1e-14,
        max_iter=100_000,
        threshold_lambda=1e4,
        lambda_1=lambda_12[0],
        lambda_2=lambda_12[1],
    ).fit(Phi, y)
    fit = fit_mackay(
        Phi,
        y,
        alpha_init=1.0,
        beta_init=1.0 / (np.var(y) + np.finfo(float).eps),
        alpha_prior=lambda_12,
        beta_prior=(1e-6, 1e-6),
        threshold_alpha=1e4,
        tol=1e-12,
        evidence_tol=0.0,
        max_iter=100_000,
    )
    keep = np.flatnonzero(ard.lambda_ < 1e4)
    np.testing.assert_array_equal(fit.active, keep)
    np.testing.assert_allclose(fit.alpha[keep], ard.lambda_[keep], rtol=1e-4)
    np.testing.assert_allclose(fit.mean[:, 0], ard.coef_[keep], rtol=1e-4)
    assert fit.beta == pytest.approx(ard.alpha_, rel=1e-4)


def test_fixed_noise_is_kept(rng):
    Phi, y = random_design(rng)
    fit = fit_mackay(Phi, y, beta_init=7.5, fixed_beta=True, tol=1e-10, evidence_tol=0.0)
    assert fit.beta == 7.5
    # The alpha fixed point still holds for the retained set.
    post = posterior(Phi[:, fit.active], y, fit.alpha[fit.active], 7.5)
    np.testing.assert_allclose(fit.alpha[fit.active], post.gamma / post.mean[:, 0] ** 2, rtol=1e-6)


def test_irrelevant_columns_are_pruned_and_relevant_kept(rng):
    Phi = rng.normal(size=(200, 10))
    y = Phi[:, [2, 7]] @ np.array([1.5, -2.0]) + 0.1 * rng.normal(size=200)
    fit = fit_mackay(Phi, y)
    assert set(fit.active) >= {2, 7}
    # Other columns survive only where the noise happens to align with them, with tiny weights.
    others = np.isin(fit.active, [2, 7], invert=True)
    assert np.all(np.abs(fit.mean[others, 0]) < 0.01)
    np.testing.assert_allclose(fit.mean[~others, 0], [1.5, -2.0], atol=0.02)
    assert 1 / np.sqrt(fit.beta) == pytest.approx(0.1, rel=0.15)
    assert np.all(np.isinf(np.delete(fit.alpha, fit.active)))


def test_trace_and_stop_reason(rng):
    Phi, y = random_design(rng)
    fit = fit_mackay(Phi, y)
    assert fit.trace.shape == (fit.n_iter,)
    assert fit.converged and ("tol" in fit.reason or "stalled" in fit.reason)
    # Away from the start the MacKay iteration climbs the evidence.
    assert fit.trace[-1] >= fit.trace[0]


def test_non_convergence_warns_and_returns_best_so_far(rng):
    Phi, y = random_design(rng)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        fit = fit_mackay(Phi, y, max_iter=2)
    assert not fit.converged and fit.n_iter == 2 and np.isfinite(fit.log_evidence)


def test_zero_columns_are_never_selected(rng):
    Phi, y = random_design(rng)
    Phi[:, 3] = 0.0
    fit = fit_mackay(Phi, y)
    assert 3 not in fit.active and np.isfinite(fit.log_evidence)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha_prior": (-1, 0)}, "alpha_prior"),
        ({"beta_prior": "x"}, "beta_prior"),
        ({"alpha_init": 0.0}, "alpha_init"),
        ({"beta_init": -1.0}, "beta_init"),
        ({"max_iter": 0}, "max_iter"),
    ],
)
def test_bad_engine_arguments(rng, kwargs, match):
    Phi, y = random_design(rng)
    with pytest.raises(ValueError, match=match):
        fit_mackay(Phi, y, **kwargs)
