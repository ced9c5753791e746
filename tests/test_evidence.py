"""The MacKay evidence engine against closed forms, dense references and scikit-learn's ARD."""

import warnings

import numpy as np
import pytest
from scipy.stats import multivariate_normal
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import ARDRegression

from bayes_rvm.evidence import fit_mackay, gaussian_posterior
from tests.conftest import random_design


def dense_log_evidence(Phi, T, alpha, beta):
    """``sum_d ln N(t_d | 0, C)``, ``C = I / beta + Phi A^-1 Phi^T`` (reference document 001)."""
    C = np.eye(Phi.shape[0]) / beta + (Phi / alpha) @ Phi.T
    T = T.reshape(Phi.shape[0], -1)
    return sum(multivariate_normal(np.zeros(len(C)), C).logpdf(t) for t in T.T)


def posterior(Phi, T, alpha, beta):
    T = T.reshape(Phi.shape[0], -1)
    return gaussian_posterior(
        Phi.T @ Phi, Phi.T @ T, float(np.sum(T**2)), Phi.shape[0], alpha, beta
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("shape", [(30, 8, 1), (20, 35, 1), (25, 10, 3)])
def test_log_evidence_two_closed_forms_agree(seed, shape):
    # Eq. 1.10 of document 000 (through the posterior) against ln N(t | 0, C) of document 001.
    rng = np.random.default_rng(seed)
    n, m, d = shape
    Phi = rng.normal(size=(n, m))
    T = rng.normal(size=(n, d))
    alpha = np.exp(rng.uniform(-3, 3, m))
    beta = float(np.exp(rng.uniform(-1, 2)))
    got = posterior(Phi, T, alpha, beta).log_evidence
    want = dense_log_evidence(Phi, T, alpha, beta)
    assert got == pytest.approx(want, rel=1e-10)


def test_posterior_moments_equal_dense_inverse(rng):
    Phi, t = random_design(rng)
    alpha = np.exp(rng.uniform(-2, 2, Phi.shape[1]))
    beta = 4.0
    post = posterior(Phi, t, alpha, beta)
    Sigma = np.linalg.inv(np.diag(alpha) + beta * Phi.T @ Phi)
    np.testing.assert_allclose(post.mean[:, 0], beta * Sigma @ Phi.T @ t, rtol=1e-9)
    np.testing.assert_allclose(post.sigma_diag, np.diag(Sigma), rtol=1e-9)
    np.testing.assert_allclose(post.gamma, 1 - alpha * np.diag(Sigma), rtol=1e-9, atol=1e-12)


def test_optimum_is_a_stationary_point_of_the_dense_evidence(rng):
    # At convergence the gradient of ln N(T | 0, C) in log alpha (retained) and log beta vanishes.
    Phi, _ = random_design(rng, n=50, m=10)
    W = np.zeros((10, 2))
    W[[1, 4, 6]] = rng.normal(scale=2, size=(3, 2))
    T = Phi @ W + 0.3 * rng.normal(size=(50, 2))
    fit = fit_mackay(Phi, T, tol=1e-10, evidence_tol=0.0)
    assert fit.converged
    a = fit.active
    base = np.concatenate([np.log(fit.alpha[a]), [np.log(fit.beta)]])

    def f(theta):
        return dense_log_evidence(Phi[:, a], T, np.exp(theta[:-1]), np.exp(theta[-1]))

    h = 1e-5
    grad = [(f(base + h * e) - f(base - h * e)) / (2 * h) for e in np.eye(base.size)]
    np.testing.assert_allclose(grad, 0.0, atol=1e-5)
    # ... and the returned log evidence is that of the returned hyperparameters.
    assert fit.log_evidence == pytest.approx(f(base), rel=1e-10)


@pytest.mark.parametrize(
    ("lambda_12", "seed"),
    [((1e-6, 1e-6), 0), ((1e-6, 1e-6), 1), ((0.5, 0.5), 2), ((0.05, 0.05), 3)],
)
def test_matches_sklearn_ard_regression(lambda_12, seed):
    # Same design, no intercept, same start (weight precisions 1, noise precision 1/var(y)), same
    # Gamma hyperpriors and pruning threshold: the same fixed point. lambda_1 = lambda_2 = nu/2
    # is the Student-t prior of document 002.
    rng = np.random.default_rng(seed)
    Phi, y = random_design(rng, n=80, m=15)
    # At lambda = 0.5 and 0.05 the steps of scikit-learn's coefficients stay at rounding level
    # (~1e-13) above tol and it runs to max_iter; it holds the fixed point (to 2e-13 of ours)
    # from its 300th iteration, and 10^5 iterations cost 5.5 s per case.
    ard = ARDRegression(
        fit_intercept=False,
        tol=1e-14,
        max_iter=1_000,
        threshold_lambda=1e4,
        lambda_1=lambda_12[0],
        lambda_2=lambda_12[1],
    ).fit(Phi, y)
    fit = fit_mackay(
        Phi,
        y,
        alpha_init=1.0,
        beta_init=1.0 / (np.var(y) + np.finfo(float).eps),
        alpha_prior=lambda_12,
        beta_prior=(1e-6, 1e-6),
        threshold_alpha=1e4,
        tol=1e-12,
        evidence_tol=0.0,
        max_iter=100_000,
    )
    keep = np.flatnonzero(ard.lambda_ < 1e4)
    np.testing.assert_array_equal(fit.active, keep)
    np.testing.assert_allclose(fit.alpha[keep], ard.lambda_[keep], rtol=1e-4)
    np.testing.assert_allclose(fit.mean[:, 0], ard.coef_[keep], rtol=1e-4)
    assert fit.beta == pytest.approx(ard.alpha_, rel=1e-4)


def test_fixed_noise_is_kept(rng):
    Phi, y = random_design(rng)
    fit = fit_mackay(Phi, y, beta_init=7.5, fixed_beta=True, tol=1e-10, evidence_tol=0.0)
    assert fit.beta == 7.5
    # The alpha fixed point still holds for the retained set.
    post = posterior(Phi[:, fit.active], y, fit.alpha[fit.active], 7.5)
    np.testing.assert_allclose(fit.alpha[fit.active], post.gamma / post.mean[:, 0] ** 2, rtol=1e-6)


def test_irrelevant_columns_are_pruned_and_relevant_kept(rng):
    Phi = rng.normal(size=(200, 10))
    y = Phi[:, [2, 7]] @ np.array([1.5, -2.0]) + 0.1 * rng.normal(size=200)
    fit = fit_mackay(Phi, y)
    assert set(fit.active) >= {2, 7}
    # Other columns survive only where the noise happens to align with them, with tiny weights.
    others = np.isin(fit.active, [2, 7], invert=True)
    assert np.all(np.abs(fit.mean[others, 0]) < 0.01)
    np.testing.assert_allclose(fit.mean[~others, 0], [1.5, -2.0], atol=0.02)
    assert 1 / np.sqrt(fit.beta) == pytest.approx(0.1, rel=0.15)
    assert np.all(np.isinf(np.delete(fit.alpha, fit.active)))


def test_trace_and_stop_reason(rng):
    Phi, y = random_design(rng)
    fit = fit_mackay(Phi, y)
    assert fit.trace.shape == (fit.n_iter,)
    assert fit.converged and ("tol" in fit.reason or "stalled" in fit.reason)
    # Away from the start the MacKay iteration climbs the evidence.
    assert fit.trace[-1] >= fit.trace[0]


def test_non_convergence_warns_and_returns_best_so_far(rng):
    Phi, y = random_design(rng)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        fit = fit_mackay(Phi, y, max_iter=2)
    assert not fit.converged and fit.n_iter == 2 and np.isfinite(fit.log_evidence)


def test_zero_columns_are_never_selected(rng):
    Phi, y = random_design(rng)
    Phi[:, 3] = 0.0
    fit = fit_mackay(Phi, y)
    assert 3 not in fit.active and np.isfinite(fit.log_evidence)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha_prior": (-1, 0)}, "alpha_prior"),
        ({"beta_prior": "x"}, "beta_prior"),
        ({"alpha_init": 0.0}, "alpha_init"),
        ({"beta_init": -1.0}, "beta_init"),
        ({"max_iter": 0}, "max_iter"),
    ],
)
def test_bad_engine_arguments(rng, kwargs, match):
    Phi, y = random_design(rng)
    with pytest.raises(ValueError, match=match):
        fit_mackay(Phi, y, **kwargs)


