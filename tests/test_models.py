"""The PyMC models: marginal log density against a dense MvNormal, gradients against finite
differences, the three backends against each other, and the priors against scipy."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import stats
from threadpoolctl import threadpool_limits

from bayes_rvm.dims import BASIS, OBS, OUTPUT
from bayes_rvm.models import (
    _halfcauchy_scale_logp,
    log_evidence_and_grad,
    marginal_log_likelihood,
    rvm_regression_model,
    set_model_data,
)


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas():
    # Small matrices on two shared cores: BLAS threads only spin against the sampler's chains.
    with threadpool_limits(limits=1):
        yield


def _problem(N=30, M=31, D=1, seed=0):
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, M))
    Phi /= np.linalg.norm(Phi, axis=0)
    Y = rng.normal(size=(N, D))
    # log alpha spanning relevant (small) to effectively pruned (huge) basis functions
    log_alpha = np.concatenate([rng.normal(0.0, 1.0, M - 3), [-6.0, 12.0, 25.0]])
    return Phi, Y, log_alpha, 1.7


def _dense_logp(log_alpha, log_beta, Phi, Y):
    """Independent truth: the dense Gaussian N(0, C), C = I/beta + Phi A^-1 Phi^T, per output."""
    C = np.eye(Phi.shape[0]) / np.exp(log_beta) + (Phi * np.exp(-log_alpha)) @ Phi.T
    mvn = stats.multivariate_normal(np.zeros(Phi.shape[0]), C)
    return float(sum(mvn.logpdf(Y[:, d]) for d in range(Y.shape[1])))


def _symbolic():
    la, lb = pt.dvector("la"), pt.dscalar("lb")
    Phi, Y = pt.dmatrix("Phi"), pt.dmatrix("Y")
    logp = marginal_log_likelihood(la, lb, Phi, Y)
    return (la, lb, Phi, Y), logp


def test_marginal_logp_equals_pymc_dense_mvnormal():
    Phi, Y, la, lb = _problem(D=3)
    inputs, logp = _symbolic()
    value = float(pytensor.function(inputs, logp)(la, lb, Phi, Y))
    C = np.eye(Phi.shape[0]) / np.exp(lb) + (Phi * np.exp(-la)) @ Phi.T
    dist = pm.MvNormal.dist(mu=np.zeros(Phi.shape[0]), cov=C)
    dense = float(pm.logp(dist, Y.T).sum().eval())
    assert abs(value - dense) < 1e-8
    assert abs(value - _dense_logp(la, lb, Phi, Y)) < 1e-8


def test_marginal_logp_wide_design_equals_dense():
    # N < M (more basis functions than points): the M x M form must still be exact
    Phi, Y, la, lb = _problem(N=12, M=40)
    assert abs(log_evidence_and_grad(la, lb, Phi, Y)[0] - _dense_logp(la, lb, Phi, Y)) < 1e-8


@pytest.mark.parametrize("mode", ["FAST_RUN", "NUMBA"])
def test_marginal_logp_and_gradient_match_dense_and_finite_differences(mode):
    # One compiled function per backend (Python/C and Numba, the one nutpie runs).
    Phi, Y, la, lb = _problem(N=20, M=21, D=2)
    inputs, logp = _symbolic()
    grads = pt.grad(logp, [inputs[0], inputs[1], inputs[3]])
    f = pytensor.function(inputs, [logp, *grads], mode=mode)
    value, g_la, g_lb, g_Y = f(la, lb, Phi, Y)
    assert abs(float(value) - _dense_logp(la, lb, Phi, Y)) < 1e-8
    h = 1e-5
    # finite differences of the dense density, not of the code under test
    fd_la = np.array(
        [
            (_dense_logp(la + h * e, lb, Phi, Y) - _dense_logp(la - h * e, lb, Phi, Y)) / (2 * h)
            for e in np.eye(la.size)
        ]
    )
    fd_lb = (_dense_logp(la, lb + h, Phi, Y) - _dense_logp(la, lb - h, Phi, Y)) / (2 * h)
    E = np.zeros_like(Y)
    E[3, 1] = h
    fd_Y = (_dense_logp(la, lb, Phi, Y + E) - _dense_logp(la, lb, Phi, Y - E)) / (2 * h)
    np.testing.assert_allclose(g_la, fd_la, atol=1e-6)
    assert abs(g_lb - fd_lb) < 1e-6
    assert abs(g_Y[3, 1] - fd_Y) < 1e-6


def test_closed_form_gradient_formulas():
    # dL/dlog alpha_i = (1 - alpha_i (m_i^2 + Sigma_ii)) / 2 and
    # dL/dlog beta = (N - sum gamma - beta ||t - Phi m||^2) / 2 from a dense posterior
    Phi, Y, la, lb = _problem(N=25, M=10)
    alpha, beta = np.exp(la[:10]), np.exp(lb)
    Sigma = np.linalg.inv(np.diag(alpha) + beta * Phi.T @ Phi)
    m = beta * Sigma @ Phi.T @ Y[:, 0]
    _, g_la, g_lb, _ = log_evidence_and_grad(la[:10], lb, Phi, Y)
    np.testing.assert_allclose(g_la, 0.5 * (1 - alpha * (m**2 + np.diag(Sigma))), atol=1e-9)
    gamma = 1 - alpha * np.diag(Sigma)
    expected = 0.5 * (25 - gamma.sum() - beta * np.sum((Y[:, 0] - Phi @ m) ** 2))
    assert abs(g_lb - expected) < 1e-9


def test_non_finite_hyperparameters_give_minus_inf():
    Phi, Y, la, lb = _problem()
    la = la.copy()
    la[0] = 800.0  # exp overflows
    logp, g_la, g_lb, _ = log_evidence_and_grad(la, lb, Phi, Y)
    assert logp == -np.inf and np.all(g_la == 0) and g_lb == 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_jax_implementation_matches_value_and_gradient():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    from pymc.sampling.jax import get_jaxified_graph

    from bayes_rvm.models import register_jax_dispatch

    register_jax_dispatch()
    Phi, Y, la, lb = _problem(N=15, M=16, D=2)
    inputs, logp = _symbolic()
    f = get_jaxified_graph(inputs=list(inputs), outputs=[logp])
    assert abs(float(f(la, lb, Phi, Y)[0]) - _dense_logp(la, lb, Phi, Y)) < 1e-8
    g_la, g_lb = jax.grad(lambda a, b: f(a, b, Phi, Y)[0], argnums=(0, 1))(la, lb)
    ref_la, ref_lb = log_evidence_and_grad(la, lb, Phi, Y)[1:3]
    np.testing.assert_allclose(np.asarray(g_la), ref_la, atol=1e-9)
    assert abs(float(g_lb) - ref_lb) < 1e-9


def test_halfcauchy_scale_hyperprior_is_the_documented_density():
    tau = 0.7
    u = np.linspace(-60, 60, 200_001)
    dens = np.exp(_halfcauchy_scale_logp(pt.as_tensor(np.exp(u)), tau).eval() + u)
    assert abs(np.trapezoid(dens, u) - 1.0) < 1e-6  # proper
    # P(alpha < a) = P(s > a^-1/2) for s ~ HalfCauchy(tau)
    a = 3.0
    cdf = np.trapezoid(dens[u < np.log(a)], u[u < np.log(a)])
    assert abs(cdf - stats.halfcauchy(scale=tau).sf(a**-0.5)) < 1e-4


def test_halfcauchy_scale_hyperprior_random_draws():
    Phi, Y, _, _ = _problem(N=10, M=5)
    model = rvm_regression_model(Phi, Y[:, 0], tau=2.0)
    draws = pm.draw(model["alpha"], draws=4000, random_seed=1).ravel()
    s = draws**-0.5
    assert stats.kstest(s, stats.halfcauchy(scale=2.0).cdf).pvalue > 1e-3


@pytest.mark.parametrize(("nu", "s"), [(1.0, 1.0), (4.0, 0.5)])
def test_student_t_prior_integrates_to_student_t(nu, s):
    Phi, Y, _, _ = _problem(N=10, M=5)
    model = rvm_regression_model(Phi, Y[:, 0], prior="student_t", nu=nu, s=s)
    alpha = pm.draw(model["alpha"], draws=4000, random_seed=2).ravel()
    w = np.random.default_rng(3).standard_normal(alpha.size) / np.sqrt(alpha)
    assert stats.kstest(w, stats.t(df=nu, scale=s).cdf).pvalue > 1e-3


def test_marginal_model_logp_is_priors_plus_dense_mvnormal():
    Phi, Y, _, _ = _problem(N=20, M=21)
    y = Y[:, 0]
    model = rvm_regression_model(Phi, y)
    point = model.initial_point()
    point["alpha_log__"] = np.linspace(-2, 8, 21)
    point["sigma_log__"] = np.array(-0.4)
    logps = model.point_logps(point, round_vals=12)
    alpha, sigma = np.exp(point["alpha_log__"]), np.exp(point["sigma_log__"])
    dense = _dense_logp(np.log(alpha), -2 * np.log(sigma), Phi, Y)
    assert abs(logps["y"] - dense) < 1e-8
    expected_sigma = stats.halfnorm(scale=1.0).logpdf(sigma) + np.log(sigma)  # + log-Jacobian
    assert abs(logps["sigma"] - expected_sigma) < 1e-8


def test_joint_model_logp_is_gaussian_likelihood():
    Phi, Y, _, _ = _problem(N=20, M=21)
    y = Y[:, 0]
    model = rvm_regression_model(Phi, y, form="joint", prior="student_t", nu=3.0)
    rng = np.random.default_rng(4)
    point = model.initial_point()
    point["z"] = rng.normal(size=21)
    point["alpha_log__"] = rng.normal(size=21)
    point["sigma_log__"] = np.array(-1.0)
    w = point["z"] * np.exp(-0.5 * point["alpha_log__"])
    sigma = np.exp(-1.0)
    logps = model.point_logps(point, round_vals=12)
    assert abs(logps["y"] - stats.norm(Phi @ w, sigma).logpdf(y).sum()) < 1e-8
    la = point["alpha_log__"]
    expected_alpha = (stats.gamma(a=1.5, scale=1 / 1.5).logpdf(np.exp(la)) + la).sum()
    # PyTensor's gammaln and scipy's differ by ~1e-8 per element
    assert abs(logps["alpha"] - expected_alpha) < 1e-6


def test_model_structure_dims_and_subset_basis():
    Phi, Y, _, _ = _problem(N=15, M=16, D=2)
    model = rvm_regression_model(Phi, Y, basis=[2, 5, 15], form="joint")
    assert list(model.coords[BASIS]) == [2, 5, 15]
    assert model.named_vars_to_dims["w"] == (BASIS, OUTPUT)
    assert model.named_vars_to_dims["y"] == (OBS, OUTPUT)
    assert model["Phi"].get_value().shape == (15, 3)
    assert {v.name for v in model.free_RVs} == {"alpha", "sigma", "z"}
    marg = rvm_regression_model(Phi, Y, basis=[2, 5, 15])
    assert {v.name for v in marg.free_RVs} == {"alpha", "sigma"}
    assert marg.rvm_settings["basis"] == [2, 5, 15]
    assert marg.named_vars_to_dims["y"] == (OBS, OUTPUT)


def test_multi_output_marginal_model_and_prior_predictive():
    Phi, Y, _, _ = _problem(N=15, M=16, D=2)
    model = rvm_regression_model(Phi, Y)
    point = model.initial_point()
    la = np.log(model.rvs_to_transforms[model["alpha"]].backward(point["alpha_log__"]).eval())
    dense = _dense_logp(la, -2 * point["sigma_log__"], Phi, Y)
    assert abs(model.point_logps(point, round_vals=12)["y"] - dense) < 1e-8
    prior = pm.sample_prior_predictive(draws=5, model=model, random_seed=0)
    assert prior["prior_predictive"]["y"].shape == (1, 5, 15, 2)


def test_set_model_data_keeps_gram_consistent():
    Phi, Y, _, _ = _problem(N=15, M=16)
    model = rvm_regression_model(Phi, Y[:, 0])
    Phi2, Y2, _, _ = _problem(N=15, M=16, seed=5)
    set_model_data(model, Phi2, Y2[:, 0])
    np.testing.assert_allclose(model["gram"].get_value(), Phi2.T @ Phi2)
    point = model.initial_point()
    la = np.zeros(16)
    assert (
        abs(
            model.point_logps(point, round_vals=12)["y"]
            - _dense_logp(la, -2 * point["sigma_log__"], Phi2, Y2)
        )
        < 1e-8
    )


def test_custom_priors_are_used():
    Phi, Y, _, _ = _problem(N=10, M=11)
    model = rvm_regression_model(
        Phi,
        Y[:, 0],
        alpha_prior=lambda name, dims: pm.Gamma(name, 1e-2, 1e-4, dims=dims),
        noise_prior=lambda name: pm.HalfCauchy(name, 0.5),
    )
    assert type(model["alpha"].owner.op).__name__.startswith("Gamma")
    assert "HalfCauchy" in type(model["sigma"].owner.op).__name__
    nu_model = rvm_regression_model(
        Phi, Y[:, 0], prior="student_t", nu=lambda name: pm.Gamma(name, 2.0, 0.1)
    )
    assert {v.name for v in nu_model.free_RVs} == {"alpha", "sigma", "nu"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"prior": "laplace"}, "prior"),
        ({"form": "centred"}, "form"),
        ({"prior": "student_t", "alpha_prior": lambda n, d: None}, "alpha_prior"),
        ({"prior": "student_t", "nu": -1.0}, "nu"),
        ({"basis_names": ["a"]}, "basis_names"),
    ],
)
def test_invalid_arguments(kwargs, match):
    Phi, Y, _, _ = _problem(N=10, M=4)
    with pytest.raises(ValueError, match=match):
        rvm_regression_model(Phi, Y[:, 0], **kwargs)


def test_invalid_data():
    Phi, Y, _, _ = _problem(N=10, M=4)
    with pytest.raises(ValueError, match="y must"):
        rvm_regression_model(Phi, Y[:5, 0])
    bad = Phi.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        rvm_regression_model(bad, Y[:, 0])
