"""What every type-II engine sees, and what a fit keeps.

Every engine of :mod:`bayes_rvm.evidence` takes ``(problem, options, warm=None)``
(:func:`~bayes_rvm.evidence.engines.fit_problem`), with the one problem type of this module:

- :class:`Problem`: the design with unit-norm columns and the targets divided by their scale,
  with the norms and the scale kept, so that the engines' thresholds mean the same thing for
  kernel values or targets of 1e-8 and of 1e8; :meth:`Problem.unscale` maps a fit back to the
  user's units exactly (the RVM is equivariant under both scalings). :meth:`Problem.given` takes
  a design and targets as they are (the convenience functions ``fit_*(Phi, T)``).
  :meth:`Problem.view` is the one place where a fit's inputs are checked: it resolves the options
  against the problem into the arrays an engine starts from (a :class:`ProblemView`).
- :class:`OneVsRestFit`: one binary fit per class, with a fit's interface.
- :class:`TrainingData`: the training arrays a fitted estimator keeps for prediction, ``model_``
  and saving.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from bayes_rvm._warnings import PACKAGE_FRAMES
from bayes_rvm.basis.kernels import FUSED_MIN_ENTRIES
from bayes_rvm.basis.statistics import SufficientStatistics
from bayes_rvm.evidence.design import ChunkedDesign, DenseDesign
from bayes_rvm.evidence.options import (
    FREE_ALPHA_FACTOR,
    FREE_LATENT_SD,
    EvidenceOptions,
    beta_ceiling,
    default_beta_init,
)
from bayes_rvm.evidence.result import EvidenceFit
from bayes_rvm.families import LOG_2PI, NOISE_LIKELIHOODS, family

__all__ = [
    "OneVsRestFit",
    "Problem",
    "ProblemView",
    "TrainingData",
    "check_targets",
    "column_scale",
    "normalise_columns",
    "prior_column_scale",
    "target_scale",
    "target_spread",
    "unscale_alpha",
]


def normalise_columns(Phi: np.ndarray) -> np.ndarray:
    """Scale the columns of ``Phi`` to unit norm in place; return the norms (1 for zero columns).

    Each column is first divided by its largest magnitude, as LAPACK's ``dnrm2`` scales, so that
    the sum of squares can neither overflow nor underflow: kernel values of 1e160 (a linear kernel
    on inputs of 1e80) or 1e-200 normalise as exactly as values near one, where squaring them
    directly gave inf or 0 and dropped every column.
    """
    return _normalise(Phi)[0]


def _normalise(Phi: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`normalise_columns`, and the sums of squares of the columns it leaves where it
    computed them on the way (else None): those of ``einsum("ij,ij->j", Phi, Phi)``, to the bit.

    Where the process has loaded :mod:`bayes_rvm.basis.blocks` (the fused kernel, used from
    :data:`~bayes_rvm.basis.kernels.FUSED_MIN_ENTRIES` values) and ``Phi`` is a C-ordered float64
    design of at least as many values, the sums of squares and the division are its compiled
    passes, the division summing the squares of its results on the way.
    """
    blocks = sys.modules.get("bayes_rvm.basis.blocks")
    if (
        blocks is None
        or Phi.size < FUSED_MIN_ENTRIES
        or Phi.dtype != np.float64
        or not Phi.flags.c_contiguous
    ):
        blocks = None
    if blocks is None:
        # max and min reduce without the N x M temporary that np.abs(Phi) would allocate.
        peak = np.maximum(Phi.max(axis=0, initial=0.0), -Phi.min(axis=0, initial=0.0))
    else:
        # The peaks and the sums of squares in one pass: the sums are final where no column moves.
        peak, squares = blocks.column_peaks(Phi)
    peak[peak == 0] = 1.0
    # Dividing by 1 is exact: where every column peaks at 1 (rbf columns on the training
    # points, the bias) a pass over the design is saved, and where a few do not, only those move.
    scaled = np.flatnonzero(peak != 1.0)
    if scaled.size > peak.size // 8:
        Phi /= peak
    elif scaled.size:
        Phi[:, scaled] /= peak[scaled]
    if blocks is None:
        norms = np.sqrt(np.einsum("ij,ij->j", Phi, Phi))
        norms[norms == 0] = 1.0
        Phi /= norms
        return peak * norms, None
    if scaled.size:
        squares = blocks.column_squares(Phi)
    norms = np.sqrt(squares)
    norms[norms == 0] = 1.0
    return peak * norms, blocks.divide_columns(Phi, norms)


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


