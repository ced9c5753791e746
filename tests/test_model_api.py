"""The PyMC model a fitted estimator holds: ``model_`` in the user's units, the posterior
predictive against dense analytic predictives, terms of the user's own in the mean, and priors as
objects that save and load."""

from __future__ import annotations

import pickle
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats
from threadpoolctl import threadpool_limits

from bayes_rvm import RVR, Prior, load_model, save_model
from bayes_rvm.datasets import make_sinc
from bayes_rvm.inference import SamplingDiagnosticsWarning, complete_posterior, sample_mcmc
from bayes_rvm.inference.diagnostics import _above
from bayes_rvm.models.graphs import model_cache_key
from tests.test_models import _log_alpha_rel, _with_alpha

GAMMA = 1 / 9.0  # Gaussian kernel of width 3 on sinc
NOISE = 0.1
SMALL = {"draws": 400, "tune": 400, "chains": 2}


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas():
    with threadpool_limits(limits=1):
        yield


@pytest.fixture(scope="module")
def sinc():
    # Targets far from unit scale, so that a model on the normalised problem would show.
    X, y = make_sinc(60, noise=NOISE, random_state=0, shuffle=False)
    return X, 1000.0 * y


@pytest.fixture(scope="module")
def mcmc_fit(sinc):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingDiagnosticsWarning)
        return RVR(
            gamma=GAMMA,
            inference="mcmc",
            sampler_config={"mcmc_basis": "relevant", **SMALL},
            random_state=0,
        ).fit(*sinc)


def _dense_predictive_sd(Phi, y, alpha, beta):
    """Independent truth: the predictive sd at the rows of ``Phi`` of the mixture over draws of
    N(Phi m, 1/beta + diag(Phi Sigma Phi^T)), Sigma = (A + beta Phi^T Phi)^-1 by a dense inverse."""
    means, variances = [], []
    for a, b in zip(alpha, beta, strict=True):
        Sigma = np.linalg.inv(np.diag(a) + b * Phi.T @ Phi)
        means.append(Phi @ (b * Sigma @ Phi.T @ y))
        variances.append(1.0 / b + np.einsum("ij,jk,ik->i", Phi, Sigma, Phi))
    means, variances = np.array(means), np.array(variances)
    return np.sqrt(variances.mean(axis=0) + means.var(axis=0))


# ---------------------------------------------------------------------------------------------
# model_
# ---------------------------------------------------------------------------------------------
def test_model_is_in_the_users_units(sinc):
    X, y = sinc
    est = RVR(gamma=GAMMA).fit(X, y)
    model = est.model_
    assert model is est.model_  # built once
    Phi = est.basis_.transform(X)
    np.testing.assert_allclose(model["Phi"].get_value(), Phi)
    np.testing.assert_allclose(model["y_obs"].get_value(), y)
    # the columns' root-mean-square: the scale the hyperpriors are stated for
    norms = np.sqrt(np.mean(Phi**2, axis=0))
    np.testing.assert_allclose(model["phi_scale"].get_value(), norms)
    rms = np.sqrt(np.mean(y**2))
    assert float(model["y_scale"].get_value()) == pytest.approx(rms)
    assert model.named_vars_to_dims["Phi"] == ("obs", "basis")
    # The likelihood in user units: dense N(0, sigma^2 I + Phi A^-1 Phi^T) on the raw targets.
    la_rel = np.linspace(-1.0, 6.0, Phi.shape[1])
    point = _with_alpha(model, model.initial_point(), np.exp(la_rel))
    point["sigma_rel_log__"] = np.array(np.log(0.05))
    alpha = np.exp(la_rel) * norms**2 / rms**2
    sigma = 0.05 * rms
    C = sigma**2 * np.eye(len(y)) + (Phi / alpha) @ Phi.T
    dense = stats.multivariate_normal(np.zeros(len(y)), C).logpdf(y)
    assert model.point_logps(point, round_vals=12)["y"] == pytest.approx(dense, rel=1e-9)
    # The default R2-D2 prior read in user units: the function's mean square over the rows,
    # sum_i rms_i^2 / alpha_i, is rms^2 times omega ~ BetaPrime(1/2, 1/2).
    draws = pm.draw(model["alpha"], draws=3000, random_seed=1)
    omega = (norms**2 / draws).sum(axis=1) / rms**2
    assert stats.kstest(omega, stats.betaprime(0.5, 0.5).cdf).pvalue > 1e-3
    assert model_cache_key(model) is not None


