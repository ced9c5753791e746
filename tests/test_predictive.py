"""Predictive distributions: RVM* against dense augmented models, return_cov, sample_y, calibration.

The independent truths: the augmented model written out densely (an explicit basis function on
the test point, alphas and noise fixed, its posterior by a dense inverse); sklearn's rbf_kernel
for the added function; the law of total variance computed from the raw MCMC draws; Monte Carlo
moments of sample_y; scikit-learn's calibration_curve and direct interval checks.
"""

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit, softmax
from sklearn.calibration import calibration_curve
from sklearn.datasets import make_blobs, make_moons
from sklearn.metrics.pairwise import rbf_kernel

from bayes_rvm import load_model, save_model
from bayes_rvm.datasets import sinc
from bayes_rvm.estimators.classifier import RVC, OneVsRestFit
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.posterior.calibration import (
    gaussian_nlpd,
    interval_coverage,
    mixture_nlpd,
    pit_gaussian,
    pit_mixture,
    reliability_curve,
)
from bayes_rvm.posterior.predictors import Rows

GAMMA = 1.0 / 9.0
X_TEST = np.array([[-12.0], [-6.0], [0.0], [1.5], [5.0], [40.0]])  # out, data, gap, gap, data, far


@pytest.fixture(scope="module")
def gap_data():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-10, -3, 40), rng.uniform(3, 10, 40)])
    return x[:, None], sinc(x) + 0.1 * rng.standard_normal(x.size)


@pytest.fixture(scope="module")
def star(gap_data):
    return RVR(gamma=GAMMA, predictive="rvm*").fit(*gap_data)


def dense_augmented(model, X, y, x_star, tau2):
    """Mean and variance at ``x_star`` of the model with an explicit extra function there."""
    phi = rbf_kernel(X, X[model.relevance_], gamma=GAMMA)
    if model.active_.size > model.relevance_.size:
        phi = np.column_stack([phi, np.ones(len(X))])
    u = rbf_kernel(X, x_star[None], gamma=GAMMA)[:, 0]
    P = np.column_stack([phi, u])
    alpha = np.append(model.alpha_, 1.0 / tau2)  # k(x*, x*) = 1: alpha_* = 1 / tau^2
    beta = 1.0 / model.noise_variance_
    cov = np.linalg.inv(np.diag(alpha) + beta * P.T @ P)
    mean = beta * cov @ P.T @ y
    row = np.append(model.basis_.transform(x_star[None], columns=model.active_)[0], 1.0)
    return row @ mean, 1.0 / beta + row @ cov @ row


def amplitude(y):
    """tau^2 of regression: the training targets' variance (mean over outputs; k(x, x) = 1)."""
    return np.mean(np.var(np.reshape(y, (len(y), -1)), axis=0))


def test_rvm_star_equals_the_dense_augmented_model(star, gap_data):
    X, y = gap_data
    mean, std = star.predict(X_TEST, return_std=True)
    tau2 = amplitude(y)
    for k, x in enumerate(X_TEST):
        m, v = dense_augmented(star, X, y, x, tau2)
        assert mean[k] == pytest.approx(m, abs=1e-10)
        assert std[k] ** 2 == pytest.approx(v, abs=1e-10)


def test_rvm_star_heals_the_variance_far_from_the_data(gap_data):
    X, y = gap_data
    star = RVR(gamma=GAMMA, predictive="rvm*", bias=False).fit(X, y)
    plain = RVR(gamma=GAMMA, bias=False).fit(X, y)
    far = np.array([[60.0], [1e3]])
    _, sd_star = star.predict(far, return_std=True)
    _, sd_plain = plain.predict(far, return_std=True)
    noise = star.noise_variance_
    # Far away the plain RVM has only the noise left; RVM* has the added function's prior too.
    np.testing.assert_allclose(sd_plain**2, noise, rtol=1e-12)
    np.testing.assert_allclose(sd_star**2, amplitude(y) + noise, rtol=1e-12)
    # In the gap (3 units, one kernel width, from the data on either side) RVM* gets back a
    # good part of the added function's prior variance; at the data the two nearly agree.
    gap, data = np.array([[0.0]]), np.array([[-6.0]])
    gained = (
        star.predict(gap, return_std=True)[1][0] ** 2
        - plain.predict(gap, return_std=True)[1][0] ** 2
    )
    assert gained > 0.4 * amplitude(y)
    assert (
        star.predict(data, return_std=True)[1][0] < 1.1 * plain.predict(data, return_std=True)[1][0]
    )


