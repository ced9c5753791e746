"""Sparse Bayesian learning for non-Gaussian likelihoods by the Laplace approximation.

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

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import linalg
from scipy.special import expit, gammaln, log_softmax, softmax
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.evidence.gaussian import (
    EvidenceFit,
    _cholesky,
    _MacKayStop,
    _one_blas_thread,
    _validate_prior,
)

__all__ = [
    "LaplaceFit",
    "LaplacePosterior",
    "fit_laplace_mackay",
    "fit_laplace_sequential",
    "laplace_posterior",
    "moderated_probabilities",
    "posterior_mode",
]

Likelihood = Literal["bernoulli", "softmax", "poisson"]
_LIKELIHOODS = ("bernoulli", "softmax", "poisson")
#: Largest latent value whose exponential is formed (Poisson); beyond it the rate saturates.
_ETA_MAX = 700.0
#: A candidate whose ``S`` fell below this fraction of ``phi^T B phi`` lies numerically in the span
#: of the active columns: its factors are rounding noise, so it is not offered.
_SPAN_RTOL = 1e-9
#: A softmax column whose summed well-determinedness sum_c gamma_ic falls below this times C while
#: its MacKay alpha rises is pruned (MacKay's alpha would creep to infinity).
_WEAK_GAMMA = 1e-3
#: Batch re-estimations in a row that refresh only the active columns' statistics.
_PARTIAL_STEPS = 8
#: Halvings of a re-estimation that lowered the evidence before it is given up.
_RETRIES = 1
#: Rows of the design matrix per block of the one pass that forms ``Phi^T Z`` and ``(Phi**2)^T B``:
#: small enough for the block and its square to stay in cache.
_CHUNK = 128


def _project(Phi: np.ndarray, Z: np.ndarray, B: np.ndarray, buf: np.ndarray):
    """``Phi^T Z`` and ``(Phi * Phi)^T B`` in one pass over ``Phi`` (no N x M temporary).

    The design matrix is the big object; reading it once per step, in cache-sized row blocks,
    is what bounds the cost of a sequential step.
    """
    N = Phi.shape[0]
    G = np.zeros((Phi.shape[1], Z.shape[1]))
    S = np.zeros((Phi.shape[1], B.shape[1]))
    for start in range(0, N, buf.shape[0]):
        P = Phi[start : start + buf.shape[0]]
        G += P.T @ Z[start : start + P.shape[0]]
        sq = np.multiply(P, P, out=buf[: P.shape[0]])
        S += sq.T @ B[start : start + P.shape[0]]
    return G, S


# ---------------------------------------------------------------------------------------------
# likelihood pieces
# ---------------------------------------------------------------------------------------------
def _mean_loglik(eta: np.ndarray, T: np.ndarray, likelihood: str) -> tuple[np.ndarray, float]:
    """Mean of the likelihood ``Y`` (same shape as ``eta``) and ``ln p(T | eta)``."""
    if likelihood == "bernoulli":
        Y = expit(eta)
        ll = float(np.sum(T * eta) - np.sum(np.logaddexp(0.0, eta)))
    elif likelihood == "softmax":
        logY = log_softmax(eta, axis=1)
        Y = np.exp(logY)
        ll = float(np.sum(T * logY))
    else:  # poisson
        eta_c = np.minimum(eta, _ETA_MAX)
        Y = np.exp(eta_c)
        ll = float(np.sum(T * eta_c) - np.sum(Y) - np.sum(gammaln(T + 1.0)))
    return Y, ll


def _curvature(Y: np.ndarray, likelihood: str) -> np.ndarray:
    """Diagonal curvature weights ``B`` (N x C): per class for the softmax's diagonal blocks."""
    if likelihood == "poisson":
        return Y
    return Y * (1.0 - Y)


def _hessian(Phi_a: np.ndarray, Y: np.ndarray, alpha: np.ndarray, likelihood: str) -> np.ndarray:
    """Negative Hessian of the log posterior (class-major layout for the softmax)."""
    N, K = Phi_a.shape
    C = Y.shape[1]
    if likelihood != "softmax":
        H = (Phi_a * _curvature(Y, likelihood)).T @ Phi_a
    else:
        # Z[:, c*K + i] = y_c phi_i: Z^T Z holds every sum_n y_c y_c' phi phi^T at once.
        Z = (Y[:, :, None] * Phi_a[:, None, :]).reshape(N, C * K)
        H = -(Z.T @ Z)
        for c in range(C):
            blk = slice(c * K, (c + 1) * K)
            H[blk, blk] += Phi_a.T @ Z[:, blk]
    H[np.diag_indices_from(H)] += np.tile(alpha, C)
    return H


