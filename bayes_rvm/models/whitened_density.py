"""The log density of the whitened two-class and count models, with its gradient, in numba.

:func:`~bayes_rvm.models.graphs.rvm_classification_model` with ``reference`` samples
``x = (log alpha_rel, u)``: ``alpha = alpha_rel phi_scale^2`` under the half-Cauchy precision
hyperprior, and the weights ``w = m + L^-T u``, where ``H = diag(alpha) + G = L L^T``, ``G =
Phi^T B Phi`` and ``m = H^-1 c``, ``c = Phi^T B r``, from the log-likelihood expanded at the
reference (rows of precision ``b`` and working targets ``r``; both fixed). The density is

    log p(x) = sum_k [-log(pi beta) - log1p(exp(-l_k) / beta^2) - l_k / 2]
             + sum_k [log(alpha_k) / 2 - alpha_k w_k^2 / 2] - M log(2 pi) / 2
             + log p(y | Phi w) - sum_k log L_kk.

Its gradient in ``u`` is ``L^-1 g`` with ``g`` the gradient in ``w``. In ``alpha_k``, besides the
prior's own terms: ``-m_k (H^-1 g)_k`` through ``m``, ``-(H^-1)_kk / 2`` through the
log-determinant, and through ``L^-T u``, with ``a = L^-1 g`` and ``c_k = L^-1 e_k`` (the
derivative of the Cholesky factor, ``dL = L Phi(L^-1 dH L^-T)``, ``Phi`` the lower triangle with
half the diagonal):

    -sum_i u_i c_ki (sum_{j<i} c_kj a_j + c_ki a_i / 2).

One Cholesky factorisation and one triangular inverse per gradient, O(M^3); the rest O(N M + M^2).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from bayes_rvm.models.marginal.numba_kernels import _gram_cholesky, _lower_inverse

__all__ = ["whitened_logp"]

_LOG_2PI = math.log(2.0 * math.pi)
#: The log rate is clipped here, as the count model's graph clips it (``families.ETA_MAX``).
_ETA_MAX = 700.0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def whitened_logp(x, Phi, G, c, y, phi2, beta, poisson, grad):  # pragma: no cover - numba
    """The log density at ``x = (log alpha_rel, u)`` (length 2 M); its gradient into ``grad``.

    ``Phi`` (N, M) the design, ``G`` (M, M) and ``c`` (M,) the expansion's ``Phi^T B Phi`` and
    ``Phi^T B r``, ``y`` (N,) labels 0/1 or counts, ``phi2`` (M,) the columns' squared scales,
    ``beta`` the half-Cauchy's scale, ``poisson`` whether ``y`` are counts. ``-inf`` where ``H``
    is not numerically positive definite.
    """
    M = G.shape[0]
    ell = x[:M]
    u = x[M:]
    alpha = np.exp(ell) * phi2
    # H = D Hs D with D = diag(1 / dinv) and Hs = Ls Ls^T, so L^-1 = Ls^-1 D^-1 = X diag(dinv)
    # (the factor of the marginal likelihood's kernels, equilibrated by the diagonal).
    Ls, dinv, ldinv, log_det = _gram_cholesky(alpha, 1.0, G)
    if not math.isfinite(log_det):
        return -np.inf
    X, sd = _lower_inverse(Ls, ldinv)
    z = X @ (dinv * c)  # L^-1 c
    v = X.T @ (z + u)
    w = dinv * v  # m + L^-T u
    eta = Phi @ w
    logp = -0.5 * log_det
    resid = np.empty(eta.size)
    for n in range(eta.size):
        e = eta[n]
        if poisson:
            e = min(e, _ETA_MAX)
            rate = math.exp(e)
            logp += y[n] * e - rate - math.lgamma(y[n] + 1.0)
            resid[n] = (y[n] - rate) if eta[n] < _ETA_MAX else 0.0
        elif e > 0:
            # y e - log(1 + exp(e)) and its derivative y - sigmoid(e), without overflow.
            t = math.exp(-e)
            logp += y[n] * e - e - math.log1p(t)
            resid[n] = y[n] - 1.0 / (1.0 + t)
        else:
            t = math.exp(e)
            logp += y[n] * e - math.log1p(t)
            resid[n] = y[n] - t / (1.0 + t)
    g = Phi.T @ resid
    log_beta2 = 2.0 * math.log(beta)
    for k in range(M):
        logp += -math.log(math.pi * beta) - math.log1p(math.exp(-ell[k] - log_beta2))
        logp += -0.5 * ell[k] + 0.5 * math.log(alpha[k]) - 0.5 * alpha[k] * w[k] * w[k]
        g[k] -= alpha[k] * w[k]
    logp -= 0.5 * M * _LOG_2PI
    a = X @ (dinv * g)  # L^-1 g: the gradient in u
    # Through L^-T u, for every k at once, row by row of L^-1 (column k of it is zero above
    # row k): partial[k] = sum_{j<i} c_kj a_j, through[k] = sum_i u_i c_ki (partial + c_ki a_i/2).
    partial = np.zeros(M)
    through = np.zeros(M)
    for i in range(M):
        Xi = X[i]
        ui, ai = u[i], a[i]
        for k in range(i + 1):
            cki = Xi[k] * dinv[k]
            through[k] += ui * cki * (partial[k] + 0.5 * cki * ai)
            partial[k] += cki * ai
    m = dinv * (X.T @ z)
    for k in range(M):
        # partial[k] is now (H^-1 g)_k; dinv_k^2 sd_k is (H^-1)_kk.
        d_alpha = 0.5 / alpha[k] - 0.5 * w[k] * w[k] - 0.5 * dinv[k] * dinv[k] * sd[k]
        d_alpha -= through[k] + m[k] * partial[k]
        grad[k] = alpha[k] * d_alpha + 1.0 / (1.0 + math.exp(ell[k] + log_beta2)) - 0.5
        grad[M + k] = a[k]
    return logp
