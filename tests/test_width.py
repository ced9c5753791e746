"""The kernel width as a type-II hyperparameter: gradient, multimodality, estimators."""

import numpy as np
import pytest
from scipy.linalg import cholesky, solve_triangular

from bayes_rvm import load_model, save_model
from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.evidence import EvidenceOptions
from bayes_rvm.evidence.problem import Problem, normalise_columns
from bayes_rvm.evidence.sequential import fit_sequential
from bayes_rvm.evidence.width import (
    evidence_width_gradient,
    maximise_width,
    width_to_gamma,
)


def _design(X, centres, ls, kernel, columns=None):
    g = width_to_gamma(ls, kernel)
    basis = KernelBasis(kernel, gamma=float(g[0]) if g.size == 1 else g).fit(X, centres=centres)
    Phi = basis.transform(X, columns=columns)
    normalise_columns(Phi)
    return Phi


def _dense_log_evidence(Phi, T, alpha, beta):
    """ln N(T | 0, I/beta + Phi A^-1 Phi^T), summed over outputs (document 001's form)."""
    C = np.eye(Phi.shape[0]) / beta + (Phi / alpha) @ Phi.T
    # By its Cholesky factor: multivariate_normal's eigenvalue test calls C singular once its
    # smallest eigenvalue, 1 / beta, is below 1e-9 of its largest (a near-interpolating fit).
    L = cholesky(C, lower=True)
    z = solve_triangular(L, T, lower=True)
    N, D = T.shape
    return -0.5 * (N * D * np.log(2 * np.pi) + 2 * D * np.sum(np.log(np.diag(L))) + np.sum(z * z))


@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
@pytest.mark.parametrize("ls", [[1.3], [0.8, 1.5, 3.0]])
def test_width_gradient_matches_finite_differences(kernel, ls):
    """d log evidence / d log l at fixed hyperparameters, against central differences of a dense
    ln N(T | 0, C); centres a subset of the inputs, a bias column, two outputs."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (60, 3))
    f = np.sin(2 * X[:, 0]) + 0.3 * X[:, 1]
    T = np.c_[f, -0.5 * f] + 0.1 * rng.normal(size=(60, 2))
    centres = X[::2]
    ls = np.array(ls)
    Phi = _design(X, centres, ls, kernel)
    fit = fit_sequential(Phi, T)
    act = fit.active
    assert act.size >= 3
    C = np.full((act.size, 3), np.nan)
    kern = act < centres.shape[0]
    C[kern] = centres[act[kern]]
    grad = evidence_width_gradient(X, C, Phi[:, act], T, fit, ls, kernel=kernel)
    h = 1e-5
    fd = np.empty(ls.size)
    for p in range(ls.size):
        e = np.zeros(ls.size)
        e[p] = h

        def ev(sign, e=e):
            Phi_a = _design(X, centres, ls * np.exp(sign * e), kernel, columns=act)
            return _dense_log_evidence(Phi_a, T, fit.alpha[act], fit.beta)

        fd[p] = (ev(1) - ev(-1)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(fd) > 1e-2)  # a test of something


def _two_scale(seed=0):
    """A slow and a fast sine: a wide width calls the fast part noise, a narrow one fits it."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0, 10, 120))[:, None]
    y = np.sin(X[:, 0]) + 0.4 * np.sin(7 * X[:, 0]) + 0.1 * rng.normal(size=120)
    return X, y


def test_two_evidence_maxima_found_from_several_starts():
    X, y = _two_scale()
    model = RVR(gamma="evidence").fit(X, y)
    path = model.width_path_
    ev = path.log_evidence
    inner = np.flatnonzero((ev[1:-1] > ev[:-2]) & (ev[1:-1] > ev[2:])) + 1
    # Two maxima on the start grid: near the slow scale and near the fast one.
    assert inner.size >= 2
    wide, narrow = path.length_scale[inner[0]], path.length_scale[inner[-1]]
    assert wide > 1.0 and narrow < 0.5
    # Both were refined from, and the narrow, far higher one was kept.
    starts = model.width_selection_.starts
    assert any(s > 1.0 for s in starts) and any(s < 0.5 for s in starts)
    assert 0.25 < model.length_scale_ < 0.45
    # Independent truth: cold fixed-width fits on a fine grid. The selection is within 2 nats of
    # their best and far above the wide maximum.
    fixed = {ls: RVR(gamma=1 / ls**2).fit(X, y).log_evidence_ for ls in np.geomspace(2, 0.2, 25)}
    best = max(fixed.values())
    assert model.log_evidence_ >= best - 2.0
    wide_best = max(v for k, v in fixed.items() if k > 1.0)
    assert model.log_evidence_ > wide_best + 50
    # A single start at the wide maximum stays there: the restarts are what find the narrow one.
    problem = Problem.regression(None, y)
    engine = EvidenceOptions(solver="sequential", tol=1e-3)
    design = lambda ls, columns=None: _design(X, None, ls, "rbf", columns)  # noqa: E731
    only_wide = maximise_width(
        design, engine, X, problem, grid=np.geomspace(12, 0.8, 5), n_starts=1
    )
    assert only_wide.length_scale[0] > 0.8


