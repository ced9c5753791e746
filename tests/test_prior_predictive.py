"""The prior as a PyMC user reaches it: ``sample_prior_predictive``, ``log_alpha``, ``summary``
and model graphs with named nodes."""

import warnings

import numpy as np
import pytest
from pymc.model_graph import ModelGraph
from scipy import stats

from bayes_rvm import RVC, RVR, summary
from bayes_rvm.datasets import make_sinc
from bayes_rvm.inference import sample_prior_predictive
from bayes_rvm.models.graphs import rvm_regression_model
from bayes_rvm.models.priors import DEFAULT_R2D2, DEFAULT_WEIGHT_SCALE

N = 40


@pytest.fixture(scope="module")
def sinc():
    X, y = make_sinc(N, noise=0.1, random_state=0)
    return X, 3.0 * y  # not unit scale: the prior is stated on the normalised problem


@pytest.fixture(scope="module")
def full_prior(sinc):
    """A type-II fit and draws from the prior of its model over every column."""
    est = RVR().fit(*sinc)
    with warnings.catch_warnings():
        # no notice from numba: the hyperprior's draw compiles, the marginal y's is announced
        # nowhere
        warnings.simplefilter("error", UserWarning)
        dt = sample_prior_predictive(est.model_, 1500, random_seed=0)
    return est, dt


def test_estimator_adds_prior_groups_on_the_posteriors_columns(sinc):
    X, y = sinc
    est = RVR().fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        dt = est.sample_prior_predictive(300, random_state=0)
    assert dt is est.idata_
    prior, post = dt["prior"].dataset, dt["posterior"].dataset
    k = est.active_.size
    for name in ("alpha", "alpha_rel", "log_alpha", "w"):
        assert prior[name].dims == ("chain", "draw", "basis")
        assert prior[name].shape == (1, 300, k)
    assert prior["sigma"].shape == (1, 300)
    np.testing.assert_array_equal(prior["basis"].values, post["basis"].values)
    assert dt["prior_predictive"]["y"].dims == ("chain", "draw", "obs")
    assert dt["prior_predictive"]["y"].shape == (1, 300, N)
    np.testing.assert_allclose(prior["log_alpha"], np.log(prior["alpha"]), rtol=1e-12)
    np.testing.assert_allclose(post["log_alpha"], np.log(post["alpha"]), rtol=1e-12)
    # a second call replaces the groups; extend_idata=False leaves the tree as it is
    first = dt["prior_predictive"]["y"].values.copy()
    est.sample_prior_predictive(300, random_state=1)
    assert not np.allclose(est.idata_["prior_predictive"]["y"].values, first)
    kept = est.idata_["prior_predictive"]["y"].values.copy()
    out = est.sample_prior_predictive(50, random_state=2, extend_idata=False)
    assert set(out.children) == {"prior", "prior_predictive"}
    np.testing.assert_array_equal(est.idata_["prior_predictive"]["y"].values, kept)


def test_hyperprior_draws_are_the_r2d2_on_the_relative_scale(full_prior):
    _, dt = full_prior
    alpha_rel = dt["prior"]["alpha_rel"].values[0]
    a, b, c = (DEFAULT_R2D2[k] for k in ("r2_a", "r2_b", "concentration"))
    # The default (models.priors.DEFAULT_R2D2): the relative variances 1 / alpha_rel sum to
    # omega ~ BetaPrime(a, b), and a column's share of it is Beta(c, (M - 1) c), the Dirichlet's
    # marginal
    v = 1.0 / alpha_rel
    omega = v.sum(axis=1)
    assert stats.kstest(omega, stats.betaprime(a, b).cdf).pvalue > 1e-3
    M = v.shape[1]
    for i in (0, M - 1):
        ks = stats.kstest(v[:, i] / omega, stats.beta(c, (M - 1) * c).cdf)
        assert ks.pvalue > 1e-3, i


