"""RVR: scikit-learn conformance, the published sinc figures, and bad input."""

import itertools
import warnings

import numpy as np
import pytest
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from bayes_rvm.datasets import make_sinc, sinc
from bayes_rvm.estimators.regressor import RVR

SINC_GAMMA = 1.0 / 3.0**2  # Gaussian kernel of width 3 (exp(-|x - x'|^2 / 3^2))
X_TEST = np.linspace(-10, 10, 1000)[:, None]


# The defaults (the evidence's width search), and the other prior and solver at scikit-learn's
# own width rule: the width search is the same code under each.
@parametrize_with_checks(
    [
        RVR(),
        RVR(prior="student_t", prior_params={"nu": 0.01}, gamma="scale"),
        RVR(solver="mackay", gamma="scale"),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def sinc_fit():
    X, y = make_sinc(100, random_state=3, shuffle=False)
    return X, y, RVR(gamma=SINC_GAMMA).fit(X, y)


def test_predictive_equals_dense_gp_form(sinc_fit):
    # The fitted RVM is a GP with covariance phi(x)^T A^-1 phi(x') over the retained basis:
    # mean k*^T C^-1 t, variance k** - k*^T C^-1 k* + 1/beta, with C = I/beta + Phi A^-1 Phi^T.
    X, y, model = sinc_fit
    Phi = model.basis_.transform(X, columns=model.active_)
    Phis = model.basis_.transform(X_TEST, columns=model.active_)
    Ainv = np.diag(1 / model.alpha_)
    C = np.eye(len(X)) * model.noise_variance_ + Phi @ Ainv @ Phi.T
    Ks = Phis @ Ainv @ Phi.T
    mean = Ks @ np.linalg.solve(C, y)
    var = np.einsum("ij,ij->i", Phis @ Ainv, Phis) - np.einsum(
        "ij,ji->i", Ks, np.linalg.solve(C, Ks.T)
    )
    got_mean, got_std = model.predict(X_TEST, return_std=True)
    np.testing.assert_allclose(got_mean, mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(got_std**2, var + model.noise_variance_, rtol=1e-7)


def test_fitted_attributes_are_consistent(sinc_fit):
    X, _, model = sinc_fit
    Phi = model.basis_.transform(X, columns=model.relevance_)
    np.testing.assert_allclose(model.predict(X), Phi @ model.coef_ + model.intercept_)
    np.testing.assert_array_equal(model.relevance_vectors_, X[model.relevance_])
    assert model.alpha_.shape == model.active_.shape
    assert model.sigma_.shape == (model.active_.size,) * 2
    assert model.converged_ and model.scores_.size >= model.n_iter_
    assert model.scores_[-1] == pytest.approx(model.log_evidence_, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["sequential", "mackay"])
def test_tipping_2001_sinc_figures(solver):
    # 100 equally spaced x in [-10, 10], noise sd 0.1, 100 noise draws, error against the
    # noise-free sinc on 1000 points. Paper: RMS error 0.0326, 6.7 relevance vectors.
    errors, counts = [], []
    for seed in range(100):
        X, y = make_sinc(100, noise=0.1, random_state=seed, shuffle=False)
        model = RVR(gamma=SINC_GAMMA, solver=solver).fit(X, y)
        errors.append(np.sqrt(np.mean((model.predict(X_TEST) - sinc(X_TEST[:, 0])) ** 2)))
        counts.append(model.n_relevance_vectors_)
    assert np.mean(errors) == pytest.approx(0.0326, rel=0.15)
    assert np.mean(counts) <= 10


def test_student_t_is_sparser_as_nu_falls():
    X, y = make_sinc(100, random_state=1, shuffle=False)
    counts = [
        RVR(gamma=SINC_GAMMA, prior="student_t", prior_params={"nu": nu})
        .fit(X, y)
        .n_relevance_vectors_
        for nu in (1.0, 1e-2, 1e-3, 1e-4, 1e-6)
    ]
    assert all(a >= b for a, b in itertools.pairwise(counts))
    assert counts[0] == 100 and counts[-1] <= 10


def test_multi_output_shares_relevance_vectors():
    X, _ = make_sinc(80, random_state=0, shuffle=False)
    f = sinc(X[:, 0])
    Y = np.c_[f, 2 * f + 0.05, -f] + 0.1 * np.random.default_rng(0).standard_normal((80, 3))
    model = RVR(gamma=SINC_GAMMA).fit(X, Y)
    assert model.coef_.shape == (model.n_relevance_vectors_, 3)
    mean, std = model.predict(X_TEST, return_std=True)
    assert mean.shape == std.shape == (1000, 3)
    np.testing.assert_allclose(std[:, 0], std[:, 2])
    for k, f in enumerate((sinc, lambda x: 2 * sinc(x) + 0.05, lambda x: -sinc(x))):
        assert np.sqrt(np.mean((mean[:, k] - f(X_TEST[:, 0])) ** 2)) < 0.06


def test_precomputed_kernel_equals_rbf():
    X, y = make_sinc(60, random_state=2, shuffle=False)
    a = RVR(gamma=SINC_GAMMA).fit(X, y)
    b = RVR(kernel="precomputed").fit(rbf_kernel(X, X, gamma=SINC_GAMMA), y)
    np.testing.assert_array_equal(a.active_, b.active_)
    np.testing.assert_allclose(
        b.predict(rbf_kernel(X_TEST, X, gamma=SINC_GAMMA)), a.predict(X_TEST), rtol=1e-8, atol=1e-10
    )
    assert b.relevance_vectors_ is None


def test_fixed_noise_variance():
    X, y = make_sinc(80, random_state=0, shuffle=False)
    model = RVR(gamma=SINC_GAMMA, likelihood_params={"noise_variance": 0.02}).fit(X, y)
    assert model.noise_variance_ == pytest.approx(0.02)


@pytest.mark.parametrize("scale", [1e-8, 1e8])
def test_absurd_target_scales_give_the_same_fit(scale):
    X, y = make_sinc(100, random_state=4, shuffle=False)
    ref = RVR(gamma=SINC_GAMMA).fit(X, y)
    model = RVR(gamma=SINC_GAMMA).fit(X, scale * y)
    np.testing.assert_array_equal(model.active_, ref.active_)
    np.testing.assert_allclose(
        model.predict(X_TEST), scale * ref.predict(X_TEST), rtol=1e-6, atol=1e-6 * scale
    )
    assert model.noise_variance_ == pytest.approx(scale**2 * ref.noise_variance_, rel=1e-6)
    # ln p(s t) = ln p(t) - N ln s: the Jacobian of the scaling.
    assert model.log_evidence_ == pytest.approx(ref.log_evidence_ - 100 * np.log(scale), rel=1e-8)


def test_constant_and_zero_targets_fit_exactly():
    X = np.linspace(0, 1, 20)[:, None]
    for c in (3.5, 0.0):
        model = RVR().fit(X, np.full(20, c))
        np.testing.assert_allclose(model.predict(X), c, atol=1e-6 * max(c, 1))
        assert np.isfinite(model.log_evidence_) or c == 0.0


def test_duplicated_inputs_and_zero_columns():
    X, y = make_sinc(50, random_state=5, shuffle=False)
    Xd = np.r_[X, X]
    yd = np.r_[y, y + 0.01]
    model = RVR(gamma=SINC_GAMMA).fit(Xd, yd)
    assert np.sqrt(np.mean((model.predict(X_TEST) - sinc(X_TEST[:, 0])) ** 2)) < 0.1
    K = rbf_kernel(X, X, gamma=SINC_GAMMA)
    K[:, 7] = 0.0  # an all-zero basis column is never selected
    model = RVR(kernel="precomputed").fit(K, y)
    assert 7 not in model.active_


def test_distinct_rows_is_a_brute_force_search_for_repeats():
    # Continuous inputs (the one-sort shortcut), equal first inputs that differ later (or in the
    # target), true repeats, and a zero of either sign: the first row of each group, against a
    # comparison of every pair of rows.
    from bayes_rvm.estimators.regressor import distinct_rows

    rng = np.random.default_rng(0)
    X = rng.uniform(size=(40, 2))
    T = rng.normal(size=(40, 1))
    X[5, 0] = X[9, 0]  # same first input, another second one
    X[12], T[12] = X[3], T[3] + 1.0  # same inputs, another target
    X[20], T[20] = X[4], T[4]  # a repeat
    X[30], T[30] = X[4], T[4]  # and another
    X[33, 0], X[34] = 0.0, [-0.0, X[33, 1]]  # 0.0 and -0.0 are one value
    T[34] = T[33]
    A = np.hstack([X, T])
    first = [i for i in range(40) if not any(np.array_equal(A[i], A[j]) for j in range(i))]
    np.testing.assert_array_equal(distinct_rows(X, T), first)
    assert len(first) == 37
    Xc, Tc = rng.uniform(size=(40, 3)), rng.normal(size=(40, 1))
    np.testing.assert_array_equal(distinct_rows(Xc, Tc), np.arange(40))


def test_non_psd_kernel_still_fits():
    # The RVM needs no Mercer kernel: a sigmoid basis is not PSD and still gives a sound fit.
    X, y = make_sinc(100, random_state=6, shuffle=False)
    model = RVR(kernel="sigmoid", gamma=0.2, kernel_params={"coef0": -1.0}).fit(X, y)
    assert np.sqrt(np.mean((model.predict(X_TEST) - sinc(X_TEST[:, 0])) ** 2)) < 0.15
    assert np.all(np.isfinite(model.predict(X_TEST, return_std=True)[1]))


@pytest.mark.parametrize(
    ("X", "y", "match"),
    [
        (np.array([[0.0], [np.nan]]), np.array([1.0, 2.0]), "NaN"),
        (np.array([[0.0], [1.0]]), np.array([1.0, np.inf]), "infinity"),
        (np.array([[0.0]]), np.array([1.0]), "minimum of 2"),
        (np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]), "2D array"),
        (np.zeros((3, 1)), np.ones(4), "inconsistent numbers of samples"),
    ],
)
def test_bad_data(X, y, match):
    with pytest.raises(ValueError, match=match):
        RVR().fit(X, y)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"prior": "laplace"}, "prior"),
        ({"prior_params": {"nu": 0.0}}, r"prior_params\['nu'\]"),
        ({"prior_params": {"mu": 1.0}}, r"no key 'mu'; its keys are \['alpha_prior', 'nu'"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
        ({"prior_params": {"threshold_alpha": "big"}}, "threshold_alpha"),
        ({"likelihood_params": {"noise_variance": 0.0}}, "noise_variance"),
        ({"kernel_params": {"degree": 0}}, r"kernel_params\['degree'\]"),
        (
            {"kernel": "poly", "kernel_params": {"degre": 3}},
            r"kernel_params has no key 'degre' for kernel='poly'",
        ),
        (
            {"kernel": "rbf", "kernel_params": {"length_scale": 0.1}},
            r"kernel_params has no key 'length_scale' for kernel='rbf'",
        ),
        ({"sampler_config": []}, "sampler_config"),
        ({"solver": "newton"}, "solver"),
        ({"kernel": "precomputed"}, "square"),
    ],
)
def test_bad_parameters_name_the_argument(params, match):
    X, y = make_sinc(10, random_state=0, shuffle=False)
    with pytest.raises(ValueError, match=match):
        RVR(**params).fit(X, y)