# ---------------------------------------------------------------------------------------------
# posterior mode and Laplace approximation
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaplacePosterior:
    """Laplace approximation of the posterior of the active weights for fixed ``alpha``.

    Attributes
    ----------
    mean : ndarray of shape (K, C)
        Posterior mode ``W*``.
    chol : ndarray of shape (K*C, K*C)
        Lower Cholesky factor of the negative Hessian ``H`` at the mode (class-major layout).
    hessian : ndarray of shape (K*C, K*C)
        ``H`` itself.
    mu : ndarray of shape (N, C)
        Likelihood mean ``Y`` at the mode (probabilities or rates).
    log_likelihood : float
        ``ln p(T | W*)``.
    log_evidence : float
        Laplace approximation of ``ln p(T | alpha)``.
    grad_norm : float
        Largest absolute entry of the gradient of the log posterior at ``W*``.
    n_iter : int
        Newton steps taken.
    converged : bool
        Whether ``grad_norm`` fell below the tolerance.
    """

    mean: np.ndarray
    chol: np.ndarray
    hessian: np.ndarray
    mu: np.ndarray
    log_likelihood: float
    log_evidence: float
    grad_norm: float
    n_iter: int
    converged: bool

    def sigma_diag(self) -> np.ndarray:
        """Diagonal of ``Sigma = H^-1`` as a K x C array."""
        K, C = self.mean.shape
        Linv = linalg.solve_triangular(self.chol, np.eye(K * C), lower=True, check_finite=False)
        return np.einsum("ij,ij->j", Linv, Linv).reshape(C, K).T

    def gamma(self, alpha: np.ndarray) -> np.ndarray:
        """``gamma_ic = 1 - alpha_i Sigma_ic,ic`` (K x C)."""
        return 1.0 - alpha[:, None] * self.sigma_diag()


def _check_likelihood(likelihood: str) -> None:
    if likelihood not in _LIKELIHOODS:
        raise ValueError(f"likelihood must be one of {_LIKELIHOODS}, got {likelihood!r}.")


def _as_targets(T, N: int, likelihood: str) -> np.ndarray:
    T = np.asarray(T, dtype=np.float64)
    if T.ndim == 1:
        T = T[:, None]
    if T.ndim != 2 or T.shape[0] != N:
        raise ValueError(f"T must have {N} rows (shape (N,) or (N, C)), got shape {T.shape}.")
    if not np.all(np.isfinite(T)):
        raise ValueError("T must be finite.")
    if likelihood == "softmax":
        if T.shape[1] < 2 or np.any(T < 0) or not np.allclose(T.sum(axis=1), 1.0):
            raise ValueError(
                "softmax targets must be an (N, C) matrix of class probabilities, C >= 2."
            )
    elif T.shape[1] != 1:
        raise ValueError(f"{likelihood} targets must be one column, got shape {T.shape}.")
    elif likelihood == "bernoulli" and (np.any(T < 0) or np.any(T > 1)):
        raise ValueError("bernoulli targets must lie in [0, 1].")
    elif likelihood == "poisson" and np.any(T < 0):
        raise ValueError("poisson targets must be non-negative counts.")
    return T


def _newton(
    Phi_a: np.ndarray,
    T: np.ndarray,
    alpha: np.ndarray,
    W0: np.ndarray,
    likelihood: str,
    tol: float,
    max_iter: int,
) -> LaplacePosterior:
    """Newton's method with step halving on the log posterior, from ``W0`` (not modified)."""
    K = Phi_a.shape[1]
    C = T.shape[1]
    W = np.array(W0, dtype=np.float64, copy=True)
    Y, ll = _mean_loglik(Phi_a @ W, T, likelihood)
    psi = ll - 0.5 * float(np.sum(alpha[:, None] * W * W))
    converged = False
    it = 0
    while True:
        G = Phi_a.T @ (T - Y) - alpha[:, None] * W
        gmax = float(np.max(np.abs(G))) if G.size else 0.0
        H = _hessian(Phi_a, Y, alpha, likelihood)
        L = _cholesky(H)
        if gmax <= tol:
            converged = True
            break
        if it >= max_iter:
            break
        it += 1
        d = linalg.cho_solve((L, True), G.T.ravel(), check_finite=False).reshape(C, K).T
        step = 1.0
        while True:
            Wn = W + step * d
            Yn, lln = _mean_loglik(Phi_a @ Wn, T, likelihood)
            psin = lln - 0.5 * float(np.sum(alpha[:, None] * Wn * Wn))
            # Psi is concave, so a Newton direction ascends for a small enough step; the slack
            # admits steps that only lose to rounding near the optimum.
            if psin >= psi - 1e-13 * (1.0 + abs(psi)) or step < 1e-12:
                break
            step *= 0.5
        moved = float(np.max(np.abs(Wn - W)))
        W, Y, ll, psi = Wn, Yn, lln, psin
        if moved <= 1e-15 * (1.0 + float(np.max(np.abs(W)))):
            # The gradient cannot fall further than rounding allows: accept the rounding floor.
            G = Phi_a.T @ (T - Y) - alpha[:, None] * W
            gmax = float(np.max(np.abs(G)))
            H = _hessian(Phi_a, Y, alpha, likelihood)
            L = _cholesky(H)
            converged = gmax <= max(tol, 1e-10)
            break
    log_det = 2.0 * float(np.sum(np.log(np.diag(L))))
    log_ev = psi + 0.5 * C * float(np.sum(np.log(alpha))) - 0.5 * log_det
    return LaplacePosterior(W, L, H, Y, ll, float(log_ev), gmax, it, converged)