def target_spread(T: np.ndarray | None, statistics: SufficientStatistics | None = None) -> float:
    """The targets' sum of squares about each output's mean, summed over the outputs (from the
    statistics' sums where given).

    The engines' noise floor (:func:`~bayes_rvm.evidence.options.beta_ceiling`) is relative to
    it, not to the sum of squares: a constant added to the targets, which a bias column carries,
    raised a floor on the root-mean-square to the true noise at an offset of 1e6 times it (a
    noise sd of 1.0 estimated for 0.1, and one relevance vector left of four).

    0 where it is within rounding of 0 against the sum of squares ``tt`` of the n values:
    below ``(n eps)^2 tt``, constant targets (whose mean can differ from every value in its last
    bit); from the statistics' sums, whose difference cancels, below ``n eps tt``. The floor is
    then the level's.
    """
    eps = np.finfo(np.float64).eps
    if statistics is not None:
        s = statistics
        n, tt = s.n * s.n_outputs, float(np.sum(s.tt))
        spread = float(np.sum(s.tt - s.t_sum * s.t_sum / max(s.n, 1)))
        resolution = n * eps
    else:
        n, tt = T.size, float(np.sum(np.square(T)))
        spread = float(np.sum(np.square(T - T.mean(axis=0))))
        resolution = (n * eps) ** 2
    return spread if spread > resolution * tt else 0.0


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
            skip_file_prefixes=PACKAGE_FRAMES,
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


#: Squared column norms at or below this fraction of the largest mark a column that is
#: numerically zero (a norm below the largest one's rounding, machine epsilon squared).
_ZERO_COLUMN_RTOL = np.finfo(np.float64).eps ** 2


def check_targets(T, N: int, likelihood: str) -> np.ndarray:
    """Targets as an (N, C) float array, checked against the likelihood (a clear error if not)."""
    T = np.asarray(T, dtype=np.float64)
    if T.ndim not in (1, 2) or T.shape[0] != N:
        raise ValueError(f"T must have {N} rows (shape (N,) or (N, D)), got shape {T.shape}.")
    T = T[:, None] if T.ndim == 1 else T
    if T.shape[1] < 1 or not np.all(np.isfinite(T)):
        raise ValueError("T must be finite with at least one output.")
    if likelihood == "softmax":
        if T.shape[1] < 2 or np.any(T < 0) or not np.allclose(T.sum(axis=1), 1.0):
            raise ValueError(
                "softmax targets must be an (N, C) matrix of class probabilities, C >= 2."
            )
    elif likelihood != "gaussian" and T.shape[1] != 1:
        raise ValueError(f"{likelihood} targets must be one column, got shape {T.shape}.")
    elif likelihood == "bernoulli" and (np.any(T < 0) or np.any(T > 1)):
        raise ValueError("bernoulli targets must lie in [0, 1].")
    elif likelihood == "poisson" and np.any(T < 0):
        raise ValueError("poisson targets must be non-negative counts.")
    return T


def _design_norms(Phi, T: np.ndarray, likelihood: str, squares=None) -> np.ndarray:
    """The squared column norms of a design in memory, which must be finite (so must ``Phi``);
    ``squares``: those :meth:`Problem.with_design` summed as it normalised the columns."""
    if Phi.ndim != 2 or Phi.dtype != np.float64:
        raise ValueError(
            f"Phi must be a 2-D float64 array (it is not copied), got {Phi.ndim}-D {Phi.dtype}."
        )
    N, M = Phi.shape
    if N < 1 or M < 1:
        raise ValueError(f"Phi must have at least one row and one column, got shape {Phi.shape}.")
    check_targets(T, N, likelihood)
    if squares is not None:
        dd = squares
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            dd = np.einsum("ij,ij->j", Phi, Phi)  # squared norms: finite only if Phi is
    if not np.all(np.isfinite(dd)):
        raise ValueError("Phi must be finite.")
    return dd


def _statistics_norms(stats: SufficientStatistics, likelihood: str) -> np.ndarray:
    """The squared column norms of a problem given by its sufficient statistics."""
    if likelihood != "gaussian":
        raise ValueError(
            f"a {likelihood} fit needs the design matrix itself: sufficient statistics (Phi' Phi, "
            "Phi' T, T' T) determine only a Gaussian fit (fit_mackay, fit_sequential)."
        )
    if stats.n < 1 or stats.n_basis < 1:
        raise ValueError(
            f"the statistics must cover at least one row and one column, got {stats.n} rows "
            f"and {stats.n_basis} columns."
        )
    finite = (np.isfinite(a).all() for a in (stats.gram, stats.cross, stats.tt, stats.t_sum))
    if not all(finite):
        raise ValueError("the sufficient statistics must be finite.")
    return np.diag(stats.gram).copy()


