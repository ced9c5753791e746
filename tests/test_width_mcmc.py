"""The kernel width sampled by NUTS: the model's density, the estimator, its predictions."""

import copy
import warnings

import arviz as az
import numpy as np
import pytest
from scipy import stats
from sklearn.metrics.pairwise import laplacian_kernel, rbf_kernel

from bayes_rvm import load_model, save_model
from bayes_rvm.basis.kernels import reference_gamma
from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.inference import SamplingDiagnosticsWarning
from bayes_rvm.models.graphs import rvm_width_model
from bayes_rvm.models.priors import DEFAULT_GAMMA_PRIOR, DEFAULT_R2D2, Prior
from tests.test_models import _log_alpha_rel, _with_alpha

SMALL = {"draws": 150, "tune": 250, "chains": 2}


def _halfcauchy_precision_logpdf(alpha, beta=1.0):
    # alpha = s^-2 with s ~ HalfCauchy(beta), by the change of variables s -> s^-2.
    s = alpha**-0.5
    return stats.halfcauchy(scale=beta).logpdf(s) + np.log(0.5 * alpha**-1.5)


def _r2d2_precision_logpdf(alpha, r2_a, r2_b, concentration):
    # v = 1 / alpha = omega phi, omega ~ BetaPrime(a, b), phi ~ Dirichlet(c): the density of v is
    # BetaPrime(omega) Dir(v / omega) / omega^(M - 1), and alpha's has the Jacobian prod v^2.
    v = 1.0 / alpha
    omega = v.sum()
    dirichlet = stats.dirichlet(np.full(v.size, concentration)).logpdf(v / omega)
    return (
        stats.betaprime(r2_a, r2_b).logpdf(omega)
        + dirichlet
        - (v.size - 1) * np.log(omega)
        + 2.0 * np.log(v).sum()
    )


#: An R2-D2 prior sampled in log alpha (a concentration other than 1/2).
_R2D2_IN_LOG_ALPHA = Prior("R2D2Precision", r2_a=0.5, r2_b=0.5, concentration=0.7)


