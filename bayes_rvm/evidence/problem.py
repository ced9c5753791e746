"""What every type-II engine sees, the engine with its options, and what a fit keeps.

The estimators, cross-validation and the width search reach the engines of :mod:`bayes_rvm.evidence`
through three frozen objects:

- :class:`Problem`: the design with unit-norm columns and the targets divided by their scale,
  with the norms and the scale kept, so that the engines' thresholds mean the same thing for
  kernel values or targets of 1e-8 and of 1e8; :meth:`Problem.unscale` maps a fit back to the
  user's units exactly (the RVM is equivariant under both scalings).
- :class:`Engine`: the solver and its options. ``engine.fit(problem, warm=None)`` runs it; a warm
  start (the fit at another kernel width) is an argument, not a closure.
- :class:`TrainingData`: the training arrays a fitted estimator keeps for prediction, ``model_``
  and saving.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bayes_rvm.basis.statistics import SufficientStatistics
from bayes_rvm.evidence import EvidenceFit, fit_evidence
from bayes_rvm.families import NOISE_LIKELIHOODS

__all__ = [
    "Engine",
    "OneVsRestFit",
    "Problem",
    "TrainingData",
    "column_scale",
    "normalise_columns",
    "prior_column_scale",
    "target_scale",
    "unscale_alpha",
]


def normalise_columns(Phi: np.ndarray) -> np.ndarray:
    """Scale the columns of ``Phi`` to unit norm in place; return the norms (1 for zero columns).

    Each column is first divided by its largest magnitude, as LAPACK's ``dnrm2`` scales, so that
    the sum of squares can neither overflow nor underflow: kernel values of 1e160 (a linear kernel
    on inputs of 1e80) or 1e-200 normalise as exactly as values near one, where squaring them
    directly gave inf or 0 and dropped every column.
    """
    # max and min reduce without the N x M temporary that np.abs(Phi) would allocate.
    peak = np.maximum(Phi.max(axis=0, initial=0.0), -Phi.min(axis=0, initial=0.0))
    peak[peak == 0] = 1.0
    # Dividing by 1 is exact: where every column peaks at 1 (rbf columns on the training
    # points, the bias) a pass over the design is saved, and where a few do not, only those move.
    scaled = np.flatnonzero(peak != 1.0)
    if scaled.size > peak.size // 8:
        Phi /= peak
    elif scaled.size:
        Phi[:, scaled] /= peak[scaled]
    norms = np.sqrt(np.einsum("ij,ij->j", Phi, Phi))
    norms[norms == 0] = 1.0
    Phi /= norms
    return peak * norms


def column_scale(Phi: np.ndarray) -> np.ndarray:
    """The norms :func:`normalise_columns` divides by, without touching ``Phi``."""
    return normalise_columns(np.array(Phi, dtype=np.float64, copy=True))


def prior_column_scale(norms: np.ndarray, n_samples: int) -> np.ndarray:
    """The column scale the MCMC hyperpriors are stated for: the RMS ``norm / sqrt(N)``.

    The type-II engines normalise columns to unit Euclidean norm (:func:`normalise_columns`), which
    conditions their linear algebra. A prior stated for unit-norm columns changes meaning with
    ``N``: a relative weight of 1 adds ``y_rms / sqrt(N)`` to each row, so at ``N = 10^6`` a real
    relevance vector needs ``alpha_rel ~ 1e-6``, deep in the tail of any fixed hyperprior, and its
    posterior splits between the likelihood and the prior's mode (chains disagree). Per row, as
    Gelman et al. (2008) standardise predictors, the same prior means the same at every ``N``.
    """
    n_samples = int(n_samples)
    if n_samples < 1:
        raise ValueError(f"n_samples must be at least 1, got {n_samples}.")
    return np.asarray(norms, dtype=np.float64) / np.sqrt(n_samples)


def target_scale(T: np.ndarray) -> float:
    """The root-mean-square the regression targets are divided by (1 for all-zero targets)."""
    rms = float(np.sqrt(np.mean(np.square(T))))
    return rms if rms > 0 else 1.0


def unscale_alpha(alpha: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """``alpha * factor**2``: prior precisions of a normalised fit in the user's units.

    Pruned basis functions (``alpha = inf``) stay pruned, also where ``factor**2`` underflows to 0
    (``inf * 0`` would make them NaN). Where a retained alpha leaves float64's range (kernel values
    near 1e160 or 1e-200), a warning says so: the fit and its predictions are computed on the
    normalised columns and are exact, but ``alpha_`` and ``sigma_`` in those units are not
    representable.
    """
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out = np.where(np.isinf(alpha), np.inf, alpha * factor * factor)
    kept = np.isfinite(alpha)
    lost = kept & ~((out >= np.finfo(np.float64).tiny) & np.isfinite(out))
    if np.any(lost):
        warnings.warn(
            f"the basis columns have norms from {np.min(factor[kept]):.1e} to "
            f"{np.max(factor[kept]):.1e}: the prior precisions alpha_ "
            "and the posterior covariance sigma_ of the weights in these units leave float64's "
            "range and are stored as inf or 0. The fit and its predictions are computed on "
            "normalised columns and are not affected; scale X (for example with scikit-learn's "
            "StandardScaler) to get finite values.",
            RuntimeWarning,
            stacklevel=3,
        )
    return out


@dataclass(frozen=True, eq=False)
class OneVsRestFit:
    """``multi_class="ovr"``'s fit: one binary Laplace fit per class, with a fit's interface.

    What the estimator, the width search and cross-validation read of a fit: the summed evidence
    (what a shared kernel width maximises), the union of the classes' relevance vectors
    (``active``), the modes over that union (``mean``, one column per class, zero where a class
    pruned the column), and each class's fit with the positions of its columns in ``active``
    (:meth:`parts`, as a binary or softmax fit gives its one part).

    Parameters
    ----------
    fits : tuple of EvidenceFit
        The binary fit of class ``c`` against the rest, for each class in order.
    """

    fits: tuple[EvidenceFit, ...]

    @functools.cached_property
    def active(self) -> np.ndarray:
        """The union of the classes' active columns, sorted."""
        return np.unique(np.concatenate([f.active for f in self.fits]))

    @functools.cached_property
    def positions(self) -> tuple[np.ndarray, ...]:
        """Where each class's active columns sit in :attr:`active`."""
        return tuple(np.searchsorted(self.active, f.active) for f in self.fits)

    @property
    def log_evidence(self) -> float:
        # Python floats throughout: sum() adds them with compensation but NumPy scalars without,
        # and a loaded fit (floats) must give the fitted one's (NumPy scalars) value exactly.
        return float(sum(float(f.log_evidence) for f in self.fits))

    @property
    def n_iter(self) -> int:
        return int(sum(f.n_iter for f in self.fits))

    @property
    def converged(self) -> bool:
        return all(f.converged for f in self.fits)

    @property
    def mean(self) -> np.ndarray:
        """The modes over :attr:`active`, (K, n_classes); zero where a class pruned a column."""
        return self._over_active("mean", 0.0)

    @property
    def class_alpha(self) -> np.ndarray:
        """The prior precisions over :attr:`active`, (K, n_classes); inf where pruned."""
        return self._over_active("alpha", np.inf)

    def _over_active(self, name: str, fill: float) -> np.ndarray:
        out = np.full((self.active.size, len(self.fits)), fill)
        for c, (f, pos) in enumerate(zip(self.fits, self.positions, strict=True)):
            out[pos, c] = f.mean[:, 0] if name == "mean" else f.alpha[f.active]
        return out

    def __len__(self) -> int:
        return len(self.fits)

    def __iter__(self):
        return iter(self.fits)

    def __getitem__(self, c: int) -> EvidenceFit:
        return self.fits[c]

    def parts(self) -> tuple[tuple[EvidenceFit, np.ndarray], ...]:
        """Each class's fit with the positions of its columns in :attr:`active`."""
        return tuple(zip(self.fits, self.positions, strict=True))


