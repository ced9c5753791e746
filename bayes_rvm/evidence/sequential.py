"""Fast sequential type-II maximisation of the evidence (Tipping and Faul, 2003).

The engine starts from one basis function and, one step at a time, adds a candidate, re-estimates
the prior precision ``alpha_i`` of a basis function already in the model, or deletes one, choosing
the step that increases the objective (log evidence plus log hyperprior) most. For a single
``alpha_i`` with all other hyperparameters fixed the objective is, up to a constant,

    l(alpha_i) = 1/2 [D log alpha_i - D log(alpha_i + s_i) + |q_i|^2 / (alpha_i + s_i)]
                 + a log alpha_i - b alpha_i

where ``s_i`` and ``q_i`` (one per output) are the sparsity and quality factors of basis ``i``
measured against the model without it (Tipping and Faul, eqs. 19-22; D outputs share
``alpha_i``), and ``(a, b)`` is the optional Gamma hyperprior of
:mod:`bayes_rvm.evidence.gaussian`. Without a hyperprior its maximum is
``alpha_i = D s_i^2 / (|q_i|^2 - D s_i)`` when ``|q_i|^2 > D s_i`` and ``alpha_i = inf`` (delete)
otherwise. With one, the stationary points are the positive roots of the cubic

    -2b alpha^3 + (2a - 4bs) alpha^2 + (Ds - |q|^2 + 4as - 2bs^2) alpha + (D + 2a) s^2 = 0,

solved exactly; the best local maximum is compared with leaving the basis out.

Only the posterior covariance ``Sigma`` of the K active weights (K x K), the cross
products ``Phi_a^T Phi`` (K x M), and ``S_m``, ``Q_m`` for all M columns are kept; each step updates
them by rank-one formulas in O(K M) (an addition also costs one product ``Phi^T phi_i``, O(N M)).
Nothing of size N x N or N x M beyond the caller's design matrix is ever formed, so a design of M
candidate centres (M << N) scales linearly in N. The noise precision is re-estimated on a schedule
by a safeguarded fixed-point step that is accepted only when it increases the objective; every noise
step refactorises the posterior from scratch, and so does a guard that watches the residual
``H Sigma - I`` of the updated column, so rounding errors of the rank-one updates cannot accumulate.

Once nothing is worth adding or deleting, single re-estimations are coordinate ascent, which
crawls when the alphas are coupled; the engine then tries one joint (saddle-free) Newton step on
all log alphas, ``"reestimate all"`` in the actions, kept only if the exact objective rises.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.evidence.gaussian import gaussian_posterior
from bayes_rvm.evidence.log_evidence import WARN_SKIP
from bayes_rvm.evidence.options import (
    FREE_ALPHA_FACTOR,
    EvidenceOptions,
    beta_ceiling,
    merge_options,
)
from bayes_rvm.evidence.problem import Problem
from bayes_rvm.evidence.record import Recorder
from bayes_rvm.evidence.result import EvidenceFit, GaussianWeights
from bayes_rvm.evidence.sequential_state import GramState, SequentialState
from bayes_rvm.evidence.shared import shared_evidence, shared_evidence_gram
from bayes_rvm.evidence.shared_ceiling import shared_evidence_ceiling
from bayes_rvm.evidence.single_basis import log_gain, optimal_alpha
from bayes_rvm.threads import one_blas_thread

__all__ = ["BOUND_MAX_COLUMNS", "FREE_ALPHA_FACTOR", "fit_sequential", "sequential_engine"]

#: A step that is not a re-estimation must gain at least this much, relative to ``1 + |objective|``,
#: so that a basis on the edge of relevance cannot be added and deleted back and forth for ever.
_GAIN_RTOL = 1e-12
#: A candidate whose ``S`` fell below this fraction of ``beta ||phi||^2`` lies numerically in the
#: span of the active columns: its factors are rounding noise, so it is not offered.
_SPAN_RTOL = 1e-10
#: Steps of the noise warm-up (see ``beta_warmup``), as SparseBayes' ``BetaUpdateStart``.
_BETA_WARMUP = 10
#: Most columns of the shared-precision bound checked at convergence (the active ones and the best
#: candidates by ``|q|^2 / s``): it costs one ``O(N k^2 + k^3)`` decomposition and, when it
#: restarts, k products ``Phi^T phi_j``. Any subset gives a valid bound; at most this many keeps
#: the check a fraction of a fit.
BOUND_MAX_COLUMNS = 500
#: Relative margin by which that bound must beat the fit for the engine to go on from it: a stop
#: that is below it by rounding only is left alone.
_BOUND_RTOL = 1e-9
#: The bound is first compared through a ceiling on it (:func:`shared_evidence_ceiling`, O(N k l)
#: against the O(N k^2 + k^3) of the bound): a fit above the ceiling by this relative margin is
#: above the bound, and the bound is not computed. On smaller problems it is computed directly.
_CEILING_RTOL = 1e-6
#: Problems this small compute the bound directly (the ceiling's range would have no room to grow).
_CEILING_MIN_SIZE = 64
#: The most values of a whole design the ceiling copies (64 MB).
_CEILING_COPY_MOST = 8_000_000


def fit_sequential(
    Phi: np.ndarray, T: np.ndarray, *, options: EvidenceOptions | None = None, **settings
) -> EvidenceFit:
    """Maximise the evidence by the fast sequential algorithm of Tipping and Faul (2003).

    Parameters
    ----------
    Phi : ndarray of shape (N, M) or SufficientStatistics
        Design matrix, float64, C- or F-ordered. It is neither copied nor modified; the engine
        keeps only ``Phi^T T``, the squared column norms and ``Phi^T phi_i`` of the active columns,
        so an N x M design of M << N candidate centres never leads to anything N x N. Or the
        problem's :class:`~bayes_rvm.basis.statistics.SufficientStatistics` (then ``T`` is None):
        ``Phi^T phi_i`` is then read from the Gram matrix, and the fit is the design's up to
        rounding (the large-data path: memory and time independent of N).
    T : ndarray of shape (N,) or (N, D), or None
        Targets; D outputs share one ``alpha`` per basis function and the noise precision.
    options : EvidenceOptions, optional
        Settings (see :class:`~bayes_rvm.evidence.EvidenceOptions`); this engine reads
        ``alpha_prior``, ``beta_prior``, ``alpha_init``, ``beta_init``, ``fixed_beta``, ``free``,
        ``candidates``, ``tol``, ``max_iter``, ``priority``, ``beta_update_every``,
        ``beta_warmup``, ``alignment_threshold``, ``callback`` and ``progress``. In particular:

        * ``beta_init`` defaults to ``100 / var(T)`` (a noise standard deviation of 10% of the
          targets', the start of Tipping and Faul's SparseBayes);
        * a Gamma hyperprior makes the single-alpha optimum the best positive root of a cubic,
          solved exactly; a shape ``a > 0`` needs a rate ``b > 0`` (else the objective is
          unbounded as ``alpha -> inf``);
        * ``alpha_init`` (default: start from the one candidate best aligned with the targets)
          holds ``inf`` for columns out of the model; columns active in it may stay even when not
          in ``candidates``, but are not re-added once deleted. Without free columns the last
          column in the model is never deleted;
        * ``beta_update_every``: after the first 10 steps, a noise step after every
          ``beta_update_every``-th step; also whenever the alphas have converged. A noise step is
          the fixed-point update ``beta = (N D - D sum(gamma) + 2c) / (||T - Phi M||^2 + 2d)``,
          an ascent direction of the objective, shortened in ``log beta`` until the exact
          objective does not decrease; it is followed by a full refactorisation;
        * ``beta_warmup="hold"`` keeps ``beta_init`` during the first 10 steps, while the model
          gathers its first basis functions: a noise estimate from a model of one or two
          functions counts the unexplained signal as noise, and from such an estimate no addition
          may be worth its cost, a poor local optimum (on sinc with an rbf width of 6 it costs
          about 40 nats and triples the test error). ``"update"`` takes a noise step after each of
          those steps, the schedule of SparseBayes and fastrvm (to reproduce their fits);
        * ``alignment_threshold``: a candidate whose column has cosine above
          ``1 - alignment_threshold`` with an active column is not added (its addition is
          numerically a re-estimation of the other); ``reason`` ends with the number of
          candidates set aside at the end, if any.

        The engine never stops below a bound it knows: every alpha equal to one shared
        precision is a point of the same hyperparameter space, so once it converges it computes
        the evidence of one shared precision over the regularised columns (active and allowed; at
        most :data:`BOUND_MAX_COLUMNS`, the best candidates first) and, if that is higher, goes
        on from there with the alignment test off (on smooth kernels every column can have a
        cosine above 0.999 with the first one, and the test left a one-vector fit 300 nats
        below). ``reason`` says so; a warning comes only if the fit still ends below the bound.
    **settings
        Fields of ``options`` to override.

    Returns
    -------
    EvidenceFit
        ``trace[0]`` is the objective at the start and ``trace[i]`` the objective after
        ``actions[i]`` (``actions[0]`` describes the start: ``"init 17"``; then ``"add j"``,
        ``"reestimate j"``, ``"reestimate all"``, ``"delete j"``, ``"noise"``); ``n_iter`` is
        the number of steps after it. ``log_evidence`` is recomputed from scratch at the end.

    Notes
    -----
    Per step the cost is O(K M) for the rank-one updates plus O(N M) for each addition; a noise
    step costs O(K^2 M + K^3). As in ``fit_mackay``, the hyperprior counts only for the columns in
    the model.
    """
    opt = merge_options(options, settings)
    return sequential_engine(Problem.given(Phi, T, likelihood=opt.likelihood or "gaussian"), opt)


@one_blas_thread
def sequential_engine(
    problem: Problem, options: EvidenceOptions, warm: EvidenceFit | None = None
) -> EvidenceFit:
    """Tipping and Faul's sequential algorithm (:func:`fit_sequential`) on ``problem``: the
    engine contract.

    ``warm``, a fit of the same targets at another kernel width, gives the alphas and the noise
    precision (unless the problem fixes it) to start from.
    """
    view = problem.view(options, "sequential", warm)
    opt = view.options
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        engine = _Sequential(view)
        with Recorder("fit_sequential", opt.callback, opt.progress) as rec:
            engine.run(rec)
        return engine.result(rec)


class _Scan:
    """What one scan of the factors found: the best addition and the active columns' optima."""

    __slots__ = (
        "al_opt",
        "any_add",
        "any_del",
        "deletable",
        "dlog",
        "g_add",
        "j_add",
        "l_opt",
        "masked",
        "max_dlog",
        "min_gain",
        "q2",
        "q2_a",
        "reest",
        "s_a",
    )


