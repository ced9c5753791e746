"""MCMC, type-II DataTrees, prediction and comparison, checked against independent truths:
dense Gaussian posteriors, scipy densities and the type-II fit."""

from __future__ import annotations

import json
import time
import warnings

import arviz as az
import numpy as np
import pytest
from scipy import stats
from threadpoolctl import threadpool_limits

from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.datasets import make_sinc, sinc
from bayes_rvm.dims import BASIS, OBS
from bayes_rvm.evidence.gaussian import fit_mackay
from bayes_rvm.evidence.problem import prior_column_scale
from bayes_rvm.inference import (
    SamplingDiagnosticsWarning,
    draw_weights,
    pointwise_log_likelihood,
    predict_draws,
    sample_mcmc,
    sampling,
    type2_datatree,
    type2_initvals,
)
from bayes_rvm.models.graphs import rvm_regression_model
from bayes_rvm.posterior.comparison import compare, relevance_summary

NU = 2.0  # Student-t degrees of freedom used for both engines


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas():
    # Small matrices on two shared cores: BLAS threads only spin against the sampler's chains.
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def sinc60():
    X, y = make_sinc(60, random_state=0, shuffle=False)
    basis = KernelBasis("rbf", gamma=1.0 / 9.0).fit(X)
    Phi = basis.transform(X)
    norms = np.linalg.norm(Phi, axis=0)
    scale = float(np.sqrt(np.mean(y**2)))
    Xg = np.linspace(-10, 10, 201)[:, None]
    return {
        "Phi": Phi / norms,
        # the unit-norm columns' scale as the estimators state the hyperpriors (unit RMS)
        "phi_scale": prior_column_scale(np.ones(Phi.shape[1]), len(y)),
        "t": y / scale,
        "Phi_grid": basis.transform(Xg) / norms,
        "f_grid": sinc(Xg[:, 0]) / scale,
        "fit": fit_mackay(Phi / norms, y / scale),
    }