@dataclass(frozen=True)
class Problem:
    """A type-II problem on the normalised scale: what every engine sees.

    Build one with :meth:`regression`, :meth:`from_statistics`, :meth:`classification` or
    :meth:`counts`; :meth:`with_design` gives the same targets on another design (another kernel
    width, a subset of rows).

    Attributes
    ----------
    design : ndarray of shape (N, M)
        The design matrix with unit-norm columns (``(N, 0)`` before a design is given).
    norms : ndarray of shape (M,)
        What the columns were divided by (ones for a design given as already normalised).
    targets : ndarray of shape (N, D)
        Regression: the targets divided by :attr:`scale`. Classification: 0/1 labels of the
        positive class (binary), or the one-hot matrix of the classes (softmax, one-vs-rest).
        Counts: the counts themselves, one column (a log link has no target scale to divide by).
    likelihood : {"gaussian", "bernoulli", "softmax", "poisson", "student_t"}
    scale : float
        The targets' root-mean-square (1 for classification and counts).
    noise_precision : float or None
        A fixed noise precision of the normalised problem (``scale**2 / noise_variance``), or
        None when the engine estimates it.
    noise_start : float or None
        Where MacKay's engine starts the noise precision of a cold fit: a noise standard deviation
        of a tenth of the targets' (sklearn-rvm's start; on the benchmark problems it reaches as
        high or higher evidence in 2-4x fewer iterations than a noisier start). Set from the
        targets the problem was built with, and kept by :meth:`with_design`.
    one_vs_rest : bool
        Fit one binary model per class (the columns of :attr:`targets`).
    statistics : SufficientStatistics or None
        A Gaussian problem built by :meth:`from_statistics`: the sums of the normalised design
        and targets (``Phi' Phi``, ``Phi' T``, ``T' T``, N), which the engines read instead of
        :attr:`design` and :attr:`targets` (both then empty, (0, M) and (0, D)).
    """

    design: np.ndarray
    norms: np.ndarray
    targets: np.ndarray
    likelihood: str = "gaussian"
    scale: float = 1.0
    noise_precision: float | None = None
    noise_start: float | None = None
    one_vs_rest: bool = False
    statistics: SufficientStatistics | None = None

    @classmethod
    def regression(
        cls,
        Phi: np.ndarray | None,
        T: np.ndarray,
        *,
        noise_variance: float | None = None,
        likelihood: str = "gaussian",
    ) -> Problem:
        """The Gaussian problem of design ``Phi`` and targets ``T`` (shape (N,) or (N, D)).

        ``likelihood="student_t"``: Student-t noise (``noise_variance`` then fixes the square of
        its scale).

        ``Phi`` is normalised in place (the N x M design is not copied); None gives the targets
        alone, for a design to come (:meth:`with_design`).
        """
        T = np.asarray(T, dtype=np.float64)
        T = T[:, None] if T.ndim == 1 else T
        scale = target_scale(T)
        targets = T / scale
        problem = cls(
            design=np.empty((T.shape[0], 0)),
            norms=np.ones(0),
            targets=targets,
            likelihood=likelihood,
            scale=scale,
            noise_precision=None if noise_variance is None else scale**2 / noise_variance,
            noise_start=100.0 / max(float(np.var(targets)), 1e-6),
        )
        return problem if Phi is None else problem.with_design(Phi)

    @classmethod
    def from_statistics(
        cls, stats: SufficientStatistics, *, noise_variance: float | None = None
    ) -> Problem:
        """The Gaussian problem of :meth:`regression`, from the statistics of design and targets.

        The column norms are ``sqrt(diag(gram))`` and the target scale ``sqrt(sum(tt) / (N D))``,
        as :meth:`regression` computes them from ``Phi`` and ``T`` (equal up to rounding); the
        normalised Gram matrix ``gram / (norms norms')`` and cross products are formed from the
        M x M and M x D sums, never from an N x M design.
        """
        norms = stats.column_norms()
        scale = stats.target_scale()
        inv = 1.0 / norms
        normalised = SufficientStatistics(
            stats.gram * np.multiply.outer(inv, inv),
            stats.cross * (inv[:, None] / scale),
            stats.tt / scale**2,
            stats.n,
            stats.t_sum / scale,
        )
        return cls(
            design=np.empty((0, stats.n_basis)),
            norms=norms,
            targets=np.empty((0, stats.n_outputs)),
            scale=scale,
            noise_precision=None if noise_variance is None else scale**2 / noise_variance,
            noise_start=100.0 / max(stats.target_variance() / scale**2, 1e-6),
            statistics=normalised,
        )

    @property
    def n_values(self) -> int:
        """The number of target values (rows times outputs) the problem fits."""
        if self.statistics is not None:
            return self.statistics.n * self.statistics.n_outputs
        return int(self.targets.size)

    @classmethod
    def classification(
        cls,
        Phi: np.ndarray | None,
        y_index: np.ndarray,
        n_classes: int,
        *,
        one_vs_rest: bool = False,
    ) -> Problem:
        """The Laplace problem of design ``Phi`` and class indices ``y_index`` in ``0..C-1``.

        Two classes: Bernoulli-logit on the labels of class 1; more: the softmax, or one
        Bernoulli model per class with ``one_vs_rest``. ``Phi`` as in :meth:`regression`.
        """
        yi = np.asarray(y_index).reshape(-1).astype(np.intp)
        onehot = np.zeros((yi.size, n_classes))
        onehot[np.arange(yi.size), yi] = 1.0
        binary = n_classes == 2
        problem = cls(
            design=np.empty((yi.size, 0)),
            norms=np.ones(0),
            targets=np.ascontiguousarray(onehot[:, 1:]) if binary else onehot,
            likelihood="bernoulli" if binary or one_vs_rest else "softmax",
            one_vs_rest=one_vs_rest and not binary,
        )
        return problem if Phi is None else problem.with_design(Phi)

    @classmethod
    def counts(cls, Phi: np.ndarray | None, y: np.ndarray) -> Problem:
        """The Poisson (log link) problem of design ``Phi`` and counts ``y`` (shape (N,)).

        The Laplace engines fit it as they fit a classifier's labels; the counts are not scaled
        (a scale would change the likelihood, not only its units). ``Phi`` as in
        :meth:`regression`.
        """
        T = np.asarray(y, dtype=np.float64).reshape(-1, 1)
        problem = cls(
            design=np.empty((T.shape[0], 0)), norms=np.ones(0), targets=T, likelihood="poisson"
        )
        return problem if Phi is None else problem.with_design(Phi)

    def with_design(
        self, Phi: np.ndarray, *, normalised: bool = False, targets: np.ndarray | None = None
    ) -> Problem:
        """This problem with the design ``Phi`` (normalised in place, its norms kept).

        With ``normalised=True``, ``Phi`` already has unit-norm columns and the norms are ones
        (the width search's designs, a subset of rows); ``targets`` replaces the targets by
        normalised ones (a subset of rows), the scale and the noise kept.
        """
        norms = np.ones(Phi.shape[1]) if normalised else normalise_columns(Phi)
        targets = self.targets if targets is None else targets
        return dataclasses.replace(self, design=Phi, norms=norms, targets=targets)

    def unscale(self, fit: EvidenceFit | OneVsRestFit) -> EvidenceFit | OneVsRestFit:
        """The fit of this normalised problem in the user's units (a :class:`OneVsRestFit` for OvR).

        :meth:`EvidenceFit.rescaled` maps it; :func:`unscale_alpha` says when the alphas leave
        float64's range in these units.
        """
        if isinstance(fit, OneVsRestFit):
            return OneVsRestFit(tuple(self.unscale(f) for f in fit.fits))
        n_values = self.n_values if self.likelihood in NOISE_LIKELIHOODS else 0
        out = fit.rescaled(self.norms, self.scale, n_values)
        return dataclasses.replace(out, alpha=unscale_alpha(fit.alpha, self.norms / self.scale))

    def active_design(self, columns: np.ndarray) -> np.ndarray:
        """The design's ``columns`` in the user's units (``design * norms``)."""
        if self.statistics is not None:
            raise ValueError(
                "a problem built from sufficient statistics holds no design matrix; build its "
                "rows with the basis (bayes_rvm.basis.statistics.design_chunks)."
            )
        return self.design[:, columns] * self.norms[columns]


