"""Student-t noise (issue 30 item 3): the density, the variational EM, the estimator."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import integrate, optimize, stats
from scipy.special import digamma
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import rbf_kernel

from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.evidence import fit_evidence
from bayes_rvm.evidence.student_t import (
    NU_RANGE,
    StudentTWeights,
    student_t_e_step,
    update_nu,
)
from bayes_rvm.families import student_t_log_likelihood, student_t_variance

GAMMA = 1.0 / 9.0  # width 3


def _outlier_sinc(seed: int = 0):
    """Sinc (N = 100, noise sd 0.1) with 10 targets moved by +-U(2, 4); a noiseless test grid."""
    rng = np.random.RandomState(seed)
    X, y = make_sinc(100, random_state=seed, shuffle=False)
    idx = rng.choice(100, 10, replace=False)
    y = y.copy()
    y[idx] += rng.choice([-1.0, 1.0], 10) * rng.uniform(2.0, 4.0, 10)
    X_test = np.linspace(-10.0, 10.0, 400)[:, None]
    return X, y, idx, X_test, np.sinc(X_test[:, 0] / np.pi)


def _design(X, centres):
    return np.hstack([rbf_kernel(X, centres, gamma=GAMMA), np.ones((X.shape[0], 1))])


def test_student_t_density_is_scipys_and_its_variance_the_closed_form():
    rng = np.random.default_rng(1)
    t = rng.normal(size=7) * 3
    mean = rng.normal(size=(4, 7))
    sigma = rng.uniform(0.2, 2.0, size=(4, 1))
    nu = rng.uniform(0.3, 30.0, size=(4, 1))
    got = student_t_log_likelihood(t, mean, sigma, nu)
    want = stats.t.logpdf(t, df=nu, loc=mean, scale=sigma)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        student_t_variance(sigma, nu), np.where(nu > 2, stats.t.var(nu, scale=sigma), np.inf)
    )


def test_e_step_weight_is_the_quadrature_expectation_of_u():
    """``E[u]`` under ``q(u) ∝ exp(E_w ln N(t | phi w, 1/(beta u))) Gamma(u | nu/2, nu/2)``,
    with ``E_w`` over a Gaussian location, both integrals by quadrature."""
    t, m, v, beta, nu = 1.7, 0.2, 0.09, 4.0, 3.0
    # r = E_w (t - f)^2 for f ~ N(m, v), by quadrature over f.
    r = integrate.quad(lambda f: (t - f) ** 2 * stats.norm.pdf(f, m, np.sqrt(v)), -np.inf, np.inf)[
        0
    ]

    def log_q(u):
        return 0.5 * np.log(u) - 0.5 * beta * u * r + stats.gamma.logpdf(u, nu / 2, scale=2 / nu)

    z = integrate.quad(lambda u: np.exp(log_q(u)), 0, np.inf)[0]
    mean_u = integrate.quad(lambda u: u * np.exp(log_q(u)), 0, np.inf)[0] / z
    mean_log_u = integrate.quad(lambda u: np.log(u) * np.exp(log_q(u)), 0, np.inf)[0] / z
    got_u, got_log_u, _ = student_t_e_step(np.array([t]), np.array([m]), np.array([v]), beta, nu)
    assert got_u[0] == pytest.approx(mean_u, rel=1e-8)
    assert got_log_u[0] == pytest.approx(mean_log_u, rel=1e-7)


def test_nu_step_is_the_t_maximum_likelihood_of_the_expected_residuals():
    """``update_nu`` maximises ``sum_n ln St(r_n^1/2 | 0, beta^-1/2, nu)``: scipy's t density
    maximised by Nelder-Mead over ``(ln nu, ln beta)``, and over ``ln nu`` alone on a grid."""
    rng = np.random.default_rng(2)
    r = (0.3 * rng.standard_t(3.0, 200)) ** 2 + 0.01

    def loss(p):  # p[0] may be a column of ln nu: one loss per row (the grid below, one call)
        t_density = stats.t.logpdf(np.sqrt(r), df=np.exp(p[0]), scale=np.exp(-0.5 * p[1]))
        return -np.sum(t_density, axis=-1)

    nm = optimize.minimize(loss, [0.0, 0.0], method="Nelder-Mead", options={"xatol": 1e-9})
    nu, beta = update_nu(r, 1.0, 1.0)
    assert nu == pytest.approx(np.exp(nm.x[0]), rel=1e-4)
    assert beta == pytest.approx(np.exp(nm.x[1]), rel=1e-4)
    assert -loss([np.log(nu), np.log(beta)]) >= -nm.fun - 1e-9
    # With a Gamma(2, 0.5) hyperprior on beta over ln beta: 2 ln beta - 0.5 beta more.
    nm = optimize.minimize(
        lambda p: loss(p) - 2.0 * p[1] + 0.5 * np.exp(p[1]),
        [0.0, 0.0],
        method="Nelder-Mead",
        options={"xatol": 1e-9},
    )
    nu, beta = update_nu(r, 1.0, 1.0, beta_prior=(2.0, 0.5))
    np.testing.assert_allclose([np.log(nu), np.log(beta)], nm.x, atol=1e-4)

    grid = np.exp(np.linspace(np.log(NU_RANGE[0]), np.log(1e3), 20001))
    best = grid[np.argmax(-loss([np.log(grid)[:, None], np.log(12.0)]))]
    nu_fixed, beta_fixed = update_nu(r, 12.0, 1.0, fixed_beta=True)
    assert beta_fixed == 12.0 and nu_fixed == pytest.approx(best, rel=2e-3)
    # Uniform residuals, lighter-tailed than any t: the likelihood rises all the way to
    # nu = inf, NU_RANGE's top, where beta is the Gaussian's N / sum r (to O(1/nu)).
    r = rng.uniform(-1.0, 1.0, 200) ** 2
    nu, beta = update_nu(r, 1.0, 4.0)
    assert nu == NU_RANGE[1] and beta == pytest.approx(r.size / np.sum(r), rel=1e-4)


def test_bound_is_below_the_exact_marginal_likelihood_and_rises_every_em_step():
    """On a 2-weight problem the marginal ``ln int prod_n St(t_n | phi_n w) N(w | 0, A^-1) dw``
    is a 2-D quadrature; the reported bound must lie below it, and near it."""
    rng = np.random.default_rng(3)
    N = 25
    x = np.linspace(-1, 1, N)
    Phi = np.column_stack([np.ones(N), x])
    t = 0.5 + 1.2 * x + 0.2 * rng.standard_t(3, N)
    t[[4, 17]] += [2.5, -3.0]
    fit = fit_evidence(Phi, t, solver="mackay", likelihood="student_t", noise_nu=3.0, tol=1e-8)
    assert fit.active.size == 2 and fit.converged
    assert np.all(np.diff(fit.trace) > -1e-9)
    sigma, alpha = fit.beta**-0.5, fit.alpha

    m = fit.mean[:, 0]
    sd = np.sqrt(np.diag(fit.covariance))
    # The integrand on a 201 x 201 grid of +-10 posterior sds (Simpson's rule in each axis).
    w0 = np.linspace(m[0] - 10 * sd[0], m[0] + 10 * sd[0], 201)
    w1 = np.linspace(m[1] - 10 * sd[1], m[1] + 10 * sd[1], 201)
    W0, W1 = np.meshgrid(w0, w1, indexing="ij")
    loc = W0[..., None] + W1[..., None] * x
    log_joint = stats.t.logpdf(t, df=3.0, loc=loc, scale=sigma).sum(-1)
    log_joint += stats.norm.logpdf(W0, 0, alpha[0] ** -0.5) + stats.norm.logpdf(
        W1, 0, alpha[1] ** -0.5
    )
    peak = log_joint.max()
    val = integrate.simpson(integrate.simpson(np.exp(log_joint - peak), x=w1), x=w0)
    exact = peak + np.log(val)
    assert fit.log_evidence <= exact
    assert exact - fit.log_evidence < 1.0  # measured 0.39: the factorised q loses little


def test_large_fixed_nu_is_the_gaussian_rvm():
    X, y, *_ = _outlier_sinc()
    Phi = _design(X, X)
    gauss = fit_evidence(Phi, y, solver="sequential", tol=1e-10)
    t_fit = fit_evidence(
        Phi, y, solver="sequential", likelihood="student_t", noise_nu=1e9, tol=1e-10
    )
    np.testing.assert_array_equal(t_fit.active, gauss.active)
    np.testing.assert_allclose(t_fit.mean, gauss.mean, rtol=1e-4, atol=1e-6)
    assert t_fit.beta == pytest.approx(gauss.beta, rel=1e-4)
    assert t_fit.log_evidence == pytest.approx(gauss.log_evidence, abs=1e-4)
    np.testing.assert_allclose(t_fit.posterior.weights, 1.0, atol=1e-6)


def test_learned_nu_on_gaussian_noise_is_the_gaussian_rvm_in_a_few_steps():
    """The CLI's default data (sinc, noise sd 0.1): the t likelihood peaks at nu = inf, and the
    fit is the Gaussian RVM's. The EM step of nu alone crawled there and stopped at the cap of
    500 iterations at nu = 79; the profiled step gets there at once."""
    X, y = make_sinc(100, noise=0.1, random_state=0, shuffle=False)
    Phi = _design(X, X)
    gauss = fit_evidence(Phi, y, solver="sequential")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        t_fit = fit_evidence(Phi, y, solver="sequential", likelihood="student_t")
    assert t_fit.converged and t_fit.n_iter <= 5  # measured 2
    assert t_fit.posterior.nu == NU_RANGE[1]
    # At nu the t log density is the Gaussian's plus (z^4 - 2 z^2 - 1) / (4 nu) + O(nu^-2) per
    # point: here |sum| ~ sqrt(57 N) / (4 nu) = 2e-4 (57 = var(z^4 - 2 z^2) for Gaussian z).
    assert t_fit.log_evidence == pytest.approx(gauss.log_evidence, abs=1e-3)
    np.testing.assert_array_equal(t_fit.active, gauss.active)
    np.testing.assert_allclose(t_fit.mean, gauss.mean, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(t_fit.posterior.weights, 1.0, atol=1e-4)


@pytest.mark.parametrize("solver", ["sequential", "mackay"])
def test_learned_nu_is_the_fixed_point_of_the_em_step_of_nu(solver):
    """t(3) noise: the fit the profiled nu step converges to is a fixed point of Liu and Rubin's
    EM step of nu given q(u), ``ln(nu/2) + 1 - psi(nu/2) + mean(E ln u - E u) = 0``, solved
    here by brentq on the fit's own E-step; the bound rises at every step."""
    X, _ = make_sinc(100, noise=0.0, random_state=0, shuffle=False)
    y = np.sinc(X[:, 0] / np.pi) + 0.1 * np.random.default_rng(0).standard_t(3.0, 100)
    Phi = _design(X, X)
    fit = fit_evidence(Phi, y, solver=solver, likelihood="student_t", em_tol=1e-10)
    assert fit.converged and fit.n_iter < 30  # measured 17 and 14; the EM step of nu: 63, 78
    assert np.all(np.diff(fit.trace) > -1e-9)
    nu = fit.posterior.nu
    mean, var = fit.predict(Phi[:, fit.active], with_noise=False)
    mean_u, mean_log_u, _ = student_t_e_step(y, mean[:, 0], var, fit.beta, nu)
    c = 1.0 + np.mean(mean_log_u - mean_u)
    half = optimize.brentq(lambda h: np.log(h) - digamma(h) + c, 0.05, 5e4, xtol=1e-14)
    assert 2.0 * half == pytest.approx(nu, rel=1e-5)
    assert 2.0 < nu < 8.0  # t(3) noise, 100 points