def test_model_is_never_pickled_and_is_rebuilt(sinc, tmp_path):
    est = RVR(gamma=GAMMA).fit(*sinc)
    key = model_cache_key(est.model_)
    again = pickle.loads(pickle.dumps(est))
    assert "_model" not in again.__dict__ or again.__dict__["_model"] is None
    assert model_cache_key(again.model_) == key
    loaded = load_model(save_model(est, tmp_path / "fit.zarr"))
    assert model_cache_key(loaded.model_) == key


def test_mcmc_samples_model_and_reports_user_units(mcmc_fit, sinc):
    _, y = sinc
    dt = mcmc_fit.idata_
    model = mcmc_fit.model_
    np.testing.assert_allclose(dt["constant_data"]["Phi"].values, model["Phi"].get_value())
    assert "gram" not in dt["constant_data"].dataset
    assert not any(name.startswith("warmup") for name in dt.children)
    post = dt["posterior"].dataset
    # noise sd in the units of y: about 1000 * 0.1
    assert 70 < float(post["sigma"].median()) < 140
    np.testing.assert_allclose(
        post["sigma"].values, post["sigma_rel"].values * np.sqrt(np.mean(y**2))
    )
    assert dt.attrs["estimator"] == "RVR"


# ---------------------------------------------------------------------------------------------
# Posterior predictive
# ---------------------------------------------------------------------------------------------
def test_type2_posterior_predictive_equals_analytic_predictive(sinc):
    X, y = sinc
    est = RVR(gamma=GAMMA, random_state=0).fit(X, y)
    dt = est.sample_posterior_predictive(random_state=1)
    draws = dt["posterior_predictive"]["y"]
    assert draws.dims == ("chain", "draw", "obs") and draws.shape == (1, 1000, 60)
    _, sd = est.predict(X, return_std=True)
    got = draws.std(("chain", "draw")).values
    # 1000 draws: the sd of an sd estimate is 1/sqrt(2000) of it
    assert np.abs(got / sd - 1).mean() < 0.03 and np.abs(got / sd - 1).max() < 0.12
    new = est.sample_posterior_predictive(X[:7] + 0.05, random_state=1)
    assert new["predictions"]["y"].shape == (1, 1000, 7)
    assert new["predictions_constant_data"]["Phi"].shape == (7, est.active_.size)


@pytest.mark.parametrize("form", ["marginal", "joint"])
def test_mcmc_posterior_predictive_sd_equals_dense_predictive_of_the_same_draws(
    form, mcmc_fit, sinc
):
    _, y = sinc
    if form == "marginal":
        dt = mcmc_fit.idata_
    else:
        model = mcmc_fit.make_model(form="joint")
        # the package's sampler on the joint form: nutpie on the cached machine code, completed
        dt = sample_mcmc(model, random_seed=3, progressbar=False, warn=False, **SMALL)
        assert "w" in dt["posterior"] and "y" in dt["log_likelihood"]
    pp = mcmc_fit.sample_posterior_predictive(random_state=2) if form == "marginal" else None
    if pp is None:
        from bayes_rvm.inference import sample_posterior_predictive

        pp = sample_posterior_predictive(dt, random_seed=2)
    got = pp["posterior_predictive"]["y"].std(("chain", "draw")).values
    post = dt["posterior"].dataset
    Phi = dt["constant_data"]["Phi"].values
    alpha = post["alpha"].values.reshape(-1, Phi.shape[1])
    beta = post["beta"].values.reshape(-1)
    want = _dense_predictive_sd(Phi, y, alpha, beta)
    ratio = got / want
    assert abs(ratio.mean() - 1) < 0.04 and np.abs(ratio - 1).max() < 0.2
    # ... and near the noise level, in the units of y
    assert 0.8 * 1000 * NOISE < got.mean() < 1.4 * 1000 * NOISE
    assert az.loo(pp).elpd < 0  # the completed tree is what az.loo expects
    pit = az.loo_pit(pp)
    assert pit["y"].shape == (60,)


