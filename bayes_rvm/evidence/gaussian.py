"""Gaussian-likelihood sparse Bayesian learning: posterior statistics, log evidence, MacKay updates.

Notation follows Tipping (2001) and Bishop (2006, section 7.2): design matrix ``Phi`` (N x M),
targets ``T`` (N x D, the D outputs share one ``alpha`` per basis function and one noise precision
``beta``), prior ``w_i ~ N(0, 1/alpha_i)``, posterior precision ``H = A + beta Phi^T Phi``
(``Sigma = H^-1``), posterior mean ``m = beta Sigma Phi^T t`` and well-determinedness
``gamma_i = 1 - alpha_i Sigma_ii``.

The optional hyperpriors are Gamma(a, b) densities on ``alpha_i`` and Gamma(c, d) on ``beta``,
taken as densities over ``log alpha`` and ``log beta`` (the MAP-II convention of Tipping 2001 and
scikit-learn's ``ARDRegression``); the fixed-point updates are then

    alpha_i = (D gamma_i + 2a) / (sum_d m_id^2 + 2b)
    beta    = (N D - D sum_i gamma_i + 2c) / (||T - Phi M||^2 + 2d)

and ``a = b = nu / 2`` gives the Student-t prior ``w_i ~ t_nu(0, 1)`` (Tipping 2001;
Prince 2012, chapter 8). With ``a = b = c = d = 0`` (the default) they are the plain type-II
updates.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.evidence.log_evidence import WARN_SKIP, cholesky, gaussian_log_evidence
from bayes_rvm.evidence.options import EvidenceOptions, beta_ceiling, merge_options
from bayes_rvm.evidence.problem import Problem
from bayes_rvm.evidence.record import Recorder
from bayes_rvm.evidence.result import EvidenceFit, GaussianWeights
from bayes_rvm.evidence.single_basis import log_hyperprior

__all__ = [
    "KEPT_ONE",
    "EvidenceFit",
    "GaussianPosterior",
    "MacKayStop",
    "WeightPosterior",
    "fit_mackay",
    "gaussian_posterior",
    "keep_one",
    "log_hyperprior",
    "mackay_engine",
    "weight_posterior",
]


@dataclass(frozen=True)
class GaussianPosterior:
    """Posterior statistics of the active weights for fixed hyperparameters.

    Attributes
    ----------
    mean : ndarray of shape (K, D)
        Posterior means ``m`` of the K active weights for each of the D outputs.
    chol : ndarray of shape (K, K)
        Lower Cholesky factor ``L`` of the posterior precision ``H = A + beta Phi^T Phi``
        (``Sigma = L^-T L^-1``).
    sigma_diag : ndarray of shape (K,)
        Diagonal of ``Sigma``.
    gamma : ndarray of shape (K,)
        ``gamma_i = 1 - alpha_i Sigma_ii``.
    sse : float
        Residual sum of squares ``||T - Phi M||^2`` summed over outputs.
    log_evidence : float
        ``ln p(T | alpha, beta)`` (Tipping 2001; Bishop 2006, section 7.2.1; summed over
        outputs).
    """

    mean: np.ndarray
    chol: np.ndarray
    sigma_diag: np.ndarray
    gamma: np.ndarray
    sse: float
    log_evidence: float


def gaussian_posterior(
    gram: np.ndarray,
    phi_t: np.ndarray,
    tt: float,
    n_samples: int,
    alpha: np.ndarray,
    beta: float,
) -> GaussianPosterior:
    """Posterior statistics and log evidence from sufficient statistics of the active basis.

    Parameters
    ----------
    gram : ndarray of shape (K, K)
        ``Phi_a^T Phi_a`` for the active columns.
    phi_t : ndarray of shape (K, D)
        ``Phi_a^T T``.
    tt : float
        ``sum(T**2)`` over all outputs.
    n_samples : int
        N.
    alpha : ndarray of shape (K,)
        Prior precisions of the active weights.
    beta : float
        Noise precision.
    """
    K, D = phi_t.shape
    H = beta * gram
    H.flat[:: K + 1] += alpha
    L = cholesky(H)
    mean = lapack.dpotrs(L, phi_t, lower=1)[0]
    mean *= beta
    Linv = lapack.dtrtri(L, lower=1)[0]
    sigma_diag = (Linv * Linv).sum(axis=0)
    gamma = 1.0 - alpha * sigma_diag
    # ||T - Phi m||^2 from the sufficient statistics; clipped at 0 against cancellation.
    sse = max(float(tt - ((2.0 * phi_t - gram @ mean) * mean).sum()), 0.0)
    quad = beta * sse + float(alpha @ (mean * mean).sum(axis=1))
    log_ev = gaussian_log_evidence(L, alpha, beta, n_samples, quad, D)
    return GaussianPosterior(mean, L, sigma_diag, gamma, sse, log_ev)


@dataclass(frozen=True)
class WeightPosterior:
    """Gaussian posteriors of the weights, batched over leading axes (draws of the hyperparameters).

    ``H = A + beta Phi^T Phi`` is equilibrated by its diagonal, ``H = D R D`` with
    ``D = diag(sqrt(diag H))``, and ``R = L L^T``: a draw may hold alphas many orders apart
    (weights pinned at zero next to free ones), and the unit-diagonal ``R`` keeps the
    factorisation accurate. ``Sigma = H^-1 = D^-1 L^-T L^-1 D^-1``.

    Attributes
    ----------
    chol : ndarray of shape (..., K, K)
        ``L``, lower.
    scale : ndarray of shape (..., K)
        ``diag(D)``.
    mean : ndarray of shape (..., K, D)
        Posterior means ``m = beta Sigma Phi^T T``.
    beta : ndarray of shape (...)
    """

    chol: np.ndarray
    scale: np.ndarray
    mean: np.ndarray
    beta: np.ndarray

    def whiten(self, v: np.ndarray) -> np.ndarray:
        """``L^-1 D^-1 v`` for ``v`` of shape (..., K, n): ``Sigma = G^T G`` with ``G = L^-1 D^-1``
        (``G v`` has squared column norms ``v^T Sigma v``)."""
        return linalg.solve_triangular(
            self.chol, v / self.scale[..., :, None], lower=True, check_finite=False
        )

    def chol_inverse(self) -> np.ndarray:
        """``L^-1`` of shape (..., K, K), by triangular solves."""
        eye = np.broadcast_to(np.eye(self.chol.shape[-1]), self.chol.shape)
        return linalg.solve_triangular(self.chol, eye, lower=True, check_finite=False)

    def inverse_factor(self) -> np.ndarray:
        """``G = L^-1 D^-1`` of shape (..., K, K) (``Sigma = G^T G``)."""
        return self.chol_inverse() / self.scale[..., None, :]

    def sigma_diag(self) -> np.ndarray:
        """Diagonal of ``Sigma``, shape (..., K)."""
        G = self.inverse_factor()
        return np.einsum("...ij,...ij->...j", G, G)

    def log_det(self) -> np.ndarray:
        """``ln |H|``, shape (...)."""
        diag = np.diagonal(self.chol, axis1=-2, axis2=-1)
        return 2.0 * (np.log(diag).sum(axis=-1) + np.log(self.scale).sum(axis=-1))

    def draw(self, z: np.ndarray) -> np.ndarray:
        """``m + D^-1 L^-T z``: weights drawn from the posterior, given standard normal ``z`` of
        the shape of ``mean``."""
        noise = linalg.solve_triangular(self.chol, z, lower=True, trans="T", check_finite=False)
        return self.mean + noise / self.scale[..., :, None]


def weight_posterior(gram, phi_t, alpha, beta) -> WeightPosterior:
    """The Gaussian posterior of the weights from ``Phi^T Phi``, ``Phi^T T``, alpha and beta.

    The one home of this algebra: the marginal-likelihood Op, the weight draws and the predictive
    of MCMC draws call it. Batched: leading axes of ``alpha`` (and of ``beta``, ``gram`` and
    ``phi_t`` where they have them) are draws, factored at once by LAPACK.

    Parameters
    ----------
    gram : ndarray of shape (..., K, K)
        ``Phi^T Phi`` of the columns in the model.
    phi_t : ndarray of shape (..., K, D)
        ``Phi^T T``.
    alpha : ndarray of shape (..., K)
        Prior precisions (positive).
    beta : float or ndarray of shape (...)
        Noise precisions (positive).

    Returns
    -------
    WeightPosterior

    Raises
    ------
    numpy.linalg.LinAlgError
        Where a precision matrix is not numerically positive definite.
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64)
    K = alpha.shape[-1]
    H = beta[..., None, None] * gram
    diag = np.arange(K)
    H[..., diag, diag] += alpha
    d = np.sqrt(H[..., diag, diag])
    L = np.linalg.cholesky(H / d[..., :, None] / d[..., None, :])
    u = linalg.solve_triangular(L, phi_t / d[..., :, None], lower=True, check_finite=False)
    mean = linalg.solve_triangular(L, u, lower=True, trans="T", check_finite=False)
    mean *= beta[..., None, None] / d[..., :, None]
    return WeightPosterior(L, d, mean, beta)