@pytest.mark.parametrize("solver", ["sequential", "mackay"])
def test_robust_rvr_halves_the_gaussian_error_on_outliers(solver):
    X, y, idx, X_test, f_test = _outlier_sinc()
    rmse = {}
    for lik in ("gaussian", "student_t"):
        model = RVR(gamma=GAMMA, likelihood=lik, solver=solver).fit(X, y)
        rmse[lik] = np.sqrt(np.mean((model.predict(X_test) - f_test) ** 2))
    assert rmse["student_t"] <= 0.5 * rmse["gaussian"]
    # The outliers are the points the fit weighs least.
    assert set(np.argsort(model.outlier_weights_)[:10]) == set(idx)
    assert np.isfinite(model.noise_nu_) and model.noise_nu_ < 10


def test_fixed_noise_nu_and_the_predictive_standard_deviation():
    X, y, _, X_test, _ = _outlier_sinc()
    model = RVR(gamma=GAMMA, likelihood="student_t", likelihood_params={"noise_nu": 5.0}).fit(X, y)
    assert model.noise_nu_ == 5.0
    assert isinstance(model.fit_.posterior, StudentTWeights)
    mean, std = model.predict(X_test[:20], return_std=True)
    phi = model.basis_.transform(X_test[:20], columns=model.active_)
    loc_var = np.einsum("ij,jk,ik->i", phi, model.sigma_, phi)
    np.testing.assert_allclose(mean, phi @ model.fit_.mean[:, 0])
    np.testing.assert_allclose(std**2, loc_var + 5.0 / 3.0 * model.noise_variance_, rtol=1e-10)
    _, cov = model.predict(X_test[:20], return_cov=True)
    np.testing.assert_allclose(np.sqrt(np.diag(cov)), std, rtol=1e-10)
    draws = model.sample_y(X_test[:2], 40_000, random_state=0)
    # The draws are the location's Gaussian plus t(5) noise: their variance is std^2.
    np.testing.assert_allclose(draws.var(axis=1), std[:2] ** 2, rtol=0.08)
    kurt = stats.kurtosis(draws[0])
    assert kurt > 1.0  # t-tailed, not Gaussian (t(5) alone has excess kurtosis 6)