def test_rvr_evidence_width_on_sinc_beats_tipping_width():
    X, y = make_sinc(100, noise=0.1, random_state=0, shuffle=False)
    model = RVR(gamma="evidence").fit(X, y)
    tipping = RVR(gamma=1 / 3.0**2).fit(X, y)  # Tipping's width 3
    assert model.log_evidence_ >= tipping.log_evidence_
    assert model.log_evidence_ >= model.width_path_.log_evidence.max() - 1e-9
    assert model.gamma_ == pytest.approx(1 / model.length_scale_**2)
    Xt = np.linspace(-10, 10, 500)[:, None]
    err = np.sqrt(np.mean((model.predict(Xt) - np.sinc(Xt[:, 0] / np.pi)) ** 2))
    err_tipping = np.sqrt(np.mean((tipping.predict(Xt) - np.sinc(Xt[:, 0] / np.pi)) ** 2))
    assert err < 1.1 * err_tipping


def test_ard_width_ranks_an_irrelevant_feature(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 2))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=120)
    model = RVR(gamma="evidence_ard").fit(X, y)
    assert model.length_scale_.shape == (2,)
    assert model.length_scale_[1] > 3 * model.length_scale_[0]
    single = RVR(gamma="evidence").fit(X, y)
    assert model.log_evidence_ >= single.log_evidence_ - 1e-6
    loaded = load_model(save_model(model, tmp_path / "m.zarr"))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_array_equal(loaded.width_path_.log_evidence, model.width_path_.log_evidence)
    np.testing.assert_allclose(loaded.length_scale_, model.length_scale_)


def test_width_errors():
    X, y = make_sinc(30, random_state=0, shuffle=False)
    with pytest.raises(ValueError, match="kernel='poly'"):
        RVR(gamma="evidence", kernel="poly").fit(X, y)
    with pytest.raises(ValueError, match="per-feature gamma"):
        RVR(gamma=[1.0, 2.0]).fit(X, y)
    with pytest.raises(ValueError, match="grid"):
        maximise_width(lambda ls, columns=None: None, None, X, y, grid=np.array([-1.0]))


def test_rvc_evidence_width_is_the_best_of_its_curve(tmp_path):
    from bayes_rvm.estimators.classifier import RVC

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 2))
    y = (X[:, 0] ** 2 + X[:, 1] > 0.8).astype(int)
    model = RVC(gamma="evidence").fit(X, y)
    assert model.log_evidence_ >= model.width_path_.log_evidence.max() - 1e-9
    for ls in model.width_path_.length_scale:  # the curve is what a fixed width gives
        fixed = RVC(gamma=1 / ls**2).fit(X, y)
        k = np.flatnonzero(model.width_path_.length_scale == ls)[0]
        assert fixed.log_evidence_ == pytest.approx(model.width_path_.log_evidence[k], abs=1e-6)
    with pytest.raises(ValueError, match="evidence_ard"):
        RVC(gamma="evidence_ard").fit(X, y)
    loaded = load_model(save_model(model, tmp_path / "c.zarr"))
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))


def test_rvc_evidence_width_three_classes():
    # The width search hands the labels to the engine as a float column; the softmax engine
    # indexes one-hot targets with them (an IndexError before).
    from bayes_rvm.estimators.classifier import RVC

    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 2))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1] ** 2, [-0.3, 0.6])
    model = RVC(gamma="evidence").fit(X, y)
    assert model.log_evidence_ >= model.width_path_.log_evidence.max() - 1e-9
    fixed = RVC(gamma=model.gamma_).fit(X, y)
    assert fixed.log_evidence_ == pytest.approx(model.log_evidence_, abs=1e-6)
    np.testing.assert_allclose(model.predict_proba(X).sum(axis=1), 1.0)


def test_rvrcv_agrees_with_grid_search():
    from sklearn.model_selection import GridSearchCV, KFold

    from bayes_rvm.estimators.cv import RVRCV

    X, y = make_sinc(80, noise=0.1, random_state=1, shuffle=False)
    widths = [8.0, 4.0, 2.0, 1.0, 0.5]
    model = RVRCV(widths=widths, random_state=0, warm_start=False).fit(X, y)
    warm = RVRCV(widths=widths, random_state=0).fit(X, y)
    gs = GridSearchCV(
        RVR(),
        {"gamma": [1 / w**2 for w in widths]},
        cv=KFold(5, shuffle=True, random_state=0),
        scoring="neg_mean_squared_error",
    ).fit(X, y)
    # Cold starts: exactly GridSearchCV's fits and scores.
    assert model.gamma_ == pytest.approx(gs.best_params_["gamma"])
    np.testing.assert_allclose(
        model.cv_results_["mean_test_score"], gs.cv_results_["mean_test_score"], rtol=1e-6
    )
    # Warm starts along the grid: other local optima of the alphas, similar scores.
    np.testing.assert_allclose(
        warm.cv_results_["mean_test_score"], gs.cv_results_["mean_test_score"], rtol=0.15
    )
    np.testing.assert_array_equal(model.predict(X), model.estimator_.predict(X))
    assert model.relevance_vectors_.shape[0] == model.estimator_.n_relevance_vectors_
    with pytest.raises(ValueError, match="kernel"):
        RVRCV(kernel="poly").fit(X, y)
    with pytest.raises(ValueError, match="cv"):
        RVRCV(cv=1).fit(X, y)


