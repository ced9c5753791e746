"""The kernel width as a type-II hyperparameter: the evidence gradient and its maximisation.

For a stationary kernel the basis is ``Phi[n, j] = k(x_n, c_j; l) / ||k(., c_j; l)||`` (the columns
scaled to unit norm as the estimators do) with one length scale ``l`` or one per input feature
(ARD over the inputs):

- ``"rbf"``: ``k = exp(-sum_d (x_d - c_d)^2 / l_d^2)`` (so ``gamma_d = 1 / l_d^2``),
- ``"laplacian"``: ``k = exp(-sum_d |x_d - c_d| / l_d)`` (so ``gamma_d = 1 / l_d``).

At an optimum of the alphas and the noise, the derivative of the profile evidence
``L*(l) = max_{alpha, beta} L(alpha, beta, l)`` is the partial derivative at fixed hyperparameters
(the envelope theorem; pruned columns, ``alpha = inf``, sit at a boundary optimum and drop out).
For the Gaussian likelihood, with ``Sigma`` and ``M`` the posterior covariance and means of the
K active weights and D outputs sharing them,

    dL/dPhi_a = beta [(T - Phi_a M) M^T - D Phi_a Sigma]                        (N x K)

(from ``C^-1 Phi A^-1 = beta Phi Sigma`` and ``C^-1 t = beta (t - Phi m)``), only the active columns
enter, and the chain through the column normalisation ``Phi_j = K_j / ||K_j||`` and the kernel's
``dK/dlog l_d = K * g_d`` gives

    dL/dlog l_d = sum_{n,j} Phi_nj (G_nj - Phi_nj s_j) g_d(x_n, c_j),   s_j = Phi_j . G_j

where ``g_d = 2 (x_d - c_d)^2 / l_d^2`` (rbf) or ``|x_d - c_d| / l_d`` (laplacian): the norms
cancel. This module holds those formulas and :func:`maximise_width`, an outer optimiser over the
log width(s) around the type-II engines: it fits each width's problem by the engine contract,
:func:`~bayes_rvm.evidence.engines.fit_problem` ``(problem, options, warm)``, warm-started from the
fit at the width before.

The estimators' default width (``gamma="evidence_shared"``) maximises another evidence: that of the
same basis with one prior precision shared by all weights (:func:`shared_evidence`, of
:mod:`bayes_rvm.evidence.shared`, and :func:`shared_laplace_evidence` for classifiers), which
cannot be raised by tuning one alpha per basis function to the targets; :func:`select_width_shared`
searches it.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

from bayes_rvm.basis.kernels import WIDTH_KERNELS, stationary_kernel
from bayes_rvm.evidence.engines import fit_problem
from bayes_rvm.evidence.log_evidence import solve_lower
from bayes_rvm.evidence.mode import LaplacePosterior, newton_mode
from bayes_rvm.evidence.options import EvidenceOptions
from bayes_rvm.evidence.problem import Problem
from bayes_rvm.evidence.result import EvidenceFit
from bayes_rvm.evidence.shared import (
    RANK_TOL,
    SharedEvidence,
    principal_coordinates,
    shared_evidence,
    shared_evidence_design_gradient,
    shared_evidence_gram,
)
from bayes_rvm.families import BERNOULLI, Family, family
from bayes_rvm.threads import one_blas_thread, single_blas_thread

__all__ = [
    "RANK_TOL",
    "SEARCH_RANK_TOL",
    "WIDTH_KERNELS",
    "SharedEvidence",
    "WidthFit",
    "WidthPath",
    "default_width_grid",
    "design_width_gradient",
    "evidence_design_gradient",
    "evidence_width_gradient",
    "maximise_width",
    "maximise_width_shared_ard",
    "select_width_shared",
    "shared_evidence",
    "shared_evidence_design_gradient",
    "shared_evidence_gram",
    "shared_laplace_evidence",
    "width_to_gamma",
]

#: The start grid stops narrowing once a fit keeps this fraction of the basis and loses evidence.
SATURATED = 0.9


#: The unit-norm design at length scale(s) ``l``: ``design(l, columns=None) -> Phi``.
Design = Callable[..., np.ndarray]


def width_to_gamma(length_scale, kernel: str):
    """The coefficient(s) ``gamma`` of :class:`~bayes_rvm.KernelBasis` for length(s) ``l``.

    ``1 / l^2`` for ``"rbf"``, ``1 / l`` for ``"laplacian"``
    (:meth:`bayes_rvm.basis.kernels.StationaryKernel.gamma`).
    """
    return stationary_kernel(kernel, purpose="a learned kernel width").gamma(length_scale)


def evidence_design_gradient(Phi_active: np.ndarray, T: np.ndarray, fit) -> np.ndarray:
    """``dL/dPhi`` of the Gaussian log evidence over the active columns, at fixed hyperparameters.

    Parameters
    ----------
    Phi_active : ndarray of shape (N, K)
        The active columns of the design matrix the fit was made on (``Phi[:, fit.active]``).
    T : ndarray of shape (N,) or (N, D)
        Targets of the fit.
    fit : EvidenceFit
        A Gaussian-likelihood fit: ``mean``, ``covariance`` of the active weights and ``beta``.

    Returns
    -------
    ndarray of shape (N, K)
        ``beta [(T - Phi_a M) M^T - D Phi_a Sigma]``.
    """
    T = T[:, None] if T.ndim == 1 else T
    resid = T - Phi_active @ fit.mean
    return fit.beta * (resid @ fit.mean.T - T.shape[1] * (Phi_active @ fit.covariance))


def evidence_width_gradient(
    X: np.ndarray,
    centres: np.ndarray,
    Phi_active: np.ndarray,
    T: np.ndarray,
    fit: EvidenceFit,
    length_scale,
    *,
    kernel: str = "rbf",
) -> np.ndarray:
    """Gradient of the Gaussian log evidence with respect to the log length scale(s).

    The partial derivative at the fit's hyperparameters, which at an optimum of the alphas and the
    noise is the derivative of the profile evidence (see the module docstring). The columns are
    those of a stationary kernel scaled to unit norm; a bias column is passed with centre None.

    Parameters
    ----------
    X : ndarray of shape (N, P)
        Inputs.
    centres : ndarray of shape (K, P) or None
        The centres of the active columns (rows of NaN, or None for all, mark columns that do
        not depend on the width, such as the bias).
    Phi_active : ndarray of shape (N, K)
        The active columns of the unit-norm design matrix.
    T : ndarray of shape (N,) or (N, D)
        Targets of the fit.
    fit : EvidenceFit
        The Gaussian-likelihood fit on that design.
    length_scale : float or ndarray of shape (P,)
        One length scale, or one per input feature.
    kernel : {"rbf", "laplacian"}, default="rbf"

    Returns
    -------
    ndarray of shape (1,) or (P,)
        ``dL / dlog l`` (one entry per length scale).
    """
    G = evidence_design_gradient(Phi_active, T, fit)
    return design_width_gradient(X, centres, Phi_active, G, length_scale, kernel=kernel)


def design_width_gradient(
    X: np.ndarray,
    centres: np.ndarray | None,
    Phi: np.ndarray,
    G: np.ndarray,
    length_scale,
    *,
    kernel: str = "rbf",
) -> np.ndarray:
    """``dL/dlog l`` from ``G = dL/dPhi`` through the unit-norm columns of a stationary kernel.

    The chain of :func:`evidence_width_gradient` (see the module docstring), for any ``L`` whose
    derivative ``G`` in the unit-norm design ``Phi`` (N x K, centres as there) is known.
    Returns shape (1,) for one length scale, (P,) for one per feature.
    """
    width = stationary_kernel(kernel, purpose="a learned kernel width")
    ls = np.atleast_1d(np.asarray(length_scale, dtype=np.float64))
    s = np.einsum("ij,ij->j", Phi, G)
    W = Phi * (G - Phi * s)
    if centres is None:
        return np.zeros(ls.size)
    kern = ~np.isnan(centres).any(axis=1)
    W, C = W[:, kern], centres[kern]
    P = X.shape[1]
    lsd = np.broadcast_to(ls, (P,)) if ls.size == 1 else ls
    per_feature = np.empty(P)
    for d in range(P):
        per_feature[d] = width.log_length_sum(W, X[:, d, None] - C[None, :, d], lsd[d])
    # One shared length scale: d/dlog l is the sum of the per-feature derivatives.
    return np.array([per_feature.sum()]) if ls.size == 1 else per_feature


def default_width_grid(X: np.ndarray, n_grid: int = 7, *, random_state=0) -> np.ndarray:
    """Length scales from wide to narrow, relative to the median distance between inputs.

    ``n_grid`` points, log-spaced from 4 to 1/16 times the median Euclidean distance between
    training inputs (on at most 500 of them): wider kernels are nearly linear over the data, and
    narrower ones make every basis function a spike on its own centre.
    """
    rng = np.random.default_rng(random_state)
    idx = rng.choice(X.shape[0], min(X.shape[0], 500), replace=False)
    Z = X[idx]
    d2 = np.sum((Z[:, None, :] - Z[None, :, :]) ** 2, axis=-1)
    med = float(np.sqrt(np.median(d2[np.triu_indices(Z.shape[0], 1)]))) if Z.shape[0] > 1 else 1.0
    med = med if med > 0 else 1.0
    return np.geomspace(4.0 * med, med / 16.0, n_grid)


@dataclass(frozen=True)
class WidthPath:
    """The profile evidence along a width grid (the evidence curve).

    Attributes
    ----------
    length_scale : ndarray of shape (n_grid,)
        The grid, from wide to narrow (for per-feature widths, in units of each feature's
        standard deviation: all features at that many standard deviations).
    log_evidence : ndarray of shape (n_grid,)
        Log evidence (plus log hyperprior, the engine's objective) at its optimum over the alphas
        and the noise, on the problem the engine saw.
    n_active : ndarray of int, shape (n_grid,)
        Retained basis functions at each width.
    noise_variance : ndarray of shape (n_grid,)
        ``1 / beta`` at each width (on the problem the engine saw; NaN for a likelihood without
        noise).
    criterion : {"evidence", "evidence_shared"}
        ``"evidence"``: the RVM's own evidence (one alpha per basis function; ``n_active`` the
        retained basis functions). ``"evidence_shared"``: the evidence of the same basis under one
        shared prior precision (:func:`shared_evidence`; ``n_active`` the effective number of
        parameters, rounded).
    """

    length_scale: np.ndarray
    log_evidence: np.ndarray
    n_active: np.ndarray
    noise_variance: np.ndarray
    criterion: str = "evidence"


@dataclass(frozen=True)
class WidthFit:
    """Result of :func:`maximise_width`.

    Attributes
    ----------
    length_scale : ndarray of shape (1,) or (P,)
        The chosen length scale(s).
    fit : EvidenceFit
        The engine's fit at that width.
    Phi : ndarray of shape (N, M)
        The unit-norm design at that width (the one ``fit`` was made on).
    path : WidthPath
        The evidence curve over the start grid.
    starts : tuple of float
        The grid maxima the refinements started from.
    n_fits : int
        Engine runs in all (grid, refinements).
    seconds : float
        Wall-clock time of the whole selection.
    """

    length_scale: np.ndarray
    fit: EvidenceFit
    Phi: np.ndarray
    path: WidthPath
    starts: tuple[float, ...] = field(default=())
    n_fits: int = 0
    seconds: float = 0.0


class _Search:
    """Engine runs and the bookkeeping of the best one (warm starts, counts).

    The search moves relative length scales ``u``: the kernel's are ``u * unit``, with ``unit``
    ones or, for per-feature widths, each feature's spread (so that the search is the same
    whatever units each feature is measured in).
    """

    def __init__(self, design, options, X, centres, problem, kernel, bias_col, unit):
        self.design, self.options, self.problem = design, options, problem
        self.X, self.centres, self.T, self.kernel = X, centres, problem.targets, kernel
        self.bias_col = bias_col
        self.unit = unit
        self.n_fits = 0
        self.best: tuple[float, np.ndarray, EvidenceFit, np.ndarray] | None = None

    def fit_at(self, ls: np.ndarray, warm: EvidenceFit | None) -> tuple[EvidenceFit, np.ndarray]:
        Phi = self.design(ls * self.unit)
        fit = fit_problem(self.problem.with_design(Phi, normalised=True), self.options, warm)
        self.n_fits += 1
        if self.best is None or fit.log_evidence > self.best[0]:
            self.best = (fit.log_evidence, np.array(ls, dtype=np.float64), fit, Phi)
        return fit, Phi

    def active_centres(self, act: np.ndarray) -> np.ndarray:
        C = np.full((act.size, self.X.shape[1]), np.nan)
        kern = act != self.bias_col
        C[kern] = self.centres[act[kern]]
        return C

    def gradient(self, fit: EvidenceFit, ls: np.ndarray) -> np.ndarray:
        """d log evidence / d log l at the fit (the profile gradient at an alpha optimum)."""
        act = fit.active
        Phi_a = self.design(ls * self.unit, columns=act)
        g = evidence_width_gradient(
            self.X, self.active_centres(act), Phi_a, self.T, fit, ls * self.unit, kernel=self.kernel
        )
        # d/dlog u_d = d/dlog l_d; one relative width for all features moves them all.
        return np.array([g.sum()]) if ls.size < g.size else g

    def refine(self, log_ls, fit, bounds, *, max_iter: int, step: float, tol: float):
        """Gradient ascent on the profile evidence, the engine warm-started at each step.

        The step is the profile gradient times a rate that doubles after a step that raises the
        evidence and shrinks fourfold after one that does not; no coordinate moves by more than
        ``step`` at once. It stops after ``max_iter`` engine runs, a step shorter than ``tol`` or
        an accepted step that gains less than ``10 tol`` nats.
        """
        log_ls = np.asarray(log_ls, dtype=np.float64)
        lo, hi = np.array([b[0] for b in bounds]), np.array([b[1] for b in bounds])
        g = self.gradient(fit, np.exp(log_ls))
        rate = step / max(float(np.max(np.abs(g))), 1e-12)
        for _ in range(max_iter):
            cand = np.clip(log_ls + np.clip(rate * g, -step, step), lo, hi)
            if np.max(np.abs(cand - log_ls)) < tol:
                break
            new_fit, _ = self.fit_at(np.exp(cand), fit)
            gain = new_fit.log_evidence - fit.log_evidence
            if gain > 0:
                log_ls, fit = cand, new_fit
                if gain < 10 * tol:
                    break
                g = self.gradient(fit, np.exp(log_ls))
                rate *= 2.0
            else:
                rate /= 4.0
        return log_ls, fit

    def refine_bounded(self, fit, lo: float, hi: float, *, max_iter: int, tol: float) -> None:
        """Brent's bounded search over one log width, each run warm-started from the last."""
        state = {"warm": fit}

        def f(log_ls):
            state["warm"], _ = self.fit_at(np.array([math.exp(log_ls)]), state["warm"])
            return -state["warm"].log_evidence

        optimize.minimize_scalar(
            f, bounds=(lo, hi), method="bounded", options={"maxiter": max_iter, "xatol": tol}
        )


