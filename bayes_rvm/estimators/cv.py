"""Cross-validated kernel width: :class:`RVRCV` and :class:`RVCCV`.

The twins of :class:`~bayes_rvm.RVR` and
:class:`~bayes_rvm.RVC` that choose
the width of an rbf or laplacian kernel by K-fold cross-validation over a grid, as
:class:`sklearn.linear_model.RidgeCV` and :class:`~sklearn.linear_model.LassoCV` choose their
regularisation. The evidence can prefer widths that are too narrow (a near-exact fit with a tiny
noise estimate and most basis functions kept); held-out error cannot be fooled that way.

Faster than :class:`~sklearn.model_selection.GridSearchCV` over the same grid: the kernel matrix is
built once per width on all the data and each fold takes its rows and columns from it; a fold
keeps only the engine's fit and is scored from its mean (a fitted estimator adds validation and
posterior summaries, and a classifier its importance-sampled predictive: a fifth of an RVC fit on
Banana); and for RVRCV, along the grid (wide to narrow) each fold's engine starts from its fit at
the previous width.
"""

from __future__ import annotations

import inspect
import time
from numbers import Integral

import numpy as np
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.model_selection import KFold, StratifiedKFold, check_cv
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from bayes_rvm.basis.kernels import WIDTH_KERNELS, KernelBasis, stationary_kernel
from bayes_rvm.estimators.base import DictKeyParams, ParamGroup, resolve_group, training_data
from bayes_rvm.estimators.classifier import RVC, one_vs_rest
from bayes_rvm.estimators.persistence import Fail, SavedStateMixin
from bayes_rvm.estimators.regressor import RVR, first_copies, rows_to_fit
from bayes_rvm.evidence import Problem, default_width_grid, fit_problem
from bayes_rvm.threads import one_blas_thread

__all__ = ["RVCCV", "RVRCV"]


def _constraints(template: type, names: tuple[str, ...]) -> dict:
    """The parameter constraints of a cross-validated twin: its own and the template's.

    The template's parameters are declared as the template declares them, so that scikit-learn's
    ``_fit_context`` checks them all (with the same messages, under the twin's name) before a
    fold is fitted; the keys of its dict parameters are :func:`_groups`'.
    """
    return {
        "widths": ["array-like", None],
        "cv": ["cv_object"],
        **{name: template._parameter_constraints[name] for name in names},
    }


def _groups(template: type, keys: dict[str, tuple[str, ...]]) -> dict[str, ParamGroup]:
    """A twin's dict parameters: the template's groups restricted to the keys it forwards."""
    return {name: template._param_groups[name].only(*names) for name, names in keys.items()}


