"""Gaussian-likelihood sparse Bayesian learning: posterior statistics, log evidence, MacKay updates.

Notation follows the reference documents: design matrix ``Phi`` (N x M), targets ``T`` (N x D, the
D outputs share one ``alpha`` per basis function and one noise precision ``beta``), prior
``w_i ~ N(0, 1/alpha_i)``, posterior precision ``H = A + beta Phi^T Phi`` (``Sigma = H^-1``),
posterior mean ``m = beta Sigma Phi^T t`` and well-determinedness
``gamma_i = 1 - alpha_i Sigma_ii``.

The optional hyperpriors are Gamma(a, b) densities on ``alpha_i`` and Gamma(c, d) on ``beta``,
taken as densities over ``log alpha`` and ``log beta`` (the MAP-II convention of Tipping 2001 and
scikit-learn's ``ARDRegression``); the fixed-point updates are then

    alpha_i = (D gamma_i + 2a) / (sum_d m_id^2 + 2b)
    beta    = (N D - D sum_i gamma_i + 2c) / (||T - Phi M||^2 + 2d)

and ``a = b = nu / 2`` gives the Student-t prior ``w_i ~ t_nu(0, 1)`` (reference document 002,
eq. 6). With ``a = b = c = d = 0`` (the default) they are the plain type-II updates.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

__all__ = [
    "EvidenceFit",
    "GaussianPosterior",
    "fit_mackay",
    "gaussian_posterior",
    "log_hyperprior",
]

_LOG_2PI = math.log(2.0 * math.pi)
#: Largest noise precision relative to the targets' scale: an exact fit must not divide by zero.
BETA_MAX = 1e12


@dataclass(frozen=True)
class GaussianPosterior:
    """Posterior of the active weights for fixed hyperparameters.

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
        ``ln p(T | alpha, beta)`` (reference document 000, eq. 1.10, summed over outputs).
    """

    mean: np.ndarray
    chol: np.ndarray
    sigma_diag: np.ndarray
    gamma: np.ndarray
    sse: float
    log_evidence: float


@dataclass(frozen=True)
class EvidenceFit:
    """Result of a type-II (evidence) fit; free of any estimator or PyMC object.

    Attributes
    ----------
    alpha : ndarray of shape (M,)
        Prior precisions of all M basis functions; ``inf`` for pruned ones.
    beta : float
        Noise precision.
    active : ndarray of int, shape (K,)
        Indices of the retained basis functions (the relevance vectors), increasing.
    mean : ndarray of shape (K, D)
        Posterior mean weights of the active basis functions.
    chol : ndarray of shape (K, K)
        Lower Cholesky factor of the posterior precision of the active weights.
    log_evidence : float
        Log marginal likelihood at the returned hyperparameters.
    trace : ndarray of shape (n_iter,)
        Objective (log evidence plus log hyperprior) at each iteration.
    n_iter : int
        Iterations run.
    converged : bool
        Whether the stopping rule was met before ``max_iter``.
    reason : str
        Why the iteration stopped.
    actions : tuple of str
        What each step did (the sequential engine records add / re-estimate / delete).
    """

    alpha: np.ndarray
    beta: float
    active: np.ndarray
    mean: np.ndarray
    chol: np.ndarray
    log_evidence: float
    trace: np.ndarray
    n_iter: int
    converged: bool
    reason: str
    actions: tuple[str, ...] = field(default=())

    @property
    def covariance(self) -> np.ndarray:
        """Posterior covariance ``Sigma`` of the active weights (K x K)."""
        inv = linalg.solve_triangular(self.chol, np.eye(self.chol.shape[0]), lower=True)
        return inv.T @ inv

    def predict(self, phi_active: np.ndarray, *, with_noise: bool = True):
        """Predictive mean (n, D) and variance (n,) for rows of the active design matrix.

        The variance is ``1/beta + phi^T Sigma phi`` (reference document 000, eq. 2.2), or only the
        weight-uncertainty part when ``with_noise`` is False.
        """
        mean = phi_active @ self.mean
        v = linalg.solve_triangular(self.chol, phi_active.T, lower=True, check_finite=False)
        var = np.einsum("ij,ij->j", v, v)
        if with_noise:
            var = var + 1.0 / self.beta
        return mean, var


def log_hyperprior(alpha: np.ndarray, beta: float, alpha_prior, beta_prior) -> float:
    """Log Gamma hyperprior density over ``log alpha`` and ``log beta`` (up to a constant)."""
    a, b = alpha_prior
    c, d = beta_prior
    out = float(np.sum(a * np.log(alpha) - b * alpha))
    return out + float(c * np.log(beta) - d * beta)


@functools.cache
def _blas_controller():
    # Built once, after NumPy and SciPy have loaded their BLAS libraries.
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _one_blas_thread():
    """Limit BLAS to one thread (a context manager) for the sequential engines.

    Their operands are thin (N x K, K x K) and their O(N M) matrix-vector products are
    memory-bound: a second thread gains little, while thread hand-offs on a busy 2-core machine
    made the small products and solves 10-100x slower (measured).
    """
    return _blas_controller().limit(limits=1, user_api="blas")


def _cholesky(H: np.ndarray) -> np.ndarray:
    """Cholesky factor of an SPD matrix, equilibrated by its diagonal for accuracy.

    Falls back to a small diagonal jitter, with a warning, when rounding makes H indefinite.
    """
    d = np.sqrt(H.diagonal())
    Hs = H / d[:, None] / d
    # LAPACK directly: this runs once per iteration of every engine, mostly on small matrices.
    Ls, info = lapack.dpotrf(Hs, lower=1)
    jitter = 0.0
    while info != 0:
        jitter = 100.0 * jitter if jitter else 1e-12
        if jitter > 1e-2:
            raise linalg.LinAlgError("posterior precision is not positive definite")
        Ls, info = lapack.dpotrf(Hs + jitter * np.eye(H.shape[0]), lower=1)
    if jitter:
        warnings.warn(
            f"posterior precision was numerically indefinite; added relative jitter {jitter:.0e}. "
            "The basis is nearly collinear: consider a smaller kernel width or fewer centres.",
            RuntimeWarning,
            stacklevel=3,
        )
    return Ls * d[:, None]


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
    L = _cholesky(H)
    mean = lapack.dpotrs(L, phi_t, lower=1)[0]
    mean *= beta
    Linv = lapack.dtrtri(L, lower=1)[0]
    sigma_diag = (Linv * Linv).sum(axis=0)
    gamma = 1.0 - alpha * sigma_diag
    # ||T - Phi m||^2 from the sufficient statistics; clipped at 0 against cancellation.
    sse = max(float(tt - ((2.0 * phi_t - gram @ mean) * mean).sum()), 0.0)
    log_det_H = 2.0 * float(np.log(L.diagonal()).sum())
    log_ev = (
        D
        * (
            0.5 * n_samples * (math.log(beta) - _LOG_2PI)
            + 0.5 * float(np.log(alpha).sum())
            - 0.5 * log_det_H
        )
        - 0.5 * beta * sse
        - 0.5 * float(alpha @ (mean * mean).sum(axis=1))
    )
    return GaussianPosterior(mean, L, sigma_diag, gamma, sse, log_ev)


class _MacKayStop:
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


def _validate_prior(name: str, prior) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in prior)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a pair (shape, rate) of non-negative floats, got {prior!r}."
        ) from None
    if not (np.isfinite(a) and np.isfinite(b) and a >= 0 and b >= 0):
        raise ValueError(
            f"{name} must be a pair (shape, rate) of non-negative floats, got {prior!r}."
        )
    return a, b


def fit_mackay(
    Phi: np.ndarray,
    T: np.ndarray,
    *,
    alpha_init: float | np.ndarray = 1.0,
    beta_init: float | None = None,
    fixed_beta: bool = False,
    alpha_prior: tuple[float, float] = (0.0, 0.0),
    beta_prior: tuple[float, float] = (0.0, 0.0),
    threshold_alpha: float = 1e9,
    tol: float = 1e-6,
    evidence_tol: float = 1e-12,
    max_iter: int = 10_000,
    candidates: np.ndarray | None = None,
    gram: np.ndarray | None = None,
) -> EvidenceFit:
    """Maximise the evidence by MacKay's fixed-point re-estimation with pruning.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix (not modified, not copied per iteration).
    T : ndarray of shape (N,) or (N, D)
        Targets; D outputs share the alphas and the noise precision.
    alpha_init : float or ndarray of shape (M,), default=1.0
        Starting prior precisions (the evidence is multimodal: the start selects the optimum).
    beta_init : float, optional
        Starting noise precision; default ``1 / var(T)``.
    fixed_beta : bool, default=False
        Keep ``beta = beta_init`` fixed instead of re-estimating it.
    alpha_prior, beta_prior : (shape, rate), default=(0, 0)
        Gamma hyperpriors on ``alpha_i`` and ``beta`` (see the module docstring).
    threshold_alpha : float, default=1e9
        Basis functions whose alpha exceeds this are pruned (alpha set to infinity).
    tol : float, default=1e-6
        Stop when the largest change of ``log alpha`` over the retained set falls below this and
        the retained set did not change.
    evidence_tol : float, default=1e-12
        Also stop when the objective changes by less than ``evidence_tol * (1 + |objective|)`` for
        ten iterations in a row (MacKay updates can creep for thousands of iterations).
    max_iter : int, default=10000
        Iteration cap; reaching it warns with :class:`~sklearn.exceptions.ConvergenceWarning`.
    candidates : ndarray of int, optional
        Columns allowed to enter the model (default: all columns that are not identically zero).
    gram : ndarray of shape (M, M), optional
        Precomputed ``Phi^T Phi`` (saves its O(N M^2) cost when fitting many targets).

    Returns
    -------
    EvidenceFit
    """
    T = T[:, None] if T.ndim == 1 else T
    N, M = Phi.shape
    D = T.shape[1]
    a, b = _validate_prior("alpha_prior", alpha_prior)
    c, d = _validate_prior("beta_prior", beta_prior)
    if max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}.")
    alpha = np.broadcast_to(np.asarray(alpha_init, dtype=np.float64), (M,)).copy()
    if np.any(~np.isfinite(alpha)) or np.any(alpha <= 0):
        raise ValueError("alpha_init must be finite and positive.")
    if beta_init is None:
        var = float(np.var(T))
        beta_init = 1.0 / var if var > 0 else 1.0
    beta = float(beta_init)
    if not np.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta_init must be finite and positive, got {beta_init!r}.")

    if gram is None:
        gram = Phi.T @ Phi
    phi_t_all = Phi.T @ T
    tt = float(np.sum(T**2))
    beta_max = BETA_MAX * N * D / tt if tt > 0 else BETA_MAX
    keep = np.zeros(M, dtype=bool)
    keep[np.arange(M) if candidates is None else np.asarray(candidates)] = True
    keep &= np.diag(gram) > 0  # an all-zero column can never be relevant
    if not keep.any():
        raise ValueError("the design matrix has no non-zero column to fit with.")
    alpha[~keep] = np.inf

    trace: list[float] = []
    converged, reason = False, f"reached max_iter={max_iter}"
    should_stop = _MacKayStop(tol, evidence_tol)
    hyperprior = a or b or c or d
    # The active block of the sufficient statistics, sliced again only when something is pruned.
    idx = np.flatnonzero(keep)
    gram_a, pt_a, alpha_a = gram[np.ix_(idx, idx)], phi_t_all[idx], alpha[idx]
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported after the loop
        post = gaussian_posterior(gram_a, pt_a, tt, N, alpha_a, beta)
        objective = post.log_evidence
        if hyperprior:
            objective += log_hyperprior(alpha_a, beta, (a, b), (c, d))
        trace.append(objective)

        m2 = (post.mean * post.mean).sum(axis=1)
        # No support (m_i = 0 or gamma_i <= 0, which rounding can produce) sends alpha_i to inf.
        support = (m2 + 2 * b > 0) & (D * post.gamma + 2 * a > 0)
        new_alpha = np.full_like(m2, np.inf)
        np.divide(D * post.gamma + 2 * a, m2 + 2 * b, out=new_alpha, where=support)
        change = np.abs(np.log(new_alpha / alpha_a))
        beta_change = 0.0
        if not fixed_beta:
            dof = N * D - D * float(post.gamma.sum()) + 2 * c
            new_beta = min(max(dof, 1e-300) / max(post.sse + 2 * d, 1e-300), beta_max)
            beta_change, beta = abs(math.log(new_beta / beta)), new_beta

        pruned = new_alpha >= threshold_alpha
        if not (a or b):
            # MacKay updates creep towards alpha = inf for thousands of iterations. Once the rest
            # (the other alphas and the noise) has settled, prune those whose evidence-optimal
            # alpha is infinite: Tipping & Faul's theta_i = |q_i|^2 - D s_i <= 0, which for a
            # basis in the model reads |m_i|^2 <= D gamma_i Sigma_ii (q_i = m_i / Sigma_ii,
            # s_i = gamma_i / Sigma_ii). Everything heading out at once means the noise estimate
            # is still far off (as at a noisy start), not that the fit has settled.
            heading_out = m2 <= D * post.gamma * post.sigma_diag
            if beta_change < tol and not heading_out.all() and np.all(change[~heading_out] < tol):
                pruned |= heading_out
        if pruned.all():
            # Never prune the last basis function: keep the one with the smallest alpha.
            best = int(np.argmin(new_alpha))
            pruned[best] = False
            new_alpha[best] = min(new_alpha[best], threshold_alpha)
            converged, reason = True, "every basis function reached the pruning threshold; kept one"
        stop = should_stop(trace, change, pruned)
        alpha_a = new_alpha
        if pruned.any():
            kept = ~pruned
            alpha[idx[pruned]] = np.inf
            idx, alpha_a, pt_a = idx[kept], alpha_a[kept], pt_a[kept]
            gram_a = gram_a[np.ix_(kept, kept)]
        if converged:
            break
        if stop is not None:
            converged, reason = True, stop
            break

    alpha[idx] = alpha_a
    post = gaussian_posterior(gram_a, pt_a, tt, N, alpha_a, beta)
    if not converged:
        warnings.warn(
            f"MacKay re-estimation did not converge in {max_iter} iterations "
            f"(last max |change of log alpha| = {float(np.max(change)):.2e}); returning the last "
            "estimate. Increase max_iter or loosen tol.",
            ConvergenceWarning,
            stacklevel=2,
        )
    return EvidenceFit(
        alpha=alpha,
        beta=beta,
        active=idx,
        mean=post.mean,
        chol=post.chol,
        log_evidence=post.log_evidence,
        trace=np.asarray(trace),
        n_iter=n_iter,
        converged=converged,
        reason=reason,
    )