@pytest.fixture(scope="module")
def mcmc_ard(sinc60):
    model = rvm_regression_model(sinc60["Phi"], sinc60["t"], phi_scale=sinc60["phi_scale"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return sample_mcmc(model, chains=4, random_seed=11, progressbar=False)


@pytest.fixture(scope="module")
def mcmc_student(sinc60):
    model = rvm_regression_model(
        sinc60["Phi"], sinc60["t"], phi_scale=sinc60["phi_scale"], prior="student_t", nu=NU
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return sample_mcmc(model, chains=4, random_seed=12, progressbar=False)


# ---------------------------------------------------------------------------------------------
# building blocks against dense truths
# ---------------------------------------------------------------------------------------------
def test_draw_weights_matches_dense_gaussian_conditional():
    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(15, 6))
    Y = rng.normal(size=(15, 1))
    alpha = np.array([0.5, 2.0, 1e-3, 1e8, 3.0, 1.0])
    beta = 4.0
    Sigma = np.linalg.inv(np.diag(alpha) + beta * Phi.T @ Phi)
    m = beta * Sigma @ Phi.T @ Y[:, 0]
    S = 20_000
    w = draw_weights(Phi, Y, np.tile(alpha, (S, 1)), np.full(S, beta), rng)[:, :, 0]
    se = np.sqrt(np.diag(Sigma) / S)
    assert np.all(np.abs(w.mean(0) - m) < 5 * se + 1e-12)
    np.testing.assert_allclose(np.cov(w.T), Sigma, atol=0.05 * np.max(np.diag(Sigma)))
    assert np.abs(w[:, 3]).max() < 1e-3  # a huge alpha pins its weight at zero


def test_pointwise_log_likelihood_is_gaussian():
    rng = np.random.default_rng(1)
    Phi = rng.normal(size=(8, 3))
    Y = rng.normal(size=(8, 2))
    w = rng.normal(size=(4, 3, 2))
    sigma = np.array([0.5, 1.0, 2.0, 0.3])
    ll = pointwise_log_likelihood(Phi, Y, w, sigma)
    expected = np.stack([stats.norm(Phi @ w[s], sigma[s]).logpdf(Y).sum(axis=1) for s in range(4)])
    np.testing.assert_allclose(ll, expected, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# type-II DataTree
# ---------------------------------------------------------------------------------------------
def test_type2_datatree_draws_and_groups(sinc60):
    fit = sinc60["fit"]
    dt = type2_datatree(fit, sinc60["Phi"], sinc60["t"], n_draws=20_000, random_seed=0)
    assert set(dt.children) == {"posterior", "log_likelihood", "observed_data", "constant_data"}
    post = dt["posterior"].dataset
    assert post["w"].dims == ("chain", "draw", BASIS)
    w = post["w"].values[0]
    pruned = np.setdiff1d(np.arange(w.shape[1]), fit.active)
    assert np.all(w[:, pruned] == 0) and np.all(np.isinf(post["alpha"].values[0, 0, pruned]))
    wa = w[:, fit.active]
    Sigma = fit.covariance
    se = np.sqrt(np.diag(Sigma) / wa.shape[0])
    assert np.all(np.abs(wa.mean(0) - fit.mean[:, 0]) < 5 * se)
    np.testing.assert_allclose(np.cov(wa.T), Sigma, atol=0.05 * np.max(np.diag(Sigma)))
    assert float(post["sigma"][0, 0]) == pytest.approx(fit.beta**-0.5)
    ll = dt["log_likelihood"].dataset["y"]
    assert ll.dims == ("chain", "draw", OBS)
    expected = stats.norm(sinc60["Phi"] @ w[7], fit.beta**-0.5).logpdf(sinc60["t"])
    np.testing.assert_allclose(ll.values[0, 7], expected, atol=1e-12)
    assert dt.attrs["method"] == "type2"
    assert json.loads(dt.attrs["settings"])["n_draws"] == 20_000
    assert dt.attrs["n_relevant"] == fit.active.size
    summary = az.summary(dt, var_names=["w"], coords={BASIS: fit.active}, round_to="none")
    np.testing.assert_allclose(summary["mean"].values, fit.mean[:, 0], atol=5 * np.max(se))


def test_type2_datatree_subset_basis_and_validation(sinc60):
    fit = sinc60["fit"]
    dt = type2_datatree(fit, sinc60["Phi"], sinc60["t"], n_draws=10, basis=fit.active)
    assert list(dt["posterior"]["w"].coords[BASIS].values) == list(fit.active)
    with pytest.raises(ValueError, match="relevance vector"):
        type2_datatree(fit, sinc60["Phi"], sinc60["t"], basis=[0])
    with pytest.raises(ValueError, match="columns"):
        type2_datatree(fit, sinc60["Phi"][:, :5], sinc60["t"])


def test_type2_initvals(sinc60):
    fit = sinc60["fit"]
    init = type2_initvals(fit, alpha_max=1e4)
    assert np.all(np.isfinite(init["alpha_rel"])) and init["alpha_rel"].max() <= 1e4
    np.testing.assert_allclose(
        init["alpha_rel"][fit.active], np.minimum(fit.alpha[fit.active], 1e4)
    )
    assert float(init["sigma_rel"]) == pytest.approx(fit.beta**-0.5)


# ---------------------------------------------------------------------------------------------
# MCMC on sinc
# ---------------------------------------------------------------------------------------------
def test_mcmc_datatree_shape(mcmc_ard, sinc60):
    dt = mcmc_ard
    assert {"posterior", "log_likelihood", "observed_data", "constant_data", "sample_stats"} <= set(
        dt.children
    )
    post = dt["posterior"].dataset
    assert post["w"].dims == ("chain", "draw", BASIS)
    assert post["alpha"].dims == ("chain", "draw", BASIS)
    assert post.sizes["chain"] == 4 and post.sizes["draw"] == 1000
    np.testing.assert_allclose(post["beta"].values, post["sigma"].values ** -2)
    assert dt["log_likelihood"].dataset["y"].dims == ("chain", "draw", OBS)
    np.testing.assert_allclose(dt["observed_data"].dataset["y"].values, sinc60["t"])
    assert dt.attrs["method"] == "mcmc" and dt.attrs["sampler"] == "nutpie"
    # the pointwise terms are the exact leave-one-out densities of the marginal: one row left
    # out of N(0, C) and conditioned on the others, by scipy
    alpha = post["alpha"].values[2, 17]
    s = float(post["sigma"][2, 17])
    Phi, t = sinc60["Phi"], sinc60["t"]
    C = s**2 * np.eye(t.size) + (Phi / alpha) @ Phi.T
    for n in (0, 31):
        k = np.delete(np.arange(t.size), n)
        gain = np.linalg.solve(C[np.ix_(k, k)], C[k, n])
        expected = stats.norm(gain @ t[k], np.sqrt(C[n, n] - C[n, k] @ gain)).logpdf(t[n])
        assert dt["log_likelihood"].dataset["y"].values[2, 17, n] == pytest.approx(expected)


def test_mcmc_converges_on_sinc(mcmc_ard, sinc60):
    dt = mcmc_ard
    diag = json.loads(dt.attrs["diagnostics"])
    assert diag["divergences"] == 0
    assert diag["max_rhat"] <= 1.01
    post = dt["posterior"].dataset
    rv = sinc60["fit"].active
    log_alpha_rv = np.log(post["alpha"].isel({BASIS: rv})).to_dataset(name="la")
    assert float(az.ess(post[["sigma"]], method="bulk")["sigma"]) >= 400
    assert float(az.ess(log_alpha_rv, method="bulk")["la"].min()) >= 400
    assert float(az.rhat(log_alpha_rv)["la"].max()) <= 1.01


def test_mcmc_prediction_agrees_with_type2(mcmc_ard, sinc60):
    fit = sinc60["fit"]
    Phi_grid = sinc60["Phi_grid"]
    t2_mean, t2_var = fit.predict(Phi_grid[:, fit.active])
    mean, draws = predict_draws(mcmc_ard, Phi_grid, random_seed=0)
    assert draws.dims == ("chain", "draw", OBS) and draws.shape == (4, 1000, 201)
    # MCMC posterior mean within one type-II predictive sd everywhere on the grid
    assert np.all(np.abs(mean - t2_mean[:, 0]) <= np.sqrt(t2_var))
    # and both near the noise-free function (noise sd is about a third of the target RMS)
    assert np.sqrt(np.mean((mean - sinc60["f_grid"]) ** 2)) < 0.15
    # posterior predictive draws carry the noise: their sd is at least the noise sd
    noise_sd = float(mcmc_ard["posterior"]["sigma"].mean())
    assert np.all(draws.std(("chain", "draw")).values >= 0.9 * noise_sd)


def test_compare_four_fits_table(mcmc_ard, mcmc_student, sinc60):
    fit_st = fit_mackay(sinc60["Phi"], sinc60["t"], alpha_prior=(NU / 2, NU / 2))
    fits = {
        "type-II ARD": type2_datatree(sinc60["fit"], sinc60["Phi"], sinc60["t"], random_seed=1),
        "type-II Student-t": type2_datatree(fit_st, sinc60["Phi"], sinc60["t"], random_seed=2),
        "MCMC ARD": mcmc_ard,
        "MCMC Student-t": mcmc_student,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        table = compare(fits)
        loo = {name: az.loo(dt) for name, dt in fits.items()}
    print(table.to_string())
    assert set(table.index) == set(fits)
    assert sorted(table["rank"]) == [0, 1, 2, 3]
    assert table["weight"].sum() == pytest.approx(1.0)
    for name, res in loo.items():
        assert table.loc[name, "elpd"] == pytest.approx(res.elpd)
    best = table["elpd"].max()
    np.testing.assert_allclose(table["elpd_diff"], table["elpd"] - best, atol=1e-9)
    # all four describe the same data about equally well: within a few standard errors
    assert (-table["elpd_diff"] <= 4 * table["dse"] + 1e-9).all()


def test_relevance_summary_lists_type2_relevance_vectors(mcmc_ard, sinc60):
    t2 = type2_datatree(sinc60["fit"], sinc60["Phi"], sinc60["t"], n_draws=4000, random_seed=0)
    with pytest.warns(FutureWarning, match="deprecated"):
        table = relevance_summary(mcmc_ard, type2=t2)
    assert table.index.name == BASIS and len(table) == sinc60["Phi"].shape[1]
    assert table["type2_relevant"].sum() == sinc60["fit"].active.size
    assert table["p_relevant"].is_monotonic_decreasing
    fit = sinc60["fit"]
    se = np.sqrt(np.diag(fit.covariance) / 4000)
    assert np.all(np.abs(table.loc[fit.active, "type2_w"] - fit.mean[:, 0]) < 5 * se)
    # With 61 strongly overlapping RBF columns the data fix combinations of weights, not which
    # column carries them: unlike type-II, the posterior of each alpha stays close to its prior.
    # P(alpha < 10) under the half-Cauchy(1) scale prior is P(s > 10^-1/2):
    prior_p = stats.halfcauchy(scale=1.0).sf(10**-0.5)
    assert abs(table["p_relevant"].mean() - prior_p) < 0.1


def test_compare_validation(sinc60):
    t2 = type2_datatree(sinc60["fit"], sinc60["Phi"], sinc60["t"], n_draws=10)
    with pytest.raises(ValueError, match="at least two"):
        compare({"a": t2})
    short = type2_datatree(sinc60["fit"], sinc60["Phi"][:30], sinc60["t"][:30], n_draws=10)
    with pytest.raises(ValueError, match="different numbers"):
        compare({"a": t2, "b": short})


def test_diagnostic_warnings_and_compile_cache(mcmc_ard, sinc60):
    n_cached = len(sampling._NUTPIE_CACHE)
    model = rvm_regression_model(
        sinc60["Phi"], sinc60["t"], phi_scale=sinc60["phi_scale"]
    )  # a new model, same settings
    t0 = time.perf_counter()
    with pytest.warns(SamplingDiagnosticsWarning) as record:
        dt = sample_mcmc(model, draws=20, tune=20, chains=2, random_seed=3, progressbar=False)
    assert time.perf_counter() - t0 < 10  # no recompilation
    messages = [str(w.message) for w in record]
    # 40 draws in all cannot reach the bulk ESS of 400, and two chains this short disagree.
    assert any("ESS" in m and "below 400" in m for m in messages)
    assert any("R-hat" in m and "basis=fit.active" in m for m in messages)
    # The warnings point at the caller's line, here, not inside the package.
    assert {w.filename for w in record} == {__file__}
    assert len(sampling._NUTPIE_CACHE) == n_cached
    again = sample_mcmc(
        model, draws=20, tune=20, chains=2, random_seed=3, progressbar=False, warn=False
    )
    for var in ("sigma", "w"):
        np.testing.assert_array_equal(dt["posterior"][var].values, again["posterior"][var].values)


def test_sample_mcmc_rejects_unknown_sampler(sinc60):
    model = rvm_regression_model(sinc60["Phi"], sinc60["t"], phi_scale=sinc60["phi_scale"])
    with pytest.raises(ValueError, match="sampler"):
        sample_mcmc(model, sampler="hmc")


@pytest.mark.slow
def test_marginal_and_joint_forms_agree_on_noise(sinc60):
    # On the type-II relevance vectors the joint (non-centred) form is well behaved; both forms
    # target the same posterior of sigma. numpyro: its JAX compilation of the joint model is fast.
    fit = sinc60["fit"]
    kw = {"draws": 1000, "tune": 1000, "chains": 4, "progressbar": False, "warn": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        marg = sample_mcmc(
            rvm_regression_model(
                sinc60["Phi"], sinc60["t"], phi_scale=sinc60["phi_scale"], basis=fit.active
            ),
            random_seed=5,
            **kw,
        )
        joint = sample_mcmc(
            rvm_regression_model(
                sinc60["Phi"],
                sinc60["t"],
                phi_scale=sinc60["phi_scale"],
                basis=fit.active,
                form="joint",
            ),
            sampler="numpyro",
            random_seed=6,
            nuts={"chain_method": "sequential"},
            **kw,
        )
    s_m = marg["posterior"].dataset[["sigma"]]
    s_j = joint["posterior"].dataset[["sigma"]]
    se = np.hypot(float(az.mcse(s_m)["sigma"]), float(az.mcse(s_j)["sigma"]))
    assert abs(float(s_m["sigma"].mean()) - float(s_j["sigma"].mean())) < 4 * se
    sd_m, sd_j = float(s_m["sigma"].std()), float(s_j["sigma"].std())
    assert abs(sd_m - sd_j) < 0.1 * sd_m
    q = [0.05, 0.5, 0.95]
    np.testing.assert_allclose(
        np.quantile(s_m["sigma"], q), np.quantile(s_j["sigma"], q), atol=0.25 * sd_m
    )


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["numpyro", "pymc"])
def test_other_samplers_agree_with_nutpie(sampler, mcmc_ard, sinc60):
    model = rvm_regression_model(sinc60["Phi"], sinc60["t"], phi_scale=sinc60["phi_scale"])
    nuts = {"chain_method": "sequential"} if sampler == "numpyro" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dt = sample_mcmc(
            model,
            sampler=sampler,
            draws=300,
            tune=300,
            chains=2,
            random_seed=7,
            progressbar=False,
            warn=False,
            nuts=nuts,
        )
    assert {"posterior", "log_likelihood", "sample_stats"} <= set(dt.children)
    assert dt["posterior"]["w"].dims == ("chain", "draw", BASIS)
    ref = mcmc_ard["posterior"]["sigma"]
    got = dt["posterior"]["sigma"]
    assert abs(float(got.mean()) - float(ref.mean())) < 4 * float(ref.std()) / np.sqrt(100)
