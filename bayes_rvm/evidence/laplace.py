"""Sparse Bayesian learning for non-Gaussian likelihoods by the Laplace approximation: the engines.

The mode finder and the Laplace approximation at fixed ``alpha`` live in
:mod:`bayes_rvm.evidence.mode` (re-exported here: :func:`posterior_mode`,
:func:`laplace_posterior`, :class:`LaplacePosterior`), the likelihood formulas in
:mod:`bayes_rvm.families`.

The likelihoods are Bernoulli-logit (binary classification), softmax (multinomial classification
with C classes) and Poisson-log (counts). With weights ``W`` (K x C; C = 1 for Bernoulli and
Poisson), latent ``eta = Phi W`` and the ARD prior ``w_ic ~ N(0, 1/alpha_i)`` -- one ``alpha`` per
basis function, shared by the C classes so that the whole classifier has one relevance set -- the
log posterior is

    Psi(W) = sum_n log p(t_n | eta_n) - 1/2 sum_i alpha_i sum_c W_ic^2,

its gradient ``Phi^T (T - Y) - A W`` (``Y`` the mean of the likelihood: the sigmoid, the softmax
or the rate) and its negative Hessian

    H = Phi^T B Phi + A                           (Bernoulli: B = diag(y(1-y)); Poisson: diag(y))
    H[c, c'] = Phi^T diag(y_c (delta_cc' - y_c')) Phi + delta_cc' A          (softmax blocks)

The mode ``W*`` is found by Newton's method (IRLS) with step halving; the Laplace approximation of
the evidence is

    ln p(T | alpha) ~ ln p(T | W*) - 1/2 sum_i alpha_i |W*_i|^2 + C/2 sum_i ln alpha_i - 1/2 ln|H|,

and ``gamma_ic = 1 - alpha_i (H^-1)_ic,ic``. Two engines maximise it over ``alpha``:

* :func:`fit_laplace_mackay`: MacKay re-estimation ``alpha_i = sum_c gamma_ic / sum_c W_ic^2``
  with pruning (Tipping 2001), for small problems;
* :func:`fit_laplace_sequential`: Tipping and Faul's (2003) add / re-estimate / delete steps on the
  Gaussian problem linearised at the mode, with noise precision ``B`` and targets
  ``t_hat = Phi w + B^-1 (t - y)``. At the mode ``Q_m = phi_m^T (t - y)`` exactly and
  ``S_m = phi_m^T B phi_m - phi_m^T B Phi Sigma Phi^T B phi_m``. Every step is checked on the
  Laplace evidence itself and undone if it lowered it (the linearisation can mislead), so for
  Bernoulli and Poisson the objective never decreases. For the softmax, ``S`` and ``Q`` are
  computed per class with the class's diagonal Hessian block and the shared ``alpha_i`` maximises
  ``sum_c l(alpha; s_ic, q_ic)``; these statistics only *propose* additions and deletions, since
  leaving out the cross-class curvature misleads re-estimation: the active alphas take MacKay's
  update from the exact coupled Hessian instead. The mode, the evidence and the reported Hessian
  are always exact.

Layout of the multinomial results: ``mean`` is K x C; ``chol`` is the lower Cholesky factor of the
KC x KC Hessian ``H`` with the weights ordered *class-major*: entry ``c * K + i`` is weight ``W_ic``
(so block ``(c, c')`` of ``H`` is the K x K slice ``[c*K:(c+1)*K, c'*K:(c'+1)*K]``).

The Gamma(a, b) hyperprior on ``alpha`` (over ``log alpha``, as in
:mod:`bayes_rvm.evidence.gaussian`) gives the MAP-II updates
``alpha_i = (sum_c gamma_ic + 2a) / (sum_c W_ic^2 + 2b)`` and ``(nu/2, nu/2)`` the Student-t prior.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.evidence.design import DenseDesign
from bayes_rvm.evidence.gaussian import KEPT_ONE, MacKayStop, keep_one
from bayes_rvm.evidence.log_evidence import WARN_SKIP, cholesky, solve_lower
from bayes_rvm.evidence.mode import (
    LaplacePosterior,
    laplace_posterior,
    newton_mode,
    posterior_mode,
    warn_mode,
)
from bayes_rvm.evidence.options import EvidenceOptions, default_likelihood, merge_options
from bayes_rvm.evidence.problem import Problem
from bayes_rvm.evidence.record import Recorder
from bayes_rvm.evidence.result import (
    EvidenceFit,
    LaplaceWeights,
    moderated_probabilities,
    moderation,
)
from bayes_rvm.evidence.single_basis import log_gain, log_hyperprior, optimal_alpha
from bayes_rvm.evidence.softmax_steps import bordered_hessian, shortlist, softmax_reestimation
from bayes_rvm.families import family
from bayes_rvm.threads import single_blas_thread

__all__ = [
    "LaplacePosterior",
    "fit_laplace_mackay",
    "fit_laplace_sequential",
    "laplace_mackay_engine",
    "laplace_posterior",
    "laplace_sequential_engine",
    "moderated_probabilities",
    "moderation",
    "posterior_mode",
]

#: A candidate whose ``S`` fell below this fraction of ``phi^T B phi`` lies numerically in the span
#: of the active columns: its factors are rounding noise, so it is not offered.
_SPAN_RTOL = 1e-9
#: Batch re-estimations in a row that refresh only the active columns' statistics.
_PARTIAL_STEPS = 8
#: Halvings of a re-estimation that lowered the evidence before it is given up.
_RETRIES = 1
#: Deletion probes per round (the active columns of largest alpha), accepted probes in all, and
#: the most active weights (columns x classes) probed. Measured over 33 fits (Ripley's subsets at
#: gamma 4, 5 and 8, all of Ripley at its default width, the three-class problem): accepted probes
#: were among the 10 largest alphas (5 missed the full-Ripley one). A screen costs
#: O(N (KC)^2 + (KC)^3) a MacKay step, a second at KC = 100 and N = 600 on a 2-core machine.
_PROBES, _PROBE_ROUNDS, _PROBE_MAX_WEIGHTS = 10, 20, 100
#: MacKay updates at most in a deletion probe's screen (loose: the sequential steps refine). 10
#: missed two of the Ripley subsets' probes, 20 and 30 found the same; with 20 a fit with probes
#: costs 1.3-2x one without (Ripley, Pima, Banana).
_SCREEN_STEPS = 20
#: Softmax screening: between full passes over the design, a step's statistics are computed
#: for the active columns and the _SCREEN_SIZE candidates of largest ``max_c q_c^2 / s_c`` under
#: the last full pass's ``s`` and the current ``q`` (exact, one O(N M C) product); a full pass
#: is made at least every _SCREEN_EVERY steps and before the run may stop, and only designs of
#: at least _SCREEN_GAIN (K + _SCREEN_SIZE) columns are screened. A full pass costs O(N M K C):
#: on USPS digits it was half of the fit's time at N = 2000. Screening changes the greedy path
#: (an addition may come a few steps later), not the stopping rule: on 2000 digits the fit made
#: 32 full passes where the full path made 406, and stopped 2.9 nats lower (-470.9 against
#: -468.0, 61 vectors against 65; 1000 digits: 1.0 lower), where the full path itself moves by
#: 1.0 nats on 1000 digits between inner_mode_tol 1e-6 and 1e-5.
_SCREEN_SIZE, _SCREEN_EVERY, _SCREEN_GAIN = 64, 10, 8
#: The reason of a fit whose callback asked it to stop.
STOPPED = "stopped by callback"


# ---------------------------------------------------------------------------------------------
# engines
# ---------------------------------------------------------------------------------------------
def given_problem(engine: str, Phi, T, options: EvidenceOptions | None, settings: dict):
    """``(problem, options)`` of a convenience call ``fit_laplace_*(Phi, T, options,
    **settings)``: the problem as given, of the options' likelihood (or the engine's)."""
    opt = merge_options(options, settings)
    likelihood = opt.likelihood or default_likelihood(engine)
    return Problem.given(Phi, T, likelihood=likelihood), opt


def active_mode(problem, active, alpha: np.ndarray, W: np.ndarray, tol: float, start=None):
    """Posterior mode of the columns ``active`` at ``alpha`` (all M), warm-started from ``W``;
    ``start(design)`` gives :func:`newton_mode`'s starting Hessian, if any."""
    opt = problem.options
    design = problem.Phi.take(active)
    return newton_mode(
        design,
        problem.T,
        alpha[active],
        W,
        opt.likelihood,
        tol,
        opt.mode_max_iter,
        None if start is None else start(design),
        progress=opt.progress,
    )