def posterior_mode(
    Phi: np.ndarray,
    T,
    alpha,
    *,
    likelihood: Likelihood = "bernoulli",
    w_init: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> LaplacePosterior:
    """Posterior mode and Laplace approximation for fixed prior precisions.

    Parameters
    ----------
    Phi : ndarray of shape (N, K)
        Design matrix of the basis functions in the model.
    T : array-like of shape (N,) or (N, C)
        Targets: 0/1 (or probabilities) for ``"bernoulli"``, one-hot rows for ``"softmax"``,
        counts for ``"poisson"``.
    alpha : array-like of shape (K,)
        Prior precisions (finite, positive).
    likelihood : {"bernoulli", "softmax", "poisson"}, default="bernoulli"
    w_init : ndarray of shape (K,) or (K, C), optional
        Starting weights (warm start); default zero.
    tol : float, default=1e-10
        Converged when every entry of the gradient of the log posterior is below ``tol``.
    max_iter : int, default=100
        Newton steps at most; not converging warns with ``ConvergenceWarning``.

    Returns
    -------
    LaplacePosterior
    """
    _check_likelihood(likelihood)
    Phi = np.asarray(Phi, dtype=np.float64)
    N, K = Phi.shape
    T = _as_targets(T, N, likelihood)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (K,))
    if np.any(~np.isfinite(alpha)) or np.any(alpha <= 0):
        raise ValueError("alpha must be finite and positive.")
    W0 = np.zeros((K, T.shape[1])) if w_init is None else np.asarray(w_init, dtype=np.float64)
    W0 = W0.reshape(K, T.shape[1])
    post = _newton(Phi, T, alpha, W0, likelihood, tol, max_iter)
    if not post.converged:
        _warn_mode(post)
    return post


def laplace_posterior(Phi, T, alpha, **kwargs) -> LaplacePosterior:
    """Alias of :func:`posterior_mode` (the Laplace approximation is built at the mode)."""
    return posterior_mode(Phi, T, alpha, **kwargs)


def _warn_mode(post: LaplacePosterior, stacklevel: int = 3) -> None:
    warnings.warn(
        f"posterior mode search did not converge in {post.n_iter} Newton steps (largest gradient "
        f"entry {post.grad_norm:.2e}); the Laplace approximation is taken at the last iterate. "
        "The classes may be separable with too weak a prior.",
        ConvergenceWarning,
        stacklevel=stacklevel,
    )


# ---------------------------------------------------------------------------------------------
# results and prediction
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaplaceFit(EvidenceFit):
    """:class:`~bayes_rvm.evidence.gaussian.EvidenceFit` of a Laplace engine.

    ``beta`` is 1.0 (no noise parameter); ``mean`` is K x C and ``chol`` the lower Cholesky factor
    of the K*C x K*C negative Hessian at the mode in class-major layout (see the module docstring);
    ``covariance`` is therefore K*C x K*C. ``likelihood`` names the likelihood and ``grad_norm``
    is the largest gradient entry of the log posterior at the returned mode.
    """

    likelihood: str = "bernoulli"
    grad_norm: float = 0.0

    def predict(self, phi_active: np.ndarray, *, with_noise: bool = False):
        """Gaussian marginals of the latent function at rows of the active design matrix.

        Returns the mean ``phi^T W`` (n x C) and the variance ``phi^T Sigma_cc phi`` (n x C) of each
        class's latent value (``with_noise`` is accepted for signature compatibility and ignored).
        """
        mean = phi_active @ self.mean
        K, C = self.mean.shape
        if C == 1:
            v = linalg.solve_triangular(self.chol, phi_active.T, lower=True, check_finite=False)
            return mean, np.einsum("ij,ij->j", v, v)[:, None]
        var = np.empty_like(mean)
        for c in range(C):
            blk = slice(c * K, (c + 1) * K)
            # Rows of the inverse factor for class c: Sigma_cc = V_c^T V_c with V_c = L^-1 E_c.
            E = np.zeros((K * C, K))
            E[blk] = np.eye(K)
            Vc = linalg.solve_triangular(self.chol, E, lower=True, check_finite=False)
            U = phi_active @ Vc.T
            var[:, c] = np.einsum("ij,ij->i", U, U)
        return mean, var

    def predict_mean(self, phi_active: np.ndarray, *, moderated: bool = True) -> np.ndarray:
        """Predictive probabilities (n x C; Bernoulli: the one column ``p(t = 1)``) or rates."""
        mean, var = self.predict(phi_active)
        return moderated_probabilities(mean, var, self.likelihood, moderated=moderated)


def moderation(var: np.ndarray) -> np.ndarray:
    """MacKay's probit factor ``kappa = (1 + pi var / 8)^(-1/2)``."""
    return 1.0 / np.sqrt(1.0 + (np.pi / 8.0) * var)


def moderated_probabilities(
    mean: np.ndarray, var: np.ndarray, likelihood: Likelihood, *, moderated: bool = True
) -> np.ndarray:
    """Predictive mean of the likelihood under a Gaussian latent ``N(mean, var)``.

    Bernoulli: ``sigmoid(kappa(var) mean)``, the probit approximation of
    ``E[sigmoid(a)]`` (MacKay 1992); softmax: ``softmax(kappa(var_c) mean_c)`` with each class's
    marginal variance; Poisson: ``exp(mean + var / 2)`` (exact). ``moderated=False`` plugs in the
    mean (``var`` ignored).
    """
    _check_likelihood(likelihood)
    if likelihood == "poisson":
        eta = mean + 0.5 * var if moderated else mean
        return np.exp(np.minimum(eta, _ETA_MAX))
    score = mean * moderation(var) if moderated else mean
    if likelihood == "bernoulli":
        return expit(score)
    return softmax(score, axis=1)