# --- the one engine contract (issue 14) ---------------------------------------------------------
ENGINES = ("mackay", "sequential", "laplace_mackay", "laplace_sequential")


def _engine_problem(engine, rng):
    from sklearn.metrics.pairwise import rbf_kernel

    X = rng.normal(size=(60, 2))
    Phi = np.hstack([rbf_kernel(X, X, gamma=0.5), np.ones((60, 1))])
    Phi /= np.linalg.norm(Phi, axis=0)
    if engine.startswith("laplace"):
        t = (X[:, 0] + 0.5 * rng.normal(size=60) > 0).astype(float)
    else:
        t = np.sin(X[:, 0]) + 0.1 * rng.normal(size=60)
    return Phi, t


def _fit_with(engine, Phi, t, **settings):
    from bayes_rvm import evidence as ev

    return getattr(ev, f"fit_{engine}")(Phi, t, **settings)


@pytest.mark.parametrize("engine", ENGINES)
def test_options_object_and_keywords_are_the_same_call(engine, rng):
    from bayes_rvm.evidence import EvidenceOptions, fit_evidence

    Phi, t = _engine_problem(engine, rng)
    by_keywords = _fit_with(engine, Phi, t, tol=1e-5)
    by_options = _fit_with(engine, Phi, t, options=EvidenceOptions(tol=1e-5))
    family = "laplace" if engine.startswith("laplace") else "gaussian"
    by_table = fit_evidence(
        Phi,
        t,
        solver=engine.rsplit("_", 1)[-1],
        options=EvidenceOptions(likelihood="bernoulli" if family == "laplace" else None),
        tol=1e-5,
    )
    for fit in (by_options, by_table):
        np.testing.assert_array_equal(fit.active, by_keywords.active)
        assert fit.log_evidence == by_keywords.log_evidence
    assert by_keywords.likelihood == ("bernoulli" if family == "laplace" else "gaussian")


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_calls_back_and_stops_when_asked(engine, rng):
    Phi, t = _engine_problem(engine, rng)
    seen = []

    def callback(info):
        seen.append(info)
        return len(seen) == 3

    fit = _fit_with(engine, Phi, t, callback=callback)
    assert fit.converged and fit.reason.startswith("stopped by callback") and len(seen) == 3
    steps = [info["step"] for info in seen]
    assert steps == list(range(steps[0], steps[0] + 3)) and steps[0] in (0, 1)
    # What the callback saw last is what the fit recorded last, where it stopped.
    assert seen[-1]["objective"] == fit.trace[-1]
    assert seen[-1]["action"] == fit.actions[-1]
    assert {"action", "gain", "n_active", "beta", "active", "alpha"} <= set(seen[-1])
    _fit_with(engine, Phi, t, progress=True)  # the progress bar must not break anything