@one_blas_thread
def maximise_width(
    design: Design,
    options: EvidenceOptions,
    X: np.ndarray,
    problem: Problem,
    *,
    centres: np.ndarray | None = None,
    kernel: str = "rbf",
    bias: bool = True,
    ard: bool = False,
    grid: np.ndarray | None = None,
    n_starts: int = 2,
    refine: str | None = "gradient",
    max_refine_iter: int | None = None,
    tol: float = 1e-3,
    warm_grid: bool = True,
    cold_finish: str = "best",
) -> WidthFit:
    """Maximise the profile evidence over the log length scale(s) of a stationary kernel.

    1. **A start grid** from wide to narrow: one engine run per width, each warm-started from
       the fit at the wider width before it (continuation: a cold start at a narrow width costs
       5-10x a warm one, measured on Friedman #2 and #3). This gives the evidence curve
       (``path``) and brackets its local maxima, so that a narrow maximum does not hide a wide
       one or the other way round (the evidence over the width is often multimodal: a wide
       width that calls a fast component noise, a narrow one that fits it). The grid stops
       narrowing once a fit keeps at least :data:`SATURATED` of the basis functions and has
       less evidence than the width before it.
    2. **Refinement** from the ``n_starts`` best local maxima of the curve, by gradient ascent
       on the profile evidence: the closed-form gradient of :func:`evidence_width_gradient`
       (over the active columns only) gives the direction, the engine re-optimises the alphas
       and noise warm-started from the previous optimum, and the rate adapts (doubled after an
       accepted step, quartered after a rejected one; at most a factor 2 per step). One cold
       engine run at the best width found may find a better basin of the alphas there (the
       continuation follows one basin). (Quasi-Newton steps
       stall here: warm-started engines reach slightly different local optima of the alphas at
       the same width, which makes the profile a noisy function for their line searches;
       alternating the width at fixed alphas with the engine crawls, the alphas tying the width
       to its current value.) The first refinement stays between the
       neighbouring grid widths. With ``ard``, the refinement then continues over one log length
       scale per input feature from the best single width (up to 6 ``max_refine_iter`` engine
       runs), between the grid's narrowest width
       and 100 times its widest (a feature whose length scale runs to the upper bound barely
       matters).
    3. The best evidence of any engine run is returned.

    Parameters
    ----------
    design : callable
        ``design(l, columns=None) -> Phi``: the unit-norm N x M design at length scale(s) ``l``
        (shape (1,) or (P,)), the kernel columns first (on ``centres``), then the bias column if
        ``bias``; or only the given columns of it.
    options : EvidenceOptions
        The engine and its settings: each width's problem is fitted by
        ``fit_problem(problem, options, warm)``, ``warm`` None or the previous fit, whose alphas
        and noise the Gaussian engines start from.
    X : ndarray of shape (N, P)
        Training inputs.
    problem : Problem
        The normalised targets (:class:`bayes_rvm.evidence.problem.Problem`); each width's design is
        given to it by ``problem.with_design(Phi, normalised=True)``, and the gradient refinement
        reads ``problem.targets`` (Gaussian likelihood).
    centres : ndarray of shape (M_kernel, P), optional
        The centres of the kernel columns (default ``X``).
    kernel : {"rbf", "laplacian"}, default="rbf"
    bias : bool, default=True
        Whether the design's last column is a bias.
    ard : bool, default=False
        One length scale per input feature instead of one in all. The search is then made in
        units of each feature's standard deviation (the grid, the bounds, ``path``), so that
        multiplying a feature by a constant multiplies its length scale by it and leaves the
        fit unchanged.
    grid : ndarray, optional
        Start widths (default :func:`default_width_grid`, of ``X`` divided by each feature's
        standard deviation with ``ard``); used from wide to narrow.
    n_starts : int, default=2
        Local maxima of the curve to refine from.
    refine : {"gradient", "bounded"} or None, default="gradient"
        How to refine from the grid maxima: ``"gradient"``, the alternation above (Gaussian
        likelihood: it needs the closed-form gradient); ``"bounded"``, Brent's bounded search
        on the profile evidence over one log width between the neighbouring grid widths, the
        engine warm-started from the last run (any likelihood, e.g. the Laplace evidence of a
        classifier; no ``ard``); None: the best grid width.
    max_refine_iter : int, optional
        Engine runs per refinement: default 5 for one width, 10 with ``ard`` (whose per-feature
        refinement starts from the best single width and needs it found precisely: 5 left the
        test problem's irrelevant feature at 1.4x the relevant one's length scale, 10 at 14x).
    tol : float, default=1e-3
        Stop a refinement when the log width(s) move less than this, or an accepted step gains
        less than ``10 tol`` nats.
    warm_grid : bool, default=True
        Warm-start each grid width from the fit at the wider one (False: cold starts).
    cold_finish : {"best", "each", "none"}, default="best"
        Cold engine runs after the gradient refinements: one at the best width found, one at
        the end of each refinement, or none.

    Returns
    -------
    WidthFit
    """
    stationary_kernel(kernel, purpose="a learned kernel width")
    start = time.perf_counter()
    X = np.asarray(X, dtype=np.float64)
    centres = X if centres is None else np.asarray(centres, dtype=np.float64)
    # Per-feature widths are searched relative to each feature's standard deviation, so that
    # rescaling a feature rescales its length scale and changes nothing else (measured in
    # absolute units, a feature of values near 1e12 set the grid and the bounds of all the
    # others, and their length scales collapsed). Constant features keep unit 1.
    unit = np.ones(1)
    if ard:
        unit = np.std(X, axis=0)
        unit[~(np.isfinite(unit) & (unit > 0))] = 1.0
    grid = default_width_grid(X / unit) if grid is None else np.sort(np.asarray(grid, float))[::-1]
    if grid.ndim != 1 or grid.size < 1 or not np.all(np.isfinite(grid) & (grid > 0)):
        raise ValueError("grid must be a non-empty 1-D array of positive length scales.")
    if refine not in ("gradient", "bounded", None):
        raise ValueError(f"refine must be 'gradient', 'bounded' or None, got {refine!r}.")
    if max_refine_iter is None:
        max_refine_iter = 10 if ard else 5
    if cold_finish not in ("best", "each", "none"):
        raise ValueError(f"cold_finish must be 'best', 'each' or 'none', got {cold_finish!r}.")
    if ard and refine != "gradient":
        raise ValueError("per-feature widths (ard=True) need refine='gradient'.")
    if not isinstance(n_starts, int) or n_starts < 1:
        raise ValueError(f"n_starts must be a positive integer, got {n_starts!r}.")
    search = _Search(
        design, options, X, centres, problem, kernel, centres.shape[0] if bias else -1, unit
    )

    fits, warm = [], None
    for ls in grid:
        fits.append(search.fit_at(np.array([ls]), warm if warm_grid else None)[0])
        warm = fits[-1]
        # Saturated and falling: a fit that keeps nearly every basis function and has less
        # evidence than the wider width before it. Narrower widths keep as many, each a spike
        # on its own input, and only fit more of the noise; their fits are the costliest.
        if (
            len(fits) > 1
            and warm.active.size >= SATURATED * warm.alpha.size
            and warm.log_evidence < fits[-2].log_evidence
        ):
            break
    grid = grid[: len(fits)]
    evid = np.array([f.log_evidence for f in fits])
    path = WidthPath(
        grid.copy(),
        evid,
        np.array([f.active.size for f in fits]),
        # A Laplace (classification) fit has no noise.
        np.array([1.0 / f.beta if hasattr(f, "beta") else np.nan for f in fits]),
    )

    # Local maxima of the curve (the ends count), best first.
    padded = np.r_[-np.inf, evid, -np.inf]
    is_max = (padded[1:-1] >= padded[:-2]) & (padded[1:-1] >= padded[2:])
    maxima = [int(i) for i in np.argsort(-evid) if is_max[i]][:n_starts]
    log_grid = np.log(grid)
    step = math.log(2.0)

    for i in maxima if refine else ():
        hi = log_grid[i - 1] if i > 0 else log_grid[0] + 2 * step
        lo = log_grid[i + 1] if i + 1 < grid.size else log_grid[-1] - 2 * step
        if refine == "gradient":
            log_ls, _ = search.refine(
                [log_grid[i]], fits[i], [(lo, hi)], max_iter=max_refine_iter, step=step, tol=tol
            )
            if cold_finish == "each":
                # The alternation follows one basin of the alphas; a cold start at its end may
                # find a better one.
                search.fit_at(np.exp(log_ls), None)
        else:
            search.refine_bounded(fits[i], lo, hi, max_iter=max_refine_iter, tol=tol)
    if refine == "gradient" and cold_finish == "best":
        search.fit_at(search.best[1], None)
    if refine:
        if ard and X.shape[1] > 1:
            _, ls_best, fit_best, _ = search.best
            x0 = np.full(X.shape[1], math.log(float(ls_best[0])))
            bounds = [(log_grid[-1], log_grid[0] + math.log(100.0))] * X.shape[1]
            search.refine(
                x0, fit_best, bounds, max_iter=6 * max_refine_iter, step=2 * step, tol=tol
            )
    _, ls, fit, Phi = search.best
    ls = ls * unit if ard else ls
    return WidthFit(
        length_scale=ls,
        fit=fit,
        Phi=Phi,
        path=path,
        starts=tuple(float(grid[i]) for i in maxima),
        n_fits=search.n_fits,
        seconds=time.perf_counter() - start,
    )