def test_prior_weights_and_targets_given_the_hyperparameters(full_prior):
    est, dt = full_prior
    prior = dt["prior"].dataset
    Phi = np.asarray(est.model_["Phi"].get_value())
    alpha = prior["alpha"].values[0]
    sigma = prior["sigma"].values[0]
    w = prior["w"].values[0]
    y = dt["prior_predictive"]["y"].values[0]
    # w_i sqrt(alpha_i) and the noise (y - Phi w) / sigma are standard normal
    assert stats.kstest((w * np.sqrt(alpha)).ravel(), "norm").pvalue > 1e-3
    assert stats.kstest(((y - w @ Phi.T) / sigma[:, None]).ravel(), "norm").pvalue > 1e-3
    # y alone, w integrated out: y^T C^-1 y ~ chi2(N), C = sigma^2 I + Phi A^-1 Phi^T
    q = np.empty(len(y))
    for s in range(len(y)):
        C = sigma[s] ** 2 * np.eye(N) + (Phi / alpha[s]) @ Phi.T
        L = np.linalg.cholesky(C)
        q[s] = np.sum(np.linalg.solve(L, y[s]) ** 2)
    assert stats.kstest(q, stats.chi2(N).cdf).pvalue > 1e-3


def test_prior_predictive_spread_matches_a_numpy_simulation_of_the_prior(full_prior):
    est, dt = full_prior
    model = est.model_
    Phi = np.asarray(model["Phi"].get_value())
    phi_scale = np.asarray(model["phi_scale"].get_value())
    y_scale = float(model["y_scale"].get_value())
    rng = np.random.default_rng(5)
    S = 4000
    # The model written out again: 1 / alpha_rel = omega phi with omega = G_a / G_b ~ BetaPrime(a,
    # b) and phi ~ Dirichlet(c, ..., c) (DEFAULT_R2D2); sigma_rel ~ HalfNormal(1)
    a, b, c = (DEFAULT_R2D2[k] for k in ("r2_a", "r2_b", "concentration"))
    omega = rng.standard_gamma(a, S) / rng.standard_gamma(b, S)
    phi = rng.dirichlet(np.full(Phi.shape[1], c), S)
    scale_rel = np.sqrt(omega[:, None] * phi)
    w = rng.standard_normal(scale_rel.shape) * scale_rel * y_scale / phi_scale
    sigma = y_scale * np.abs(rng.standard_normal((S, 1)))
    y_sim = w @ Phi.T + sigma * rng.standard_normal((S, N))
    y_pp = dt["prior_predictive"]["y"].values[0]
    # The heavy-tailed prior has no variance: compare quantiles of |y_n| at a few rows
    for n in (0, N // 2, N - 1):
        ks = stats.ks_2samp(np.abs(y_pp[:, n]), np.abs(y_sim[:, n]))
        assert ks.pvalue > 1e-3, n


def test_classifier_prior_matches_a_numpy_simulation_of_the_prior():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=60) > 0, "yes", "no")
    est = RVC().fit(X, y)
    dt = est.sample_prior_predictive(1500, random_state=0)
    yp = dt["prior_predictive"]["y"].values
    assert yp.shape == (1, 1500, 60)
    assert set(np.unique(yp)) == {0, 1}  # class indices, as observed_data holds them
    assert dt["prior"]["w"].shape == (1, 1500, est.active_.size)
    phi_scale = np.asarray(est.model_["phi_scale"].get_value())
    basis = dt["prior"]["basis"].values
    i = int(np.flatnonzero(np.isin(np.asarray(est.model_.coords["basis"]), basis[:1]))[0])
    w_sim = (
        rng.standard_normal(4000)
        * DEFAULT_WEIGHT_SCALE
        * np.abs(rng.standard_cauchy(4000))
        / phi_scale[i]
    )
    w_pp = dt["prior"]["w"].values[0, :, 0]
    assert stats.ks_2samp(np.abs(w_pp), np.abs(w_sim)).pvalue > 1e-3


def test_prior_predictive_of_a_sufficient_statistics_model_is_refused():
    rng = np.random.default_rng(2)
    model = rvm_regression_model(rng.normal(size=(5, 5)), rng.normal(size=5), n_rows=1000)
    with pytest.raises(ValueError, match="sufficient statistics"):
        sample_prior_predictive(model, 10)