class _WidthCV(SavedStateMixin, DictKeyParams, BaseEstimator):
    """What the two cross-validated estimators share: the grid, the folds, the refit."""

    _template: type
    #: The dict parameters forwarded to the template, restricted to the keys a twin takes.
    _param_groups: dict = {}  # noqa: RUF012

    def _validate_params(self) -> None:
        # The declared constraints and the keys of the dict parameters, then what only the
        # template's fit can say about the combination (the estimator refitted at the chosen
        # width is built from these).
        super()._validate_params()
        for name, group in self._param_groups.items():
            resolve_group(type(self).__name__, name, getattr(self, name), group)
        self._estimator()._check_priors()

    def _check(self) -> None:
        """The kernel and the widths, checked before any fold (``cv`` is checked by its
        parameter constraint)."""
        if stationary_kernel(self.kernel) is None:
            raise ValueError(
                f"{type(self).__name__} chooses the width of the kernels {WIDTH_KERNELS}; got "
                f"kernel={self.kernel!r}."
            )
        if self.widths is not None:
            grid = np.asarray(self.widths, dtype=np.float64)
            if grid.ndim != 1 or grid.size < 1 or not np.all(np.isfinite(grid) & (grid > 0)):
                raise ValueError(f"widths must be positive length scales, got {self.widths!r}.")

    def _grid(self, X) -> np.ndarray:
        """The widths to search: the given ones, or the default grid on the rows fitted."""
        if self.widths is None:
            return default_width_grid(X)
        return np.asarray(self.widths, dtype=np.float64)

    def _splits(self, X, y, groups, *, classifier: bool) -> list:
        """The (train, test) index pairs of ``cv`` on the rows of ``X``.

        An integer is that many shuffled folds (stratified by class for a classifier) seeded by
        ``random_state``; a splitter or an iterable of splits is taken as scikit-learn's search
        CVs take it (:func:`~sklearn.model_selection.check_cv`), ``groups`` passed to its
        ``split``.
        """
        cv = 5 if self.cv is None else self.cv
        if isinstance(cv, Integral):
            kind = StratifiedKFold if classifier else KFold
            cv = kind(cv, shuffle=True, random_state=self.random_state)
        else:
            cv = check_cv(cv, y, classifier=classifier)
        n = X.shape[0]
        splits = [(_indices(tr, n), _indices(te, n)) for tr, te in cv.split(X, y, groups)]
        for k, (tr, te) in enumerate(splits):
            if tr.size < 2 or te.size < 1:
                raise ValueError(
                    f"cv's split {k} has {tr.size} training and {te.size} test rows; each needs "
                    "at least 2 and 1."
                )
            if min(tr.min(), te.min()) < 0 or max(tr.max(), te.max()) >= n:
                raise ValueError(f"cv's split {k} indexes rows outside the {n} of X.")
        if not splits:
            raise ValueError("cv gave no split.")
        return splits

    def _estimator(self, **extra):
        own = ("widths", "cv", "warm_start")
        params = {k: v for k, v in self.get_params(deep=False).items() if k not in own}
        return self._template(**params, **extra)

    def _search(self, X, target, splits, fold_problem, fold_predict, fold_score) -> None:
        """Scores of every (width, fold), the best width, and the refit on all the data.

        ``fold_problem(Phi, target)`` is a fold's :class:`~bayes_rvm.evidence.problem.Problem`,
        ``fold_predict(problem, fit, Phi_test)`` its predictions from the normalised test design,
        ``fold_score(predictions, target)`` their score.
        """
        start = time.perf_counter()
        grid = self._grid(X)
        engine = self._estimator().make_engine()
        scores = np.empty((grid.size, len(splits)))
        warm = [None] * len(splits)
        width = stationary_kernel(self.kernel)
        # From wide to narrow, so that a fold's warm start is its fit at the next wider width;
        # cv_results_ keeps the order of widths.
        for i in np.argsort(-grid, kind="stable"):
            g = float(width.gamma(grid[i]))
            # One kernel matrix per width on all the data; each fold slices it.
            K = KernelBasis(self.kernel, gamma=g, bias=self.bias).fit(X).transform(X)
            for f, (tr, te) in enumerate(splits):
                cols = np.r_[tr, K.shape[1] - 1] if self.bias else tr
                problem = fold_problem(K[np.ix_(tr, cols)], target[tr])
                fit = fit_problem(problem, engine, warm[f])
                warm[f] = fit if getattr(self, "warm_start", False) else None
                pred = fold_predict(problem, fit, K[np.ix_(te, cols)] / problem.norms)
                scores[i, f] = fold_score(pred, target[te])
        self._set_results(grid, scores)
        self.estimator_ = self._estimator(**self.best_params_)
        self.estimator_.fit(X, self._refit_target)
        self.gamma_ = self.estimator_.gamma_
        self.n_features_in_ = self.estimator_.n_features_in_
        self.selection_time_ = time.perf_counter() - start

    def _set_results(self, grid: np.ndarray, scores: np.ndarray) -> None:
        """``cv_results_`` as scikit-learn's search CVs lay it out (one entry per width, so that
        ``pandas.DataFrame(cv_results_)`` is a table), and the best width's index, parameters
        and score, from the widths and their scores (widths x splits)."""
        width = stationary_kernel(self.kernel)
        gammas = np.array([float(width.gamma(ls)) for ls in grid])
        with np.errstate(invalid="ignore"):  # a fold scoring -inf gives a NaN std, silently
            mean, std = scores.mean(axis=1), scores.std(axis=1)
        finite = np.isfinite(mean)
        if not finite.any():
            raise ValueError(
                f"{type(self).__name__}: no width gave a finite mean test score "
                f"({mean.tolist()}); check the targets against the likelihood."
            )
        self.cv_results_ = {
            "params": [{"gamma": float(g)} for g in gammas],
            "param_gamma": gammas,
            "length_scale": np.asarray(grid, dtype=np.float64),
            **{f"split{k}_test_score": scores[:, k] for k in range(scores.shape[1])},
            "mean_test_score": mean,
            "std_test_score": std,
            # A width without a finite score ranks last, as in scikit-learn's search CVs.
            "rank_test_score": rankdata(np.where(finite, -mean, np.inf), method="min").astype(
                np.int32
            ),
        }
        # Ties (accuracies often tie) go to the widest kernel, the smoother fit.
        tied = np.flatnonzero(mean == np.max(mean[finite]))
        self.best_index_ = int(tied[np.argmax(np.asarray(grid)[tied])])
        self.best_params_ = dict(self.cv_results_["params"][self.best_index_])
        self.best_score_ = float(mean[self.best_index_])
        self.length_scale_ = float(grid[self.best_index_])
        self.n_splits_ = int(scores.shape[1])

    def _split_scores(self) -> np.ndarray:
        """The scores of ``cv_results_``, widths x splits."""
        return np.column_stack(
            [self.cv_results_[f"split{k}_test_score"] for k in range(self.n_splits_)]
        )

    def _persisted_state(self) -> dict:
        """What :mod:`bayes_rvm.io` stores: the refitted estimator's state and the search's."""
        check_is_fitted(self, "estimator_")
        state = self.estimator_._persisted_state()
        results = self.cv_results_
        search = {
            "gamma": self.estimator_.gamma,
            "length_scale": self.length_scale_,
            "best_score": self.best_score_,
            "selection_time": self.selection_time_,
            # The widths and their scores, from which the rest of cv_results_ follows (the
            # layout of earlier files).
            "cv_results": {
                "length_scale": results["length_scale"].tolist(),
                "mean_test_score": results["mean_test_score"].tolist(),
                "std_test_score": results["std_test_score"].tolist(),
                "split_test_scores": self._split_scores().tolist(),
            },
        }
        return {**state, "extras": {**state["extras"], "cv": search}}

    @classmethod
    def _check_persisted(cls, state: dict, params: dict, fail: Fail) -> None:
        # A cross-validated twin holds the state of the estimator it refitted.
        cls._template._check_persisted(state, params, fail)

    @classmethod
    def _params_to_file(cls, params: dict) -> dict:
        # A scikit-learn splitter by its name and parameters, explicit splits as index lists.
        return {**params, "cv": _cv_to_json(params["cv"])}

    @classmethod
    def _params_from_file(cls, params: dict) -> dict:
        return {**params, "cv": _cv_from_json(params.get("cv"))}

    def _restore_state(self, state: dict) -> None:
        search = state["extras"]["cv"]
        self.estimator_ = self._estimator(gamma=search["gamma"])
        self.estimator_._restore_state(state)
        results = search["cv_results"]
        self._set_results(
            np.asarray(results["length_scale"], dtype=np.float64),
            np.asarray(results["split_test_scores"], dtype=np.float64),
        )
        self.selection_time_ = search["selection_time"]
        self.gamma_ = self.estimator_.gamma_
        self.n_features_in_ = self.estimator_.n_features_in_
        if hasattr(self.estimator_, "classes_"):
            self.classes_ = self.estimator_.classes_

    def __getattr__(self, name):
        # The refitted estimator's fitted attributes (relevance_vectors_, alpha_, ...); its own
        # errors where it has the attribute (a property that explains), else this class's.
        estimator = self.__dict__.get("estimator_")
        if (
            estimator is not None
            and name.endswith("_")
            and not name.startswith("__")
            and (name in vars(estimator) or hasattr(type(estimator), name))
        ):
            return getattr(estimator, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def best_estimator_(self):
        """The estimator refitted at the best width (``estimator_``), by the name scikit-learn's
        search CVs give it."""
        return self._refitted()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # densified at the door, as RVR and RVC do
        return tags

    def _refitted(self):
        check_is_fitted(self, "estimator_")
        names = self.__dict__.get("feature_names_in_")
        if names is not None and "feature_names_in_" not in self.estimator_.__dict__:
            # The refit saw an array: given the names fit saw (or a saved model kept), its
            # predict checks a DataFrame's columns by them, as RVR's does, instead of taking
            # them in any order.
            self.estimator_.feature_names_in_ = names
        return self.estimator_

    # What the plain estimator offers, delegated to the refit, as scikit-learn's search CVs do.
    def refit_loo(self, n_folds: int | None = None, random_state=None):
        """The refitted estimator's :meth:`refit_loo` (leave-one-out of the type-II fit at the
        chosen width; the width is not re-chosen per refit)."""
        return self._refitted().refit_loo(n_folds=n_folds, random_state=random_state)

    def make_model(self, **kwargs):
        """The refitted estimator's :meth:`make_model` (its PyMC model, in the user's units)."""
        return self._refitted().make_model(**kwargs)

    def sample_posterior_predictive(self, X=None, random_state=None, *, extend_idata=True):
        """The refitted estimator's :meth:`sample_posterior_predictive` (see there)."""
        return self._refitted().sample_posterior_predictive(
            X, random_state, extend_idata=extend_idata
        )

    def sample_prior_predictive(self, draws=500, random_state=None, *, extend_idata=True):
        """The refitted estimator's :meth:`sample_prior_predictive` (see there)."""
        return self._refitted().sample_prior_predictive(
            draws, random_state, extend_idata=extend_idata
        )


class RVRCV(RegressorMixin, _WidthCV):
    """:class:`~bayes_rvm.RVR` with its kernel width chosen by cross-validation.

    Each width of the grid is scored over the splits of ``cv`` by a score that fits the
    likelihood (higher ``mean_test_score`` is better): the negative mean squared error of the
    predictions for Gaussian and Student-t noise (the location: the t noise has no mean where
    ``nu <= 1``), and for counts the negative mean Poisson deviance of the predicted rate
    (:func:`sklearn.metrics.mean_poisson_deviance`, the score of scikit-learn's
    ``PoissonRegressor``), which weighs each count's error by its variance as squared error
    cannot. The estimator is then refitted on all the data at the best width.

    Parameters
    ----------
    widths : array-like of float, optional
        Length scales ``r`` to try (``gamma = 1/r^2`` for rbf, ``1/r`` for laplacian); default
        :func:`bayes_rvm.evidence.width.default_width_grid` (7 widths from 4 to 1/16 times the
        median distance between inputs). Searched from wide to narrow; ``cv_results_`` keeps
        their order.
    cv : int, scikit-learn splitter or iterable of (train, test) splits, default=5
        An integer is that many folds (None: 5), shuffled with ``random_state``; a splitter
        (``GroupKFold``, ``TimeSeriesSplit``, ...) or explicit splits are used as scikit-learn's
        search CVs use them, ``groups`` given to :meth:`fit`; a split's sides are row indices
        or boolean masks.
    warm_start : bool, default=True
        Start each fold's engine from its fit at the previous (wider) width, which saves steps
        where neighbouring widths fit alike; the engine may then stop at a slightly different
        local optimum of the alphas than a cold start (False gives, without repeated rows,
        exactly the fits of a :class:`~sklearn.model_selection.GridSearchCV`).
    kernel : {"rbf", "laplacian"}, default="rbf"
    bias, prior, solver, max_iter, tol
        As in :class:`~bayes_rvm.RVR`.
    prior_params : dict, optional
        ``nu`` and ``threshold_alpha``, as in :class:`~bayes_rvm.RVR`.
    likelihood : {"gaussian", "poisson", "student_t"}, default="gaussian"
        As in :class:`~bayes_rvm.RVR`, with what it refuses: counts take one
        column
        of whole numbers and no ``noise_variance``; Student-t noise one output. Each fold is the
        fit RVR makes (Student-t: its variational EM, warm-started along the grid as the
        Gaussian fits are; counts: the Laplace engine, cold).
    likelihood_params : dict, optional
        ``noise_variance`` and ``noise_nu`` (the Student-t noise's degrees of freedom, None:
        learned in each fit), as in RVR.
    random_state : int, RandomState or None, default=None
        Seeds the shuffling of the folds of an integer ``cv``.

    Attributes
    ----------
    estimator_ : RVR
        Refitted on all the data at the chosen width; its fitted attributes
        (``relevance_vectors_``, ``log_evidence_``, ...) are reachable on this object too.
    length_scale_, gamma_ : float
        The chosen width.
    cv_results_ : dict
        One entry per width, laid out as in scikit-learn's search CVs (``pandas.DataFrame``
        makes it a table): ``params`` (``{"gamma": ...}``), ``param_gamma``, ``length_scale``,
        ``split0_test_score``, ``split1_test_score``, ..., ``mean_test_score``,
        ``std_test_score`` and ``rank_test_score``.
    best_index_ : int
        The best width's entry in ``cv_results_`` (of equal scores, the widest).
    best_params_ : dict
        ``{"gamma": gamma_}``: the parameter of the refitted estimator.
    best_score_ : float
        The best mean test score.
    n_splits_ : int
        The number of splits.
    scoring_ : {"neg_mean_squared_error", "neg_mean_poisson_deviance"}
        The score of ``cv_results_``, scikit-learn's name for it.
    selection_time_ : float
        Seconds for the whole search and refit.
    """

    _template = RVR
    _parameter_constraints: dict = {  # noqa: RUF012 - scikit-learn's convention
        **_constraints(
            RVR,
            (
                "kernel",
                "bias",
                "prior",
                "prior_params",
                "solver",
                "likelihood",
                "likelihood_params",
                "max_iter",
                "tol",
                "random_state",
            ),
        ),
        "kernel": [StrOptions(set(WIDTH_KERNELS))],
        "warm_start": ["boolean"],
    }
    _param_groups: dict = _groups(
        RVR,
        {
            "prior_params": ("nu", "threshold_alpha"),
            "likelihood_params": ("noise_variance", "noise_nu"),
        },
    )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # as RVR: one output or several sharing the alphas
        tags.target_tags.single_output = True
        return tags

    def predict(self, X, return_std: bool = False, return_cov: bool = False):
        """:meth:`RVR.predict <bayes_rvm.RVR.predict>` of the refitted estimator."""
        return self._refitted().predict(X, return_std=return_std, return_cov=return_cov)

    def sample_y(self, X, n_samples: int = 1, random_state=0) -> np.ndarray:
        """:meth:`RVR.sample_y <bayes_rvm.RVR.sample_y>` of the refitted estimator."""
        return self._refitted().sample_y(X, n_samples=n_samples, random_state=random_state)

    @property
    def scoring_(self) -> str:
        """The score of ``cv_results_``, by scikit-learn's name (see the class docstring)."""
        check_is_fitted(self, "estimator_")
        return self.estimator_._likelihood().cv_scoring

    def score(self, X, y, sample_weight=None) -> float:
        """:meth:`RVR.score <bayes_rvm.RVR.score>` of the refitted estimator (R^2;
        for counts the fraction of Poisson deviance explained)."""
        return self._refitted().score(X, y, sample_weight=sample_weight)

    def __init__(
        self,
        *,
        widths=None,
        cv=5,
        warm_start=True,
        kernel="rbf",
        bias=True,
        prior="ard",
        prior_params=None,
        solver="auto",
        likelihood="gaussian",
        likelihood_params=None,
        max_iter=10_000,
        tol=1e-3,
        random_state=None,
    ):
        self.widths = widths
        self.cv = cv
        self.warm_start = warm_start
        self.kernel = kernel
        self.bias = bias
        self.prior = prior
        self.prior_params = prior_params
        self.solver = solver
        self.likelihood = likelihood
        self.likelihood_params = likelihood_params
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @one_blas_thread
    def fit(self, X, y, groups=None) -> RVRCV:
        """Choose the width by cross-validation, then fit on all the data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        groups : array-like of shape (n_samples,), optional
            Group labels for a splitter that takes them (``GroupKFold``), as in scikit-learn's
            search CVs.

        Returns
        -------
        self : RVRCV
        """
        X, y = training_data(self, X, y, regression=True, min_samples=4)
        template = self._estimator()
        # RVR's own refusals, before any fold: counts, and what each likelihood cannot take.
        y = template._check_targets(y)
        likelihood = template._likelihood()
        self._check()
        # Repeated rows are fitted once, as RVR does; here a row's copies would also sit in a
        # fold's training and test rows. An integer cv folds the rows fitted (the search is then
        # the search on the distinct rows); a splitter's or explicit splits index the user's
        # rows, each split keeping its distinct ones.
        dedup = template._cfg.noise_variance is None and likelihood.estimates_noise
        keep = rows_to_fit(X, y) if dedup else np.arange(X.shape[0])
        if self.cv is None or isinstance(self.cv, Integral):
            groups = None if groups is None else np.asarray(groups)[keep]
            X, y = X[keep], y[keep]
            splits = self._splits(X, y, groups, classifier=False)
        else:
            splits = self._splits(X, y, groups, classifier=False)
            if dedup:  # also a row given twice in one split
                splits = _on_distinct_rows(splits, X, y, keep)
                X, y = X[keep], y[keep]
        T = y[:, None] if y.ndim == 1 else y
        self._refit_target = y
        self._search(
            X, T, splits, template._problem, likelihood.fold_prediction, likelihood.fold_score
        )
        del self._refit_target
        return self


def _cv_to_json(cv):
    """``cv`` as JSON values: a number as it is, a splitter of :mod:`sklearn.model_selection` as
    ``{"splitter": name, "params": {...}}``, explicit splits as lists of row indices.

    Raises
    ------
    TypeError
        For another splitter, or splits given by a generator (spent by the fit).
    """
    import sklearn.model_selection as ms

    if cv is None or isinstance(cv, Integral):
        return None if cv is None else int(cv)
    if hasattr(cv, "split"):
        kind = type(cv)
        names = [
            p.name
            for p in inspect.signature(kind).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        # Only a splitter that keeps each parameter under its name (RepeatedKFold does not).
        params = {n: getattr(cv, n) for n in names if hasattr(cv, n)}
        spec = {"splitter": kind.__name__, "params": params}
        if (
            getattr(ms, kind.__name__, None) is kind
            and len(params) == len(names)
            and all(v is None or isinstance(v, bool | int | float | str) for v in params.values())
            and repr(_cv_from_json(spec)) == repr(cv)  # what a load builds
        ):
            return spec
        raise TypeError(
            f"cv={kind.__name__}(...) cannot be written to a netCDF/zarr file (a splitter of "
            "sklearn.model_selection with plain parameters can, as can explicit splits); save "
            "the model with pickle instead."
        )
    if isinstance(cv, list | tuple):
        return [[_indices(part).tolist() for part in split] for split in cv]
    raise TypeError(
        f"cv of type {type(cv).__name__} cannot be written to a netCDF/zarr file (the splits it "
        "gave are spent); give them as a list of (train, test) index arrays, or save the model "
        "with pickle."
    )


def _cv_from_json(spec):
    """:func:`_cv_to_json`'s inverse."""
    import sklearn.model_selection as ms

    if isinstance(spec, dict):
        # A file is untrusted input: only a splitter class of sklearn.model_selection is built.
        kind = getattr(ms, str(spec.get("splitter")), None)
        if not (
            isinstance(kind, type) and hasattr(kind, "split") and hasattr(kind, "get_n_splits")
        ):
            raise ValueError(f"cv names no splitter of sklearn.model_selection: {spec!r}")
        return kind(**spec.get("params", {}))
    if isinstance(spec, list):
        return [tuple(np.asarray(part, dtype=np.intp) for part in split) for split in spec]
    return spec


def _indices(part, n_rows: int | None = None) -> np.ndarray:
    """One side of a split as row indices: integers as they are, a boolean mask's rows (a mask
    of ``n_rows`` values, where given)."""
    part = np.asarray(part)
    if part.dtype == bool:
        if n_rows is not None and part.shape != (n_rows,):
            raise ValueError(
                f"cv's splits give a boolean mask of shape {part.shape} for the {n_rows} rows."
            )
        return np.flatnonzero(part)
    if part.ndim != 1 or (part.size and part.dtype.kind not in "iu"):
        raise ValueError(
            "cv's splits must give each side as one-dimensional integer row indices or a "
            f"boolean mask; got an array of dtype {part.dtype} and shape {part.shape}."
        )
    return part.astype(np.intp)


def _on_distinct_rows(splits: list, X: np.ndarray, y: np.ndarray, keep: np.ndarray) -> list:
    """``splits`` of the rows of ``X`` on its distinct rows ``keep`` (renumbered, in order).

    Each row stands for the first of its copies, so that a split keeps every distinct row it
    holds once; a split's test rows leave out those its training rows hold.
    """
    renumbered = np.full(X.shape[0], -1, dtype=np.intp)
    renumbered[keep] = np.arange(keep.size)
    distinct = renumbered[first_copies(X, y[:, None] if y.ndim == 1 else y)]
    out = []
    for k, (tr, te) in enumerate(splits):
        tr = np.unique(distinct[tr])
        te = np.setdiff1d(distinct[te], tr)
        if tr.size < 2 or te.size < 1:
            raise ValueError(
                f"cv's split {k} keeps {tr.size} training and {te.size} test rows once repeated "
                "rows are fitted once; each needs at least 2 and 1."
            )
        out.append((tr, te))
    return out


class RVCCV(ClassifierMixin, _WidthCV):
    """:class:`~bayes_rvm.RVC` with its kernel width chosen by cross-validation.

    Each width of the grid is scored by the accuracy over the splits of ``cv`` (the
    class of largest latent mean, which is also the class of largest probit-moderated probability
    for two classes; the importance-sampled predictive of ``moderated="auto"`` can differ from it
    at points on the boundary); the classifier is then refitted on all the data at the best width.

    Parameters
    ----------
    widths, cv, kernel, random_state
        As in :class:`RVRCV` (the Laplace engines take no warm start); an integer ``cv`` is
        that many stratified folds.
    bias, prior, solver, multi_class, max_iter, tol
        As in :class:`~bayes_rvm.RVC`.
    prior_params : dict, optional
        ``nu`` and ``threshold_alpha``, as in :class:`~bayes_rvm.RVC`.

    Attributes
    ----------
    estimator_ : RVC
        Refitted on all the data at the chosen width (its fitted attributes are reachable on this
        object too).
    classes_ : ndarray
    length_scale_, gamma_, cv_results_, best_index_, best_params_, best_score_
        As in :class:`RVRCV` (scores are accuracies).
    n_splits_, selection_time_
        As in :class:`RVRCV`.
    """

    _template = RVC
    _parameter_constraints: dict = {  # noqa: RUF012 - scikit-learn's convention
        **_constraints(
            RVC,
            (
                "kernel",
                "bias",
                "prior",
                "prior_params",
                "solver",
                "multi_class",
                "max_iter",
                "tol",
                "random_state",
            ),
        ),
        "kernel": [StrOptions(set(WIDTH_KERNELS))],
    }
    _param_groups: dict = _groups(RVC, {"prior_params": ("nu", "threshold_alpha")})

    def __init__(
        self,
        *,
        widths=None,
        cv=5,
        kernel="rbf",
        bias=True,
        prior="ard",
        prior_params=None,
        solver="sequential",
        multi_class="multinomial",
        max_iter=10_000,
        tol=1e-6,
        random_state=None,
    ):
        self.widths = widths
        self.cv = cv
        self.kernel = kernel
        self.bias = bias
        self.prior = prior
        self.prior_params = prior_params
        self.solver = solver
        self.multi_class = multi_class
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    @one_blas_thread
    def fit(self, X, y, groups=None) -> RVCCV:
        """Choose the width by cross-validation, then fit on all the data.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        groups : array-like of shape (n_samples,), optional
            Group labels for a splitter that takes them (``StratifiedGroupKFold``), as in
            scikit-learn's search CVs.

        Returns
        -------
        self : RVCCV
        """
        X, y = training_data(self, X, y, regression=False, min_samples=4)
        self._check()
        classes, yi = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError("RVCCV needs samples of at least two classes.")
        splits = self._splits(X, yi, groups, classifier=True)
        for k, (tr, _) in enumerate(splits):
            missing = np.setdiff1d(np.arange(classes.size), yi[tr])
            if missing.size:
                label = np.asarray(classes[missing[0]]).tolist()
                count = int(np.sum(yi == missing[0]))
                raise ValueError(
                    f"cv's split {k} has no training rows of class {label!r}: every class needs "
                    "rows in every training split; "
                    + (
                        f"that class has {count} of them, fewer than the {len(splits)} folds of "
                        f"cv={self.cv} need."
                        if self.cv is None or isinstance(self.cv, Integral)
                        else "a stratified splitter, such as StratifiedGroupKFold, keeps them."
                    )
                )
        ovr = one_vs_rest(self.multi_class, X.shape[0], classes.size)

        def fold_problem(Phi, yf):
            return Problem.classification(Phi, yf, classes.size, one_vs_rest=ovr)

        def fold_predict(problem, fit, Phi_te):
            # One-vs-rest: one column per class too (OneVsRestFit.mean), argmax as softmax.
            latent = Phi_te[:, fit.active] @ fit.mean
            return (latent[:, 0] > 0).astype(int) if latent.shape[1] == 1 else latent.argmax(1)

        def fold_score(pred, yte):
            return float(np.mean(pred == yte))

        self._refit_target = y
        self._search(X, yi, splits, fold_problem, fold_predict, fold_score)
        del self._refit_target
        self.classes_ = self.estimator_.classes_
        return self

    def predict(self, X) -> np.ndarray:
        """Class labels of the refitted classifier."""
        return self._refitted().predict(X)

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities of the refitted classifier."""
        return self._refitted().predict_proba(X)

    def predict_log_proba(self, X) -> np.ndarray:
        """Log class probabilities of the refitted classifier."""
        return self._refitted().predict_log_proba(X)

    def decision_function(self, X) -> np.ndarray:
        """:meth:`RVC.decision_function <bayes_rvm.RVC.decision_function>` of the
        refitted classifier."""
        return self._refitted().decision_function(X)
