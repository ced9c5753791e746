"""What :class:`~bayes_rvm.RVR` and :class:`~bayes_rvm.RVC` share.

The declared parameter constraints (scikit-learn's ``_parameter_constraints``, checked once at the
start of ``fit``), the kernel basis and its candidate centres, the width search (the mixin of
:mod:`bayes_rvm.estimators.width_selection`; the memory checks are :mod:`bayes_rvm.memory`'s), the
:class:`~bayes_rvm.evidence.problem.TrainingData` an estimator keeps to rebuild its PyMC model, and
``model_``: the exact :class:`pymc.Model` that ``inference="mcmc"`` samples, rebuilt on demand and
never pickled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.cluster import MiniBatchKMeans
from sklearn.utils import check_random_state, check_scalar
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from bayes_rvm.basis.kernels import WIDTH_RULES, KernelBasis
from bayes_rvm.estimators.width_selection import (
    CLASSIFIER_STOP_DROP,
    CLASSIFIER_WIDTH_PENALTY,
    DEFAULT_GAMMA,
    SHARED_MAX_SAMPLES,
    SHARED_MAX_SAMPLES_CLASSIFIER,
    WidthSelectionMixin,
)
from bayes_rvm.evidence.problem import (
    TrainingData,
    column_scale,
    normalise_columns,
    prior_column_scale,
)
from bayes_rvm.evidence.width import WidthPath
from bayes_rvm.memory import MEMORY_ENV, check_fit_memory, check_memory, memory_limit
from bayes_rvm.models.priors import (
    DEFAULT_MCMC_NU,
    DEFAULT_NU,
    DEFAULT_WEIGHT_SCALE,
    Prior,
    as_prior,
)
from bayes_rvm.posterior.draws import PosteriorDraws
from bayes_rvm.threads import one_blas_thread

# The constants and memory checks of width_selection.py and memory.py (moved there from here)
# stay importable from this module.
__all__ = [
    "CLASSIFIER_STOP_DROP",
    "CLASSIFIER_WIDTH_PENALTY",
    "DEFAULT_GAMMA",
    "MEMORY_ENV",
    "POSITIVE",
    "SHARED_MAX_SAMPLES",
    "SHARED_MAX_SAMPLES_CLASSIFIER",
    "WIDTH_RULES",
    "BaseRVM",
    "check_fit_memory",
    "check_memory",
    "check_number",
    "memory_limit",
    "normalise_columns",
]

PRIORS = ("ard", "student_t")
SAMPLERS = ("nutpie", "numpyro", "pymc", "blackjax")
#: The constraint of a positive real parameter (``_parameter_constraints``), shared by RVR and RVC.
POSITIVE = Interval(Real, 0, None, closed="neither")


def check_number(name: str, value, *, low=0.0, integer=False, allow_none=False, inclusive=False):
    """Raise a ValueError naming ``name`` unless ``value`` is a finite number above ``low``.

    The type and the bound are :func:`sklearn.utils.check_scalar`'s; it lets ``inf`` and ``True``
    through, and raises a TypeError or ValueError of its own wording, so the one message here
    says what is wanted.
    """
    if value is None and allow_none:
        return
    try:
        bounds = "left" if inclusive else "neither"
        check_scalar(
            value, name, Integral if integer else Real, min_val=low, include_boundaries=bounds
        )
        ok = not isinstance(value, bool) and bool(np.isfinite(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        what = "an integer" if integer else "a finite number"
        rel = ">=" if inclusive else ">"
        raise ValueError(f"{name} must be {what} {rel} {low}, got {value!r}.")


def path_to_json(path: WidthPath | None) -> dict | None:
    """A width path as lists (for the JSON attributes of a saved model)."""
    if path is None:
        return None
    return {k: getattr(v, "tolist", lambda v=v: v)() for k, v in dataclasses.asdict(path).items()}


def path_from_json(data: dict | None) -> WidthPath | None:
    if data is None:
        return None
    return WidthPath(**{k: v if k == "criterion" else np.asarray(v) for k, v in data.items()})


def dense_input(X):
    """``X`` as a dense float64 array: a SciPy sparse matrix is densified once, at the door.

    The RVM's design matrix ``Phi`` (N x M kernel values) is dense whatever ``X`` is, so a dense
    copy of an N x d ``X`` costs no more than the design when d <= M; the kernels then take it as
    they take dense input, with the same results. A copy that would not fit stops here with a
    MemoryError that says so, before any kernel is evaluated.
    """
    if not sp.issparse(X):
        return X
    need = 8.0 * X.shape[0] * X.shape[1]
    limit, source = memory_limit()
    if limit is not None and need > limit:
        raise MemoryError(
            f"X is a sparse {X.shape[0]} x {X.shape[1]} matrix, whose dense copy needs "
            f"{need / 2**30:.1f} GiB, more than the limit of {limit / 2**30:.1f} GiB ({source}). "
            "Reduce its features first (for example with scikit-learn's TruncatedSVD)."
        )
    return X.toarray()


#: What the estimators' ``validate_data`` accepts besides dense arrays (densified by
#: :func:`dense_input`).
ACCEPT_SPARSE = ("csr", "csc", "coo")


def training_data(
    estimator, X, y, *, regression: bool, min_samples: int
) -> tuple[np.ndarray, np.ndarray]:
    """A ``fit``'s ``X`` and ``y`` through scikit-learn's checks, ``X`` dense.

    Parameters
    ----------
    estimator : BaseEstimator
        The estimator being fitted (``validate_data`` records ``n_features_in_`` on it).
    X, y : array-like
    regression : bool
        Numeric targets, one or several outputs; else class labels.
    min_samples : int
        The fewest rows the fit takes.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray
    """
    extra = {"multi_output": True, "y_numeric": True} if regression else {}
    X, y = validate_data(
        estimator,
        X,
        y,
        ensure_min_samples=min_samples,
        dtype=np.float64,
        accept_sparse=ACCEPT_SPARSE,
        **extra,
    )
    if not regression:
        check_classification_targets(y)
    elif y.dtype.kind not in "biuf":
        # scikit-learn converts object arrays but leaves text as text (it failed in T**2).
        raise ValueError(
            f"{type(estimator).__name__} needs numeric targets y; got dtype {y.dtype} (first "
            f"value {str(y.flat[0])!r}). For class labels use RVC."
        )
    return dense_input(X), y


def new_inputs(estimator, X) -> np.ndarray:
    """New inputs of a fitted estimator through scikit-learn's checks (their feature count
    against the fit's), dense."""
    return dense_input(
        validate_data(estimator, X, reset=False, dtype=np.float64, accept_sparse=ACCEPT_SPARSE)
    )