# ---------------------------------------------------------------------------------------------
# engines
# ---------------------------------------------------------------------------------------------
def _prepare(Phi, T, likelihood, alpha_prior, max_iter, tol, threshold_alpha):
    _check_likelihood(likelihood)
    Phi = np.asarray(Phi)
    if Phi.ndim != 2 or Phi.dtype != np.float64:
        raise ValueError(f"Phi must be a 2-D float64 array, got {Phi.ndim}-D {Phi.dtype}.")
    if not np.all(np.isfinite(Phi)):
        raise ValueError("Phi must be finite.")
    T = _as_targets(T, Phi.shape[0], likelihood)
    a, b = _validate_prior("alpha_prior", alpha_prior)
    if not isinstance(max_iter, int | np.integer) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}.")
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be positive, got {tol!r}.")
    if not (np.isfinite(threshold_alpha) and threshold_alpha > 0):
        raise ValueError(f"threshold_alpha must be positive, got {threshold_alpha!r}.")
    return Phi, T, a, b


def _log_hyper(alpha: np.ndarray, a: float, b: float) -> float:
    return float(np.sum(a * np.log(alpha) - b * alpha)) if (a or b) else 0.0


def _finish(
    Phi,
    T,
    alpha,
    active,
    W,
    likelihood,
    mode_tol,
    mode_max_iter,
    trace,
    n_iter,
    converged,
    reason,
    actions,
    warn_name,
) -> LaplaceFit:
    post = _newton(Phi[:, active], T, alpha[active], W, likelihood, mode_tol, mode_max_iter)
    if not post.converged:
        _warn_mode(post, stacklevel=4)
    if not converged:
        warnings.warn(
            f"{warn_name} did not converge in {n_iter} iterations; returning the last estimate. "
            "Increase max_iter or loosen tol.",
            ConvergenceWarning,
            stacklevel=3,
        )
    return LaplaceFit(
        alpha=alpha,
        beta=1.0,
        active=np.asarray(active, dtype=np.intp),
        mean=post.mean,
        chol=post.chol,
        log_evidence=post.log_evidence,
        trace=np.asarray(trace, dtype=np.float64),
        n_iter=n_iter,
        converged=converged,
        reason=reason,
        actions=tuple(actions),
        likelihood=likelihood,
        grad_norm=post.grad_norm,
    )