def _index_array(name: str, idx, M: int) -> np.ndarray:
    arr = np.asarray(idx if idx is not None else [], dtype=np.float64).ravel()
    if arr.size and (np.any(arr != np.round(arr)) or arr.min() < 0 or arr.max() >= M):
        raise ValueError(f"{name} must hold column indices in [0, {M}), got {idx!r}.")
    return arr.astype(np.intp)


def _columns(dd: np.ndarray, options: EvidenceOptions):
    """``(allowed, free, alpha_init)``: the index options checked against the squared norms."""
    M = dd.size
    free = _index_array("free", options.free, M)
    if options.free_bias:
        free = np.r_[free, M - 1]
    free = np.unique(free)
    if free.size and np.any(dd[free] == 0):
        raise ValueError("a free column is identically zero.")
    if options.candidates is None:
        allowed = np.ones(M, dtype=bool)
    else:
        cand = _index_array("candidates", options.candidates, M)
        if cand.size == 0:
            raise ValueError("candidates must not be empty.")
        allowed = np.zeros(M, dtype=bool)
        allowed[cand] = True
    # A column whose norm is below the rounding of the largest one is numerically zero: no sum
    # of columns can see it, and its single-column optimum (alpha ~ s^2, s ~ its squared norm)
    # underflows to 0. A leave-one-out refit meets such columns: an rbf column normalised over
    # all rows, left with 1e-96 of its norm when the one row it covered is removed.
    allowed &= dd > _ZERO_COLUMN_RTOL * float(np.max(dd, initial=0.0))
    allowed[free] = False
    alpha_init = options.alpha_init
    if alpha_init is not None:
        ai = np.asarray(alpha_init, dtype=np.float64)
        if ai.ndim == 1 and ai.shape != (M,):
            raise ValueError(f"alpha_init must have shape ({M},), positive, inf for out.")
        alpha_init = np.broadcast_to(ai, (M,)).copy()
        start = np.isfinite(alpha_init)
        start[free] = False
        if np.any(dd[start] == 0):
            raise ValueError("alpha_init makes an identically zero column active.")
        if not start.any() and free.size == 0:
            raise ValueError("alpha_init must have at least one finite entry.")
    elif not (allowed.any() or free.size):
        raise ValueError("the design matrix has no non-zero column to fit with.")
    return allowed, free, alpha_init


@dataclass(frozen=True)
class ProblemView:
    """A :class:`Problem` as one engine starts from it: checked arrays and resolved options.

    Built by :meth:`Problem.view` only. ``Phi`` is the design (a
    :class:`~bayes_rvm.evidence.design.DenseDesign` or ``ChunkedDesign`` for the Laplace
    engines), ``T`` the 2-D targets (N x D outputs, or N x C classes); ``dd`` the squared column
    norms of ``Phi``; ``allowed`` the columns that may enter the model (candidates, non-zero, not
    free); ``free`` the unregularised columns; ``alpha_init`` an (M,) array or None;
    ``beta_init`` resolved; ``options`` those of the engine, its defaults filled in. A Gaussian
    problem given by its sufficient statistics (``Phi' Phi``, ``Phi' T``, ``T' T``, N) has
    ``statistics`` set and ``Phi`` and ``T`` None: the Gaussian engines read those sums only.
    """

    Phi: np.ndarray | DenseDesign | ChunkedDesign | None
    T: np.ndarray | None
    dd: np.ndarray
    allowed: np.ndarray
    free: np.ndarray
    alpha_init: np.ndarray | None
    beta_init: float
    options: EvidenceOptions
    statistics: SufficientStatistics | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """``(N, M, D)``."""
        if self.statistics is not None:
            s = self.statistics
            return s.n, s.n_basis, s.n_outputs
        return self.Phi.shape[0], self.Phi.shape[1], self.T.shape[1]

    @property
    def tt(self) -> float:
        """``sum(T**2)`` over all rows and outputs."""
        if self.statistics is not None:
            return float(np.sum(self.statistics.tt))
        return float(np.sum(self.T * self.T))

    @property
    def spread(self) -> float:
        """:func:`target_spread` of the targets: what the noise floor is relative to."""
        return target_spread(self.T, self.statistics)

    def sums(self) -> tuple[np.ndarray | None, np.ndarray]:
        """``(Phi' Phi or None, Phi' T)``: the Gram matrix where the problem holds it."""
        if self.statistics is not None:
            return self.statistics.gram, self.statistics.cross
        return None, self.Phi.T @ self.T

    def free_alpha(self) -> np.ndarray:
        """Prior precisions of the free columns: Gaussian, a prior sd 1e5 times a weight that
        fits ``T``; Laplace, a latent prior sd of ``FREE_LATENT_SD`` per unit RMS of the column."""
        N, _, D = self.shape
        if self.options.likelihood != "gaussian":
            return self.dd[self.free] / (N * FREE_LATENT_SD**2)
        msq = max(self.tt / (N * D), 1e-300)
        return FREE_ALPHA_FACTOR * self.dd[self.free] / (N * msq)

    def start_all(self) -> np.ndarray:
        """Starting alphas of the re-estimation engines (``inf``: out of the model).

        Every allowed column at ``alpha_init`` (default 1.0), the free ones at their free alpha.
        """
        M = self.shape[1]
        alpha = np.ones(M) if self.alpha_init is None else self.alpha_init.copy()
        keep = self.allowed & np.isfinite(alpha)
        keep[self.free] = True
        if not keep.any():
            raise ValueError("the design matrix has no non-zero column to fit with.")
        alpha[~keep] = np.inf
        alpha[self.free] = self.free_alpha()
        return alpha