# -- the default width: the evidence of the same basis under one shared prior precision ----------
#
# The RVM's own evidence, maximised over one alpha per basis function, rewards narrow widths:
# the more basis functions can each be tuned, the better the alphas fit the training targets
# (on Friedman #3 it keeps 239 of 240 basis functions and a noise sd a tenth of the truth). With
# one precision shared by all weights, the same basis is a Gaussian process (covariance
# ``Phi Phi^T / alpha`` plus noise) with two hyperparameters, whose evidence is a smooth function
# of the width that cannot be raised by overfitting; it costs one eigendecomposition per width.

#: The rank tolerance of the classifier's evidence in the default width search, whose Newton
#: steps are r x r: on German (500 rows, gamma 0.002-0.11) 1e-7 moved the evidence by at most
#: 1.5e-3 nats and cut the rank from 462 to 99 at gamma 0.01 and from 500 to 300 at 0.03 (2.7-9x
#: faster); 1e-5 moved it by 0.2 nats.
SEARCH_RANK_TOL = 1e-7
#: Bounds of the shared prior precision of a classifier (separable data drive it to zero).
_ALPHA_MIN, _ALPHA_MAX = 1e-3, 1e6
#: MacKay's rounds only start the search for the maximum.
_MACKAY_TOL = 0.1
#: Largest gradient entry of the log posterior at which the shared-alpha logistic mode is found:
#: the evidence is flat to second order in the mode, and on six problems 1e-8 gave the evidences
#: of the former step-size rule (1e-8 relative) to 1e-14 at its speed; 1e-10 cost up to 1.4x.
_MODE_TOL = 1e-8
#: Most parabolic steps refining the best grid width.
_PARABOLA_STEPS = 8