def test_rvccv_agrees_with_grid_search():
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    from bayes_rvm.estimators.classifier import RVC
    from bayes_rvm.estimators.cv import RVCCV

    rng = np.random.default_rng(0)
    X = rng.normal(size=(90, 2))
    y = (X[:, 0] ** 2 + X[:, 1] > 0.8).astype(int)
    widths = [4.0, 1.0, 0.25]
    model = RVCCV(widths=widths, random_state=0).fit(X, y)
    gs = GridSearchCV(
        RVC(moderated="probit"),
        {"gamma": [1 / w**2 for w in widths]},
        cv=StratifiedKFold(5, shuffle=True, random_state=0),
    ).fit(X, y)
    # No warm starts in the Laplace engines: the same fits, the same accuracies (the probit keeps
    # the latent mean's class, which RVCCV scores by).
    np.testing.assert_allclose(
        model.cv_results_["mean_test_score"], gs.cv_results_["mean_test_score"], atol=0.03
    )
    assert model.gamma_ == pytest.approx(gs.best_params_["gamma"])
    assert set(model.predict(X)) <= set(model.classes_)


def test_plot_width_path():
    import matplotlib

    matplotlib.use("Agg")
    from bayes_rvm.estimators.cv import RVRCV
    from bayes_rvm.plots import plot_width_path

    X, y = make_sinc(50, noise=0.1, random_state=0, shuffle=False)
    model = RVR(gamma="evidence").fit(X, y)
    cv = RVRCV(widths=model.width_path_.length_scale, random_state=0).fit(X, y)
    ax = plot_width_path(model, cv=cv)
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), model.width_path_.log_evidence)
    # The CV curve is drawn along the width, whatever the order of the widths searched.
    shuffled = RVRCV(widths=model.width_path_.length_scale[[2, 0, 3, 1]], random_state=0).fit(X, y)
    curve = plot_width_path(model, cv=shuffled).figure.axes[1].lines[0]
    assert np.all(np.diff(curve.get_xdata()) > 0)
    with pytest.raises(ValueError, match="width_path_"):
        plot_width_path(RVR(gamma=0.1).fit(X, y))


def _sinc_type2(n=40):
    X, y = make_sinc(n, noise=0.1, random_state=0, shuffle=False)
    y = y / np.sqrt(np.mean(y**2))  # unit RMS, as the estimators fit
    model = RVR(gamma="evidence").fit(X, y)
    return X, y, model


def test_width_model_density_equals_type2_evidence():
    """At the type-II point, the sampled-width model's likelihood is the engine's log evidence."""

    from bayes_rvm.basis.kernels import reference_gamma
    from bayes_rvm.models.graphs import rvm_width_model

    X, y, model = _sinc_type2()
    r = model.length_scale_
    Phi = _design(X, None, np.array([r]), "rbf")
    fit = fit_sequential(Phi, y, tol=1e-8)
    act = fit.active
    rel = act[act < X.shape[0]]
    assert act[-1] == X.shape[0]  # the bias is in the model
    pm_model = rvm_width_model(X, y, X[rel])
    # The engine fits the precisions of unit-norm columns; alpha_rel is stated for unit-RMS ones
    # (bayes_rvm.evidence.problem.prior_column_scale): N times larger.
    from tests.test_models import _with_alpha

    point = {
        "gamma_rel_log__": np.log(width_to_gamma(r, "rbf") / reference_gamma(X, "rbf")),
        "sigma_rel_log__": -0.5 * np.log(fit.beta),
    }
    point = _with_alpha(pm_model, point, fit.alpha[act] * X.shape[0])
    loglik = pm_model.compile_logp(vars=[pm_model["y"]], jacobian=False)(point)
    # The type-II evidence at the engine's hyperparameters, computed densely: the engine's own
    # log_evidence (log|A| - log|H|) loses 3e-6 nats to cancellation when an active alpha is
    # ~5e7, as at the width found here (r = 0.27).
    dense = _dense_log_evidence(Phi[:, act], y[:, None], fit.alpha[act], fit.beta)
    assert loglik == pytest.approx(dense, abs=1e-8)