def _small_fit(kind, inference, sinc):
    from bayes_rvm import RVC

    X, y = sinc
    if kind == "RVC":
        est, target = RVC(random_state=0), y > 200.0
    else:
        est, target = RVR(gamma=GAMMA, random_state=0), y
    if inference == "mcmc":
        est.set_params(inference="mcmc", sampler_config={"draws": 200, "tune": 300, "chains": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SamplingDiagnosticsWarning)
        return est.fit(X, target)


@pytest.mark.parametrize("kind", ["RVR", "RVC"])
@pytest.mark.parametrize("inference", ["type2", pytest.param("mcmc", marks=pytest.mark.slow)])
def test_posterior_predictive_extends_idata_for_arviz(kind, inference, sinc):
    import matplotlib

    matplotlib.use("Agg")
    X, _ = sinc
    est = _small_fit(kind, inference, sinc)
    copy = est.sample_posterior_predictive(random_state=1, extend_idata=False)
    assert "posterior_predictive" in copy.children
    assert "posterior_predictive" not in est.idata_.children
    dt = est.sample_posterior_predictive(random_state=1)
    assert dt is est.idata_
    draws = dt["posterior_predictive"]["y"]
    np.testing.assert_array_equal(draws.values, copy["posterior_predictive"]["y"].values)
    # Independent truth: the draws' mean is the estimator's own predictive mean.
    n_draws = draws.sizes["chain"] * draws.sizes["draw"]
    mean = draws.mean(("chain", "draw")).values
    if kind == "RVR":
        pred, sd = est.predict(X, return_std=True)
        assert np.all(np.abs(mean - pred) < 5 * sd / np.sqrt(n_draws))
    else:
        # The Bernoulli draws' mean is the mean over the weight draws of sigmoid(Phi w).
        from scipy.special import expit

        Phi = dt["constant_data"]["Phi"].values
        w = dt["posterior"]["w"].transpose("chain", "draw", ...).values.reshape(n_draws, -1)
        p = expit(w @ Phi.T).mean(axis=0)
        assert np.all(np.abs(mean - p) < 5 * np.sqrt(p * (1 - p) / n_draws) + 1e-9)
    pit = az.loo_pit(est.idata_)["y"].values
    assert pit.shape == (60,) and np.all((pit >= 0) & (pit <= 1))
    if kind == "RVR":  # a well-specified model: LOO-PIT is uniform
        assert stats.kstest(pit, "uniform").pvalue > 1e-3
    az.plot_ppc_dist(est.idata_)
    # New inputs: predictions replace the last ones, and the training draws stay.
    est.sample_posterior_predictive(X[:9], random_state=2)
    est.sample_posterior_predictive(X[:4], random_state=2)
    assert est.idata_["predictions"]["y"].shape[-1] == 4
    assert est.idata_["predictions_constant_data"]["Phi"].shape[0] == 4
    assert "posterior_predictive" in est.idata_.children


def test_the_prior_draw_path_stops_with_an_error_naming_the_right_function(mcmc_fit):
    with pytest.raises(NotImplementedError, match="sample_posterior_predictive"):
        pm.sample_posterior_predictive(mcmc_fit.idata_, model=mcmc_fit.model_, progressbar=False)


# ---------------------------------------------------------------------------------------------
# Terms of the user's own
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_user_covariate_slope_is_recovered_in_both_forms():
    rng = np.random.default_rng(5)
    X, f = make_sinc(80, noise=0.0, random_state=0, shuffle=False)
    z = rng.normal(size=80)
    slope_true = 0.3
    y = f + slope_true * z + NOISE * rng.normal(size=80)
    est = RVR(gamma=GAMMA, sampler_config={"mcmc_basis": "relevant"}).fit(X, y)

    def covariate(model):
        z_data = pm.Data("covariate", z, dims="obs")
        slope = Prior("Normal", mu=0.0, sigma=1.0).create_variable("slope")
        return slope * z_data

    summaries = {}
    for form in ("marginal", "joint"):
        model = est.make_model(form=form, offset=covariate)
        assert model_cache_key(model) is None  # a user's graph is not cached by its spec
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trace = pm.sample(
                model=model, random_seed=4, progressbar=False, nuts={"target_accept": 0.95}, **SMALL
            )
        dt = complete_posterior(trace, model, random_seed=0)
        s = dt["posterior"]["slope"].values.ravel()
        lo, hi = np.quantile(s, [0.025, 0.975])
        assert lo < slope_true < hi
        summaries[form] = (
            s.mean(),
            s.std(),
            float(az.mcse(dt["posterior"].dataset[["slope"]])["slope"]),
        )
        assert np.isfinite(az.loo(dt).elpd)
    (m1, s1, e1), (m2, s2, e2) = summaries["marginal"], summaries["joint"]
    assert abs(m1 - m2) < 4 * np.hypot(e1, e2)
    assert abs(s1 - s2) < 0.2 * s1


def test_fixed_offset_shifts_the_marginal_likelihood(sinc):
    X, y = sinc
    est = RVR(gamma=GAMMA).fit(X, y)
    off = np.linspace(-50, 50, len(y))
    shifted = est.make_model(offset=off)
    plain = RVR(gamma=GAMMA).fit(X, y - off).make_model()
    point = plain.initial_point()
    # same column norms, different y_scale: compare at the same user-unit sigma and alpha
    np.testing.assert_allclose(shifted["offset"].get_value(), off)
    assert shifted.rvm_spec.offset == "data"
    lp = shifted.compile_logp(vars=[shifted["y"]])
    lp_plain = plain.compile_logp(vars=[plain["y"]])
    s_shift = float(shifted["y_scale"].get_value())
    s_plain = float(plain["y_scale"].get_value())
    p2 = dict(point)
    p2["sigma_rel_log__"] = point["sigma_rel_log__"] + np.log(s_plain / s_shift)
    p2 = _with_alpha(
        plain, p2, np.exp(_log_alpha_rel(plain, point) + 2 * np.log(s_shift / s_plain))
    )
    assert lp(p2) == pytest.approx(lp_plain(point), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# Priors as objects
# ---------------------------------------------------------------------------------------------
def test_priors_are_used_saved_and_loaded(sinc, tmp_path):
    X, y = sinc
    alpha_prior = Prior("Gamma", alpha=1.0, beta=Prior("HalfNormal", sigma=1.0))
    noise_prior = Prior("HalfCauchy", beta=0.5)
    est = RVR(
        gamma=GAMMA,
        prior_params={"alpha_prior": alpha_prior},
        likelihood_params={"noise_prior": noise_prior},
    ).fit(X, y)
    model = est.model_
    assert {v.name for v in model.free_RVs} == {"alpha_rel_beta", "alpha_rel", "sigma_rel"}
    assert model.rvm_spec.alpha_prior == alpha_prior
    loaded = load_model(save_model(est, tmp_path / "fit.zarr"))
    assert loaded.prior_params["alpha_prior"] == alpha_prior
    assert loaded.likelihood_params["noise_prior"] == noise_prior
    assert model_cache_key(loaded.model_) == model_cache_key(model)
    assert repr(alpha_prior) == 'Prior("Gamma", alpha=1.0, beta=Prior("HalfNormal", sigma=1.0))'
    assert Prior.from_dict(alpha_prior.to_dict()) == alpha_prior
    assert hash(Prior("Gamma", alpha=1, beta=2)) == hash(Prior("Gamma", alpha=1.0, beta=2.0))
    with pytest.raises(ValueError, match="no parameter"):
        Prior("Gamma", shape=1.0)
    with pytest.raises(ValueError, match="not a PyMC distribution"):
        Prior("Gammma")
    with pytest.raises(ValueError, match="inference='mcmc'"):
        RVR(prior="student_t", prior_params={"nu": Prior("Gamma", alpha=2.0, beta=0.1)}).fit(X, y)


def test_warning_thresholds_print_distinctly():
    assert _above(1.0100004, 1.01) == "1.0100004"
    assert _above(1.0149, 1.01) == "1.015"
    assert _above(1.2, 1.01) == "1.200"
