"""The Gaussian joint form's weights, whitened by their conditional posterior.

Truths: the weight-marginalised density (the closed-form Op of the marginal form), the Gaussian
posterior of the weights at fixed hyperparameters by dense NumPy algebra, and the weights' prior.
"""

import numpy as np
import pymc as pm
import pytest
from scipy import stats

from bayes_rvm.models.graphs import rvm_regression_model
from tests.test_models import _ALPHA_FREE, _log_alpha_rel


def _problem(seed=0, n=30, m=6, outputs=0):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(n, m))
    w = np.zeros((m, max(outputs, 1)))
    w[:2] = [[1.0], [-2.0]]
    y = Phi @ w + 0.3 * rng.normal(size=(n, max(outputs, 1)))
    return Phi, (y if outputs else y[:, 0]), rng


def _alpha_values(model) -> set[str]:
    """The sampled coordinates of ``alpha_rel`` (the R2-D2 prior's Gaussian ones by default)."""
    return {model.rvs_to_values[model[name]].name for name in _ALPHA_FREE}


@pytest.mark.parametrize("outputs", [0, 2])
def test_joint_density_is_the_marginal_one_times_a_standard_normal(outputs):
    # In the whitened coordinates u the joint posterior factorises exactly:
    # ln p(u, theta, t) = ln p(theta, t) + sum ln N(u | 0, 1), for any theta and u.
    Phi, y, rng = _problem(outputs=outputs)
    offset = 0.1 * rng.normal(size=y.shape)
    joint = rvm_regression_model(Phi, y, form="joint", offset=offset, y_scale=2.0)
    marginal = rvm_regression_model(Phi, y, form="marginal", offset=offset, y_scale=2.0)
    names = {v.name for v in joint.value_vars}
    assert names == _alpha_values(joint) | {"sigma_rel_log__", "w_whitened__"}
    lj, lm = joint.compile_logp(), marginal.compile_logp()
    for _ in range(4):
        start = joint.initial_point()
        point = {k: v + 2.0 * rng.normal(size=np.shape(v)) for k, v in start.items()}
        u = point.pop("w_whitened__")
        expected = lm(point) + stats.norm.logpdf(u).sum()
        np.testing.assert_allclose(lj({**point, "w_whitened__": u}), expected, rtol=1e-9)


def test_whitened_weights_map_to_the_gaussian_posterior_at_fixed_hyperparameters():
    # w = m + Sigma^(1/2) u: u = 0 is the posterior mean, and the map's columns multiply out to
    # the posterior covariance (A + beta Phi^T Phi)^-1, computed here by dense NumPy.
    Phi, y, rng = _problem(seed=1)
    offset = rng.normal(size=y.shape)
    model = rvm_regression_model(Phi, y, form="joint", offset=offset)
    point = {k: v + rng.normal(size=np.shape(v)) for k, v in model.initial_point().items()}
    [w_of_values] = [v for v in model.unobserved_value_vars if v.name == "w"]
    weights = model.compile_fn(w_of_values, inputs=model.value_vars, on_unused_input="ignore")
    alpha = np.exp(_log_alpha_rel(model, point))  # phi_scale and y_scale are 1
    beta = np.exp(-2.0 * point["sigma_rel_log__"])
    cov = np.linalg.inv(np.diag(alpha) + beta * Phi.T @ Phi)
    mean = beta * cov @ Phi.T @ (y - offset)
    at = lambda u: weights({**point, "w_whitened__": u})  # noqa: E731
    np.testing.assert_allclose(at(np.zeros_like(mean)), mean, rtol=1e-10, atol=1e-12)
    S = np.column_stack([at(e) - mean for e in np.eye(mean.size)])
    np.testing.assert_allclose(S @ S.T, cov, rtol=1e-9, atol=1e-12)
    # The sampler starts at u = 0 (the weights' conditional mean), before its jitter.
    np.testing.assert_allclose(model.initial_point()["w_whitened__"], 0.0, atol=1e-10)


def test_whitened_weights_keep_their_prior():
    # The whitening is a transform of the value only: prior draws are w ~ N(0, 1/alpha).
    Phi, y, _ = _problem(seed=2)
    model = rvm_regression_model(Phi, y, form="joint")
    with model:
        prior = pm.sample_prior_predictive(400, random_seed=3, compile_kwargs={"mode": "FAST_RUN"})
    z = (prior.prior["w"] * np.sqrt(prior.prior["alpha"])).values.ravel()
    assert stats.kstest(z, "norm").pvalue > 0.01
    assert model.rvm_spec.form == "joint"
    centred = rvm_regression_model(Phi, y, form="joint", centred=True)
    assert centred.rvm_spec.form == "centred" and "w" in {v.name for v in centred.free_RVs}


