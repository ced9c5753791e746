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
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.evidence.gaussian import (  # private helpers shared within the package
    BETA_MAX,
    EvidenceFit,
    _cholesky,
    _one_blas_thread,
    _validate_prior,
    gaussian_posterior,
)

__all__ = ["fit_sequential"]

#: Prior precision of a "free" column relative to the scale that fits the targets: the weight's
#: prior standard deviation is 1e5 times that scale, negligible against the data but proper, so the
#: log evidence stays finite (a flat prior has none).
FREE_ALPHA_FACTOR = 1e-10
#: A step that is not a re-estimation must gain at least this much, relative to ``1 + |objective|``,
#: so that a basis on the edge of relevance cannot be added and deleted back and forth for ever.
_GAIN_RTOL = 1e-12
#: A candidate whose ``S`` fell below this fraction of ``beta ||phi||^2`` lies numerically in the
#: span of the active columns: its factors are rounding noise, so it is not offered.
_SPAN_RTOL = 1e-10
_LOG_2PI = math.log(2.0 * math.pi)
#: Steps of the noise warm-up (see ``beta_warmup``), as SparseBayes' ``BetaUpdateStart``.
_BETA_WARMUP = 10


def _log_gain(s, q2, alpha, D: int, a: float, b: float):
    """``l(alpha)``: objective gained by holding a basis at ``alpha`` instead of leaving it out."""
    out = 0.5 * (q2 / (alpha + s) - D * np.log1p(s / alpha))
    if a or b:
        out = out + a * np.log(alpha) - b * alpha
    return out


def _optimal_alpha(s, q2, D: int, a: float, b: float):
    """Best single ``alpha`` for factors ``s`` and ``|q|^2`` (vectorised) and its gain ``l``.

    Returns ``alpha`` (``inf`` where leaving the basis out is best) and ``l(alpha)`` (0 there).
    """
    s = np.asarray(s, dtype=np.float64)
    q2 = np.asarray(q2, dtype=np.float64)
    if not a and not b:
        theta = q2 - D * s
        ok = theta > 0
        alpha = np.where(ok, D * s * s / theta, np.inf)
        x = np.where(ok, theta / (D * s), 0.0)
        # l at the optimum in closed form: D/2 (x - log(1 + x)), x = |q|^2 / (D s) - 1.
        return alpha, 0.5 * D * (x - np.log1p(x))
    c3 = np.full_like(s, -2.0 * b)
    c2 = 2.0 * a - 4.0 * b * s
    c1 = D * s - q2 + 4.0 * a * s - 2.0 * b * s * s
    c0 = (D + 2.0 * a) * s * s
    if b > 0:
        # Roots of the cubic as eigenvalues of its companion matrices, all at once.
        comp = np.zeros((*s.shape, 3, 3))
        comp[..., 0, 0] = -c2 / c3
        comp[..., 0, 1] = -c1 / c3
        comp[..., 0, 2] = -c0 / c3
        comp[..., 1, 0] = 1.0
        comp[..., 2, 1] = 1.0
        roots = np.linalg.eigvals(comp)
    else:
        # b = 0 leaves a quadratic (a > 0 here).
        sq = np.sqrt((c1 * c1 - 4.0 * c2 * c0).astype(np.complex128))
        roots = np.stack([(-c1 - sq) / (2.0 * c2), (-c1 + sq) / (2.0 * c2)], axis=-1)
    re = roots.real
    real = np.abs(roots.imag) <= 1e-9 * np.maximum(np.abs(re), 1e-300)
    # Maxima of l are where the polynomial (the sign of dl/dalpha) falls through zero.
    slope = (3.0 * c3[..., None] * re + 2.0 * c2[..., None]) * re + c1[..., None]
    cand = real & (re > 0) & (slope < 0)
    r = np.where(cand, re, 1.0)
    gains = np.where(cand, _log_gain(s[..., None], q2[..., None], r, D, a, b), -np.inf)
    best = np.argmax(gains, axis=-1)[..., None]
    gain = np.take_along_axis(gains, best, axis=-1)[..., 0]
    alpha = np.take_along_axis(r, best, axis=-1)[..., 0]
    keep = gain > 0
    return np.where(keep, alpha, np.inf), np.where(keep, gain, 0.0)


