"""Laplace fits on a design too large for memory: rounds of reweighted sufficient statistics.

A :class:`~bayes_rvm.evidence.design.ChunkedDesign` builds its unit-norm columns ``chunk_rows``
rows at a time (:func:`chunked_design`: one pass finds the column norms), and keeps them between
passes while they fit in :data:`CACHE_BYTES`. A pass costs about ``N M^2`` flops, so a fit on a
million rows can afford a handful of them, not one per sequential step.

Bernoulli and Poisson fits (:func:`fit_laplace_chunked`) therefore alternate two things, as
Tipping (2001, section 4) describes the Laplace RVM:

1. *linearise*: at the posterior mode ``w*`` of the current ``alpha``, the likelihood's IRLS
   weights ``B = diag(b_n)`` and working targets ``t_hat = Phi w* + B^-1 (t - y)`` make a
   Gaussian problem whose posterior has the Laplace approximation's mean and covariance;
   one pass over the rows gives its sufficient statistics ``Phi' B Phi``, ``Phi' B t_hat`` and
   ``t_hat' B t_hat`` (the plain statistics of the rows scaled by ``sqrt(b_n)``);
2. *re-estimate*: the Gaussian sequential engine (:func:`~bayes_rvm.evidence.fit_sequential`
   on those statistics, noise precision fixed at 1) maximises that problem's evidence over
   ``alpha``, adding and deleting basis functions with no further pass over the rows; then
   Newton's method finds the mode at the new ``alpha`` on the active columns, started from that
   problem's posterior mean (an IRLS step) with its precision as a chord Hessian.

At a fixed point the mode is the mean of the Gaussian problem built at it, and ``alpha``
maximises the evidence of that problem: the stationarity conditions of the Laplace evidence
with the weights ``B`` held at the mode (the dependence of ``B`` on ``alpha`` through the mode,
a third derivative of the likelihood, is left out, as in Tipping 2001 and SparseBayes). The
reported mode and log evidence are the Laplace ones, computed exactly at the end. On 50,000 rows
of the two-dimensional benchmark of ``benchmarks/bench_rvc_scale.py`` three rounds (about 5 s)
reached a Laplace log evidence 183 nats above the in-memory sequential engine's (51 s).

The rounds stop when the active set repeats and no ``log alpha`` moves by more than
``sqrt(tol)``, or when the Laplace log evidence moves by less than ``evidence_tol`` (relative) in
a round; a round that lowers it by more ends the fit at the best round (on nearly separable
classes the weights grow without bound and a Gaussian fit can go astray). The second test is the
one that ends fits on a million rows: there the Gaussian problems are so ill-conditioned (a
weighted Gram matrix of condition 5e19 on the benchmark) that the sequential engine crawls along
a ridge of nearly equal evidence until ``max_iter``; each Gaussian fit is then a partial step
that the next round goes on from (see the "Large data" page for the figures).

Free columns enter the Gaussian problems with the Gaussian engine's free prior (as good as flat)
and the mode with the Laplace one (``FREE_LATENT_SD``): with the rows a chunked fit has, the two
give the same intercept to many digits.

The softmax's classes share one ``alpha`` per column but each has its own weights ``B``, which no
single Gaussian problem holds: its chunked fit runs the Laplace sequential engine in memory on a
deterministic subset of :func:`subset_rows` rows, then on the chunked design from the alphas it
found (each step a pass over the rows; the deletion probes, dozens of passes each, are skipped).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.basis.statistics import SufficientStatistics
from bayes_rvm.evidence.design import ChunkedDesign
from bayes_rvm.evidence.laplace import (
    STOPPED,
    active_mode,
    laplace_mackay_engine,
    laplace_result,
    laplace_sequential_engine,
)
from bayes_rvm.evidence.options import EvidenceOptions, merge_options
from bayes_rvm.evidence.problem import Problem, ProblemView
from bayes_rvm.evidence.record import Recorder
from bayes_rvm.evidence.result import EvidenceFit
from bayes_rvm.evidence.sequential import sequential_engine
from bayes_rvm.evidence.single_basis import log_hyperprior
from bayes_rvm.families import Family, family
from bayes_rvm.threads import all_blas_threads

__all__ = [
    "CACHE_BYTES",
    "MAX_ROUNDS",
    "SUBSET_ROWS",
    "chunked_design",
    "chunked_engine",
    "column_norms",
    "fit_laplace_chunked",
    "relinearised_statistics",
    "subset_rows",
]

#: Rounds (a pass over the rows and a Gaussian fit each) before a Bernoulli or Poisson fit stops
#: with a ConvergenceWarning. The benchmark's fits take 4-8.
MAX_ROUNDS = 50
#: Smallest IRLS weight a row keeps: a row whose mean is within this of 0 or 1 (Bernoulli) adds
#: nothing measurable to ``Phi' B Phi`` either way, and its working target's
#: ``(t - y) / sqrt(b)`` stays finite.
_B_FLOOR = 1e-12
#: Rows of the in-memory subset fit that starts a chunked softmax one (at most a quarter of them).
SUBSET_ROWS = 50_000
#: Memory a chunked design may keep between passes (see
#: :class:`~bayes_rvm.evidence.design.ChunkedDesign`): the whole design up to this size.
CACHE_BYTES = 4.5 * 2**30


def column_norms(design_blocks) -> np.ndarray:
    """Column norms over every row block ``(rows, P)`` of ``design_blocks``, as
    :func:`bayes_rvm.evidence.problem.normalise_columns` computes them (1 for a zero column).

    The sum of squares is kept relative to the largest magnitude seen so far, rescaled when a
    larger one comes (LAPACK's ``dnrm2``), so kernel values of 1e160 or 1e-200 neither overflow
    nor underflow.
    """
    peak = ssq = None
    for _, P in design_blocks:
        if not np.all(np.isfinite(P)):
            raise ValueError("the kernel produced non-finite values in a block of rows.")
        p = np.maximum(P.max(axis=0, initial=0.0), -P.min(axis=0, initial=0.0))
        if peak is None:
            peak, ssq = np.zeros_like(p), np.zeros_like(p)
        new = np.maximum(peak, p)
        with np.errstate(divide="ignore", invalid="ignore"):
            ssq = np.where(new > 0, ssq * np.square(np.where(new > 0, peak / new, 0.0)), 0.0)
            scaled = P / np.where(new > 0, new, 1.0)
        ssq += np.einsum("ij,ij->j", scaled, scaled)
        peak = new
    norms = peak * np.sqrt(ssq)
    norms[norms == 0] = 1.0
    return norms


def chunked_design(
    block: Callable,
    n_rows: int,
    n_columns: int,
    *,
    chunk_rows: int,
    cache_bytes=CACHE_BYTES,
    progress=False,
) -> ChunkedDesign:
    """The unit-norm :class:`~bayes_rvm.evidence.design.ChunkedDesign` of ``block(rows,
    columns)`` (the design's rows in its own units, see there): one pass finds the norms.
    ``progress`` (True, False or "auto") reports the rows of each pass on stderr."""
    kw = {"chunk_rows": chunk_rows, "cache_bytes": cache_bytes, "progress": progress}
    raw = ChunkedDesign(block, n_rows, np.ones(n_columns), **kw)
    norms = column_norms(raw.blocks())
    design = ChunkedDesign(block, n_rows, norms, **kw)
    design.counter = raw.counter
    if "blocks" in raw.store:
        # The norms pass kept the blocks: normalised in place, they serve every later pass.
        for _, P in raw.store["blocks"]:
            P /= norms
        design.store = raw.store
    return design


def subset_rows(n_rows: int, size: int = SUBSET_ROWS) -> np.ndarray:
    """The rows of the subset fit: ``min(size, n_rows // 4)`` of them, sorted, drawn with a fixed
    seed (the same data give the same fit)."""
    n = max(min(int(size), n_rows // 4), 1)
    return np.sort(np.random.default_rng(0).choice(n_rows, n, replace=False))


def relinearised_statistics(
    design: ChunkedDesign, active: np.ndarray, W: np.ndarray, T: np.ndarray, fam: Family
) -> SufficientStatistics:
    """The statistics of the Gaussian problem that the likelihood makes at the weights ``W`` of
    the columns ``active``, in one pass over the rows.

    With ``eta = Phi_active W``, mean ``y``, IRLS weights ``b`` and working targets
    ``t_hat = eta + (t - y) / b``: ``gram = Phi' B Phi``, ``cross = Phi' B t_hat`` and ``tt =
    t_hat' B t_hat``, the plain statistics of the rows scaled by ``sqrt(b)`` (so ``cross`` is
    ``Phi' (B eta + t - y)``, free of the division).
    """
    total = SufficientStatistics.zeros(design.shape[1])
    with all_blas_threads():
        for rows, P in design.blocks():
            eta = P[:, active] @ W
            Y = fam.mean(eta)
            root = np.sqrt(np.maximum(fam.curvature(Y), _B_FLOOR))
            total = total + SufficientStatistics.from_design(
                P * root, root * eta + (T[rows] - Y) / root
            )
    return total


def fit_laplace_chunked(
    design: ChunkedDesign,
    T,
    *,
    solver: str = "sequential",
    options: EvidenceOptions | None = None,
    **settings,
) -> EvidenceFit:
    """A Laplace fit on a chunked design (see the module's docstring for the algorithm).

    Parameters
    ----------
    design : ChunkedDesign
        Unit-norm columns (:func:`chunked_design`).
    T : array-like of shape (N,) or (N, C)
        Targets (see :func:`~bayes_rvm.evidence.posterior_mode`).
    solver : {"sequential", "mackay"}
        ``"sequential"``: Bernoulli and Poisson by rounds of reweighted statistics, each round a
        pass over the rows and a Gaussian sequential fit; the softmax by the Laplace sequential
        engine from a subset fit. ``"mackay"`` runs MacKay's engine on all rows from the start
        (every candidate column active: O(N M^2) a pass).
    options, **settings
        As for :func:`~bayes_rvm.evidence.fit_laplace_sequential`. The rounds read
        ``alpha_prior``, ``alpha_init`` (the first Gaussian fit's start), ``free``,
        ``candidates``, ``tol`` (converged when the active set repeats
        and no ``log alpha`` moves by more than ``sqrt(tol)`` in a round; the Gaussian fits
        converge to ``tol``), ``evidence_tol`` (also converged when the Laplace log evidence
        moves by less than this, relative, in a round), ``max_iter`` (steps of each Gaussian
        fit; one that reaches it is a partial step, not a warning), ``inner_mode_tol``,
        ``mode_tol``, ``mode_max_iter``, ``callback`` (after each round) and ``progress`` (a
        line per round, beside the design's own lines per pass, see :func:`chunked_design`); the
        softmax path starts from an ``alpha_init`` given here instead of the subset fit.

    Returns
    -------
    EvidenceFit
        The fit on all rows, with the exact Laplace mode and log evidence; for the rounds,
        ``actions`` is ``"init"`` then ``"round k: K active"`` for each round and ``trace`` the
        Laplace log evidence (plus log hyperprior) after each. ``design.counter`` holds the
        passes.
    """
    opt = merge_options(options, {**settings, "solver": solver})
    return chunked_engine(Problem.given(design, T, likelihood=opt.likelihood or "bernoulli"), opt)


def chunked_engine(
    problem: Problem, options: EvidenceOptions, warm: EvidenceFit | None = None
) -> EvidenceFit:
    """A Laplace fit of a problem on a chunked design (:func:`fit_laplace_chunked`): the engine
    contract. ``warm`` is not used: a Laplace fit starts cold."""
    if options.solver == "mackay":
        return laplace_mackay_engine(problem, options)
    if problem.likelihood != "softmax":
        return _fit_rounds(problem.view(options, "laplace_sequential"))
    design, opt = problem.design, options
    if opt.alpha_init is None:
        rows = subset_rows(design.shape[0])
        # The subset's columns keep the norms of all rows, so its weights and alphas are on the
        # scale of the full problem's and start it where they stand.
        subset = Problem.given(design.rows(rows), problem.targets[rows], likelihood="softmax")
        start = laplace_sequential_engine(subset, opt)
        if np.isfinite(start.alpha).any():
            opt = dataclasses.replace(opt, alpha_init=start.alpha)
    return laplace_sequential_engine(problem, dataclasses.replace(opt, probe_deletions=False))


def _newton_start(stats, gauss, active, alpha):
    """Newton's method's start after a Gaussian fit: its posterior mean, an IRLS step from the
    last mode at the new ``alpha``, and its precision ``Phi' B Phi + A`` (``B`` of the last
    mode), as a chord Hessian."""
    W0 = np.zeros((active.size, 1))
    W0[np.searchsorted(active, gauss.active)] = gauss.posterior.mean[:, :1]
    H0 = stats.gram[np.ix_(active, active)] + np.diag(alpha[active])
    return W0, lambda design: (H0, False)


def _fit_rounds(problem: ProblemView) -> EvidenceFit:
    """Bernoulli or Poisson: linearise at the mode, re-estimate on the statistics, repeat."""
    design, opt = problem.Phi, problem.options
    fam = family(opt.likelihood)
    alpha = np.full(problem.shape[1], np.inf)
    if problem.alpha_init is not None:
        alpha = np.where(problem.allowed, problem.alpha_init, np.inf)
    alpha[problem.free] = problem.free_alpha()
    active, post = problem.free, None
    inner = {
        "alpha_prior": opt.alpha_prior,
        "free": problem.free,
        "candidates": opt.candidates,
        "tol": opt.tol,
        "max_iter": opt.max_iter,
        "fixed_beta": True,
        "beta_init": 1.0,
        # A Gaussian fit that crawls along a ridge until max_iter takes most of a round.
        "progress": opt.progress,
    }
    best = None
    converged, reason = False, f"reached {MAX_ROUNDS} rounds"
    # The passes and the Newton steps on N rows are BLAS-3 on large blocks: every thread (the
    # Gaussian fits on M x M statistics keep to one, fit_sequential's own guard).
    with (
        all_blas_threads(),
        Recorder("fit_laplace_chunked", opt.callback, opt.progress, "rounds", "lines") as rec,
    ):
        rec.start("init")
        for k in range(1, MAX_ROUNDS + 1):
            W = np.zeros((active.size, 1)) if post is None else post.mean
            stats = relinearised_statistics(design, active, W, problem.T, fam)
            start = alpha if np.isfinite(alpha[problem.allowed]).any() else None
            with warnings.catch_warnings():
                # A Gaussian fit cut short by max_iter is a partial step: the next round goes on
                # from it, and the rounds' own test decides convergence.
                warnings.simplefilter("ignore", ConvergenceWarning)
                gauss = sequential_engine(
                    Problem.given(stats, None), EvidenceOptions(alpha_init=start, **inner)
                )
            new = gauss.alpha.copy()
            new[problem.free] = alpha[problem.free]
            new_active = np.flatnonzero(np.isfinite(new))
            W0, chord = _newton_start(stats, gauss, new_active, new)
            post = active_mode(problem, new_active, new, W0, opt.inner_mode_tol, chord)
            objective = post.log_evidence + log_hyperprior(new[new_active], None, opt.alpha_prior)
            step = np.abs(np.log(new[active] / alpha[active]))
            moved = float(np.max(step, initial=0.0)) if np.array_equal(new_active, active) else None
            gain = objective - rec.trace[-1] if rec.trace else np.inf
            alpha, active = new, new_active
            if best is None or objective > best[0]:
                best = (objective, alpha, active, post)
            state = {"n_active": active.size, "beta": None, "active": active, "alpha": alpha}
            if rec(f"round {k}: {active.size} active", objective, gain, lambda s=state: s):
                converged, reason = True, STOPPED
                break
            if moved is not None and moved <= np.sqrt(opt.tol):
                converged, reason = True, f"alpha moved by {moved:.2g} in round {k}"
                break
            if abs(gain) <= opt.evidence_tol * (1.0 + abs(objective)):
                converged, reason = True, f"the log evidence moved by {gain:.2g} in round {k}"
                break
            if gain < 0:
                # The linearisation misled (nearly separable classes, where the weights grow
                # without bound, send the next Gaussian fit astray): the best round stands.
                converged = True
                reason = f"round {k} lowered the log evidence by {-gain:.3g}; the best round stands"
                break
        if best[0] > objective:
            _, alpha, active, post = best
        # Polished by chord steps from the last round's Hessian: each costs a gradient, O(N K),
        # where a Newton step on these nearly collinear columns costs O(N K^2) and converges
        # no faster.
        exact = (post.hessian, True)
        outcome = (k, converged, reason, "fit_laplace_chunked")
        return laplace_result(problem, alpha, active, post.mean, rec, outcome, lambda d: exact)