def test_predict_checks_features():
    X, y = make_sinc(20, random_state=0, shuffle=False)
    model = RVR().fit(X, y)
    with pytest.raises(ValueError, match="features"):
        model.predict(np.zeros((3, 2)))


@pytest.mark.parametrize("centres", ["random", "kmeans", "given"])
def test_candidate_centre_subsets(centres):
    X, y = make_sinc(400, random=True, random_state=7, shuffle=False)
    spec = np.linspace(-10, 10, 60)[:, None] if centres == "given" else (centres, 60)
    model = RVR(gamma=SINC_GAMMA, centres=spec, random_state=0).fit(X, y)
    assert model.basis_.n_centres_ == 60
    np.testing.assert_array_equal(model.relevance_vectors_, model.basis_.centres_[model.relevance_])
    assert np.sqrt(np.mean((model.predict(X_TEST) - sinc(X_TEST[:, 0])) ** 2)) < 0.04
    again = RVR(gamma=SINC_GAMMA, centres=spec, random_state=0).fit(X, y)
    np.testing.assert_array_equal(again.predict(X_TEST), model.predict(X_TEST))


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"centres": ("grid", 5)}, "centres must be"),
        ({"centres": "random"}, "a method and a count"),
        ({"centres": ("random", 0)}, "count of centres"),
        ({"centres": ("random", 500)}, "exceeds"),
        ({"centres": np.zeros((4, 2))}, "features"),
    ],
)
def test_bad_centre_options(params, match):
    X, y = make_sinc(50, random_state=0, shuffle=False)
    with pytest.raises(ValueError, match=match):
        RVR(**params).fit(X, y)