KEPT_ONE = "every basis function reached the pruning threshold; kept one"


def keep_one(new_alpha: np.ndarray, pruned: np.ndarray, threshold_alpha: float) -> bool:
    """Never prune the last basis function: keep the one of smallest alpha (arrays in place).

    Returns True when everything was about to be pruned (the re-estimation then stops).
    """
    if not pruned.all():
        return False
    best = int(np.argmin(new_alpha))
    pruned[best] = False
    new_alpha[best] = min(new_alpha[best], threshold_alpha)
    return True


class MacKayStop:
    """The re-estimation engines' stopping rule.

    Converged when no ``log alpha`` moved by ``tol`` or more and nothing was pruned, or when the
    objective changed by less than ``evidence_tol * (1 + |objective|)`` for ten iterations in a row
    (the updates of alphas on their way to infinity creep for thousands of iterations).
    """

    def __init__(self, tol: float, evidence_tol: float) -> None:
        self.tol, self.evidence_tol, self.stall = tol, evidence_tol, 0

    def __call__(self, trace: list[float], change: np.ndarray, pruned: np.ndarray) -> str | None:
        if not pruned.any() and change.max() < self.tol:
            return f"max |change of log alpha| < tol={self.tol:g}"
        flat = len(trace) > 1 and abs(trace[-1] - trace[-2]) < self.evidence_tol * (
            1 + abs(trace[-1])
        )
        self.stall = self.stall + 1 if flat else 0
        if self.stall >= 10:
            return f"objective stalled (relative change < {self.evidence_tol:g})"
        return None


