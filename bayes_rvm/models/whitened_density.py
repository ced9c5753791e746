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

Under the R2-D2 prior in its Gaussian coordinates the point is ``x = (t, z, u)``
(:mod:`~bayes_rvm.models.marginal.r2d2_density`), whose prior terms and chain rule to ``log
alpha`` replace the first sum. One Cholesky factorisation and one triangular inverse per
gradient, O(M^3); the rest O(N M + M^2).
Through PyTensor the same density costs 2-3 times as much a gradient. As in
:mod:`~bayes_rvm.models.marginal.r2d2_density`, the functions that call the marginal kernels are
not cached on their own; :mod:`bayes_rvm.inference.nutpie_backend` links them into C callbacks
cached on the source of the files they link, for the models it recognises as these.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from bayes_rvm.models.marginal.numba_kernels import gram_cholesky, lower_inverse
from bayes_rvm.models.marginal.r2d2_density import r2d2_gaussian_prior, r2d2_precisions

__all__ = [
    "WHITENED_R2D2_TRACE",
    "WHITENED_TRACE",
    "whitened_expand",
    "whitened_logp",
    "whitened_logp_and_grad",
    "whitened_r2d2_expand",
    "whitened_r2d2_logp_and_grad",
]

#: The flat point's variables, then the trace's (nutpie's layout of the model's graph), under
#: the half-Cauchy precision hyperprior.
WHITENED_TRACE = ("alpha_rel_log__", "w_whitened__", "alpha_rel", "w", "alpha", "log_alpha")
#: The same under the R2-D2 prior in its Gaussian coordinates.
WHITENED_R2D2_TRACE = (
    "alpha_rel_r2_logodds__",
    "alpha_rel_z",
    "w_whitened__",
    "alpha_rel_r2",
    "w",
    "alpha_rel",
    "alpha",
    "log_alpha",
)

_LOG_2PI = math.log(2.0 * math.pi)
#: The log rate is clipped here, as the count model's graph clips it (``families.ETA_MAX``).
_ETA_MAX = 700.0


@numba.njit(nogil=True, error_model="numpy")  # not cached: see the module docstring
def _whitened_weights(alpha, u, G, c):  # pragma: no cover - numba
    """``(w, dinv, X, sd, z, log|H|)`` at the precisions ``alpha`` and ``u``, with ``H = D Hs
    D``, ``D = diag(1 / dinv)``, ``X = Ls^-1`` (``Hs = Ls Ls^T``, the marginal kernels'
    equilibrated factor), so that ``L^-1 = X diag(dinv)``; ``sd`` the column sums of ``X^2``;
    ``z = L^-1 c``."""
    Ls, dinv, ldinv, log_det = gram_cholesky(alpha, 1.0, G)
    if not math.isfinite(log_det):
        return alpha, dinv, Ls, dinv, dinv, log_det
    X, sd = lower_inverse(Ls, ldinv)
    z = X @ (dinv * c)  # L^-1 c
    w = dinv * (X.T @ (z + u))  # m + L^-T u
    return w, dinv, X, sd, z, log_det


@numba.njit(nogil=True, error_model="numpy")  # not cached: see the module docstring
def _weights_by_solves(alpha, u, G, c):  # pragma: no cover - numba
    """``(w, log|H|)`` of :func:`_whitened_weights` by two triangular solves, without the
    inverse that the gradient needs (the trace's cost: O(M^2) after the factor)."""
    M = G.shape[0]
    Ls, dinv, ldinv, log_det = gram_cholesky(alpha, 1.0, G)
    r = dinv * c
    if not math.isfinite(log_det):
        return r, log_det
    for i in range(M):  # r = Ls^-1 (dinv c), then + u
        Li = Ls[i]
        s = r[i]
        for k in range(i):
            s -= Li[k] * r[k]
        r[i] = s * ldinv[i]
    for i in range(M):
        r[i] += u[i]
    for i in range(M - 1, -1, -1):  # Ls^-T r, by the rows of Ls
        r[i] *= ldinv[i]
        Li = Ls[i]
        for k in range(i):
            r[k] -= Li[k] * r[i]
    return dinv * r, log_det


@numba.njit(nogil=True, error_model="numpy")  # not cached: see the module docstring
def _weights_density(alpha, u, Phi, G, c, y, poisson, g_la):  # pragma: no cover - numba
    """What the weights add to the log density at the precisions ``alpha`` (in the data's
    units) and ``u``: their prior ``N(0, 1/alpha)``, the likelihood and ``log|dw/du|``, with
    its gradient in ``u``; its gradient in ``log alpha`` into ``g_la``. ``(-inf, zeros)``, and
    ``g_la`` zero, where ``H`` is not numerically positive definite."""
    M = G.shape[0]
    w, dinv, X, sd, z, log_det = _whitened_weights(alpha, u, G, c)
    if not math.isfinite(log_det):
        g_la[:] = 0.0
        return -np.inf, np.zeros(M)
    eta = Phi @ w
    logp = -0.5 * log_det - 0.5 * M * _LOG_2PI
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
    for k in range(M):
        logp += 0.5 * math.log(alpha[k]) - 0.5 * alpha[k] * w[k] * w[k]
        g[k] -= alpha[k] * w[k]
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
        g_la[k] = alpha[k] * d_alpha
    return logp, a