def laplace_result(
    problem, alpha, active, W, record: Recorder, outcome: tuple, start=None
) -> EvidenceFit:
    """Polish the mode at ``mode_tol`` and assemble the fit; ``outcome`` is
    ``(n_iter, converged, reason, engine name)``, ``start`` as for :func:`active_mode`."""
    n_iter, converged, reason, name = outcome
    opt = problem.options
    post = active_mode(problem, active, alpha, W, opt.mode_tol, start)
    if not post.converged:
        warn_mode(post)
    if not converged:
        warnings.warn(
            f"{name} did not converge in {n_iter} iterations; returning the last estimate. "
            "Increase max_iter or loosen tol.",
            ConvergenceWarning,
            skip_file_prefixes=WARN_SKIP,
        )
    return EvidenceFit(
        alpha=alpha,
        active=np.asarray(active, dtype=np.intp),
        posterior=LaplaceWeights(post.mean, post.chol, opt.likelihood, post.grad_norm),
        log_evidence=post.log_evidence,
        trace=np.asarray(record.trace, dtype=np.float64),
        n_iter=n_iter,
        converged=converged,
        reason=reason,
        actions=tuple(record.actions),
    )


def fit_laplace_mackay(
    Phi: np.ndarray, T, *, options: EvidenceOptions | None = None, **settings
) -> EvidenceFit:
    """Maximise the Laplace evidence by MacKay re-estimation with pruning (Tipping 2001).

    Each iteration finds the posterior mode (warm-started from the previous one), then sets
    ``alpha_i = (sum_c gamma_ic + 2a) / (sum_c W_ic^2 + 2b)`` and prunes ``alpha_i >
    threshold_alpha``. Costs O((K C)^3) per iteration with all M columns active at the start:
    use :func:`fit_laplace_sequential` beyond a few hundred basis functions.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix, float64 (not copied).
    T : array-like of shape (N,) or (N, C)
        Targets (see :func:`posterior_mode`).
    options : EvidenceOptions, optional
        Settings (see :class:`~bayes_rvm.evidence.EvidenceOptions`); this engine reads
        ``likelihood`` (default ``"bernoulli"``), ``alpha_prior``, ``alpha_init`` (default 1.0),
        ``free``, ``candidates``, ``threshold_alpha``, ``tol``, ``evidence_tol`` (default 1e-12),
        ``max_iter``, ``mode_tol``, ``mode_max_iter``, ``callback`` and ``progress``.
    **settings
        Fields of ``options`` to override.

    Returns
    -------
    EvidenceFit
        With a :class:`~bayes_rvm.evidence.LaplaceWeights` posterior.
    """
    return laplace_mackay_engine(*given_problem("laplace_mackay", Phi, T, options, settings))