def fit_mackay(
    Phi: np.ndarray, T: np.ndarray, *, options: EvidenceOptions | None = None, **settings
) -> EvidenceFit:
    """Maximise the evidence by MacKay's fixed-point re-estimation with pruning.

    Every column starts in the model (``alpha_init``, default 1.0) and each iteration sets
    ``alpha_i = (D gamma_i + 2a) / (sum_d m_id^2 + 2b)`` and ``beta`` by its own fixed point,
    pruning ``alpha_i > threshold_alpha``. Costs O(K^3) per iteration with all M columns active at
    the start: :func:`~bayes_rvm.evidence.fit_sequential` scales far better.

    Parameters
    ----------
    Phi : ndarray of shape (N, M) or SufficientStatistics
        Design matrix, float64 (not modified, not copied per iteration); or the problem's
        :class:`~bayes_rvm.basis.statistics.SufficientStatistics` (then ``T`` is None): the engine
        reads only ``Phi^T Phi``, ``Phi^T T``, ``T^T T`` and N.
    T : ndarray of shape (N,) or (N, D), or None
        Targets; D outputs share the alphas and the noise precision.
    options : EvidenceOptions, optional
        Settings (see :class:`~bayes_rvm.evidence.EvidenceOptions`); this engine reads
        ``alpha_prior``, ``beta_prior``, ``alpha_init``, ``beta_init`` (default ``1 / var(T)``),
        ``fixed_beta``, ``free``, ``candidates``, ``threshold_alpha``, ``tol``, ``evidence_tol``
        (default 1e-12), ``max_iter``, ``callback``, ``progress`` and ``gram``.
    **settings
        Fields of ``options`` to override.

    Returns
    -------
    EvidenceFit
        With a :class:`~bayes_rvm.evidence.GaussianWeights` posterior; ``actions`` are
        ``"init"`` and then one ``"reestimate all"`` per iteration.
    """
    opt = merge_options(options, settings)
    return mackay_engine(Problem.given(Phi, T, likelihood=opt.likelihood or "gaussian"), opt)