@pytest.mark.parametrize(
    ("kernel", "ref_kernel", "multi", "bias", "alpha_prior"),
    [
        ("rbf", rbf_kernel, False, True, None),
        ("laplacian", laplacian_kernel, False, True, "halfcauchy"),
        ("rbf", rbf_kernel, True, False, None),
        ("rbf", rbf_kernel, False, True, _R2D2_IN_LOG_ALPHA),
    ],
)
def test_width_model_log_density_equals_dense_reference(
    kernel, ref_kernel, multi, bias, alpha_prior
):
    """The whole log density (priors included, in the sampled coordinates' units) at random points
    against a dense NumPy / SciPy computation: the design built by scikit-learn's kernel at that
    width, ln N(y | 0, sigma^2 I + Phi A^-1 Phi^T) by scipy, the priors by scipy.stats."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2)) * [1.0, 3.0]
    Y = rng.normal(size=(40, 2) if multi else 40) * 5.0
    centres = X[[1, 7, 19, 30]]
    y_scale = 4.0
    model = rvm_width_model(
        X, Y, centres, kernel=kernel, bias=bias, y_scale=y_scale, alpha_prior=alpha_prior
    )
    logp = model.compile_logp(jacobian=False)
    # the default hyperprior is the R2-D2 prior, sampled as R^2 and a Gaussian vector z (the
    # density without Jacobians: Beta(R^2) N(z; 0, I)); other priors in log alpha
    gaussian = alpha_prior is None
    g0 = reference_gamma(X, kernel)
    for _ in range(3):
        g_rel = np.exp(rng.normal())
        a_rel = np.exp(rng.normal(size=4 + bias) * 2)
        s_rel = np.exp(rng.normal() - 1)
        point = {"gamma_rel_log__": np.log(g_rel), "sigma_rel_log__": np.log(s_rel)}
        if gaussian:
            point = _with_alpha(model, point, a_rel)
            np.testing.assert_allclose(_log_alpha_rel(model, point), np.log(a_rel), atol=1e-12)
        else:
            point[model.rvs_to_values[model["alpha_rel"]].name] = np.log(a_rel)
        Phi = ref_kernel(X, centres, gamma=g_rel * g0)
        if bias:
            Phi = np.c_[Phi, np.ones(40)]
        # alpha_rel is stated for unit-RMS columns (bayes_rvm.evidence.problem.prior_column_scale)
        alpha = a_rel * np.mean(Phi**2, axis=0) / y_scale**2
        cov = (s_rel * y_scale) ** 2 * np.eye(40) + (Phi / alpha) @ Phi.T
        T = Y.reshape(40, -1)
        ref = sum(stats.multivariate_normal(np.zeros(40), cov).logpdf(t) for t in T.T)
        ref += stats.lognorm(s=2.0).logpdf(g_rel)  # DEFAULT_GAMMA_PRIOR
        if alpha_prior == "halfcauchy":
            ref += _halfcauchy_precision_logpdf(a_rel, beta=0.1).sum()
        elif gaussian:
            r2 = 1.0 / (1.0 + np.exp(-point["alpha_rel_r2_logodds__"]))
            ref += stats.beta(DEFAULT_R2D2["r2_a"], DEFAULT_R2D2["r2_b"]).logpdf(r2)
            ref += stats.norm.logpdf(point["alpha_rel_z"]).sum()
        else:
            ref += _r2d2_precision_logpdf(a_rel, **alpha_prior.parameters)
        ref += stats.halfnorm().logpdf(s_rel)
        # (the R2-D2's gammaln and sums in float64 against scipy's: about 2e-10 relative)
        assert logp(point) == pytest.approx(ref, rel=1e-9, abs=1e-8)


def test_width_model_checks_its_input():
    X, y = make_sinc(20, random_state=0, shuffle=False)
    with pytest.raises(ValueError, match="positive reals"):
        rvm_width_model(X, y, X[:3], gamma_prior=Prior("Normal", mu=0.0, sigma=1.0))
    with pytest.raises(ValueError, match="'rbf' or 'laplacian'"):
        rvm_width_model(X, y, X[:3], kernel="poly")
    with pytest.raises(ValueError, match="same number of features"):
        rvm_width_model(X, y, np.ones((3, 2)))
    with pytest.raises(ValueError, match="finite"):
        rvm_width_model(X, np.r_[y[:-1], np.nan], X[:3])


def test_estimator_rejects_what_it_cannot_sample():
    X, y = make_sinc(20, random_state=0, shuffle=False)
    with pytest.raises(ValueError, match="inference='mcmc'"):
        RVR(gamma=DEFAULT_GAMMA_PRIOR).fit(X, y)
    with pytest.raises(ValueError, match="kernel"):
        RVR(gamma=DEFAULT_GAMMA_PRIOR, inference="mcmc", kernel="poly").fit(X, y)
    with pytest.raises(ValueError, match="rvm\\*"):
        RVR(gamma=DEFAULT_GAMMA_PRIOR, inference="mcmc", predictive="rvm*").fit(X, y)
    with pytest.raises(ValueError, match="RVC cannot sample the kernel width"):
        RVC(gamma=DEFAULT_GAMMA_PRIOR, inference="mcmc").fit(X, (y > 0).astype(int))


@pytest.fixture(scope="module")
def sampled():
    X, y = make_sinc(60, noise=0.1, random_state=1, shuffle=False)
    with warnings.catch_warnings():
        # a short run: its R-hat / ESS warnings are expected here (the slow test checks them)
        warnings.simplefilter("ignore", SamplingDiagnosticsWarning)
        est = RVR(
            gamma=DEFAULT_GAMMA_PRIOR, inference="mcmc", sampler_config=SMALL, random_state=0
        ).fit(X, y)
    return X, y, est


def test_sampled_width_in_idata_and_covers_the_evidence_width(sampled):
    """The width's posterior is in idata_ and its 95% interval holds the type-II width, which a
    separate gamma='evidence' fit finds."""
    X, y, est = sampled
    post = est.idata_["posterior"].dataset
    for name in ("gamma", "length_scale", "gamma_rel", "alpha", "sigma", "w"):
        assert name in post
    ls = post["length_scale"].values.ravel()
    np.testing.assert_allclose(post["gamma"].values.ravel(), ls**-2.0, rtol=1e-12)
    evidence = RVR(gamma="evidence").fit(X, y)
    lo, hi = np.quantile(ls, [0.025, 0.975])
    assert lo < evidence.length_scale_ < hi
    assert hi / lo < 2.0  # the data pin the width: far narrower than the prior's factor 50
    # the basis is the type-II fit's relevance vectors (mcmc_basis="auto")
    np.testing.assert_array_equal(post["basis"].values, est.active_)


def test_predictions_average_over_the_sampled_width(sampled):
    """predict's mean is the average over draws of phi(x; gamma_s)^T w_s with the design rebuilt
    by scikit-learn's rbf_kernel at each draw's width; its std the mixture's."""
    X, _, est = sampled
    Xt = np.linspace(-9, 9, 7)[:, None]
    post = est.idata_["posterior"].dataset
    gam = post["gamma"].values.ravel()
    w = post["w"].transpose("chain", "draw", "basis").values.reshape(gam.size, -1)
    cols = post["basis"].values
    centres = X[cols[cols < X.shape[0]]]
    f = np.empty((gam.size, Xt.shape[0]))
    for s, g in enumerate(gam):
        Phi = rbf_kernel(Xt, centres, gamma=g)
        if cols[-1] == X.shape[0]:
            Phi = np.c_[Phi, np.ones(len(Xt))]
        f[s] = Phi @ w[s]
    sigma = post["sigma"].values.ravel()
    mean, std = est.predict(Xt, return_std=True)
    np.testing.assert_allclose(mean, f.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(std**2, f.var(0) + np.mean(sigma**2), rtol=1e-10)


def test_width_rule_is_the_one_fit_resolved(sampled):
    """gamma is resolved once, in fit: a set_params after the fit leaves the fitted model's
    predictions (the mixture over the sampled widths, checked above against rbf_kernel) as they
    were, rather than switching it to one design at the new gamma."""
    _, _, est = sampled
    Xt = np.linspace(-9, 9, 7)[:, None]
    mean, std = est.predict(Xt, return_std=True)
    moved = copy.deepcopy(est).set_params(gamma=1.0)
    mean_after, std_after = moved.predict(Xt, return_std=True)
    np.testing.assert_array_equal(mean_after, mean)
    np.testing.assert_array_equal(std_after, std)


def test_sampled_width_posterior_predictive_and_loo(sampled):
    X, y, est = sampled
    dt = est.sample_posterior_predictive(random_state=0)
    pp = dt["posterior_predictive"]["y"]
    assert pp.shape == (SMALL["chains"], SMALL["draws"], X.shape[0])
    # posterior predictive at the training inputs: centred on the data within the noise
    assert np.sqrt(np.mean((pp.mean(("chain", "draw")).values - y) ** 2)) < 0.15
    Xt = np.linspace(-9, 9, 5)[:, None]
    new = est.sample_posterior_predictive(Xt, random_state=0)["predictions"]["y"]
    assert new.shape == (SMALL["chains"], SMALL["draws"], 5)
    np.testing.assert_allclose(new.mean(("chain", "draw")), est.predict(Xt), atol=0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Pareto k of a 300-draw run
        assert np.isfinite(az.loo(est.idata_).elpd)


def test_sampled_width_saves_and_loads(sampled, tmp_path):
    *_, est = sampled
    path = save_model(est, tmp_path / "width.zarr")
    back = load_model(path)
    assert back.gamma == est.gamma
    Xt = np.linspace(-9, 9, 11)[:, None]
    np.testing.assert_array_equal(back.predict(Xt), est.predict(Xt))
    np.testing.assert_array_equal(
        back.idata_["posterior"]["length_scale"].values,
        est.idata_["posterior"]["length_scale"].values,
    )
    assert back.model_["gamma_rel"] is not None  # the model rebuilds from the saved fit


@pytest.mark.slow
def test_sampled_width_samples_cleanly_on_sinc():
    """Tipping's sinc, N = 100: four chains of 1000 draws, R-hat <= 1.01, no divergence, and the
    width's posterior around the type-II width."""
    X, y = make_sinc(100, noise=0.1, random_state=0, shuffle=False)
    est = RVR(gamma=DEFAULT_GAMMA_PRIOR, inference="mcmc", random_state=0).fit(X, y)
    dt = est.idata_
    assert int(dt["sample_stats"]["diverging"].sum()) == 0
    rhat = az.rhat(dt, var_names=["gamma_rel", "alpha_rel", "sigma_rel"])
    assert max(float(rhat[v].max()) for v in ("gamma_rel", "alpha_rel", "sigma_rel")) <= 1.01
    ls = dt["posterior"]["length_scale"].values.ravel()
    lo, hi = np.quantile(ls, [0.025, 0.975])
    assert lo < est.length_scale_ < hi
