"""The normalised problem, the engine contract and the training record (evidence.problem)."""

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import multivariate_normal

from bayes_rvm import RVC, RVR
from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.evidence import EvidenceOptions, fit_evidence, fit_problem
from bayes_rvm.evidence.problem import OneVsRestFit, Problem, TrainingData


def _design(X, gamma=0.5):
    return KernelBasis("rbf", gamma=gamma).fit(X).transform(X)


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-5, 5, (n, 1))
    return X, np.sinc(X[:, 0] / np.pi) + 0.1 * rng.normal(size=n)


def test_regression_problem_is_the_design_and_targets_rescaled():
    X, y = _data()
    Phi = 1e6 * _design(X)
    raw = Phi.copy()
    problem = Problem.regression(Phi, 1e-4 * y, noise_variance=1e-10)
    assert problem.design is Phi  # normalised in place, not copied
    np.testing.assert_allclose(np.linalg.norm(problem.design, axis=0), 1.0, rtol=1e-14)
    np.testing.assert_allclose(problem.design * problem.norms, raw, rtol=1e-14)
    assert problem.scale == pytest.approx(1e-4 * np.sqrt(np.mean(y**2)), rel=1e-14)
    np.testing.assert_allclose(problem.targets[:, 0] * problem.scale, 1e-4 * y, rtol=1e-14)
    assert problem.noise_precision == pytest.approx(problem.scale**2 / 1e-10, rel=1e-14)


def test_unscaled_gaussian_fit_is_the_posterior_and_evidence_in_user_units():
    X, y = _data()
    Phi = 3e3 * _design(X)
    raw = Phi.copy()
    problem = Problem.regression(Phi, 50.0 * y)
    fit = problem.unscale(fit_problem(problem, EvidenceOptions(solver="sequential")))
    # Independent truth: the Gaussian posterior and marginal likelihood computed directly on the
    # user's design and targets at the unscaled alpha and beta.
    act, t = fit.active, 50.0 * y
    P = raw[:, act]
    alpha, beta = fit.alpha[act], fit.beta
    mean = np.linalg.solve(np.diag(alpha) + beta * P.T @ P, beta * P.T @ t)
    np.testing.assert_allclose(fit.mean[:, 0], mean, rtol=1e-8)
    cov = np.eye(t.size) / beta + (P / alpha) @ P.T
    dense = multivariate_normal(np.zeros(t.size), cov).logpdf(t)
    assert fit.log_evidence == pytest.approx(dense, abs=1e-6)


def test_unscaled_laplace_fit_is_the_mode_in_user_units():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 2))
    yi = (X[:, 0] + 0.3 * rng.normal(size=60) > 0).astype(int)
    Phi = 1e-3 * KernelBasis("rbf", gamma=0.5).fit(X).transform(X)
    raw = Phi.copy()
    problem = Problem.classification(Phi, yi, 2)
    fit = problem.unscale(fit_problem(problem, EvidenceOptions(tol=1e-6, threshold_alpha=1e9)))
    # Independent truth: the gradient of the log posterior in the user's units vanishes there.
    P, w = raw[:, fit.active], fit.mean[:, 0]
    grad = P.T @ (yi - expit(P @ w)) - fit.alpha[fit.active] * w
    assert np.max(np.abs(grad)) < 1e-6 * np.max(np.abs(P.T @ yi))


def test_one_vs_rest_problem_fits_each_class_against_the_rest():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 2))
    yi = np.digitize(X[:, 0], [-0.5, 0.5])
    problem = Problem.classification(_design(X), yi, 3, one_vs_rest=True)
    fit = fit_problem(problem)
    assert isinstance(fit, OneVsRestFit) and len(fit.fits) == 3
    for c, f in enumerate(fit.fits):
        alone = fit_evidence(problem.design, (yi == c).astype(float), likelihood="bernoulli")
        assert f.log_evidence == alone.log_evidence
    assert fit.log_evidence == pytest.approx(sum(f.log_evidence for f in fit.fits), rel=1e-15)
    np.testing.assert_array_equal(
        fit.active, np.unique(np.concatenate([f.active for f in fit.fits]))
    )
    assert len(problem.unscale(fit)) == 3


def test_engine_warm_start_and_fixed_noise():
    X, y = _data(60)
    problem = Problem.regression(_design(X), y)
    options = EvidenceOptions(solver="sequential", tol=1e-6)
    cold = fit_problem(problem, options)
    warm = fit_problem(problem, options, warm=cold)
    # Started at the optimum it stops at once, where it is.
    assert warm.n_iter < cold.n_iter
    assert warm.log_evidence == pytest.approx(cold.log_evidence, abs=1e-6)
    fixed = Problem.regression(_design(X), y, noise_variance=0.01)
    for solver in ("sequential", "mackay"):
        fit = fixed.unscale(fit_problem(fixed, EvidenceOptions(solver=solver), warm=cold))
        assert 1.0 / fit.beta == pytest.approx(0.01, rel=1e-12)


def test_fit_equals_an_engine_run_on_its_problem():
    X, y = _data()
    est = RVR(gamma=0.5).fit(X, y)
    problem = Problem.regression(est.basis_.transform(X), y)
    fit = problem.unscale(fit_problem(problem, est.make_engine()))
    np.testing.assert_array_equal(fit.active, est.active_)
    np.testing.assert_array_equal(fit.mean, est.fit_.mean)
    np.testing.assert_array_equal(fit.alpha, est.fit_.alpha)
    assert fit.log_evidence == est.log_evidence_


def test_training_record_keeps_what_prediction_needs_and_round_trips():
    X, y = _data()
    est = RVR(gamma=0.5).fit(X, y)
    train = est.training_
    assert isinstance(train, TrainingData)
    np.testing.assert_array_equal(train.x_train, X)
    np.testing.assert_array_equal(train.y, y)
    np.testing.assert_allclose(
        train.phi_active, est.basis_.transform(X, columns=est.active_), rtol=1e-13
    )
    back = TrainingData.from_arrays(train.to_arrays())
    for name in ("phi_active", "y", "x_train"):
        np.testing.assert_array_equal(getattr(back, name), getattr(train, name))
    assert back.y_index is None and back.kernel_matrix is None
    K = _design(X)[:, :-1]  # the kernel matrix, without the bias column
    pre = RVR(kernel="precomputed").fit(K, y).training_
    assert pre.x_train is None and pre.inputs is pre.kernel_matrix
    assert set(pre.to_arrays()) == {"phi_active", "y", "X"}  # the saved files' names
    rng = np.random.default_rng(3)
    Xc = rng.normal(size=(40, 2))
    clf = RVC(gamma=0.5).fit(Xc, (Xc[:, 0] > 0).astype(int))
    np.testing.assert_array_equal(clf.training_.y_index, (Xc[:, 0] > 0).astype(int))
    phi = clf.basis_.transform(Xc, columns=clf.active_)
    np.testing.assert_allclose(clf.training_.phi_active, phi, rtol=1e-13)
    np.testing.assert_allclose(clf.training_.norms, np.linalg.norm(phi, axis=0), rtol=1e-13)
    assert clf.training_.alpha_normalised.shape == (1, clf.active_.size)