def test_rvm_star_multi_output_shares_the_variance(gap_data):
    X, y = gap_data
    Y = np.column_stack([y, -2.0 * y + 0.05])
    model = RVR(gamma=GAMMA, predictive="rvm*").fit(X, Y)
    mean, std = model.predict(X_TEST, return_std=True)
    tau2 = amplitude(Y)
    for k, x in enumerate(X_TEST):
        for d in range(2):
            m, v = dense_augmented(model, X, Y[:, d], x, tau2)
            assert mean[k, d] == pytest.approx(m, abs=1e-10)
            assert std[k, d] ** 2 == pytest.approx(v, abs=1e-10)


@pytest.mark.parametrize("predictive", ["rvm", "rvm*"])
def test_return_cov_diagonal_is_return_std_squared(gap_data, predictive):
    X, y = gap_data
    model = RVR(gamma=GAMMA, predictive=predictive).fit(X, y)
    mean, std = model.predict(X_TEST, return_std=True)
    mean_c, cov = model.predict(X_TEST, return_cov=True)
    np.testing.assert_array_equal(mean, mean_c)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-12)
    np.testing.assert_allclose(cov, cov.T)
    assert np.linalg.eigvalsh(cov).min() > -1e-12
    if predictive == "rvm":
        # The plain RVM's joint covariance: Phi* Sigma Phi*^T + I / beta.
        phi = model.basis_.transform(X_TEST, columns=model.active_)
        want = phi @ model.sigma_ @ phi.T + model.noise_variance_ * np.eye(len(X_TEST))
        np.testing.assert_allclose(cov, want, rtol=1e-9, atol=1e-14)
    else:
        # The correlations are those of the model augmented at both points at once (dense).
        pair = np.array([[0.0], [0.5]])
        _, cov2 = model.predict(pair, return_cov=True)
        phi = model.basis_.transform(X, columns=model.active_)
        P = np.column_stack([phi, rbf_kernel(X, pair, gamma=GAMMA)])
        tau2 = amplitude(y)
        beta = 1.0 / model.noise_variance_
        S = np.linalg.inv(np.diag(np.append(model.alpha_, [1 / tau2] * 2)) + beta * P.T @ P)
        rows = np.column_stack(
            [model.basis_.transform(pair, columns=model.active_), rbf_kernel(pair, gamma=GAMMA)]
        )
        joint = rows @ S @ rows.T + np.eye(2) / beta
        corr = joint[0, 1] / np.sqrt(joint[0, 0] * joint[1, 1])
        assert cov2[0, 1] / np.sqrt(cov2[0, 0] * cov2[1, 1]) == pytest.approx(corr, abs=1e-10)
        assert corr > 0.3


def test_sample_y_moments_match_predict(star):
    mean, cov = star.predict(X_TEST, return_cov=True)
    draws = star.sample_y(X_TEST, n_samples=20_000, random_state=3)
    assert draws.shape == (len(X_TEST), 20_000)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(draws.mean(1) - mean) < 4.5 * sd / np.sqrt(20_000))
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.05 * sd.max() ** 2)
    np.testing.assert_array_equal(draws, star.sample_y(X_TEST, 20_000, random_state=3))
    Y = np.column_stack([star.training_.y, star.training_.y])
    multi = RVR(gamma=GAMMA).fit(star.training_.x_train, Y)
    assert multi.sample_y(X_TEST, 3).shape == (len(X_TEST), 2, 3)
    assert multi.predict(X_TEST, return_cov=True)[1].shape == (len(X_TEST), len(X_TEST), 2)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bayes_rvm.inference.SamplingDiagnosticsWarning")
