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
import warnings
from collections.abc import Mapping
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
import xarray as xr
from sklearn.base import BaseEstimator
from sklearn.cluster import MiniBatchKMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import Kernel as GPKernel
from sklearn.utils import check_random_state, check_scalar
from sklearn.utils._param_validation import (
    Interval,
    StrOptions,
    validate_parameter_constraints,
)
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from bayes_rvm.basis.kernels import WIDTH_RULES, KernelBasis, WidthRule
from bayes_rvm.dims import BASIS
from bayes_rvm.estimators.width_selection import (
    CLASSIFIER_STOP_DROP,
    CLASSIFIER_WIDTH_PENALTY,
    DEFAULT_GAMMA,
    SHARED_MAX_SAMPLES,
    SHARED_MAX_SAMPLES_CLASSIFIER,
    WidthSearch,
    width_attributes,
)
from bayes_rvm.evidence import (
    OneVsRestFit,
    TrainingData,
    WidthPath,
    column_scale,
    normalise_columns,
    prior_column_scale,
)
from bayes_rvm.memory import MEMORY_ENV, check_fit_memory, check_memory, memory_limit
from bayes_rvm.models.priors import (
    DEFAULT_MCMC_NU,
    DEFAULT_NU,
    DEFAULT_WEIGHT_SCALE,
    NAMED_ALPHA_PRIORS,
    Prior,
    as_prior,
    default_alpha_prior,
    in_log_alpha,
    r2d2_free_values,
)
from bayes_rvm.posterior.draws import PosteriorDraws
from bayes_rvm.posterior.predictors import Rows
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
    "ParamGroup",
    "Settings",
    "check_fit_memory",
    "check_memory",
    "check_number",
    "memory_limit",
    "normalise_columns",
    "resolve_group",
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


@dataclasses.dataclass(frozen=True, eq=False)
class ParamGroup:
    """One dict parameter (``prior_params``, ...): the defaults and constraints of its keys.

    ``open``: keys other than these are allowed and kept apart (``kernel_params``: the keyword
    arguments of a callable kernel).
    """

    defaults: Mapping
    constraints: Mapping
    open: bool = False

    def only(self, *keys: str) -> ParamGroup:
        """The group restricted to ``keys`` (a cross-validated twin's)."""
        return ParamGroup(
            {k: self.defaults[k] for k in keys}, {k: self.constraints[k] for k in keys}, self.open
        )


def resolve_group(owner: str, name: str, value, group: ParamGroup) -> tuple[dict, dict]:
    """The dict parameter ``name`` merged over its defaults and checked; ``(known, others)``.

    A key the group does not know is a ValueError naming ``name``, the key and the allowed keys
    (unless the group is open: then such keys come back in ``others``). The values are checked
    by scikit-learn's :func:`validate_parameter_constraints`, named ``name['key']``. The user's
    dict is not modified.
    """
    given = {} if value is None else dict(value)
    others = {k: v for k, v in given.items() if k not in group.defaults}
    if others and not group.open:
        raise ValueError(
            f"{owner}: {name} has no key {sorted(others, key=str)[0]!r}; its keys are "
            f"{sorted(group.defaults)}."
        )
    known = {**group.defaults, **{k: v for k, v in given.items() if k in group.defaults}}
    validate_parameter_constraints(
        {f"{name}[{k!r}]": group.constraints[k] for k in known},
        {f"{name}[{k!r}]": v for k, v in known.items()},
        caller_name=owner,
    )
    return known, others


