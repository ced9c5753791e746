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
    X, y = make_sinc(60, noise=0.1, random_state=0, shuffle=False)
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
    np.testing.assert_allclose(cv.refit_loo().elpd_i, plain.refit_loo().elpd_i, rtol=1e-10)


def test_rvrcv_searches_as_grid_search_with_a_splitter_and_groups():
    """Independent truth: scikit-learn's GridSearchCV over RVR's gamma with the same splitter
    and groups: the same table (a pandas DataFrame, a row per width), ranks and best width."""
    import pandas as pd
    from sklearn.model_selection import GridSearchCV, GroupKFold

    X, y = make_sinc(60, noise=0.1, random_state=0, shuffle=False)
    groups = np.arange(60) // 10
    widths = [1.5, 4.0, 0.5]  # cv_results_ keeps this order, as GridSearchCV keeps its grid's
    cv = RVRCV(widths=widths, cv=GroupKFold(3), warm_start=False).fit(X, y, groups=groups)
    gs = GridSearchCV(
        RVR(),
        {"gamma": [1.0 / w**2 for w in widths]},
        cv=GroupKFold(3),
        scoring="neg_mean_squared_error",
    ).fit(X, y, groups=groups)
    table = pd.DataFrame(cv.cv_results_)
    assert table.shape[0] == 3 and cv.n_splits_ == 3
    for key in ("split0_test_score", "split1_test_score", "split2_test_score"):
        np.testing.assert_allclose(table[key], gs.cv_results_[key], rtol=1e-6)
    for key in ("mean_test_score", "std_test_score"):
        np.testing.assert_allclose(table[key], gs.cv_results_[key], rtol=1e-6)
    np.testing.assert_array_equal(table["rank_test_score"], gs.cv_results_["rank_test_score"])
    np.testing.assert_allclose(table["param_gamma"], gs.cv_results_["param_gamma"].astype(float))
    assert cv.best_index_ == gs.best_index_
    assert cv.best_params_ == {"gamma": pytest.approx(gs.best_params_["gamma"])}
    assert cv.best_params_ == cv.cv_results_["params"][cv.best_index_]
    assert cv.estimator_.gamma == cv.best_params_["gamma"]
    np.testing.assert_array_equal(table["length_scale"], widths)
    assert cv.best_estimator_ is cv.estimator_
    with pytest.raises(AttributeError, match="'RVRCV' object has no attribute 'no_such_'"):
        cv.no_such_


def test_rvrcv_explicit_splits_index_the_users_rows_repeats_fitted_once():
    """Explicit (train, test) splits index the rows as given; a repeated row is fitted once, so
    the split scores the RVR fitted on its distinct training rows over its distinct test rows."""
    X, y = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    Xd, yd = np.vstack([X, X[:1]]), np.r_[y, y[:1]]  # row 40 repeats row 0
    split = (np.arange(30), np.r_[np.arange(30, 40), 40])
    with pytest.warns(UserWarning, match="1 of the 41 training rows repeat"):
        cv = RVRCV(widths=[2.0], cv=[split]).fit(Xd, yd)
    plain = RVR(gamma=0.25).fit(X[:30], y[:30])
    want = -np.mean((plain.predict(X[30:]) - y[30:]) ** 2)
    assert cv.n_splits_ == 1
    assert cv.cv_results_["split0_test_score"][0] == pytest.approx(want, rel=1e-6)
    with pytest.raises(ValueError, match="split 0 has 1 training"):
        RVRCV(widths=[2.0], cv=[(np.arange(1), np.arange(1, 40))]).fit(X, y)
    with pytest.raises(ValueError, match="outside the 40"):
        RVRCV(widths=[2.0], cv=[(np.arange(30), np.arange(30, 41))]).fit(X, y)