@one_blas_thread
def maximise_width_shared_ard(
    design: Design,
    X: np.ndarray,
    T: np.ndarray,
    length_scale: np.ndarray,
    *,
    centres: np.ndarray | None = None,
    kernel: str = "rbf",
    bias: bool = True,
    beta: float | None = None,
    max_iter: int = 15,
) -> tuple[np.ndarray, SharedEvidence, int]:
    """One length scale per input feature maximising :func:`shared_evidence`, by L-BFGS-B.

    The gradient is closed-form (:func:`shared_evidence_design_gradient` through
    :func:`design_width_gradient`), one Gram decomposition per evaluation. The search starts
    from ``length_scale`` (one per feature, or one for all) and stays between 1/16 and 100 times
    it in each feature: a feature whose length scale runs to the upper end barely matters.
    Unlike the RVM's own evidence, which grows without bound as the widths narrow (one alpha per
    basis function fits each target, the noise going to 0: on Friedman #3 it kept 239 of 240
    vectors), this evidence has two hyperparameters and a finite maximum.

    Parameters
    ----------
    design : callable
        ``design(l) -> Phi``, the unit-norm design at per-feature length scales ``l`` (P,).
    X : ndarray of shape (N, P)
        Inputs (the rows of ``T``).
    T : ndarray of shape (N,) or (N, D)
        Normalised targets.
    length_scale : ndarray of shape (1,) or (P,)
        The start.
    centres : ndarray of shape (M_kernel, P), optional
        The kernel columns' centres (default ``X``).
    kernel : {"rbf", "laplacian"}, default="rbf"
    bias : bool, default=True
        Whether the design's last column is a bias.
    beta : float, optional
        A fixed noise precision.
    max_iter : int, default=15
        Most L-BFGS-B iterations.

    Returns
    -------
    length_scale : ndarray of shape (P,)
    evidence : SharedEvidence
        At the returned widths.
    n_evaluations : int
    """
    X = np.asarray(X, dtype=np.float64)
    P = X.shape[1]
    centres = X if centres is None else np.asarray(centres, dtype=np.float64)
    if bias:
        centres = np.vstack([centres, np.full((1, P), np.nan)])
    x0 = np.log(np.broadcast_to(np.asarray(length_scale, dtype=np.float64), (P,)))
    seen: dict[bytes, tuple[SharedEvidence, np.ndarray]] = {}

    def objective(log_ls):
        ls = np.exp(log_ls)
        Phi = design(ls)
        ev, G = shared_evidence_design_gradient(Phi, T, beta=beta)
        grad = design_width_gradient(X, centres, Phi, G, ls, kernel=kernel)
        seen[log_ls.tobytes()] = (ev, grad)
        return -ev.log_evidence, -grad

    bounds = [(v - math.log(16.0), v + math.log(100.0)) for v in x0]
    # ftol is relative: 1e-9 of the 1e2-1e3 nats of these evidences. 15 iterations took 20-30
    # evaluations on Friedman #2 and #3 and lost nothing against 40.
    optimize.minimize(
        objective,
        x0,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": max_iter, "ftol": 1e-9, "gtol": 1e-4},
    )
    # The best point evaluated (L-BFGS-B's last iterate is, unless it stopped on a failed search).
    best = max(seen, key=lambda k: seen[k][0].log_evidence)
    log_ls = np.frombuffer(best, dtype=np.float64).copy()
    # A feature the targets ignore has its evidence rising ever more slowly towards long
    # widths, and the search stops wherever that slope falls below its tolerance: rounding
    # moved it by 3% when a feature was rescaled by 1e12. Such features (past 10x the start,
    # still rising) go to the upper bound, where any rescaling puts them, if that loses nothing.
    top = np.array([b[1] for b in bounds])
    far = (log_ls > x0 + math.log(10.0)) & (log_ls < top)
    if far.any():
        trial = np.where(far, top, log_ls)
        objective(trial)
        if seen[trial.tobytes()][0].log_evidence >= seen[best][0].log_evidence:
            best, log_ls = trial.tobytes(), trial
    return np.exp(log_ls), seen[best][0], len(seen)


