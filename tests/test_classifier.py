"""RVC: scikit-learn conformance, the published figures of Tipping (2001), multiclass behaviour."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from scipy.special import expit
from sklearn.datasets import load_digits, make_moons
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayes_rvm.datasets import load_pima, load_ripley
from bayes_rvm.estimators.classifier import RVC


def _load(loader):
    try:
        return loader()
    except FileNotFoundError as err:
        pytest.skip(str(err))


# The defaults (the evidence's width search) and one-vs-rest at scikit-learn's own width rule:
# the width search takes 90% of each check's time and is the same code under both.
@parametrize_with_checks([RVC(), RVC(multi_class="ovr", gamma="scale")])
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ripley_100_points_matches_tipping(seed):
    """Tipping (2001): 9.3% test error with 4 relevance vectors (Gaussian kernel, width 0.5)."""
    Xtr, ytr, Xte, yte = _load(load_ripley)
    idx = np.random.default_rng(seed).permutation(len(ytr))[:100]
    clf = RVC(gamma=1 / 0.5**2).fit(Xtr[idx], ytr[idx])
    err = 1 - clf.score(Xte, yte)
    assert err <= 0.093 + 0.015
    assert clf.n_relevance_vectors_ <= 8
    assert clf.converged_


def test_ripley_all_250_points_no_worse():
    Xtr, ytr, Xte, yte = _load(load_ripley)
    clf = RVC(gamma=4.0).fit(Xtr, ytr)
    assert 1 - clf.score(Xte, yte) <= 0.093 + 0.015
    assert clf.n_relevance_vectors_ <= 8


def test_pima_matches_tipping():
    """Tipping (2001): 19.6% on Ripley's 200/332 split. The width (gamma = 0.03 on standardised
    inputs) is the one 5-fold cross-validated log loss picks on the training set."""
    Xtr, ytr, Xte, yte = _load(load_pima)
    sc = StandardScaler().fit(Xtr)
    clf = RVC(gamma=0.03).fit(sc.transform(Xtr), ytr)
    assert 1 - clf.score(sc.transform(Xte), yte) <= 0.196 + 0.02
    assert clf.n_relevance_vectors_ <= 10


@pytest.fixture(scope="module")
def ripley_fit():
    Xtr, ytr, Xte, _ = _load(load_ripley)
    idx = np.random.default_rng(0).permutation(len(ytr))[:100]
    return RVC(gamma=4.0).fit(Xtr[idx], ytr[idx]), Xte


def test_moderated_probabilities_match_monte_carlo(ripley_fit):
    clf, Xte = ripley_fit
    # The probit approximation of the Laplace Gaussian's average (the default may instead
    # importance-sample the exact posterior: tests/test_importance.py)
    clf = copy.deepcopy(clf).set_params(moderated="probit")
    p = clf.predict_proba(Xte)[:, 1]
    phi = clf.basis_.transform(Xte, columns=clf.active_)
    rng = np.random.default_rng(0)
    draws = rng.multivariate_normal(clf.fit_.mean[:, 0], clf.fit_.covariance, size=100_000)
    # the average over the draws in blocks of 10,000: one (rows x draws) array of all 10^5 draws
    # (0.8 GB) costs five times the arithmetic in memory traffic
    mc = sum(expit(phi @ block.T).sum(axis=1) for block in np.split(draws, 10)) / len(draws)
    np.testing.assert_allclose(p, mc, atol=1e-2)
    # Without moderation the probabilities are the sigmoid of the mean: more extreme, and off.
    clf_raw = copy.deepcopy(clf).set_params(moderated=False)
    raw = clf_raw.predict_proba(Xte)[:, 1]
    assert np.all(np.abs(raw - 0.5) >= np.abs(p - 0.5) - 1e-12)
    assert np.max(np.abs(raw - mc)) > 1e-2


def test_decision_function_is_the_log_odds_of_predict_proba(ripley_fit):
    clf, Xte = ripley_fit
    np.testing.assert_allclose(expit(clf.decision_function(Xte)), clf.predict_proba(Xte)[:, 1])
    expected = clf.classes_[(clf.decision_function(Xte) > 0).astype(int)]
    np.testing.assert_array_equal(clf.predict(Xte), expected)


def test_fitted_attributes_in_original_units(ripley_fit):
    clf, Xte = ripley_fit
    phi = clf.basis_.transform(Xte, columns=clf.relevance_)
    latent = phi @ clf.coef_ + clf.intercept_
    mean, _ = clf.fit_.predict(clf.basis_.transform(Xte, columns=clf.active_))
    np.testing.assert_allclose(latent, mean[:, 0])
    assert clf.relevance_vectors_.shape == (clf.n_relevance_vectors_, 2)
    assert clf.alpha_.shape == clf.active_.shape
    assert np.all(np.isfinite(clf.alpha_))


def test_any_label_type():
    Xtr = np.random.default_rng(0).normal(size=(60, 2))
    ytr = np.where(Xtr[:, 0] + 0.3 * Xtr[:, 1] > 0, "yes", "no")
    clf = RVC(gamma=0.5).fit(Xtr, ytr)
    assert list(clf.classes_) == ["no", "yes"]
    assert set(clf.predict(Xtr)) <= {"no", "yes"}
    assert clf.score(Xtr, ytr) > 0.9


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    keep = y < 5  # five classes keep the test quick
    return train_test_split(X[keep], y[keep], train_size=150, random_state=0, stratify=y[keep])


@pytest.mark.parametrize("multi_class", ["multinomial", "ovr"])
def test_multiclass_digits(digits, multi_class):
    Xtr, Xte, ytr, yte = digits
    clf = RVC(gamma=0.05, multi_class=multi_class).fit(Xtr, ytr)
    P = clf.predict_proba(Xte)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    assert P.shape == (len(Xte), 5)
    assert clf.score(Xte, yte) > 0.93
    assert clf.coef_.shape == (clf.n_relevance_vectors_, 5)
    np.testing.assert_array_equal(clf.predict(Xte), clf.classes_[P.argmax(axis=1)])
    if multi_class == "multinomial":
        # One relevance set for the whole classifier: alphas are shared by the classes.
        assert clf.alpha_.shape == clf.active_.shape
        K = clf.active_.size
        assert clf.fit_.chol.shape == (5 * K, 5 * K)
    else:
        assert clf.alpha_.shape == (clf.active_.size, 5)


def test_multinomial_is_sparser_than_ovr(digits):
    Xtr, _, ytr, _ = digits
    multi = RVC(gamma=0.05, multi_class="multinomial").fit(Xtr, ytr)
    ovr = RVC(gamma=0.05, multi_class="ovr").fit(Xtr, ytr)
    assert multi.n_relevance_vectors_ < ovr.n_relevance_vectors_


def test_parameter_validation():
    X = np.random.default_rng(0).normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(int)
    for bad in (
        {"multi_class": "crammer"},
        {"solver": "em"},
        {"moderated": "yes"},
        {"prior_params": {"nu": -1}},
    ):
        with pytest.raises(ValueError):
            RVC(**bad).fit(X, y)
    with pytest.raises(ValueError, match=r"two classes; the data contain only class 0\.0\.$"):
        RVC().fit(X, np.zeros(20))
    with pytest.raises(ValueError, match=r"two classes; the data contain only class 'a'\.$"):
        RVC().fit(X, np.array(["a"] * 20, dtype=object))  # text labels: Python strings


@pytest.mark.slow  # importing PyMC and compiling the logp take a minute on 2 busy cores
@pytest.mark.parametrize("n_classes", [2, 3])
def test_pymc_classification_model_logp_matches_numpy(n_classes):
    """The PyMC model's log likelihood at a point equals the one written out with NumPy."""
    from scipy.special import log_softmax

    from bayes_rvm.models.graphs import rvm_classification_model

    rng = np.random.default_rng(0)
    Phi = rng.normal(size=(30, 4))
    y = rng.integers(0, n_classes, 30)
    model = rvm_classification_model(Phi, y, prior="student_t", nu=3.0)
    shape = (4,) if n_classes == 2 else (4, n_classes)
    z = rng.normal(size=shape)
    alpha = rng.uniform(0.5, 2.0, size=4)
    point = {"z": z, "alpha_rel_log__": np.log(alpha)}
    w = z / np.sqrt(alpha)[:, None] if n_classes > 2 else z / np.sqrt(alpha)
    eta = Phi @ w
    if n_classes == 2:
        expected = np.sum(y * eta - np.logaddexp(0, eta))
    else:
        expected = np.sum(log_softmax(eta, axis=1)[np.arange(30), y])
    got = model.compile_logp(vars=[model["y"]])(point)
    assert got == pytest.approx(expected, rel=1e-10)