def test_student_t_bad_input_is_refused_early():
    X, y, *_ = _outlier_sinc()
    with pytest.raises(ValueError, match="one output"):
        RVR(gamma=GAMMA, likelihood="student_t").fit(X, np.column_stack([y, y]))
    with pytest.raises(ValueError, match="noise_nu"):
        RVR(gamma=GAMMA, likelihood="student_t", likelihood_params={"noise_nu": -1.0}).fit(X, y)
    with pytest.raises(ValueError, match="likelihood"):
        RVR(gamma=GAMMA, likelihood="cauchy").fit(X, y)
    with pytest.raises(ValueError, match="beta_prior"):  # improper: no maximum at small nu
        fit_evidence(_design(X, X), y, likelihood="student_t", beta_prior=(1.0, 0.0))


def test_student_t_fit_survives_save_and_load(tmp_path):
    from bayes_rvm import load_model, save_model

    X, y, _, X_test, _ = _outlier_sinc()
    model = RVR(gamma=GAMMA, likelihood="student_t", likelihood_params={"noise_nu": 4.0}).fit(X, y)
    path = save_model(model, tmp_path / "t_model.nc")
    loaded = load_model(path)
    assert loaded.likelihood == "student_t" and loaded.noise_nu_ == model.noise_nu_
    m0, s0 = model.predict(X_test, return_std=True)
    m1, s1 = loaded.predict(X_test, return_std=True)
    np.testing.assert_array_equal(m0, m1)
    np.testing.assert_array_equal(s0, s1)
    np.testing.assert_array_equal(loaded.outlier_weights_, model.outlier_weights_)


