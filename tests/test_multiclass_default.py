"""The many-class default of RVC (``multi_class="auto"``) against independent fits.

- the rule depends on the shape of the data alone (issue 31 item 4: the same data, the same model);
- above the threshold it is one-vs-rest, whose parts equal C binary RVCs fitted one by one;
- below it the softmax model, whose Laplace mode at fixed alphas is scikit-learn's multinomial
  logistic regression on the same basis with the L2 penalty ``alpha / 2 |W|^2``.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.metrics.pairwise import rbf_kernel

import bayes_rvm.estimators.classifier as classifier
from bayes_rvm.estimators.classifier import MULTINOMIAL_MAX_CELLS, RVC, one_vs_rest
from bayes_rvm.evidence.mode import posterior_mode


@pytest.fixture(scope="module")
def digits():
    """Ten classes of scikit-learn's 8 x 8 digits, 12 of each (the many-class case, small)."""
    X, y = load_digits(return_X_y=True)
    keep = np.concatenate([np.flatnonzero(y == c)[:12] for c in range(10)])
    return X[keep] / 16.0, y[keep]


def test_auto_rule_depends_on_the_shape_only():
    cells = MULTINOMIAL_MAX_CELLS
    assert not one_vs_rest("auto", cells // 10, 10)  # at the threshold: softmax
    assert one_vs_rest("auto", cells // 10 + 1, 10)
    assert one_vs_rest("auto", 7291, 10)  # USPS
    assert not one_vs_rest("auto", 150, 3)  # iris
    assert not one_vs_rest("auto", 10**6, 2)  # two classes: one binary model
    assert not one_vs_rest("auto", 7291, 10, inference="mcmc")  # MCMC samples the softmax
    assert not one_vs_rest("multinomial", 7291, 10)
    assert one_vs_rest("ovr", 30, 3)


def test_auto_above_the_threshold_is_c_binary_fits(digits, monkeypatch):
    """Past the threshold the default fits one-vs-rest: each class's part is the binary RVC of
    that class against the rest, fitted on its own (same basis, same engine)."""
    X, y = digits
    monkeypatch.setattr(classifier, "MULTINOMIAL_MAX_CELLS", X.shape[0] * 10 - 1)
    clf = RVC(gamma=0.05, moderated=False).fit(X, y)
    assert clf.multi_class_ == "ovr"
    scores = clf.decision_function(X)
    for c in range(10):
        binary = RVC(gamma=0.05, moderated=False).fit(X, (y == c).astype(int))
        part = clf.fit_.fits[c]
        np.testing.assert_array_equal(part.active, binary.active_)
        np.testing.assert_allclose(scores[:, c], binary.decision_function(X), rtol=1e-6, atol=1e-8)
    # Below it, the same data give the softmax model.
    monkeypatch.setattr(classifier, "MULTINOMIAL_MAX_CELLS", X.shape[0] * 10)
    assert RVC(gamma=0.05).fit(X, y).multi_class_ == "multinomial"


def test_softmax_mode_is_multinomial_logistic_regression(digits):
    """The softmax Laplace mode at a fixed shared alpha maximises
    ``sum_n log softmax(Phi W)_{n, t_n} - alpha / 2 |W|^2``, which is scikit-learn's multinomial
    logistic regression with ``C = 1 / alpha`` and no intercept (a second, independent solver)."""
    X, y = digits
    Phi = rbf_kernel(X, X, gamma=0.05)
    alpha = 0.5
    T = np.eye(10)[y]
    post = posterior_mode(Phi, T, np.full(Phi.shape[1], alpha), likelihood="softmax")
    lr = LogisticRegression(C=1.0 / alpha, fit_intercept=False, tol=1e-12, max_iter=10_000)
    lr.fit(Phi, y)
    np.testing.assert_allclose(post.mean.T, lr.coef_, atol=1e-5)
    # A softmax gradient vanishes at the mode; not a trivial one: the weights are far from zero.
    assert post.converged and np.max(np.abs(post.mean)) > 0.1