@dataclasses.dataclass(frozen=True, eq=False)
class Settings:
    """An estimator's dict parameters and ``centres`` resolved: what the internal code reads.

    Built at the start of ``fit`` (kept as ``_settings``) and when a saved model is loaded; an
    unfitted estimator resolves it from its current parameters (:attr:`BaseRVM._cfg`).
    ``centre_method`` is None (every training input), ``"random"``, ``"kmeans"`` (with
    ``n_centres``) or ``"given"`` (``centres``, the array).
    """

    degree: int
    coef0: float
    kernel_kwargs: dict | None
    nu: object
    alpha_prior: object
    threshold_alpha: object
    noise_variance: float | None
    noise_nu: float | None
    noise_prior: object
    draws: int
    tune: int
    chains: int
    sampler: str
    mcmc_basis: str
    vi_kwargs: dict | None
    centre_method: str | None
    n_centres: int | None
    centres: object


#: The centre methods ``centres=(method, n)`` takes.
CENTRE_METHODS = ("random", "kmeans")


def resolve_centres(spec) -> tuple[str | None, int | None, object]:
    """``centres`` as ``(method, n_centres, array)``: None, ``(method, n)`` or given centres."""
    if spec is None:
        return None, None, None
    if isinstance(spec, str) or (
        isinstance(spec, tuple | list) and spec and isinstance(spec[0], str)
    ):
        if isinstance(spec, str) or len(spec) != 2 or spec[0] not in CENTRE_METHODS:
            raise ValueError(
                "centres must be None (every training input), ('random', n) or ('kmeans', n) "
                f"(a method and a count) or an array of centres; got {spec!r}."
            )
        check_number(
            f"the count of centres in centres={tuple(spec)!r}", spec[1], low=0, integer=True
        )
        return spec[0], int(spec[1]), None
    return "given", None, spec


#: ``kernel_params``: the polynomial and sigmoid kernels' terms; its other keys are the keyword
#: arguments of a callable kernel.
KERNEL_PARAMS = ParamGroup(
    {"degree": 3, "coef0": 1.0},
    {
        "degree": [Interval(Integral, 1, None, closed="left")],
        "coef0": [Interval(Real, None, None, closed="neither")],
    },
    open=True,
)
#: Constraints of the keys of ``prior_params`` and ``sampler_config`` that both estimators take.
PRIOR_CONSTRAINTS = {
    "nu": [POSITIVE, Prior, StrOptions({"auto"})],
    "alpha_prior": [Prior, dict, StrOptions(set(NAMED_ALPHA_PRIORS)), None],
}
SAMPLER_CONSTRAINTS = {
    "draws": [Interval(Integral, 1, None, closed="left")],
    "tune": [Interval(Integral, 0, None, closed="left")],
    "chains": [Interval(Integral, 1, None, closed="left")],
    "sampler": [StrOptions(set(SAMPLERS))],
    "mcmc_basis": [StrOptions({"all", "relevant"})],
}


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
    elif not np.isfinite(y).all():
        # An object array's None passes scikit-learn's check and becomes NaN when converted.
        bad = np.flatnonzero(~np.isfinite(y).reshape(y.shape[0], -1).all(axis=1))
        raise ValueError(
            f"{type(estimator).__name__}: the targets y must be finite; row {int(bad[0])} is "
            f"{y[bad[0]].tolist()} (a missing value?)."
        )
    return dense_input(X), y


def new_inputs(estimator, X) -> np.ndarray:
    """New inputs of a fitted estimator through scikit-learn's checks (their feature count
    against the fit's), dense."""
    return dense_input(
        validate_data(estimator, X, reset=False, dtype=np.float64, accept_sparse=ACCEPT_SPARSE)
    )


def output_dtype(X) -> type:
    """The floating type of predictions for inputs ``X``: float32 for float32 arrays (as
    scikit-learn's linear models keep it), float64 otherwise. The computation is float64."""
    return np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64


# Sampler settings that are estimator parameters, so that get_params / clone see them.
_OWNED_SAMPLE_KWARGS = {"draws", "tune", "chains", "sampler", "random_seed", "initvals", "model"}


