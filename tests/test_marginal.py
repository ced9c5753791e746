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

from bayes_rvm.models.marginal import (
    RANK_RTOL,
    draw_weights_lowrank,
    log_evidence_and_grad,
    lowrank_log_evidence_and_grad,
    lowrank_marginal_log_likelihood,
    marginal_log_likelihood,
    thin_svd,
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


def _jax():
    """JAX in double precision with the Op's JAX implementation registered."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    from bayes_rvm.models.marginal import register_jax_dispatch

    register_jax_dispatch()
    return jax


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_jax_implementation_matches_value_and_gradient():
    jax = _jax()
    from pymc.sampling.jax import get_jaxified_graph

    Phi, Y, la, lb = _problem(N=15, M=16, D=2)
    inputs, logp = _symbolic()
    f = get_jaxified_graph(inputs=list(inputs), outputs=[logp])
    # Compiled, as the JAX samplers run it (op by op, the value and the gradient took 5 s)
    value_and_grad = jax.jit(jax.value_and_grad(lambda a, b: f(a, b, Phi, Y)[0], argnums=(0, 1)))
    value, (g_la, g_lb) = value_and_grad(la, lb)
    assert abs(float(value) - _dense_logp(la, lb, Phi, Y)) < 1e-8
    ref_la, ref_lb = log_evidence_and_grad(la, lb, Phi, Y)[1:3]
    np.testing.assert_allclose(np.asarray(g_la), ref_la, atol=1e-9)
    assert abs(float(g_lb) - ref_lb) < 1e-9


# ---------------------------------------------------------------------------------------------
# The low-rank form against the dense one
# ---------------------------------------------------------------------------------------------
def _lowrank_problem(N=30, M=31, rank=6, D=2, seed=1):
    """A design of exact rank `rank` (the thin SVD drops nothing) and the usual hyperparameters."""
    rng = np.random.default_rng(seed)
    Phi = rng.normal(size=(N, rank)) @ rng.normal(size=(rank, M))
    Phi /= np.linalg.norm(Phi, axis=0)
    _, Y, log_alpha, log_beta = _problem(N=N, M=M, D=D, seed=seed)
    return Phi, Y, log_alpha, log_beta


def _sinc_design(n=100, gamma=1.0 / 9.0):
    from bayes_rvm.basis.kernels import KernelBasis
    from bayes_rvm.datasets import make_sinc

    X, y = make_sinc(n, random_state=0, shuffle=False)
    Phi = KernelBasis("rbf", gamma=gamma).fit(X).transform(X)
    return Phi / np.linalg.norm(Phi, axis=0), (y / np.sqrt(np.mean(y**2)))[:, None]


def test_thin_svd_rank_and_reconstruction():
    Phi, *_ = _lowrank_problem()
    U, VS = thin_svd(Phi)
    assert U.shape == (30, 6) and VS.shape == (31, 6)
    np.testing.assert_allclose(U.T @ U, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(U @ VS.T, Phi, atol=1e-12)
    # the figure: sinc's RBF design is numerically of rank 25
    assert thin_svd(_sinc_design(100)[0])[0].shape[1] == 25


@pytest.mark.parametrize(("n", "gamma", "ranges"), [(400, 1.0 / 9.0, 1), (1000, 1.0, 2)])
def test_thin_svd_of_a_large_design_sketches_the_same_decomposition(n, gamma, ranges, monkeypatch):
    # From 256 rows and columns the range is sketched (at the narrow width a second, larger
    # range holds the rank of 67); the full SVD is the truth: the same rank, the same design to
    # far below the cut, the same density and gradient.
    from bayes_rvm.evidence import shared

    Phi, Y = _sinc_design(n, gamma)
    calls, sketch = [], shared.range_sketch
    monkeypatch.setattr(shared, "range_sketch", lambda A, l: calls.append(l) or sketch(A, l))
    U, VS = thin_svd(Phi)
    assert len(calls) == ranges
    _, s, _ = np.linalg.svd(Phi)
    assert U.shape[1] == np.sum(s > RANK_RTOL * s[0])
    np.testing.assert_allclose(U.T @ U, np.eye(U.shape[1]), atol=1e-12)
    assert np.linalg.norm(Phi - U @ VS.T, 2) <= 1.01 * RANK_RTOL * s[0] + s[U.shape[1]]
    la, lb = np.random.default_rng(0).normal(2.0, 4.0, Phi.shape[1]), 3.0
    ref = log_evidence_and_grad(la, lb, Phi, Y)
    low = lowrank_log_evidence_and_grad(la, np.asarray(lb), U, Y, VS)
    assert abs(float(low[0]) - ref[0]) < 1e-8
    np.testing.assert_allclose(low[1], ref[1], atol=1e-8)


def test_thin_svd_decomposes_a_high_rank_design_in_full():
    # A 2-D rbf design of rank about 250 of 400: the first range's decay puts the cut beyond
    # any range worth sketching, and the result is the full SVD's.
    from bayes_rvm.basis.kernels import KernelBasis

    X = np.random.default_rng(0).uniform(-3, 3, (400, 2))
    Phi = KernelBasis("rbf", gamma=0.5).fit(X).transform(X)
    U, VS = thin_svd(Phi)
    U_full, s, Vt = np.linalg.svd(Phi, full_matrices=False)
    r = int(np.sum(s > RANK_RTOL * s[0]))
    assert U.shape[1] == r > 100
    np.testing.assert_allclose(U @ VS.T, (U_full[:, :r] * s[:r]) @ Vt[:r], atol=1e-12)


@pytest.mark.parametrize("mode", ["FAST_RUN", "NUMBA"])
def test_lowrank_logp_and_gradient_equal_dense(mode):
    # The dense M x M kernel is the reference, to 1e-8 in value and in every gradient.
    Phi, Y, la, lb = _lowrank_problem()
    U, VS = thin_svd(Phi)
    la_, lb_ = pt.dvector("la"), pt.dscalar("lb")
    U_, VS_, Y_ = pt.dmatrix("U"), pt.dmatrix("VS"), pt.dmatrix("Y")
    logp = lowrank_marginal_log_likelihood(la_, lb_, U_, VS_, Y_)
    grads = pt.grad(logp, [la_, lb_, Y_])
    f = pytensor.function([la_, lb_, U_, VS_, Y_], [logp, *grads], mode=mode)
    value, g_la, g_lb, g_Y = f(la, lb, U, VS, Y)
    ref, ref_la, ref_lb, ref_Y = log_evidence_and_grad(la, lb, Phi, Y)
    assert abs(float(value) - ref) < 1e-8
    assert abs(float(value) - _dense_logp(la, lb, Phi, Y)) < 1e-8
    np.testing.assert_allclose(g_la, ref_la, atol=1e-8)
    assert abs(float(g_lb) - ref_lb) < 1e-8
    np.testing.assert_allclose(g_Y, ref_Y, atol=1e-8)


def test_lowrank_on_a_numerically_low_rank_kernel_design():
    # sinc's RBF design is only numerically of rank 25: the dropped singular values (< 1e-10 of
    # the largest) must not show at 1e-8, with relevant and huge alphas alike.
    Phi, Y = _sinc_design(100)
    U, VS = thin_svd(Phi)
    rng = np.random.default_rng(3)
    for _ in range(3):
        la = rng.normal(2.0, 4.0, Phi.shape[1])
        lb = rng.normal(3.0, 1.0)
        ref = log_evidence_and_grad(la, lb, Phi, Y)
        low = lowrank_log_evidence_and_grad(la, np.asarray(lb), U, Y, VS)
        assert abs(float(low[0]) - ref[0]) < 1e-8
        np.testing.assert_allclose(low[1], ref[1], atol=1e-8)
        assert abs(float(low[2]) - ref[2]) < 1e-8
        np.testing.assert_allclose(low[3], ref[3], atol=1e-8)


def test_lowrank_non_finite_hyperparameters_give_minus_inf():
    Phi, Y, la, lb = _lowrank_problem()
    U, VS = thin_svd(Phi)
    la = la.copy()
    la[0] = -800.0  # 1 / alpha overflows
    logp, g_la, g_lb, _ = lowrank_log_evidence_and_grad(la, np.asarray(lb), U, Y, VS)
    assert logp == -np.inf and np.all(g_la == 0) and g_lb == 0


def test_lowrank_weight_draws_have_the_dense_posterior_moments():
    # Matheron's rule against the dense posterior N(m, Sigma) of the same hyperparameters.
    Phi, Y, la, lb = _lowrank_problem(N=20, M=8, rank=4, D=1)
    U, VS = thin_svd(Phi)
    alpha, beta = np.exp(la[:8]), np.exp(lb)
    Sigma = np.linalg.inv(np.diag(alpha) + beta * Phi.T @ Phi)
    m = beta * Sigma @ Phi.T @ Y[:, 0]
    S = 40_000
    w = draw_weights_lowrank(
        U, VS, Y, np.tile(alpha, (S, 1)), np.full(S, beta), np.random.default_rng(0)
    )[..., 0]
    se = np.sqrt(np.diag(Sigma) / S)
    assert np.all(np.abs(w.mean(axis=0) - m) < 5 * se)
    np.testing.assert_allclose(np.cov(w.T), Sigma, atol=0.03 * np.abs(Sigma).max())


def test_lowrank_weight_draws_follow_each_draws_hyperparameters(monkeypatch):
    # Draws alternate between two (alpha, beta) settings, in blocks of 1000 draws (an odd
    # number of blocks): each half has its own dense posterior moments.
    from bayes_rvm.models.marginal import lowrank

    monkeypatch.setattr(lowrank, "_DRAW_BLOCK_ELEMENTS", 1000 * (8 * 2 + 4 * 4))
    Phi, Y, la, lb = _lowrank_problem(N=20, M=8, rank=4, D=2)
    U, VS = thin_svd(Phi)
    settings = [(np.exp(la[:8]), np.exp(lb)), (np.exp(la[:8][::-1] + 1.0), 4.0 * np.exp(lb))]
    S = 61_000
    alpha = np.array([settings[s % 2][0] for s in range(S)])
    beta = np.array([settings[s % 2][1] for s in range(S)])
    w = draw_weights_lowrank(U, VS, Y, alpha, beta, np.random.default_rng(1))
    for k, (a, b) in enumerate(settings):
        Sigma = np.linalg.inv(np.diag(a) + b * Phi.T @ Phi)
        m = b * Sigma @ Phi.T @ Y
        wk = w[k::2]
        se = np.sqrt(np.diag(Sigma) / wk.shape[0])[:, None]
        assert np.all(np.abs(wk.mean(axis=0) - m) < 5 * se)
        np.testing.assert_allclose(np.cov(wk[..., 1].T), Sigma, atol=0.03 * np.abs(Sigma).max())


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_jax_lowrank_matches_dense_value_and_gradient():
    jax = _jax()
    from pymc.sampling.jax import get_jaxified_graph

    Phi, Y, la, lb = _lowrank_problem()
    U, VS = thin_svd(Phi)
    la_, lb_ = pt.dvector("la"), pt.dscalar("lb")
    logp = lowrank_marginal_log_likelihood(la_, lb_, pt.constant(U), pt.constant(VS), Y)
    f = get_jaxified_graph(inputs=[la_, lb_], outputs=[logp])
    ref, ref_la, ref_lb, _ = log_evidence_and_grad(la, lb, Phi, Y)
    # Compiled, as the JAX samplers run it
    value, (g_la, g_lb) = jax.jit(jax.value_and_grad(lambda a, b: f(a, b)[0], argnums=(0, 1)))(
        la, lb
    )
    assert abs(float(value) - ref) < 1e-8
    np.testing.assert_allclose(np.asarray(g_la), ref_la, atol=1e-8)
    assert abs(float(g_lb) - ref_lb) < 1e-8


def test_model_chooses_lowrank_automatically_and_keeps_the_density():
    from bayes_rvm.models.graphs import rvm_regression_model, set_model_data

    Phi, Y = _sinc_design(60)
    low = rvm_regression_model(Phi, Y[:, 0])
    dense = rvm_regression_model(Phi, Y[:, 0], marginal="dense")
    assert low.rvm_spec.marginal == "lowrank" and "Phi_U" in low.named_vars
    assert dense.rvm_spec.marginal == "dense" and "gram" in dense.named_vars
    full_rank = rvm_regression_model(*_problem(N=20, M=21)[:2])
    assert full_rank.rvm_spec.marginal == "dense"
    from tests.test_models import _with_alpha

    point = _with_alpha(low, low.initial_point(), np.exp(np.linspace(-3, 9, Phi.shape[1])))
    point["sigma_rel_log__"] = np.array(-1.5)
    assert abs(low.compile_logp()(point) - dense.compile_logp()(point)) < 1e-8
    # new data of another rank: the factors follow
    Phi2, Y2 = _sinc_design(60)
    Phi2 = Phi2[:, ::-1].copy()
    set_model_data(low, Phi2, Y2[:, 0])
    set_model_data(dense, Phi2, Y2[:, 0])
    assert abs(low.compile_logp()(point) - dense.compile_logp()(point)) < 1e-8
    with pytest.raises(ValueError, match="marginal"):
        rvm_regression_model(Phi, Y[:, 0], marginal="svd")


# ---------------------------------------------------------------------------------------------
# The statistics form: the model on Phi'Phi, Phi't, t't and N (issue 29, item 3)
# ---------------------------------------------------------------------------------------------
def _statistics_problem(n: int, m: int, d: int, seed: int = 0):
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, n)
    Phi = np.column_stack(
        [np.ones(n), np.exp(-0.5 * (x[:, None] - np.linspace(-3, 3, m - 1)) ** 2)]
    )
    Y = np.sin(x)[:, None] + 0.1 * rng.standard_normal((n, d))
    stats = SimpleNamespace(gram=Phi.T @ Phi, cross=Phi.T @ Y, tt=np.sum(Y**2, axis=0), n=n)
    return Phi, Y, stats


@pytest.mark.parametrize("d", [1, 2])
def test_statistics_model_log_density_equals_the_design_form(d):
    # Truth: the model on the full design (the same priors, scales and hyperparameter points).
    from bayes_rvm.models.graphs import rvm_regression_model
    from bayes_rvm.models.statistics import rvm_statistics_model

    Phi, Y, stats = _statistics_problem(300, 10, d)  # well conditioned: Cholesky path
    y = Y if d > 1 else Y[:, 0]
    kw = {"phi_scale": np.linalg.norm(Phi, axis=0), "y_scale": float(np.sqrt(np.mean(Y**2)))}
    full = rvm_regression_model(Phi, y, marginal="dense", **kw)
    small = rvm_statistics_model(stats, marginal="dense", **kw)
    assert small["Phi"].get_value().shape[0] == 10 + d  # M + D rows, whatever N
    logp = (full.compile_logp(), small.compile_logp())
    dlogp = (full.compile_dlogp(), small.compile_dlogp())
    rng = np.random.default_rng(1)
    for _ in range(4):
        point = {k: v + rng.normal(0.0, 1.0, np.shape(v)) for k, v in full.initial_point().items()}
        assert logp[1](point) == pytest.approx(logp[0](point), rel=1e-10)
        np.testing.assert_allclose(dlogp[1](point), dlogp[0](point), rtol=1e-10, atol=1e-10)


def test_compressed_design_keeps_the_statistics_of_a_singular_gram():
    # 81 columns over 40 rows: Phi'Phi is singular, factorised through its eigendecomposition.
    from bayes_rvm.models.marginal import compressed_design

    for n, m in ((300, 30), (40, 81)):
        _, _, stats = _statistics_problem(n, m, 2)
        R, S = compressed_design(stats.gram, stats.cross, stats.tt)
        scale = np.linalg.norm(stats.gram)
        np.testing.assert_allclose(R.T @ R, stats.gram, atol=1e-12 * scale)
        np.testing.assert_allclose(R.T @ S, stats.cross, atol=1e-9 * np.linalg.norm(stats.cross))
        np.testing.assert_allclose(np.sum(S * S, axis=0), stats.tt, rtol=1e-12)
    with pytest.raises(ValueError, match="statistics do not match"):
        compressed_design(stats.gram, stats.cross[:-1], stats.tt)


def test_statistics_model_refuses_what_it_cannot_hold():
    from bayes_rvm.models.graphs import rvm_regression_model, set_model_data
    from bayes_rvm.models.statistics import rvm_statistics_model

    Phi, Y, stats = _statistics_problem(50, 6, 1)
    with pytest.raises(TypeError, match="'offset'"):
        rvm_statistics_model(stats, offset=np.zeros(50))
    with pytest.raises(ValueError, match="n_rows"):
        rvm_regression_model(Phi, Y[:, 0], form="joint", n_rows=50)
    with pytest.raises(ValueError, match="rows: 3 indices"):
        rvm_statistics_model(stats, rows=(np.arange(3), Phi[:2], Y[:2, 0]))
    with pytest.raises(ValueError, match="sufficient statistics"):
        set_model_data(rvm_statistics_model(stats), Phi, Y[:, 0])


def test_statistics_model_samples_and_keeps_the_loo_terms_of_its_row_subset():
    # Truth: the exact LOO terms of the same rows computed on the full design (dense), at the
    # sampled hyperparameters; and compare() refusing a fit whose terms are on all rows.
    from bayes_rvm.evidence.problem import prior_column_scale
    from bayes_rvm.inference import sample_mcmc
    from bayes_rvm.models.statistics import log_likelihood_rows, rvm_statistics_model
    from bayes_rvm.posterior.comparison import compare
    from bayes_rvm.posterior.draws import gaussian_loo_terms

    Phi, Y, stats = _statistics_problem(3000, 8, 1)
    rows = log_likelihood_rows(3000, 200)
    assert rows.size == 200 and rows[0] == 0 and rows[-1] == 2999
    # the column scale the estimators state the hyperpriors for (unit RMS)
    phi_scale = prior_column_scale(np.linalg.norm(Phi, axis=0), 3000)
    kw = {"phi_scale": phi_scale, "y_scale": float(np.sqrt(np.mean(Y**2)))}
    model = rvm_statistics_model(stats, rows=(rows, Phi[rows], Y[rows, 0]), **kw)
    dt = sample_mcmc(
        model, draws=150, tune=150, chains=2, random_seed=0, progressbar=False, warn=False
    )
    post = dt["posterior"].dataset
    alpha = post["alpha"].values.reshape(300, -1)
    beta = post["beta"].values.reshape(-1)
    ll = dt["log_likelihood"].dataset["y"].values.reshape(300, -1)
    np.testing.assert_allclose(ll, gaussian_loo_terms(Phi, Y, alpha, beta)[:, rows], rtol=1e-8)
    assert dt.attrs["log_likelihood_rows"] == "subset of 200 of 3000 data rows"
    assert post["w"].shape == (2, 150, 8)
    # The noise sd is learnt from all 3000 rows (truth 0.1).
    assert float(post["sigma"].mean()) == pytest.approx(0.1, rel=0.05)
    other = dt.copy()
    other.attrs.pop("log_likelihood_rows")
    with pytest.raises(ValueError, match="different rows"):
        compare({"statistics": dt, "full": other})


def test_batched_cholesky_inverses_equal_lapack_and_refuse_an_indefinite_matrix():
    # The completion's r x r inverses (weight draws, leave-one-out terms) in one compiled loop:
    # L^-1 of each Cholesky factor as LAPACK gives it; an indefinite matrix is a LinAlgError.
    from bayes_rvm.models.marginal.lowrank import _cholesky_inverses

    rng = np.random.default_rng(4)
    A = rng.normal(size=(50, 9, 12))
    K = A @ np.swapaxes(A, 1, 2) + 0.1 * np.eye(9)
    want = np.linalg.inv(np.linalg.cholesky(K))
    np.testing.assert_allclose(_cholesky_inverses(K), want, rtol=1e-12, atol=1e-12)
    K[7] -= 100.0 * np.eye(9)
    with pytest.raises(np.linalg.LinAlgError, match="positive definite"):
        _cholesky_inverses(K)
