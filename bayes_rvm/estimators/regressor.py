"""scikit-learn estimators: :class:`RVR` (regression).

The estimators compose the layers below them (basis, evidence engines, PyMC models) and hold no
algorithm of their own. Every fit is done on a normalised problem (basis columns of unit norm,
targets of unit root-mean-square) so that the engines' thresholds mean the same thing for targets of
1e-8 and of 1e8; the results are mapped back to the original units exactly, since the RVM is
equivariant under both scalings.
"""

from __future__ import annotations

import dataclasses
from numbers import Integral

import numpy as np
import xarray as xr
from sklearn.base import RegressorMixin, _fit_context, clone
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from bayes_rvm._warnings import warn_at_user
from bayes_rvm.basis.kernels import KernelBasis
from bayes_rvm.dims import BASIS, OUTPUT
from bayes_rvm.estimators.base import (
    DEFAULT_GAMMA,
    KERNEL_PARAMS,
    POSITIVE,
    PRIOR_CONSTRAINTS,
    SAMPLER_CONSTRAINTS,
    BaseRVM,
    ParamGroup,
    check_number,
    new_inputs,
    output_dtype,
    path_from_json,
    path_to_json,
    training_data,
)
from bayes_rvm.estimators.distributed import (
    DaskData,
    dask_centres,
    dask_training_data,
    is_dask_collection,
    predict_dask,
)
from bayes_rvm.estimators.large_data import (
    StatisticsData,
    reads_row_blocks,
    statistics_model,
    statistics_refusal,
)
from bayes_rvm.estimators.likelihoods import REGRESSION_LIKELIHOODS
from bayes_rvm.estimators.persistence import (
    Fail,
    SavedStateMixin,
    statistics_arrays,
    statistics_from_arrays,
)
from bayes_rvm.evidence import (
    EvidenceFit,
    EvidenceOptions,
    Problem,
    TrainingData,
    column_scale,
    fit_problem,
    prior_column_scale,
    target_scale,
)
from bayes_rvm.evidence.options import beta_ceiling
from bayes_rvm.evidence.problem import target_spread
from bayes_rvm.models.priors import Prior, as_prior, default_alpha_prior
from bayes_rvm.posterior.predictors import regression_predictor
from bayes_rvm.threads import one_blas_thread

__all__ = ["RVR", "distinct_rows", "first_copies", "rows_to_fit"]