class _State:
    """Active set, its posterior, and the factors ``S``, ``Q`` of every column.

    Rows of the active arrays are in the order the columns entered; a deletion moves the last row
    into the freed one, so nothing is shifted. Every step runs a few dozen NumPy calls on arrays
    of size K or M, so the methods keep the number of calls (not only the flops) small: at small
    K and M each call costs more than its arithmetic.
    """

    def __init__(self, Phi, PT, dd, tt, N, D, beta, ab):
        self.Phi, self.PT, self.dd, self.tt, self.N, self.D = Phi, PT, dd, tt, N, D
        self.M = Phi.shape[1]
        self.beta = beta
        self.a, self.b = ab
        self.idx = np.empty(0, dtype=np.intp)  # active columns
        self.pos = np.full(self.M, -1, dtype=np.intp)  # column -> row in the active arrays
        self.alpha = np.empty(0)
        self.is_free = np.zeros(0, dtype=bool)
        self.n_free = 0
        self.G = np.empty((0, 0))  # Phi_a^T Phi_a
        self.C = np.empty((8, self.M))  # rows Phi^T phi_j of the active columns (grown by doubling)
        self.Sigma = np.empty((0, 0))
        self.mu = np.empty((0, D))
        self.S = beta * dd
        self.Q = beta * PT
        self.residual_base = 0.0
        self.log_ev = 0.0

    @property
    def K(self) -> int:
        return self.idx.size

    def column(self, j: int) -> np.ndarray:
        return np.ascontiguousarray(self.Phi[:, j])

    def column_products(self, phi_j: np.ndarray) -> np.ndarray:
        # The only O(N M) operation of a step.
        return self.Phi.T @ phi_j

    def prior_term(self) -> float:
        if not (self.a or self.b):
            return 0.0
        reg = self.alpha[~self.is_free] if self.n_free else self.alpha
        return float(np.sum(self.a * np.log(reg) - self.b * reg))

    def append(self, j: int, alpha: float, free: bool, cj: np.ndarray) -> None:
        """Grow the active arrays by one column (``Sigma``, ``mu`` are the caller's business)."""
        K = self.K
        if K == self.C.shape[0]:
            self.C = np.concatenate([self.C, np.empty_like(self.C)])
        self.C[K] = cj
        G = np.empty((K + 1, K + 1))
        G[:K, :K] = self.G
        G[K, :K] = G[:K, K] = cj[self.idx]
        G[K, K] = self.dd[j]
        self.G = G
        self.idx = np.append(self.idx, j)
        self.pos[j] = K
        self.alpha = np.append(self.alpha, alpha)
        self.is_free = np.append(self.is_free, free)
        self.n_free += bool(free)

    def factor(self, beta: float) -> tuple:
        """Cholesky factor of ``H = A + beta G`` and the log evidence at ``beta`` (O(K^3)).

        Uses ``beta ||T - Phi M||^2 + sum alpha m^2 = beta ||T||^2 - beta^2 |z|^2`` with
        ``z = L^-1 Phi_a^T T``. Returns ``(L, log_ev, H, z)``: :meth:`refresh` takes the tuple.
        """
        H = beta * self.G
        H.flat[:: self.K + 1] += self.alpha
        # LAPACK directly: SciPy's wrappers cost more than the K x K work itself at small K.
        # Cholesky's backward error is insensitive to a diagonal scaling of H, so the
        # equilibration of gaussian._cholesky is left to the rare case that H is numerically
        # indefinite, where that function takes over (with its jitter and warning).
        L, info = lapack.dpotrf(H, lower=1, clean=1)
        if info:
            L = _cholesky(H)
        z, _ = lapack.dtrtrs(L, self.PT[self.idx], lower=1)
        quad = beta * self.tt - beta * beta * float(np.vdot(z, z))
        log_det = 2.0 * float(np.log(L.diagonal()).sum())
        log_ev = (
            self.D
            * (
                0.5 * self.N * (math.log(beta) - _LOG_2PI)
                + 0.5 * float(np.log(self.alpha).sum())
                - 0.5 * log_det
            )
            - 0.5 * quad
        )
        return L, log_ev, H, z

    def refresh(self, factored: tuple | None = None) -> None:
        """Recompute ``Sigma``, ``mu``, ``S``, ``Q`` and the log evidence from scratch.

        ``factored`` is :meth:`factor` at the current ``beta`` when the caller has it already.
        """
        K, beta = self.K, self.beta
        L, self.log_ev, H, z = self.factor(beta) if factored is None else factored
        Linv, _ = lapack.dtrtri(L, lower=1)
        self.Sigma = Linv.T @ Linv
        self.mu = Linv.T @ z
        self.mu *= beta
        CK = self.C[:K]
        U = Linv @ CK
        U *= U
        S = U.sum(axis=0)
        S *= -beta * beta
        S += beta * self.dd
        self.S = S
        Q = self.PT - CK.T @ self.mu
        Q *= beta
        self.Q = Q
        # Residual of H Sigma = I after equilibration by diag(H): it measures rounding, not the
        # (possibly huge) spread of the alphas. Kept as the baseline the guard compares with.
        dh = np.sqrt(H.diagonal())
        R = H @ self.Sigma
        R *= dh / dh[:, None]
        R.flat[:: K + 1] -= 1.0
        self.residual_base = float(np.abs(R).max())

    def column_residual(self, p: int) -> float:
        """Equilibrated residual of column ``p`` of ``H Sigma = I`` (O(K^2))."""
        col = self.Sigma[:, p]
        hd = self.beta * self.G.diagonal()
        hd += self.alpha
        r = self.G @ col
        r *= self.beta
        r += self.alpha * col
        r *= np.sqrt(hd[p] / hd)
        r[p] -= 1.0
        return float(np.abs(r).max())

    def factors_active(self):
        """``s`` and ``|q|^2`` of the active columns measured without themselves."""
        al = self.alpha
        sd = self.Sigma.diagonal()
        inv_sd = 1.0 / sd
        S = self.S[self.idx]
        # Two algebraically equal forms; each loses precision where alpha Sigma_ii nears the
        # other end of [0, 1], so take the well-conditioned one.
        prior_side = al * sd > 0.5
        ratio = np.where(prior_side, al / (al - S), inv_sd)
        s = np.where(prior_side, S * ratio, inv_sd - al)
        if self.D == 1:
            q = np.where(prior_side, self.Q[self.idx, 0], self.mu[:, 0])
            q *= ratio
            q2 = q * q
        else:
            q = np.where(prior_side[:, None], self.Q[self.idx], self.mu) * ratio[:, None]
            q2 = np.einsum("ij,ij->i", q, q)
        return np.maximum(s, 0.0, out=s), q2

    # --- rank-one steps (Tipping and Faul, appendix) ------------------------------------------

    def add(self, j: int, alpha: float, cj: np.ndarray) -> None:
        beta, K = self.beta, self.K
        v = self.Sigma @ cj[self.idx]
        # e = beta (cj - beta C^T v): the change of S and Q is rank one along it.
        e = v @ self.C[:K]
        e *= -beta
        e += cj
        e *= beta
        sjj = 1.0 / (alpha + self.S[j])
        mj = sjj * self.Q[j]
        Sig = np.empty((K + 1, K + 1))
        Sig[:K, :K] = self.Sigma
        Sig[:K, :K] += (beta * beta * sjj) * np.multiply.outer(v, v)
        Sig[:K, K] = Sig[K, :K] = -beta * sjj * v
        Sig[K, K] = sjj
        self.Sigma = Sig
        mu = np.empty((K + 1, self.D))
        mu[:K] = self.mu - np.multiply.outer(beta * v, mj)
        mu[K] = mj
        self.mu = mu
        self.Q -= np.multiply.outer(e, mj)
        e *= e
        e *= sjj
        self.S -= e
        self.append(j, alpha, False, cj)

    def _downdate(self, p: int, kappa: float) -> None:
        """``Sigma <- Sigma - kappa Sigma_p Sigma_p^T`` and what follows from it (O(K M))."""
        sp = self.Sigma[:, p].copy()
        mp = self.mu[p].copy()
        W = np.multiply.outer(sp, sp)
        W *= kappa  # after the product, so that Sigma stays exactly symmetric
        self.Sigma -= W
        self.mu -= np.multiply.outer(kappa * sp, mp)
        z = sp @ self.C[: self.K]  # Phi^T Phi_a Sigma_p: the change of S and Q is along it
        self.Q += np.multiply.outer(z, (kappa * self.beta) * mp)
        z *= z
        z *= kappa * self.beta * self.beta
        self.S += z

    def reestimate(self, p: int, alpha: float) -> None:
        delta = alpha - self.alpha[p]
        # kappa = 1 / (Sigma_pp + 1 / delta), written without dividing by a vanishing delta.
        self._downdate(p, delta / (self.Sigma[p, p] * delta + 1.0))
        self.alpha[p] = alpha

    def delete(self, p: int) -> None:
        self._downdate(p, 1.0 / self.Sigma[p, p])
        last = self.K - 1
        j = int(self.idx[p])
        if p != last:
            for arr in (self.Sigma, self.G):
                arr[p, :] = arr[last, :]
                arr[:, p] = arr[:, last]
            for arr in (self.mu, self.C, self.alpha, self.is_free, self.idx):
                arr[p] = arr[last]
            self.pos[self.idx[p]] = p
        self.Sigma = self.Sigma[:last, :last].copy()
        self.G = self.G[:last, :last].copy()
        self.mu = self.mu[:last]
        self.alpha = self.alpha[:last]
        self.is_free = self.is_free[:last]
        self.idx = self.idx[:last]
        self.pos[j] = -1