def test_splits_as_boolean_masks_are_the_splits_of_their_rows():
    X, y = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    rows = np.arange(40)
    by_mask = RVRCV(widths=[2.0, 1.0], cv=[(rows < 30, rows >= 30)]).fit(X, y)
    by_index = RVRCV(widths=[2.0, 1.0], cv=[(rows[:30], rows[30:])]).fit(X, y)
    np.testing.assert_array_equal(
        by_mask.cv_results_["split0_test_score"], by_index.cv_results_["split0_test_score"]
    )
    with pytest.raises(ValueError, match="integer row indices or a boolean mask"):
        RVRCV(widths=[2.0], cv=[(rows[:30] * 1.0, rows[30:])]).fit(X, y)
    with pytest.raises(ValueError, match="boolean mask of shape"):
        RVRCV(widths=[2.0], cv=[(rows[:20] < 30, rows >= 30)]).fit(X, y)


def test_repeated_rows_stand_for_their_first_copy_in_each_split():
    """A split's rows are its distinct rows: a copy whose first is outside the split stands for
    it. Independent truth: RVR fitted on those distinct rows; an integer cv with groups folds the
    distinct rows as without the copy."""
    X, y = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    Xd, yd = np.vstack([X, X[:1]]), np.r_[y, y[:1]]  # row 40 repeats row 0
    split = (np.r_[np.arange(1, 30), 40], np.arange(30, 40))
    with pytest.warns(UserWarning, match="repeat another row"):
        cv = RVRCV(widths=[2.0], cv=[split]).fit(Xd, yd)
    plain = RVR(gamma=0.25).fit(X[:30], y[:30])
    want = -np.mean((plain.predict(X[30:]) - y[30:]) ** 2)
    assert cv.cv_results_["split0_test_score"][0] == pytest.approx(want, rel=1e-10)
    with (
        pytest.warns(UserWarning, match="repeat another row"),
        pytest.warns(UserWarning, match="groups parameter is ignored by KFold"),  # as sklearn's
    ):
        grouped = RVRCV(widths=[2.0], cv=3, random_state=0).fit(Xd, yd, groups=np.arange(41) % 5)
    plain_cv = RVRCV(widths=[2.0], cv=3, random_state=0).fit(X, y)
    np.testing.assert_array_equal(
        grouped.cv_results_["mean_test_score"], plain_cv.cv_results_["mean_test_score"]
    )


def test_rvccv_refuses_a_training_split_without_a_class():
    X, _ = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    labels = np.where(np.arange(40) < 20, "low", "high")
    with pytest.raises(ValueError, match="split 0 has no training rows of class 'low'"):
        RVCCV(widths=[2.0], cv=[(np.arange(20, 40), np.arange(20))]).fit(X, labels)


def test_searches_with_a_splitter_or_explicit_splits_save_and_load(tmp_path):
    from sklearn.model_selection import GroupKFold, KFold

    from bayes_rvm import load_model, save_model

    X, y = make_sinc(40, noise=0.1, random_state=0, shuffle=False)
    rows = np.arange(40)
    for cv in (GroupKFold(4), KFold(3, shuffle=True, random_state=2), [(rows < 30, rows >= 30)]):
        groups = rows % 4 if isinstance(cv, GroupKFold) else None
        model = RVRCV(widths=[2.0, 1.0], cv=cv).fit(X, y, groups=groups)
        loaded = load_model(save_model(model, tmp_path / "m.nc"))
        if isinstance(cv, list):  # a mask is stored as the indices of its rows
            assert [[list(a) for a in split] for split in loaded.cv] == [
                [list(range(30)), list(range(30, 40))]
            ]
        else:
            assert repr(loaded.cv) == repr(cv)
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
        assert loaded.best_params_ == model.best_params_
        for key, value in model.cv_results_.items():
            assert np.array_equal(loaded.cv_results_[key], value), key
        refit = loaded.fit(X, y, groups=groups)  # the loaded parameters make the same search
        np.testing.assert_array_equal(
            refit.cv_results_["mean_test_score"], model.cv_results_["mean_test_score"]
        )

    class Halves:
        def split(self, X, y=None, groups=None):
            yield np.arange(20), np.arange(20, 40)

        def get_n_splits(self, X=None, y=None, groups=None):
            return 1

    model = RVRCV(widths=[2.0], cv=Halves()).fit(X, y)
    with pytest.raises(TypeError, match=r"cv=Halves\(\.\.\.\) cannot be written.*pickle"):
        save_model(model, tmp_path / "h.nc")