class _Sequential:
    """The sequential engine: the state (:class:`SequentialState`) and the schedule of its steps.

    :meth:`run` reads as the algorithm: :meth:`scan` the factors, stop or settle the noise when
    nothing is worth doing, otherwise :meth:`choose` a step, :meth:`apply` it and record it.
    """

    def __init__(self, problem) -> None:
        opt = self.opt = problem.options
        Phi, T, dd = problem.Phi, problem.T, problem.dd
        N, M, D = problem.shape
        self.D, self.M = D, M
        self.ab, self.cd = opt.alpha_prior, opt.beta_prior
        self.no_prior = not any(self.ab)
        self.tt = tt = problem.tt
        self.beta_max = beta_ceiling(problem.spread, D * N)
        self.allowed = problem.allowed
        self.T = T
        self.align = opt.alignment_threshold > 0
        self.restart = ""  # what the shared-precision bound changed, for ``reason``
        self.bound = None  # the objective at the shared-precision bound, once checked
        self.rough_spectrum = False  # the ceiling's range missed part of the bound's spectrum
        self.addable = problem.allowed.copy()  # allowed, out of the model and not set aside
        # With the squared norms, the two passes over Phi everything comes from (or the sums
        # of a problem given by its statistics).
        gram, PT = problem.sums()
        if not np.all(np.isfinite(PT)):
            raise ValueError("Phi must be finite.")
        if gram is None:
            st = SequentialState(Phi, PT, dd, tt, problem.beta_init, self.ab)
        else:
            st = GramState(gram, N, PT, dd, tt, problem.beta_init, self.ab)
        self.st = st
        for j, alpha_j in zip(problem.free, problem.free_alpha(), strict=True):
            st.append(int(j), alpha_j, True, st.column_products(st.column(int(j))))
        self.init_action = self._start(problem.alpha_init, problem.free)
        # A candidate (nearly) parallel to an active column would only re-estimate that one, in a
        # numerically singular way: it is set aside while such a column is in the model. Cosines
        # with the active columns come from their rows Phi^T phi_k, so this costs O(M) per
        # addition or deletion; ``n_parallel`` counts the active columns each is aligned with.
        self.n_parallel = np.zeros(M, dtype=np.intp)
        self.root_dd = np.sqrt(dd)
        if self.align:
            for p in range(st.K):
                self.n_parallel += self.aligned(p)
            self.addable &= self.n_parallel == 0
        self.objective = self.exact_objective()
        self.span_tol = _SPAN_RTOL * dd
        self.span_cut = (None, None)  # (beta, beta * span_tol), the scans' threshold on S
        self.single_ok = problem.free.size > 0  # may the last regularised column be deleted?
        self.n_steps = 0
        self.fresh = True  # statistics were recomputed from scratch since the last step
        self.newton_ok = True
        self.beta_settled = opt.fixed_beta
        self.last_change = np.inf
        self.converged, self.reason = False, f"reached max_iter={opt.max_iter}"

    def _start(self, alpha_init, free) -> str:
        """Put the starting columns in the model; returns the first action."""
        st, D = self.st, self.D
        if alpha_init is not None:
            start = np.flatnonzero(np.isfinite(alpha_init))
            start = start[~np.isin(start, free)]
            for j in start:
                st.append(int(j), float(alpha_init[j]), False, st.column_products(st.column(j)))
            self.addable[start] = False
            st.refresh()
            return "init " + ",".join(str(int(j)) for j in start) if start.size else "init"
        if not self.addable.any():
            raise ValueError("there is no non-zero candidate column to fit with.")
        if st.K:
            st.refresh()
        # Tipping and Faul's start: the candidate of largest normalised projection on what the
        # free columns leave unexplained, at its single-alpha optimum.
        score = np.where(self.addable, np.sum(st.Q**2, axis=1) / st.S, -np.inf)
        j = int(np.argmax(score))
        s_j = float(st.S[j])
        q2_j = float(np.sum(st.Q[j] ** 2))
        alpha_j = float(optimal_alpha(s_j, q2_j, D, self.ab)[0])
        if not np.isfinite(alpha_j):
            alpha_j = s_j  # nothing is worth adding at this beta; the steps sort it out
        st.append(j, alpha_j, False, st.column_products(st.column(j)))
        self.addable[j] = False
        st.refresh()
        return f"init {j}"

    def aligned(self, p: int) -> np.ndarray:
        """Columns whose cosine with active row ``p`` exceeds ``1 - alignment_threshold``."""
        cut = (1.0 - self.opt.alignment_threshold) * self.root_dd[self.st.idx[p]]
        return np.abs(self.st.C[p]) > cut * self.root_dd

    def beta_term(self, beta: float) -> float:
        c, d = self.cd
        return c * math.log(beta) - d * beta

    def exact_objective(self) -> float:
        st = self.st
        return st.log_ev + st.prior_term() + self.beta_term(st.beta)

    # --- the main loop ----------------------------------------------------------------------

    def run(self, record: Recorder) -> None:
        self.record = record
        record.start(self.init_action, self.objective)
        while self.n_steps < self.opt.max_iter:
            scan = self.scan()
            if not scan.any_del and not scan.any_add and scan.max_dlog < self.opt.tol:
                if self.settle():
                    break
                continue
            kind, gain, where = self.choose(scan)
            if kind == "reestimate all":
                newton_gain = self.newton_step()
                if newton_gain is None:
                    self.newton_ok = False  # until the model or the noise changes
                    kind, gain, where = self.choose(scan)
                else:
                    gain = newton_gain
            action = kind if kind == "reestimate all" else self.apply(kind, where, scan, gain)
            if self.step_done(action, gain) or (
                self.n_steps < self.opt.max_iter and self.noise_due() and self.take_noise_step()
            ):
                self.converged, self.reason = True, "stopped by callback"
                break

    def step_done(self, action: str, gain: float) -> bool:
        """Count and record a step; True when the callback asks to stop."""
        self.n_steps += 1
        self.beta_settled = self.opt.fixed_beta
        if action == "reestimate all":
            self.fresh = True
        else:
            self.newton_ok = self.newton_ok or not action.startswith("reestimate")
        return self.record(action, self.objective, gain, self.snapshot)

    def snapshot(self) -> dict:
        st = self.st
        return {
            "n_active": st.K,
            "beta": st.beta,
            "active": st.idx.copy(),
            "alpha": st.alpha.copy(),
        }

    def settle(self) -> bool:
        """Nothing worth doing at this noise: settle the noise, or confirm; True to stop."""
        if not self.beta_settled:
            accepted, self.last_change = self.noise_step()
            # A rejected step means no ascent is left along beta: it is at its optimum.
            self.beta_settled = self.last_change < self.opt.tol or not accepted
            if accepted:
                self.n_steps += 1
                self.fresh = self.newton_ok = True
                if self.record("noise", self.objective, 0.0, self.snapshot):
                    self.converged, self.reason = True, "stopped by callback"
                    return True
            return False
        if not self.fresh:
            # Confirm on statistics free of accumulated rounding before stopping.
            self.st.refresh()
            self.objective = self.exact_objective()
            self.fresh = True
            return False
        if self.restart_from_shared_bound():
            return self.converged  # True only when the callback asked to stop
        self.converged = True
        self.reason = (
            f"no worthwhile addition or deletion, max |change of log alpha| < tol={self.opt.tol:g}"
            + ("" if self.opt.fixed_beta else " and |change of log beta| < tol")
        )
        return True

    def restart_from_shared_bound(self) -> bool:
        """Go on from one shared precision over the regularised columns if its evidence is higher.

        With ``alpha_i = a`` on the active and allowed columns (the free ones as they are) and
        ``inf`` elsewhere, the objective is a point the engine may reach, so stopping below it is
        a poor local optimum (the alignment test setting every candidate aside, or a noise
        estimate that calls the signal noise). Checked once, at the first convergence, through a
        ceiling on it first (:meth:`clears_ceiling`); True when the engine restarts there, with the
        alignment test off.
        """
        if self.bound is not None:
            return False
        st = self.st
        cols = self.bound_columns()
        fixed = st.beta if self.opt.fixed_beta else None
        if self.clears_ceiling(cols, fixed):
            return False
        if st.Phi is None:
            gram = st.gram[np.ix_(cols, cols)]
        else:
            # No copy of the design when every column is in; and on a tall one the k x k Gram,
            # never anything N x N or a second N x k.
            Phi = st.Phi if cols.size == self.M else st.Phi[:, cols]
            gram = Phi.T @ Phi if cols.size <= st.N else None
        if gram is None:
            bound = shared_evidence(Phi, self.T, beta=fixed)
        else:
            bound = shared_evidence_gram(
                gram, st.PT[cols], self.tt, st.N, beta=fixed, all_axes=self.rough_spectrum
            )
        obj = bound.log_evidence + self.beta_term(bound.beta)
        if self.ab[0] or self.ab[1]:
            obj += cols.size * (self.ab[0] * math.log(bound.alpha) - self.ab[1] * bound.alpha)
        self.bound = obj
        margin = _BOUND_RTOL * (1.0 + abs(self.objective))
        if st.n_free == 0 and obj <= self.objective + margin:
            return False
        trial = st.like(bound.beta)
        for j, alpha_j in zip(st.idx[st.is_free], st.alpha[st.is_free], strict=True):
            trial.append(int(j), float(alpha_j), True, st.C[st.pos[j]].copy())
        for j in cols:
            trial.append(int(j), bound.alpha, False, trial.column_products(trial.column(j)))
        trial.refresh()
        obj = trial.log_ev + trial.prior_term() + self.beta_term(trial.beta)
        if st.n_free:
            self.bound = obj  # the point the engine knows is the one with its free columns
        if not obj > self.objective + margin:
            return False
        n_aside = int(np.count_nonzero(self.allowed & (self.n_parallel > 0) & (st.pos < 0)))
        self.restart = (
            f"it had stopped at {self.objective:.4g} with {st.K} active columns"
            + (f" and {n_aside} candidates set aside as aligned" if n_aside else "")
            + f", below {obj:.4g} of one shared precision over {cols.size} columns, and went on "
            "from there without the alignment test"
        )
        gain, self.objective, self.st = obj - self.objective, obj, trial
        self.align = False
        self.n_parallel[:] = 0
        np.logical_and(self.allowed, trial.pos < 0, out=self.addable)
        self.fresh = self.newton_ok = True
        self.beta_settled = self.opt.fixed_beta
        self.n_steps += 1
        if self.record("restart shared", self.objective, gain, self.snapshot):
            self.converged, self.reason = True, "stopped by callback"
        return True

    def clears_ceiling(self, cols: np.ndarray, fixed: float | None) -> bool:
        """Whether the fit clears a ceiling on the shared-precision bound (then nothing to do).

        The bound costs the k x k Gram matrix of its columns ``cols`` and its eigendecomposition
        (at N = 1000 and k = 500, more than the rest of the fit); most fits are well above it,
        which :func:`shared_evidence_ceiling` shows for ``O(N k l)``, l >= 24. Where it does not,
        and on the statistics path, with hyperpriors or free columns (whose bound is another
        point) and on small problems, the bound is computed, so the fit is the same either way.
        """
        st = self.st
        if (
            st.Phi is None
            or st.n_free
            or not self.no_prior
            or any(self.cd)
            or min(st.N, cols.size) <= _CEILING_MIN_SIZE
        ):
            return False
        # The ceiling overwrites its copy of the columns with the residual of its range: this
        # C-ordered one (Phi[:, cols] is F-ordered), or a copy of the whole design, where that
        # is small; on a larger design of no more columns than the bound takes, the bound is
        # computed directly.
        whole = cols.size == self.M
        if whole and st.N * cols.size > _CEILING_COPY_MOST:
            return False
        Phi = st.Phi if whole else np.take(st.Phi, cols, axis=1)
        target = self.objective - _CEILING_RTOL * (1.0 + abs(self.objective))
        ceiling = shared_evidence_ceiling(
            Phi, self.T, self.tt, beta=fixed, below=target, overwrite_phi=not whole
        )
        # A spectrum the range did not hold keeps many eigenvalues above the rank cut: the
        # exact bound's decomposition then takes them all (Friedman #3, N = 1000: the fit in
        # 63 ms instead of 74 ms), and only those above the cut otherwise.
        self.rough_spectrum = not ceiling.captured
        if not ceiling.value < target:
            return False
        self.bound = ceiling.value  # above the bound and below the fit: nothing to warn about
        return True

    def bound_columns(self) -> np.ndarray:
        """The regularised columns of the bound: active and allowed ones, the best first."""
        st = self.st
        reg = st.idx[~st.is_free]
        rest = np.flatnonzero(self.allowed & (st.pos < 0))
        room = max(BOUND_MAX_COLUMNS - reg.size, 0)
        if rest.size > room:
            q2 = np.einsum("ij,ij->i", st.Q[rest], st.Q[rest])
            score = q2 / np.maximum(st.S[rest], 1e-300)
            rest = rest[np.argsort(-score, kind="stable")[:room]]
        return np.sort(np.concatenate([reg, rest]))

    # --- scan, choose, apply ------------------------------------------------------------------

    def scan(self) -> _Scan:
        """Best addition (vectorised over M) and the optima of the active columns (over K)."""
        st, D, sc = self.st, self.D, _Scan()
        S, Q = st.S, st.Q
        sc.q2 = q2 = np.square(Q[:, 0]) if D == 1 else np.einsum("ij,ij->i", Q, Q)
        if self.span_cut[0] != st.beta:
            self.span_cut = (st.beta, st.beta * self.span_tol)
        ok = S > self.span_cut[1]
        ok &= self.addable
        if self.no_prior:
            # The gain D/2 (x - log(1 + x)), x = |q|^2 / (D S) - 1, increases with |q|^2 / S:
            # the best candidate is found on the ratio, and only its gain is computed. (A masked
            # division costs four times the division and a select.)
            score = np.where(ok, q2 / S, 0.0)
        else:
            score = optimal_alpha(S, q2, D, self.ab)[1]
            score[~ok] = 0.0  # gains of candidates worth adding are positive
        sc.j_add = int(score.argmax())
        if self.no_prior:
            x = float(score[sc.j_add]) / D - 1.0
            sc.g_add = 0.5 * D * (x - math.log1p(x)) if x > 0 else -math.inf
        else:
            sc.g_add = float(score[sc.j_add])
        sc.min_gain = _GAIN_RTOL * (1.0 + abs(self.objective))
        sc.any_add = sc.g_add > sc.min_gain
        self._scan_active(sc)
        return sc

    def _scan_active(self, sc: _Scan) -> None:
        st, D = self.st, self.D
        al = st.alpha
        sc.s_a, sc.q2_a = s_a, q2_a = st.factors_active()
        if self.no_prior:
            theta = q2_a - D * s_a
            finite = theta > 0
            sc.al_opt = D * s_a * s_a / theta  # meaningless where not finite: masked below
            sc.l_opt = None
        else:
            sc.al_opt, sc.l_opt = optimal_alpha(s_a, q2_a, D, self.ab)
            finite = np.isfinite(sc.al_opt)
        if st.n_free:
            sc.reest = finite & ~st.is_free
            sc.deletable = ~(finite | st.is_free)
        else:
            sc.reest, sc.deletable = finite, ~finite
        some_out = bool(sc.deletable.any())
        n_reg = st.K - st.n_free
        sc.any_del = some_out and (self.single_ok or n_reg > 1)  # never empty the model
        sc.masked = some_out or st.n_free > 0  # not every active column is re-estimated
        sc.dlog = np.abs(np.log(sc.al_opt / al))
        if sc.masked:
            sc.dlog[~sc.reest] = 0.0
        sc.max_dlog = float(sc.dlog.max()) if st.K else 0.0

    def choose(self, sc: _Scan) -> tuple[str, float, int]:
        """The step to take: ``(kind, gain, where)``."""
        priority, st = self.opt.priority, self.st
        if not sc.any_add and not sc.any_del and self.newton_ok and st.K - st.n_free > 1:
            return "reestimate all", 0.0, -1
        options = []
        if sc.any_del:
            dele = sc.deletable
            l_now = log_gain(sc.s_a[dele], sc.q2_a[dele], st.alpha[dele], self.D, self.ab)
            k = int(np.argmax(-l_now))
            options.append(("delete", float(-l_now[k]), int(np.flatnonzero(dele)[k])))
        if sc.any_add:
            options.append(("add", sc.g_add, sc.j_add))
        if sc.max_dlog >= self.opt.tol and not (
            (priority == "delete" and sc.any_del) or (priority == "add" and sc.any_add)
        ):
            # Gains of re-estimation, needed only where the step is chosen by its gain.
            options.append(("reestimate", *self._best_reestimate(sc)))
        if priority == "delete" and sc.any_del:
            return options[0]
        if priority == "add" and sc.any_add:
            return next(o for o in options if o[0] == "add")
        return max(options, key=lambda o: o[1])

    def _best_reestimate(self, sc: _Scan) -> tuple[float, int]:
        al, s_a, q2_a, D = self.st.alpha, sc.s_a, sc.q2_a, self.D
        if self.no_prior:
            # l(alpha') - l(alpha) in a form without cancellation between the two terms.
            al_new = np.where(sc.reest, sc.al_opt, al) if sc.masked else sc.al_opt
            dal = al - al_new
            den = al + s_a
            gain_re = 0.5 * (
                q2_a * dal / ((al_new + s_a) * den) - D * np.log1p(s_a * dal / (al_new * den))
            )
        else:
            gain_re = sc.l_opt - log_gain(s_a, q2_a, al, D, self.ab)
        if sc.masked:
            gain_re[~sc.reest] = -np.inf
        p_re = int(np.argmax(gain_re))
        g_re = float(gain_re[p_re])
        if g_re <= sc.min_gain:
            # Near convergence the gains are rounding noise: move the farthest alpha.
            p_re = int(np.argmax(sc.dlog))
            g_re = max(float(gain_re[p_re]), 0.0)
        return g_re, p_re

    def apply(self, kind: str, where: int, sc: _Scan, gain: float) -> str:
        """Take an addition, re-estimation or deletion; returns the action recorded."""
        st, align = self.st, self.align
        if kind == "add":
            j = where
            if self.no_prior:
                s_j = float(st.S[j])
                alpha_j = self.D * s_j * s_j / (float(sc.q2[j]) - self.D * s_j)
            else:
                alpha_j = float(optimal_alpha(st.S[j], sc.q2[j], self.D, self.ab)[0])
            st.add(j, alpha_j, st.column_products(st.column(j)))
            self.addable[j] = False
            p = st.K - 1
            if align:
                hit = self.aligned(p)
                self.n_parallel += hit
                self.addable[hit] = False
            action = f"add {j}"
        elif kind == "reestimate":
            p = where
            st.reestimate(p, float(sc.al_opt[p]))
            action = f"reestimate {st.idx[p]}"
        else:
            p = where
            j = int(st.idx[p])
            if align:
                self.n_parallel -= self.aligned(p)
            st.delete(p)
            np.logical_and(self.allowed, self.n_parallel == 0, out=self.addable)
            self.addable[st.idx] = False
            p = min(p, st.K - 1)
            action = f"delete {j}"
        self.fresh = False
        self.objective += gain
        self.guard(p, kind == "delete", self.n_steps + 1)
        return action

    # --- noise, guard and joint Newton step ---------------------------------------------------

    def noise_step(self) -> tuple[bool, float]:
        """One safeguarded fixed-point step of beta; returns (accepted, |change of log beta|)."""
        st, D, (c, d) = self.st, self.D, self.cd
        gamma_sum = st.K - float(st.alpha @ st.Sigma.diagonal())
        PTa = st.PT[st.idx]
        sse = max(float(self.tt - np.vdot(st.mu, 2.0 * PTa - st.G @ st.mu)), 0.0)
        target = (st.N * D - D * gamma_sum + 2 * c) / max(sse + 2 * d, 1e-300)
        target = min(max(target, 1e-300), self.beta_max)
        step = math.log(target) - math.log(st.beta)
        change = abs(step)
        prior = st.prior_term()
        # The fixed-point step points uphill (its sign is that of the derivative), so shortening
        # it must end in an increase; exact values are compared at both ends.
        base = (st.log_ev if self.fresh else st.factor(st.beta)[1]) + prior
        base += self.beta_term(st.beta)
        while abs(step) > 1e-13:
            trial = st.beta * math.exp(step)
            factored = st.factor(trial)
            new_obj = factored[1] + prior + self.beta_term(trial)
            if new_obj >= base:
                st.beta = trial
                st.refresh(factored)
                self.objective = new_obj
                return True, change
            step *= 0.25
        return False, change

    def take_noise_step(self) -> bool:
        """A scheduled noise step; True when the callback asks to stop."""
        accepted, self.last_change = self.noise_step()
        if not accepted:
            return False
        self.n_steps += 1
        self.fresh = self.newton_ok = True
        return self.record("noise", self.objective, 0.0, self.snapshot)

    def noise_due(self) -> bool:
        opt = self.opt
        if opt.fixed_beta:
            return False
        if self.n_steps <= _BETA_WARMUP:
            return opt.beta_warmup == "update"
        return self.n_steps % opt.beta_update_every == 0

    def guard(self, p: int, deleted: bool, step: int) -> None:
        """Refactorise when the rank-one updates have drifted from ``H Sigma = I``."""
        st = self.st
        if st.Sigma[p, p] <= 0 or (
            (deleted or step % 4 == 0)
            and st.column_residual(p) > max(1e-10, 100 * st.residual_base)
        ):
            st.refresh()
            self.objective = self.exact_objective()
            self.fresh = True

    def newton_step(self) -> float | None:
        """Joint Newton step on the log alphas of the regularised columns, if it is uphill.

        Single re-estimations are coordinate ascent, which crawls when the alphas are coupled;
        near the optimum one Newton step does the work of hundreds. The step is taken only where
        the Hessian is negative definite and only if the exact objective rises; returns the gain.
        """
        st, D, (a, b) = self.st, self.D, self.ab
        old = st.alpha  # replaced, never modified in place, by the trials below
        if st.n_free:
            reg = np.flatnonzero(~st.is_free)
            al, Sig, mu = old[reg], st.Sigma[np.ix_(reg, reg)], st.mu[reg]
        else:
            reg = slice(None)  # no copies of Sigma and mu when every column is regularised
            al, Sig, mu = old, st.Sigma, st.mu
        mm = mu @ mu.T
        sd, m2 = Sig.diagonal(), mm.diagonal()
        # d l / d log alpha_i and its derivatives (d Sigma_ii / d log alpha_j = -alpha_j
        # Sigma_ij^2, d m_i / d log alpha_j = -alpha_j Sigma_ij m_j).
        grad = 0.5 * (D * (1.0 - al * sd) - al * m2) + a - b * al
        neg_hess = D * Sig
        neg_hess += 2.0 * mm
        neg_hess *= Sig
        neg_hess *= np.multiply.outer(-0.5 * al, al)
        neg_hess.flat[:: al.size + 1] += 0.5 * (D * al * sd + al * m2) + b * al
        # Where the objective is not concave (a column drifting out, two trading places) the
        # curvature is taken in absolute value, so that the step still climbs along those
        # directions instead of aiming at a saddle ("saddle-free" Newton).
        w, V = np.linalg.eigh(neg_hess)
        w = np.abs(w)
        np.maximum(w, 1e-8 * max(float(w.max()), 1e-300), out=w)
        du = V @ ((grad @ V) / w)
        du *= min(1.0, 3.0 / max(float(np.abs(du).max()), 1e-300))  # trust region in log alpha
        beta_term = self.beta_term(st.beta)
        base = (st.log_ev if self.fresh else st.factor(st.beta)[1]) + st.prior_term() + beta_term
        for _ in range(3):
            if st.n_free:
                st.alpha = old.copy()
                st.alpha[reg] = al * np.exp(du)
            else:
                st.alpha = al * np.exp(du)
            factored = st.factor(st.beta)
            new_obj = factored[1] + st.prior_term() + beta_term
            if new_obj > base:
                break
            du *= 0.25
        else:
            st.alpha = old
            return None
        st.refresh(factored)
        gain = new_obj - self.objective
        self.objective = new_obj
        return gain

    # --- the result ---------------------------------------------------------------------------

    def result(self, record: Recorder) -> EvidenceFit:
        st, M = self.st, self.M
        reason = self.reason
        n_aside = int(np.count_nonzero(self.allowed & (self.n_parallel > 0) & (st.pos < 0)))
        if n_aside:
            reason += f"; {n_aside} candidates set aside as aligned with an active column"
        if self.restart:
            reason += f"; {self.restart}"
        if self.bound is not None and self.objective < self.bound - _BOUND_RTOL * (
            1.0 + abs(self.bound)
        ):
            warnings.warn(
                f"fit_sequential stopped at {self.objective:.6g}, below {self.bound:.6g} of one "
                "prior precision shared by the columns (a point it knows): numerical trouble at "
                "this basis; a wider or narrower kernel, or solver='mackay', may fit better.",
                UserWarning,
                skip_file_prefixes=WARN_SKIP,
            )
        order = np.argsort(st.idx)
        idx = st.idx[order]
        alpha = st.alpha[order]
        post = gaussian_posterior(
            st.G[np.ix_(order, order)], st.PT[idx], self.tt, st.N, alpha, st.beta
        )
        alpha_full = np.full(M, np.inf)
        alpha_full[idx] = alpha
        if not self.converged:
            warnings.warn(
                f"sequential evidence maximisation did not converge in {self.opt.max_iter} steps "
                f"({idx.size} active, last |change of log beta| = {self.last_change:.2e}); "
                "returning the last estimate. Increase max_iter or loosen tol.",
                ConvergenceWarning,
                skip_file_prefixes=WARN_SKIP,
            )
        return EvidenceFit(
            alpha=alpha_full,
            active=idx,
            posterior=GaussianWeights(post.mean, post.chol, float(st.beta)),
            log_evidence=post.log_evidence,
            trace=np.asarray(record.trace),
            n_iter=self.n_steps,
            converged=self.converged,
            reason=reason,
            actions=tuple(record.actions),
        )