@pytest.mark.slow
def test_a_users_slope_in_the_joint_form_is_recovered_without_divergences():
    # The recipe of notebook 06 in the joint form: sinc plus 0.3 times an unrelated covariate,
    # the covariate's slope a term of the user's own, sampled by pm.sample at its defaults.
    from bayes_rvm import RVR, Prior
    from bayes_rvm.datasets import make_sinc

    rng = np.random.default_rng(5)
    X, f = make_sinc(80, noise=0.0, random_state=0, shuffle=False)
    z = rng.normal(size=80)
    y = f + 0.3 * z + 0.1 * rng.normal(size=80)
    est = RVR(gamma=1 / 9, sampler_config={"mcmc_basis": "relevant"}, random_state=0).fit(X, y)

    def covariate(model):
        z_data = pm.Data("covariate", z, dims="obs")
        return Prior("Normal", mu=0.0, sigma=1.0).create_variable("slope") * z_data

    model = est.make_model(form="joint", offset=covariate)
    trace = pm.sample(model=model, chains=2, draws=500, tune=500, random_seed=1, progressbar=False)
    assert int(trace.sample_stats["diverging"].sum()) == 0
    lo, hi = np.quantile(trace.posterior["slope"].values, [0.05, 0.95])
    assert lo < 0.3 < hi and hi - lo < 0.1


def test_divergence_advice_of_the_whitened_joint_form_is_not_the_funnels():
    import dataclasses

    from bayes_rvm.inference.diagnostics import divergence_advice
    from bayes_rvm.models.spec import model_spec

    Phi, y, _ = _problem(n=8, m=3)
    spec = model_spec(rvm_regression_model(Phi, y))
    joint = divergence_advice("model", dataclasses.replace(spec, form="joint"))
    assert "whitened" in joint and "funnel" not in joint and "target_accept" in joint
    counts = divergence_advice(
        "model", dataclasses.replace(spec, form="joint", likelihood="poisson")
    )
    assert "funnel" in counts and "whitened" not in counts
    centred = divergence_advice("model", dataclasses.replace(spec, form="centred"))
    assert "funnel" in centred and "centred=True" in centred


def test_student_t_joint_density_is_the_centred_one_with_the_jacobian():
    # Under t noise the whitening is an exact change of variables (not a factorisation): the
    # density at u is the centred model's at w(u) plus ln|det dw/du| = -ln det(H)/2, with
    # H = A + beta (nu + 1) / (nu + 3) Phi^T Phi, by dense NumPy.
    Phi, y, rng = _problem(seed=3)
    kw = {"form": "joint", "likelihood": "student_t"}
    whitened = rvm_regression_model(Phi, y, **kw)
    centred = rvm_regression_model(Phi, y, centred=True, **kw)
    [w_of_values] = [v for v in whitened.unobserved_value_vars if v.name == "w"]
    weights = whitened.compile_fn(w_of_values, inputs=whitened.value_vars, on_unused_input="ignore")
    lw, lc = whitened.compile_logp(), centred.compile_logp()
    start = whitened.initial_point()
    for _ in range(3):
        point = {k: v + rng.normal(size=np.shape(v)) for k, v in start.items()}
        alpha = np.exp(_log_alpha_rel(whitened, point))
        beta = np.exp(-2.0 * point["sigma_rel_log__"])
        nu = np.exp(point["noise_nu_log__"])
        H = np.diag(alpha) + beta * (nu + 1) / (nu + 3) * Phi.T @ Phi
        at_w = {k: v for k, v in point.items() if k != "w_whitened__"} | {"w": weights(point)}
        expected = lc(at_w) - 0.5 * np.linalg.slogdet(H)[1]
        np.testing.assert_allclose(lw(point), expected, rtol=1e-9)


@pytest.mark.filterwarnings("ignore::bayes_rvm.inference.SamplingDiagnosticsWarning")
def test_posterior_predictive_of_the_joint_form_uses_the_fits_draws_without_a_warning():
    # The joint form's w is whitened around the targets' conditional mean, so y_obs lies
    # upstream of w; without y_obs in constant_data PyMC took it as changed data and warned
    # (ImplicitFreezeWarning) on the README's own call.
    import warnings

    from bayes_rvm import RVR
    from bayes_rvm.datasets import make_sinc

    X, y = make_sinc(40, noise=0.1, random_state=0)
    est = RVR(
        gamma=1 / 9,
        inference="mcmc",
        sampler_config={"draws": 100, "tune": 100, "chains": 2},
        random_state=0,
    ).fit(X, y, progressbar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pp = pm.sample_posterior_predictive(
            est.idata_, model=est.make_model(form="joint"), random_seed=0, progressbar=False
        )
    # Drawn from the posterior of w, not its prior: the mean curve is the estimator's.
    mean = pp["posterior_predictive"]["y"].mean(("chain", "draw")).values
    np.testing.assert_allclose(mean, est.predict(X), atol=0.03)
