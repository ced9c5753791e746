"""scikit-learn estimator :class:`RVC`: the Relevance Vector Classifier.

The binary model is ``p(t = 1 | x) = sigmoid(phi(x)^T w)``; the multiclass one is a true softmax
(multinomial) model with one weight vector per class and one ``alpha`` per basis function shared by
the classes, so the whole classifier keeps a single set of relevance vectors. One-vs-rest
(independent binary RVMs, each with its own relevance set) is available for comparison.

As in :class:`~bayes_rvm.RVR`, the engines work on basis columns of unit norm;
the
weights, precisions and Hessian factor are mapped back exactly (the Laplace evidence is invariant
under that reparametrisation).
"""

from __future__ import annotations

import dataclasses
import warnings
from numbers import Integral

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context, clone
from sklearn.utils._param_validation import Interval, InvalidParameterError, StrOptions
from sklearn.utils.validation import check_is_fitted

from bayes_rvm._warnings import warn_at_user
from bayes_rvm.basis.kernels import WIDTH_KERNELS, KernelBasis
from bayes_rvm.basis.statistics import chunk_rows_for
from bayes_rvm.estimators.base import (
    DEFAULT_GAMMA,
    KERNEL_PARAMS,
    POSITIVE,
    PRIOR_CONSTRAINTS,
    SAMPLER_CONSTRAINTS,
    BaseRVM,
    ParamGroup,
    memory_limit,
    new_inputs,
    output_dtype,
    path_from_json,
    path_to_json,
    training_data,
)
from bayes_rvm.estimators.distributed import is_dask_collection
from bayes_rvm.estimators.large_data import reads_row_blocks
from bayes_rvm.estimators.persistence import Fail, SavedStateMixin
from bayes_rvm.estimators.width_selection import SHARED_INTERCEPT_SCALE
from bayes_rvm.evidence import (
    FREE_LATENT_SD,
    SEARCH_RANK_TOL,
    SOLVERS,
    EvidenceOptions,
    OneVsRestFit,
    Problem,
    TrainingData,
    fit_problem,
    importance_draws,
    shared_laplace_evidence,
)
from bayes_rvm.posterior.class_predictors import (
    ClassTraining,
    ImportanceClasses,
    class_predictor,
    fit_parts,
)
from bayes_rvm.threads import one_blas_thread

__all__ = ["LOO_EXACT_MAX_RVC", "MULTINOMIAL_MAX_CELLS", "RVC", "OneVsRestFit", "one_vs_rest"]

_MULTI_CLASS = ("auto", "multinomial", "ovr")
#: ``multi_class="auto"`` fits one-vs-rest above this many training rows times classes (and the
#: softmax model below). The softmax engine forms a (K C)-square Hessian in O(N (K C)^2) once per
#: step and reads ``Phi^T B_c Phi_active`` for every class, O(N M K C), on its full passes,
#: against O(N M K_c) per binary fit. On all 7291 USPS digits (2-core machine, load 2) the softmax
#: took 466 s wall (422 s CPU) for 5.98% test error with 124 vectors, one-vs-rest 452 s (226 s
#: CPU) for 6.1% with 411: still the dearer of the two in CPU, so the rule stays.
MULTINOMIAL_MAX_CELLS = 10_000
#: Up to this many rows :meth:`RVC.refit_loo` leaves one row out at a time, 10 folds beyond: a
#: classifier's refit costs a Laplace evidence fit and its importance draws (0.2-0.5 s at 100
#: rows on the 2-core machine), a regressor's milliseconds.
LOO_EXACT_MAX_RVC = 50


@dataclasses.dataclass(frozen=True)
class _Refit:
    """A classifier refitted on some rows, as :func:`bayes_rvm.evidence.refit_loo` keeps it."""

    estimator: RVC
    rows: np.ndarray

    @property
    def converged(self) -> bool:
        return bool(self.estimator.converged_)


def one_vs_rest(multi_class: str, n_samples: int, n_classes: int, inference: str = "type2") -> bool:
    """Whether ``multi_class`` fits one binary model per class for this shape of data.

    Two classes are always one binary model. ``"auto"`` is the softmax model for
    ``n_samples * n_classes <= MULTINOMIAL_MAX_CELLS`` (and always under ``inference="mcmc"``,
    which samples the softmax model), else one-vs-rest: a rule on the shape alone, so the same
    data always give the same model.
    """
    if n_classes <= 2:
        return False
    if multi_class == "auto":
        return inference != "mcmc" and n_samples * n_classes > MULTINOMIAL_MAX_CELLS
    return multi_class == "ovr"


def _model_kind(n_classes: int, ovr: bool) -> str:
    """``multi_class_``: ``"binary"``, ``"ovr"`` or ``"multinomial"``."""
    return "binary" if n_classes == 2 else ("ovr" if ovr else "multinomial")