def test_rvccv_takes_a_splitter_with_groups_as_its_explicit_splits():
    from sklearn.model_selection import GroupKFold

    X, y = make_sinc(60, noise=0.1, random_state=0, shuffle=False)
    labels, groups = y > 0.2, np.arange(60) % 4
    by_splitter = RVCCV(widths=WIDTHS, cv=GroupKFold(4)).fit(X, labels, groups=groups)
    splits = list(GroupKFold(4).split(X, labels, groups))
    explicit = RVCCV(widths=WIDTHS, cv=splits).fit(X, labels)
    assert by_splitter.n_splits_ == explicit.n_splits_ == 4
    for key in ("mean_test_score", *(f"split{k}_test_score" for k in range(4))):
        np.testing.assert_array_equal(by_splitter.cv_results_[key], explicit.cv_results_[key])
    # Each split's score is the accuracy of the latent mean's class on its test rows.
    tr, te = splits[0]
    plain = RVC(gamma=1.0 / WIDTHS[0] ** 2, moderated="probit").fit(X[tr], labels[tr])
    assert explicit.cv_results_["split0_test_score"][0] == pytest.approx(
        np.mean(plain.predict(X[te]) == labels[te])
    )


def test_rvccv_predicts_as_the_plain_estimator_at_its_width():
    X, y = make_sinc(60, noise=0.1, random_state=0, shuffle=False)
    labels = np.digitize(y, [0.0, 0.4])
    cv = RVCCV(widths=WIDTHS, cv=3, random_state=0).fit(X, labels)
    plain = RVC(gamma=cv.gamma_).fit(X, labels)
    Xt = np.linspace(-10, 10, 17)[:, None]
    for method in ("predict", "predict_proba", "predict_log_proba", "decision_function"):
        np.testing.assert_allclose(getattr(cv, method)(Xt), getattr(plain, method)(Xt))
    np.testing.assert_array_equal(cv.classes_, [0, 1, 2])


def test_rvccv_samples_the_posterior_predictive_of_its_refitted_classifier():
    # Binary on 20 rows: idata_ holds the refitted classifier's refit LOO (20 refits here, where
    # the three-class fit above took 10 of 54 rows, 8 s). A three-class type-II classifier's
    # draws at new inputs: test_mcmc_classifier_datatree_is_shaped_like_rvr.
    X, y = make_sinc(20, noise=0.1, random_state=0, shuffle=False)
    cv = RVCCV(widths=WIDTHS, cv=3, random_state=0).fit(X, y > 0.2)
    Xt = np.linspace(-10, 10, 17)[:, None]
    assert cv.sample_posterior_predictive(Xt, random_state=0) is cv.idata_ is cv.estimator_.idata_
    assert cv.idata_["predictions"]["y"].shape[-1] == 17


@pytest.mark.parametrize("estimator", [RVR(gamma=1.0), RVRCV(widths=[1.0, 2.0], cv=2)])
def test_regressors_reject_text_targets_at_the_door(estimator):
    """Text targets stop in fit with the regressor's own name and a pointer to the classifier,
    before any kernel is evaluated (the CV twin shares RVR's check)."""
    X = np.linspace(0.0, 1.0, 8)[:, None]
    y = np.array(["a", "b"] * 4)
    name = type(estimator).__name__
    with pytest.raises(ValueError, match=f"^{name} needs numeric targets y; got dtype <U1"):
        estimator.fit(X, y)


def _counts(n=80, seed=0):
    """Counts of log rate 1 + sin(x) on [-5, 5] (the CLI's count data)."""
    X = np.linspace(-5.0, 5.0, n)[:, None]
    y = np.random.default_rng(seed).poisson(np.exp(1.0 + np.sin(X[:, 0]))).astype(float)
    return X, y