def test_mcmc_predictive_is_the_mixture_over_draws(gap_data):
    X, y = gap_data
    model = RVR(
        gamma=GAMMA,
        inference="mcmc",
        sampler_config={"draws": 150, "tune": 150, "chains": 2},
        random_state=1,
    ).fit(X, y)
    post = model.idata_["posterior"].dataset
    phi = model.basis_.transform(X_TEST, columns=post["basis"].values)
    w = post["w"].values.reshape(-1, phi.shape[1])
    f = w @ phi.T
    sig2 = post["sigma"].values.reshape(-1) ** 2
    mean, std = model.predict(X_TEST, return_std=True)
    np.testing.assert_allclose(mean, f.mean(0), rtol=1e-10)
    # Law of total variance: within-draw noise plus between-draw spread.
    np.testing.assert_allclose(std**2, sig2.mean() + f.var(0), rtol=1e-10)
    _, cov = model.predict(X_TEST, return_cov=True)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-12)
    np.testing.assert_allclose(cov, np.cov(f.T, bias=True) + sig2.mean() * np.eye(len(X_TEST)))
    draws = model.sample_y(X_TEST, n_samples=20_000, random_state=0)
    assert np.all(np.abs(draws.mean(1) - mean) < 4.5 * std / np.sqrt(20_000))
    np.testing.assert_allclose(draws.std(1), std, rtol=0.03)
    with pytest.raises(ValueError, match="type-II"):
        RVC(inference="mcmc", predictive="rvm*").fit(X, (y > 0).astype(int))


def dense_augmented_draw(phi, u, row, y, alpha, beta):
    """Mean and variance of new targets in the model with an explicit extra column, one draw.

    ``phi`` the training design, ``u`` the added function at the training inputs and ``row``
    the test point's design row with the added function's value last; the added weight's prior
    precision is 1 / var(y), as for a type-II fit (k(x, x) = 1).
    """
    tau2 = amplitude(y)
    P = np.column_stack([phi, u])
    cov = np.linalg.inv(np.diag(np.append(alpha, 1.0 / tau2)) + beta * P.T @ P)
    mean = beta * cov @ P.T @ y
    return row @ mean, 1.0 / beta + row @ cov @ row


