"""Likelihood families, the batched Gaussian weight posterior and PSIS importance weights.

Truths: scipy.stats' log densities, finite differences of the log-likelihood in the latent,
dense matrix inverses, and the Pareto-k diagnostic of a proposal known to be far too narrow.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bayes_rvm.evidence import LaplaceWeights, importance_draws
from bayes_rvm.evidence.gaussian import weight_posterior
from bayes_rvm.evidence.mode import posterior_mode
from bayes_rvm.families import (
    BERNOULLI,
    LOG_2PI,
    POISSON,
    SOFTMAX,
    family,
    gaussian_log_likelihood,
)


def test_pointwise_log_likelihoods_are_scipys_and_batch_over_draws():
    rng = np.random.default_rng(0)
    S, N, C = 4, 7, 3
    eta = rng.normal(scale=2.0, size=(S, N))
    t01 = rng.integers(0, 2, N).astype(float)
    p = 1.0 / (1.0 + np.exp(-eta))
    np.testing.assert_allclose(
        BERNOULLI.log_likelihood(eta, t01), stats.bernoulli.logpmf(t01, p), rtol=1e-12
    )
    # Exact where the probability of the label is near one (log_expit is the truth there).
    far = np.array([40.0, -40.0, 700.0])
    np.testing.assert_allclose(
        BERNOULLI.log_likelihood(far, np.array([1.0, 0.0, 1.0])),
        [-np.exp(-40.0), -np.exp(-40.0), -np.exp(-700.0)],
        rtol=1e-12,
    )
    counts = rng.poisson(3.0, N).astype(float)
    np.testing.assert_allclose(
        POISSON.log_likelihood(eta, counts), stats.poisson.logpmf(counts, np.exp(eta)), rtol=1e-12
    )
    eta_c = rng.normal(size=(S, N, C))
    labels = rng.integers(0, C, N)
    probs = np.exp(eta_c) / np.exp(eta_c).sum(axis=-1, keepdims=True)
    ll = SOFTMAX.log_likelihood(eta_c, np.eye(C)[labels])
    assert ll.shape == (S, N)
    np.testing.assert_allclose(ll, np.log(probs[:, np.arange(N), labels]), rtol=1e-12)
    sigma = rng.uniform(0.5, 2.0, size=(S, 1))
    np.testing.assert_allclose(
        gaussian_log_likelihood(t01, eta, sigma),
        stats.norm.logpdf(t01, eta, sigma),
        rtol=1e-12,
    )
    assert LOG_2PI == pytest.approx(np.log(2 * np.pi), rel=1e-16)


@pytest.mark.parametrize("name", ["bernoulli", "poisson"])
def test_curvature_and_its_slope_are_finite_differences_of_the_log_likelihood(name):
    fam = family(name)
    eta = np.linspace(-3.0, 2.0, 11)
    t = np.ones_like(eta)
    h = 1e-4
    second = (
        fam.log_likelihood(eta + h, t)
        - 2 * fam.log_likelihood(eta, t)
        + fam.log_likelihood(eta - h, t)
    ) / h**2
    np.testing.assert_allclose(fam.curvature(fam.mean(eta)), -second, rtol=1e-5, atol=1e-7)
    slope = (fam.curvature(fam.mean(eta + h)) - fam.curvature(fam.mean(eta - h))) / (2 * h)
    np.testing.assert_allclose(fam.curvature_slope(fam.mean(eta)), slope, rtol=1e-6, atol=1e-9)


def test_the_newton_total_is_the_sum_of_the_pointwise_terms():
    rng = np.random.default_rng(1)
    eta = rng.normal(size=(9, 3))
    T = np.eye(3)[rng.integers(0, 3, 9)]
    Y, total = SOFTMAX.mean_and_log_likelihood(eta, T)
    assert total == pytest.approx(SOFTMAX.log_likelihood(eta, T).sum(), rel=1e-14)
    np.testing.assert_allclose(Y.sum(axis=1), 1.0, rtol=1e-14)
    with pytest.raises(ValueError, match="likelihood must be one of"):
        family("gaussian")


def test_weight_posterior_is_the_dense_inverse_for_every_draw():
    rng = np.random.default_rng(2)
    N, K, D, S = 25, 5, 2, 4
    Phi = rng.normal(size=(N, K))
    T = rng.normal(size=(N, D))
    alpha = np.exp(rng.normal(scale=4.0, size=(S, K)))  # alphas many orders apart
    beta = np.exp(rng.normal(size=S))
    post = weight_posterior(Phi.T @ Phi, Phi.T @ T, alpha, beta)
    z = rng.normal(size=(S, K, D))
    for s in range(S):
        H = np.diag(alpha[s]) + beta[s] * Phi.T @ Phi
        Sigma = np.linalg.inv(H)
        np.testing.assert_allclose(post.mean[s], beta[s] * Sigma @ Phi.T @ T, rtol=1e-9, atol=1e-14)
        G = post.inverse_factor()[s]
        np.testing.assert_allclose(G.T @ G, Sigma, rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(post.sigma_diag()[s], np.diag(Sigma), rtol=1e-9)
        assert post.log_det()[s] == pytest.approx(np.linalg.slogdet(H)[1], rel=1e-12)
        # A draw is m + Sigma^(1/2) z: its deviation has covariance Sigma.
        dev = post.draw(z)[s] - post.mean[s]
        np.testing.assert_allclose(dev.T @ H @ dev, z[s].T @ z[s], rtol=1e-9)


def test_psis_reports_pareto_k_and_warns_for_a_far_too_narrow_proposal():
    rng = np.random.default_rng(3)
    n = 150
    Phi = np.column_stack([np.ones(n), rng.normal(size=n)])
    t = (rng.random(n) < 1.0 / (1.0 + np.exp(-Phi[:, 1]))).astype(float)
    alpha = np.array([1e-2, 1e-2])
    post = posterior_mode(Phi, t, alpha)
    good = importance_draws(LaplaceWeights(post.mean, post.chol, "bernoulli"), Phi, t, alpha)
    # A well-determined logistic posterior is close to its Laplace approximation.
    assert good.pareto_k < 0.5
    # A proposal 20 times narrower than the posterior cannot cover it: PSIS says so.
    narrow = LaplaceWeights(post.mean, 20.0 * post.chol, "bernoulli")
    bad = importance_draws(narrow, Phi, t, alpha)
    assert bad.pareto_k > 0.7
    with pytest.warns(RuntimeWarning, match="Pareto k"):
        bad.predict_mean(Phi[:3])
    np.testing.assert_allclose(bad.weights.sum(), 1.0, rtol=1e-12)


def test_log_softmax_is_scipys_bit_for_bit():
    """The engines' log-softmax repeats scipy's operations without its dispatch: the same
    numbers, on latents of any scale, batched, and with a class of probability zero."""
    from scipy.special import log_softmax as scipy_log_softmax

    from bayes_rvm.families import log_softmax

    rng = np.random.default_rng(0)
    for shape, axis in (((300, 3), 1), ((5, 40, 4), -1)):
        x = rng.normal(scale=30.0, size=shape)
        np.testing.assert_array_equal(log_softmax(x, axis), scipy_log_softmax(x, axis=axis))
    x = rng.normal(size=(4, 3))
    x[0, 1] = -np.inf
    out = log_softmax(x, 1)
    np.testing.assert_array_equal(out, scipy_log_softmax(x, axis=1))
    assert out[0, 1] == -np.inf and np.allclose(np.exp(out).sum(axis=1), 1.0)