@pytest.mark.parametrize(
    ("engine", "settings", "match"),
    [
        ("mackay", {"priority": "add"}, "does not use the option"),
        ("mackay", {"likelihood": "bernoulli"}, "fit_laplace_mackay"),
        ("laplace_mackay", {"fixed_beta": True}, "does not use the option"),
        ("laplace_sequential", {"beta_init": 2.0}, "does not use the option"),
        ("laplace_sequential", {"likelihood": "gaussian"}, "fit_mackay"),
        ("sequential", {"mode_tol": 1e-3}, "does not use the option"),
        ("sequential", {"threshold_alpha": 1e6}, "does not use the option"),
        ("laplace_mackay", {"evidence_tol": -1.0}, "evidence_tol"),
        ("laplace_sequential", {"alpha_init": np.ones(5)}, "alpha_init"),
        ("laplace_mackay", {"free": [0.5]}, "free"),
        ("laplace_sequential", {"candidates": []}, "candidates"),
    ],
)
def test_engines_refuse_options_they_do_not_use_or_bad_values(engine, settings, match, rng):
    Phi, t = _engine_problem(engine, rng)
    with pytest.raises(ValueError, match=match):
        _fit_with(engine, Phi, t, **settings)


def test_options_are_frozen_and_reject_unknown_fields():
    import dataclasses

    from bayes_rvm.evidence import EvidenceOptions

    opt = EvidenceOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opt.tol = 1.0
    with pytest.raises(TypeError, match="start"):
        EvidenceOptions(start=3)