def test_rvm_star_draws_equal_dense_augmented_models(gap_data):
    """Hyperparameter draws by hand, alphas 12 orders apart: blocked, batched = dense per draw."""
    from bayes_rvm.posterior.predictive import DrawPosteriors, rvm_star_draws

    X, y = gap_data
    rng = np.random.default_rng(0)
    cols = np.arange(0, 80, 8)
    phi = rbf_kernel(X, X[cols], gamma=GAMMA)
    alpha = np.exp(rng.uniform(-3.0, 3.0, (7, cols.size)))
    alpha[:, ::3] = 1e9  # weights pinned at zero beside free ones
    beta = np.exp(rng.uniform(3.0, 5.0, 7))
    U = rbf_kernel(X, X_TEST, gamma=GAMMA)
    rows = np.column_stack([rbf_kernel(X_TEST, X[cols], gamma=GAMMA), np.ones(len(X_TEST))])
    args = (phi, y, alpha, beta, rows[:, :-1], U.T, np.ones(len(X_TEST)), amplitude(y))
    mean, var = rvm_star_draws(*args)
    mean_b, var_b = rvm_star_draws(*args, max_floats=1)  # one draw per block
    np.testing.assert_allclose(mean_b, mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(var_b, var, rtol=1e-12)
    # every draw's posterior factored once beforehand (as a predictor keeps them across blocks
    # of rows), read block by block
    kept = DrawPosteriors.from_draws(phi.T @ phi, phi.T @ y[:, None], alpha, beta)
    for max_floats in (1, 4_000_000):
        mean_k, var_k = rvm_star_draws(*args, max_floats=max_floats, posteriors=kept)
        np.testing.assert_allclose(mean_k, mean, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(var_k, var, rtol=1e-12)
    for s in range(beta.size):
        for k in range(len(X_TEST)):
            m, v = dense_augmented_draw(phi, U[:, k], rows[k], y, alpha[s], beta[s])
            assert mean[s, k, 0] == pytest.approx(m, abs=1e-10)
            assert var[s, k] == pytest.approx(v, rel=1e-10)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::bayes_rvm.inference.SamplingDiagnosticsWarning")
def test_mcmc_rvm_star_is_the_mixture_of_dense_augmented_models_per_draw(gap_data):
    X, y = gap_data
    model = RVR(
        gamma=GAMMA,
        inference="mcmc",
        predictive="rvm*",
        sampler_config={"mcmc_basis": "relevant", "draws": 60, "tune": 150, "chains": 2},
        random_state=2,
    ).fit(X, y)
    post = model.idata_["posterior"].dataset
    cols = post["basis"].values
    alpha = post["alpha"].transpose("chain", "draw", "basis").values.reshape(-1, cols.size)
    beta = post["sigma"].values.reshape(-1) ** -2.0
    phi = model.basis_.transform(X, columns=cols)
    U = rbf_kernel(X, X_TEST, gamma=GAMMA)
    rows = np.column_stack([model.basis_.transform(X_TEST, columns=cols), np.ones(len(X_TEST))])
    m = np.empty((beta.size, len(X_TEST)))
    v = np.empty_like(m)
    for s in range(beta.size):
        for k in range(len(X_TEST)):
            m[s, k], v[s, k] = dense_augmented_draw(phi, U[:, k], rows[k], y, alpha[s], beta[s])
    mean, std = model.predict(X_TEST, return_std=True)
    np.testing.assert_allclose(mean, m.mean(0), rtol=1e-9, atol=1e-12)
    # Law of total variance over the draws' Gaussians.
    np.testing.assert_allclose(std**2, v.mean(0) + m.var(0), rtol=1e-9)
    # X_TEST holds gap and far points (x = 40): there each draw's dense variance carries the
    # added prior tau^2 = var(y), which the plain mixture lacks.
    sd_plain = model.set_params(predictive="rvm").predict(X_TEST, return_std=True)[1]
    model.set_params(predictive="rvm*")
    assert std[-1] ** 2 - sd_plain[-1] ** 2 == pytest.approx(amplitude(y), rel=0.25)
    # The joint covariance: its diagonal is return_std squared, and it is a covariance.
    _, cov = model.predict(X_TEST, return_cov=True)
    np.testing.assert_allclose(np.diag(cov), std**2, rtol=1e-10)
    np.testing.assert_allclose(cov, cov.T, atol=1e-14)
    assert np.linalg.eigvalsh(cov).min() > -1e-12
    # Exact draws from the mixture: a draw's Gaussian per sample.
    draws = model.sample_y(X_TEST, n_samples=20_000, random_state=0)
    assert np.all(np.abs(draws.mean(1) - mean) < 4.5 * std / np.sqrt(20_000))
    np.testing.assert_allclose(draws.std(1), std, rtol=0.03)
    np.testing.assert_allclose(np.cov(draws), cov, atol=0.05 * std.max() ** 2)


def test_predictive_round_trips_through_save_and_load(star, tmp_path):
    loaded = load_model(save_model(star, tmp_path / "star.zarr"))
    assert loaded.predictive == "rvm*"
    for a, b in zip(
        star.predict(X_TEST, return_std=True), loaded.predict(X_TEST, return_std=True), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-13)  # loaded arrays may change BLAS paths


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"predictive": "gp"}, "predictive"),
        ({"predictive": "rvm*", "kernel": "precomputed"}, "precomputed"),
    ],
)
def test_bad_predictive_options(gap_data, params, match):
    X, y = gap_data
    Xk = rbf_kernel(X, gamma=GAMMA) if params.get("kernel") == "precomputed" else X
    with pytest.raises(ValueError, match=match):
        RVR(**params).fit(Xk, y)
    with pytest.raises(ValueError, match=match):
        RVC(**params).fit(Xk, (y > 0).astype(int))


def test_return_std_and_return_cov_are_exclusive(star):
    with pytest.raises(RuntimeError, match="At most one"):
        star.predict(X_TEST, return_std=True, return_cov=True)