@pytest.mark.slow
def test_pymc_classification_model_samples_and_agrees_with_type2():
    """MCMC on the relevance vectors of a Ripley fit: converged chains, similar predictions."""
    import pymc as pm

    from bayes_rvm.models.graphs import rvm_classification_model

    Xtr, ytr, Xte, _ = _load(load_ripley)
    idx = np.random.default_rng(0).permutation(len(ytr))[:100]
    clf = RVC(gamma=4.0).fit(Xtr[idx], ytr[idx])
    Phi = clf.basis_.transform(Xtr[idx], columns=clf.active_)
    model = rvm_classification_model(Phi, ytr[idx], prior="student_t", nu=4.0, s=10.0)
    with model:
        idata = pm.sample(draws=500, tune=500, chains=2, random_seed=1, progressbar=False)
    import arviz as az

    rhat = az.rhat(idata)["w"].values  # ArviZ 1.x: a DataTree rooted at the posterior group
    assert np.all(rhat < 1.05)
    w = idata["posterior"]["w"].values.reshape(-1, Phi.shape[1])
    phi_te = clf.basis_.transform(Xte, columns=clf.active_)
    p_mcmc = expit(phi_te @ w.T).mean(axis=1)
    agree = np.mean((p_mcmc > 0.5) == (clf.predict_proba(Xte)[:, 1] > 0.5))
    assert agree > 0.95


def test_rvc_says_variational_inference_is_rvrs():
    from sklearn.utils._param_validation import InvalidParameterError

    X, y = make_moons(30, noise=0.2, random_state=0)
    with pytest.raises(InvalidParameterError, match="variational inference is RVR's"):
        RVC(inference="vi").fit(X, y)


def test_a_given_width_that_leaves_no_basis_function_warns():
    # gamma = 1e-4 on make_moons kept no basis function and predicted 1/2 everywhere, silently,
    # 43 nats below the two relevance vectors of gamma = 1e-3.
    X, y = make_moons(150, noise=0.25, random_state=0)
    with pytest.warns(UserWarning, match=r"RVC kept no basis function at gamma=0.0001"):
        wide = RVC(gamma=1e-4).fit(X, y)
    assert wide.relevance_.size == 0 and wide.score(X, y) == 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        narrower = RVC(gamma=1e-3).fit(X, y)
    assert narrower.relevance_.size == 2 and narrower.log_evidence_ > wide.log_evidence_ + 40
    # once: not again in the refits of its leave-one-out (it warned in each)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wide.refit_loo(n_folds=5)
    assert not [w for w in caught if "kept no basis function" in str(w.message)]
    # not for a kernel without a width, where noise labels leave nothing
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RVC(kernel="linear").fit(rng.normal(size=(80, 3)), rng.integers(0, 2, 80))