def mackay_engine(
    problem: Problem, options: EvidenceOptions, warm: EvidenceFit | None = None
) -> EvidenceFit:
    """MacKay's re-estimation (:func:`fit_mackay`) on ``problem``: the engine contract.

    ``warm``, a fit of the same targets at another kernel width, gives the noise precision to
    start from (unless the problem fixes it); the alphas start from ``options.alpha_init``.
    """
    return _MacKay(problem.view(options, "mackay", warm)).run()


class _MacKay:
    """State of MacKay re-estimation: the active block of the sufficient statistics."""

    def __init__(self, problem) -> None:
        opt = problem.options
        self.opt, self.problem = opt, problem
        N, _, D = problem.shape
        self.N, self.D = N, D
        self.ab, self.cd = opt.alpha_prior, opt.beta_prior
        self.alpha = alpha = problem.start_all()
        self.beta = problem.beta_init
        gram, phi_t_all = problem.sums()
        if gram is None:
            gram = problem.Phi.T @ problem.Phi if opt.gram is None else opt.gram
        self.tt = problem.tt
        self.beta_max = beta_ceiling(problem.spread, N * D)
        keep = np.isfinite(alpha)
        # The active block of the sufficient statistics, sliced again only when something is
        # pruned; free columns are never re-estimated nor pruned.
        self.idx = np.flatnonzero(keep)
        self.gram_a, self.pt_a = gram[np.ix_(self.idx, self.idx)], phi_t_all[self.idx]
        self.alpha_a = alpha[self.idx]
        self.is_free = np.isin(self.idx, problem.free)
        self.any_free = bool(problem.free.size)
        self.hyperprior = any(self.ab) or any(self.cd)

    def posterior(self) -> GaussianPosterior:
        return gaussian_posterior(self.gram_a, self.pt_a, self.tt, self.N, self.alpha_a, self.beta)

    def update(self, post: GaussianPosterior):
        """New alphas (and noise, set on ``self``); returns ``(new_alpha, change, pruned)``."""
        (a, b), (c, d), D = self.ab, self.cd, self.D
        m2 = (post.mean * post.mean).sum(axis=1)
        # No support (m_i = 0 or gamma_i <= 0, which rounding can produce) sends alpha_i to inf.
        support = (m2 + 2 * b > 0) & (D * post.gamma + 2 * a > 0)
        new_alpha = np.full_like(m2, np.inf)
        np.divide(D * post.gamma + 2 * a, m2 + 2 * b, out=new_alpha, where=support)
        if self.any_free:
            new_alpha[self.is_free] = self.alpha_a[self.is_free]
        change = np.abs(np.log(new_alpha / self.alpha_a))
        beta_change = 0.0
        if not self.opt.fixed_beta:
            dof = self.N * D - D * float(post.gamma.sum()) + 2 * c
            new_beta = min(max(dof, 1e-300) / max(post.sse + 2 * d, 1e-300), self.beta_max)
            beta_change, self.beta = abs(math.log(new_beta / self.beta)), new_beta
        pruned = new_alpha >= self.opt.threshold_alpha
        if not (a or b):
            # MacKay updates creep towards alpha = inf for thousands of iterations. Once the rest
            # (the other alphas and the noise) has settled, prune those whose evidence-optimal
            # alpha is infinite: Tipping & Faul's theta_i = |q_i|^2 - D s_i <= 0, which for a
            # basis in the model reads |m_i|^2 <= D gamma_i Sigma_ii (q_i = m_i / Sigma_ii,
            # s_i = gamma_i / Sigma_ii). Everything heading out at once means the noise estimate
            # is still far off (as at a noisy start), not that the fit has settled.
            heading_out = m2 <= D * post.gamma * post.sigma_diag
            if self.any_free:
                heading_out &= ~self.is_free
            tol = self.opt.tol
            if beta_change < tol and not heading_out.all() and np.all(change[~heading_out] < tol):
                pruned |= heading_out
        if self.any_free:
            pruned &= ~self.is_free
        return new_alpha, change, pruned

    def prune(self, pruned: np.ndarray) -> None:
        kept = ~pruned
        self.alpha[self.idx[pruned]] = np.inf
        self.idx, self.alpha_a, self.pt_a = self.idx[kept], self.alpha_a[kept], self.pt_a[kept]
        self.is_free = self.is_free[kept]
        self.gram_a = self.gram_a[np.ix_(kept, kept)]

    def snapshot(self) -> dict:
        return {
            "n_active": self.idx.size,
            "beta": self.beta,
            "active": self.idx.copy(),
            "alpha": self.alpha_a.copy(),
        }

    def run(self) -> EvidenceFit:
        opt = self.opt
        converged, reason = False, f"reached max_iter={opt.max_iter}"
        should_stop = MacKayStop(opt.tol, opt.evidence_tol)
        n_iter, action = 0, "init"
        with Recorder("fit_mackay", opt.callback, opt.progress) as rec:
            for n_iter in range(1, opt.max_iter + 1):  # noqa: B007 - reported after the loop
                post = self.posterior()
                objective = post.log_evidence
                if self.hyperprior:
                    objective += log_hyperprior(self.alpha_a, self.beta, self.ab, self.cd)
                if rec(action, objective, 0.0, self.snapshot):
                    converged, reason = True, "stopped by callback"
                    break
                new_alpha, change, pruned = self.update(post)
                if keep_one(new_alpha, pruned, opt.threshold_alpha):
                    converged, reason = True, KEPT_ONE
                stop = should_stop(rec.trace, change, pruned)
                self.alpha_a = new_alpha
                action = "reestimate all"
                if pruned.any():
                    action += f", prune {self.idx[pruned].tolist()}"
                    self.prune(pruned)
                if converged:
                    break
                if stop is not None:
                    converged, reason = True, stop
                    break
        self.alpha[self.idx] = self.alpha_a
        post = self.posterior()
        if not converged:
            warnings.warn(
                f"MacKay re-estimation did not converge in {opt.max_iter} iterations "
                f"(last max |change of log alpha| = {float(np.max(change)):.2e}); returning the "
                "last estimate. Increase max_iter or loosen tol.",
                ConvergenceWarning,
                skip_file_prefixes=WARN_SKIP,
            )
        return EvidenceFit(
            alpha=self.alpha,
            active=self.idx,
            posterior=GaussianWeights(post.mean, post.chol, self.beta),
            log_evidence=post.log_evidence,
            trace=np.asarray(rec.trace),
            n_iter=n_iter,
            converged=converged,
            reason=reason,
            actions=tuple(rec.actions),
        )