# ---- classification -------------------------------------------------------------------------
def dense_laplace(clf, fit, pos, target, x_star, gamma):
    """Latent moments at ``x_star`` of the Laplace posterior augmented by k(., x*) (dense)."""
    X = clf.training_.x_train
    phi = clf.training_.phi_active[:, pos]
    K, C = fit.mean.shape
    tau2 = np.mean(np.sum(phi**2 / fit.alpha[fit.active], axis=1))
    u = rbf_kernel(X, x_star[None], gamma=gamma)[:, 0]
    P2 = np.column_stack([phi, u])
    a = np.append(fit.alpha[fit.active], 1.0 / tau2)
    row = np.append(clf.basis_.transform(x_star[None], columns=clf.active_)[0][pos], 1.0)
    eta = phi @ fit.mean
    if C == 1:
        p = expit(eta[:, 0])
        H = np.diag(a) + P2.T @ (P2 * (p * (1 - p))[:, None])
        S = np.linalg.inv(H)
        # One Newton step from the old mode (w_* = 0), where only w_*'s gradient is non-zero.
        step = S[:, -1] * (u @ (target - p))
        return [row @ (np.append(fit.mean[:, 0], 0.0) + step)], [row @ S @ row]
    Pm = softmax(eta, axis=1)
    T = np.eye(C)[target]
    H = np.diag(np.tile(a, C))
    for n in range(len(X)):
        H += np.kron(np.diag(Pm[n]) - np.outer(Pm[n], Pm[n]), np.outer(P2[n], P2[n]))
    S = np.linalg.inv(H)
    grad = np.zeros((K + 1) * C)
    grad[K :: K + 1] = u @ (T - Pm)
    w = np.vstack([fit.mean, np.zeros((1, C))]).T.reshape(-1) + S @ grad
    blk = [slice(c * (K + 1), (c + 1) * (K + 1)) for c in range(C)]
    return [row @ w[b] for b in blk], [row @ S[b, b] @ row for b in blk]


@pytest.mark.parametrize("kind", ["binary", "multinomial", "ovr"])
def test_rvc_rvm_star_latent_equals_the_dense_augmented_laplace(kind):
    if kind == "binary":
        X, y = make_moons(80, noise=0.25, random_state=0)
        gamma = 2.0
    else:
        X, y = make_blobs(90, centers=3, cluster_std=2.5, random_state=1)
        gamma = 0.2
    multi = {"multi_class": kind} if kind != "binary" else {}
    clf = RVC(gamma=gamma, predictive="rvm*", **multi).fit(X, y)
    X_star = np.array([[0.5, 0.2], [3.0, 3.0], [60.0, -60.0]])
    mean, var = clf.predictor_.latent(Rows(X_star, clf.basis_, clf.training_.x_train))
    ovr = isinstance(clf.fit_, OneVsRestFit)
    parts = clf.fit_.parts() if ovr else ((clf.fit_, np.arange(clf.active_.size)),)
    for c, (fit, pos) in enumerate(parts):
        yi = clf.training_.y_index
        target = {"ovr": (yi == c) * 1.0, "multinomial": yi, "binary": yi * 1.0}[kind]
        for k, x in enumerate(X_star):
            m, v = dense_laplace(clf, fit, pos, target, x, gamma)
            cols = slice(c, c + 1) if fit.mean.shape[1] == 1 else slice(None)
            np.testing.assert_allclose(mean[k, cols], m, rtol=1e-8, atol=1e-10)
            np.testing.assert_allclose(var[k, cols], v, rtol=1e-8, atol=1e-10)


def test_rvc_rvm_star_latent_variance_far_from_the_data():
    X, y = make_moons(120, noise=0.25, random_state=0)
    # The Laplace latent moments (moderated='probit' predicts from them, not importance draws).
    plain = RVC(gamma=2.0, moderated="probit").fit(X, y)
    star = RVC(gamma=2.0, predictive="rvm*").fit(X, y)
    far = np.array([[1.0, 40.0]])
    (m0,), (v0,) = plain.predictor_.latent(Rows(far, plain.basis_))
    (m1,), (v1,) = star.predictor_.latent(Rows(far, star.basis_, star.training_.x_train))
    phi = plain.basis_.transform(X, columns=plain.active_)
    tau2 = np.mean(np.sum(phi**2 / plain.alpha_, axis=1))
    # Far away the added function has its full prior variance and no data to move its mean.
    assert v1[0] - v0[0] == pytest.approx(tau2, rel=1e-10)
    assert m1[0] == pytest.approx(m0[0], abs=1e-12)
    # At the training inputs the augmentation barely moves the decisions.
    assert np.mean(plain.predict(X) == star.predict(X)) >= 0.95