def test_grouped_parameters_merge_clone_and_search():
    """The dict parameters: merged over the class's defaults, never modified, resolved at fit
    into ``_settings``, cloned and searched as any parameter (GridSearchCV)."""
    import pickle

    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    X, y = make_sinc(60, random_state=0, shuffle=False)
    prior_params = {"nu": 0.01}
    config = {"draws": 50}
    model = RVR(
        gamma=SINC_GAMMA, prior="student_t", prior_params=prior_params, sampler_config=config
    )
    model.fit(X, y)
    assert prior_params == {"nu": 0.01} and config == {"draws": 50}  # the user's dicts
    assert model.get_params()["prior_params"] is prior_params
    s = model._settings
    assert (s.nu, s.threshold_alpha, s.draws, s.tune, s.chains, s.mcmc_basis) == (
        0.01,
        "auto",
        50,
        300,
        4,
        "auto",
    )
    assert (s.degree, s.coef0, s.centre_method, s.n_centres) == (3, 1.0, None, None)
    assert clone(model).get_params() == model.get_params()
    assert pickle.loads(pickle.dumps(model))._settings.draws == 50
    # The same fit as the defaults it spells out.
    spelled = RVR(gamma=SINC_GAMMA, prior_params={"nu": "auto", "threshold_alpha": "auto"})
    np.testing.assert_array_equal(
        spelled.fit(X, y).predict(X), RVR(gamma=SINC_GAMMA).fit(X, y).predict(X)
    )
    search = GridSearchCV(
        RVR(kernel="poly", gamma=0.1),
        {"kernel_params": [{"degree": 1}, {"degree": 3, "coef0": 0.5}]},
        cv=3,
    ).fit(X, y)
    assert search.best_params_["kernel_params"] in ({"degree": 1}, {"degree": 3, "coef0": 0.5})
    best = search.best_estimator_
    assert best.basis_.degree == best.kernel_params["degree"]
    # A set_params after the fit is read at once (as the flat parameters were).
    model.set_params(sampler_config={"mcmc_basis": "relevant"})
    assert model._cfg.mcmc_basis == "relevant" and model._cfg.draws == 1000