def test_model_is_the_student_t_graph_and_its_log_likelihood_is_scipys():
    import pymc as pm

    from bayes_rvm.inference import complete_posterior
    from bayes_rvm.models.spec import model_spec

    X, y, *_ = _outlier_sinc()
    est = RVR(gamma=GAMMA, likelihood="student_t").fit(X, y)
    model = est.model_
    assert model_spec(model).likelihood == "student_t"
    assert type(model["y"].owner.op).__name__ == "StudentTRV"
    # t noise samples the robust fit's relevance vectors: R2-D2 in log alpha there
    assert {"noise_nu", "w", "sigma_rel", "alpha_rel"} <= {v.name for v in model.free_RVs}
    # A short prior run stands in for a posterior: complete_posterior's pointwise terms must be
    # the closed-form t density at each draw's w, sigma and nu.
    dt = pm.sample_prior_predictive(draws=5, model=model, random_seed=1)
    dt = dt.copy()
    dt["posterior"] = dt["prior"]
    out = complete_posterior(dt, model)
    post = out["posterior"].dataset
    s = 3
    w = post["w"].values.reshape(5, -1)[s]
    sigma = post["sigma"].values.reshape(-1)[s]
    nu = post["noise_nu"].values.reshape(-1)[s]
    Phi = model["Phi"].get_value()
    want = stats.t.logpdf(y, df=nu, loc=Phi @ w, scale=sigma)
    got = out["log_likelihood"]["y"].values.reshape(5, -1)[s]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_type2_posterior_predictive_draws_t_distributed_targets():
    X, y, *_ = _outlier_sinc()
    est = RVR(
        gamma=GAMMA, likelihood="student_t", likelihood_params={"noise_nu": 3.0}, random_state=0
    ).fit(X, y)
    post = est.idata_["posterior"].dataset
    assert float(post["noise_nu"].values.mean()) == 3.0
    dt = est.sample_posterior_predictive(random_state=0)
    ppc = dt["posterior_predictive"]["y"].values.reshape(-1, y.size)
    w = post["w"].transpose("chain", "draw", "basis").values.reshape(ppc.shape[0], -1)
    loc = w @ est.training_.phi_active.T
    resid = ((ppc - loc) / est.noise_variance_**0.5).ravel()
    # The standardised residuals are t(3): Kolmogorov-Smirnov against scipy's t, not a normal.
    assert stats.kstest(resid, stats.t(3).cdf).pvalue > 0.01
    assert stats.kstest(resid, stats.norm.cdf).pvalue < 1e-6
    # log_likelihood holds the t density of each draw.
    ll = est.idata_["log_likelihood"]["y"].values.reshape(-1, y.size)
    np.testing.assert_allclose(
        ll[0], stats.t.logpdf(y, 3.0, loc=loc[0], scale=est.noise_variance_**0.5), rtol=1e-10
    )


@pytest.mark.slow
def test_mcmc_student_t_halves_the_gaussian_error_and_mixes():
    X, y, _, X_test, f_test = _outlier_sinc()
    kw = {
        "gamma": GAMMA,
        "inference": "mcmc",
        "sampler_config": {"draws": 500, "tune": 500, "chains": 2},
    }
    rmse, fits = {}, {}
    for lik in ("gaussian", "student_t"):
        fits[lik] = RVR(likelihood=lik, random_state=0, **kw).fit(X, y, progressbar=False)
        rmse[lik] = np.sqrt(np.mean((fits[lik].predict(X_test) - f_test) ** 2))
    assert rmse["student_t"] <= 0.5 * rmse["gaussian"]
    t_fit = fits["student_t"]
    diag = t_fit.idata_.attrs["diagnostics"]
    import json

    diag = json.loads(diag)
    assert diag["divergences"] == 0 and diag["max_rhat"] < 1.02
    nu = t_fit.idata_["posterior"]["noise_nu"].values
    assert np.median(nu) < 5  # 10% gross outliers: heavy tails
    ys = t_fit.sample_y(X_test[:2], 2000, random_state=0)
    assert stats.kurtosis(ys[0]) > 3
