"""The marginal-likelihood Op: its log density against a dense MvNormal, its gradient against
finite differences of the dense density and the closed-form posterior, its backends against each
other."""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
import pytest
from scipy import stats
from threadpoolctl import threadpool_limits

from bayes_rvm.marginal import log_evidence_and_grad, marginal_log_likelihood


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

    from bayes_rvm.marginal import register_jax_dispatch

    register_jax_dispatch()
    Phi, Y, la, lb = _problem(N=15, M=16, D=2)
    inputs, logp = _symbolic()
    f = get_jaxified_graph(inputs=list(inputs), outputs=[logp])
    assert abs(float(f(la, lb, Phi, Y)[0]) - _dense_logp(la, lb, Phi, Y)) < 1e-8
    g_la, g_lb = jax.grad(lambda a, b: f(a, b, Phi, Y)[0], argnums=(0, 1))(la, lb)
    ref_la, ref_lb = log_evidence_and_grad(la, lb, Phi, Y)[1:3]
    np.testing.assert_allclose(np.asarray(g_la), ref_la, atol=1e-9)
    assert abs(float(g_lb) - ref_lb) < 1e-9