@dataclass(frozen=True)
class Engine:
    """A type-II engine of :func:`bayes_rvm.evidence.fit_evidence` with its options.

    Attributes
    ----------
    solver : {"sequential", "mackay"}
    alpha_prior : tuple of float
        Gamma hyperprior ``(a, b)`` of the prior precisions (``(0, 0)``: flat in ``log alpha``).
    tol, max_iter
        The engine's stopping rule.
    threshold_alpha : float or None
        Pruning threshold of the engines that take one (None: the engine's default).
    free_bias : bool
        The design's last column is a free (unregularised) intercept.
    progress : bool
        Show the engine's progress bar.
    noise_nu : float or None
        Student-t noise: its fixed degrees of freedom (None: learned).
    """

    solver: str = "sequential"
    alpha_prior: tuple[float, float] = (0.0, 0.0)
    tol: float = 1e-3
    max_iter: int = 10_000
    threshold_alpha: float | None = None
    free_bias: bool = False
    progress: bool = False
    noise_nu: float | None = None

    def fit(self, problem: Problem, warm: EvidenceFit | None = None) -> EvidenceFit | OneVsRestFit:
        """The fit of the normalised ``problem`` (:meth:`Problem.unscale` maps it back).

        ``warm`` is a previous fit of the same targets (at another kernel width) to start from:
        the Gaussian engines take its noise precision (unless it is fixed) and the sequential
        one its alphas; the Laplace engines start cold.
        """
        kw: dict = {"alpha_prior": self.alpha_prior, "tol": self.tol, "max_iter": self.max_iter}
        if self.threshold_alpha is not None:
            kw["threshold_alpha"] = self.threshold_alpha
        if self.progress:
            kw["progress"] = True
        Phi, T = problem.design, problem.targets
        if problem.statistics is not None:
            Phi, T = problem.statistics, None
        if problem.likelihood == "student_t":
            kw.update(likelihood="student_t", noise_nu=self.noise_nu)
        if problem.likelihood in NOISE_LIKELIHOODS:
            return fit_evidence(Phi, T, solver=self.solver, **kw, **self._noise(problem, warm))
        kw["free"] = [Phi.shape[1] - 1] if self.free_bias else []
        if problem.one_vs_rest:
            return OneVsRestFit(
                tuple(
                    fit_evidence(
                        Phi,
                        np.ascontiguousarray(T[:, c]),
                        solver=self.solver,
                        likelihood="bernoulli",
                        **kw,
                    )
                    for c in range(T.shape[1])
                )
            )
        return fit_evidence(Phi, T, solver=self.solver, likelihood=problem.likelihood, **kw)

    def _noise(self, problem: Problem, warm: EvidenceFit | None) -> dict:
        """The noise options of a Gaussian fit, and the warm start's alphas."""
        fixed = problem.noise_precision is not None
        start = problem.noise_start if self.solver == "mackay" else None
        kw = {"fixed_beta": fixed, "beta_init": problem.noise_precision if fixed else start}
        if warm is not None:
            if self.solver == "sequential":
                kw["alpha_init"] = warm.alpha
            if not fixed:
                kw["beta_init"] = warm.beta
        return kw