class DictKeyParams:
    """``set_params`` of one key of a dict parameter alone, as ``prior_params__nu=0.01``, or of
    a dict inside it, as ``sampler_config__vi_kwargs__n=50_000``.

    The dicts on the way are copied with that key set. That is how
    ``GridSearchCV(RVR(prior="student_t"), {"prior_params__nu": [1e-4, 1.0]})`` searches one
    key; scikit-learn's own ``set_params`` only reaches into estimators, and failed on the None
    default. The dict parameters are those of ``_param_groups``.
    """

    #: The dict parameters' keys, with their defaults and constraints (each estimator's own).
    _param_groups: dict = {}  # noqa: RUF012

    def set_params(self, **params):
        for name in [n for n in params if "__" in n]:
            group, _, key = name.partition("__")
            if group not in self._param_groups:
                continue  # scikit-learn's own check names it
            spec = self._param_groups[group]
            current = params.get(group, getattr(self, group))
            # An open group's keys are a callable's keyword arguments, "__" and all.
            path = [key] if spec.open else key.split("__")
            params[group] = _with_key(current, path, params.pop(name), name, spec.defaults)
        return super().set_params(**params)


def _with_key(d, path: list[str], value, name: str, defaults: Mapping) -> dict:
    """A copy of the dict ``d`` (None: empty) with ``value`` at ``path``, a key of a dict in it
    for each further step; ``defaults`` gives the values of keys ``d`` does not hold."""
    if d is not None and not isinstance(d, dict):
        raise ValueError(f"set_params({name}=...): {d!r} on its way is not a dict.")
    key, rest = path[0], path[1:]
    if not key:
        raise ValueError(f"set_params({name}=...): a key is empty.")
    out = dict(d or {})
    out[key] = _with_key(out.get(key, defaults.get(key)), rest, value, name, {}) if rest else value
    return out


