"""Degenerate data answered as a statistician would: the smallest problems, flat evidence.

Truths: sample means and closed-form likelihoods (SciPy's densities), one example per class.
"""

import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.datasets import make_sinc
from bayes_rvm.estimators.classifier import RVC
from bayes_rvm.estimators.cv import RVRCV
from bayes_rvm.estimators.regressor import RVR
from bayes_rvm.evidence import Problem
from bayes_rvm.evidence.options import BETA_MAX


def test_rvr_takes_a_free_bias_which_is_never_pruned():
    # RVR refused bias="free" where RVC took it.
    X, y = make_sinc(30, random_state=0)
    ard, free = RVR(gamma=1.0).fit(X, y), RVR(gamma=1.0, bias="free").fit(X, y)
    bias = 30  # the bias is the column after the 30 centres
    assert bias not in ard.active_ and ard.intercept_ == 0.0
    assert bias in free.active_ and free.intercept_ != 0.0
    # Far from every centre only the intercept is left.
    assert free.predict([[1e3]])[0] == pytest.approx(free.intercept_, abs=1e-12)
    # The fit is as good as the ARD bias's on the same data.
    assert np.mean((free.predict(X) - y) ** 2) < 1.2 * np.mean((ard.predict(X) - y) ** 2)
    # The cross-validated estimator checks the same parameter.
    assert RVRCV(bias="free").get_params()["bias"] == "free"
    with pytest.raises(ValueError, match="'bias' parameter of RVR"):
        RVR(bias="fixed").fit(X, y)


@pytest.mark.parametrize("params", [{}, {"gamma": 1.0}, {"gamma": 1.0, "solver": "mackay"}])
def test_two_identical_inputs_with_targets_0_and_1_predict_their_mean(params):
    # The evidence of every column sat on its pruning boundary: predictions of 1.4e-8.
    X, y = np.zeros((2, 1)), np.array([0.0, 1.0])
    est = RVR(**params).fit(X, y)
    mean, sd = est.predict(X[:1], return_std=True)
    assert mean[0] == pytest.approx(0.5, abs=1e-6)
    assert sd[0] >= 0.5  # at least the spread of the two targets about their mean
    assert "bias never pruned" in est.fit_.reason


@pytest.mark.parametrize("solver", ["sequential", "mackay"])
def test_all_zero_targets_keep_a_positive_noise_floor(solver):
    # The sequential engine's noise ceiling overflowed: a predictive sd of 8.8e-78.
    X = np.linspace(0.0, 1.0, 10)[:, None]
    est = RVR(gamma=1.0, solver=solver).fit(X, np.zeros(10))
    mean, sd = est.predict(X, return_std=True)
    np.testing.assert_array_equal(mean, 0.0)
    # All-zero targets are divided by 1: the noise variance is at its floor 1 / BETA_MAX.
    assert est.noise_variance_ == pytest.approx(1.0 / BETA_MAX, rel=1e-6)
    assert np.all(sd >= 1e-6) and np.all(sd < 1.1e-6)


@pytest.mark.parametrize("gamma", ["evidence_shared", 1.0])
def test_rvc_on_one_example_of_each_class_predicts_each_its_class(gamma):
    # Both points were given the first class (probabilities 0.62 / 0.56 at gamma = 1).
    X = np.array([[0.0], [1.0]])
    clf = RVC(gamma=gamma).fit(X, ["a", "b"])
    assert list(clf.predict(X)) == ["a", "b"]
    p = clf.predict_proba(X)[:, 1]
    assert p[0] < 0.5 < p[1]


def test_the_empty_models_log_evidence_is_the_likelihood_of_no_weights():
    rng = np.random.default_rng(0)
    t = rng.normal(0.3, 1.0, size=25)
    gauss = Problem.regression(None, t)
    sigma2 = np.mean(gauss.targets**2)  # maximum-likelihood noise of the scaled targets
    want = stats.norm.logpdf(gauss.targets[:, 0], 0.0, np.sqrt(sigma2)).sum()
    assert gauss.empty_log_evidence() == pytest.approx(want, rel=1e-12)
    fixed = Problem.regression(None, t, noise_variance=0.5)
    scale = gauss.scale
    want = stats.norm.logpdf(t / scale, 0.0, np.sqrt(0.5) / scale).sum()
    assert fixed.empty_log_evidence() == pytest.approx(want, rel=1e-12)
    labels = rng.integers(0, 3, size=25)
    assert Problem.classification(None, labels, 3).empty_log_evidence() == pytest.approx(
        -25 * np.log(3.0)
    )
    assert Problem.classification(None, labels % 2, 2).empty_log_evidence() == pytest.approx(
        -25 * np.log(2.0)
    )
    counts = rng.poisson(2.0, size=25)
    assert Problem.counts(None, counts).empty_log_evidence() == pytest.approx(
        stats.poisson.logpmf(counts, 1.0).sum()
    )


def test_fits_with_signal_are_not_refitted():
    X, y = make_sinc(30, random_state=0)
    assert "bias never pruned" not in RVR(gamma=1.0).fit(X, y).fit_.reason
    clf = RVC(gamma=1.0).fit(X, y > 0.2)
    assert "bias never pruned" not in clf.fit_.reason


def test_a_fit_stopped_by_max_iter_warns_once():
    # It warned twice: the unconverged fit is below the empty model, so it is refitted with the
    # bias free (keeping the data's level), at the same max_iter, and that refit warned again.
    X, y = make_sinc(200, noise=0.1, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = RVR(max_iter=1).fit(X, y)
    assert [type(w.message) for w in caught] == [ConvergenceWarning]
    assert not est.converged_ and "bias never pruned" in est.fit_.reason