@dataclass(frozen=True)
class TrainingData:
    """The training problem a fitted estimator keeps, in the user's units.

    What prediction (RVM*, importance sampling), ``model_``, ``idata_``, ``refit_loo`` and
    saving need of the training data. Saved files hold it as named arrays
    (:meth:`to_arrays`, :meth:`from_arrays`); a field absent from an older file is None.

    Attributes
    ----------
    phi_active : ndarray of shape (N, K) or None
        The design's retained columns.
    y : ndarray of shape (N,) or (N, D) or None
        Regression targets as given.
    y_index : ndarray of int, shape (N,), or None
        Class indices into ``classes_``.
    norms : ndarray of shape (K,) or None
        Norms of the retained columns (classification).
    alpha_normalised : ndarray of shape (n_fits, K) or None
        The retained alphas on the normalised columns, per fit (classification: in the user's
        units they leave float64's range with the columns' norms, and importance sampling needs
        them).
    x_train : ndarray of shape (N, P) or None
        Training inputs (None with a precomputed kernel).
    kernel_matrix : ndarray of shape (N, N) or None
        The training kernel matrix of ``kernel="precomputed"``.
    """

    phi_active: np.ndarray | None = None
    y: np.ndarray | None = None
    y_index: np.ndarray | None = None
    norms: np.ndarray | None = None
    alpha_normalised: np.ndarray | None = None
    x_train: np.ndarray | None = None
    kernel_matrix: np.ndarray | None = None

    #: Field -> name of its array in saved files (the names of earlier versions).
    _ARRAY_NAMES = {"kernel_matrix": "X"}  # noqa: RUF012 - a class constant, not a field

    @property
    def inputs(self) -> np.ndarray | None:
        """What the basis transforms to rebuild the training design: inputs or kernel matrix."""
        return self.x_train if self.x_train is not None else self.kernel_matrix

    @property
    def targets(self) -> np.ndarray:
        """The regression targets as an (N, D) matrix."""
        return self.y[:, None] if self.y.ndim == 1 else self.y

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The fields that are set, by their names in saved files."""
        return {
            self._ARRAY_NAMES.get(f.name, f.name): getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray] | None) -> TrainingData:
        """The record of :meth:`to_arrays`'s arrays (missing ones None)."""
        arrays = arrays or {}
        return cls(
            **{
                f.name: arrays.get(cls._ARRAY_NAMES.get(f.name, f.name))
                for f in dataclasses.fields(cls)
            }
        )