def test_rvc_keeps_its_own_defaults_and_keys():
    from bayes_rvm.estimators.classifier import RVC

    s = RVC()._cfg
    assert (s.threshold_alpha, s.tune, s.mcmc_basis) == (1e9, 1000, "all")
    X, y = make_sinc(40, random_state=0, shuffle=False)
    with pytest.raises(ValueError, match=r"sampler_config has no key 'vi_kwargs'"):
        RVC(sampler_config={"vi_kwargs": {}}).fit(X, y > 0)
    with pytest.raises(TypeError, match="likelihood_params"):
        RVC(likelihood_params={"noise_variance": 1.0})  # not a parameter of RVC


def test_grid_search_over_one_key_of_a_dict_parameter():
    """``GridSearchCV(RVR(prior="student_t"), {"prior_params__nu": [...]})`` failed in
    scikit-learn's ``set_params`` ("'NoneType' object has no attribute 'set_params'"). A key set
    alone copies the dict with that key set; the search scores as one over whole dicts."""
    from sklearn.model_selection import GridSearchCV

    from bayes_rvm.estimators.classifier import RVC

    X, y = make_sinc(60, noise=0.1, random_state=0)
    by_key = GridSearchCV(RVR(prior="student_t"), {"prior_params__nu": [1e-4, 1.0]}, cv=3)
    by_dict = GridSearchCV(
        RVR(prior="student_t"), {"prior_params": [{"nu": 1e-4}, {"nu": 1.0}]}, cv=3
    )
    np.testing.assert_array_equal(
        by_key.fit(X, y).cv_results_["mean_test_score"],
        by_dict.fit(X, y).cv_results_["mean_test_score"],
    )
    assert by_key.best_estimator_.prior_params == {"nu": by_key.best_params_["prior_params__nu"]}
    mine = {"nu": 1.0}
    est = RVR(prior_params=mine).set_params(prior_params__nu=2.0, kernel_params__degree=3)
    assert mine == {"nu": 1.0} and est.prior_params == {"nu": 2.0}
    assert est.kernel_params == {"degree": 3}
    # Beside the whole dict, the key lands in it; an unknown key is refused at fit as before.
    est.set_params(prior_params={"nu": 5.0}, prior_params__threshold_alpha=3.0)
    assert est.prior_params == {"nu": 5.0, "threshold_alpha": 3.0}
    with pytest.raises(ValueError, match="prior_params has no key 'nuu'"):
        RVC().set_params(prior_params__nuu=1.0).fit(X, y > 0)
    with pytest.raises(ValueError, match="Invalid parameter 'foo'"):
        RVR().set_params(foo__bar=1)
    # The cross-validated twins take it too.
    from bayes_rvm.estimators.cv import RVCCV, RVRCV

    for cls in (RVRCV, RVCCV):
        assert cls().set_params(prior_params__nu=0.1).prior_params == {"nu": 0.1}