# ---- calibration ----------------------------------------------------------------------------
def test_calibration_of_a_true_gaussian_predictive():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=20_000)
    std = rng.uniform(0.5, 2.0, size=20_000)
    y = mean + std * rng.standard_normal(20_000)
    pit = pit_gaussian(y, mean, std)
    assert stats.kstest(pit, "uniform").pvalue > 1e-3
    levels = np.array([0.5, 0.9])
    cover = interval_coverage(pit, levels)
    # Direct count of the central intervals mean +- z std.
    z = stats.norm.ppf(0.5 + levels / 2)
    want = [np.mean(np.abs(y - mean) <= zi * std) for zi in z]
    np.testing.assert_allclose(cover, want)
    np.testing.assert_allclose(cover, levels, atol=0.015)
    np.testing.assert_allclose(
        gaussian_nlpd(y[:5], mean[:5], std[:5]), -stats.norm.logpdf(y[:5], mean[:5], std[:5])
    )
    # Too narrow an interval under-covers.
    assert interval_coverage(pit_gaussian(y, mean, 0.5 * std), 0.9) < 0.65


def test_mixture_calibration_matches_quadrature():
    rng = np.random.default_rng(1)
    f = rng.normal(size=(300, 4))
    sigma = rng.uniform(0.2, 1.0, 300)
    y = np.array([0.3, -1.0, 2.0, 0.0])
    dens = np.mean(stats.norm.pdf(y[None], f, sigma[:, None]), axis=0)
    np.testing.assert_allclose(mixture_nlpd(y, f, sigma), -np.log(dens), rtol=1e-12)
    cdf = np.mean(stats.norm.cdf(y[None], f, sigma[:, None]), axis=0)
    np.testing.assert_allclose(pit_mixture(y, f, sigma), cdf, rtol=1e-12)


def test_reliability_curve_is_sklearns_with_counts():
    rng = np.random.default_rng(2)
    p = rng.uniform(size=5000)
    y = (rng.uniform(size=5000) < p).astype(int)
    for strategy in ("uniform", "quantile"):
        curve = reliability_curve(y, p, n_bins=8, strategy=strategy)
        want = calibration_curve(y, p, n_bins=8, strategy=strategy)
        np.testing.assert_allclose(curve.prob_true, want[0])
        np.testing.assert_allclose(curve.prob_pred, want[1])
        assert curve.counts.sum() == 5000
        assert curve.ece < 0.03
    assert reliability_curve(y, p**3).ece > 0.1


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: pit_gaussian([0.0, 1.0], [0.0, 0.0], [1.0, 0.0]), "std must be positive"),
        (lambda: gaussian_nlpd([0.0], [0.0, 1.0], [1.0, 1.0]), "y has 1 values"),
        (lambda: interval_coverage([0.2, 1.3]), r"values in \[0, 1\]"),
        (lambda: interval_coverage([0.2], levels=[1.0]), r"levels must lie in \(0, 1\)"),
        (lambda: mixture_nlpd([0.0], np.zeros((3, 1)), [1.0, 1.0]), "f must be"),
        (lambda: pit_gaussian([np.nan], [0.0], [1.0]), "NaN"),
    ],
)
def test_calibration_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_calibration_plots_draw_the_computed_numbers():
    import matplotlib

    matplotlib.use("Agg")
    from bayes_rvm.plots import plot_coverage, plot_pit, plot_reliability

    rng = np.random.default_rng(3)
    pit = rng.uniform(size=400)
    levels = np.array([0.2, 0.5, 0.9])
    ax = plot_coverage({"m": pit}, levels=levels)
    np.testing.assert_allclose(ax.lines[1].get_ydata(), interval_coverage(pit, levels))
    ax = plot_pit(pit, bins=8)
    heights = [p.get_height() for p in ax.patches[:8]]  # the bars; the band comes after
    np.testing.assert_allclose(heights, np.histogram(pit, 8, (0, 1), density=True)[0])
    y = (rng.uniform(size=400) < pit).astype(int)
    ax = plot_reliability(y, {"m": pit}, n_bins=5)
    want = calibration_curve(y, pit, n_bins=5)
    np.testing.assert_allclose(ax.lines[1].get_ydata(), want[0])
    np.testing.assert_allclose(ax.lines[1].get_xdata(), want[1])