def shared_laplace_evidence(
    Phi: np.ndarray,
    labels: np.ndarray,
    *,
    max_iter: int = 200,
    tol: float = 1e-4,
    likelihood: str = "bernoulli",
    rank_tol: float = RANK_TOL,
) -> SharedEvidence:
    """Maximise the Laplace evidence of a logistic model with ``w ~ N(0, I / alpha)``.

    For 0/1 labels (or one column per one-vs-rest problem, whose evidences add), the mode of the
    weights is found by Newton steps with backtracking and ``alpha`` re-estimated by MacKay's
    ``alpha = g / ||w||^2`` in turn (``g = M - alpha tr H^-1``); the evidence is
    ``ln p(t | w) - alpha ||w||^2 / 2 + (M / 2) ln alpha - ln |H| / 2`` at the mode, ``H`` the
    negative Hessian. MacKay's update brings ``alpha`` near the maximum, Brent's method on
    ``ln alpha`` (within ``[1e-3, 1e6]``) finds it. The evidence equals the Laplace approximation
    of a Gaussian-process classifier of covariance ``Phi Phi^T / alpha``.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    labels : ndarray of shape (N,) or (N, C)
        0/1 targets (one column per one-vs-rest problem).
    max_iter : int, default=200
        Most rounds of (Newton steps, alpha update) before the final search over ``ln alpha``.
    tol : float, default=1e-4
        Tolerance in ``ln alpha`` (the evidence is flat to second order there).
    likelihood : {"bernoulli", "poisson"}, default="bernoulli"
        The one-output family: ``"poisson"`` takes counts as ``labels`` (log link), the same
        evidence with the Poisson likelihood.
    rank_tol : float, default=1e-12
        Principal directions of ``Phi`` whose eigenvalue is below this fraction of the largest
        are dropped (:data:`SEARCH_RANK_TOL` in the default width search).

    Returns
    -------
    SharedEvidence
    """
    Y = np.asarray(labels, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    # One BLAS thread: NumPy and SciPy each bring their own OpenBLAS, whose idle threads spin
    # while the other library's run, and these small products and factorisations alternate
    # between the two (iris: 16 s with two threads each on two cores, 1.4 s with one).
    with single_blas_thread():
        return _shared_laplace_evidence(
            principal_coordinates(Phi, rank_tol), Y, max_iter, tol, family(likelihood)
        )


def _shared_laplace_evidence(Phi: np.ndarray, Y: np.ndarray, max_iter: int, tol: float, fam):
    # Only the span of Phi matters: in the coordinates of its principal directions,
    # ``Phi w = (U sqrt(s)) (V^T w)`` with ``V^T w ~ N(0, I / alpha)`` again, and the directions
    # Phi does not see add ``(M - r) ln(alpha) / 2 - (M - r) ln(alpha) / 2 = 0`` to the evidence.
    # Smooth kernels have numerically low rank, so the Newton steps are r x r.
    M = Phi.shape[1]
    total, alphas, n_eff = 0.0, [], 0.0
    for t in Y.T:
        mode = _LogisticMode(Phi, t, fam)
        # A few of MacKay's rounds (``alpha = g / ||w||^2``, ``g = M - alpha tr H^-1``) give the
        # search its start (measured within a factor of 1.2 to 30 of the maximum).
        w, a = np.zeros(M), 1.0
        for _ in range(max_iter):
            w, L = mode.newton(w, a, 2)
            g = M - a * _trace_inverse(L)
            # Separable data drive alpha to zero (unbounded weights); the bounds keep the mode
            # finite.
            a_new = min(max(max(g, 1e-8) / max(float(w @ w), 1e-12), _ALPHA_MIN), _ALPHA_MAX)
            done = abs(math.log(a_new / a)) < _MACKAY_TOL
            a = a_new
            if done:
                break
        # MacKay's update treats the curvature at the mode as fixed, so its fixed point is near
        # but not at the maximum of the Laplace evidence, whose exact derivative also carries the
        # mode's shift: the root of that derivative, bracketed around the fixed point, is the
        # maximum (a handful of evaluations, each Newton solve warm-started from the last mode).
        mode.w = w
        log_a = _bracketed_root(mode.slope, math.log(a), tol)
        a = math.exp(log_a)
        total += mode.evidence(log_a)
        alphas.append(a)
        n_eff += M - a * _trace_inverse(mode.L)
    alpha = alphas[0] if len(alphas) == 1 else np.array(alphas)
    return SharedEvidence(total, alpha, float("nan"), n_eff)


def _bracketed_root(slope: Callable[[float], float], x0: float, tol: float) -> float:
    """Root of a decreasing ``slope`` near ``x0`` within ``[ln ALPHA_MIN, ln ALPHA_MAX]``: steps
    of 0.5 out from ``x0`` until the sign changes, then Brent's method; an end where it does
    not."""
    lo_end, hi_end = math.log(_ALPHA_MIN), math.log(_ALPHA_MAX)
    x0 = min(max(x0, lo_end), hi_end)
    # Brent's method starts by evaluating both ends of the bracket, which the steps out did:
    # kept, they are 2 of the 8-9 slopes (each an r x r solve) a width costs.
    slope = functools.cache(slope)
    s0 = slope(x0)
    direction = 1.0 if s0 > 0 else -1.0
    x, s = x0, s0
    while s * direction > 0:
        x_next = min(max(x + 0.5 * direction, lo_end), hi_end)
        if x_next == x:
            return x
        x0, s0 = x, s
        x, s = x_next, slope(x_next)
    if s == 0.0:
        return x
    lo, hi = sorted((x0, x))
    return optimize.brentq(slope, lo, hi, xtol=tol)


def _trace_inverse(L: np.ndarray) -> float:
    """``tr(H^-1)`` from the Cholesky factor of ``H``."""
    return float(np.sum(solve_lower(L, np.eye(L.shape[0])) ** 2))


class _LogisticMode:
    """Mode and Laplace evidence of a logistic (or Poisson) model with ``w ~ N(0, I / alpha)``;
    the mode found last is kept (``w``, ``L``) to warm-start the next.

    The mode is the Laplace engines' (:func:`~bayes_rvm.evidence.mode.newton_mode`) with one
    alpha shared by every weight: one Newton solver in the package.
    """

    def __init__(self, Phi: np.ndarray, t: np.ndarray, fam: Family = BERNOULLI):
        self.Phi, self.T, self.family = Phi, t[:, None], fam
        self.eye = np.eye(Phi.shape[1])
        self.w = np.zeros(Phi.shape[1])
        self.L = self.eye

    def newton(self, w: np.ndarray, a: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
        """At most ``steps`` Newton steps towards the mode; the mode and the Hessian factor."""
        post = self.mode(w, a, steps)
        return post.mean[:, 0], post.chol

    def mode(self, w: np.ndarray, a: float, steps: int) -> LaplacePosterior:
        alpha = np.full(w.size, a)
        return newton_mode(self.Phi, self.T, alpha, w[:, None], self.family.name, _MODE_TOL, steps)

    def evidence(self, log_a: float) -> float:
        """The Laplace evidence at ``alpha = exp(log_a)``, from the last mode."""
        post = self.mode(self.w, math.exp(log_a), 50)
        self.w, self.L = post.mean[:, 0], post.chol
        return post.log_evidence

    def slope(self, log_a: float) -> float:
        """``d evidence / d ln alpha`` at the mode: with ``H = Phi^T W Phi + alpha I``,

            alpha (M / alpha - ||w||^2 - tr(H^-1 dH/dalpha)) / 2,
            tr(H^-1 dH/dalpha) = tr(H^-1) + sum_n W'_n (Phi dw/dalpha)_n (Phi H^-1 Phi^T)_nn,

        ``dw/dalpha = -H^-1 w`` and ``W'`` the derivative of ``W = p (1 - p)`` in the latent.
        """
        a = math.exp(log_a)
        post = self.mode(self.w, a, 50)
        w, L = post.mean[:, 0], post.chol
        self.w, self.L = w, L
        Linv = solve_lower(L, self.eye)
        B = Linv @ self.Phi.T  # columns L^-1 phi_n
        shift = self.Phi @ -(Linv.T @ (Linv @ w))
        dW = self.family.curvature_slope(post.mu[:, 0])
        trace = float(np.sum(Linv**2)) + float(np.sum(dW * shift * np.einsum("kn,kn->n", B, B)))
        return 0.5 * a * (w.size / a - float(w @ w) - trace)


def _parabolic_maximum(
    value: Callable[[float], float], bracket: tuple[float, float, float], xtol: float
) -> float:
    """Maximise a smooth ``value`` by successive parabolic interpolation within a bracket.

    ``bracket`` is ``a < b < c`` with ``value(b)`` at least ``value(a)`` and ``value(c)`` (the
    grid's best point and its neighbours, whose values ``value`` has cached), so the vertex of
    the parabola through the three lies in ``[a, c]``; each step moves the bracket onto the best
    three points and the search stops after a step shorter than ``xtol / 2`` (or once the
    bracket is narrower than ``2 xtol``). On a smooth curve this takes 2-4 evaluations where
    Brent's bounded search, which starts from golden sections and does not reuse the grid's
    values, took 7. Returns the best point.
    """
    a, b, c = bracket
    fa, fb, fc = value(a), value(b), value(c)
    for _ in range(_PARABOLA_STEPS):
        den = (b - a) * (fb - fc) - (b - c) * (fb - fa)
        # Flat (to rounding): b is as good as any; not finite: an end's evidence is -inf.
        if not (0.0 < den < math.inf):
            break
        u = b - 0.5 * ((b - a) ** 2 * (fb - fc) - (b - c) ** 2 * (fb - fa)) / den
        if not math.isfinite(u):
            break
        # Not on a bracket end: they are known.
        u = min(max(u, a + 0.25 * xtol), c - 0.25 * xtol)
        step = abs(u - b)
        if step < 1e-3 * xtol:  # b is the parabola's maximum
            break
        fu = value(u)
        if fu > fb:
            a, fa, c, fc = (b, fb, c, fc) if u > b else (a, fa, b, fb)
            b, fb = u, fu
        else:
            a, fa, c, fc = (a, fa, u, fu) if u > b else (u, fu, c, fc)
        if step < 0.5 * xtol or c - a < 2.0 * xtol:
            break
    return b


@one_blas_thread
def select_width_shared(
    design: Design,
    X: np.ndarray,
    criterion: Callable[[np.ndarray], SharedEvidence],
    *,
    grid: np.ndarray | None = None,
    max_extend: int = 3,
    xtol: float = 0.02,
    penalty: float = 0.0,
    stop_drop: float = math.inf,
) -> tuple[np.ndarray, WidthPath, int]:
    """The width that maximises a shared-precision evidence: a grid, then parabolic steps.

    The curve is smooth in the log width (two hyperparameters, each re-optimised), so a coarse
    grid brackets its best maximum and successive parabolic interpolation between the
    neighbouring grid widths (:func:`_parabolic_maximum`) refines it. A maximum at an end of the
    grid extends the grid by a factor 2 that way (at most ``max_extend`` times).

    Parameters
    ----------
    design : callable
        ``design(l) -> Phi``, the unit-norm design at length scale ``l`` (shape (1,)).
    X : ndarray of shape (N, P)
        Training inputs (for the default grid).
    criterion : callable
        ``criterion(Phi) -> SharedEvidence``: :func:`shared_evidence` or
        :func:`shared_laplace_evidence` bound to the targets.
    grid : ndarray, optional
        Start widths (default: :func:`default_width_grid` but its narrowest, which one more end
        extension reaches when the evidence still rises towards it).
    max_extend : int, default=3
    xtol : float, default=0.02
        Tolerance of the search in log width (2%): the refinement stops after a step shorter
        than half of it.
    penalty : float, default=0.0
        A log prior over the width, ``-penalty * n_effective(l)``: the search maximises
        ``log_evidence - penalty * n_effective``, the posterior mode of the width under a prior
        that gives each well-determined parameter a cost of ``penalty`` nats. With 0 it
        maximises the evidence itself. The path keeps the evidence, unpenalised.
    stop_drop : float, default=inf
        Stop narrowing the grid once a width's value (penalised) is this many nats below the
        best so far: the narrow widths are the costly ones (a Gram matrix of full rank), and a
        second maximum beyond such a fall is not looked for.

    Returns
    -------
    length_scale : ndarray of shape (1,)
    path : WidthPath
        Every width evaluated, wide to narrow.
    n_evaluations : int
    """
    # The narrowest default width (1/16 of the median distance) is where a classifier's evidence
    # costs most (a Gram matrix of full rank: 0.5 s of Banana's 1.2 s) and it was never the
    # maximum on the benchmark problems; one more extension still goes there (and as far) when
    # the evidence rises towards it.
    if grid is None:
        grid, max_extend = default_width_grid(X)[:-1], max_extend + 1
    grid = np.sort(np.asarray(grid, float))[::-1]
    if grid.ndim != 1 or grid.size < 1 or not np.all(np.isfinite(grid) & (grid > 0)):
        raise ValueError("grid must be a non-empty 1-D array of positive length scales.")
    if not (math.isfinite(penalty) and penalty >= 0.0):
        raise ValueError(f"penalty must be a finite number >= 0, got {penalty!r}.")
    if not stop_drop > 0.0:
        raise ValueError(f"stop_drop must be a number > 0, got {stop_drop!r}.")
    seen: dict[float, SharedEvidence] = {}

    def value(log_ls: float) -> float:
        if log_ls not in seen:
            seen[log_ls] = criterion(design(np.array([math.exp(log_ls)])))
        return seen[log_ls].log_evidence - penalty * seen[log_ls].n_effective

    logs, vals = [], []
    for v in np.log(grid):
        logs.append(v)
        vals.append(value(v))
        if vals[-1] < max(vals) - stop_drop:
            break
    for _ in range(max_extend):
        best = int(np.argmax(vals))
        if best == 0 and len(logs) > 1:
            logs.insert(0, logs[0] + math.log(2.0))
            vals.insert(0, value(logs[0]))
        elif best == len(logs) - 1 and len(logs) > 1:
            logs.append(logs[-1] - math.log(2.0))
            vals.append(value(logs[-1]))
        else:
            break
    best = int(np.argmax(vals))
    if 0 < best < len(logs) - 1:
        _parabolic_maximum(value, (logs[best + 1], logs[best], logs[best - 1]), xtol)
    order = sorted(seen, reverse=True)
    chosen = max(seen, key=value)
    path = WidthPath(
        np.exp(order),
        np.array([seen[k].log_evidence for k in order]),
        np.array([round(seen[k].n_effective) for k in order], dtype=int),
        np.array([1.0 / seen[k].beta for k in order]),
        criterion="evidence_shared",
    )
    return np.array([math.exp(chosen)]), path, len(seen)
