"""Relevance determination under MCMC (issue 25 item 3) on a design where it is well posed.

Twenty independent standard-normal features, three of them informative, N = 100: the columns are
nearly orthogonal, so the data determine each column's relevance, unlike a kernel basis whose
neighbouring columns are near-duplicates (``benchmarks/bench_relevance.py``, ``docs/theory.md``).
The truths are independent of the sampler: the prior's quantiles in closed form, and for each
column the one-dimensional posterior of its ``alpha_rel`` given the least-squares estimate of its
weight, ``p(alpha | y) ~ p(alpha) N(w_hat; 0, 1/alpha + se^2)``, integrated on a grid.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from bayes_rvm.evidence.problem import prior_column_scale
from bayes_rvm.inference import sample_mcmc
from bayes_rvm.models.graphs import rvm_regression_model
from bayes_rvm.models.priors import Prior, as_prior, default_alpha_prior

N, D, INFORMATIVE = 100, 20, 3
THRESHOLD = 10.0  # relevance_summary's threshold on alpha of unit-norm columns
# alpha_rel is stated for unit-RMS columns (prior_column_scale): N times the unit-norm alpha, and
# HalfCauchyPrecision(0.1) on it is HalfCauchyPrecision(1) on the unit-norm alpha at N = 100.
UNIT_NORM = float(N)


def _problem():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D))
    w = np.zeros(D)
    w[:INFORMATIVE] = [2.0, -1.0, 0.5]
    return X, X @ w + rng.standard_normal(N)


def _halfcauchy_precision_cdf(alpha, beta=1.0):
    # alpha = s^-2, s ~ HalfCauchy(beta): P(alpha < a) = P(s > a^-1/2) = 1 - 2/pi atan(a^-1/2/beta)
    return 1.0 - 2.0 / np.pi * np.arctan(alpha**-0.5 / beta)


def _one_dimensional_posteriors(X, y):
    """Median log10 alpha_rel and P(alpha_rel < 10) of each column given its OLS weight."""
    norms = np.linalg.norm(X, axis=0)
    y_scale = np.sqrt(np.mean(y**2))
    Z = X / norms
    w_hat, *_ = np.linalg.lstsq(Z, y / y_scale, rcond=None)
    resid = y / y_scale - Z @ w_hat
    s2 = resid @ resid / (N - D)
    se2 = s2 * np.diag(np.linalg.inv(Z.T @ Z))
    log_a = np.linspace(-8, 8, 4001) * np.log(10)
    a = np.exp(log_a)
    # HalfCauchyPrecision(1) on alpha, as a density in log alpha: alpha p(alpha).
    log_prior = -np.log(np.pi) - np.log1p(1.0 / a) - 0.5 * log_a
    var = 1.0 / a[None, :] + se2[:, None]
    log_post = log_prior - 0.5 * np.log(var) - 0.5 * w_hat[:, None] ** 2 / var
    post = np.exp(log_post - log_post.max(1, keepdims=True))
    cdf = np.cumsum(post, 1)
    cdf /= cdf[:, -1:]
    median = np.array([log_a[np.searchsorted(c, 0.5)] for c in cdf]) / np.log(10)
    p_below = np.array([np.interp(np.log(THRESHOLD), log_a, c) for c in cdf])
    return median, p_below


def _prior_draws(prior: Prior, n: int = 100_000) -> np.ndarray:
    import pymc as pm

    with pm.Model():
        var = prior.create_variable("alpha_rel", shape=n)
    with warnings.catch_warnings():
        # a CustomDist's random draw runs in Python, which numba announces
        warnings.filterwarnings("ignore", message="Numba will use object mode")
        return pm.draw(var, random_seed=0)


def _posterior(alpha_prior=None):
    X, y = _problem()
    model = rvm_regression_model(
        X,
        y,
        phi_scale=prior_column_scale(np.linalg.norm(X, axis=0), N),
        y_scale=float(np.sqrt(np.mean(y**2))),
        alpha_prior=alpha_prior,
    )
    dt = sample_mcmc(
        model, draws=400, tune=300, chains=2, random_seed=1, progressbar=False, warn=False
    )
    return X, y, model, dt


@pytest.fixture(scope="module")
def halfcauchy_posterior():
    return _posterior("halfcauchy")


@pytest.fixture(scope="module")
def default_posterior():
    return _posterior()


def test_halfcauchy_hyperprior_quantiles_are_the_closed_form_ones(halfcauchy_posterior):
    *_, model, _ = halfcauchy_posterior
    prior = model.rvm_spec.alpha_prior
    assert prior == default_alpha_prior("halfcauchy") == Prior("HalfCauchyPrecision", beta=0.1)
    draws = _prior_draws(prior)
    for q in (0.1, 0.5, 0.9):
        # the closed form's quantile: alpha_q = tan(pi/2 (1 - q))^-2 / beta^2
        truth = np.tan(np.pi / 2 * (1 - q)) ** -2 / 0.1**2
        assert np.quantile(draws, q) == pytest.approx(truth, rel=0.03)
    prior_p = _halfcauchy_precision_cdf(THRESHOLD)
    assert np.mean(draws / UNIT_NORM < THRESHOLD) == pytest.approx(prior_p, abs=4e-3)


def test_halfcauchy_posterior_determines_relevance_of_independent_features(halfcauchy_posterior):
    X, y, _, dt = halfcauchy_posterior
    assert int(dt["sample_stats"]["diverging"].sum()) <= 2
    alpha = dt["posterior"].dataset["alpha_rel"].transpose("chain", "draw", "basis").values
    alpha = alpha / UNIT_NORM
    log10_alpha = np.log10(alpha.reshape(-1, D))
    median = np.median(log10_alpha, axis=0)
    p_below = (alpha.reshape(-1, D) < THRESHOLD).mean(0)
    truth_median, truth_p = _one_dimensional_posteriors(X, y)
    informative, irrelevant = median[:INFORMATIVE], median[INFORMATIVE:]
    # The issue's criterion, well posed here: irrelevant columns' median log10 alpha lies at least
    # 1 above the informative ones'.
    assert np.median(irrelevant) - np.median(informative) >= 1.0
    # Prior against posterior: the prior gives every column P(alpha_rel < 10) = 0.805; the data
    # raise it to near 1 for the informative columns and lower it for the irrelevant ones.
    prior_p = _halfcauchy_precision_cdf(THRESHOLD)
    assert prior_p == pytest.approx(0.8050, abs=1e-4)
    assert p_below[:2].min() > 0.99  # the weight 0.5 column's truth is 0.92
    assert p_below[INFORMATIVE:].mean() < prior_p - 0.05
    # Each column's posterior agrees with its one-dimensional posterior given its OLS weight
    # (Monte Carlo error of 800 draws: about 0.05 in the median, 0.03 in the probability).
    np.testing.assert_allclose(median, truth_median, atol=0.3)
    np.testing.assert_allclose(p_below, truth_p, atol=0.12)


def test_default_posterior_determines_relevance_of_independent_features(default_posterior):
    # The default R2-D2 prior ties the columns together (they share omega), so no column has a
    # one-dimensional posterior of its own; the truths are the prior's, by simulation, and the
    # separation of the informative columns from the irrelevant ones.
    from bayes_rvm.inference import sample_prior_predictive
    from bayes_rvm.models.priors import DEFAULT_R2D2
    from bayes_rvm.posterior.relevance import column_relevance

    *_, model, dt = default_posterior
    assert model.rvm_spec.alpha_prior == default_alpha_prior("ard")
    assert model.rvm_spec.alpha_prior == Prior("R2D2Precision", **DEFAULT_R2D2)
    assert int(dt["sample_stats"]["diverging"].sum()) <= 2
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Numba will use object mode")
        prior = sample_prior_predictive(model, 2000, random_seed=0)
    table = column_relevance(dt, prior=prior)
    p, p_prior = table["p_effect"].values, table["p_effect_prior"].values
    # The prior's P(|w_rel| > 0.1), w_rel = z sqrt(omega phi_i), phi_i ~ Beta(c, (D - 1) c):
    # 0.442 by simulation; the model's 2000 draws share omega across the columns, so their mean
    # has Monte Carlo sd 0.0065 (the half-Cauchy(0.1)'s 0.3725 lies 10 sd away)
    rng = np.random.default_rng(3)
    a, b, c = (DEFAULT_R2D2[k] for k in ("r2_a", "r2_b", "concentration"))
    n_sim = 1_000_000
    omega = rng.standard_gamma(a, n_sim) / rng.standard_gamma(b, n_sim)
    w_rel = rng.standard_normal(n_sim) * np.sqrt(omega * rng.beta(c, (D - 1) * c, n_sim))
    truth_prior = np.mean(np.abs(w_rel) > 0.1)
    assert p_prior.mean() == pytest.approx(truth_prior, abs=0.02)
    # The two strong features (relative weights 0.81 and -0.44) certainly matter; the weak one
    # (0.12 +- 0.05 by least squares) perhaps; the irrelevant ones fall well below the prior.
    assert p[:2].min() > 0.99
    assert 0.2 < p[2] < 0.8
    assert p[INFORMATIVE:].mean() < 0.08 and p[INFORMATIVE:].max() < 0.25
    # The issue's criterion: irrelevant columns' median log10 alpha lies at least 1 above the
    # informative ones'.
    alpha = dt["posterior"].dataset["alpha_rel"].transpose("chain", "draw", "basis").values
    median = np.median(np.log10(alpha.reshape(-1, D) / UNIT_NORM), axis=0)
    assert np.median(median[INFORMATIVE:]) - np.median(median[:INFORMATIVE]) >= 1.0


def test_regularised_horseshoe_is_the_horseshoe_plus_the_slab_floor():
    # alpha = (tau lambda)^-2 + c^-2 with tau lambda ~ HalfCauchy(beta): P(alpha < a) is the
    # half-Cauchy precision's at a - c^-2, and alpha never falls below c^-2.
    prior = Prior("RegularisedHorseshoePrecision", beta=0.1, c=4.0)
    assert as_prior(prior.to_dict(), "alpha_prior", positive=True) == prior
    draws = _prior_draws(prior)
    assert draws.min() > 1.0 / 16.0
    for a in (0.1, 1.0, 100.0, 1e4):
        truth = _halfcauchy_precision_cdf(a - 1.0 / 16.0, beta=0.1)
        assert np.mean(draws < a) == pytest.approx(truth, abs=5e-3)
    import pymc as pm

    with pm.Model() as model:
        prior.create_variable("alpha_rel")
    # its density in alpha against the half-Cauchy precision's, shifted by the floor
    logp = model.compile_logp(jacobian=False)({"alpha_rel_shifted_log__": np.log(2.0 - 1.0 / 16.0)})
    beta, local = 0.1, 2.0 - 1.0 / 16.0
    truth = -np.log(np.pi * beta) - np.log1p(1.0 / (local * beta**2)) - 1.5 * np.log(local)
    assert logp == pytest.approx(truth, rel=1e-10)


@pytest.mark.parametrize("c", [Prior("HalfNormal", sigma=1.0), 0.0, -1.0])
def test_regularised_horseshoe_takes_a_fixed_positive_slab(c):
    with pytest.raises(ValueError, match="fixed positive slab scale"):
        Prior("RegularisedHorseshoePrecision", beta=1.0, c=c)


def test_regularised_horseshoe_samples_from_type2_starts_below_its_floor():
    # Type-II's relevance vectors on sinc have alpha_rel far below the floor c^-2 = 25 of a slab
    # of c = 0.2: the estimator's start (type2_initvals) lies outside the prior's support, and the
    # sampler must start just inside it instead of failing.
    from bayes_rvm import RVR
    from bayes_rvm.basis.kernels import KernelBasis
    from bayes_rvm.datasets import make_sinc

    X, y = make_sinc(100, noise=0.1, random=True, random_state=0, shuffle=False)
    # the premise, on the prior's scale alpha_rel = alpha rms(y)^2 / rms(phi)^2 (a slab of
    # c = 0.2 on unit-RMS columns is one of 2 on the unit-norm columns at N = 100)
    Phi = KernelBasis(kernel="rbf", gamma=0.25).fit(X).transform(X)
    rms = prior_column_scale(np.linalg.norm(Phi, axis=0), len(X))
    alpha = RVR(gamma=0.25).fit(X, y).fit_.alpha
    assert np.min(alpha * np.mean(y**2) / rms**2) < 25.0
    prior = Prior("RegularisedHorseshoePrecision", beta=0.001, c=0.2)
    est = RVR(
        gamma=0.25,
        inference="mcmc",
        sampler_config={"draws": 100, "tune": 100, "chains": 2},
        random_state=1,
    )
    est.set_params(prior_params={"alpha_prior": prior}).fit(X, y, progressbar=False)
    alpha_rel = est.idata_["posterior"].dataset["alpha_rel"].values
    assert alpha_rel.min() >= 25.0
    assert np.isfinite(alpha_rel).all()