@dataclass(frozen=True)
class Problem:
    """A type-II problem on the normalised scale: what every engine sees.

    Build one with :meth:`regression`, :meth:`from_statistics`, :meth:`classification` or
    :meth:`counts`; :meth:`with_design` gives the same targets on another design (another kernel
    width, a subset of rows); :meth:`given` takes a design and targets as they are.
    ``fit_problem(problem, options, warm=None)`` (:func:`~bayes_rvm.evidence.engines.fit_problem`)
    fits it; each engine starts from its :meth:`view`.

    Attributes
    ----------
    design : ndarray of shape (N, M) or ChunkedDesign
        The design matrix with unit-norm columns (``(N, 0)`` before a design is given), or one
        built in row blocks (:class:`~bayes_rvm.evidence.design.ChunkedDesign`, Laplace
        likelihoods).
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

    @classmethod
    def given(cls, Phi, T, *, likelihood: str = "gaussian") -> Problem:
        """The problem of the design ``Phi`` and targets ``T`` as they are: not normalised.

        What the convenience functions ``fit_*(Phi, T)`` fit. ``Phi`` is an (N, M) float64 array
        (neither copied nor modified), a :class:`~bayes_rvm.evidence.design.ChunkedDesign` (the
        Laplace likelihoods), or the problem's
        :class:`~bayes_rvm.basis.statistics.SufficientStatistics` with ``T`` None (the Gaussian
        one). The norms are ones and the scale 1; :meth:`view` checks the problem.
        """
        if isinstance(Phi, SufficientStatistics):
            if T is not None:
                raise ValueError("with sufficient statistics in place of Phi, T must be None.")
            return cls(
                design=np.empty((0, Phi.n_basis)),
                norms=np.ones(Phi.n_basis),
                targets=np.empty((0, Phi.n_outputs)),
                likelihood=likelihood,
                statistics=Phi,
            )
        T = np.asarray(T, dtype=np.float64)
        design = Phi if isinstance(Phi, ChunkedDesign) else np.asarray(Phi)
        M = design.shape[1] if len(design.shape) == 2 else 0
        return cls(
            design=design,
            norms=np.ones(M),
            targets=T[:, None] if T.ndim == 1 else T,
            likelihood=likelihood,
        )

    def with_design(
        self, Phi: np.ndarray, *, normalised: bool = False, targets: np.ndarray | None = None
    ) -> Problem:
        """This problem with the design ``Phi`` (normalised in place, its norms kept).

        With ``normalised=True``, ``Phi`` already has unit-norm columns and the norms are ones
        (the width search's designs, a subset of rows); ``targets`` replaces the targets by
        normalised ones (a subset of rows), the scale and the noise kept.
        """
        norms, squares = (np.ones(Phi.shape[1]), None) if normalised else _normalise(Phi)
        targets = self.targets if targets is None else targets
        problem = dataclasses.replace(self, design=Phi, norms=norms, targets=targets)
        if squares is not None:  # the check of squared_norms then costs no pass over Phi
            problem.__dict__["_design_squares"] = squares
        return problem

    def empty_log_evidence(self) -> float | None:
        """The log evidence of the model with every basis function pruned: no weights at all.

        Gaussian: ``ln N(T | 0, beta^-1 I)`` at the fixed noise precision or the maximum-likelihood
        one, ``N D / sum(T**2)``, within the engines' ceiling
        (:func:`~bayes_rvm.evidence.options.beta_ceiling`). Bernoulli, softmax, Poisson: the
        likelihood at a zero latent, ``ln p(T | eta = 0)``. None where it has no closed form
        (Student-t noise, one-vs-rest).
        """
        if self.likelihood == "student_t" or self.one_vs_rest:
            return None
        if self.likelihood != "gaussian":
            return family(self.likelihood).mean_and_log_likelihood(
                np.zeros_like(self.targets), self.targets
            )[1]
        n = self.n_values
        tt = (
            float(np.sum(self.statistics.tt))
            if self.statistics is not None
            else float(np.sum(self.targets * self.targets))
        )
        beta = self.noise_precision
        if beta is None:
            beta = n / tt if tt > 0 else beta_ceiling(tt, n)
        return 0.5 * n * (np.log(beta) - LOG_2PI) - 0.5 * beta * tt

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

    def class_problem(self, c: int) -> Problem:
        """Class ``c`` against the rest: the binary problem of one column of a one-vs-rest one."""
        targets = np.ascontiguousarray(self.targets[:, c])[:, None]
        return dataclasses.replace(self, targets=targets, likelihood="bernoulli", one_vs_rest=False)

    def start_options(
        self, options: EvidenceOptions, warm: EvidenceFit | None = None, *, solver: str
    ) -> EvidenceOptions:
        """``options`` with this problem's noise and the warm start's hyperparameters.

        A fixed :attr:`noise_precision` fixes the noise; otherwise MacKay's engine starts from
        :attr:`noise_start` unless ``options`` say where. ``warm`` is a previous fit of the same
        targets (at another kernel width): the Gaussian engines take its noise precision (unless
        it is fixed), and the sequential one its alphas.
        """
        changes: dict = {}
        fixed = self.noise_precision is not None
        if fixed:
            changes.update(fixed_beta=True, beta_init=self.noise_precision)
        elif solver == "mackay" and options.beta_init is None and self.noise_start is not None:
            changes["beta_init"] = self.noise_start
        if warm is not None:
            if solver == "sequential":
                changes["alpha_init"] = warm.alpha
            if not (fixed or options.fixed_beta):
                changes["beta_init"] = warm.beta
        return dataclasses.replace(options, **changes) if changes else options

    @functools.cached_property
    def squared_norms(self) -> np.ndarray:
        """The squared norms of the design's columns, found as the problem is checked.

        The one check of the design and the targets (shapes, finiteness, targets that suit the
        likelihood), made the first time an engine views the problem: the estimators build
        their problems from data they checked, and a problem is not checked again.
        """
        if self.statistics is not None:
            return _statistics_norms(self.statistics, self.likelihood)
        if isinstance(self.design, ChunkedDesign):
            # Its columns have unit norm (zero columns stay zero), checked finite when built.
            design = self.design
            check_targets(self.targets, design.shape[0], self.likelihood)
            norms = design.norms if design.columns is None else design.norms[design.columns]
            return (norms > 0).astype(np.float64)
        squares = self.__dict__.get("_design_squares")
        return _design_norms(self.design, self.targets, self.likelihood, squares)

    def view(
        self, options: EvidenceOptions, engine: str, warm: EvidenceFit | None = None
    ) -> ProblemView:
        """The arrays ``engine`` starts from, with ``options`` resolved against this problem.

        The one place where a fit's inputs are checked: the options for ``engine`` (one of
        :data:`~bayes_rvm.evidence.options.ENGINE_NAMES`; it refuses options it does not use),
        the design and targets (:attr:`squared_norms`), the column indices of the options; and
        where the Gaussian engines take the problem's noise and the warm start
        (:meth:`start_options`).
        """
        if engine in ("mackay", "sequential"):
            options = self.start_options(options, warm, solver=engine)
        if options.likelihood is None:
            options = dataclasses.replace(options, likelihood=self.likelihood)
        elif options.likelihood != self.likelihood:
            raise ValueError(
                f"the options name the {options.likelihood!r} likelihood, the problem's is "
                f"{self.likelihood!r}."
            )
        options = options.for_engine(engine)
        dd = self.squared_norms
        allowed, free, alpha_init = _columns(dd, options)
        if options.beta_init is not None:
            beta_init = options.beta_init
        elif self.statistics is not None:
            beta_init = default_beta_init(engine, self.statistics.target_variance())
        else:
            beta_init = default_beta_init(engine, float(np.var(self.targets)))
        if self.statistics is not None:
            Phi, T = None, None
        elif engine.startswith("laplace") and isinstance(self.design, np.ndarray):
            Phi, T = DenseDesign(self.design), self.targets
        else:
            Phi, T = self.design, self.targets
        return ProblemView(
            Phi, T, dd, allowed, free, alpha_init, float(beta_init), options, self.statistics
        )


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