# Sampler settings that are estimator parameters, so that get_params / clone see them.
_OWNED_SAMPLE_KWARGS = {"draws", "tune", "chains", "sampler", "random_seed", "initvals", "model"}


class BaseRVM(WidthSelectionMixin, BaseEstimator):
    """Parameters and helpers shared by the RVM estimators.

    Subclasses declare their own ``_parameter_constraints`` (extending :attr:`_shared_constraints`)
    and implement ``_build_model(form, mean)``.
    """

    #: Constraints of the parameters both estimators take; scikit-learn checks them in ``fit``.
    _shared_constraints: dict = {  # noqa: RUF012 - scikit-learn's convention
        "kernel": [str, callable],
        "gamma": [StrOptions({"scale", "auto", *WIDTH_RULES}), POSITIVE, "array-like", Prior],
        "degree": [Interval(Integral, 1, None, closed="left")],
        "coef0": [Interval(Real, None, None, closed="neither")],
        "kernel_params": [dict, None],
        "bias": ["boolean"],
        "prior": [StrOptions(set(PRIORS))],
        "nu": [POSITIVE, Prior, StrOptions({"auto"})],
        "alpha_prior": [Prior, dict, None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [POSITIVE],
        "centres": [str, "array-like", None],
        "n_centres": [Interval(Integral, 1, None, closed="left"), None],
        "inference": [StrOptions({"type2", "mcmc"})],
        "draws": [Interval(Integral, 1, None, closed="left")],
        "tune": [Interval(Integral, 0, None, closed="left")],
        "chains": [Interval(Integral, 1, None, closed="left")],
        "sampler": [StrOptions(set(SAMPLERS))],
        "mcmc_basis": [StrOptions({"all", "relevant"})],
        "predictive": [StrOptions({"rvm", "rvm*"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def _candidate_centres(self, X: np.ndarray) -> np.ndarray | None:
        """The centres the basis functions sit on: None (every training input) or a subset."""
        spec = getattr(self, "centres", None)
        if spec is None:
            return None
        if self.kernel == "precomputed":
            raise ValueError("centres cannot be chosen with kernel='precomputed'.")
        if isinstance(spec, str):
            if spec not in ("random", "kmeans"):
                raise ValueError(
                    f"centres must be None, 'random', 'kmeans' or an array, got {spec!r}."
                )
            n = self.n_centres
            check_number("n_centres", n, integer=True)
            if n > X.shape[0]:
                raise ValueError(f"n_centres={n} exceeds the {X.shape[0]} training samples.")
            rng = check_random_state(self.random_state)
            if spec == "random":
                return X[np.sort(rng.choice(X.shape[0], n, replace=False))]
            km = MiniBatchKMeans(n_clusters=n, n_init=3, random_state=rng.randint(2**31 - 1))
            return km.fit(X).cluster_centers_
        return check_array(spec, dtype=np.float64, input_name="centres")

    def _square_matrices(self) -> int:
        """How many basis-by-basis float64 matrices the fit holds beside the design matrix."""
        return 0

    def _make_basis(self, X: np.ndarray) -> tuple[KernelBasis, np.ndarray]:
        """The fitted basis and the training design matrix, after a check of its memory."""
        if self.kernel == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError(
                f"with kernel='precomputed', X must be the square training kernel matrix; "
                f"got shape {X.shape}."
            )
        basis = self._fit_basis(X, self._candidate_centres(X))
        check_fit_memory(
            type(self).__name__, X.shape[0], basis.n_basis_, squares=self._square_matrices()
        )
        # Rows in chunks of ~64 MB keep the kernel's pairwise temporaries small at large N.
        return basis, basis.transform(X, chunk_size=max(1, 8_000_000 // basis.n_basis_))

    def _fit_basis(self, X: np.ndarray, centres, gamma=None) -> KernelBasis:
        """The basis on ``centres`` (None: the inputs) at ``gamma`` (default: the width rule's)."""
        # A width rule that does not apply to this kernel (poly, sigmoid) falls back to "scale".
        return KernelBasis(
            self.kernel,
            gamma=self._width_rule().basis_gamma if gamma is None else gamma,
            degree=self.degree,
            coef0=self.coef0,
            kernel_params=self.kernel_params,
            bias=bool(self.bias),
        ).fit(X, centres=centres)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        tags.input_tags.sparse = self.kernel != "precomputed"
        return tags

    # -- RVM* (bayes_rvm.posterior.predictive)
    # -------------------------------------------------------------
    #: Whether RVM* is defined for this estimator's MCMC fits (the regressor's Gaussian
    #: per-draw posteriors; the classifier's would need a Laplace fit per draw).
    _rvm_star_mcmc: bool = False

    def _check_predictive(self) -> None:
        """``predictive="rvm*"`` needs ``k(x, x)`` at new inputs (and, for RVC, a type-II fit)."""
        if self.predictive != "rvm*":
            return
        if isinstance(self.kernel, str) and self.kernel == "precomputed":
            raise ValueError(
                "predictive='rvm*' needs k(x, x) at new inputs, which kernel='precomputed' does "
                "not give; use predictive='rvm' or pass the kernel itself."
            )
        if self._uses_draws() and not self._rvm_star_mcmc:
            raise ValueError(
                f"{type(self).__name__}(predictive='rvm*') applies to type-II fits: under MCMC "
                "each draw would need its own Laplace fit. Use predictive='rvm' with "
                "inference='mcmc' (the mixture over the posterior draws)."
            )
        if self._uses_draws() and self._samples_width():
            raise ValueError(
                "predictive='rvm*' is not defined for a sampled kernel width (its added "
                "functions would need their own prior at each draw's width); use "
                "predictive='rvm', whose mixture over the draws takes each at its own width."
            )

    def _rvm_star_inputs(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``k(X, X_train)`` and ``k(x, x)`` of each row: RVM*'s added functions."""
        x_train = self.training_.x_train
        if x_train is None:
            raise ValueError(
                "this fit holds no training inputs (saved by an older version?); refit it to "
                "predict with predictive='rvm*'."
            )
        cross = self.basis_.kernel_matrix(X, x_train)
        # A sum is a cheap test for NaN or inf (as in KernelBasis.transform).
        if not np.isfinite(cross.sum()) and not np.all(np.isfinite(cross)):
            raise ValueError(
                f"kernel produced non-finite values at the new inputs (kernel={self.kernel!r})."
            )
        return cross, self.basis_.diagonal(X)

    def _rows_from_cross(self, X: np.ndarray, cross: np.ndarray, columns) -> np.ndarray:
        """Design rows of ``X`` over ``columns``, read from RVM*'s block ``k(X, X_train)``.

        When the candidate centres are the training inputs (``centres=None``) every kernel
        column is already in ``cross``: one kernel evaluation serves both the RVM's rows and
        the added functions. Otherwise the rows are built by the basis.
        """
        cols = np.asarray(columns, dtype=np.intp)
        centres, x_train = self.basis_.centres_, self.training_.x_train
        same = centres is x_train or (
            centres.shape == x_train.shape and np.array_equal(centres, x_train)
        )
        if not same:
            return self.basis_.transform(X, columns=cols)
        out = np.ones((X.shape[0], cols.size))
        is_centre = cols < self.basis_.n_centres_
        out[:, is_centre] = cross[:, cols[is_centre]]
        return out

    def _check_priors(self) -> None:
        """What the declared constraints cannot say about the hyperpriors."""
        if self._samples_width():
            who = type(self).__name__
            if not self._samples_width_ok:
                raise ValueError(
                    f"{who} cannot sample the kernel width (gamma given as a Prior); choose it by "
                    f"the evidence (gamma='evidence') or by cross-validation ({who}CV)."
                )
            if self.inference != "mcmc":
                raise ValueError(
                    "gamma given as a Prior is sampled, which needs inference='mcmc'; for the "
                    "type-II width use gamma='evidence'."
                )
            self._width_rule().require_width(
                "gamma given as a Prior samples the width of the kernels {kernels}; "
                f"got kernel={self.kernel!r}."
            )
            as_prior(self.gamma, "gamma", positive=True)
        if isinstance(self.nu, Prior) and self.inference != "mcmc":
            raise ValueError(
                "nu given as a Prior is sampled, which needs inference='mcmc'; give a number for "
                "a type-II fit."
            )
        if self.alpha_prior is not None and self.prior != "ard":
            raise ValueError("alpha_prior sets the ARD hyperprior; use it with prior='ard'.")
        as_prior(self.alpha_prior, "alpha_prior", positive=True)
        if isinstance(self.nu, Prior):
            as_prior(self.nu, "nu", positive=True)

    def _type2_nu(self) -> float:
        # A sampled nu has no single value; the type-II fit that seeds MCMC uses the default.
        return DEFAULT_NU if isinstance(self.nu, Prior | str) else float(self.nu)

    def _mcmc_student_t(self) -> float | Prior:
        """``nu`` of the Student-t prior that MCMC samples (``"auto"``: a proper Cauchy)."""
        return DEFAULT_MCMC_NU if isinstance(self.nu, str) else self.nu

    def _alpha_prior(self) -> tuple[float, float]:
        nu = self._type2_nu()
        return (nu / 2.0, nu / 2.0) if self.prior == "student_t" else (0.0, 0.0)

    @property
    def n_relevance_vectors_(self) -> int:
        """Number of relevance vectors (basis functions other than the bias that were kept)."""
        check_is_fitted(self, "relevance_")
        return int(self.relevance_.size)

    # -- the PyMC model ----------------------------------------------------------------------
    def _uses_draws(self) -> bool:
        """Whether predictions average over posterior draws (MCMC, VI), not a type-II optimum."""
        return getattr(self, "inference", "type2") in ("mcmc", "vi")

    def _mcmc_basis(self) -> str:
        """``mcmc_basis`` resolved: ``"auto"`` is ``"relevant"`` for a sampled width, Student-t
        noise or a fit from sufficient statistics, else all."""
        if self.mcmc_basis == "auto":
            # Student-t noise samples the weights themselves: the robust fit's relevant columns.
            t_noise = getattr(self, "likelihood", "gaussian") == "student_t"
            # From statistics (N of 10^5 and more) the alphas of the columns the type-II fit
            # pruned are not identified: their chains disagree (R-hat 1.31 at N = 10^6, 200
            # centres, 2 x 500 draws, against 1.014 over the 46 relevance vectors, in a quarter
            # of the time; benchmarks/bench_mcmc.py --sections large).
            statistics = getattr(self, "statistics_", None) is not None
            return "relevant" if self._samples_width() or t_noise or statistics else "all"
        return self.mcmc_basis

    def _mcmc_columns(self) -> np.ndarray:
        """The basis columns the MCMC model uses: the type-II relevant ones or all."""
        if self._mcmc_basis() == "relevant":
            return np.asarray(self.active_, dtype=int)
        return np.arange(self.basis_.n_basis_)

    def _mcmc_initvals(self, fit_n) -> dict:
        """Where the sampler starts: the type-II fit ``fit_n`` of the normalised problem."""
        from bayes_rvm.inference import type2_initvals

        # fit_n is stated for unit-norm columns, the hyperpriors for unit-RMS ones
        # (prior_column_scale): alpha_rel is N times larger in the latter.
        # The cap sits 4 decades above the default hyperprior's median, as 1e4 did above 1.
        n_rows = self.training_.inputs.shape[0]
        alpha_max = 1e4 / DEFAULT_WEIGHT_SCALE**2
        return type2_initvals(fit_n, basis=self._mcmc_columns(), factor=n_rows, alpha_max=alpha_max)

    def _posterior_draws(self) -> PosteriorDraws:
        """The posterior draws that predictions average over, read once from :attr:`idata_`.

        Read again only when :attr:`idata_` is another tree (a new fit, a loaded model); the
        estimators never read the tree's arrays themselves.
        """
        dt = self.idata_
        if getattr(self, "_draws_of", None) is not dt:
            likelihood = dt.attrs.get("likelihood", "gaussian")
            self._draws = PosteriorDraws.from_posterior(dt["posterior"].dataset, likelihood)
            self._draws_of = dt
        return self._draws

    def _finish_fit(self, X: np.ndarray, training: TrainingData, fit_n) -> None:
        """Keep the training problem and, under ``inference="mcmc"``, sample :attr:`model_`.

        ``training`` holds what predictions need; the inputs join it (RVM* places a basis
        function on each test point, and ``model_`` rebuilds the training design from them: for
        a precomputed kernel, the training kernel matrix). ``fit_n`` is the engine's fit of the
        normalised problem, which seeds the sampler.
        """
        inputs = "x_train" if self.kernel != "precomputed" else "kernel_matrix"
        self.training_ = dataclasses.replace(training, **{inputs: X})
        self._idata = None
        self._model = None
        if self.inference == "vi":
            self._idata = self._fit_variational(self.model_)
        if self.inference == "mcmc":
            init = self._mcmc_initvals(fit_n)
            if self._samples_width():
                # Start at the evidence width (what the columns' alphas were fitted at).
                init["gamma_rel"] = np.asarray(self.gamma_ / self.model_["gamma_ref"].get_value())
            self._idata = self._sample_and_complete(self.model_, init)

    def _mcmc_design(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Training design of the MCMC columns, in the user's units, with the column scale its
        hyperpriors are stated for (:func:`~bayes_rvm.evidence.problem.prior_column_scale`)."""
        cols = self._mcmc_columns()
        Phi = self.basis_.transform(self.training_.inputs, columns=cols)
        return Phi, prior_column_scale(column_scale(Phi), Phi.shape[0]), cols

    @property
    def model_(self):
        """The :class:`pymc.Model` that ``inference="mcmc"`` samples, in the units of ``X``, ``y``.

        Built from the training data on first access (also after a type-II fit) and never pickled
        or saved: a loaded or unpickled estimator rebuilds it. :meth:`make_model` builds a fresh
        one, in the other form or with terms of your own in the mean.
        """
        check_is_fitted(self, "basis_")
        if getattr(self, "_model", None) is None:
            self._model = self.make_model()
        return self._model

    def _keep_sample_kwargs(self, sample_kwargs: dict) -> None:
        """Check ``fit``'s keyword arguments for the sampler and keep them for this fit."""
        if sample_kwargs and not self._uses_draws():
            raise TypeError(
                f"fit() got sampler arguments {sorted(sample_kwargs)}, which only "
                "inference='mcmc' (or 'vi') uses."
            )
        owned = _OWNED_SAMPLE_KWARGS & set(sample_kwargs)
        if owned:
            raise TypeError(
                f"fit() got {sorted(owned)}: set them on the estimator "
                f"({type(self).__name__}(draws=..., tune=..., chains=..., sampler=..., "
                "random_state=...)), not in fit()."
            )
        self._sample_kwargs = dict(sample_kwargs)

    def _sample_and_complete(self, model, initvals):
        """NUTS on ``model`` with the estimator's settings; DataTree with the estimator's attrs."""
        import json

        from bayes_rvm.inference import sample_mcmc

        free = {rv.name for rv in model.free_RVs}
        options = {"progressbar": True if self.verbose else "auto", "advice": "estimator"}
        options |= getattr(self, "_sample_kwargs", {})
        nuts = options.get("nuts")
        if self._target_accept() is not None and (nuts is None or isinstance(nuts, Mapping)):
            # A target_accept in fit(X, y, nuts={...}) overrides it; other NUTS settings join
            # it (anything else reaches sample_mcmc, which says what nuts must be).
            options["nuts"] = {"target_accept": self._target_accept()} | dict(nuts or {})
        dt = sample_mcmc(
            model,
            draws=self.draws,
            tune=self.tune,
            chains=self.chains,
            sampler=self.sampler,
            random_seed=check_random_state(self.random_state).randint(2**31 - 1),
            initvals={k: v for k, v in initvals.items() if k in free},
            **options,
        )
        dt.attrs.update(
            estimator=type(self).__name__,
            params=json.dumps(self.get_params(), sort_keys=True, default=repr),
        )
        return dt

    @one_blas_thread
    def sample_posterior_predictive(self, X=None, random_state=None, *, extend_idata=True):
        """Posterior predictive draws, with the weights from their posterior (either engine).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), optional
            New inputs; default the training inputs.
        random_state : int, RandomState or None, default=None
        extend_idata : bool, default=True
            Add the draws to :attr:`idata_` in place and return it (the convention of
            pymc-marketing's models), so that ``az.plot_ppc_dist(est.idata_)`` and
            ``az.loo_pit(est.idata_)`` see them; a later call replaces them. With False,
            :attr:`idata_` is left as it is and a copy holding the draws is returned.

        Returns
        -------
        xarray.DataTree
            :attr:`idata_` (or its copy) with ``posterior_predictive`` (``y[obs]`` at the
            training inputs, beside ``observed_data``: ready for ``az.plot_ppc_dist`` and
            ``az.loo_pit``) or, for new ``X``, ``predictions`` and
            ``predictions_constant_data`` (their design rows).
        """
        from bayes_rvm.inference import sample_posterior_predictive

        check_is_fitted(self, "basis_")
        dt = self.idata_
        Phi_new = None
        if X is not None:
            X = new_inputs(self, X)
        draws = self._posterior_draws()
        self._check_output_memory(
            "sample_posterior_predictive",
            len(dt["observed_data"]["y"]) if X is None else X.shape[0],
            draws.w.shape[3],
            draws=draws.n_draws,
        )
        if X is not None:
            Phi_new = self._design_draws(X, draws.columns)
        seed = check_random_state(random_state).randint(2**31 - 1)
        offset = None if X is None else draws.intercept_at(X.shape[0])
        out = sample_posterior_predictive(dt, Phi_new, offset=offset, random_seed=seed)
        if not extend_idata:
            return out
        groups = (
            ("posterior_predictive",) if X is None else ("predictions", "predictions_constant_data")
        )
        for name in groups:
            if name in out.children:
                dt[name] = out[name]
            elif name in dt.children:  # left by an earlier call with another design
                del dt[name]
        return dt

    def _check_output_memory(
        self,
        call: str,
        n: int,
        n_outputs: int,
        *,
        draws: int = 0,
        cov: bool = False,
        n_samples: int = 0,
    ) -> None:
        """:func:`check_memory` of a prediction at ``n`` inputs, before anything is allocated.

        The estimate counts the design rows over the retained (or sampled) basis functions, one
        per draw when the width was sampled; per posterior draw, the function values and their
        deviations (or draws) at each input and output; RVM*'s kernel block against the training
        inputs; ``n_samples`` draws of new targets with their standard normals; and, for a
        joint covariance, the ``n x n`` matrix per output and the factorisations a joint draw
        from it makes.
        """
        # The columns predictions use: the sampled ones, or the type-II relevance vectors.
        n_basis = self._posterior_draws().basis.size if self._uses_draws() else self.active_.size
        per_draw_design = draws and self._samples_width()
        floats = float(n) * n_basis * (draws if per_draw_design else 1)
        floats += 2.0 * draws * n * n_outputs + 2.0 * n_samples * n * n_outputs
        if self.predictive == "rvm*":
            x_train = self.training_.x_train
            floats += float(n) * (0 if x_train is None else len(x_train))
        if cov:
            floats += float(n) * n * (4 + n_outputs)
        if n_samples:
            advice = "Ask for fewer draws (a smaller n_samples), or draw at fewer inputs at a time."
        elif cov:
            advice = (
                "Ask for return_std=True (the marginal standard deviations need O(n) memory), "
                "or for the covariance of fewer inputs at a time."
            )
        else:
            advice = "Predict fewer inputs at a time (in batches of rows)."
        check_memory(
            f"{type(self).__name__}.{call}",
            f"{n} inputs"
            + (f" x n_samples={n_samples} draws" if n_samples else "")
            + (f" x {draws} posterior draws" if draws else "")
            + (" with their joint covariance" if cov else "")
            + " need",
            floats,
            lambda limit: advice,
        )

    #: Float64 temporaries a block of rows may hold in :meth:`_in_row_blocks` (128 MiB).
    _BLOCK_FLOATS = 2**24

    @staticmethod
    def _in_row_blocks(fn, X: np.ndarray, floats_per_row: float):
        """``fn(X)`` computed on blocks of rows and concatenated (a tuple of arrays for a tuple).

        A block holds at most about :attr:`_BLOCK_FLOATS` of the ``floats_per_row`` temporaries,
        for functions whose rows do not interact (per-row moments over posterior draws).
        """
        step = max(1, int(BaseRVM._BLOCK_FLOATS // max(floats_per_row, 1)))
        if X.shape[0] <= step:
            return fn(X)
        parts = [fn(X[i : i + step]) for i in range(0, X.shape[0], step)]
        if isinstance(parts[0], tuple):
            return tuple(np.concatenate(p) for p in zip(*parts, strict=True))
        return np.concatenate(parts)

    def _design_draws(self, X: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """Design rows of ``X`` over the posterior's columns: (n, M), or one per draw
        (chain, draw, n, M) when the width was sampled (the kernel at each draw's ``gamma``)."""
        if not self._samples_width() or self._posterior_draws().gamma is None:
            return self.basis_.transform(X, columns=cols)
        from bayes_rvm.basis.kernels import stationary_distances, width_design

        centres = self.basis_.centres_[cols[cols < self.basis_.n_centres_]]
        dist = stationary_distances(X, centres, self.kernel)
        bias = bool(np.any(cols >= self.basis_.n_centres_))
        return width_design(dist, self._posterior_draws().gamma, bias=bias)

    def __getstate__(self):
        # A pm.Model and compiled functions do not pickle reliably (pymc#5886, #6167).
        state = super().__getstate__()
        state.pop("_model", None)
        # The posterior draws are idata_'s arrays again: read back on first use.
        state.pop("_draws", None)
        state.pop("_draws_of", None)
        return state