def test_set_params_reaches_a_dict_inside_a_dict_parameter():
    # "sampler_config__vi_kwargs__n" was stored as the key "vi_kwargs__n", which fit refused.
    mine = {"draws": 10, "vi_kwargs": {"n": 100, "method": "advi"}}
    est = RVR(inference="vi", sampler_config=mine).set_params(sampler_config__vi_kwargs__n=7)
    assert est.sampler_config == {"draws": 10, "vi_kwargs": {"n": 7, "method": "advi"}}
    assert mine["vi_kwargs"]["n"] == 100  # the caller's dicts are not touched
    assert RVR().set_params(sampler_config__vi_kwargs__n=3).sampler_config == {
        "vi_kwargs": {"n": 3}
    }
    with pytest.raises(ValueError, match=r"sampler_config__draws__n=.*10 on its way"):
        RVR(sampler_config={"draws": 10}).set_params(sampler_config__draws__n=1)


@pytest.mark.parametrize("cls", ["RVR", "RVC"])
def test_nu_without_the_student_t_prior_is_refused(cls):
    # It was ignored, where alpha_prior without the ARD prior was refused.
    from bayes_rvm import RVC

    est = {"RVR": RVR, "RVC": RVC}[cls](prior_params={"nu": 1e-3})
    X, y = make_sinc(30, noise=0.1, random_state=0)
    with pytest.raises(ValueError, match=r"prior_params\['nu'\].*prior='student_t'"):
        est.fit(X, y if cls == "RVR" else y > 0.2)
    est.set_params(prior="student_t").fit(X, y if cls == "RVR" else y > 0.2)


def test_set_params_nested_keys_are_checked_and_an_open_group_takes_them_whole():
    with pytest.raises(ValueError, match="a key is empty"):
        RVR().set_params(sampler_config__vi_kwargs__=1)
    with pytest.raises(ValueError, match="'auto' on its way is not a dict"):
        RVR().set_params(prior_params__nu__x=1)  # nu's default is not a dict of settings
    # kernel_params holds a callable kernel's keyword arguments: "a__b" is one of them.
    assert RVR().set_params(kernel_params__a__b=2).kernel_params == {"a__b": 2}


def test_a_dense_student_t_fit_warns_and_the_sequential_solver_stays_sparse():
    # prior="student_t" kept 46 of 501 basis functions at N = 500 (6 at N = 100, as the docs
    # said), silently; the sequential engine under the same prior keeps the ARD fit's count.
    X, y = make_sinc(500, noise=0.1, random_state=0)
    with pytest.warns(UserWarning, match=r"prior='student_t' kept 46 of 501 .*solver='sequential'"):
        dense = RVR(prior="student_t").fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sparse = RVR(prior="student_t", solver="sequential").fit(X, y)
        small = RVR(prior="student_t").fit(*make_sinc(100, noise=0.1, random_state=0))
    assert dense.n_relevance_vectors_ == 46 and small.n_relevance_vectors_ == 6
    assert sparse.n_relevance_vectors_ <= RVR().fit(X, y).n_relevance_vectors_ + 1


def test_outputs_of_different_noise_warn_that_they_share_one_level():
    # Outputs of noise sd 0.2 and 3 shared an sd of 2.16 silently: 90% intervals covered 100%
    # and 74% of new points.
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (150, 2))
    quiet = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.2 * rng.standard_normal(150)
    noisy = 10 * np.sin(2 * X[:, 0]) + 3 * rng.standard_normal(150)
    with pytest.warns(UserWarning, match=r"the 2 outputs share one noise level.*\(0\.33, 2\.77\)"):
        RVR().fit(X, np.c_[quiet, noisy])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        RVR().fit(X, np.c_[quiet, np.cos(X[:, 1]) + 0.2 * rng.standard_normal(150)])