class BaseRVM(DictKeyParams, BaseEstimator):
    """Parameters and helpers shared by the RVM estimators.

    Subclasses declare their own ``_parameter_constraints`` (extending :attr:`_shared_constraints`)
    and implement ``_build_model(form, mean)``.
    """

    #: Constraints of the parameters both estimators take; scikit-learn checks them in ``fit``.
    _shared_constraints: dict = {  # noqa: RUF012 - scikit-learn's convention
        "kernel": [str, callable],
        "gamma": [StrOptions({"scale", "auto", *WIDTH_RULES}), POSITIVE, "array-like", Prior],
        "kernel_params": [dict, None],
        "bias": ["boolean", StrOptions({"free"})],
        "centres": ["array-like", str, None],
        "prior": [StrOptions(set(PRIORS))],
        "prior_params": [dict, None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [POSITIVE],
        "inference": [StrOptions({"type2", "mcmc"})],
        "sampler_config": [dict, None],
        "predictive": [StrOptions({"rvm", "rvm*"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
    }

    def _resolve_settings(self) -> Settings:
        """The dict parameters and ``centres`` resolved and checked (see :class:`Settings`)."""
        owner = type(self).__name__
        flat = dict.fromkeys(("noise_variance", "noise_nu", "noise_prior", "vi_kwargs"))
        kernel_kwargs = None
        for name, group in self._param_groups.items():
            known, others = resolve_group(owner, name, getattr(self, name), group)
            flat.update(known)
            if group.open:
                kernel_kwargs = others or None
        method, n, array = resolve_centres(self.centres)
        return Settings(
            **flat, kernel_kwargs=kernel_kwargs, centre_method=method, n_centres=n, centres=array
        )

    @property
    def _cfg(self) -> Settings:
        """The settings ``fit`` resolved (``_settings``); resolved now, and not kept, where
        ``fit`` has not run (a clone, a check before any fit) or ``set_params`` ran since."""
        settings = self.__dict__.get("_settings")
        return self._resolve_settings() if settings is None else settings

    def set_params(self, **params):
        """scikit-learn's ``set_params`` (a key of a dict parameter alone too:
        :class:`DictKeyParams`); the estimator then reads its new parameters (as ``fit`` will
        resolve them), not the settings its last fit resolved."""
        super().set_params(**params)
        self.__dict__.pop("_settings", None)
        self.__dict__.pop("_predictor_obj", None)  # chosen again from the new parameters
        idata = self.__dict__.get("_tree_cache")
        if idata is not None and idata.attrs.get("method") == "type2":
            # A type-II tree is drawn from the fit under the parameters (the predictive it
            # describes, the seed): built again on first use. A sampled one is the fit itself.
            self._tree_cache = None
        return self

    def _start_fit(self, sample_kwargs: Mapping | None = None) -> None:
        """Resolve the parameters once, at the start of ``fit``: the settings, the width rule.

        The internal code reads the settings (:attr:`_cfg`), never the dict parameters.
        ``fit``'s keyword arguments are checked for a ``sample_weight`` first: the estimators
        take none, and say so rather than calling it a sampler argument.
        """
        if sample_kwargs and "sample_weight" in sample_kwargs:
            name = type(self).__name__
            hint = (
                ""
                if self._is_classifier
                else "; for rows of doubtful quality, likelihood='student_t' down-weights "
                "outliers by itself"
            )
            raise TypeError(
                f"{name}.fit does not take sample_weight: its likelihood weighs every row alike "
                f"under every inference. Fit on the rows as they are, leaving out those of "
                f"weight 0{hint}."
            )
        self._settings = self._resolve_settings()
        self._check_kernel_kwargs()
        self._resolve_width_rule()

    def _check_kernel_kwargs(self) -> None:
        """Refuse ``kernel_params`` keys that only a kernel function reads, for another kernel.

        Checked at ``fit`` (not when a saved model is loaded, whose stray keys were ignored).
        """
        kwargs = self._settings.kernel_kwargs
        if kwargs and (not callable(self.kernel) or isinstance(self.kernel, GPKernel)):
            group = self._param_groups["kernel_params"]
            raise ValueError(
                f"{type(self).__name__}: kernel_params has no key {sorted(kwargs, key=str)[0]!r} "
                f"for kernel={self.kernel!r}; its keys are {sorted(group.defaults)}, and others "
                "go to a kernel function, k(X, Y, **kernel_params)."
            )

    # -- the kernel width as a hyperparameter ------------------------------------------------------
    #: Whether the estimator samples a kernel width given as ``gamma=Prior(...)``.
    _samples_width_ok = False
    #: Whether the estimator is a classifier (the default width rule's options differ).
    _is_classifier = False

    def _resolve_width_rule(self) -> WidthRule:
        """Resolve ``gamma`` and ``kernel`` into the width rule, once, at the start of ``fit``.

        Every later call of :meth:`_width_rule` reads this one: a ``set_params`` after the fit
        does not change what the fitted estimator did.
        """
        self._fitted_width_rule = self._params_width_rule()
        return self._fitted_width_rule

    def _params_width_rule(self) -> WidthRule:
        return WidthRule.resolve(
            self.gamma, self.kernel, default=DEFAULT_GAMMA, sampled=isinstance(self.gamma, Prior)
        )

    def _width_rule(self) -> WidthRule:
        """The rule the width code dispatches on: the one ``fit`` resolved (resolved from the
        parameters, and not kept, where ``fit`` has not run)."""
        rule = getattr(self, "_fitted_width_rule", None)
        return self._params_width_rule() if rule is None else rule

    def _samples_width(self) -> bool:
        """``gamma`` is a :class:`Prior`: the width sampled by NUTS, seeded by its evidence fit."""
        return self._width_rule().sampled

    def _target_accept(self) -> float | None:
        """NUTS's target acceptance for this estimator's model, or None for the sampler's own.

        With the width sampled, nearly collinear relevance vectors (two centres close together)
        leave a narrow ridge in their alphas, which a step size tuned to the default 0.8
        acceptance crosses with a rare divergence; 0.95 has none on sinc (N = 100).
        """
        return 0.95 if self._samples_width() else None

    def _mcmc_thin(self) -> int | str:
        """``thin`` of :func:`~bayes_rvm.inference.sample_mcmc` unless ``fit`` is given one."""
        return "auto"

    def _learns_width(self) -> bool:
        # A sampled width is learned too: the type-II fit that seeds the sampler (and chooses its
        # basis) learns it. The default rule on a kernel without a width resolves to "scale".
        rule = self._width_rule()
        if rule.learned and not rule.sampled:
            rule.require_width(
                f"gamma={self.gamma!r} learns the width of the kernels {{kernels}}; "
                f"got kernel={self.kernel!r}."
            )
        return rule.learned

    def _per_feature_width_ok(self) -> bool:
        """Whether the default width rule may learn one width per feature (see WidthSearch)."""
        return False

    def _width_search(self) -> WidthSearch:
        """The width search of this fit (a ``WidthSearch``)."""
        return WidthSearch(
            rule=self._width_rule(),
            kernel=self.kernel,
            bias=bool(self.bias),
            classifier=self._is_classifier,
            per_feature=self._per_feature_width_ok(),
            random_state=self.random_state,
            owner=type(self).__name__,
            squares=self._square_matrices(),
            progress=True if self.verbose else "auto",
        )

    def _select_width(self, X, problem, engine, **options):
        """The width search on this fit's candidate centres; ``(basis, problem, fit)``."""
        found = self._width_search().select(
            X, self._candidate_centres(X), problem, engine, **options
        )
        self._set_width(found.basis, found.path)
        self.width_selection_ = found.search
        return found.basis, found.problem, found.fit

    def _set_width(self, basis: KernelBasis, path) -> None:
        """``gamma_``, ``length_scale_`` and ``width_path_`` from the fitted basis.

        An earlier fit's ``width_selection_`` goes (it would describe another width, and be
        saved with this fit); a fit that searches sets its own after this call.
        """
        vars(self).pop("width_selection_", None)
        for name, value in width_attributes(basis, self.kernel, path).items():
            setattr(self, name, value)

    def _candidate_centres(self, X: np.ndarray) -> np.ndarray | None:
        """The centres the basis functions sit on: None (every training input) or a subset."""
        cfg = self._cfg
        if cfg.centre_method is None:
            return None
        if self.kernel == "precomputed":
            raise ValueError("centres cannot be chosen with kernel='precomputed'.")
        if cfg.centre_method == "given":
            return check_array(cfg.centres, dtype=np.float64, input_name="centres")
        n = cfg.n_centres
        if n > X.shape[0]:
            raise ValueError(
                f"centres={self.centres!r} asks for {n} centres; that exceeds the {X.shape[0]} "
                "training samples."
            )
        rng = check_random_state(self.random_state)
        if cfg.centre_method == "random":
            return X[np.sort(rng.choice(X.shape[0], n, replace=False))]
        km = MiniBatchKMeans(n_clusters=n, n_init=3, random_state=rng.randint(2**31 - 1))
        return km.fit(X).cluster_centers_

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
            degree=self._cfg.degree,
            coef0=self._cfg.coef0,
            kernel_params=self._cfg.kernel_kwargs,
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

    def _seed(self) -> int:
        """The seed of the estimator's draws (sampling, its DataTree's, the folds of its refit
        LOO): the first number ``random_state`` gives, so that they repeat where it is set."""
        return int(check_random_state(self.random_state).randint(2**31 - 1))

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
        cfg = self._cfg
        if isinstance(cfg.nu, Prior) and self.inference != "mcmc":
            raise ValueError(
                "nu given as a Prior is sampled, which needs inference='mcmc'; give a number for "
                "a type-II fit."
            )
        if cfg.alpha_prior is not None and self.prior != "ard":
            raise ValueError(
                "prior_params['alpha_prior'] sets the ARD hyperprior; use it with prior='ard'."
            )
        if (self.prior_params or {}).get("nu", "auto") != "auto" and self.prior != "student_t":
            raise ValueError(
                "prior_params['nu'] sets the Student-t prior's degrees of freedom; use it with "
                "prior='student_t'."
            )
        as_prior(cfg.alpha_prior, "alpha_prior", positive=True)
        if isinstance(cfg.nu, Prior):
            as_prior(cfg.nu, "nu", positive=True)

    def _type2_nu(self) -> float:
        # A sampled nu has no single value; the type-II fit that seeds MCMC uses the default.
        nu = self._cfg.nu
        return DEFAULT_NU if isinstance(nu, Prior | str) else float(nu)

    def _mcmc_student_t(self) -> float | Prior:
        """``nu`` of the Student-t prior that MCMC samples (``"auto"``: a proper Cauchy)."""
        nu = self._cfg.nu
        return DEFAULT_MCMC_NU if isinstance(nu, str) else nu

    def _mcmc_alpha_prior(self, default: str | None = None) -> Prior | None:
        """The ARD hyperprior MCMC and VI sample: ``alpha_prior``, else ``default_alpha_prior(
        default)``, else None (the model's own default). On a basis of relevance vectors, whose
        precisions the data all pin, it is sampled in ``log alpha`` (:func:`in_log_alpha`)."""
        prior = as_prior(self._cfg.alpha_prior, "alpha_prior")
        if prior is None and default is not None:
            prior = default_alpha_prior(default)
        return in_log_alpha(prior) if self._mcmc_basis() == "relevant" else prior

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
        if self._cfg.mcmc_basis == "auto":
            # Student-t noise samples the weights themselves: the robust fit's relevant columns.
            t_noise = getattr(self, "likelihood", "gaussian") == "student_t"
            # From statistics (N of 10^5 and more) the alphas of the columns the type-II fit
            # pruned are not identified: their chains disagree (R-hat 1.31 at N = 10^6, 200
            # centres, 2 x 500 draws, against 1.014 over the 46 relevance vectors, in a quarter
            # of the time; benchmarks/bench_mcmc.py --sections large).
            statistics = getattr(self, "statistics_", None) is not None
            return "relevant" if self._samples_width() or t_noise or statistics else "all"
        return self._cfg.mcmc_basis

    def _mcmc_columns(self) -> np.ndarray:
        """The basis columns the MCMC model uses: the type-II relevant ones or all."""
        if self._mcmc_basis() == "relevant":
            return np.asarray(self.active_, dtype=int)
        return np.arange(self.basis_.n_basis_)

    def _mcmc_initvals(self, fit_n, decades: float = 4.0) -> dict:
        """Where the sampler starts: the type-II fit ``fit_n`` of the normalised problem, its
        pruned (and larger) precisions at ``decades`` above the default hyperprior's median."""
        from bayes_rvm.inference import type2_initvals

        # fit_n is stated for unit-norm columns, the hyperpriors for unit-RMS ones
        # (prior_column_scale): alpha_rel is N times larger in the latter.
        # The cap sits `decades` above the default hyperprior's median, as 1e4 did above 1.
        n_rows = self.training_.inputs.shape[0]
        alpha_max = 10.0**decades / DEFAULT_WEIGHT_SCALE**2
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
        self._tree_cache = None
        self._model = None
        if self.inference == "vi":
            self._tree_cache = self._fit_variational(self.model_)
        if self.inference == "mcmc":
            init = self._mcmc_initvals(fit_n)
            if self._samples_width():
                # Start at the evidence width (what the columns' alphas were fitted at).
                init["gamma_rel"] = np.asarray(self.gamma_ / self.model_["gamma_ref"].get_value())
            self._tree_cache = self._sample_and_complete(self.model_, init)

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
        one, in the other form or with terms of your own in the mean. ``pm.model_to_graphviz``
        draws it (the ``graph`` extra, ``pip install "bayes-rvm[graph]"``, installs what that
        needs besides the Graphviz program itself).
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
                f"({type(self).__name__}(sampler_config={{'draws': ..., 'tune': ..., "
                "'chains': ..., 'sampler': ...}, random_state=...)), not in fit()."
            )
        self._sample_kwargs = dict(sample_kwargs)

    def _keeping_the_level(self, problem, engine, fit):
        """``fit``, or the fit with the bias free where ``fit`` is no better than no basis at all.

        Where the evidence of every basis function sits on its pruning boundary (two identical
        inputs with targets 0 and 1; one example of each of two classes), the type-II optimum is
        the empty model, a zero function (probabilities of 1/2) that the prior's zero mean
        imposes, not the data. Such a fit (log evidence no higher than the empty model's,
        :meth:`~bayes_rvm.evidence.problem.Problem.empty_log_evidence`) is made again with the
        bias column never pruned (``bias="free"``), which keeps the data's level: their mean,
        their base rate. Its ``reason`` says so. Where ``fit`` did not converge, it has warned
        so, and the refit's own warning is not repeated.
        """
        if isinstance(self.bias, str) or not self.bias or isinstance(fit, OneVsRestFit):
            return fit
        empty = problem.empty_log_evidence()
        if empty is None or fit.log_evidence > empty + 1e-9 * max(1.0, abs(empty)):
            return fit
        from bayes_rvm.evidence import fit_problem

        with warnings.catch_warnings():
            if not fit.converged:
                warnings.simplefilter("ignore", ConvergenceWarning)
            refit = fit_problem(problem, dataclasses.replace(engine, free_bias=True))
        return dataclasses.replace(
            refit,
            reason=f"{refit.reason} (no basis function raised the evidence above that of none: "
            "refitted with the bias never pruned, to keep the data's level)",
        )

    def _tree_attrs(self) -> dict[str, str]:
        """The estimator and its parameters, as recorded in its DataTree's attrs."""
        import json

        return {
            "estimator": type(self).__name__,
            "params": json.dumps(self.get_params(), sort_keys=True, default=repr),
        }

    def _fingerprinted(self, dt):
        """``dt`` with fingerprints of the training rows in its root attrs, by which
        :func:`~bayes_rvm.posterior.comparison.compare` refuses fits of other data
        (:func:`~bayes_rvm.posterior.comparison.data_fingerprints`; saved with the model)."""
        from bayes_rvm.posterior.comparison import data_fingerprints

        training = self.training_
        y = training.y if training.y is not None else training.y_index
        dt.attrs.update(data_fingerprints(X=training.inputs, y=y))
        return dt

    def _sample_and_complete(self, model, initvals):
        """NUTS on ``model`` with the estimator's settings; DataTree with the estimator's attrs."""
        from bayes_rvm.inference import sample_mcmc

        free = {rv.name for rv in model.free_RVs}
        relevant = getattr(self, "_mcmc_basis", lambda: "all")() == "relevant"
        advice = "estimator_relevant" if relevant else "estimator"
        options = {"progressbar": True if self.verbose else "auto", "advice": advice}
        options |= {"thin": self._mcmc_thin()} | getattr(self, "_sample_kwargs", {})
        nuts = options.get("nuts")
        if self._target_accept() is not None and (nuts is None or isinstance(nuts, Mapping)):
            # A target_accept in fit(X, y, nuts={...}) overrides it; other NUTS settings join
            # it (anything else reaches sample_mcmc, which says what nuts must be).
            options["nuts"] = {"target_accept": self._target_accept()} | dict(nuts or {})
        dt = sample_mcmc(
            model,
            draws=self._cfg.draws,
            tune=self._cfg.tune,
            chains=self._cfg.chains,
            sampler=self._cfg.sampler,
            random_seed=self._seed(),
            initvals={k: v for k, v in r2d2_free_values(model, initvals).items() if k in free},
            **options,
        )
        dt.attrs.update(self._tree_attrs())
        return self._fingerprinted(dt)

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
            rows = self._rows(X)
            Phi_new = (
                rows.design(draws.columns)
                if draws.gamma is None
                else rows.width_designs(draws.columns, draws.gamma)
            )
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

    @one_blas_thread
    def sample_prior_predictive(self, draws: int = 500, random_state=None, *, extend_idata=True):
        """Draws from the prior of :attr:`model_`: hyperparameters, weights and targets.

        What the model believes before it sees the targets, at the training inputs:
        :func:`bayes_rvm.inference.sampling.sample_prior_predictive` (``pm.sample_prior_predictive``
        with the weights drawn from their prior where the model integrates them out).

        Parameters
        ----------
        draws : int, default=500
        random_state : int, RandomState or None, default=None
        extend_idata : bool, default=True
            Add the groups ``prior`` and ``prior_predictive`` to :attr:`idata_` in place and
            return it, so that ``az.plot_prior_posterior(est.idata_, var_names=["log_alpha"])``
            and ``az.plot_ppc_dist(est.idata_, group="prior_predictive")`` see them; a later call
            replaces them. With False, :attr:`idata_` is left as it is and a tree of the two
            groups is returned.

        Returns
        -------
        xarray.DataTree
            ``prior`` (``alpha``, ``log_alpha``, ``w``, ``sigma``, ...; on the basis functions of
            ``idata_``'s posterior) and ``prior_predictive`` (``y[obs]`` at the training
            inputs; class indices for a classifier, as in ``observed_data``).

        Notes
        -----
        The model is that of ``inference="mcmc"`` over its columns (``mcmc_basis``); a type-II
        tree's posterior holds the relevance vectors only, and ``prior`` keeps those columns of
        the model's (the hyperprior is the same for each column), while ``prior_predictive``
        draws the targets from every column of the model.
        """
        from bayes_rvm.inference import sample_prior_predictive

        check_is_fitted(self, "basis_")
        seed = check_random_state(random_state).randint(2**31 - 1)
        out = sample_prior_predictive(self.model_, draws, random_seed=seed)
        dt = self.idata_
        basis = dt["posterior"].dataset.coords.get(BASIS)
        prior = out["prior"].dataset
        if basis is not None and BASIS in prior.coords and prior.sizes[BASIS] != basis.size:
            out["prior"] = xr.DataTree(prior.sel({BASIS: basis.values}))
        if not extend_idata:
            return out
        for name in ("prior", "prior_predictive"):
            dt[name] = out[name]
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

    @property
    def predictor_(self):
        """What predicts: the type-II posterior or the draws, RVM* around either
        (:mod:`bayes_rvm.posterior.predictors`, :mod:`bayes_rvm.posterior.class_predictors`).
        With ``rows = Rows(X, est.basis_, est.training_.x_train)``, a regressor's
        ``predictor_.predict(rows, std=True)`` is :meth:`predict`'s, a classifier's
        ``predictor_.proba(rows)`` is ``predict_proba``'s."""
        check_is_fitted(self, "fit_")
        return self._predictor()

    def _predictor(self):
        """What predicts (:mod:`bayes_rvm.posterior.predictors`), chosen once per fitted state
        (in ``fit`` and when a model is loaded; again after unpickling)."""
        predictor = self.__dict__.get("_predictor_obj")
        if predictor is None:
            predictor = self._predictor_obj = self._make_predictor()
        return predictor

    def _rows(self, X: np.ndarray) -> Rows:
        """Checked new inputs as the predictors read them (a ``Rows``)."""
        # A fit sent to Dask workers without its training rows predicts without RVM*.
        x_train = None if self.training_ is None else self.training_.x_train
        return Rows(X, self.basis_, x_train)

    def __getstate__(self):
        # A pm.Model and compiled functions do not pickle reliably (pymc#5886, #6167).
        state = super().__getstate__()
        state.pop("_model", None)
        # The posterior draws are idata_'s arrays again: read back on first use.
        state.pop("_draws", None)
        state.pop("_draws_of", None)
        state.pop("_predictor_obj", None)  # holds the draws: built again on first use
        return state