@numba.njit(nogil=True, error_model="numpy")  # not cached: see the module docstring
def whitened_logp(x, Phi, G, c, y, phi2, hyper, grad):  # pragma: no cover - numba
    """The log density at ``x = (log alpha_rel, u)`` (length 2 M) under the half-Cauchy
    precision hyperprior; its gradient into ``grad``.

    ``Phi`` (N, M) the design, ``G`` (M, M) and ``c`` (M,) the expansion's ``Phi^T B Phi`` and
    ``Phi^T B r``, ``y`` (N,) labels 0/1 or counts, ``phi2`` (M,) the columns' squared scales,
    ``hyper = (beta, poisson)``: the half-Cauchy's scale, and 1.0 for counts or 0.0 for labels.
    ``-inf`` where ``H`` is not numerically positive definite.
    """
    M = G.shape[0]
    ell = x[:M]
    beta = hyper[0]
    alpha = np.exp(ell) * phi2
    g_la = np.empty(M)
    logp, g_u = _weights_density(alpha, x[M:], Phi, G, c, y, hyper[1] > 0.5, g_la)
    log_beta2 = 2.0 * math.log(beta)
    for k in range(M):
        # log(1 + e^v), v = -ell - 2 log beta, without overflow where ell is very negative.
        v = -ell[k] - log_beta2
        logp += -math.log(math.pi * beta) - (max(v, 0.0) + math.log1p(math.exp(-abs(v))))
        logp -= 0.5 * ell[k]
        grad[k] = g_la[k] + 1.0 / (1.0 + math.exp(ell[k] + log_beta2)) - 0.5
        grad[M + k] = g_u[k]
    return logp


@numba.njit(nogil=True)  # not cached: see the module docstring
def whitened_logp_and_grad(x, Phi, G, c, y, phi_scale, hyper):  # pragma: no cover - numba
    """``(log p(x), gradient)`` of :func:`whitened_logp`, ``phi_scale`` the columns' scales and
    ``hyper = (beta, poisson)`` (the latter 1.0 for counts, 0.0 for labels): the C callbacks'
    entry."""
    grad = np.empty(x.shape[0])
    logp = whitened_logp(x, Phi, G, c, y, phi_scale * phi_scale, hyper, grad)
    return logp, grad


@numba.njit(nogil=True)  # not cached: see the module docstring
def whitened_r2d2_logp_and_grad(x, Phi, G, c, y, phi_scale, hyper):  # pragma: no cover - numba
    """``(log p(x), gradient)`` under the R2-D2 prior in its Gaussian coordinates, ``x = (t,
    z, u)`` (length 2 M + 1; :mod:`~bayes_rvm.models.marginal.r2d2_density`), ``hyper = (a, b,
    poisson)``: ``Beta(a, b)`` on ``R^2``, and 1.0 for counts or 0.0 for labels."""
    M = G.shape[0]
    grad = np.zeros(x.shape[0])
    log_alpha, sum_z2 = r2d2_precisions(x, phi_scale, 1.0, True)
    g_la = np.empty(M)
    alpha = np.exp(log_alpha)
    logp, g_u = _weights_density(alpha, x[1 + M :], Phi, G, c, y, hyper[2] > 0.5, g_la)
    if not math.isfinite(logp):
        return logp, grad
    logp += r2d2_gaussian_prior(x, sum_z2, hyper[0], hyper[1], g_la, grad)
    for k in range(M):
        grad[1 + M + k] = g_u[k]
    return logp, grad


@numba.njit(nogil=True)  # not cached: see the module docstring
def whitened_expand(x, G, c, phi_scale, hyper):  # pragma: no cover - numba
    """The trace at ``x``, flat in :data:`WHITENED_TRACE`'s order (one tuple entry, as
    PyTensor's joined trace function returns it); ``hyper`` as for
    :func:`whitened_logp_and_grad`."""
    M = G.shape[0]
    alpha = np.exp(x[:M]) * phi_scale * phi_scale
    w, log_det = _weights_by_solves(alpha, x[M:], G, c)
    out = np.empty(6 * M)
    for i in range(2 * M):  # a loop: a slice assignment compiles numba's broadcast errors
        out[i] = x[i]
    for i in range(M):
        out[2 * M + i] = math.exp(x[i])
        out[3 * M + i] = w[i] if math.isfinite(log_det) else np.nan
        out[4 * M + i] = alpha[i]
        out[5 * M + i] = math.log(alpha[i])
    return (out,)


@numba.njit(nogil=True)  # not cached: see the module docstring
def whitened_r2d2_expand(x, G, c, phi_scale, hyper):  # pragma: no cover - numba
    """The trace at ``x``, flat in :data:`WHITENED_R2D2_TRACE`'s order; ``hyper`` as for
    :func:`whitened_r2d2_logp_and_grad`."""
    M = G.shape[0]
    n = x.shape[0]
    log_alpha, _ = r2d2_precisions(x, phi_scale, 1.0, True)
    alpha = np.exp(log_alpha)
    w, log_det = _weights_by_solves(alpha, x[1 + M :], G, c)
    out = np.empty(n + 1 + 4 * M)
    for i in range(n):
        out[i] = x[i]
    out[n] = 1.0 / (1.0 + math.exp(-x[0]))
    for i in range(M):
        out[n + 1 + i] = w[i] if math.isfinite(log_det) else np.nan
        out[n + 1 + M + i] = alpha[i] / (phi_scale[i] * phi_scale[i])
        out[n + 1 + 2 * M + i] = alpha[i]
        out[n + 1 + 3 * M + i] = log_alpha[i]
    return (out,)