@pytest.mark.parametrize(
    ("likelihood", "extra"),
    [("poisson", {}), ("student_t", {}), ("student_t", {"likelihood_params": {"noise_nu": 4.0}})],
)
def test_rvrcv_scores_each_likelihood_as_a_loop_of_plain_fits(likelihood, extra):
    """Independent truth: every (width, fold) score is the score of a plain RVR with the same
    likelihood fitted on the fold's training rows at that width, by scikit-learn's metric
    (mean Poisson deviance for counts, squared error of the location for Student-t)."""
    from sklearn.metrics import mean_poisson_deviance, mean_squared_error
    from sklearn.model_selection import KFold

    if likelihood == "poisson":
        X, y = _counts()
        metric = mean_poisson_deviance
    else:
        X, y = make_sinc(60, noise=0.1, random_state=0, shuffle=False)
        y = y + np.where(np.arange(60) % 12 == 0, 2.0, 0.0)  # 5 gross outliers
        metric = mean_squared_error
    widths = [4.0, 1.5]
    cv = RVRCV(
        widths=widths, cv=3, warm_start=False, random_state=0, likelihood=likelihood, **extra
    ).fit(X, y)
    folds = list(KFold(3, shuffle=True, random_state=0).split(X))
    want = np.empty((2, 3))
    for i, r in enumerate(widths):
        for f, (tr, te) in enumerate(folds):
            plain = RVR(gamma=1.0 / r**2, likelihood=likelihood, **extra).fit(X[tr], y[tr])
            want[i, f] = -metric(y[te], plain.predict(X[te]))
    got = np.column_stack([cv.cv_results_[f"split{f}_test_score"] for f in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert cv.scoring_ == (
        "neg_mean_poisson_deviance" if likelihood == "poisson" else "neg_mean_squared_error"
    )
    best = int(np.argmax(want.mean(axis=1)))
    assert cv.length_scale_ == widths[best]
    plain = RVR(gamma=cv.gamma_, likelihood=likelihood, **extra).fit(X, y)
    np.testing.assert_allclose(cv.predict(X), plain.predict(X), rtol=1e-10)
    assert cv.score(X, y) == pytest.approx(plain.score(X, y), rel=1e-10)
    if likelihood == "student_t":
        assert cv.noise_nu_ == plain.noise_nu_


def test_rvrcv_refuses_what_the_likelihood_cannot_take():
    X, y = _counts(20)
    with pytest.raises(ValueError, match="noise_variance"):
        RVRCV(
            widths=WIDTHS, cv=2, likelihood="poisson", likelihood_params={"noise_variance": 1.0}
        ).fit(X, y)
    with pytest.raises(ValueError, match="whole number"):
        RVRCV(widths=WIDTHS, cv=2, likelihood="poisson").fit(X, y + 0.5)
    with pytest.raises(ValueError, match="one output"):
        RVRCV(widths=WIDTHS, cv=2, likelihood="student_t").fit(X, np.column_stack([y, y]))
    with pytest.raises(ValueError, match="likelihood"):
        RVRCV(widths=WIDTHS, cv=2, likelihood="cauchy").fit(X, y)
    with pytest.raises(ValueError, match="noise_nu"):
        RVRCV(
            widths=WIDTHS, cv=2, likelihood="student_t", likelihood_params={"noise_nu": -1.0}
        ).fit(X, y)


@pytest.mark.parametrize("cls", [RVRCV, RVCCV])
def test_cv_estimators_check_a_dataframes_columns_as_the_plain_ones_do(cls, tmp_path):
    # The refit saw an array: a DataFrame with its columns in another order was predicted
    # without a word (wrong values), before and after saving; RVR and RVC refuse it.
    import warnings

    pd = pytest.importorskip("pandas")
    from bayes_rvm import load_model, save_model

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(60, 3)), columns=["a", "b", "c"])
    y = X["a"] - 2 * X["b"] + 0.1 * rng.normal(size=60)
    est = cls(cv=3).fit(X, y if cls is RVRCV else y > 0)
    loaded = load_model(save_model(est, tmp_path / "m.nc"))
    for model in (est, loaded):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal(model.predict(X), est.predict(X))
        with pytest.raises(ValueError, match="Feature names must be in the same order"):
            model.predict(X[["c", "b", "a"]])