@pytest.mark.parametrize("engine", ["laplace_mackay", "laplace_sequential"])
def test_free_intercept_of_a_bernoulli_fit_is_the_logistic_score_equation(engine, rng):
    # A free intercept b has the prior N(0, 10^2) in logits: at the mode its score equation is
    # sum_n (t_n - y_n) = b / 100, whatever else is in the model. A rare class (3 positives in
    # 200) must keep it.
    from scipy.optimize import brentq
    from scipy.special import expit
    from sklearn.metrics.pairwise import rbf_kernel

    from bayes_rvm.evidence.options import FREE_LATENT_SD

    X = rng.normal(size=(200, 2))
    t = np.zeros(200)
    t[np.argsort(X[:, 0])[-3:]] = 1.0
    Phi = np.hstack([rbf_kernel(X, X, gamma=0.5), np.ones((200, 1))])
    Phi /= np.linalg.norm(Phi, axis=0)
    with warnings.catch_warnings():
        # Three positives at one edge are separable: MacKay's alphas of their columns creep
        # towards zero without end. The score equation holds at the mode of any alphas.
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = _fit_with(engine, Phi, t, free=[200], max_iter=300)
    assert 200 in fit.active
    b = fit.mean[list(fit.active).index(200), 0] * Phi[0, 200]
    p = expit(Phi[:, fit.active] @ fit.mean[:, 0])
    assert np.sum(t - p) == pytest.approx(b / FREE_LATENT_SD**2, rel=1e-6)
    # Alone, the free column is the root of sum_n (t_n - sigmoid(b)) = b / 100, near logit(3/200).
    alone = _fit_with(engine, Phi, t, free=[200], candidates=[200])
    np.testing.assert_array_equal(alone.active, [200])
    root = brentq(lambda b: np.sum(t) - t.size * expit(b) - b / FREE_LATENT_SD**2, -20.0, 0.0)
    assert alone.mean[0, 0] * Phi[0, 200] == pytest.approx(root, rel=1e-8)
    assert abs(root - np.log(3 / 197)) < 0.1


def test_shared_and_per_class_single_alpha_optima_agree():
    # The exact cubic (shared layout) and the bisection (per-class layout) are two algorithms for
    # the same one-class optimum; without a hyperprior both reduce to the closed form.
    from bayes_rvm.evidence import optimal_alpha

    rng = np.random.default_rng(3)
    s = np.exp(rng.uniform(-2, 2, 200))
    q2 = s * np.exp(rng.uniform(-1, 3, 200))
    for prior in ((0.0, 0.0), (0.5, 0.5), (2.0, 0.1)):
        a_shared, g_shared = optimal_alpha(s, q2, 1, prior)
        a_class, g_class = optimal_alpha(
            s[:, None], q2[:, None], prior=prior, per_class=True, alpha_max=1e12
        )
        # With a Gamma hyperprior l(alpha) can have two maxima: the cubic takes the better one,
        # the bisection whichever its bracket holds, so it may only ever gain less.
        assert np.all(g_class <= g_shared + 1e-12 * (1 + np.abs(g_shared)))
        same = np.isclose(g_class, g_shared, rtol=1e-9, atol=1e-12)
        assert same.mean() >= (1.0 if prior == (0.0, 0.0) else 0.99)
        finite = np.isfinite(a_shared) & same
        np.testing.assert_array_equal(finite, np.isfinite(a_class) & same)
        np.testing.assert_allclose(a_class[finite], a_shared[finite], rtol=1e-9)


def test_log_evidence_module_is_what_the_dense_formula_gives(rng):
    from bayes_rvm.evidence import gaussian_log_evidence
    from bayes_rvm.evidence.log_evidence import cholesky

    Phi, t = random_design(rng)
    alpha = np.exp(rng.uniform(-2, 2, Phi.shape[1]))
    beta = 3.0
    H = np.diag(alpha) + beta * Phi.T @ Phi
    m = beta * np.linalg.solve(H, Phi.T @ t)
    quad = beta * np.sum((t - Phi @ m) ** 2) + alpha @ m**2
    got = gaussian_log_evidence(cholesky(H), alpha, beta, Phi.shape[0], quad)
    assert got == pytest.approx(dense_log_evidence(Phi, t, alpha, beta), rel=1e-10)


def test_rescaled_fit_maps_predictions_and_evidence_back(rng):
    # A fit of (Phi / norms, T / scale) rescaled to original units predicts like a fit of the
    # original problem at the mapped hyperparameters, and its evidence carries the Jacobian.
    Phi, t = random_design(rng, n=40, m=6)
    norms = np.linalg.norm(Phi, axis=0)
    scale = 2.5
    fit = fit_mackay(Phi / norms, t / scale).rescaled(norms, scale, t.size)
    act = fit.active
    post = posterior(Phi[:, act], t, fit.alpha[act], fit.beta)
    np.testing.assert_allclose(fit.mean, post.mean, rtol=1e-8)
    np.testing.assert_allclose(fit.covariance, np.linalg.inv(post.chol @ post.chol.T), rtol=1e-8)
    assert fit.log_evidence == pytest.approx(post.log_evidence, rel=1e-10)