def _as_index_array(name: str, idx, M: int) -> np.ndarray:
    arr = np.asarray(idx if idx is not None else [], dtype=np.float64).ravel()
    if arr.size and (np.any(arr != np.round(arr)) or arr.min() < 0 or arr.max() >= M):
        raise ValueError(f"{name} must hold column indices in [0, {M}), got {idx!r}.")
    return arr.astype(np.intp)


def fit_sequential(
    Phi: np.ndarray,
    T: np.ndarray,
    *,
    beta_init: float | None = None,
    fixed_beta: bool = False,
    alpha_prior: tuple[float, float] = (0.0, 0.0),
    beta_prior: tuple[float, float] = (0.0, 0.0),
    free: Sequence[int] | np.ndarray = (),
    candidates: Sequence[int] | np.ndarray | None = None,
    max_iter: int = 10_000,
    tol: float = 1e-6,
    beta_update_every: int = 5,
    beta_warmup: Literal["hold", "update"] = "hold",
    priority: Literal["delete", "add"] | None = "delete",
    alignment_threshold: float = 1e-3,
    callback: Callable[[dict[str, Any]], Any] | None = None,
    progress: bool = False,
    alpha_init: np.ndarray | None = None,
) -> EvidenceFit:
    """Maximise the evidence by the fast sequential algorithm of Tipping and Faul (2003).

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix, float64, C- or F-ordered. It is neither copied nor modified; the engine
        keeps only ``Phi^T T``, the squared column norms and ``Phi^T phi_i`` of the active columns,
        so an N x M design of M << N candidate centres never leads to anything N x N.
    T : ndarray of shape (N,) or (N, D)
        Targets; D outputs share one ``alpha`` per basis function and the noise precision.
    beta_init : float, optional
        Starting noise precision; default ``100 / var(T)`` (a noise standard deviation of 10% of
        the targets', the start of Tipping and Faul's SparseBayes).
    fixed_beta : bool, default=False
        Keep ``beta = beta_init`` instead of re-estimating it.
    alpha_prior, beta_prior : (shape, rate), default=(0, 0)
        Gamma hyperpriors on ``alpha_i`` and ``beta`` over ``log alpha``, ``log beta`` (the
        convention of :func:`~bayes_rvm.evidence.gaussian.fit_mackay`); the objective is then the
        log evidence plus their log densities, and the single-alpha optimum is the best positive
        root of a cubic, solved exactly. ``(nu/2, nu/2)`` on alpha is the Student-t prior. A shape
        ``a > 0`` needs a rate ``b > 0`` (else the objective is unbounded as ``alpha -> inf``).
    free : sequence of int, default=()
        Unregularised columns (e.g. the bias): always in the model, never re-estimated. Their
        prior precision is ``1e-10 * ||phi_i||^2 / mean(T^2) / N`` instead of 0, a prior standard
        deviation 1e5 times the scale of a weight that fits the targets: as good as flat, but it
        keeps the log evidence finite (``log alpha_i`` enters it as a constant).
    candidates : sequence of int, optional
        Columns allowed to enter the model (default: every non-zero column). Columns that are
        active in ``alpha_init`` may stay even when not listed, but are not re-added once deleted.
    max_iter : int, default=10000
        Cap on the number of steps (additions, re-estimations, deletions, noise updates).
        Reaching it warns with :class:`~sklearn.exceptions.ConvergenceWarning`.
    tol : float, default=1e-6
        Converged when no addition or deletion is worthwhile, every active ``log alpha`` is within
        ``tol`` of its single-alpha optimum, and a noise step changes ``log beta`` by less than
        ``tol``.
    beta_update_every : int, default=5
        After the first 10 steps, a noise step after every ``beta_update_every``-th step; also
        whenever the alphas have converged. A noise step is the fixed-point update
        ``beta = (N D - D sum(gamma) + 2c) / (||T - Phi M||^2 + 2d)``, an ascent direction of the
        objective, shortened in ``log beta`` until the exact objective does not decrease; it is
        followed by a full refactorisation of the posterior.
    beta_warmup : {"hold", "update"}, default="hold"
        The noise during the first 10 steps. ``"hold"`` keeps ``beta_init`` while the model
        gathers its first basis functions: a noise estimate from a model of one or two functions
        counts the unexplained signal as noise, and from such an estimate no addition may be worth
        its cost, a poor local optimum (on sinc with an rbf width of 6 it costs about 40 nats and
        triples the test error). ``"update"`` takes a noise step after each of those steps, the
        schedule of SparseBayes and fastrvm (use it to reproduce their fits).
    priority : {"delete", "add"} or None, default="delete"
        Take any worthwhile deletion (or addition) before other steps; None takes the step of
        largest gain. Deleting first keeps the model small, which is what makes the steps cheap.
    alignment_threshold : float, default=1e-3
        A candidate whose column has cosine above ``1 - alignment_threshold`` with an active column
        is not added (its addition is numerically a re-estimation of the other); it becomes a
        candidate again once no such column is in the model. 0 turns the test off. ``reason``
        ends with the number of candidates set aside at the end, if any.
    callback : callable, optional
        Called after every step with a dict: ``step``, ``action``, ``objective``, ``gain``,
        ``n_active``, ``beta``, ``active`` (column indices, in model order) and ``alpha`` (their
        precisions). Returning True stops the fit (``reason`` says so, and it counts as converged).
    progress : bool, default=False
        Show a tqdm progress bar with the number of active columns and the objective.
    alpha_init : ndarray of shape (M,), optional
        Starting precisions with ``inf`` for columns out of the model (e.g. the ``alpha`` of another
        fit); default: start from the one candidate best aligned with the targets. Without free
        columns the last column in the model is never deleted.

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
    step costs O(K^2 M + K^3). The Gamma hyperprior is handled here, not routed to
    :func:`~bayes_rvm.evidence.gaussian.fit_mackay`: the same steps use its exact single-alpha
    optimum. As in ``fit_mackay``, the hyperprior counts only for the columns in the model.
    """
    Phi = np.asarray(Phi)
    if Phi.ndim != 2 or Phi.dtype != np.float64:
        raise ValueError(
            f"Phi must be a 2-D float64 array (it is not copied), got {Phi.ndim}-D {Phi.dtype}."
        )
    N, M = Phi.shape
    if N < 1 or M < 1:
        raise ValueError(f"Phi must have at least one row and one column, got shape {Phi.shape}.")
    T = np.asarray(T, dtype=np.float64)
    if T.ndim not in (1, 2) or T.shape[0] != N:
        raise ValueError(f"T must have shape ({N},) or ({N}, D), got {T.shape}.")
    T = T[:, None] if T.ndim == 1 else T
    D = T.shape[1]
    if D < 1 or not np.all(np.isfinite(T)):
        raise ValueError("T must be finite with at least one output.")
    a, b = _validate_prior("alpha_prior", alpha_prior)
    c, d = _validate_prior("beta_prior", beta_prior)
    if a > 0 and b == 0:
        # l(alpha) then grows like a log(alpha) without bound: no column would ever leave.
        raise ValueError(
            "alpha_prior with shape > 0 needs rate > 0 in fit_sequential: with rate 0 the "
            "objective grows without bound as alpha -> inf. Use fit_mackay for that prior."
        )
    if not isinstance(max_iter, int | np.integer) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}.")
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be positive, got {tol!r}.")
    if not isinstance(beta_update_every, int | np.integer) or beta_update_every < 1:
        raise ValueError(
            f"beta_update_every must be a positive integer, got {beta_update_every!r}."
        )
    if beta_warmup not in ("hold", "update"):
        raise ValueError(f"beta_warmup must be 'hold' or 'update', got {beta_warmup!r}.")
    if priority not in ("delete", "add", None):
        raise ValueError(f"priority must be 'delete', 'add' or None, got {priority!r}.")
    if not (0 <= alignment_threshold < 1):
        raise ValueError(f"alignment_threshold must be in [0, 1), got {alignment_threshold!r}.")
    if callback is not None and not callable(callback):
        raise ValueError("callback must be callable.")

    tt = float(np.sum(T * T))
    if beta_init is None:
        var = float(np.var(T))
        beta_init = 100.0 / var if var > 0 else 1.0
    beta = float(beta_init)
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta_init must be finite and positive, got {beta_init!r}.")
    beta_max = BETA_MAX * D * N / max(tt, 1e-300)

    with (
        _one_blas_thread(),
        np.errstate(divide="ignore", invalid="ignore", over="ignore"),
    ):
        # The two passes over Phi that everything else is built from.
        dd = np.einsum("ij,ij->j", Phi, Phi)
        PT = Phi.T @ T
        if not (np.all(np.isfinite(dd)) and np.all(np.isfinite(PT))):
            raise ValueError("Phi must be finite.")
        return _fit(
            Phi,
            N,
            M,
            D,
            dd,
            PT,
            tt,
            beta,
            beta_max,
            (a, b),
            (c, d),
            free,
            candidates,
            max_iter,
            tol,
            (beta_update_every, beta_warmup == "update"),
            priority,
            alignment_threshold,
            callback,
            progress,
            alpha_init,
            fixed_beta,
        )