def laplace_mackay_engine(
    problem: Problem, options: EvidenceOptions, warm: EvidenceFit | None = None
) -> EvidenceFit:
    """MacKay's Laplace re-estimation (:func:`fit_laplace_mackay`) on ``problem``: the engine
    contract. ``warm`` is not used: a Laplace fit starts cold."""
    view = problem.view(options, "laplace_mackay")
    opt = view.options
    M, C = view.Phi.shape[1], view.T.shape[1]
    alpha = view.start_all()
    keep = np.isfinite(alpha)
    is_free = np.zeros(M, dtype=bool)
    is_free[view.free] = True
    W = np.zeros((int(keep.sum()), C))
    converged, reason = False, f"reached max_iter={opt.max_iter}"
    should_stop = MacKayStop(opt.tol, opt.evidence_tol)
    n_iter, action = 0, "init"
    with Recorder("fit_laplace_mackay", opt.callback, opt.progress) as rec:
        for n_iter in range(1, opt.max_iter + 1):  # noqa: B007 - reported after the loop
            idx = np.flatnonzero(keep)
            post = active_mode(view, idx, alpha, W, opt.mode_tol)
            if not post.converged:
                warn_mode(post)
            objective = post.log_evidence + log_hyperprior(alpha[idx], None, opt.alpha_prior)
            if rec(action, objective, 0.0, functools.partial(_snapshot, idx, alpha)):
                converged, reason = True, STOPPED
                W = post.mean
                break
            new, change, pruned = _mackay_alphas(post, alpha[idx], is_free[idx], opt)
            if keep_one(new, pruned, opt.threshold_alpha):
                converged, reason = True, KEPT_ONE
            alpha[idx] = np.where(pruned, np.inf, new)
            keep[idx[pruned]] = False
            W = post.mean[~pruned]
            action = "reestimate all" + (f", prune {idx[pruned].tolist()}" if pruned.any() else "")
            if converged:
                break
            stop = should_stop(rec.trace, change, pruned)
            if stop is not None:
                converged, reason = True, stop
                break
    outcome = (n_iter, converged, reason, "Laplace MacKay re-estimation")
    return laplace_result(view, alpha, np.flatnonzero(keep), W, rec, outcome)


def _snapshot(idx: np.ndarray, alpha: np.ndarray) -> dict:
    return {"n_active": idx.size, "beta": None, "active": idx.copy(), "alpha": alpha[idx].copy()}


def _mackay_alphas(post: LaplacePosterior, alpha_a, is_free, opt):
    """MacKay's update of the active alphas: ``(new, |change of log alpha|, pruned)``."""
    a, b = opt.alpha_prior
    gamma = post.gamma(alpha_a).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        new = (gamma + 2 * a) / (np.sum(post.mean**2, axis=1) + 2 * b)
    new = np.where(np.isfinite(new) & (new > 0), new, np.inf)
    new[is_free] = alpha_a[is_free]
    with np.errstate(invalid="ignore"):
        change = np.abs(np.log(new) - np.log(alpha_a))
    return new, change, (new >= opt.threshold_alpha) & ~is_free


@dataclass
class _Steps:
    """Candidate steps at a mode, over all M columns (or over the active ones in a partial pass).

    ``add``, ``delete``, ``reest``: boolean masks of the columns whose best step is an addition,
    a deletion or a re-estimation; ``gain``: the gain of that step; ``new_alpha``: the optimal
    alphas; ``dlog``: ``|change of log alpha|`` of the re-estimations (compressed to ``reest``).
    """

    add: np.ndarray
    delete: np.ndarray
    reest: np.ndarray
    gain: np.ndarray
    new_alpha: np.ndarray
    dlog: np.ndarray
    #: Softmax: computed for the active columns and a shortlist only (:meth:`_LaplaceSequential.
    #: screened_statistics`), so they cannot end the run.
    screened: bool = False
    #: ``(s, fits)`` of every column (a full pass): the leave-one-out ``s`` (M x C) and whether
    #: the column stands out of the active span; what the next screens rank candidates by.
    factors: tuple | None = None

    def embedded(self, cols: np.ndarray, M: int) -> _Steps:
        """Statistics of the columns ``cols`` only, placed in arrays over all M columns."""
        out = _Steps(
            add=np.zeros(M, dtype=bool),
            delete=np.zeros(M, dtype=bool),
            reest=np.zeros(M, dtype=bool),
            gain=np.full(M, -np.inf),
            new_alpha=np.full(M, np.inf),
            dlog=self.dlog,
        )
        out.add[cols], out.delete[cols], out.reest[cols] = self.add, self.delete, self.reest
        out.gain[cols], out.new_alpha[cols] = self.gain, self.new_alpha
        return out