class RVC(ClassifierMixin, SavedStateMixin, BaseRVM):
    """Relevance Vector Classifier (Tipping 2001), fitted by type-II maximum likelihood or sampled.

    The weights of the kernel basis ``phi_i(x) = k(x, x_i)`` (plus an optional bias) have ARD
    priors ``w_i ~ N(0, 1/alpha_i)``; the likelihood is Bernoulli-logit for two classes and
    softmax (or one binary model per class) for more. The evidence is approximated by Laplace's
    method at the posterior mode and maximised over ``alpha``; most ``alpha_i`` run to infinity,
    and the remaining basis functions are the *relevance vectors*.

    Parameters
    ----------
    kernel : str, callable, scikit-learn kernel object or "precomputed", default="rbf"
        Basis kernel; see :class:`bayes_rvm.basis.kernels.KernelBasis`.
    gamma : {"evidence_shared", "evidence", "scale", "auto"}, float or array-like, \
default="evidence_shared"
        Kernel coefficient (rbf: ``1/r^2`` for width ``r``; laplacian: ``1/r``); an array gives
        one per feature. ``"evidence_shared"``: the width that maximises the Laplace evidence
        with one prior precision shared by all weights, less half a nat per well-determined
        parameter; ``"evidence"``: the RVC's own Laplace evidence (it prefers narrow widths);
        ``"scale"``, ``"auto"``: as in :class:`sklearn.svm.SVC`.
    kernel_params : dict, optional
        ``degree`` (default 3) and ``coef0`` (default 1.0) of the polynomial and sigmoid kernels;
        other keys are keyword arguments of a callable kernel, as in :class:`~bayes_rvm.RVR`.
    bias : bool or "free", default=True
        ``True``: a constant basis function with its own ARD prior, pruned like any other.
        ``"free"``: an intercept that is never pruned, prior ``N(0, 10^2)`` in logits (better
        for a rare class). ``False``: no bias.
    centres : None, ("random", n), ("kmeans", n) or array-like of shape (n, n_features)
        Candidate basis functions, as in :class:`~bayes_rvm.RVR`: every training input (None),
        a random or k-means subset of ``n`` points, or given centres.
    chunk_rows : "auto", int or None, default="auto"
        An int builds the design in blocks of that many rows and fits the Laplace model by
        passes over them (memory bounded whatever N); None keeps the design in memory.
        ``"auto"``: blocks when a subset of centres gives a design above 2 GiB, where allowed.
    prior : {"ard", "student_t"}, default="ard"
        ``"ard"``: flat hyperprior on ``log alpha``. ``"student_t"``: ``alpha_i ~ Gamma(nu/2,
        nu/2)``, Student-t weights.
    prior_params : dict, optional
        ``nu`` (float, Prior or "auto"): the Student-t prior's degrees of freedom, as in
        :class:`~bayes_rvm.RVR` (``"auto"``: 1e-4 for the type-II fit, 1 under MCMC).
        ``alpha_prior`` (Prior, or ``"halfcauchy"`` / ``"r2d2"``): MCMC hyperprior of the
        relative precisions under ``"ard"``, default a half-Cauchy of scale 0.1 on
        ``alpha_rel^-1/2`` (:mod:`bayes_rvm.models.priors`).
        ``threshold_alpha`` (float, default 1e9): the largest ``alpha`` (on the unit-norm scale)
        still taken as finite.
    solver : {"sequential", "mackay"}, default="sequential"
        ``"sequential"``: Tipping & Faul's (2003) algorithm on the problem linearised at the
        mode (the fast choice). ``"mackay"``: re-estimation of all alphas with pruning.
    multi_class : {"auto", "multinomial", "ovr"}, default="auto"
        More than two classes: one softmax model with alphas shared across classes, or one
        binary RVM per class. ``"auto"``: softmax up to :data:`MULTINOMIAL_MAX_CELLS` (10,000)
        training rows times classes and always under MCMC, one-vs-rest beyond.
    moderated : {"auto", "importance", "probit"} or bool, default="auto"
        How :meth:`predict_proba` averages over the weights' uncertainty (type-II fits):
        ``"importance"`` sampling from the Laplace Gaussian, ``True`` or ``"probit"`` (MacKay's
        approximation), ``False`` (the posterior mode). ``"auto"``: importance sampling where
        its effective sample size suffices, else the probit; see :attr:`moderation_`.
    predictive : {"rvm", "rvm*"}, default="rvm"
        Latent predictive: the RVM's own, or RVM* (Rasmussen & Quinonero-Candela 2005), whose
        probabilities fall back towards the prior's far from the data (not with
        ``kernel="precomputed"``).
    max_iter : int, default=10000
        Iteration cap of the engine; reaching it warns with ``ConvergenceWarning``.
    tol : float, default=1e-6
        Convergence tolerance on ``log alpha``.
    inference : {"type2", "mcmc"}, default="type2"
        ``"mcmc"``: NUTS over the weights and their precisions of :attr:`model_`, started at the
        type-II fit; :meth:`predict_proba` then averages over the draws. Binary and softmax.
    sampler_config : dict, optional
        Merged over the defaults: ``draws`` (1000 kept per chain, every second of 2000 NUTS
        iterations: ``fit(X, y, thin=1)`` keeps each), ``tune`` (1000), ``chains`` (4),
        ``sampler`` ("nutpie", "numpyro", "pymc" or "blackjax") and ``mcmc_basis`` ("all": the
        full candidate basis; "relevant": only the type-II relevance vectors, cheaper for large
        N but conditional on that selection).
    random_state : int, RandomState or None, default=None
        Seed of the candidate subsets, of the type-II DataTree's draws and of sampling.
    verbose : bool, default=False
        Progress on stderr: sampling's bars, and the width search, the engine's steps and a
        chunked fit's rounds and passes once they run for 2 s (without it, only on a terminal
        or in a notebook).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.
    multi_class_ : {"multinomial", "ovr", "binary"}
        The model fitted: ``multi_class`` with ``"auto"`` resolved.
    basis_ : KernelBasis
        The fitted basis.
    gamma_, length_scale_, width_path_
        The kernel coefficient(s) used, as length scale(s), and a learned width's evidence curve.
    fit_ : EvidenceFit or OneVsRestFit
        The engine's result in original units (for ``"ovr"``, one binary fit per class).
    training_ : bayes_rvm.evidence.problem.TrainingData
        The inputs, class indices and retained columns that prediction and saving use.
    active_ : ndarray of int
        Retained basis functions (the union over classes for ``"ovr"``; ``n_centres`` is the
        bias).
    relevance_ : ndarray of int
        Training samples that are relevance vectors (or indices into ``basis_.centres_``).
    relevance_vectors_ : ndarray of shape (n_relevance, n_features) or None
        The relevance vectors (None for a precomputed kernel).
    coef_ : ndarray of shape (n_relevance,) or (n_relevance, n_classes)
        Posterior mode weights of the relevance vectors (binary: of the class ``classes_[1]``).
    intercept_ : float or ndarray of shape (n_classes,)
        Posterior mode weight of the bias (0 if pruned or absent).
    alpha_ : ndarray of shape (n_active,) or (n_active, n_classes)
        Prior precisions of the retained basis functions (``"ovr"``: per class).
    log_evidence_ : float
        Laplace log evidence (summed over the binary models for ``"ovr"``).
    n_iter_, converged_ : int, bool
        Engine iterations (summed over classes), and whether every engine met its stopping rule.
    chunked_passes_ : dict or None
        A chunked fit's passes over the rows; None for a fit in memory.
    moderation_ : {"importance", "probit", "mode", "mcmc"}
        How :meth:`predict_proba` averages over the weights under the current ``moderated``.
    model_ : pymc.Model
        The PyMC model that MCMC samples, over ``mcmc_basis``, in the units of ``X``.
    idata_ : xarray.DataTree
        The fit in ArviZ form, shaped as :class:`~bayes_rvm.RVR`'s (binary and softmax fits).

    See Also
    --------
    bayes_rvm.estimators.regressor.RVR : The regressor.
    bayes_rvm.estimators.cv.RVCCV : The kernel width by cross-validation.

    Notes
    -----
    The documentation explains each option, with measurements, on its *Estimator options* page
    (``docs/estimators.md``), and the chunked path for large N on *Large data*.

    Examples
    --------
    >>> from sklearn.datasets import make_moons
    >>> from bayes_rvm.estimators.classifier import RVC
    >>> X, y = make_moons(100, noise=0.2, random_state=0)
    >>> clf = RVC(gamma=2.0).fit(X, y)
    >>> proba = clf.predict_proba(X[:3])
    """

    _parameter_constraints: dict = {  # noqa: RUF012 - scikit-learn's convention
        **BaseRVM._shared_constraints,
        "solver": [StrOptions(set(SOLVERS))],
        "multi_class": [StrOptions(set(_MULTI_CLASS))],
        "moderated": ["boolean", StrOptions({"auto", "importance", "probit"})],
        "chunk_rows": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left"), None],
    }
    _param_groups: dict = {  # noqa: RUF012
        "kernel_params": KERNEL_PARAMS,
        "prior_params": ParamGroup(
            {"nu": "auto", "alpha_prior": None, "threshold_alpha": 1e9},
            {**PRIOR_CONSTRAINTS, "threshold_alpha": [POSITIVE]},
        ),
        "sampler_config": ParamGroup(
            {"draws": 1000, "tune": 1000, "chains": 4, "sampler": "nutpie", "mcmc_basis": "all"},
            SAMPLER_CONSTRAINTS,
        ),
    }

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
        solver="sequential",
        multi_class="auto",
        moderated="auto",
        predictive="rvm",
        max_iter=10_000,
        tol=1e-6,
        inference="type2",
        sampler_config=None,
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
        self.solver = solver
        self.multi_class = multi_class
        self.moderated = moderated
        self.predictive = predictive
        self.max_iter = max_iter
        self.tol = tol
        self.inference = inference
        self.sampler_config = sampler_config
        self.random_state = random_state
        self.verbose = verbose

    _is_classifier = True

    def _validate_params(self) -> None:
        if isinstance(self.inference, str) and self.inference == "vi":
            # RVR's option, which scikit-learn's generic message would only leave out.
            raise InvalidParameterError(
                "The 'inference' parameter of RVC must be 'type2' or 'mcmc', got 'vi': "
                "variational inference is RVR's; inference='mcmc' samples a classifier's "
                "posterior."
            )
        super()._validate_params()

    def _square_matrices(self) -> int:
        # MacKay's engine holds a Hessian over every basis function (per class pair if softmax).
        C = self.classes_.size
        coupled = C if getattr(self, "multi_class_", None) == "multinomial" else 1
        return coupled**2 if self.solver == "mackay" else 0

    @_fit_context(prefer_skip_nested_validation=True)
    @one_blas_thread
    def fit(self, X, y, **sample_kwargs) -> RVC:
        """Fit the classifier by maximising the Laplace evidence.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (the square training kernel matrix for ``kernel="precomputed"``).
        y : array-like of shape (n_samples,)
            Class labels of any type scikit-learn accepts (at least two classes).
        **sample_kwargs
            Under ``inference="mcmc"``, passed to :func:`bayes_rvm.inference.sample_mcmc` for
            this fit, for example ``keep_warmup=True`` (keep the warmup groups in ``idata_`` and
            in saved files), ``nuts={"target_accept": 0.95}`` or ``progressbar=False``. Draws,
            chains, sampler and seed are the estimator's parameters.

        Returns
        -------
        self : RVC
        """
        self._start_fit(sample_kwargs)
        if is_dask_collection(X) or is_dask_collection(y):
            raise TypeError(
                "RVC does not fit Dask arrays (its Laplace fit has no sufficient statistics to "
                "gather from the workers): fit on X.compute(), y.compute(), where "
                "chunk_rows='auto' builds a large design in row blocks (docs/large_data.md)."
            )
        X, y = training_data(self, X, y, regression=False, min_samples=2)
        self._check_predictive()
        self._check_priors()
        self._keep_sample_kwargs(sample_kwargs)
        classes, yi = np.unique(y, return_inverse=True)
        if classes.size < 2:
            raise ValueError(
                "RVC needs samples of at least two classes; the data contain only class "
                f"{np.asarray(classes[0]).item()!r}."
            )
        if self.inference == "mcmc" and classes.size > 2 and self.multi_class == "ovr":
            raise ValueError(
                "inference='mcmc' samples the multinomial (softmax) model; use "
                "multi_class='multinomial' with it."
            )
        self.classes_ = classes
        ovr = one_vs_rest(self.multi_class, X.shape[0], classes.size, self.inference)
        self.multi_class_ = _model_kind(classes.size, ovr)
        problem = Problem.classification(None, yi, classes.size, one_vs_rest=ovr)
        engine = self.make_engine()
        self.chunked_passes_ = None
        if reads_row_blocks(self, X.shape[0], self._check_chunked):
            basis, problem, fit_n = self._fit_chunked(X, problem, engine, yi)
        elif self._learns_width():
            if self._width_rule().kind == "evidence_ard":
                raise ValueError(
                    "gamma='evidence_ard' needs the closed-form width gradient of the Gaussian "
                    "likelihood (RVR); RVC learns one width: use gamma='evidence'."
                )
            # The shared-precision evidence of each class against the rest, summed.
            onehot = (yi[:, None] == np.arange(classes.size)).astype(np.float64)
            labels = onehot[:, 1] if classes.size == 2 else onehot
            basis, problem, fit_n = self._select_width(
                X,
                problem,
                engine,
                criterion=lambda Phi, rows: shared_laplace_evidence(
                    self._broad_intercept(Phi), labels[rows], rank_tol=SEARCH_RANK_TOL
                ),
                gradient=False,
            )
        else:
            basis, Phi = self._make_basis(X)
            problem = problem.with_design(Phi)
            fit_n = fit_problem(problem, engine)
            self._set_width(basis, None)
        fit_n = self._keeping_the_level(problem, engine, fit_n)
        self._set_fitted(basis, problem.unscale(fit_n))
        self._warn_if_empty()
        act = self.active_
        # RVM* needs the training problem at prediction time (the Laplace weights come back
        # from the mode and the labels). The normalised alphas too: in the user's units they
        # leave float64's range with the columns' norms (a linear kernel on inputs of 1e80),
        # and importance sampling needs them.
        training = TrainingData(
            phi_active=None if self.chunked_passes_ else problem.active_design(act),
            y_index=yi,
            norms=problem.norms[act],
            alpha_normalised=np.stack([f.alpha[act] for f, _ in fit_parts(fit_n)]),
        )
        self._finish_fit(X, training, fit_n)
        self._predictor_obj = self._make_predictor()
        return self

    def _warn_if_empty(self) -> None:
        """Warn where a width the user gave left no basis function: the classifier then
        predicts the classes' training frequencies everywhere. On 150 points of make_moons a
        width of gamma = 1e-4 did (the columns all but constant: no one of them, beside the
        bias, raised the evidence), 43 nats below the 2 relevance vectors of gamma = 1e-3; a
        learned width leaves none only where the data show no signal."""
        if (
            self.relevance_.size
            or self.inference != "type2"  # the sampled model keeps every column it samples
            or self.kernel not in WIDTH_KERNELS
            or self._learns_width()
        ):
            return
        warn_at_user(
            f"RVC kept no basis function at gamma={self.gamma!r}: it predicts the classes' "
            "training frequencies everywhere. The kernel may be too wide (its functions nearly "
            "constant over the inputs) or too narrow for them: the default gamma chooses the "
            "width from the data, as RVCCV does by cross-validation."
        )

    def _broad_intercept(self, Phi: np.ndarray) -> np.ndarray:
        """The default width rule's design for three classes or more: the bias column scaled by
        :data:`SHARED_INTERCEPT_SCALE`, so that the shared-precision evidence, like the RVM with
        its own ``alpha`` for the bias, pays little for each class's base rate against the rest.

        Two classes keep the plain design: their base rates are moderate, and on Tipping's
        Table 2 sets the broad bias moved the chosen widths away from the paper's (Waveform's
        gamma from 0.026 to 0.0074, against the paper's 0.05) at the same test error.
        """
        if not self.bias or self.classes_.size <= 2:
            return Phi
        Phi = Phi.copy()
        Phi[:, -1] *= SHARED_INTERCEPT_SCALE
        return Phi

    def _check_chunked(self) -> None:
        """What a chunked fit cannot give: it keeps no N x K training design."""
        refused = {
            "centres=None (every training input a basis function)": self.centres is None,
            "kernel='precomputed'": self.kernel == "precomputed",
            "inference='mcmc'": self.inference == "mcmc",
            "predictive='rvm*'": self.predictive == "rvm*",
            "moderated='importance'": self.moderated == "importance",
            f"gamma={self.gamma!r}": self._width_rule().learned
            and self._width_rule().kind != DEFAULT_GAMMA,
        }
        bad = [name for name, is_bad in refused.items() if is_bad]
        if bad:
            raise ValueError(
                f"RVC(chunk_rows={self.chunk_rows!r}) builds the design in row blocks, but "
                f"{', '.join(bad)} cannot be used there: it needs the N x N or N x K training "
                "design, or fits at many widths. The chunked path takes a subset of centres "
                "(centres=('random', n), ('kmeans', n) or an array), gamma='evidence_shared' (the "
                "default), a number, 'scale' or 'auto', moderates by the probit and samples no "
                "MCMC. Set chunk_rows=None for the in-memory design."
            )

    def _fit_chunked(self, X, problem: Problem, engine: EvidenceOptions, yi: np.ndarray):
        """The basis, the problem on a :class:`~bayes_rvm.evidence.design.ChunkedDesign` and
        the engine's fit (:func:`~bayes_rvm.evidence.chunked.fit_laplace_chunked`)."""
        from bayes_rvm.evidence import CACHE_BYTES, chunked_design

        self._check_chunked()
        centres = self._candidate_centres(X)
        path = None
        if self._width_rule().kind == DEFAULT_GAMMA:
            onehot = (yi[:, None] == np.arange(self.classes_.size)).astype(np.float64)
            labels = onehot[:, 1] if self.classes_.size == 2 else onehot
            ls, path, _ = self._width_search().shared(
                X,
                centres,
                lambda Phi, rows: shared_laplace_evidence(self._broad_intercept(Phi), labels[rows]),
            )
            g = self._width_rule().kernel.gamma(ls)
            basis = self._fit_basis(X, centres, gamma=float(g[0]) if ls.size == 1 else g)
        else:
            basis = self._fit_basis(X, centres)
        step = chunk_rows_for(basis.n_basis_) if self.chunk_rows == "auto" else self.chunk_rows
        design = chunked_design(
            lambda rows, cols: basis.transform(X[rows], columns=cols),
            X.shape[0],
            basis.n_basis_,
            chunk_rows=step,
            cache_bytes=min(CACHE_BYTES, memory_limit()[0] or CACHE_BYTES),
            progress=True if self.verbose else "auto",
        )
        problem = dataclasses.replace(problem, design=design, norms=design.norms)
        fit_n = fit_problem(problem, engine)
        self._set_width(basis, path)
        self.chunked_passes_ = dataclasses.asdict(design.counter)
        return basis, problem, fit_n

    def make_engine(self) -> EvidenceOptions:
        """The Laplace engine of this estimator: the options that name it (solver, settings).

        ``fit_problem(Problem.classification(Phi, y_index, n_classes), est.make_engine())`` is the
        fit ``fit`` makes at a fixed width, on the normalised problem (for one-vs-rest a
        :class:`~bayes_rvm.evidence.problem.OneVsRestFit`, whose evidence is the sum over the
        classes);
        cross-validation and the width search run it the same way.
        """
        return EvidenceOptions(
            solver=self.solver,
            alpha_prior=self._alpha_prior(),
            tol=float(self.tol),
            max_iter=int(self.max_iter),
            threshold_alpha=float(self._cfg.threshold_alpha),
            free_bias=self.bias == "free",
            progress=True if self.verbose else "auto",
        )

    def make_model(self, *, offset=None):
        """A fresh :class:`pymc.Model` of this fit's problem, in the units of ``X``.

        The model ``inference="mcmc"`` samples (:attr:`model_` is ``make_model()``): the
        Bernoulli-logit (two classes) or softmax model of
        :func:`bayes_rvm.models.graphs.rvm_classification_model` over the MCMC columns
        (``mcmc_basis``), with the column norms the engines normalise by written into the graph
        (``phi_scale``). The class indices ``0 .. C-1`` follow ``classes_``. Two classes, where
        nutpie samples (the default) and it can do so on the model's log density written in
        numba (:mod:`bayes_rvm.models.whitened_density`: the half-Cauchy hyperprior, the bias
        among the ARD columns, no ``offset``): the weights whitened around the type-II mode
        (``reference``; the free variable ``w``, its value ``w_whitened__``); otherwise, and
        for the softmax, the non-centred ``z`` scaled by the labels' information on each weight
        (``information``). Either way the same posterior. ``pm.sample`` on the whitened model
        runs PyTensor's graph of it, about a quarter of the speed of ``fit``.

        Parameters
        ----------
        offset : ndarray or callable, optional
            Terms of your own in the latent function(s), as in
            :func:`bayes_rvm.models.graphs.rvm_classification_model`.

        Returns
        -------
        pymc.Model
        """
        from bayes_rvm.inference.nutpie_backend import has_native_density
        from bayes_rvm.models.graphs import rvm_classification_model

        check_is_fitted(self, "fit_")
        Phi, norms, cols = self._mcmc_design()
        binary = self.classes_.size == 2

        def build(**parametrisation):
            return rvm_classification_model(
                Phi,
                self.training_.y_index,
                likelihood="bernoulli" if binary else "softmax",
                prior=self.prior,
                alpha_prior=self._mcmc_alpha_prior(),
                nu=self._mcmc_student_t(),
                phi_scale=norms,
                offset=offset,
                # Binary and softmax alike (measured on Ripley's data at the default width):
                # the centred form met 270-440 divergences in 4000 draws. No slab: the Laplace
                # fit's model has none, and one of c = 2 shrank weights the labels determine
                # (Ripley: -21.8 +- 5.4 under Laplace, -14.3 +- 3.5 with the slab).
                centred=False,
                intercept_sd=FREE_LATENT_SD if self.bias == "free" else None,
                basis_names=cols,
                class_names=None if binary else list(self.classes_),
                **parametrisation,
            )

        # Whitened, the weights of nearly collinear basis functions, which trade their
        # relevance, mix: on 2-D two-class data (100-173 points, every basis function) the
        # information form left max R-hat at 1.010-1.042 (bulk ESS 180-220) at 127 leapfrog
        # steps a draw; whitened, 1.003-1.006 (ESS 1500-2800) at 15. Each gradient then factors
        # an M x M matrix, which only nutpie's native density of the model does fast enough
        # (0.18 ms a gradient at M = 174, against 0.58 ms through PyTensor): Ripley took 76 s,
        # and 280 s with pm.sample's nutpie on the same model.
        if binary and self._cfg.sampler == "nutpie":
            model = build(reference=self._reference(cols))
            if has_native_density(model):
                return model
        return build(information=self._information(Phi))

    def _reference(self, cols: np.ndarray) -> np.ndarray:
        """The type-II fit's weights over the MCMC columns ``cols`` (zero where it pruned)."""
        w = np.zeros(self.basis_.n_basis_)
        w[self.fit_.active] = self.fit_.mean[:, 0]
        return w[np.asarray(cols, dtype=int)]

    def _information(self, Phi: np.ndarray) -> np.ndarray:
        """What the labels tell each weight of the MCMC design ``Phi`` beyond its neighbours:
        the scale of the non-centred weights
        (:func:`~bayes_rvm.models.graphs.rvm_classification_model`'s ``information``).

        ``h_i = 1 / [(G + A0)^-1]_ii - a0_i``, with ``G = Phi^T diag(b) Phi`` the likelihood's
        curvature at the type-II mode (``b = p (1 - p)``; for the softmax, along each
        orthonormal contrast ``q`` of the classes, ``b = q^T (diag(p) - p p^T) q``, 0 along the
        direction they share) and ``A0`` the prior precisions at the default hyperprior's
        median (a weight scale of :data:`~bayes_rvm.models.priors.DEFAULT_WEIGHT_SCALE` per
        unit-RMS column): the posterior precision of ``w_i`` with the other weights free, less
        its prior's. Any value gives the same posterior; this one samples best. Measured on
        Ripley's data at the default width (seed 0, 4 x 1000 draws, one process on a contended
        machine): plain non-centred weights, 32 divergences, 510 leapfrog steps a draw; ``h``
        the diagonal ``G_ii`` (the curvature with the neighbours held fixed: collinear
        neighbours share what the labels say, so it overstates each weight's share), no
        divergence but 63 steps and R-hat 1.026 (bulk ESS 116); ``G_ii / 4``, R-hat 1.039;
        this ``h``, no divergence, 127 steps, R-hat 1.008. On the three-class problem of the
        tests, per class in the classes' own coordinates (which centres the shared direction
        the likelihood does not see): R-hat 1.12; per contrast, as here: no divergence, R-hat
        1.0098, 73 steps a draw.
        """
        from scipy.special import expit, softmax

        from bayes_rvm.models.graphs import class_contrasts
        from bayes_rvm.models.priors import DEFAULT_WEIGHT_SCALE

        train = self.training_
        latent = self.basis_.transform(train.inputs, columns=self.active_) @ self.fit_.mean
        if latent.shape[1] == 1:
            b = expit(latent) * expit(-latent)
        else:
            p = softmax(latent, axis=1)
            Q = class_contrasts(p.shape[1])
            b = p @ Q**2 - (p @ Q) ** 2
        a0 = np.mean(Phi**2, axis=0) / DEFAULT_WEIGHT_SCALE**2
        a0[a0 == 0.0] = 1.0  # a column of zeros: the labels say nothing of its weight
        h = np.zeros((Phi.shape[1], b.shape[1]))
        for k in np.flatnonzero(np.any(b > 1e-12, axis=0)):
            precision = Phi.T @ (Phi * b[:, k : k + 1]) + np.diag(a0)
            h[:, k] = np.maximum(1.0 / np.diag(np.linalg.inv(precision)) - a0, 0.0)  # rounding
        return h[:, 0] if latent.shape[1] == 1 else h

    def _mcmc_columns(self) -> np.ndarray:
        cols = super()._mcmc_columns()
        if self.bias != "free":
            return cols
        # A free bias is the model's ``intercept``, outside the ARD columns.
        cols = cols[cols != self.basis_.n_centres_]
        if cols.size == 0:
            raise ValueError(
                "the type-II fit kept no basis function besides the free intercept, and "
                "sampler_config mcmc_basis='relevant' samples only what it kept: the labels show "
                "no signal the basis can carry at this width. mcmc_basis='all' samples every "
                "basis function."
            )
        return cols

    def _mcmc_initvals(self, fit_n) -> dict:
        init = super()._mcmc_initvals(fit_n)
        if self.bias == "free":
            init["intercept"] = np.asarray(self.intercept_, dtype=np.float64)
        return init

    def _target_accept(self) -> float:
        # The logistic likelihood curves the weights' posterior more than a Gaussian one: on
        # Ripley's data at the default width the sampler's default 0.8 left 20-30 divergences
        # in 4000 draws, 0.95 none or one (binary and three-class, over seeds). Whitened (two
        # classes), no divergence at 0.9 either, in 15-21 leapfrog steps a draw against 31 at
        # 0.95 (Ripley, two seeds, and five 2-D sets of 100-173 points); 0.8 left one of those
        # sets at R-hat 1.017.
        return 0.9 if self.model_.rvm_spec.form == "whitened" else 0.95

    def _mcmc_thin(self) -> int | str:
        # Every second draw of 2 x draws per chain, binary and softmax: the max R-hat over the
        # 251 prior-dominated log alphas of Ripley's full basis was 1.011 unthinned at 4 x 1000
        # (in spread only, the folded half: NUTS's draws correlate in their distance from the
        # median), 1.007 thinned, at 1.5 times the sampling time (tuning is not thinned). On the
        # tests' three-class problem the unthinned max R-hat was 1.022 and 1.013 (seeds 0, 1;
        # bulk ESS 295 and 603, at the relevance vectors and their nearly collinear neighbours,
        # whose relevance trades between them), thinned 1.0096 (seed 0, ESS 580). Whitened
        # (two classes), the max R-hat over five 2-D sets and Ripley was 1.003-1.006 thinned
        # (bulk ESS 1870-2880); on the 173 points unthinned, 1.009 (ESS 1370), near the warning.
        return 2

    @property
    def idata_(self):
        """The fit as an ArviZ DataTree, shaped as :class:`RVR`'s (``posterior`` with ``w``,
        ``alpha``, ``log_alpha``; ``log_likelihood`` of each training sample; ``observed_data``
        holding class indices into ``classes_``). Type-II: draws of the weights over the relevance
        vectors at the fitted hyperparameters, of the posterior :meth:`predict_proba` averages
        over: resampled
        from its importance draws where it samples them (:attr:`moderation_` ``"importance"``),
        else from the Laplace approximation at the mode (root attribute ``weight_draws`` says
        which); built on first use (binary and multinomial fits). The ``loo`` group holds the
        cross-validated log predictive probabilities of :meth:`refit_loo`, which
        :func:`~bayes_rvm.compare` reports instead of PSIS-LOO (which keeps the hyperparameters
        tuned on all the data); building it costs the refits, N up to 50 rows, 10 beyond."""
        check_is_fitted(self, "fit_")
        if self._tree_cache is None and self.training_.phi_active is None:
            raise AttributeError(
                "idata_ holds the pointwise log-likelihood of every training row, from the "
                "N x K training design, which a fit on the chunked path (chunk_rows) does not keep."
            )
        if self._tree_cache is None:
            from bayes_rvm.inference import type2_datatree

            if isinstance(self.fit_, OneVsRestFit):
                raise AttributeError(
                    "idata_ describes one model; multi_class='ovr' fits one per class. Use "
                    "multi_class='multinomial' for a DataTree."
                )
            k = self.active_.size
            local = dataclasses.replace(
                self.fit_, active=np.arange(k), alpha=self.fit_.alpha[self.active_]
            )
            seed = self._seed()
            predictor, resampled = self._predictor(), None
            if isinstance(predictor, ImportanceClasses):
                resampled = predictor.resampled(1000, np.random.default_rng(seed))
            self._tree_cache = self._fingerprinted(
                type2_datatree(
                    local,
                    self.training_.phi_active,
                    self.training_.y_index,
                    basis_names=self.active_,
                    class_names=None if self.classes_.size == 2 else list(self.classes_),
                    random_seed=seed,
                    attrs=self._tree_attrs(),
                    weight_draws=resampled,
                    loo=self._loo_or_none(seed),
                )
            )
            self._tree_cache.attrs["weight_draws"] = (
                "laplace" if resampled is None else "importance"
            )
        return self._tree_cache

    def _loo_or_none(self, seed: int):
        """:meth:`refit_loo` for ``idata_``, or None (with a warning) where it cannot run."""
        try:
            return self.refit_loo(random_state=seed)
        except ValueError as err:
            warn_at_user(
                f"idata_ holds no refit LOO terms: {err} compare() scores this fit by PSIS-LOO.",
                UserWarning,
            )
            return None

    def refit_loo(self, n_folds: int | None = None, random_state=None):
        """Cross-validated log predictive probabilities of the type-II fit, by refits.

        Each left-out row (or fold) is scored by :meth:`predict_proba` of this classifier refitted
        on the other rows, cold, with its parameters at the fitted kernel width (a learned
        width is not re-chosen per refit): brute-force leave-one-out of the type-II
        procedure. Each refit has its own basis, the kernel columns of its own training rows,
        so a left-out row does not keep its own column.

        Parameters
        ----------
        n_folds : int, optional
            Default: N (exact leave-one-out, N refits) up to :data:`LOO_EXACT_MAX_RVC` rows,
            10 stratified folds beyond.
        random_state : int, RandomState or None
            Shuffles the rows into folds (K-fold only). Default: the estimator's
            ``random_state``, whose folds the ``loo`` group of :attr:`idata_` holds.

        Returns
        -------
        bayes_rvm.evidence.loo.RefitLOO
            ``elpd_i`` (``ln p(t_n | the other rows)``), ``method``, ``n_folds``, ``seconds``.
        """
        from bayes_rvm.evidence import refit_loo

        random_state = self._seed() if random_state is None else random_state

        check_is_fitted(self, "fit_")
        train = self.training_
        if train is None or train.y_index is None:
            raise AttributeError("refit_loo needs the training rows, which this fit does not keep.")
        classes, yi = self.classes_, train.y_index
        counts = np.bincount(yi, minlength=classes.size)
        if counts.min() < 2:
            lone = classes.tolist()[counts.argmin()]
            raise ValueError(
                f"refit_loo leaves rows out, and class {lone!r} has a single training row: a "
                "refit without it cannot predict that class."
            )
        gamma = self.gamma if self.gamma_ is None else self.gamma_
        template = clone(self).set_params(gamma=gamma, verbose=False)
        rows = np.arange(yi.size)[:, None]
        precomputed = self.kernel == "precomputed"
        inputs = train.inputs

        def fit_rows(r, t):
            X = inputs[np.ix_(r[:, 0], r[:, 0])] if precomputed else inputs[r[:, 0]]
            with warnings.catch_warnings():
                # the full fit has said so, if a refit at its width keeps no basis function
                warnings.filterwarnings("ignore", "RVC kept no basis function", UserWarning)
                return _Refit(clone(template).fit(X, classes[t[:, 0]]), r[:, 0])

        def log_predictive(refit, r, t):
            X = inputs[np.ix_(r[:, 0], refit.rows)] if precomputed else inputs[r[:, 0]]
            proba = refit.estimator.predict_proba(X)
            cols = np.searchsorted(refit.estimator.classes_, classes[t[:, 0]])
            with np.errstate(divide="ignore"):
                return np.log(proba[np.arange(r.shape[0]), cols])

        return refit_loo(
            fit_rows,
            rows,
            yi[:, None],
            n_folds=n_folds,
            random_state=random_state,
            log_predictive=log_predictive,
            stratify=True,
            exact_max=LOO_EXACT_MAX_RVC,
        )

    def _set_fitted(self, basis: KernelBasis, fit) -> None:
        self.basis_ = basis
        self.fit_ = fit
        active = fit.active
        if isinstance(fit, OneVsRestFit):
            mean, alpha = fit.mean, fit.class_alpha
        else:
            mean = fit.mean[:, 0] if self.classes_.size == 2 else fit.mean
            alpha = fit.alpha[active]
        self.log_evidence_ = fit.log_evidence
        self.n_iter_ = fit.n_iter
        self.converged_ = fit.converged
        self.active_ = active
        is_rv = active < basis.n_centres_
        self.relevance_ = active[is_rv]
        centres = basis.centres_
        self.relevance_vectors_ = None if centres is None else centres[self.relevance_]
        self.coef_ = mean[is_rv]
        # The bias is at most one column; summing over none gives the 0 of an absent bias.
        self.intercept_ = float(mean[~is_rv].sum()) if mean.ndim == 1 else mean[~is_rv].sum(axis=0)
        self.alpha_ = alpha

    def _persisted_state(self) -> dict:
        """What a saved model holds: basis, engine result(s) and the class labels."""
        ovr = isinstance(self.fit_, OneVsRestFit)
        return {
            "basis": self.basis_,
            "fit": list(self.fit_.fits) if ovr else self.fit_,
            "extras": {
                "classes": self.classes_.tolist(),
                # The labels' dtype, which a JSON list loses (object, uint8, ...).
                "classes_dtype": self.classes_.dtype.str,
                "ovr": ovr,
                "width_path": path_to_json(self.width_path_),
                "chunked_passes": self.chunked_passes_,
            },
            "arrays": self.training_.to_arrays(),
            "idata": getattr(self, "_tree_cache", None),
        }

    def _restore_state(self, state: dict) -> None:
        self._settings = self._resolve_settings()
        dtype = state["extras"].get("classes_dtype")  # absent from older files
        self.classes_ = np.asarray(state["extras"]["classes"], dtype=dtype and np.dtype(dtype))
        self.n_features_in_ = state["basis"].n_features_in_
        fit = OneVsRestFit(tuple(state["fit"])) if state["extras"]["ovr"] else state["fit"]
        self.multi_class_ = _model_kind(self.classes_.size, bool(state["extras"]["ovr"]))
        self._set_fitted(state["basis"], fit)
        self.training_ = TrainingData.from_arrays(state.get("arrays"))
        self._set_width(state["basis"], path_from_json(state["extras"].get("width_path")))
        self._tree_cache = state.get("idata")
        self.chunked_passes_ = state["extras"].get("chunked_passes")
        self._model = None
        self._predictor_obj = None  # chosen again on first use, from the loaded state

    @classmethod
    def _check_persisted(cls, state: dict, params: dict, fail: Fail) -> None:
        """A stored classifier's own invariants: sorted distinct classes, one output per class."""
        fits = state["fit"] if isinstance(state["fit"], list) else [state["fit"]]
        extras = state["extras"]
        classes = extras.get("classes")
        if not isinstance(classes, list) or len(classes) < 2:
            fail(f"RVC classes {classes!r} are not a list of at least two labels")
        if classes != np.unique(np.asarray(classes)).tolist():
            fail(f"RVC classes {classes!r} are not distinct and sorted")
        dtype = extras.get("classes_dtype")
        try:
            if dtype is not None:
                np.asarray(classes, dtype=np.dtype(dtype))
        except (TypeError, ValueError):
            fail(f"RVC classes {classes!r} do not fit their dtype {dtype!r}")
        C = len(classes)
        if extras.get("ovr"):
            if len(fits) != C or {fit.mean.shape[1] for fit in fits} != {1}:
                fail(f"{len(fits)} one-vs-rest fits for {C} classes")
        elif len(fits) != 1 or fits[0].mean.shape[1] != (1 if C == 2 else C):
            fail(f"a fit with {fits[0].mean.shape[1]} outputs for {C} classes")

    def _make_predictor(self):
        """The predictor of the resolved settings (:mod:`bayes_rvm.posterior.class_predictors`):
        posterior draws, the importance-sampled predictive, or the Laplace approximation with
        RVM* or without."""
        if self._uses_draws():
            return class_predictor(
                fit=self.fit_,
                columns=self.active_,
                n_classes=self.classes_.size,
                moderated=self.moderated,
                draws=self._posterior_draws(),
            )
        training = self.training_
        has_problem = training is not None and training.phi_active is not None
        star = None
        if self.predictive == "rvm*" and has_problem:
            # The added function stands for the kernel part: a free intercept's prior is not it.
            free = self.fit_.active != self.basis_.n_centres_ if self.bias == "free" else None
            star = ClassTraining(
                training.phi_active,
                tuple(self._targets()),
                self.basis_.diagonal(training.x_train),
                slice(None) if free is None else free,
            )
        importance = self._make_importance if has_problem and self.predictive == "rvm" else None
        return class_predictor(
            fit=self.fit_,
            columns=self.active_,
            n_classes=self.classes_.size,
            moderated=self.moderated,
            star=star,
            importance=importance,
        )

    def _targets(self) -> list[np.ndarray] | None:
        """Each part's training labels (None for a model saved without them): one 0/1 column
        for a binary or one-vs-rest part, class indices for a softmax fit."""
        yi = self.training_.y_index
        if yi is None:
            return None
        if isinstance(self.fit_, OneVsRestFit):
            return [(yi == c).astype(np.float64) for c in range(self.classes_.size)]
        return [yi.astype(np.float64) if self.classes_.size == 2 else yi]

    @property
    def moderation_(self) -> str:
        """How :meth:`predict_proba` averages over the weights now: ``"importance"``,
        ``"probit"``, ``"mode"`` (``moderated=False``) or ``"mcmc"`` (posterior draws)."""
        check_is_fitted(self, "fit_")
        return self._predictor().kind

    def _make_importance(self) -> tuple[list, np.ndarray]:
        """One :class:`~bayes_rvm.evidence.ImportanceDraws` per fit (per class for ``"ovr"``),
        from the fit and the training problem (both saved: a loaded model rebuilds the same),
        and the norms of the columns they are drawn on.

        The draws are of the weights of the normalised columns (``phi / norms``), whose alphas
        stay in float64's range whatever the scale of the kernel values.
        """
        norms = self.training_.norms
        norms = np.ones(self.active_.size) if norms is None else norms
        phi = self.training_.phi_active / norms
        alpha = self.training_.alpha_normalised
        draws = []
        for c, ((f, pos), t) in enumerate(zip(fit_parts(self.fit_), self._targets(), strict=True)):
            T = np.eye(f.mean.shape[1])[t] if f.mean.shape[1] > 1 else t  # softmax: one-hot
            a = f.alpha[f.active] / norms[pos] ** 2 if alpha is None else alpha[c, pos]
            draws.append(
                importance_draws(f.posterior.rescaled(1.0 / norms[pos]), phi[:, pos], T, a)
            )
        return draws, norms

    @one_blas_thread
    def decision_function(self, X) -> np.ndarray:
        """Latent scores: the log-odds (binary) or softmax logits behind :meth:`predict_proba`.

        These are the scores whose sigmoid (binary; softmax for ``"multinomial"``) is
        :meth:`predict_proba`: with ``moderated="importance"``, the log-odds (log probabilities)
        of the importance-sampled predictive; with ``"probit"`` (or True) the moderated scores
        ``kappa(s^2) mu``; with ``moderated=False``, the posterior mode ``mu``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of shape (n_samples,) for two classes, else (n_samples, n_classes)
            float32 for float32 inputs, float64 otherwise (computed in float64).
        """
        return self._scores(X).astype(output_dtype(X), copy=False)

    def _scores(self, X) -> np.ndarray:
        check_is_fitted(self, "fit_")
        score = self._predictor().scores(self._rows(new_inputs(self, X)))
        return score[:, 0] if score.shape[1] == 1 else score

    @one_blas_thread
    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, averaged over the posterior uncertainty unless ``moderated=False``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``; rows sum to one. float32 for float32 inputs,
            float64 otherwise (computed in float64).
        """
        check_is_fitted(self, "fit_")
        proba = self._predictor().proba(self._rows(new_inputs(self, X)))
        return proba.astype(output_dtype(X), copy=False)

    @one_blas_thread
    def predict_log_proba(self, X) -> np.ndarray:
        """Logarithm of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))

    @one_blas_thread
    def predict(self, X) -> np.ndarray:
        """Most probable class of each sample (the largest score of :meth:`decision_function`).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        y : ndarray of shape (n_samples,)
        """
        score = self._scores(X)  # float64 even for float32 inputs: a tiny score keeps its sign
        idx = (score > 0).astype(np.intp) if score.ndim == 1 else np.argmax(score, axis=1)
        return self.classes_[idx]