def _fit(
    Phi,
    N,
    M,
    D,
    dd,
    PT,
    tt,
    beta,
    beta_max,
    ab,
    cd,
    free,
    candidates,
    max_iter,
    tol,
    noise_schedule,
    priority,
    alignment_threshold,
    callback,
    progress,
    alpha_init,
    fixed_beta,
) -> EvidenceFit:
    a, b = ab
    c, d = cd
    beta_update_every, update_in_warmup = noise_schedule
    free_idx = np.unique(_as_index_array("free", free, M))
    if free_idx.size and np.any(dd[free_idx] == 0):
        raise ValueError("a free column is identically zero.")
    if candidates is None:
        allowed = np.ones(M, dtype=bool)
    else:
        cand = _as_index_array("candidates", candidates, M)
        if cand.size == 0:
            raise ValueError("candidates must not be empty.")
        allowed = np.zeros(M, dtype=bool)
        allowed[cand] = True
    allowed &= dd > 0
    allowed[free_idx] = False
    addable = allowed.copy()  # allowed, out of the model and not set aside as aligned

    st = _State(Phi, PT, dd, tt, N, D, beta, ab)
    msq = max(tt / (N * D), 1e-300)
    for j in free_idx:
        alpha_free = FREE_ALPHA_FACTOR * dd[j] / (N * msq)
        st.append(int(j), alpha_free, True, st.column_products(st.column(int(j))))

    if alpha_init is not None:
        ai = np.asarray(alpha_init, dtype=np.float64)
        if ai.shape != (M,) or np.any(np.isnan(ai)) or np.any(ai <= 0):
            raise ValueError(f"alpha_init must have shape ({M},), positive, inf for out.")
        start = np.flatnonzero(np.isfinite(ai))
        start = start[~np.isin(start, free_idx)]
        if np.any(dd[start] == 0):
            raise ValueError("alpha_init makes an identically zero column active.")
        if start.size == 0 and free_idx.size == 0:
            raise ValueError("alpha_init must have at least one finite entry.")
        for j in start:
            st.append(int(j), float(ai[j]), False, st.column_products(st.column(int(j))))
        addable[start] = False
        st.refresh()
        init_action = "init " + ",".join(str(int(j)) for j in start) if start.size else "init"
    else:
        if not addable.any():
            raise ValueError("there is no non-zero candidate column to fit with.")
        if st.K:
            st.refresh()
        # Tipping and Faul's start: the candidate of largest normalised projection on what the
        # free columns leave unexplained, at its single-alpha optimum.
        score = np.where(addable, np.sum(st.Q**2, axis=1) / st.S, -np.inf)
        j = int(np.argmax(score))
        s_j = float(st.S[j])
        q2_j = float(np.sum(st.Q[j] ** 2))
        alpha_j = float(_optimal_alpha(s_j, q2_j, D, a, b)[0])
        if not np.isfinite(alpha_j):
            alpha_j = s_j  # nothing is worth adding at this beta; the steps sort it out
        st.append(j, alpha_j, False, st.column_products(st.column(j)))
        addable[j] = False
        st.refresh()
        init_action = f"init {j}"

    # A candidate (nearly) parallel to an active column would only re-estimate that one, in a
    # numerically singular way: it is set aside while such a column is in the model. Cosines
    # with the active columns come from their rows Phi^T phi_k, so this costs O(M) per addition
    # or deletion; ``n_parallel`` counts the active columns each candidate is aligned with.
    n_parallel = np.zeros(M, dtype=np.intp)
    root_dd = np.sqrt(dd)

    def aligned(p: int) -> np.ndarray:
        """Columns whose cosine with active row ``p`` exceeds ``1 - alignment_threshold``."""
        cut = (1.0 - alignment_threshold) * root_dd[st.idx[p]]
        return np.abs(st.C[p]) > cut * root_dd

    if alignment_threshold > 0:
        for p in range(st.K):
            n_parallel += aligned(p)
        addable &= n_parallel == 0
    no_prior = not a and not b

    def exact_objective() -> float:
        return st.log_ev + st.prior_term() + c * math.log(st.beta) - d * st.beta

    objective = exact_objective()
    trace = [objective]
    actions = [init_action]

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="fit_sequential", unit="step", leave=False)

    def noise_step() -> tuple[bool, float]:
        """One safeguarded fixed-point step of beta; returns (accepted, |change of log beta|)."""
        nonlocal objective
        gamma_sum = st.K - float(st.alpha @ st.Sigma.diagonal())
        PTa = PT[st.idx]
        sse = max(float(tt - np.vdot(st.mu, 2.0 * PTa - st.G @ st.mu)), 0.0)
        target = (N * D - D * gamma_sum + 2 * c) / max(sse + 2 * d, 1e-300)
        target = min(max(target, 1e-300), beta_max)
        step = math.log(target) - math.log(st.beta)
        change = abs(step)
        prior = st.prior_term()
        # The fixed-point step points uphill (its sign is that of the derivative), so shortening
        # it must end in an increase; exact values are compared at both ends.
        base = (st.log_ev if fresh else st.factor(st.beta)[1]) + prior
        base += c * math.log(st.beta) - d * st.beta
        while abs(step) > 1e-13:
            trial = st.beta * math.exp(step)
            factored = st.factor(trial)
            new_obj = factored[1] + prior + c * math.log(trial) - d * trial
            if new_obj >= base:
                st.beta = trial
                st.refresh(factored)
                objective = new_obj
                return True, change
            step *= 0.25
        return False, change

    def take_noise_step() -> bool:
        """A scheduled noise step; True when the callback asks to stop."""
        nonlocal n_steps, fresh, last_change, newton_ok
        accepted, last_change = noise_step()
        if not accepted:
            return False
        n_steps += 1
        fresh = newton_ok = True
        return record("noise", 0.0)

    def noise_due() -> bool:
        if fixed_beta:
            return False
        if n_steps <= _BETA_WARMUP:
            return update_in_warmup
        return n_steps % beta_update_every == 0

    def guard(p: int, deleted: bool) -> None:
        """Refactorise when the rank-one updates have drifted from ``H Sigma = I``."""
        nonlocal objective, fresh
        if st.Sigma[p, p] <= 0 or (
            (deleted or n_steps % 4 == 0)
            and st.column_residual(p) > max(1e-10, 100 * st.residual_base)
        ):
            st.refresh()
            objective = exact_objective()
            fresh = True

    def newton_step() -> float | None:
        """Joint Newton step on the log alphas of the regularised columns, if it is uphill.

        Single re-estimations are coordinate ascent, which crawls when the alphas are coupled;
        near the optimum one Newton step does the work of hundreds. The step is taken only where
        the Hessian is negative definite and only if the exact objective rises; returns the gain.
        """
        nonlocal objective
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
        prior_term = c * math.log(st.beta) - d * st.beta
        base = (st.log_ev if fresh else st.factor(st.beta)[1]) + st.prior_term() + prior_term
        for _ in range(3):
            if st.n_free:
                st.alpha = old.copy()
                st.alpha[reg] = al * np.exp(du)
            else:
                st.alpha = al * np.exp(du)
            factored = st.factor(st.beta)
            new_obj = factored[1] + st.prior_term() + prior_term
            if new_obj > base:
                break
            du *= 0.25
        else:
            st.alpha = old
            return None
        st.refresh(factored)
        gain = new_obj - objective
        objective = new_obj
        return gain

    def record(action: str, gain: float) -> bool:
        trace.append(objective)
        actions.append(action)
        if bar is not None:
            bar.update(1)
            if len(actions) % 10 == 0:
                bar.set_postfix(active=st.K, objective=f"{objective:.8g}", refresh=False)
        if callback is None:
            return False
        info = {
            "step": len(actions) - 1,
            "action": action,
            "objective": objective,
            "gain": gain,
            "n_active": st.K,
            "beta": st.beta,
            "active": st.idx.copy(),
            "alpha": st.alpha.copy(),
        }
        return callback(info) is True

    converged = False
    reason = f"reached max_iter={max_iter}"
    beta_settled = fixed_beta
    fresh = True  # statistics were recomputed from scratch since the last step
    n_steps = 0
    newton_ok = True
    last_change = np.inf
    span_tol = _SPAN_RTOL * dd
    single_ok = free_idx.size > 0  # may the last regularised column be deleted?
    try:
        while n_steps < max_iter:
            K = st.K
            n_reg = K - st.n_free
            # --- best addition (vectorised over M) ---------------------------------------------
            S, Q = st.S, st.Q
            q2 = np.square(Q[:, 0]) if D == 1 else np.einsum("ij,ij->i", Q, Q)
            ok = S > st.beta * span_tol
            ok &= addable
            if no_prior:
                # The gain D/2 (x - log(1 + x)), x = |q|^2 / (D S) - 1, increases with |q|^2 / S:
                # the best candidate is found on the ratio, and only its gain is computed.
                score = np.divide(q2, S, out=np.zeros(M), where=ok)
            else:
                score = _optimal_alpha(S, q2, D, a, b)[1]
                score[~ok] = 0.0  # gains of candidates worth adding are positive
            j_add = int(score.argmax())
            if no_prior:
                x = float(score[j_add]) / D - 1.0
                g_add = 0.5 * D * (x - math.log1p(x)) if x > 0 else -math.inf
            else:
                g_add = float(score[j_add])
            min_gain = _GAIN_RTOL * (1.0 + abs(objective))
            any_add = g_add > min_gain

            # --- re-estimation and deletion of the active columns (vectorised over K) ----------
            al = st.alpha
            s_a, q2_a = st.factors_active()
            if no_prior:
                theta = q2_a - D * s_a
                finite = theta > 0
                al_opt = D * s_a * s_a / theta  # meaningless where not finite: masked below
            else:
                al_opt, l_opt = _optimal_alpha(s_a, q2_a, D, a, b)
                finite = np.isfinite(al_opt)
            if st.n_free:
                reest = finite & ~st.is_free
                deletable = ~(finite | st.is_free)
            else:
                reest, deletable = finite, ~finite
            some_out = bool(deletable.any())
            any_del = some_out and (single_ok or n_reg > 1)  # never empty the model
            masked = some_out or st.n_free > 0  # not every active column is re-estimated
            dlog = np.abs(np.log(al_opt / al))
            if masked:
                dlog[~reest] = 0.0
            max_dlog = float(dlog.max()) if K else 0.0

            if not any_del and not any_add and max_dlog < tol:
                if not beta_settled:
                    accepted, last_change = noise_step()
                    # A rejected step means no ascent is left along beta: it is at its optimum.
                    beta_settled = last_change < tol or not accepted
                    if accepted:
                        n_steps += 1
                        fresh = newton_ok = True
                        if record("noise", 0.0):
                            converged, reason = True, "stopped by callback"
                            break
                    continue
                if not fresh:
                    # Confirm on statistics free of accumulated rounding before stopping.
                    st.refresh()
                    objective = exact_objective()
                    fresh = True
                    continue
                converged = True
                reason = (
                    f"no worthwhile addition or deletion, max |change of log alpha| < tol={tol:g}"
                    + ("" if fixed_beta else " and |change of log beta| < tol")
                )
                break

            # --- choose and take the step ----------------------------------------------------
            if not any_add and not any_del and newton_ok and n_reg > 1:
                gain = newton_step()
                if gain is not None:
                    n_steps += 1
                    fresh = True
                    beta_settled = fixed_beta
                    if record("reestimate all", gain) or (
                        n_steps < max_iter and noise_due() and take_noise_step()
                    ):
                        converged, reason = True, "stopped by callback"
                        break
                    continue
                newton_ok = False  # until the model or the noise changes
            options = []
            if any_del:
                l_now = _log_gain(s_a[deletable], q2_a[deletable], al[deletable], D, a, b)
                k = int(np.argmax(-l_now))
                options.append(("delete", float(-l_now[k]), int(np.flatnonzero(deletable)[k])))
            if any_add:
                options.append(("add", g_add, j_add))
            if max_dlog >= tol and not (
                (priority == "delete" and any_del) or (priority == "add" and any_add)
            ):
                # Gains of re-estimation, needed only where the step is chosen by its gain.
                if no_prior:
                    # l(alpha') - l(alpha) in a form without cancellation between the two terms.
                    al_new = np.where(reest, al_opt, al) if masked else al_opt
                    dal = al - al_new
                    den = al + s_a
                    gain_re = 0.5 * (
                        q2_a * dal / ((al_new + s_a) * den)
                        - D * np.log1p(s_a * dal / (al_new * den))
                    )
                else:
                    gain_re = l_opt - _log_gain(s_a, q2_a, al, D, a, b)
                if masked:
                    gain_re[~reest] = -np.inf
                p_re = int(np.argmax(gain_re))
                g_re = float(gain_re[p_re])
                if g_re <= min_gain:
                    # Near convergence the gains are rounding noise: move the farthest alpha.
                    p_re = int(np.argmax(dlog))
                    g_re = max(float(gain_re[p_re]), 0.0)
                options.append(("reestimate", g_re, p_re))
            if priority == "delete" and any_del:
                kind, gain, where = options[0]
            elif priority == "add" and any_add:
                kind, gain, where = next(o for o in options if o[0] == "add")
            else:
                kind, gain, where = max(options, key=lambda o: o[1])

            if kind == "add":
                j = where
                if no_prior:
                    s_j = float(S[j])
                    alpha_j = D * s_j * s_j / (float(q2[j]) - D * s_j)
                else:
                    alpha_j = float(_optimal_alpha(S[j], q2[j], D, a, b)[0])
                st.add(j, alpha_j, st.column_products(st.column(j)))
                addable[j] = False
                p = st.K - 1
                if alignment_threshold > 0:
                    hit = aligned(p)
                    n_parallel += hit
                    addable[hit] = False
                action = f"add {j}"
            elif kind == "reestimate":
                p = where
                st.reestimate(p, float(al_opt[p]))
                action = f"reestimate {st.idx[p]}"
            else:
                p = where
                j = int(st.idx[p])
                if alignment_threshold > 0:
                    n_parallel -= aligned(p)
                st.delete(p)
                np.logical_and(allowed, n_parallel == 0, out=addable)
                addable[st.idx] = False
                p = min(p, st.K - 1)
                action = f"delete {j}"
            n_steps += 1
            fresh = False
            beta_settled = fixed_beta
            objective += gain
            guard(p, kind == "delete")
            if record(action, gain):
                converged, reason = True, "stopped by callback"
                break

            newton_ok = newton_ok or kind != "reestimate"
            if n_steps < max_iter and noise_due() and take_noise_step():
                converged, reason = True, "stopped by callback"
                break
    finally:
        if bar is not None:
            bar.close()

    n_aside = int(np.count_nonzero(allowed & (n_parallel > 0) & (st.pos < 0)))
    if n_aside:
        reason += f"; {n_aside} candidates set aside as aligned with an active column"
    order = np.argsort(st.idx)
    idx = st.idx[order]
    alpha = st.alpha[order]
    post = gaussian_posterior(st.G[np.ix_(order, order)], PT[idx], tt, N, alpha, st.beta)
    alpha_full = np.full(M, np.inf)
    alpha_full[idx] = alpha
    if not converged:
        warnings.warn(
            f"sequential evidence maximisation did not converge in {max_iter} steps "
            f"({idx.size} active, last |change of log beta| = {last_change:.2e}); returning the "
            "last estimate. Increase max_iter or loosen tol.",
            ConvergenceWarning,
            stacklevel=3,
        )
    return EvidenceFit(
        alpha=alpha_full,
        beta=float(st.beta),
        active=idx,
        mean=post.mean,
        chol=post.chol,
        log_evidence=post.log_evidence,
        trace=np.asarray(trace),
        n_iter=n_steps,
        converged=converged,
        reason=reason,
        actions=tuple(actions),
    )