def _linearised_factors(Phi, post: LaplacePosterior, act, alpha, Tl):
    """Leave-one-out factors ``s``, ``q`` (M x C) of every column at the mode, and ``S``, ``B``.

    ``Tl = (T, likelihood)``. At the mode ``Q_m = phi_m^T (t - y)`` and
    ``S_m = phi_m^T B phi_m - phi_m^T B Phi_a H^-1 Phi_a^T B phi_m`` per class (the class's
    diagonal curvature block); active columns remove their own contribution.
    """
    T, likelihood = Tl
    M = Phi.shape[1]
    C = T.shape[1]
    K = act.size
    B = family(likelihood).curvature(post.mu)
    G, S = Phi.statistics(np.asarray(act, dtype=np.intp), B, T - post.mu)
    Q = G[:, C * K :]
    diag_BB = S.copy()
    sigma = np.empty((K, C))  # diag(H^-1) per class block
    for c in range(C):
        blk = slice(c * K, (c + 1) * K)
        Lc = post.chol if C == 1 else cholesky(post.hessian[blk, blk])
        # (M, K) C-ordered right-hand side: its transpose is what LAPACK wants, uncopied.
        Gc = np.ascontiguousarray(G[:, blk])
        V = solve_lower(Lc, Gc.T)
        S[:, c] -= np.einsum("ij,ij->j", V, V)
        Linv = solve_lower(Lc, np.eye(K))
        sigma[:, c] = np.einsum("ij,ij->j", Linv, Linv)
    is_act = np.zeros(M, dtype=bool)
    is_act[act] = True
    # Leave-one-out factors of the active columns, from Sigma_mm = (H^-1)_mm:
    # s = alpha S / (alpha - S) = 1 / Sigma_mm - alpha and q = Q / (alpha Sigma_mm). Through
    # alpha - S they cancel catastrophically for a well-determined weight (S = alpha - alpha^2
    # Sigma_mm, formed as phi'B phi minus a sum of squares): at 2e5 rows with 500 centres s came
    # out negative and the gains NaN ("invalid value in log1p").
    s, q = S.copy(), Q.copy()
    a = alpha[act][:, None]
    # Rounding of the difference alone can leave it <= 0 (s << alpha): a floor at its ulp.
    s[act] = np.maximum(1.0 / sigma - a, a * np.finfo(float).eps)
    q[act] = Q[act] / (a * sigma)
    return s, q, is_act, np.all(S > _SPAN_RTOL * diag_BB, axis=1)


def fit_laplace_sequential(
    Phi: np.ndarray, T, *, options: EvidenceOptions | None = None, **settings
) -> EvidenceFit:
    """Maximise the Laplace evidence by the sequential algorithm of Tipping and Faul (2003).

    One basis function at a time is added, re-estimated or deleted, choosing the step of largest
    gain in the evidence of the Gaussian problem linearised at the current mode; the mode is then
    found again by Newton's method warm-started from the previous one. The model starts from one
    basis function (or the free ones) and only the active ones enter any K x K (or KC x KC)
    algebra.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix, float64; neither copied nor modified (each step reads it once, in row
        blocks, so no other N x M array is ever formed).
    T : array-like of shape (N,) or (N, C)
        Targets (see :func:`posterior_mode`).
    options : EvidenceOptions, optional
        Settings (see :class:`~bayes_rvm.evidence.EvidenceOptions`); this engine reads
        ``likelihood`` (default ``"bernoulli"``), ``alpha_prior``, ``alpha_init`` (default: the
        column whose single-column gain is largest, or the free columns), ``free``,
        ``candidates``, ``threshold_alpha`` (the upper end of the shared-alpha search), ``tol``,
        ``max_iter``, ``priority``, ``batch_reestimate`` (when the best step is a
        re-estimation, move every active ``alpha`` to its single-alpha optimum at once; False is
        the textbook one-at-a-time algorithm), ``gain_tol`` (also converged when no addition or
        deletion pays and all the re-estimations together would gain less than
        ``gain_tol * (1 + |objective|)``), ``evidence_tol`` (default 1e-6; softmax only: also
        converged when no addition or deletion pays and a MacKay step of the active alphas
        gained less than that, relative), ``mode_tol``, ``inner_mode_tol`` (the modes between
        steps: a warm start makes them cheap and a loose tolerance there does not move the
        optimum, which is polished to ``mode_tol`` at the end), ``mode_max_iter``,
        ``probe_deletions`` (at convergence, look for a better optimum one active column away;
        see Notes), ``callback`` and ``progress``.
    **settings
        Fields of ``options`` to override.

    Returns
    -------
    EvidenceFit
        With a :class:`~bayes_rvm.evidence.LaplaceWeights` posterior; ``trace`` holds the Laplace
        log evidence (plus log hyperprior) at the mode after each accepted step, ``actions``
        every step tried (an undone one is followed by its ``"undo ..."``, and has no objective).

    Notes
    -----
    Every step is checked on the Laplace evidence itself and undone if it lowered it (the
    linearisation can mislead), so for Bernoulli and Poisson the objective never decreases.

    The steps judge a deletion with the other alphas held fixed, so two nearly collinear columns
    keep each other in. At convergence, with ``probe_deletions``, each of the (up to 10) active
    columns of largest alpha is left out in turn and the others re-estimated by MacKay's rule on
    the active columns alone; the first such state whose evidence beats the optimum found
    becomes the start of further steps (``actions`` records ``"probe: delete j"``). An active
    set is never probed into twice, and models of more than 100 active weights (columns times
    classes) are not probed: there a screen costs seconds.
    """
    return laplace_sequential_engine(
        *given_problem("laplace_sequential", Phi, T, options, settings)
    )


def laplace_sequential_engine(
    problem: Problem, options: EvidenceOptions, warm: EvidenceFit | None = None
) -> EvidenceFit:
    """Tipping and Faul's Laplace sequential algorithm (:func:`fit_laplace_sequential`) on
    ``problem``: the engine contract. ``warm`` is not used: a Laplace fit starts cold."""
    view = problem.view(options, "laplace_sequential")
    opt = view.options
    with (
        single_blas_thread(),
        Recorder("fit_laplace_sequential", opt.callback, opt.progress) as rec,
    ):
        engine = _LaplaceSequential(view, rec)
        engine.run()
        for _ in range(_PROBE_ROUNDS if opt.probe_deletions else 0):
            # A fit stopped by its callback or its budget is left where it stopped.
            if not (engine.converged and engine.reason != STOPPED and engine.probe_deletion()):
                break
            engine.run()
    return engine.result()