def fit_laplace_mackay(
    Phi: np.ndarray,
    T,
    *,
    likelihood: Likelihood = "bernoulli",
    alpha_init: float | np.ndarray = 1.0,
    alpha_prior: tuple[float, float] = (0.0, 0.0),
    threshold_alpha: float = 1e9,
    tol: float = 1e-6,
    evidence_tol: float = 1e-12,
    max_iter: int = 10_000,
    mode_tol: float = 1e-10,
    mode_max_iter: int = 100,
) -> LaplaceFit:
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
    likelihood : {"bernoulli", "softmax", "poisson"}, default="bernoulli"
    alpha_init : float or ndarray of shape (M,), default=1.0
        Starting precisions.
    alpha_prior : (shape, rate), default=(0, 0)
        Gamma hyperprior on each ``alpha_i``.
    threshold_alpha : float, default=1e9
        Prune a basis function when its ``alpha`` exceeds this.
    tol : float, default=1e-6
        Stop when no ``log alpha`` changes by more than ``tol`` and nothing was pruned.
    evidence_tol : float, default=1e-12
        Also stop when the objective changes by less than ``evidence_tol * (1 + |objective|)`` ten
        times in a row.
    max_iter : int, default=10000
        Iteration cap (warns with ``ConvergenceWarning`` when reached).
    mode_tol, mode_max_iter : float, int
        Gradient tolerance and step cap of the Newton mode search.

    Returns
    -------
    LaplaceFit
    """
    Phi, T, a, b = _prepare(Phi, T, likelihood, alpha_prior, max_iter, tol, threshold_alpha)
    M = Phi.shape[1]
    C = T.shape[1]
    alpha = np.broadcast_to(np.asarray(alpha_init, dtype=np.float64), (M,)).copy()
    if np.any(~np.isfinite(alpha)) or np.any(alpha <= 0):
        raise ValueError("alpha_init must be finite and positive.")
    keep = np.einsum("ij,ij->j", Phi, Phi) > 0
    if not keep.any():
        raise ValueError("the design matrix has no non-zero column to fit with.")
    alpha[~keep] = np.inf
    W = np.zeros((int(keep.sum()), C))
    trace: list[float] = []
    converged, reason = False, f"reached max_iter={max_iter}"
    should_stop = _MacKayStop(tol, evidence_tol)
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported after the loop
        idx = np.flatnonzero(keep)
        post = _newton(Phi[:, idx], T, alpha[idx], W, likelihood, mode_tol, mode_max_iter)
        if not post.converged:
            _warn_mode(post)
        trace.append(post.log_evidence + _log_hyper(alpha[idx], a, b))
        gamma = post.gamma(alpha[idx]).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            new = (gamma + 2 * a) / (np.sum(post.mean**2, axis=1) + 2 * b)
        new = np.where(np.isfinite(new) & (new > 0), new, np.inf)
        with np.errstate(invalid="ignore"):
            change = np.abs(np.log(new) - np.log(alpha[idx]))
        pruned = new >= threshold_alpha
        if pruned.all():
            best = int(np.argmin(new))
            pruned[best] = False
            new[best] = min(new[best], threshold_alpha)
            alpha[idx] = np.where(pruned, np.inf, new)
            keep[idx[pruned]] = False
            W = post.mean[~pruned]
            converged, reason = True, "every basis function reached the pruning threshold; kept one"
            break
        alpha[idx] = np.where(pruned, np.inf, new)
        keep[idx[pruned]] = False
        W = post.mean[~pruned]
        stop = should_stop(trace, change, pruned)
        if stop is not None:
            converged, reason = True, stop
            break
    return _finish(
        Phi,
        T,
        alpha,
        np.flatnonzero(keep),
        W,
        likelihood,
        mode_tol,
        mode_max_iter,
        trace,
        n_iter,
        converged,
        reason,
        (),
        "Laplace MacKay re-estimation",
    )


def _gain(s: np.ndarray, q2: np.ndarray, alpha: np.ndarray, a: float, b: float) -> np.ndarray:
    """``l(alpha) = sum_c 1/2 [q_c^2 / (alpha + s_c) - ln(1 + s_c / alpha)] (+ hyperprior)``.

    The objective gained by holding a basis function at ``alpha`` rather than leaving it out;
    ``s``, ``q2`` are (M, C), ``alpha`` (M,).
    """
    al = alpha[:, None]
    out = 0.5 * np.sum(q2 / (al + s) - np.log1p(s / al), axis=1)
    if a or b:
        out = out + a * np.log(alpha) - b * alpha
    return out


def _optimal_alpha(
    s: np.ndarray, q2: np.ndarray, a: float, b: float, alpha_max: float
) -> tuple[np.ndarray, np.ndarray]:
    """Best shared ``alpha`` per row of factors ``s``, ``q2`` (M x C) and its gain.

    One class without hyperprior has the closed form ``s^2 / (q^2 - s)``; otherwise the stationary
    point is found by bisection of the derivative in ``log alpha`` on ``[1e-12, alpha_max]`` (a
    sign change from + to - is a maximum). Returns ``inf`` and gain 0 where leaving out is best.
    """
    if s.shape[1] == 1 and not a and not b:
        s1, q1 = s[:, 0], q2[:, 0]
        theta = q1 - s1
        ok = theta > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            alpha = np.where(ok, s1 * s1 / np.where(ok, theta, 1.0), np.inf)
            x = np.where(ok, theta / s1, 0.0)
        gain = 0.5 * (x - np.log1p(x))
        return alpha, np.where(ok, gain, 0.0)

    def slope(u):
        al = np.exp(u)[:, None]
        d = 0.5 * np.sum(s / (al + s) - al * q2 / (al + s) ** 2, axis=1)
        return d + a - b * al[:, 0]

    alpha = np.full(s.shape[0], np.inf)
    gain = np.zeros(s.shape[0])
    interior = slope(np.full(s.shape[0], np.log(alpha_max))) < 0
    # Only rows whose objective still rises towards alpha_max need a root (few, usually).
    rows = np.flatnonzero(interior)
    if rows.size:
        s, q2 = s[rows], q2[rows]
        lo = np.full(rows.size, np.log(1e-12))
        hi = np.full(rows.size, np.log(alpha_max))
        for _ in range(45):
            mid = 0.5 * (lo + hi)
            up = slope(mid) > 0
            lo = np.where(up, mid, lo)
            hi = np.where(up, hi, mid)
        al = np.exp(0.5 * (lo + hi))
        g = _gain(s, q2, al, a, b)
        keep = g > 0
        alpha[rows[keep]] = al[keep]
        gain[rows[keep]] = g[keep]
    return alpha, gain


def _step_statistics(Phi, T, post, act, alpha, cand, buf, likelihood, a, b, threshold_alpha):
    """Candidate steps at the current mode: masks, gains and optimal alphas of every column.

    Returns ``(add, delete, reest, gain, new_alpha, dlog)``: boolean masks of the columns whose
    best step is an addition, a deletion or a re-estimation, the gain of that step, the optimal
    alphas and ``|change of log alpha|`` of the re-estimations.
    """
    N, M = Phi.shape
    C = T.shape[1]
    K = act.size
    Phi_a = Phi[:, act]
    B = _curvature(post.mu, likelihood)
    Z = np.empty((N, C * K + C))
    for c in range(C):
        Z[:, c * K : (c + 1) * K] = Phi_a * B[:, c : c + 1]
    Z[:, C * K :] = T - post.mu
    G, S = _project(Phi, Z, B, buf)
    Q = G[:, C * K :]
    diag_BB = S.copy()
    for c in range(C):
        blk = slice(c * K, (c + 1) * K)
        Lc = post.chol if C == 1 else _cholesky(post.hessian[blk, blk])
        # (M, K) C-ordered right-hand side: its transpose is what LAPACK wants, uncopied.
        Gc = np.ascontiguousarray(G[:, blk])
        V = linalg.solve_triangular(Lc, Gc.T, lower=True, check_finite=False)
        S[:, c] -= np.einsum("ij,ij->j", V, V)
    is_act = np.zeros(M, dtype=bool)
    is_act[act] = True
    alpha_a = alpha[act]
    with np.errstate(divide="ignore", invalid="ignore"):
        # Leave-one-out factors of the active columns: remove their own contribution.
        fac = np.where(is_act, alpha, 0.0)[:, None] / (alpha[:, None] - S)
        s = np.where(is_act[:, None], fac * S, S)
        q = np.where(is_act[:, None], fac * Q, Q)
    ok = (cand & np.all(S > _SPAN_RTOL * diag_BB, axis=1)) | is_act
    s_ok = np.where(ok[:, None], s, 1.0)
    q2_ok = np.where(ok[:, None], q * q, 0.0)
    new_alpha, new_gain = _optimal_alpha(s_ok, q2_ok, a, b, threshold_alpha)
    cur_gain = np.zeros(M)
    cur_gain[act] = _gain(s_ok[act], q2_ok[act], alpha_a, a, b)
    add = ok & ~is_act & np.isfinite(new_alpha)
    delete = is_act & ~np.isfinite(new_alpha)
    if K == 1:
        delete[:] = False
    reest = is_act & np.isfinite(new_alpha)
    gain = np.full(M, -np.inf)
    gain[add] = new_gain[add]
    gain[delete] = -cur_gain[delete]
    gain[reest] = new_gain[reest] - cur_gain[reest]
    if C > 1:
        # The per-class S leaves out the softmax's cross-class curvature, which misleads the
        # re-estimations (they lower the true Laplace evidence); the active alphas take MacKay's
        # update from the exact Hessian instead, and S, Q only propose additions and deletions.
        W2 = np.sum(post.mean**2, axis=1)
        gam = np.sum(post.gamma(alpha_a), axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            mack = (gam + 2 * a) / (W2 + 2 * b)
        mack = np.where(np.isfinite(mack) & (mack > 0) & (mack < threshold_alpha), mack, np.inf)
        new_alpha[act] = mack
        reest = is_act & np.isfinite(new_alpha)
        delete |= is_act & ~np.isfinite(new_alpha)
        if K == 1:
            delete[:] = False
            reest[act] = True
            new_alpha[act] = np.where(np.isfinite(mack), mack, alpha_a)
        gain[reest] = 0.0
        # MacKay's alphas creep to infinity over thousands of steps once a column is no longer
        # determined by the data (gamma ~ 0): a rising alpha of such a column is taken to its
        # limit at once, and the MacKay step prunes it.
        if K > 1:
            weak = np.zeros(M, dtype=bool)
            weak[act] = (gam < _WEAK_GAMMA * C) & (mack > alpha_a)
            new_alpha[weak] = np.inf
            reest &= ~weak
            delete |= weak
            gain[weak] = -np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        dlog = np.abs(np.log(new_alpha[reest]) - np.log(alpha[reest]))
    return add, delete, reest, gain, new_alpha, dlog


def _embed(sub, act: np.ndarray, M: int):
    """Statistics of the active columns only, placed in arrays over all M columns."""
    _, delete_s, reest_s, gain_s, new_alpha_s, dlog = sub
    add = np.zeros(M, dtype=bool)
    delete = np.zeros(M, dtype=bool)
    reest = np.zeros(M, dtype=bool)
    gain = np.full(M, -np.inf)
    new_alpha = np.full(M, np.inf)
    delete[act], reest[act], gain[act], new_alpha[act] = delete_s, reest_s, gain_s, new_alpha_s
    return add, delete, reest, gain, new_alpha, dlog


def fit_laplace_sequential(
    Phi: np.ndarray,
    T,
    *,
    likelihood: Likelihood = "bernoulli",
    alpha_prior: tuple[float, float] = (0.0, 0.0),
    threshold_alpha: float = 1e9,
    tol: float = 1e-6,
    max_iter: int = 10_000,
    priority: Literal["delete", "add"] | None = "delete",
    mode_tol: float = 1e-10,
    inner_mode_tol: float = 1e-6,
    mode_max_iter: int = 100,
    start: int | None = None,
    batch_reestimate: bool = True,
    gain_tol: float = 1e-8,
    evidence_tol: float = 1e-6,
) -> LaplaceFit:
    """Maximise the Laplace evidence by the sequential algorithm of Tipping and Faul (2003).

    One basis function at a time is added, re-estimated or deleted, choosing the step of largest
    gain in the evidence of the Gaussian problem linearised at the current mode; the mode is then
    found again by Newton's method warm-started from the previous one. The model starts from one
    basis function and only the active ones enter any K x K (or KC x KC) algebra.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
        Design matrix, float64; neither copied nor modified (each step reads it once, in row
        blocks, so no other N x M array is ever formed).
    T : array-like of shape (N,) or (N, C)
        Targets (see :func:`posterior_mode`).
    likelihood : {"bernoulli", "softmax", "poisson"}, default="bernoulli"
    alpha_prior : (shape, rate), default=(0, 0)
        Gamma hyperprior on each ``alpha_i``; a basis function is kept when its best penalised
        gain over leaving it out is positive.
    threshold_alpha : float, default=1e9
        Largest ``alpha`` considered finite (for the bisection of the shared-alpha optimum).
    tol : float, default=1e-6
        Converged when no addition or deletion is worthwhile and every active ``log alpha`` is
        within ``tol`` of its optimum.
    max_iter : int, default=10000
        Cap on the number of steps (warns with ``ConvergenceWarning`` when reached).
    priority : {"delete", "add"} or None, default="delete"
        Take any worthwhile deletion (or addition) first; None takes the step of largest gain.
    mode_tol : float, default=1e-10
        Gradient tolerance of the final mode.
    inner_mode_tol : float, default=1e-6
        Gradient tolerance of the modes between steps (a warm start makes them cheap; a loose
        tolerance there does not move the optimum, which is polished to ``mode_tol`` at the end).
    mode_max_iter : int, default=100
        Newton steps per mode search.
    start : int, optional
        Column to start from (default: the one whose single-column gain is largest).
    batch_reestimate : bool, default=True
        When the best step is a re-estimation, move every active ``alpha`` to its single-alpha
        optimum at once instead of only the best one (far fewer steps; False is the textbook
        one-at-a-time algorithm).
    gain_tol : float, default=1e-8
        Also converged when no addition or deletion pays and all the re-estimations together
        would raise the objective by less than ``gain_tol * (1 + |objective|)`` (re-estimation
        converges linearly: without this the last digits of ``log alpha`` cost most steps).
    evidence_tol : float, default=1e-6
        Softmax only: also converged when no addition or deletion pays and a MacKay step of the
        active alphas raised the objective by less than ``evidence_tol * (1 + |objective|)``
        (on nearly separable classes the weights grow and MacKay's steps creep for thousands of
        iterations).

    Returns
    -------
    LaplaceFit
        ``trace[i]`` is the Laplace log evidence (plus log hyperprior) at the mode after
        ``actions[i]``.
    """
    Phi, T, a, b = _prepare(Phi, T, likelihood, alpha_prior, max_iter, tol, threshold_alpha)
    if priority not in ("delete", "add", None):
        raise ValueError(f"priority must be 'delete', 'add' or None, got {priority!r}.")
    with _one_blas_thread():
        return _sequential(
            Phi,
            T,
            a,
            b,
            likelihood,
            threshold_alpha,
            tol,
            max_iter,
            priority,
            mode_tol,
            inner_mode_tol,
            mode_max_iter,
            start,
            batch_reestimate,
            gain_tol,
            evidence_tol,
        )


def _sequential(
    Phi,
    T,
    a,
    b,
    likelihood,
    threshold_alpha,
    tol,
    max_iter,
    priority,
    mode_tol,
    inner_mode_tol,
    mode_max_iter,
    start,
    batch_reestimate,
    gain_tol,
    evidence_tol,
) -> LaplaceFit:
    N, M = Phi.shape
    C = T.shape[1]
    buf = np.empty((min(N, _CHUNK), M))
    alpha = np.full(M, np.inf)
    cand = np.einsum("ij,ij->j", Phi, Phi) > 0
    if not cand.any():
        raise ValueError("the design matrix has no non-zero column to fit with.")

    # Statistics of the empty model (eta = 0) choose the first column.
    Y0, _ = _mean_loglik(np.zeros((N, C)), T, likelihood)
    B0 = _curvature(Y0, likelihood)
    Q0, S0 = _project(Phi, T - Y0, B0, buf)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where(cand, np.sum(Q0 * Q0 / S0, axis=1), -np.inf)
    first = int(np.argmax(score)) if start is None else int(start)
    a0, _ = _optimal_alpha(S0[first : first + 1], Q0[first : first + 1] ** 2, a, b, threshold_alpha)
    alpha[first] = a0[0] if np.isfinite(a0[0]) else float(np.mean(S0[first]))
    active = [first]
    W = np.zeros((1, C))
    trace: list[float] = []
    actions: list[str] = [f"init {first}"]
    converged, reason = False, f"reached max_iter={max_iter}"
    n_iter = 0
    saved = None  # the last accepted state: (active, alpha, W, its step statistics)
    banned: set = set()
    tries: dict = {}
    last_key = None
    partial = False
    was_reest = False
    n_partial = 0
    evaluate = True
    for n_iter in range(1, max_iter + 1):  # noqa: B007 - n_iter is reported after the loop
        if evaluate:
            act = np.asarray(active, dtype=np.intp)
            post = _newton(Phi[:, act], T, alpha[act], W, likelihood, inner_mode_tol, mode_max_iter)
            objective = post.log_evidence + _log_hyper(alpha[act], a, b)
            worse = saved is not None and objective < trace[-1] - 1e-10 * (1.0 + abs(trace[-1]))
            if worse and last_key != "mackay":
                # The linearised gain was wrong about the Laplace evidence (the linearisation, or
                # the softmax's block-diagonal S): undo the step and try the next best instead.
                # This keeps the objective monotone and rules out cycles.
                active, alpha, W, stats = saved[0][:], saved[1].copy(), saved[2], saved[3]
                # A re-estimation is retried with its log-alpha move halved, up to _RETRIES times.
                tries[last_key] = tries.get(last_key, 0) + 1
                retry = isinstance(last_key, int) and stats[2][last_key]
                if not retry or tries[last_key] > _RETRIES:
                    banned.add(last_key)
                actions.append(f"undo {actions[-1]}")
            else:
                W = post.mean
                trace.append(objective)
                banned.clear()
                tries.clear()
                # After a re-estimation only the active columns' statistics are refreshed
                # (O(N K^2) instead of a pass over Phi), for up to _PARTIAL_STEPS steps in a
                # row: additions and deletions, and convergence, are decided on full passes.
                partial = C == 1 and was_reest and n_partial < _PARTIAL_STEPS
                if partial:
                    n_partial += 1
                    sub = _step_statistics(
                        Phi[:, act],
                        T,
                        post,
                        np.arange(act.size),
                        alpha[act],
                        np.ones(act.size, dtype=bool),
                        buf[:, : act.size],
                        likelihood,
                        a,
                        b,
                        threshold_alpha,
                    )
                    stats = _embed(sub, act, M)
                else:
                    n_partial = 0
                    stats = _step_statistics(
                        Phi, T, post, act, alpha, cand, buf, likelihood, a, b, threshold_alpha
                    )
                saved = (active[:], alpha.copy(), W, stats)
        add, delete, reest, gain, new_alpha, dlog = stats
        if partial and (not reest.any() or bool(np.all(dlog < tol))):
            # Nothing to re-estimate among the active columns: look at every column again.
            last_key, evaluate, saved = None, True, None
            trace.pop()
            continue
        gain = gain.copy()
        # Gains under the linearisation are approximate: steps promising less than gain_tol
        # (relative) are not worth a pass over Phi, and near the optimum their sign is noise.
        gain[gain <= gain_tol * (1.0 + abs(trace[-1]))] = -np.inf
        gain[[k for k in banned if isinstance(k, int)]] = -np.inf
        structural = np.isfinite(gain) & (add | delete)
        if not structural.any() and not banned and not partial:
            if bool(np.all(dlog < tol)):
                converged, reason = True, "no addition or deletion pays; every log alpha settled"
                break
            if C > 1:
                stalled = (
                    last_key == "mackay"
                    and len(trace) > 1
                    and abs(trace[-1] - trace[-2]) < evidence_tol * (1.0 + abs(trace[-1]))
                )
            else:
                stalled = float(np.sum(gain[reest & np.isfinite(gain)])) < gain_tol * (
                    1.0 + abs(trace[-1])
                )
            if stalled:
                converged = True
                tol_used = evidence_tol if C > 1 else gain_tol
                reason = f"no addition or deletion pays; re-estimation gain < {tol_used:g}"
                break
        if priority == "delete" and np.isfinite(gain[delete]).any():
            pick = np.where(delete, gain, -np.inf)
        elif priority == "add" and np.isfinite(gain[add]).any():
            pick = np.where(add, gain, -np.inf)
        else:
            pick = gain
        j = int(np.argmax(pick))
        if C > 1 and not (np.isfinite(pick[j]) and (add[j] or delete[j])):
            if "mackay" in banned or not reest.any():
                converged, reason = True, "no step raises the evidence"
                break
            alpha[reest] = new_alpha[reest]
            # Columns whose MacKay alpha passed the threshold leave with the same step.
            gone = [k for k in active if not np.isfinite(new_alpha[k])]
            if len(gone) == len(active):
                gone = []
            if gone:
                keep_rows = [p for p, k in enumerate(active) if k not in gone]
                W = W[keep_rows]
                active = [active[p] for p in keep_rows]
                alpha[gone] = np.inf
            last_key = "mackay"
            evaluate = True
            actions.append("reestimate all (MacKay)" + (f", prune {gone}" if gone else ""))
            continue
        if not np.isfinite(pick[j]) and partial:
            last_key, evaluate, saved = None, True, None
            trace.pop()
            continue
        if not np.isfinite(pick[j]):
            converged = True
            reason = "no step raises the evidence" if banned else "no step has a positive gain"
            break
        evaluate = True
        last_key = j
        was_reest = bool(reest[j]) and not (delete[j] or add[j])
        if delete[j]:
            pos = active.index(j)
            active.pop(pos)
            W = np.delete(W, pos, axis=0)
            alpha[j] = np.inf
            actions.append(f"delete {j}")
        elif add[j]:
            active.append(j)
            alpha[j] = new_alpha[j]
            W = np.vstack([W, np.zeros((1, C))])
            actions.append(f"add {j}")
        elif batch_reestimate and "all" not in banned:
            # Every active alpha moves to its own optimum at once: each step costs a pass over
            # Phi, and one-at-a-time re-estimation spends most steps on small moves.
            alpha[reest] = new_alpha[reest]
            last_key = "all"
            actions.append("reestimate all")
        else:
            shrink = 0.5 ** tries.get(j, 0)
            alpha[j] = alpha[j] * (new_alpha[j] / alpha[j]) ** shrink
            actions.append(f"reestimate {j}")
    else:
        # The last step of the budget was never evaluated: return the last accepted state.
        if saved is not None:
            active, alpha, W = saved[0], saved[1], saved[2]
    return _finish(
        Phi,
        T,
        alpha,
        np.sort(np.asarray(active)),
        W[np.argsort(np.asarray(active))],
        likelihood,
        mode_tol,
        mode_max_iter,
        trace,
        n_iter,
        converged,
        reason,
        actions,
        "Laplace sequential optimisation",
    )
