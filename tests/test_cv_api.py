"""RVRCV and RVCCV offer what RVR and RVC offer, through the estimator refitted at the chosen
width (as scikit-learn's search CVs do), and pass scikit-learn's estimator checks."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks
from threadpoolctl import threadpool_limits

from bayes_rvm import RVC, RVCCV, RVR, RVRCV
from bayes_rvm.datasets import make_sinc

WIDTHS = [4.0, 1.0]


@pytest.fixture(autouse=True, scope="module")
def _single_threaded_blas():
    with threadpool_limits(limits=1):
        yield


@pytest.mark.slow
@parametrize_with_checks([RVRCV(widths=WIDTHS, cv=3), RVCCV(widths=WIDTHS, cv=3)])
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_rvrcv_predicts_as_the_plain_estimator_at_its_width():
    X, y = make_sinc(60, noise=0.1, random_state=0)
    cv = RVRCV(widths=WIDTHS, cv=3, random_state=0).fit(X, y)
    # Independent truth: a plain RVR fitted at the chosen width.
    plain = RVR(gamma=cv.gamma_, random_state=0).fit(X, y)
    Xt = np.linspace(-10, 10, 17)[:, None]
    for got, want in zip(
        cv.predict(Xt, return_std=True), plain.predict(Xt, return_std=True), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        cv.predict(Xt, return_cov=True)[1], plain.predict(Xt, return_cov=True)[1]
    )
    np.testing.assert_array_equal(
        cv.sample_y(Xt, 3, random_state=1), plain.sample_y(Xt, 3, random_state=1)
    )
    assert cv.idata_ is cv.estimator_.idata_
    assert cv.sample_posterior_predictive(random_state=0) is cv.idata_
    assert "posterior_predictive" in cv.idata_.children
    assert cv.model_ is cv.estimator_.model_
    assert cv.score(X, y) == pytest.approx(plain.score(X, y))


def test_rvccv_predicts_as_the_plain_estimator_at_its_width():
    X, y = make_sinc(60, noise=0.1, random_state=0)
    labels = np.digitize(y, [0.0, 0.4])
    cv = RVCCV(widths=WIDTHS, cv=3, random_state=0).fit(X, labels)
    plain = RVC(gamma=cv.gamma_).fit(X, labels)
    Xt = np.linspace(-10, 10, 17)[:, None]
    for method in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        np.testing.assert_allclose(getattr(cv, method)(Xt), getattr(plain, method)(Xt))
    np.testing.assert_array_equal(cv.classes_, [0, 1, 2])
    assert cv.sample_posterior_predictive(Xt, random_state=0) is cv.idata_


@pytest.mark.parametrize("estimator", [RVR(gamma=1.0), RVRCV(widths=[1.0, 2.0], cv=2)])
def test_regressors_reject_text_targets_at_the_door(estimator):
    """Text targets stop in fit with the regressor's own name and a pointer to the classifier,
    before any kernel is evaluated (the CV twin shares RVR's check)."""
    X = np.linspace(0.0, 1.0, 8)[:, None]
    y = np.array(["a", "b"] * 4)
    name = type(estimator).__name__
    with pytest.raises(ValueError, match=f"^{name} needs numeric targets y; got dtype <U1"):
        estimator.fit(X, y)