class _LaplaceSequential:
    """State of the Laplace sequential engine: model, last accepted state, and its bookkeeping.

    ``saved`` is the last accepted state (:class:`_Accepted`); a step that lowers the Laplace
    evidence is undone to it and its key (a column, ``"all"`` or ``"mackay"``) banned until a
    step other than one column's re-estimation is accepted. ``partial`` marks statistics
    refreshed for the active columns only.
    """

    def __init__(self, problem, record: Recorder) -> None:
        self.problem, self.opt, self.record = problem, problem.options, record
        Phi, T = problem.Phi, problem.T
        _, M, C = problem.shape
        self.M, self.C = M, C
        self.Tl = (T, self.opt.likelihood)
        self.is_free = np.zeros(M, dtype=bool)
        self.is_free[problem.free] = True
        self.alpha = np.full(M, np.inf)
        self.alpha[problem.free] = problem.free_alpha()
        self.active = [int(j) for j in problem.free]
        if problem.alpha_init is not None:
            start = np.flatnonzero(np.isfinite(problem.alpha_init) & ~self.is_free)
            self.alpha[start] = problem.alpha_init[start]
            self.active += [int(j) for j in start]
            first = ",".join(str(j) for j in start)
        elif problem.free.size:
            first = ""
        else:
            first = str(self._first_column(Phi, T))
        record.start(f"init {first}".strip())
        self.W = np.zeros((len(self.active), C))
        self.saved = None
        self.stats: _Steps | None = None
        self.banned: set = set()
        self.tries: dict = {}
        self.last_key = None
        self.partial = self.was_reest = self.stale = False
        self.n_partial = 0
        self.n_iter = 0
        # Softmax screening: the step of the last full pass and its ``(s, fits)``.
        self.last_full, self.screen_basis = 0, None
        # Deletion probes: the active sets probed from or into, and where the run since began.
        self.visited: set[frozenset] = set()
        self.probe_start = 0
        self.converged, self.reason = False, f"reached max_iter={self.opt.max_iter}"

    def _first_column(self, Phi, T) -> int:
        # Statistics of the empty model (eta = 0) choose the first column.
        N, C = T.shape
        fam = family(self.opt.likelihood)
        Y0 = fam.mean(np.zeros((N, C)))
        B0 = fam.curvature(Y0)
        Q0, S0 = Phi.statistics(np.empty(0, dtype=np.intp), B0, T - Y0)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(self.problem.allowed, np.sum(Q0 * Q0 / S0, axis=1), -np.inf)
        first = int(np.argmax(score))
        a0, _ = optimal_alpha(
            S0[first : first + 1],
            Q0[first : first + 1] ** 2,
            prior=self.opt.alpha_prior,
            per_class=True,
            alpha_max=self.opt.threshold_alpha,
        )
        self.alpha[first] = a0[0] if np.isfinite(a0[0]) else float(np.mean(S0[first]))
        self.active.append(first)
        return first

    # --- the main loop ----------------------------------------------------------------------

    def run(self) -> None:
        self.converged, self.reason = False, f"reached max_iter={self.opt.max_iter}"
        for n_iter in range(self.n_iter + 1, self.opt.max_iter + 1):
            self.n_iter = n_iter
            if self.evaluate():
                self.converged, self.reason = True, STOPPED
                break
            gain = self.usable_gains()
            if gain is None:
                continue  # a partial pass had nothing to offer: look at every column again
            if self.stats.screened and self.screen_ends(gain):
                self.refresh_full()
                gain = self.usable_gains()
            if self.finished(gain):
                break
            pick = self.choose(gain)
            j = int(np.argmax(pick))
            st = self.stats
            if self.C > 1 and not (np.isfinite(pick[j]) and (st.add[j] or st.delete[j])):
                if "mackay" in self.banned or not st.reest.any():
                    self.converged, self.reason = True, "no step raises the evidence"
                    break
                self.mackay_step()
                continue
            if not np.isfinite(pick[j]):
                # Bans that outlived accepted steps are retried once at this state first.
                if self.partial or self.stale:
                    self.full_pass_next()
                    continue
                self.converged = True
                self.reason = (
                    "no step raises the evidence" if self.banned else "no step has a positive gain"
                )
                break
            self.apply(j)
        else:
            # The last step of the budget was never evaluated: return the last accepted state.
            if self.saved is not None:
                self.active, self.alpha, self.W = self.saved.active, self.saved.alpha, self.saved.W

    def probe_deletion(self) -> bool:
        """From an optimum, move to a better one without one of the active columns, if any.

        The steps judge a deletion with the other alphas held where they are, so two nearly
        collinear columns keep each other in: deleting either alone loses evidence, while
        re-estimating the other after the deletion gains more (on Ripley's data such pairs cost
        up to 1.9 nats and one to three extra relevance vectors, and make the posterior over
        their weights bimodal for MCMC). Each of the :data:`_PROBES` active columns of largest
        alpha is left out in turn and the rest re-estimated by MacKay's rule on the active
        columns alone (:func:`_reestimate_subset`, no pass over ``Phi``); the first whose
        objective beats the best of the run since the last probe by more than ``gain_tol``
        (relative) becomes the state the steps go on from. Active sets already probed from or
        into are skipped, so a softmax fit, whose MacKay steps may lower the objective, cannot
        cycle through one deletion.

        Returns True when a probe was taken.
        """
        opt, act = self.opt, np.asarray(self.active, dtype=np.intp)
        self.visited.add(frozenset(act.tolist()))
        # No budget left to go on from a probe, or a model too large to screen cheaply.
        if self.n_iter >= opt.max_iter or act.size < 2 or act.size * self.C > _PROBE_MAX_WEIGHTS:
            return False
        # The best objective of the run: a softmax fit's MacKay steps may have lowered it since.
        best = max(self.record.trace[self.probe_start :])
        margin = opt.gain_tol * (1.0 + abs(best))
        probes = [k for k in act[np.argsort(-self.alpha[act])] if not self.is_free[k]]
        for j in probes[:_PROBES]:
            sub = act[act != j]
            if frozenset(sub.tolist()) in self.visited:
                continue
            W = np.delete(self.W, self.active.index(int(j)), axis=0)
            keep, trial, post = _reestimate_subset(self.problem, sub, self.alpha[sub], W)
            objective = post.log_evidence + log_hyperprior(trial[keep], None, opt.alpha_prior)
            if objective > best + margin and frozenset(keep.tolist()) not in self.visited:
                self.active, self.alpha, self.W = [int(k) for k in keep], trial, post.mean
                self.saved, self.last_key, self.partial, self.was_reest = None, None, False, False
                self.banned.clear()
                self.tries.clear()
                self.record.step(f"probe: delete {j}")
                self.probe_start = len(self.record.trace)
                self.visited.add(frozenset(self.active))
                return True
        return False

    def evaluate(self) -> bool:
        """Mode and evidence after the last step: accept it (new statistics) or undo it.

        Returns True when the callback asks to stop.
        """
        opt, act = self.opt, np.asarray(self.active, dtype=np.intp)
        post = active_mode(
            self.problem, act, self.alpha, self.W, opt.inner_mode_tol, self.start_hessian(act)
        )
        objective = post.log_evidence + log_hyperprior(self.alpha[act], None, opt.alpha_prior)
        trace = self.record.trace
        worse = self.saved is not None and objective < trace[-1] - 1e-10 * (1.0 + abs(trace[-1]))
        if worse and self.last_key != "mackay":
            self.undo()
            return False
        self.W = post.mean
        stop = self.record.objective(objective, 0.0, self.snapshot)
        # One column's re-estimation hardly moves the others' linearised optima, so those the
        # Laplace evidence rejected stay banned after it (``stale``: retried once before the
        # run may stop) and are cleared by any other accepted step. Clearing them after every
        # step retried each rejected column after every accepted one: a Banana fold at width
        # 0.22 spent 6364 of its 7016 steps on undone re-estimations (8.0 s; 1.5 s kept, the
        # same evidence to 1e-3; 42 fits of Ripley, Pima and Banana folds: 1.5x faster, summed
        # evidence 3.6 higher).
        if isinstance(self.last_key, int) and self.was_reest:
            self.tries.pop(self.last_key, None)
            self.stale = bool(self.banned)
        elif (
            self.last_key == "mackay"
            and self.saved is not None
            and self.saved.active == act.tolist()
        ):
            # A softmax MacKay step is accepted even when it gains nothing; clearing the bans
            # after it when it pruned no column retried the same rejected additions forever
            # (an iris fold at width 0.15: add 56, undo, add 46, undo, MacKay, ... for all
            # 10,000 steps at a flat evidence). With the bans kept, the next MacKay step's gain
            # decides convergence (evidence_tol).
            self.stale = bool(self.banned)
        else:
            self.banned.clear()
            self.tries.clear()
            self.stale = False
        # After a re-estimation only the active columns' statistics are refreshed (O(N K^2)
        # instead of a pass over Phi), for up to _PARTIAL_STEPS steps in a row: additions and
        # deletions, and convergence, are decided on full passes.
        self.partial = self.C == 1 and self.was_reest and self.n_partial < _PARTIAL_STEPS
        if self.partial:
            self.n_partial += 1
            K = act.size
            sub = self.statistics(
                self.problem.Phi.take(act),
                post,
                np.arange(K),
                self.alpha[act],
                np.ones(K, dtype=bool),
                self.is_free[act],
            )
            self.stats = sub.embedded(act, self.M)
        else:
            self.n_partial = 0
            screen = self.C > 1 and self.saved is not None and self.screen_basis is not None
            # Screening saves a factor of about M / (K + _SCREEN_SIZE) on a pass; below
            # _SCREEN_GAIN the full passes are cheap, and their exact path is kept.
            screen &= self.M >= _SCREEN_GAIN * (act.size + _SCREEN_SIZE)
            if screen and self.n_iter - self.last_full < _SCREEN_EVERY:
                self.stats = self.screened_statistics(post, act)
            else:
                self.stats = self.full_statistics(post, act)
        self.saved = _Accepted(self.active[:], self.alpha.copy(), self.W, self.stats, post)
        return stop

    def start_hessian(self, act: np.ndarray):
        """Softmax: :func:`newton_mode`'s starting Hessian for the columns ``act`` from the last
        accepted mode's (a callable of the design, or None).

        Exact when the step only added columns (their weights start at zero, so the latent
        values are those of the accepted mode) or moved alphas; after a removal, the removed
        weights moved the latent values, and it is a close stand-in for the chord steps.
        """
        saved = self.saved
        if self.C == 1 or saved is None:
            return None

        def start(design):
            if not isinstance(design, DenseDesign):
                return None
            post = saved.post
            return bordered_hessian(
                post, (saved.active, saved.alpha), act, design.Phi, self.alpha[act]
            )

        return start

    def full_statistics(self, post, act) -> _Steps:
        """Statistics of every column (one pass over the design)."""
        st = self.statistics(
            self.problem.Phi, post, act, self.alpha, self.problem.allowed, self.is_free
        )
        self.last_full, self.screen_basis = self.n_iter, st.factors
        return st

    def screened_statistics(self, post, act) -> _Steps:
        """Softmax: statistics of the active columns and a shortlist of candidates.

        The candidates are ranked by their gain under the last full pass's ``s`` and the current
        ``q = phi^T (t - y)``; the _SCREEN_SIZE best get exact statistics, the rest none (their
        gains are -inf until the next full pass).
        """
        s_old, fits = self.screen_basis
        T, _ = self.Tl
        cand = self.problem.allowed & fits & ~self.is_free
        cand[act] = False
        Q = self.problem.Phi.gradient(T - post.mu)
        short = shortlist(s_old, Q, cand, _SCREEN_SIZE)
        cols = np.concatenate([act, short])
        sub = self.statistics(
            self.problem.Phi.take(cols),
            post,
            np.arange(act.size),
            self.alpha[cols],
            np.ones(cols.size, dtype=bool),
            self.is_free[cols],
        )
        out = sub.embedded(cols, self.M)
        out.screened = True
        return out

    def screen_ends(self, gain: np.ndarray) -> bool:
        """Screened statistics offer no addition or deletion, and the run would stop: only a
        full pass may say so."""
        st = self.stats
        if (np.isfinite(gain) & (st.add | st.delete)).any():
            return False
        stops = self.stop_reason(gain, screened=False) is not None
        return stops or "mackay" in self.banned or not st.reest.any()

    def refresh_full(self) -> None:
        """Replace screened statistics by a full pass at the same (accepted) state."""
        saved = self.saved
        self.stats = self.full_statistics(saved.post, np.asarray(saved.active, dtype=np.intp))
        self.saved = dataclasses.replace(saved, stats=self.stats)

    def undo(self) -> None:
        """The linearised gain was wrong about the Laplace evidence: back to the saved state.

        Then the next best step is tried instead, which keeps the objective monotone and rules
        out cycles. A re-estimation is retried with its log-alpha move halved, up to _RETRIES
        times.
        """
        saved, key = self.saved, self.last_key
        self.active, self.alpha, self.W = saved.active[:], saved.alpha.copy(), saved.W
        self.stats = saved.stats
        self.tries[key] = self.tries.get(key, 0) + 1
        retry = isinstance(key, int) and self.stats.reest[key]
        if not retry or self.tries[key] > _RETRIES:
            self.banned.add(key)
        self.record.step(f"undo {self.record.actions[-1]}")

    def full_pass_next(self) -> None:
        self.last_key, self.saved = None, None
        self.record.trace.pop()

    def usable_gains(self) -> np.ndarray | None:
        """Gains worth a step (others -inf), or None when a partial pass must become full."""
        st, trace = self.stats, self.record.trace
        if self.partial and (not st.reest.any() or bool(np.all(st.dlog < self.opt.tol))):
            self.full_pass_next()
            return None
        gain = st.gain.copy()
        # Gains under the linearisation are approximate: steps promising less than gain_tol
        # (relative) are not worth a pass over Phi, and near the optimum their sign is noise.
        # "Not above", so that a NaN gain is no step either: np.argmax picks a NaN, which `run`
        # read as "no step has a positive gain". When the active factors cancelled (before they
        # came from diag(H^-1)), that ended the chunked RVC at 2e5 rows after 229 steps, 192
        # nats below where the full run stops: its speed at 10^6 rows came from that early stop.
        gain[~(gain > self.opt.gain_tol * (1.0 + abs(trace[-1])))] = -np.inf
        gain[[k for k in self.banned if isinstance(k, int)]] = -np.inf
        return gain

    def finished(self, gain: np.ndarray) -> bool:
        """Converged: nothing structural pays and the re-estimations have settled or stalled."""
        reason = self.stop_reason(gain)
        if reason is not None:
            self.converged, self.reason = True, reason
        return reason is not None

    def stop_reason(self, gain: np.ndarray, screened: bool | None = None) -> str | None:
        """Why the run has converged, or None; ``screened=False``: were the statistics full."""
        st, opt, trace = self.stats, self.opt, self.record.trace
        structural = np.isfinite(gain) & (st.add | st.delete)
        if structural.any() or self.partial or (st.screened if screened is None else screened):
            return None
        # Bans are retried before the run stops, except after a softmax MacKay step, which keeps
        # them (evaluate): its stalled evidence then ends the run.
        if self.banned and not (self.C > 1 and self.last_key == "mackay"):
            return None
        if bool(np.all(st.dlog < opt.tol)):
            return "no addition or deletion pays; every log alpha settled"
        scale = 1.0 + abs(trace[-1])
        if self.C > 1:
            stalled = (
                self.last_key == "mackay"
                and len(trace) > 1
                and abs(trace[-1] - trace[-2]) < opt.evidence_tol * scale
            )
            tol_used = opt.evidence_tol
        else:
            stalled = float(np.sum(gain[st.reest & np.isfinite(gain)])) < opt.gain_tol * scale
            tol_used = opt.gain_tol
        if stalled:
            return f"no addition or deletion pays; re-estimation gain < {tol_used:g}"
        return None

    def choose(self, gain: np.ndarray) -> np.ndarray:
        st, priority = self.stats, self.opt.priority
        if priority == "delete" and np.isfinite(gain[st.delete]).any():
            return np.where(st.delete, gain, -np.inf)
        if priority == "add" and np.isfinite(gain[st.add]).any():
            return np.where(st.add, gain, -np.inf)
        return gain

    def apply(self, j: int) -> None:
        """Add, delete or re-estimate column ``j`` (evaluated on the next :meth:`evaluate`)."""
        st, C = self.stats, self.C
        self.last_key = j
        self.was_reest = bool(st.reest[j]) and not (st.delete[j] or st.add[j])
        if st.delete[j]:
            pos = self.active.index(j)
            self.active.pop(pos)
            self.W = np.delete(self.W, pos, axis=0)
            self.alpha[j] = np.inf
            action = f"delete {j}"
        elif st.add[j]:
            self.active.append(j)
            self.alpha[j] = st.new_alpha[j]
            self.W = np.vstack([self.W, np.zeros((1, C))])
            action = f"add {j}"
        elif self.opt.batch_reestimate and "all" not in self.banned:
            # Every active alpha moves to its own optimum at once: each step costs a pass over
            # Phi, and one-at-a-time re-estimation spends most steps on small moves.
            self.alpha[st.reest] = st.new_alpha[st.reest]
            self.last_key = "all"
            action = "reestimate all"
        else:
            shrink = 0.5 ** self.tries.get(j, 0)
            self.alpha[j] = self.alpha[j] * (st.new_alpha[j] / self.alpha[j]) ** shrink
            action = f"reestimate {j}"
        self.record.step(action)

    def mackay_step(self) -> None:
        """Softmax: MacKay's update of every active alpha from the exact coupled Hessian."""
        st = self.stats
        self.alpha[st.reest] = st.new_alpha[st.reest]
        # Columns whose MacKay alpha passed the threshold leave with the same step.
        gone = [k for k in self.active if not np.isfinite(st.new_alpha[k])]
        if len(gone) == len(self.active):
            gone = []
        if gone:
            keep_rows = [p for p, k in enumerate(self.active) if k not in gone]
            self.W = self.W[keep_rows]
            self.active = [self.active[p] for p in keep_rows]
            self.alpha[gone] = np.inf
        self.last_key = "mackay"
        self.record.step("reestimate all (MacKay)" + (f", prune {gone}" if gone else ""))

    def snapshot(self) -> dict:
        act = np.asarray(self.active, dtype=np.intp)
        return {"n_active": act.size, "beta": None, "active": act, "alpha": self.alpha[act].copy()}

    # --- statistics -------------------------------------------------------------------------

    def statistics(self, Phi, post, act, alpha, cand, is_free) -> _Steps:
        """Candidate steps at the current mode: masks, gains and optimal alphas of every column."""
        (a, b), thr = self.opt.alpha_prior, self.opt.threshold_alpha
        M, C, K = Phi.shape[1], self.C, act.size
        s, q, is_act, in_span_ok = _linearised_factors(Phi, post, act, alpha, self.Tl)
        alpha_a = alpha[act]
        ok = (cand & in_span_ok) | is_act
        # A free column's leave-one-out factors are meaningless (its alpha is ~0): neutral ones.
        ok &= ~is_free
        s_ok = np.where(ok[:, None], s, 1.0)
        q2_ok = np.where(ok[:, None], q * q, 0.0)
        prior = (a, b)
        new_alpha, new_gain = optimal_alpha(s_ok, q2_ok, prior=prior, per_class=True, alpha_max=thr)
        cur_gain = np.zeros(M)
        cur_gain[act] = log_gain(s_ok[act], q2_ok[act], alpha_a, 1, prior)
        add = ok & ~is_act & np.isfinite(new_alpha)
        delete = is_act & ~np.isfinite(new_alpha)
        if K == 1:
            delete[:] = False
        reest = is_act & np.isfinite(new_alpha)
        gain = np.full(M, -np.inf)
        gain[add] = new_gain[add]
        gain[delete] = -cur_gain[delete]
        gain[reest] = new_gain[reest] - cur_gain[reest]
        steps = _Steps(add, delete, reest, gain, new_alpha, np.empty(0), factors=(s, in_span_ok))
        if C > 1:
            softmax_reestimation(steps, post, act, alpha_a, (prior, thr))
        if is_free.any():
            # Free columns stay as they are: never added (they are in), deleted or re-estimated.
            for mask in (steps.add, steps.delete, steps.reest):
                mask &= ~is_free
            steps.gain[is_free] = -np.inf
            steps.new_alpha[is_free] = alpha[is_free]
        with np.errstate(divide="ignore", invalid="ignore"):
            steps.dlog = np.abs(np.log(steps.new_alpha[steps.reest]) - np.log(alpha[steps.reest]))
        return steps

    def result(self) -> EvidenceFit:
        order = np.argsort(np.asarray(self.active))
        active = np.sort(np.asarray(self.active))
        outcome = (self.n_iter, self.converged, self.reason, "Laplace sequential optimisation")
        return laplace_result(self.problem, self.alpha, active, self.W[order], self.record, outcome)