def test_prior_predictive_of_offsets_and_several_outputs():
    rng = np.random.default_rng(3)
    Phi = rng.normal(size=(20, 6))
    # a fixed offset of 5 shifts every draw by 5: the draws' median sits there
    model = rvm_regression_model(Phi, rng.normal(size=20), offset=np.full(20, 5.0))
    y = sample_prior_predictive(model, 400, random_seed=0)["prior_predictive"]["y"].values
    assert abs(np.median(y) - 5.0) < 0.2
    # an offset with a prior of its own: each draw's y is shifted by that draw's value
    import pymc as pm

    def shift(model):
        return pm.Normal("shift", 100.0, 1.0) * pt_ones(20)

    model = rvm_regression_model(Phi, rng.normal(size=20), offset=shift)
    dt = sample_prior_predictive(model, 300, random_seed=0)
    y, s = dt["prior_predictive"]["y"].values[0], dt["prior"]["shift"].values[0]
    assert abs(np.median(y - s[:, None])) < 0.2
    # two outputs: w and y carry the output dimension
    model = rvm_regression_model(Phi, rng.normal(size=(20, 2)))
    dt = sample_prior_predictive(model, 50, random_seed=0)
    assert dt["prior"]["w"].dims == ("chain", "draw", "basis", "output")
    assert dt["prior_predictive"]["y"].shape == (1, 50, 20, 2)


def pt_ones(n):
    import pytensor.tensor as pt

    return pt.ones(n)


def test_bad_draws_are_refused(full_prior):
    est, _ = full_prior
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="draws must be a positive integer"):
            sample_prior_predictive(est.model_, bad)


@pytest.mark.parametrize("marginal", ["dense", "lowrank"])
def test_model_graph_names_its_nodes_and_leaves_no_data_unused(marginal):
    rng = np.random.default_rng(1)
    Phi = rng.normal(size=(30, 4)) @ rng.normal(size=(4, 12))  # rank 4: the low-rank form fits
    model = rvm_regression_model(Phi, rng.normal(size=30), marginal=marginal)
    assert ("Phi_U" in model.named_vars) == (marginal == "lowrank")
    # the default R2-D2 prior, sampled in its Gaussian coordinates (R^2 and a Gaussian vector)
    assert model["alpha_rel"] in model.deterministics
    assert type(model["alpha_rel_z"].owner.op).__name__ == "StandardNormal"
    assert type(model["alpha_rel_r2"].owner.op).__name__ == "BetaRV"
    assert type(model["y"].owner.op).__name__ == "MarginalNormal"
    parents = ModelGraph(model).make_compute_graph()
    used = set().union(*parents.values())
    data = {v.name for v in model.data_vars}
    assert data - {"y_obs"} <= used  # y_obs is the observed value, drawn as y's child
    assert "alpha" in used
    assert parents["log_alpha"] == {"alpha"}


def test_summary_lists_hyperparameters_then_log_alpha(sinc):
    est = RVR().fit(*sinc)
    table = summary(est, kind="stats")
    k = est.active_.size
    expected = ["sigma"] + [f"log_alpha[{c}]" for c in est.active_]
    assert list(table.index) == expected
    np.testing.assert_allclose(table["mean"].values[1:], np.log(est.alpha_), rtol=1e-3, atol=1e-3)
    assert len(summary(est, weights=True, kind="stats")) == 1 + 2 * k
    two = summary(est.idata_, basis=est.active_[:2], kind="stats")
    assert len(two) == 3
    # A type-II fit's hyperparameters are the same in every draw: by default no ESS, R-hat or
    # Monte Carlo errors (they were 1000, NaN and 0, with NumPy's warnings).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(summary(est).columns) == list(table.columns)
    assert "r_hat" in summary(est, kind="all").columns
    with pytest.raises(ValueError, match="basis must be 'all'"):
        summary(est, basis="relevant")
    with pytest.raises(ValueError, match="not in the posterior"):
        summary(est, var_names=["tau"])
    with pytest.raises(ValueError, match="not basis coordinates"):
        summary(est, basis=[10**6])
    with pytest.raises(TypeError, match="fitted estimator"):
        summary(np.zeros(3))