def test_of_equal_scores_the_widest_width_wins():
    X = np.r_[np.linspace(-3.0, -1.0, 20), np.linspace(1.0, 3.0, 20)][:, None]
    labels = X[:, 0] > 0
    cv = RVCCV(widths=[0.5, 1.0, 2.0], cv=3, random_state=0).fit(X, labels)
    np.testing.assert_array_equal(cv.cv_results_["mean_test_score"], 1.0)
    np.testing.assert_array_equal(cv.cv_results_["rank_test_score"], 1)
    assert cv.best_index_ == 2 and cv.length_scale_ == 2.0


def test_a_file_stores_sklearn_splitters_by_name_and_builds_nothing_else():
    import json

    from sklearn.model_selection import (
        LeaveOneGroupOut,
        PredefinedSplit,
        RepeatedKFold,
        ShuffleSplit,
        TimeSeriesSplit,
    )

    from bayes_rvm.estimators.cv import _cv_from_json, _cv_to_json

    for cv in (ShuffleSplit(3, test_size=0.25, random_state=1), TimeSeriesSplit(3, gap=1)):
        assert repr(_cv_from_json(json.loads(json.dumps(_cv_to_json(cv))))) == repr(cv)
    assert repr(_cv_from_json(_cv_to_json(LeaveOneGroupOut()))) == "LeaveOneGroupOut()"
    # Parameters not kept under their names, or not plain values: pickle, said at saving.
    for cv in (RepeatedKFold(n_splits=3), PredefinedSplit([0, 1, 0, 1])):
        with pytest.raises(TypeError, match="cannot be written"):
            _cv_to_json(cv)
    # A file is untrusted: a name that is not a splitter class of sklearn.model_selection.
    for name in ("cross_validate", "os", None):
        with pytest.raises(ValueError, match="names no splitter"):
            _cv_from_json({"splitter": name, "params": {}})


def test_a_width_without_a_finite_score_ranks_last_and_none_is_refused():
    cv = RVRCV(kernel="rbf")
    scores = np.array([[-1.0, -2.0], [np.nan, -1.0], [-0.5, -0.7]])
    cv._set_results(np.array([2.0, 1.0, 0.5]), scores)
    np.testing.assert_array_equal(cv.cv_results_["rank_test_score"], [2, 3, 1])
    assert cv.best_index_ == 2 and cv.best_score_ == pytest.approx(-0.6)
    with pytest.raises(ValueError, match="no width gave a finite mean test score"):
        cv._set_results(np.array([2.0]), np.array([[np.nan, -1.0]]))


def test_a_row_given_twice_in_a_split_is_fitted_once():
    X, y = make_sinc(30, noise=0.1, random_state=0, shuffle=False)
    cv = RVRCV(widths=[2.0], cv=[(np.r_[0, 0, 0, 1:20], np.arange(20, 30))]).fit(X, y)
    plain = RVR(gamma=0.25).fit(X[:20], y[:20])
    want = -np.mean((plain.predict(X[20:]) - y[20:]) ** 2)
    assert cv.cv_results_["split0_test_score"][0] == pytest.approx(want, rel=1e-10)


def test_rvccv_names_a_class_too_rare_for_its_folds():
    X, _ = make_sinc(30, noise=0.1, random_state=0, shuffle=False)
    labels = np.r_[np.zeros(15), np.ones(14), 2.0]
    with (
        pytest.warns(UserWarning, match="least populated class"),  # scikit-learn's, as before
        pytest.raises(ValueError, match=r"class 2\.0: .* has 1 of them, fewer than the 3 folds"),
    ):
        RVCCV(widths=[2.0], cv=3).fit(X, labels)