def _reestimate_subset(problem, columns: np.ndarray, alpha: np.ndarray, W: np.ndarray):
    """MacKay's re-estimation on ``columns`` of the design alone, warm-started at ``alpha``, ``W``.

    A screen for :meth:`_LaplaceSequential.probe_deletion`, with loose tolerances (the sequential
    steps go on from what it finds): at most :data:`_SCREEN_STEPS` updates, stopping once no log
    alpha moves by more than 0.01. Returns ``(kept, alphas, post)``: the columns still in the
    model, the alphas of all M columns (``inf`` for the others) and the posterior at the mode.
    """
    opt = problem.options
    full = np.full(problem.Phi.shape[1], np.inf)
    full[columns] = alpha
    is_free = np.isin(columns, problem.free)
    for _ in range(_SCREEN_STEPS):
        post = active_mode(problem, columns, full, W, opt.inner_mode_tol)
        new, change, pruned = _mackay_alphas(post, full[columns], is_free, opt)
        keep_one(new, pruned, opt.threshold_alpha)
        full[columns] = np.where(pruned, np.inf, new)
        W, columns, is_free = post.mean[~pruned], columns[~pruned], is_free[~pruned]
        if not pruned.any() and bool(np.all(change[np.isfinite(change)] < 1e-2)):
            break
    return columns, full, active_mode(problem, columns, full, W, opt.inner_mode_tol)


@dataclass(frozen=True)
class _Accepted:
    """The last accepted state of the Laplace sequential engine and its step statistics."""

    active: list
    alpha: np.ndarray
    W: np.ndarray
    stats: _Steps
    post: LaplacePosterior