def first_copies(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """For each row, the index of the first row identical to it (its inputs and targets).

    Parameters
    ----------
    X : ndarray of shape (N, P)
    T : ndarray of shape (N, D)

    Returns
    -------
    ndarray of int, shape (N,)
        ``arange(N)`` when no row repeats another.
    """
    # Rows that repeat one another share their first input: where no two first inputs are equal
    # (continuous inputs) one sort of that column settles it (0.015 ms at N = 1000, against
    # 0.57 ms for sorting whole rows).
    x0 = np.sort(X[:, 0]) if X.shape[1] else np.zeros(X.shape[0])
    if not np.any(x0[1:] == x0[:-1]):
        return np.arange(X.shape[0])
    _, first, inverse = np.unique(np.hstack([X, T]), axis=0, return_index=True, return_inverse=True)
    return first[inverse.ravel()]


def distinct_rows(X: np.ndarray, T: np.ndarray) -> np.ndarray:
    """Indices of the first of each group of identical ``(x, t)`` rows, in their order: the
    rows that are their own first copy (:func:`first_copies`, the same arguments)."""
    first = first_copies(X, T)
    return np.flatnonzero(first == np.arange(first.size))


def rows_to_fit(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the rows to fit: the first of each group of identical rows, with a warning if
    any repeats another.

    For the regressors whose noise is estimated: with rows that repeat others exactly, the
    evidence (and the posterior density) grows without bound as the noise goes to 0 wherever the
    basis can interpolate the distinct rows, and cross-validation folds share rows between
    training and test.

    Parameters
    ----------
    X : ndarray of shape (N, P)
    y : ndarray of shape (N,) or (N, D)

    Returns
    -------
    ndarray of int
        :func:`distinct_rows` of ``(X, y)``, in order.
    """
    keep = distinct_rows(X, y[:, None] if y.ndim == 1 else y)
    if keep.size < X.shape[0]:
        warn_at_user(
            f"{X.shape[0] - keep.size} of the {X.shape[0]} training rows repeat another row "
            "exactly (inputs and targets): with them the evidence is unbounded as the noise goes "
            "to 0 (interpolating the distinct rows), so each distinct row is fitted once and "
            f"relevance_ indexes basis_.centres_, the {keep.size} distinct inputs. If they are "
            "repeated measurements, give likelihood_params={'noise_variance': ...}."
        )
    return keep


#: Outputs whose residual sds differ by more than this factor warn that their shared noise level
#: fits none of them (:meth:`RVR._warn_if_noise_differs`).
OUTPUT_NOISE_RATIO = 3.0

#: A Student-t MAP-II fit keeping more than this fraction of its basis functions, and more than
#: DENSE_LEAST, warns (:meth:`RVR._warn_if_dense`): at N = 300 on sinc it keeps 17 of 301.
DENSE_FRACTION = 0.05
DENSE_LEAST = 20

#: A noise sd below this fraction of the targets' standard deviation, with about one relevance
#: vector per row, is a fit that passes through its targets (:func:`warn_if_interpolating`).
INTERPOLATING_NOISE = 1e-4


def warn_if_interpolating(problem: Problem, fit: EvidenceFit) -> None:
    """Warn where the estimated noise fell to nothing: the fit passes through its targets.

    On a handful of rows the evidence can grow without bound as the noise goes to 0 once the
    relevance vectors pass through every target (three points of a noisy sine: a noise sd of
    1e-6 of the targets' and predictive sds near 1e-6, or 4e-5 at another width, where the
    engine converged before its floor, :func:`~bayes_rvm.evidence.options.beta_ceiling`). The
    intervals then mean nothing. It says so where the noise is at its floor, or below
    :data:`INTERPOLATING_NOISE` of the targets' sd with a relevance vector for every row but one
    or more: 300 rows of a sine measured to 1e-5, fitted by 26 vectors, are not interpolated.
    """
    beta = getattr(fit.posterior, "beta", None)
    if beta is None:
        return
    stats, n = problem.statistics, problem.n_values
    N = n // problem.targets.shape[1] if stats is None else stats.n
    spread = target_spread(problem.targets, stats)
    noise_sd, target_sd = 1.0 / np.sqrt(beta), np.sqrt(spread / n)  # normalised units
    dense = fit.active.size >= N - 1  # a basis function for every row but one, or more
    at_floor = beta >= 0.5 * beta_ceiling(spread, n)
    if not (at_floor or (dense and noise_sd < INTERPOLATING_NOISE * target_sd)):
        return
    sd = (
        f"the targets' sd is {problem.scale * target_sd:.2g}"
        if spread > 0
        else "the targets vary by less than float64 resolves at their level"
    )
    what = (
        f"the fit passes through its {N} training targets, as it should noise-free ones"
        if dense
        else f"the engines' floor, with {fit.active.size} basis function(s) for {N} rows"
    )
    warn_at_user(
        f"the noise estimate fell to sd {problem.scale * noise_sd:.2g} ({sd}): {what}. If "
        "yours are noisy, its predictive intervals are far too narrow: give the noise "
        "(likelihood_params={'noise_variance': ...}) or fit more rows.",
        RuntimeWarning,
    )


class RVR(RegressorMixin, SavedStateMixin, BaseRVM):
    """Relevance Vector Regression (Tipping 2001), fitted by type-II maximum likelihood or sampled.

    The model is ``t = Phi w + noise``, one basis function ``k(x, x_i)`` per training input (or
    centre) plus an optional bias, with the prior ``w_i ~ N(0, 1/alpha_i)``. The hyperparameters
    maximise the marginal likelihood (the evidence); most ``alpha_i`` run to infinity and their
    basis functions are pruned, leaving a few *relevance vectors*.

    Parameters
    ----------
    kernel : str, callable, scikit-learn kernel object or "precomputed", default="rbf"
        Basis kernel; see :class:`bayes_rvm.basis.kernels.KernelBasis`.
    gamma : {"evidence_shared", "evidence", "evidence_ard", "scale", "auto"}, float, \
array-like or Prior, default="evidence_shared"
        Kernel coefficient (rbf: ``1/r^2`` for width ``r``; laplacian: ``1/r``); an array gives
        one per feature. ``"evidence_shared"``: the width (per feature when there are several)
        that maximises the evidence with one prior precision shared by all weights;
        ``"evidence"``: the RVM's own evidence; ``"evidence_ard"``: one length scale per feature;
        ``"scale"``, ``"auto"``: as in :class:`sklearn.svm.SVR`. A
        :class:`~bayes_rvm.models.priors.Prior` samples the width (``inference="mcmc"``).
    kernel_params : dict, optional
        ``degree`` (int, default 3: the polynomial kernel's) and ``coef0`` (float, default 1.0:
        the polynomial and sigmoid kernels' independent term); any other key is a keyword
        argument of a callable kernel.
    bias : bool or "free", default=True
        ``True``: a constant basis function with its own ARD prior, pruned like any other.
        ``"free"``: an intercept that is never pruned, with a proper but negligible prior (sd
        1e5 times the targets' root-mean-square; ``likelihood="poisson"``: ``N(0, 10^2)`` in
        log rates); MCMC samples its precision with the other columns'. ``False``: no bias.
    centres : None, ("random", n), ("kmeans", n) or array-like of shape (n, n_features)
        Candidate basis functions: on every training input (None, the classical RVM), on a
        random or k-means subset of ``n`` points (a tuple or list), or on given centres.
    chunk_rows : "auto", int or None, default="auto"
        An int fits from the design's sufficient statistics, accumulated over blocks of that
        many rows (memory independent of N); None keeps the design in memory. ``"auto"``: the
        statistics when a subset of centres gives a design above 2 GiB and the options allow.
    prior : {"ard", "student_t"}, default="ard"
        ``"ard"``: flat hyperprior on ``log alpha`` (plain type-II maximum likelihood).
        ``"student_t"``: ``alpha_i ~ Gamma(nu/2, nu/2)``, Student-t weights, sparser as nu falls.
    prior_params : dict, optional
        ``nu`` (float, Prior or "auto"): the Student-t prior's degrees of freedom, ``"auto"`` 1e-4
        for the type-II fit and 1 under MCMC (:mod:`bayes_rvm.models.priors`), a Prior sampled.
        ``alpha_prior`` (Prior, or ``"r2d2"`` / ``"halfcauchy"``): MCMC and VI hyperprior of the
        relative precisions under ``"ard"``, default the one
        :data:`bayes_rvm.models.priors.DEFAULT_REGRESSION_ALPHA_PRIOR` names (for counts,
        ``"halfcauchy"``), ``"r2d2"``: the
        R2-D2 prior on the function, whose prior predictive does not grow with the number of
        columns. ``"halfcauchy"``: a half-Cauchy of scale 0.1 on ``alpha_rel^-1/2`` per column
        (the classifiers' default), which mixes faster on kernel bases. ``threshold_alpha``
        (float or "auto"): MacKay solver only, prune once the normalised ``alpha`` exceeds it;
        ``"auto"`` 1e9 for ``"ard"``, 10 for ``"student_t"``.
    likelihood : {"gaussian", "poisson", "student_t"}, default="gaussian"
        Gaussian noise; counts with a log link (``predict`` returns the rate; counts up to
        :data:`~bayes_rvm.estimators.likelihoods.MAX_COUNT`, 1e9); or Student-t noise for robust
        regression (one output; ``log_evidence_`` is then a variational lower bound).
    likelihood_params : dict, optional
        ``noise_variance`` (float): fix the noise variance (units of ``y``; Student-t noise: the
        squared scale) instead of estimating it, not for counts. ``noise_nu`` (float): the
        Student-t noise's degrees of freedom, None (default) learns them. ``noise_prior``
        (Prior): MCMC and VI prior of ``sigma / rms(y)``, default ``HalfNormal(1)``.
    solver : {"auto", "sequential", "mackay"}, default="auto"
        Type-II engine: ``"sequential"`` (Tipping & Faul 2003) adds, re-estimates or deletes one
        basis function at a time; ``"mackay"`` re-estimates all alphas (MacKay 1992).
        ``"auto"``: sequential for ``prior="ard"``, mackay for ``"student_t"``.
    max_iter : int, default=10000
        Iteration cap of the engine; reaching it warns with ``ConvergenceWarning``.
    tol : float, default=1e-3
        Stop when no ``log alpha`` changes by more than ``tol``.
    inference : {"type2", "mcmc", "vi"}, default="type2"
        ``"type2"``: the hyperparameters at their evidence maximum. ``"mcmc"``: NUTS over the
        hyperparameters of :attr:`model_`, started at the type-II fit, weights drawn per draw.
        ``"vi"``: mean-field ADVI over the same model.
    sampler_config : dict, optional
        Merged over the defaults: ``draws`` (1000; also the draws taken from the VI
        approximation), ``tune`` (300), ``chains`` (4), ``sampler`` ("nutpie", "numpyro",
        "pymc" or "blackjax"), ``mcmc_basis`` ("auto": every basis function at a fixed width on
        the in-memory design, the type-II relevance vectors otherwise; "all"; "relevant") and
        ``vi_kwargs`` (ADVI settings, :data:`bayes_rvm.inference.variational.VI_DEFAULTS`).
    predictive : {"rvm", "rvm*"}, default="rvm"
        ``"rvm"``: the RVM's predictive, whose variance shrinks to the noise away from the
        relevance vectors. ``"rvm*"``: the augmented predictive of Rasmussen & Quinonero-Candela
        (2005), whose variance grows again away from the data (not with "precomputed").
    random_state : int, RandomState or None, default=None
        Seed of the randomised parts of a fit (subsets of centres or rows, sampling).
    verbose : bool, default=False
        Progress on stderr: sampling's bars, and the width search, the engine's steps and the
        passes over row blocks once they run for 2 s (without it, only on a terminal or in a
        notebook).

    Attributes
    ----------
    basis_ : KernelBasis
        The fitted basis (remembers the centres).
    fit_ : EvidenceFit
        The engine's result in original units (alphas, noise, posterior of the active weights).
    training_ : bayes_rvm.evidence.problem.TrainingData
        The inputs, targets and retained columns that prediction and saving use.
    statistics_ : SufficientStatistics or None
        The design's sufficient statistics after a fit from them, else None.
    active_ : ndarray of int
        Indices of the retained basis functions (``n_centres`` is the bias).
    relevance_ : ndarray of int
        Indices of the relevance vectors among the training samples (or ``basis_.centres_``).
    relevance_vectors_ : ndarray of shape (n_relevance, n_features) or None
        The relevance vectors (None for a precomputed kernel).
    coef_, intercept_ : ndarray, float or ndarray
        Posterior mean weights of the relevance vectors and of the bias (0 if pruned).
    alpha_, sigma_ : ndarray
        Prior precisions of the retained basis functions and their weights' posterior covariance.
    noise_variance_, noise_nu_ : float
        Noise variance ``1 / beta`` (Student-t: squared scale; counts: None) and degrees of
        freedom (``inf`` for Gaussian noise).
    outlier_weights_ : ndarray of shape (n_samples,) or None
        Student-t type-II fit: each training point's weight ``E[u_n]`` (near 0 for an outlier).
    log_evidence_, scores_ : float, ndarray
        Log marginal likelihood at the optimum, and the objective at each iteration.
    gamma_, length_scale_ : float, ndarray of shape (n_features,) or None
        The kernel coefficient(s) used, and as length scale(s).
    width_path_ : WidthPath or None
        A learned width's evidence curve (:func:`bayes_rvm.plots.plot_width_path`).
    n_iter_, converged_ : int, bool
        Engine iterations, and whether the engine met its stopping rule.
    model_ : pymc.Model
        The PyMC model that MCMC samples, in the units of ``X`` and ``y`` (:meth:`make_model`).
    idata_ : xarray.DataTree
        The fit in ArviZ form (type-II: draws of ``w`` at the optimum), as
        :func:`bayes_rvm.compare` reads it.

    See Also
    --------
    bayes_rvm.estimators.classifier.RVC : The classifier.
    bayes_rvm.estimators.cv.RVRCV : The kernel width by cross-validation.
    bayes_rvm.posterior.comparison.compare : Type-II, MCMC and VI fits ranked by leave-one-out.

    Notes
    -----
    The documentation explains each option, with measurements, on its *Estimator options* page
    (``docs/estimators.md``), the equations on *Theory* and large N on *Large data*.

    Examples
    --------
    >>> from bayes_rvm.datasets import make_sinc
    >>> from bayes_rvm.estimators.regressor import RVR
    >>> X, y = make_sinc(100, random_state=0)
    >>> model = RVR(gamma=0.1).fit(X, y)
    >>> mean, std = model.predict(X[:3], return_std=True)
    """

    _rvm_star_mcmc = True

    _parameter_constraints: dict = {  # noqa: RUF012 - scikit-learn's convention
        **BaseRVM._shared_constraints,
        "solver": [StrOptions({"auto", "sequential", "mackay"})],
        "likelihood": [StrOptions(set(REGRESSION_LIKELIHOODS))],
        "likelihood_params": [dict, None],
        "inference": [StrOptions({"type2", "mcmc", "vi"})],
        "chunk_rows": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left"), None],
    }
    _param_groups: dict = {  # noqa: RUF012
        "kernel_params": KERNEL_PARAMS,
        "prior_params": ParamGroup(
            {"nu": "auto", "alpha_prior": None, "threshold_alpha": "auto"},
            {**PRIOR_CONSTRAINTS, "threshold_alpha": [StrOptions({"auto"}), POSITIVE]},
        ),
        "likelihood_params": ParamGroup(
            {"noise_variance": None, "noise_nu": None, "noise_prior": None},
            {
                "noise_variance": [POSITIVE, None],
                "noise_nu": [POSITIVE, None],
                "noise_prior": [Prior, dict, None],
            },
        ),
        "sampler_config": ParamGroup(
            {
                "draws": 1000,
                "tune": 300,
                "chains": 4,
                "sampler": "nutpie",
                "mcmc_basis": "auto",
                "vi_kwargs": None,
            },
            {
                **SAMPLER_CONSTRAINTS,
                "mcmc_basis": [StrOptions({"auto", "all", "relevant"})],
                "vi_kwargs": [dict, None],
            },
        ),
    }
    _samples_width_ok = True

    def __init__(
        self,
        *,
        kernel="rbf",
        gamma=DEFAULT_GAMMA,
        kernel_params=None,
        bias=True,
        centres=None,
        chunk_rows="auto",
        prior="ard",
        prior_params=None,
        likelihood="gaussian",
        likelihood_params=None,
        solver="auto",
        max_iter=10_000,
        tol=1e-3,
        inference="type2",
        sampler_config=None,
        predictive="rvm",
        random_state=None,
        verbose=False,
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.kernel_params = kernel_params
        self.bias = bias
        self.centres = centres
        self.chunk_rows = chunk_rows
        self.prior = prior
        self.prior_params = prior_params
        self.likelihood = likelihood
        self.likelihood_params = likelihood_params
        self.solver = solver
        self.max_iter = max_iter
        self.tol = tol
        self.inference = inference
        self.sampler_config = sampler_config
        self.predictive = predictive
        self.random_state = random_state
        self.verbose = verbose

    def _solver(self) -> str:
        if self.solver != "auto":
            return self.solver
        # The Student-t MAP-II optimum keeps every alpha finite, relevance being a threshold on
        # alpha: that is the re-estimation engine's fixed point. The sequential engine instead
        # leaves out a basis function whenever its prior term outweighs its evidence gain.
        return "mackay" if self.prior == "student_t" else "sequential"

    def _threshold_alpha(self) -> float:
        if self._cfg.threshold_alpha != "auto":
            return float(self._cfg.threshold_alpha)
        # Under the Student-t prior the MAP alphas stay finite (at most about (1 + nu) / nu), so
        # relevance is a threshold on alpha (docs/theory.md). On the normalised scale the
        # relevant weights are O(1) to O(sqrt(N)); alpha = 10 is a prior sd of 0.3. Under ARD the
        # alphas of irrelevant basis functions diverge and only need a numerical cut-off.
        return 10.0 if self.prior == "student_t" else 1e9

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = True
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    @one_blas_thread
    def fit(self, X, y, **sample_kwargs) -> RVR:
        """Fit the RVM by maximising the evidence.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)
            Training inputs (the square training kernel matrix for ``kernel="precomputed"``).
            A Dask array (chunked by rows) is fitted from its sufficient statistics, computed
            on the workers of the Dask client in context (:mod:`bayes_rvm.estimators.distributed`):
            ``centres=("random", n)`` or given centres, ``gamma`` a number, ``"scale"``, ``"auto"``,
            the default rule or ``"evidence_ard"`` (on at most 1000 rows fetched to the client),
            type-II only; the
            same fit as in memory on the same data, to rounding (which a badly conditioned basis
            can turn into another optimum: docs/large_data.md).
        y : array-like or dask.array.Array of shape (n_samples,) or (n_samples, n_outputs)
            Targets; several outputs share the relevance vectors and the noise level.

            Rows that repeat another exactly (the same inputs and the same targets) are fitted
            once, with a warning, when the noise is estimated: two draws with continuous noise
            do not coincide, and with them the evidence grows without bound as the noise goes to
            0 wherever the basis can interpolate the distinct rows (the width rules ran to
            narrow widths, a noise sd of 4e-7 and a test error twice the de-duplicated fit's).
            With ``likelihood_params["noise_variance"]`` given they count as repeated
            measurements.
        **sample_kwargs
            Under ``inference="mcmc"``, passed to :func:`bayes_rvm.inference.sample_mcmc` for
            this fit, for example ``keep_warmup=True`` (keep the warmup groups in ``idata_`` and
            in saved files), ``nuts={"target_accept": 0.95}`` or ``progressbar=False``. Draws,
            chains, sampler and seed are the estimator's parameters (``sampler_config``,
            ``random_state``).
            Under ``inference="vi"``, passed to :func:`bayes_rvm.inference.variational.fit_vi` (over
            ``sampler_config["vi_kwargs"]``), for example ``progressbar=True`` or ``n=50_000``.

        Returns
        -------
        self : RVR
        """
        self._start_fit(sample_kwargs)
        if is_dask_collection(X) or is_dask_collection(y):
            return self._fit_dask(X, y, sample_kwargs)
        X, y = self._check_data(X, y, sample_kwargs)
        problem = self._problem(None, y)
        engine = self.make_engine()
        self.statistics_ = None
        if self._on_statistics(X):
            basis, problem, fit = self._fit_data(
                StatisticsData(
                    X,
                    y,
                    chunk_rows=None if self.chunk_rows == "auto" else self.chunk_rows,
                    noise_variance=self._cfg.noise_variance,
                    progress=True if self.verbose else "auto",
                ),
                problem,
                engine,
                centres=self._candidate_centres(X),
            )
        elif self._learns_width():
            basis, problem, fit = self._select_width(
                X,
                problem,
                engine,
                criterion=self._likelihood().width_criterion(problem),
                log_scale=problem.targets.size * np.log(problem.scale),
                gradient=self._likelihood().width_gradient,
            )
        else:
            basis, Phi = self._make_basis(X)
            problem = problem.with_design(Phi)
            fit = fit_problem(problem, engine)
            self._set_width(basis, None)
        fit = self._keeping_the_level(problem, engine, fit)
        self._warn_if_interpolating(problem, fit)
        self._warn_if_dense(fit)
        self._warn_if_noise_differs(problem, fit)
        self._set_fitted(basis, problem.unscale(fit), single=y.ndim == 1)
        # Enough of the training problem to build the type-II DataTree on demand (a fit from
        # statistics keeps the inputs and targets only: an N x K design is what it avoids).
        self._fitted_on_statistics = self.statistics_ is not None
        phi = None if self._fitted_on_statistics else problem.active_design(fit.active)
        self._finish_fit(X, TrainingData(phi_active=phi, y=y), fit)
        self._predictor_obj = self._make_predictor()
        return self

    def _fit_data(self, data, problem, engine, *, centres):
        """The fit of a data source (:class:`StatisticsData`): ``(basis, problem, fit)``."""
        search = self._width_search() if self._learns_width() else None
        found = data.fit(problem, engine, search=search, centres=centres, fit_basis=self._fit_basis)
        self.statistics_ = found.statistics
        self._set_width(found.basis, found.path)
        if found.search is not None:
            self.width_selection_ = found.search
        return found.basis, found.problem, found.fit

    def _fit_dask(self, X, y, sample_kwargs: dict):
        """``fit(X, y)`` with ``X`` or ``y`` a Dask array (:class:`DaskData`); the estimator."""
        if sample_kwargs:
            raise TypeError(
                f"fit on Dask arrays takes no sampler arguments, got {sorted(sample_kwargs)}."
            )
        if self.chunk_rows is None:
            raise ValueError(
                "RVR(chunk_rows=None) asks for the design in memory, but X is a Dask array, "
                "fitted from its sufficient statistics on the cluster: leave chunk_rows='auto' "
                "(or fit on X.compute(), y.compute())."
            )
        if self.inference != "type2":
            raise ValueError(
                f"RVR(inference={self.inference!r}) on Dask arrays: a fit on a cluster is "
                "type-II only; sample on X.compute(), y.compute() with chunk_rows='auto' (MCMC "
                "from the sufficient statistics on one machine)."
            )
        self._check_statistics_fit()
        self._check_priors()
        X, y = dask_training_data(X, y)
        cfg = self._cfg
        spec = cfg.centres if cfg.centre_method == "given" else cfg.centre_method
        centres = dask_centres(X, spec, cfg.n_centres, self.random_state)
        data = DaskData(
            X, y, noise_variance=cfg.noise_variance, progress=True if self.verbose else "auto"
        )
        search = self._width_search() if self._learns_width() else None
        found = data.fit(
            self.make_engine(),
            search=search,
            centres=centres,
            scale_gamma=self._width_rule().basis_gamma == "scale",
            fit_basis=self._fit_basis,
        )
        self.statistics_ = found.statistics
        self._set_width(found.basis, found.path)
        if found.search is not None:
            self.width_selection_ = found.search
        self._warn_if_interpolating(found.problem, found.fit)
        self._set_fitted(found.basis, found.problem.unscale(found.fit), single=y.ndim == 1)
        self._fitted_on_statistics = True
        # No training rows on the client: what predictions need is in the fit and the basis.
        none = TrainingData(phi_active=None, y=np.empty((0, *y.shape[1:])))
        self._finish_fit(np.empty((0, X.shape[1])), none, found.fit)
        self._predictor_obj = self._make_predictor()
        return self

    def _on_statistics(self, X: np.ndarray) -> bool:
        """Whether ``fit`` reads the design through its sufficient statistics (``chunk_rows``)."""
        # Under MCMC the design path's pointwise log likelihood holds N values a draw.
        draws = self._cfg.draws * self._cfg.chains if self.inference == "mcmc" else 0
        return reads_row_blocks(self, X.shape[0], self._check_statistics_fit, per_row=draws)

    def _check_statistics_fit(self) -> None:
        """What a fit from sufficient statistics cannot do, as a ValueError naming the cause."""
        reason = statistics_refusal(self)
        if reason is not None:
            raise ValueError(
                f"RVR(chunk_rows={self.chunk_rows!r}) fits from sufficient statistics, but "
                f"{reason}. Set chunk_rows=None for the in-memory design."
            )

    def _require_design(self, what: str) -> None:
        """A ValueError for ``what`` when the fit was made from sufficient statistics."""
        if getattr(self, "_fitted_on_statistics", False):
            raise ValueError(
                f"RVR.{what} needs the N x K training design, which a fit from sufficient "
                "statistics (chunk_rows) does not keep: refit with chunk_rows=None (on a subset "
                "of rows if the design does not fit in memory)."
            )

    def _check_data(self, X, y, sample_kwargs: dict) -> tuple[np.ndarray, np.ndarray]:
        """``fit``'s checks: the data (repeated rows dropped), the parameters, the sampler's."""
        X, y = training_data(self, X, y, regression=True, min_samples=2)
        y = self._check_targets(y)
        self._check_predictive()
        self._check_priors()
        self._keep_sample_kwargs(sample_kwargs)
        if self.inference == "vi":
            from bayes_rvm.inference.variational import FIT_VI_OPTIONS, check_vi_kwargs

            own = {k: v for k, v in self._sample_kwargs.items() if k not in FIT_VI_OPTIONS}
            check_vi_kwargs({**(self._cfg.vi_kwargs or {}), **own})
        as_prior(self._cfg.noise_prior, "noise_prior", positive=True)
        T = y[:, None] if y.ndim == 1 else y
        if not self._likelihood().estimates_noise:  # repeated rows: repeated counts
            return X, y
        if self._cfg.noise_variance is None and self.kernel != "precomputed":
            keep = rows_to_fit(X, y)
            return X[keep], y[keep]
        if self._cfg.noise_variance is None and distinct_rows(X, T).size < X.shape[0]:
            # The kernel matrix's columns are the training inputs too: a row dropped here
            # would leave predict's kernel with a column too many.
            warn_at_user(
                "some training samples repeat others exactly (identical kernel rows and "
                "targets): with them the evidence is unbounded as the noise goes to 0. With "
                "kernel='precomputed' they cannot be dropped here: drop them from the rows and "
                "columns of the training kernel (and the columns of the test kernels), or give "
                "likelihood_params={'noise_variance': ...}."
            )
        return X, y

    def _warn_if_interpolating(self, problem: Problem, fit: EvidenceFit) -> None:
        """:func:`warn_if_interpolating` where the fit's own noise estimate is what predicts:
        Gaussian noise, estimated, type-II (MCMC and VI sample the noise from there)."""
        if (
            self.inference == "type2"
            and self.likelihood == "gaussian"
            and self._cfg.noise_variance is None
        ):
            warn_if_interpolating(problem, fit)

    def _warn_if_dense(self, fit: EvidenceFit) -> None:
        """Warn where the Student-t prior's MAP-II fit at the default ``nu`` kept many basis
        functions.

        Its alphas stay finite, and ``threshold_alpha`` (on unit-norm columns) decides
        relevance, so the count grows with N on a basis of one function per row: on sinc at the
        default width, 6 relevance vectors at N = 100, 17 at 300, 127 at 1000, where the ARD
        prior keeps 5 at each (and so does ``solver="sequential"`` under the Student-t prior).
        """
        kept, total = fit.active.size, fit.alpha.size
        if (
            self.prior == "student_t"
            and self.inference == "type2"  # MCMC and VI sample their columns, pruning none
            and self._cfg.nu == "auto"  # a nu of one's own chooses how dense
            and self._solver() == "mackay"
            and kept > max(DENSE_LEAST, DENSE_FRACTION * total)
        ):
            warn_at_user(
                f"prior='student_t' kept {kept} of {total} basis functions: its alphas stay "
                f"below threshold_alpha={self._threshold_alpha():g} on many similar basis "
                "functions, more of them as N grows. For a sparse fit use solver='sequential' "
                "(which leaves a basis function out where its prior term outweighs its evidence "
                "gain), a smaller nu in prior_params, or prior='ard'."
            )

    def _warn_if_noise_differs(self, problem: Problem, fit: EvidenceFit) -> None:
        """Warn where outputs that share the noise level (one ``beta`` for all, as the RVM of
        several outputs has) fit with residual sds more than :data:`OUTPUT_NOISE_RATIO` apart:
        each one's intervals are then off (outputs of noise sd 0.2 and 3 sharing an sd of 2.16:
        90% intervals covered 100% and 74% of new points)."""
        if (
            self.likelihood != "gaussian"
            or self._cfg.noise_variance is not None
            or problem.statistics is not None
            or problem.targets.ndim < 2
            or problem.targets.shape[1] < 2
        ):
            return
        residual = problem.targets - problem.design[:, fit.active] @ fit.posterior.mean
        sd = np.sqrt(np.mean(residual * residual, axis=0)) * problem.scale
        if sd.max() > OUTPUT_NOISE_RATIO * sd.min():
            warn_at_user(
                f"the {sd.size} outputs share one noise level, but their residual sds differ "
                f"({', '.join(f'{v:.3g}' for v in sd)}): each output's predictive intervals are "
                "off (too wide for the quiet ones, too narrow for the noisy). Fit one RVR per "
                "output, or scale the outputs to a common noise level."
            )

    def _problem(self, Phi, y) -> Problem:
        """The normalised problem of ``y`` on the design ``Phi`` (None: a design to come)."""
        return self._likelihood().problem(Phi, y, self._cfg.noise_variance)

    def _check_targets(self, y: np.ndarray) -> np.ndarray:
        """The targets for the chosen likelihood; a ValueError naming what it cannot take."""
        return self._likelihood().check(
            y,
            noise_variance=self._cfg.noise_variance,
            star=self.predictive == "rvm*",
            sampled_width=isinstance(self.gamma, Prior),
            ard_width=isinstance(self.gamma, str) and self.gamma == "evidence_ard",
        )

    def _likelihood(self):
        """The observation model (:mod:`bayes_rvm.estimators.likelihoods`) of ``likelihood``."""
        return REGRESSION_LIKELIHOODS[self.likelihood]

    def _mcmc_basis(self) -> str:
        """``mcmc_basis`` resolved: ``"auto"`` is ``"relevant"`` for a sampled width, a fit from
        sufficient statistics or a likelihood whose weights MCMC samples, else all."""
        if self._cfg.mcmc_basis != "auto":
            return self._cfg.mcmc_basis
        # From statistics (N of 10^5 and more) the alphas of the columns the type-II fit
        # pruned are not identified: their chains disagree (R-hat 1.31 at N = 10^6, 200
        # centres, 2 x 500 draws, against 1.014 over the 46 relevance vectors, in a quarter
        # of the time; benchmarks/bench_mcmc.py --sections large).
        statistics = getattr(self, "statistics_", None) is not None
        auto = "relevant" if self._samples_width() or statistics else "all"
        return self._likelihood().mcmc_basis(auto, self.inference)

    def _mcmc_initvals(self, fit_n) -> dict:
        init = super()._mcmc_initvals(fit_n, decades=self._likelihood().init_alpha_decades)
        return self._likelihood().initvals(
            init,
            fit=self.fit_,
            fit_n=fit_n,
            columns=self._mcmc_columns(),
            n_basis=self.basis_.n_basis_,
        )

    def _target_accept(self) -> float | None:
        return self._likelihood().target_accept or super()._target_accept()

    def _per_feature_width_ok(self) -> bool:
        return self._likelihood().per_feature_width

    def score(self, X, y, sample_weight=None) -> float:
        """The coefficient of determination; for counts the fraction of Poisson deviance explained.

        ``likelihood="gaussian"`` or ``"student_t"``: R^2 of :meth:`predict` (scikit-learn's
        regressor score). ``likelihood="poisson"``: D^2 = 1 - D(y, rate) / D(y, mean(y)), the
        Poisson deviance of the predicted rates against that of the constant mean, as
        :meth:`sklearn.linear_model.PoissonRegressor.score`: 1 is perfect, 0 the constant model.
        """
        check_is_fitted(self, "fit_")
        return self._likelihood().score(y, self.predict(X), sample_weight=sample_weight)

    def _square_matrices(self) -> int:
        # MacKay's engine holds the Gram matrix, and so does the marginal model MCMC samples.
        squares = int(self._solver() == "mackay")
        return squares + int(self._uses_draws() and self._mcmc_basis() == "all")

    def make_engine(self) -> EvidenceOptions:
        """The type-II engine of this estimator: the options that name it (solver, settings).

        ``fit_problem(Problem.regression(Phi, y), est.make_engine())`` is the fit ``fit`` makes
        at a fixed width, on the normalised problem; cross-validation and the width search run it
        the same way.
        """
        mackay = self._solver() == "mackay"
        return EvidenceOptions(
            solver=self._solver(),
            alpha_prior=self._alpha_prior(),
            tol=self.tol,
            max_iter=self.max_iter,
            **({"threshold_alpha": self._threshold_alpha()} if mackay else {}),
            progress=True if self.verbose else "auto",
            noise_nu=self._cfg.noise_nu if self.likelihood == "student_t" else None,
            free_bias=self.bias == "free",
        )

    def make_model(self, *, form: str = "marginal", offset=None):
        """A fresh :class:`pymc.Model` of this fit's problem, in the units of ``X`` and ``y``.

        The model ``inference="mcmc"`` samples (:attr:`model_` is ``make_model()``): the design
        of the training inputs over the MCMC columns (``mcmc_basis``), the targets, and the
        estimator's hyperpriors, with the column norms and the target RMS the engines normalise
        by written into the graph (``phi_scale``, ``y_scale``). See
        :func:`bayes_rvm.models.graphs.rvm_regression_model`.

        Parameters
        ----------
        form : {"marginal", "joint"}, default="marginal"
            ``"joint"`` samples the weights, whitened by their Gaussian posterior given the
            hyperparameters and your terms (:mod:`bayes_rvm.models.whitening`): the form to
            extend, which ``pm.sample`` samples as it does the marginal one.
            ``likelihood="student_t"``: the weights have no closed-form marginal under t noise;
            they are sampled, whitened in the same way at the t noise's Fisher information,
            whatever ``form`` says.
        offset : ndarray or callable, optional
            Terms of your own in the mean (a fixed array, or ``offset(model) -> tensor`` that
            may create variables with their own priors). Sample the result with ``pm.sample``
            and complete it with :func:`bayes_rvm.inference.complete_posterior`.

        Returns
        -------
        pymc.Model
        """
        check_is_fitted(self, "fit_")
        cfg = self._cfg
        priors = {
            "prior": self.prior,
            "alpha_prior": self._mcmc_alpha_prior(
                self._likelihood().alpha_prior if self.prior == "ard" else None
            ),
            "nu": self._mcmc_student_t(),
            "noise_prior": as_prior(cfg.noise_prior, "noise_prior"),
            "noise_sd": None if cfg.noise_variance is None else float(cfg.noise_variance) ** 0.5,
        }
        if getattr(self, "_fitted_on_statistics", False):
            inputs, st = self.training_.inputs, self.statistics_
            cols = self._mcmc_columns()

            def rows_of(rows):
                return self.basis_.transform(inputs[rows], columns=cols), self.training_.y[rows]

            has_rows = inputs is not None and inputs.shape[0] == st.n
            return statistics_model(
                st, cols, rows_of if has_rows else None, form=form, offset=offset, priors=priors
            )
        self._require_design("make_model")
        if self._samples_width():
            return self._width_model(form, offset)
        Phi, norms, cols = self._mcmc_design()
        y = self.training_.y
        likelihood = self._likelihood()
        reference = likelihood.reference(self.fit_, cols)
        return likelihood.model(
            Phi,
            y,
            form=form,
            centred=likelihood.centring(self.fit_, cols, self._mcmc_basis() == "relevant"),
            **({} if reference is None else {"reference": reference}),
            phi_scale=norms,
            y_scale=likelihood.y_scale(y),
            offset=offset,
            basis_names=cols,
            noise_nu=cfg.noise_nu,
            **priors,
        )

    def _fit_variational(self, model) -> xr.DataTree:
        """ADVI on ``model`` (``fit_vi``) with this estimator's settings.

        ``vi_kwargs`` and the keyword arguments of ``fit`` (the latter win) reach ``fit_vi``;
        ``draws`` and ``random_state`` are the estimator's.
        """
        from bayes_rvm.inference.variational import fit_vi

        options = {"progressbar": bool(self.verbose), "advice": "estimator"}
        options |= dict(self._cfg.vi_kwargs or {}) | getattr(self, "_sample_kwargs", {})
        dt = fit_vi(
            model,
            draws=self._cfg.draws,
            random_seed=self._seed(),
            **options,
        )
        dt.attrs.update(self._tree_attrs())
        return self._fingerprinted(dt)

    def _width_model(self, form: str, offset):
        """The model with the width sampled (:func:`bayes_rvm.models.graphs.rvm_width_model`)."""
        from bayes_rvm.models.graphs import rvm_width_model

        if form != "marginal" or offset is not None:
            raise ValueError(
                "with a sampled kernel width (gamma a Prior) the model is the weight-marginalised "
                "one with no offset; build variants from bayes_rvm.models.graphs.rvm_width_model."
            )
        cfg = self._cfg
        if self.prior == "ard":
            alpha_prior = self._mcmc_alpha_prior("ard")
        elif isinstance(cfg.nu, Prior):
            raise ValueError("a sampled kernel width takes a fixed nu under prior='student_t'.")
        cols = np.sort(self._mcmc_columns())
        if self.prior == "student_t":
            alpha_prior = default_alpha_prior("student_t", self._mcmc_student_t())
        n_centres = self.basis_.n_centres_
        y = self.training_.y
        return rvm_width_model(
            self.training_.x_train,
            y,
            self.basis_.centres_[cols[cols < n_centres]],
            kernel=self.kernel,
            gamma_prior=self.gamma,
            alpha_prior=alpha_prior,
            noise_prior=as_prior(cfg.noise_prior, "noise_prior"),
            noise_sd=None if cfg.noise_variance is None else float(cfg.noise_variance) ** 0.5,
            bias=bool(np.any(cols >= n_centres)),
            y_scale=target_scale(y),
            basis_names=cols,
        )

    @property
    def idata_(self):
        """The fit as an ArviZ DataTree (see the class docstring); type-II: built on first use.

        A type-II tree also holds the ``loo`` group: the cross-validated log predictive
        densities from :meth:`refit_loo`, which :func:`bayes_rvm.posterior.comparison.compare`
        reports
        instead of PSIS-LOO (which keeps the hyperparameters tuned on all the data). Building it
        costs the refits: N fits up to 200 rows, 10 beyond. Measured on sinc, N = 100, on a busy
        2-core machine: 3-5 s with the sequential engine (the ARD default), 20-45 s with MacKay's
        (the Student-t default, or ``solver="mackay"``); N = 1000, 10-fold: about 1 s.
        """
        check_is_fitted(self, "fit_")
        if self._tree_cache is None:
            from bayes_rvm.inference import type2_datatree

            self._require_design("idata_")

            k = self.active_.size
            local = dataclasses.replace(self.fit_, active=np.arange(k), alpha=self.alpha_)
            seed = self._seed()
            self._tree_cache = self._fingerprinted(
                type2_datatree(
                    local,
                    self.training_.phi_active,
                    self.training_.y,
                    basis_names=self.active_,
                    random_seed=seed,
                    attrs=self._tree_attrs(),
                    # Student-t: each refit is an EM run; 10 folds keep the tree's cost bounded.
                    loo=self.refit_loo(
                        n_folds=10 if self.likelihood == "student_t" else None, random_state=seed
                    ),
                )
            )
            self._tree_cache["posterior"] = self._free_variables(
                self._tree_cache["posterior"].dataset
            )
        return self._tree_cache

    def _free_variables(self, post):
        """The type-II posterior with the free variables of :meth:`make_model`'s graphs.

        ``alpha_rel = alpha rms(y)^2 / rms(phi_i)^2`` (the column scale of the hyperpriors,
        :func:`~bayes_rvm.evidence.problem.prior_column_scale`), ``sigma_rel = sigma / rms(y)`` and
        the
        joint form's ``z = w sqrt(alpha)``, over the retained columns: PyMC's own calls on a
        model of those columns (``mcmc_basis="relevant"``) then use the type-II posterior rather
        than drawing them from their priors; on a model of all columns the shapes differ and
        PyMC stops.
        """
        y_scale = self._likelihood().y_scale(self.training_.y)
        phi = self.training_.phi_active
        norms = prior_column_scale(column_scale(phi), phi.shape[0])
        alpha = post["alpha"]
        out = post.assign(alpha_rel=alpha * y_scale**2 / norms**2, z=post["w"] * np.sqrt(alpha))
        if "sigma" in post:
            out = out.assign(sigma_rel=post["sigma"] / y_scale)
        if self._cfg.noise_variance is not None:
            out = out.drop_vars("sigma_rel")  # the noise is data in the model, not a variable
        return xr.DataTree(out)

    def refit_loo(self, n_folds: int | None = None, random_state=None):
        """Cross-validated log predictive densities of the type-II fit, hyperparameters refitted.

        Each left-out row (or fold) is predicted by the engine's fit on the other rows, run
        cold with this estimator's settings, as the full fit was: brute-force leave-one-out of
        the type-II procedure (:func:`bayes_rvm.evidence.loo.refit_loo`). The kernel width stays
        that of the full fit (a learned width is not re-chosen per refit). With the default
        centres each refit loses the left-out rows' own kernel columns, as a fit on the other
        rows alone would; given centres stay.

        Parameters
        ----------
        n_folds : int, optional
            Default: N (exact leave-one-out, N refits) up to 200 rows, 10-fold beyond.
        random_state : int, RandomState or None
            Shuffles the rows into folds (K-fold only). Default: the estimator's
            ``random_state``, whose folds the ``loo`` group of :attr:`idata_` holds.

        Returns
        -------
        bayes_rvm.evidence.loo.RefitLOO
            ``elpd_i`` (ln p(t_n | the other rows), summed over outputs, in the units of ``y``),
            ``method``, ``n_folds``, ``seconds``.
        """
        from bayes_rvm.evidence import refit_loo

        random_state = self._seed() if random_state is None else random_state

        check_is_fitted(self, "fit_")
        self._require_design("refit_loo")
        train = self.training_
        problem = self._problem(self.basis_.transform(train.inputs), train.y)
        engine = self.make_engine()
        # The MacKay engine takes over a fold where the sequential one fails (its Newton step
        # met a non-finite curvature on a Friedman #2 subset of 29 rows).
        other = "mackay" if self._solver() == "sequential" else "sequential"
        backup = clone(self).set_params(solver=other).make_engine()

        def fold(engine: EvidenceOptions):
            # The rows' normalised design and targets, as the full problem's scaling left them.
            return lambda P, Tr: fit_problem(
                problem.with_design(P, normalised=True, targets=Tr), engine
            )

        basis = self.basis_
        # Kernel columns centred on the training rows (the default centres): a refit without a
        # row has no basis function on it, as a fit on the other rows alone would not.
        own = basis.n_centres_ == problem.design.shape[0] and (
            basis.centres_ is None or np.array_equal(basis.centres_, train.inputs)
        )
        res = refit_loo(
            fold(engine),
            problem.design,
            problem.targets,
            n_folds=n_folds,
            random_state=random_state,
            fallback=fold(backup),
            own_columns=own,
        )
        # Densities of T / scale -> densities of T: the Jacobian of the scaling, per output.
        d = problem.targets.shape[1]
        return dataclasses.replace(res, elpd_i=res.elpd_i - d * np.log(problem.scale))

    def _set_fitted(self, basis: KernelBasis, fit: EvidenceFit, *, single: bool) -> None:
        self.basis_ = basis
        self.n_features_in_ = basis.n_features_in_
        self.fit_ = fit
        self.active_ = fit.active
        is_rv = fit.active < basis.n_centres_
        self.relevance_ = fit.active[is_rv]
        self.relevance_vectors_ = (
            None if basis.centres_ is None else basis.centres_[self.relevance_]
        )
        mean = fit.mean[:, 0] if single else fit.mean
        self.coef_ = mean[is_rv]
        # The bias is at most one column; summing over none gives the 0 of an absent bias.
        self.intercept_ = float(mean[~is_rv].sum()) if single else mean[~is_rv].sum(axis=0)
        self.alpha_ = fit.alpha[fit.active]
        with np.errstate(over="ignore"):  # out of range only where unscale_alpha warned
            self.sigma_ = fit.covariance
        self.noise_variance_ = 1.0 / fit.beta if fit.likelihood != "poisson" else None
        self.noise_nu_ = float(getattr(fit.posterior, "nu", np.inf))
        self.outlier_weights_ = getattr(fit.posterior, "weights", None)
        self.log_evidence_ = fit.log_evidence
        self.scores_ = fit.trace
        self.n_iter_ = fit.n_iter
        self.converged_ = fit.converged
        self._single_output = single

    def _persisted_state(self) -> dict:
        """What a saved model holds: basis, engine result, training arrays, DataTree."""
        return {
            "basis": self.basis_,
            "fit": self.fit_,
            "extras": {
                "single": self._single_output,
                "width_path": path_to_json(self.width_path_),
                "statistics": bool(getattr(self, "_fitted_on_statistics", False)),
            },
            # A fit from statistics keeps them (M x M): its MCMC model is built from them.
            "arrays": {
                **self.training_.to_arrays(),
                **statistics_arrays(getattr(self, "statistics_", None)),
            },
            "idata": self._tree_cache,
        }

    def _restore_state(self, state: dict) -> None:
        self._settings = self._resolve_settings()
        self._set_fitted(state["basis"], state["fit"], single=state["extras"]["single"])
        self._set_width(state["basis"], path_from_json(state["extras"].get("width_path")))
        self.training_ = TrainingData.from_arrays(state["arrays"])
        self._tree_cache = state.get("idata")
        self._model = None
        # A fit from statistics keeps no training design, but its statistics.
        self._fitted_on_statistics = bool(state["extras"].get("statistics", False))
        self.statistics_ = statistics_from_arrays(state["arrays"], self.basis_.n_basis_)
        self._predictor_obj = None  # chosen again on first use, from the loaded state

    @classmethod
    def _check_persisted(cls, state: dict, params: dict, fail: Fail) -> None:
        """A stored regressor's own invariants: one fit, its outputs, its training arrays."""
        fits = state["fit"] if isinstance(state["fit"], list) else [state["fit"]]
        if len(fits) != 1:
            fail(f"{len(fits)} fits for a regression model")
        fit = fits[0]
        single = state["extras"].get("single")
        if not isinstance(single, bool):
            fail(f"extras 'single' = {single!r} is not a boolean")
        D = fit.mean.shape[1]
        if single and D != 1:
            fail(f"a single-output model with {D} outputs")
        arrays = state["arrays"]
        stats = statistics_from_arrays(arrays, state["basis"].n_basis_, fail)
        if stats is None and state["extras"].get("statistics", False):
            fail("a fit from sufficient statistics without its statistics")
        phi, y = arrays.get("phi_active"), arrays.get("y")
        if state["extras"].get("statistics", False) and y is not None and phi is None:
            # A fit from sufficient statistics keeps no training design (chunk_rows).
            phi = np.empty((y.shape[0], fit.active.size))
        if phi is None or y is None:
            fail("the training arrays phi_active and y are missing")
        if (y.ndim == 1) != single or (y.ndim == 2 and y.shape[1] != D):
            fail(f"training targets of shape {y.shape} for {D} output(s) (single={single})")
        if phi.shape != (y.shape[0], fit.active.size):
            fail(
                f"training design of shape {phi.shape} for {y.shape[0]} samples and "
                f"{fit.active.size} active basis functions"
            )
        basis: KernelBasis = state["basis"]
        if params.get("centres") is None and basis.centres_ is not None and phi.size:
            # Without a subset of centres the training inputs are the centres: the stored training
            # design must be the kernel at them, which checks the kernel, its coefficient and the
            # active set against each other.
            expected = basis.transform(basis.centres_, columns=fit.active)
            if not np.allclose(phi, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max()):
                fail("the stored training design does not match the kernel at the stored centres")
        idata = state["idata"]
        if idata is not None and "posterior" in idata.children:
            post = idata["posterior"].to_dataset()
            if "w" in post and BASIS in post["w"].dims:
                cols = post[BASIS].values
                if cols.size and (cols.min() < 0 or cols.max() >= basis.n_basis_):
                    fail("posterior weights on basis functions that do not exist")
                if post["w"].sizes.get(OUTPUT, 1) != D:
                    fail(f"posterior weights for {post['w'].sizes.get(OUTPUT, 1)} outputs, not {D}")

    @one_blas_thread
    def predict(self, X, return_std: bool = False, return_cov: bool = False):
        """Predictive mean, and optionally its standard deviation or covariance.

        Type-II, ``predictive="rvm"``: ``N(m^T phi(x), 1/beta + phi(x)^T Sigma phi(x))``
        (Tipping 2001; Bishop 2006, section 7.2.1), built from the relevance vectors' kernel columns
        only. ``predictive="rvm*"``: the augmented predictive of
        :mod:`bayes_rvm.posterior.predictive`.
        MCMC: the moments of the mixture over the posterior draws (within-draw noise plus the
        spread of the regression function between draws). Counts (``likelihood="poisson"``):
        the posterior mean of the rate ``exp(phi(x)^T w)``, and the rate's standard deviation or
        covariance (lognormal moments of the Laplace latent, or over the MCMC draws): the
        uncertainty of the rate, not of a new count (docs/estimators.md, *Likelihoods of RVR*).

        The type-II predictive conditions on hyperparameters tuned to the training targets and
        ignores their uncertainty, so its intervals under-cover: nominal 90% intervals covered
        87.4% of new targets on average over 20 sinc data sets (N = 100, noise sd 0.1, width 2;
        79-94% on single sets) and 86.4% at width 1. That is the method, not a defect;
        ``inference="mcmc"`` averages over the hyperparameters, and ``predictive="rvm*"``
        restores the variance away from the data (notebook 08,
        ``benchmarks/bench_predictive.py``).

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)
            Inputs (for ``kernel="precomputed"``: the kernel between them and the training inputs).
            A Dask array gives lazy Dask arrays with its row blocks, each block predicted where
            it lives (:func:`bayes_rvm.estimators.distributed.predict_dask`; not with
            ``return_cov``).
        return_std : bool, default=False
            Also return the predictive standard deviation of new targets (noise included).
            Student-t noise (``likelihood="student_t"``): ``predict`` returns the location, and
            the standard deviation is that of a new observation,
            ``sqrt(phi^T Sigma phi + nu / (nu - 2) sigma^2)`` (``inf`` for ``nu <= 2``, where the
            t noise has no variance); the location's own standard deviation is
            ``sqrt(phi^T Sigma phi)`` (``fit_.predict(phi, with_noise=False)``). The predictive
            is a t, not a Gaussian: for intervals use ``sample_y``.
        return_cov : bool, default=False
            Also return the joint predictive covariance of new targets (noise included), as
            :class:`sklearn.gaussian_process.GaussianProcessRegressor` does. At most one of
            ``return_std`` and ``return_cov``.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        y_std : ndarray of the same shape, only if ``return_std``
        y_cov : ndarray of shape (n_samples, n_samples) or (n_samples, n_samples, n_outputs),
            only if ``return_cov``
        """
        if return_std and return_cov:
            raise RuntimeError("At most one of return_std or return_cov can be requested.")
        check_is_fitted(self, "fit_")
        if is_dask_collection(X):
            if return_cov:
                raise ValueError(
                    "return_cov=True on a Dask array would be an N x N matrix in memory: compute "
                    "the rows whose joint covariance you need (X[rows].compute()) first."
                )
            return predict_dask(self, X, return_std=return_std)
        dtype = output_dtype(X)
        X = new_inputs(self, X)
        predictor = self._predictor()
        # Without a covariance, the draws are taken in blocks of rows.
        draws = predictor.n_draws if return_cov else 0
        self._check_output_memory(
            "predict", X.shape[0], self._n_outputs(), draws=draws, cov=return_cov
        )
        out = predictor.predict(self._rows(X), std=return_std, cov=return_cov)
        if dtype == np.float64:
            return out
        return tuple(a.astype(dtype) for a in out) if isinstance(out, tuple) else out.astype(dtype)

    def _n_outputs(self) -> int:
        return 1 if self._single_output else int(self.fit_.mean.shape[1])

    def _make_predictor(self):
        """The predictor of the resolved settings: the type-II posterior or the draws, RVM*
        around either."""
        star = self.predictive == "rvm*"
        draws = self._posterior_draws() if self._uses_draws() else None
        training = None
        if star:
            phi = self.training_.phi_active
            if draws is not None:
                phi = self.basis_.transform(self.training_.x_train, columns=draws.columns)
            training = (phi, self.training_.y)
        return regression_predictor(
            likelihood=self.likelihood,
            star=star,
            fit=self.fit_,
            single=self._single_output,
            draws=draws,
            training=training,
        )

    @one_blas_thread
    def sample_y(self, X, n_samples: int = 1, random_state=0) -> np.ndarray:
        """Draws of new targets from the predictive distribution at ``X`` (noise included).

        Counts (``likelihood="poisson"``): Poisson counts at rates ``exp(phi^T w)``, one weight
        draw (Laplace posterior or MCMC draw) per sample. Otherwise, type-II: the joint
        Gaussian of :meth:`predict` with ``return_cov=True``. MCMC: exact
        draws from the mixture (a posterior draw chosen at random, its regression function plus
        its noise). The same interface as
        :meth:`sklearn.gaussian_process.GaussianProcessRegressor.sample_y`.

        Parameters
        ----------
        X : array-like of shape (n_samples_X, n_features)
        n_samples : int, default=1
            Number of draws per input.
        random_state : int, RandomState or None, default=0
            Seed of the draws.

        Returns
        -------
        y_samples : ndarray of shape (n_samples_X, n_samples) or
            (n_samples_X, n_outputs, n_samples)
        """
        check_number("n_samples", n_samples, integer=True)
        rng = check_random_state(random_state)
        check_is_fitted(self, "fit_")
        X = new_inputs(self, X)
        predictor = self._predictor()
        self._check_output_memory(
            "sample_y",
            X.shape[0],
            self._n_outputs(),
            draws=predictor.n_draws,
            cov=predictor.joint,
            n_samples=n_samples,
        )
        return predictor.sample(self._rows(X), n_samples, rng)
