"""One options object for every type-II engine, and its validation.

Every engine takes ``(problem, options, warm=None)``
(:func:`~bayes_rvm.evidence.engines.fit_problem`): ``options`` is a frozen
:class:`EvidenceOptions`, which names the solver too. The convenience functions
``fit_*(Phi, T, *, options=None, **settings)`` take ``settings`` that override its fields (so
``fit_sequential(Phi, T, tol=1e-8)`` and ``fit_sequential(Phi, T,
options=EvidenceOptions(tol=1e-8))`` are the same call). An option means the same thing in every
engine; an engine refuses a non-default value of an option it does not use, and the defaults that
differ between engines are in one table here (``_ENGINE_DEFAULTS``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, Literal

import numpy as np
from sklearn.utils import check_scalar

from bayes_rvm.progress import check_progress

__all__ = [
    "ENGINE_NAMES",
    "LIKELIHOODS",
    "SOLVERS",
    "EvidenceOptions",
    "default_beta_init",
    "default_likelihood",
    "merge_options",
]

#: Likelihoods of the engines: the Gaussian one (``fit_mackay``, ``fit_sequential``) and those of
#: the Laplace engines (``fit_laplace_mackay``, ``fit_laplace_sequential``).
LIKELIHOODS = ("gaussian", "bernoulli", "softmax", "poisson")
ENGINE_NAMES = ("mackay", "sequential", "laplace_mackay", "laplace_sequential")
#: The solvers: Tipping and Faul's sequential algorithm, or MacKay's re-estimation with pruning.
SOLVERS = ("sequential", "mackay")
#: Largest noise precision relative to the targets' scale: an exact fit must not divide by zero.
BETA_MAX = 1e12


def beta_ceiling(spread: float, n_values: int) -> float:
    """The largest noise precision of a fit of ``n_values`` targets whose sum of squares about
    their mean is ``spread`` (:func:`~bayes_rvm.evidence.problem.target_spread`).

    :data:`BETA_MAX` per unit variance of the targets, so that the noise sd stays at least 1e-6
    times their standard deviation; for constant targets (their scale then their
    root-mean-square) :data:`BETA_MAX` itself: a noise sd of 1e-6 of that scale, never one that
    underflows towards zero.
    """
    return BETA_MAX * n_values / spread if spread > 0 else BETA_MAX


#: Prior precision of a "free" column of a Gaussian fit relative to the scale of a weight that
#: fits the targets: the weight's prior standard deviation is 1e5 times that scale, negligible
#: against the data but proper, so the log evidence stays finite (a flat prior has none).
FREE_ALPHA_FACTOR = 1e-10
#: Prior standard deviation of a "free" column's contribution to the latent function of a Laplace
#: fit (logits, log rates), per unit root-mean-square of the column: weakly informative, as
#: Gelman et al. (2008) advise for a logistic intercept. A flat one lets a rare class's few
#: positives, nearly separable, pull the intercept and the weights apart: on 1% positives
#: (tests/test_importance.py) the linear-kernel RVC's test log loss was 1.7-2.3 times logistic
#: regression's with it, 0.90-1.04 times with this.
FREE_LATENT_SD = 10.0

_COMMON = frozenset(
    {
        "likelihood",
        "alpha_prior",
        "alpha_init",
        "free",
        "candidates",
        "tol",
        "max_iter",
        "callback",
        "progress",
        "solver",
        "free_bias",
    }
)
_NOISE = frozenset({"beta_prior", "beta_init", "fixed_beta"})
_MODE = frozenset({"mode_tol", "mode_max_iter"})
#: The options each engine reads; any other option must keep its default.
_USES = {
    "mackay": _COMMON | _NOISE | {"threshold_alpha", "evidence_tol", "gram"},
    "sequential": _COMMON
    | _NOISE
    | {"priority", "beta_update_every", "beta_warmup", "alignment_threshold"},
    "laplace_mackay": _COMMON | _MODE | {"threshold_alpha", "evidence_tol"},
    "laplace_sequential": _COMMON
    | _MODE
    | {
        "threshold_alpha",
        "evidence_tol",
        "gain_tol",
        "priority",
        "batch_reestimate",
        "probe_deletions",
        "inner_mode_tol",
    },
}
#: Defaults that differ between engines (the fields left at None in :class:`EvidenceOptions`).
#: ``beta_init`` is a multiple of ``1 / var(T)``: the sequential engine starts, as SparseBayes does,
#: at a noise standard deviation of 10% of the targets'.
_ENGINE_DEFAULTS = {
    "mackay": {"likelihood": "gaussian", "evidence_tol": 1e-12, "beta_init": 1.0},
    "sequential": {"likelihood": "gaussian", "beta_init": 100.0},
    "laplace_mackay": {"likelihood": "bernoulli", "evidence_tol": 1e-12},
    "laplace_sequential": {"likelihood": "bernoulli", "evidence_tol": 1e-6},
}


def _prior_pair(name: str, prior) -> tuple[float, float]:
    message = f"{name} must be a pair (shape, rate) of non-negative floats, got {prior!r}."
    try:
        a, b = (float(v) for v in prior)
    except (TypeError, ValueError):
        raise ValueError(message) from None
    if not (np.isfinite(a) and np.isfinite(b) and a >= 0 and b >= 0):
        raise ValueError(message)
    return a, b


def _positive(name: str, value, *, integer: bool = False) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is a positive integer or number.

    The type and the bound are :func:`sklearn.utils.check_scalar`'s, with one message here
    (it raises TypeError or ValueError in its own words, and lets ``inf`` through).
    """
    kind = "a positive integer" if integer else "positive"
    try:
        if integer:
            check_scalar(value, name, Integral, min_val=1)
            ok = not isinstance(value, bool)
        else:
            check_scalar(value, name, Real, min_val=0, include_boundaries="neither")
            ok = bool(np.isfinite(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be {kind}, got {value!r}.")


@dataclass(frozen=True)
class EvidenceOptions:
    """Settings of a type-II engine, validated on construction (``None``: the engine's default).

    The one options object of every engine: what an estimator configures
    (:meth:`~bayes_rvm.RVR.make_engine`) and what
    :func:`~bayes_rvm.evidence.engines.fit_problem` runs, with the problem, to a fit.

    Parameters
    ----------
    likelihood : {"gaussian", "bernoulli", "softmax", "poisson"}, optional
        The likelihood of the convenience functions' problem: ``"gaussian"`` for
        :func:`fit_mackay` / :func:`fit_sequential` (their only one); the Laplace engines default
        to ``"bernoulli"``. :func:`~bayes_rvm.evidence.engines.fit_problem` fits the likelihood of
        its problem, and refuses options stating another.
    alpha_prior, beta_prior : (shape, rate), default=(0, 0)
        Gamma hyperpriors on each ``alpha_i`` and on the noise precision ``beta`` over
        ``log alpha``, ``log beta``; ``(nu/2, nu/2)`` on alpha is the Student-t prior.
    alpha_init : float or ndarray of shape (M,), optional
        Starting prior precisions, ``inf`` for columns out of the model. Default: 1.0 for every
        column (re-estimation engines); the single best column (sequential engines).
    beta_init : float, optional
        Starting noise precision; default ``1 / var(T)`` (MacKay) or ``100 / var(T)``
        (sequential, as SparseBayes).
    fixed_beta : bool, default=False
        Keep ``beta = beta_init`` instead of re-estimating it.
    free : sequence of int, default=()
        Unregularised columns (e.g. the bias): always in the model, never re-estimated or
        pruned. Gaussian likelihood: their prior precision is ``1e-10`` times the scale of a
        weight that fits the targets (``FREE_ALPHA_FACTOR``), as good as flat, but the evidence
        stays finite. Laplace likelihoods: a weakly informative prior, their contribution to
        the latent function ``N(0, 10^2)`` per unit root-mean-square of the column
        (``FREE_LATENT_SD``).
    candidates : sequence of int, optional
        Columns allowed to enter the model (default: every non-zero column).
    tol : float, default=1e-6
        Converged when every active ``log alpha`` (and ``log beta``) moves by less than ``tol``
        and the active set does not change.
    evidence_tol : float, optional
        Also converged when the objective stalls: its change relative to ``1 + |objective|``
        stays below this (ten iterations in a row for the re-estimation engines; one MacKay step
        of the softmax sequential engine; one round of a chunked Laplace fit). Default 1e-12
        (re-estimation), 1e-6 (Laplace sequential).
    gain_tol : float, default=1e-8
        Laplace sequential: steps promising less than ``gain_tol * (1 + |objective|)`` are not
        taken, and all re-estimations together gaining less than that end the fit.
    max_iter : int, default=10000
        Cap on iterations (steps for the sequential engines); reaching it warns with
        :class:`~sklearn.exceptions.ConvergenceWarning`.
    threshold_alpha : float, default=1e9
        Largest ``alpha`` taken as finite: beyond it a basis function is out of the model (the
        re-estimation engines prune there; the Laplace sequential engine searches the shared-alpha
        optimum below it). The Gaussian sequential engine decides relevance exactly.
    priority : {"delete", "add"} or None, default="delete"
        Sequential engines: take any worthwhile deletion (or addition) first; None takes the step
        of largest gain.
    batch_reestimate : bool, default=True
        Laplace sequential: a re-estimation moves every active alpha to its single-alpha optimum.
    probe_deletions : bool, default=True
        Laplace sequential: at convergence, try leaving out each of the (up to 10) active columns
        of largest alpha with the others re-estimated, and go on from the first that raises the
        evidence (nearly collinear columns otherwise keep each other in); not for models of more
        than 100 active weights (columns x classes).
    beta_update_every : int, default=5
        Gaussian sequential: a noise step after every ``beta_update_every``-th step.
    beta_warmup : {"hold", "update"}, default="hold"
        Gaussian sequential: hold the noise for the first 10 steps, or update it after each
        (SparseBayes' schedule).
    alignment_threshold : float, default=1e-3
        Gaussian sequential: a candidate with cosine above ``1 - alignment_threshold`` with an
        active column is set aside; 0 turns the test off. Whatever it sets aside, the engine
        never stops below one shared precision over its columns: it goes on from there without
        the test (see :func:`~bayes_rvm.evidence.fit_sequential`).
    mode_tol, inner_mode_tol, mode_max_iter : float, float, int
        Laplace engines: gradient tolerance of the final posterior mode (1e-10) and of the modes
        between sequential steps (1e-6), and the Newton steps per mode search (100).
    callback : callable, optional
        Called after every step with a dict (``step``, ``action``, ``objective``, ``gain``,
        ``n_active``, ``beta``, ``active``, ``alpha``); returning True stops the fit.
    progress : bool or "auto", default=False
        Report the steps (rounds of a chunked fit), the relevance vectors and the log evidence on
        stderr (:class:`bayes_rvm.progress.Progress`: nothing for a fit that ends within 2 s;
        ``"auto"`` where stderr is a terminal).
    gram : ndarray of shape (M, M), optional
        Gaussian MacKay: a precomputed ``Phi^T Phi`` (fitting many targets on one design).
    solver : {"sequential", "mackay"}, default="sequential"
        The engine of :func:`~bayes_rvm.evidence.engines.fit_problem`: Tipping and Faul's
        sequential algorithm, or MacKay's re-estimation with pruning (for the problem's
        likelihood; the convenience functions ``fit_*`` are one engine each).
    free_bias : bool, default=False
        The design's last column is free (an intercept), as if it were in ``free``.
    noise_nu : float, optional
        Student-t noise: fixed degrees of freedom; None learns ``nu``, starting from ``nu_init``.
    nu_init : float, default=4.0
        Student-t noise: the starting degrees of freedom of a learned ``nu``.
    em_tol : float, default=1e-6
        Student-t noise: the EM is converged when its bound rises by less than
        ``em_tol * (1 + |L|)`` and no ``ln E[u_n]`` nor ``ln nu`` moves by more than
        ``sqrt(em_tol)``.
    em_max_iter : int, default=500
        Student-t noise: cap on EM iterations; reaching it warns with ConvergenceWarning.
    """

    likelihood: Literal["gaussian", "bernoulli", "softmax", "poisson"] | None = None
    alpha_prior: tuple[float, float] = (0.0, 0.0)
    beta_prior: tuple[float, float] = (0.0, 0.0)
    alpha_init: float | np.ndarray | None = field(default=None, compare=False)
    beta_init: float | None = None
    fixed_beta: bool = False
    free: Sequence[int] | np.ndarray = field(default=(), compare=False)
    candidates: Sequence[int] | np.ndarray | None = field(default=None, compare=False)
    tol: float = 1e-6
    evidence_tol: float | None = None
    gain_tol: float = 1e-8
    max_iter: int = 10_000
    threshold_alpha: float = 1e9
    priority: Literal["delete", "add"] | None = "delete"
    batch_reestimate: bool = True
    probe_deletions: bool = True
    beta_update_every: int = 5
    beta_warmup: Literal["hold", "update"] = "hold"
    alignment_threshold: float = 1e-3
    mode_tol: float = 1e-10
    inner_mode_tol: float = 1e-6
    mode_max_iter: int = 100
    callback: Callable[[dict[str, Any]], Any] | None = None
    progress: bool | str = False
    gram: np.ndarray | None = field(default=None, compare=False, repr=False)
    solver: Literal["sequential", "mackay"] = "sequential"
    free_bias: bool = False
    noise_nu: float | None = None
    nu_init: float = 4.0
    em_tol: float = 1e-6
    em_max_iter: int = 500

    def __post_init__(self) -> None:
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}.")
        if self.likelihood is not None and self.likelihood not in LIKELIHOODS:
            raise ValueError(f"likelihood must be one of {LIKELIHOODS}, got {self.likelihood!r}.")
        object.__setattr__(self, "alpha_prior", _prior_pair("alpha_prior", self.alpha_prior))
        object.__setattr__(self, "beta_prior", _prior_pair("beta_prior", self.beta_prior))
        for name in ("fixed_beta", "batch_reestimate", "probe_deletions", "free_bias"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}.")
        check_progress(self.progress)
        for name in ("max_iter", "beta_update_every", "mode_max_iter", "em_max_iter"):
            _positive(name, getattr(self, name), integer=True)
        for name in ("tol", "gain_tol", "threshold_alpha", "mode_tol", "inner_mode_tol", "em_tol"):
            _positive(name, getattr(self, name))
        for name in ("noise_nu", "nu_init"):
            value = getattr(self, name)
            if value is not None and not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, got {value!r}.")
        if self.evidence_tol is not None and not (
            np.isfinite(self.evidence_tol) and self.evidence_tol >= 0
        ):
            raise ValueError(f"evidence_tol must be non-negative, got {self.evidence_tol!r}.")
        if self.beta_init is not None:
            _positive("beta_init", self.beta_init)
        if self.alpha_init is not None:
            ai = np.asarray(self.alpha_init, dtype=np.float64)
            if ai.ndim > 1 or np.any(np.isnan(ai)) or np.any(ai <= 0):
                raise ValueError(
                    "alpha_init must be a positive number or a vector of them (inf for columns "
                    f"out of the model), got {self.alpha_init!r}."
                )
        if self.priority not in ("delete", "add", None):
            raise ValueError(f"priority must be 'delete', 'add' or None, got {self.priority!r}.")
        if self.beta_warmup not in ("hold", "update"):
            raise ValueError(f"beta_warmup must be 'hold' or 'update', got {self.beta_warmup!r}.")
        if not (0 <= self.alignment_threshold < 1):
            raise ValueError(
                f"alignment_threshold must be in [0, 1), got {self.alignment_threshold!r}."
            )
        if self.callback is not None and not callable(self.callback):
            raise ValueError("callback must be callable.")

    def for_engine(self, engine: str) -> EvidenceOptions:
        """These options with the engine's defaults filled in; refuses options it does not use."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        unused = [
            f.name
            for f in dataclasses.fields(self)
            if f.name not in _USES[engine]
            and not _is_default(getattr(self, f.name), defaults[f.name])
        ]
        if unused:
            raise ValueError(
                f"fit_{engine} does not use the option(s) {', '.join(unused)}; leave them at "
                "their defaults."
            )
        if engine == "sequential" and self.alpha_prior[0] > 0 and self.alpha_prior[1] == 0:
            # l(alpha) then grows like a log(alpha) without bound: no column would ever leave.
            raise ValueError(
                "alpha_prior with shape > 0 needs rate > 0 in fit_sequential: with rate 0 the "
                "objective grows without bound as alpha -> inf. Use fit_mackay for that prior."
            )
        fill = {k: v for k, v in _ENGINE_DEFAULTS[engine].items() if getattr(self, k) is None}
        fill.pop("beta_init", None)  # a multiple of 1 / var(T): default_beta_init
        out = dataclasses.replace(self, **fill) if fill else self
        family = "gaussian" if engine in ("mackay", "sequential") else "laplace"
        if (out.likelihood == "gaussian") != (family == "gaussian"):
            raise ValueError(
                f"fit_{engine} does not fit the {out.likelihood!r} likelihood; use "
                + (
                    "fit_mackay or fit_sequential."
                    if out.likelihood == "gaussian"
                    else "fit_laplace_mackay or fit_laplace_sequential."
                )
            )
        return out


def _is_default(value, default) -> bool:
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return False
    if isinstance(default, tuple):
        return tuple(value) == default if value is not None else False
    return value is default or value == default


def merge_options(options: EvidenceOptions | None, settings: dict) -> EvidenceOptions:
    """``options`` (default: all defaults) with ``settings`` overriding fields."""
    if options is None:
        return EvidenceOptions(**settings)
    if not isinstance(options, EvidenceOptions):
        raise TypeError(f"options must be an EvidenceOptions, got {type(options).__name__}.")
    return dataclasses.replace(options, **settings) if settings else options


def default_likelihood(engine: str) -> str:
    """The likelihood ``engine`` fits when nothing names one."""
    return _ENGINE_DEFAULTS[engine]["likelihood"]


def default_beta_init(engine: str, target_variance: float) -> float:
    """The noise precision ``engine`` starts from when ``beta_init`` is not given: a multiple
    of ``1 / var(T)`` (1 where the targets do not vary)."""
    ratio = _ENGINE_DEFAULTS[engine].get("beta_init", 1.0)
    return ratio / target_variance if target_variance > 0 else 1.0
