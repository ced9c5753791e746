"""Numba implementation of :class:`~bayes_rvm.marginal.op.MarginalLogLikelihood` (nutpie's backend).

Registered with PyTensor's numba linker on import (the package ``__init__`` imports this module),
compiled with ``cache=True`` so that numba keeps the machine code on disk across processes.
"""

from __future__ import annotations

import numba
import numpy as np
from pytensor.link.numba.dispatch.basic import register_funcify_default_op_cache_key

from bayes_rvm.marginal.op import _LOG_2PI, MarginalLogLikelihood


@numba.njit(cache=True, fastmath={"reassoc", "contract"})
def _log_evidence_numba(log_alpha, log_beta, Phi, Y, gram):  # pragma: no cover - compiled by numba
    # Same algebra as log_evidence_and_grad, written with loops numba compiles without the GIL,
    # so that nutpie's chains run in parallel threads.
    N, M = Phi.shape
    D = Y.shape[1]
    lb = log_beta.item()
    beta = np.exp(lb)
    alpha = np.exp(log_alpha)
    Phi = np.ascontiguousarray(Phi)
    Y = np.ascontiguousarray(Y)
    out_ga = np.zeros(M)
    out_gY = np.zeros((N, D))
    ok = np.isfinite(beta) and beta > 0.0
    for i in range(M):
        if not (np.isfinite(alpha[i]) and alpha[i] > 0.0):
            ok = False
    if not ok:
        return np.asarray(-np.inf), out_ga, np.asarray(0.0), out_gY
    # H = A + beta Phi^T Phi scaled to unit diagonal, built row by row inside its own Cholesky
    # factor (lower triangle only). Reciprocals are kept because divisions cost several times a
    # multiplication in these O(M^2) and O(M^3) loops; row views (Li = L[i]) let LLVM
    # vectorise the inner loops, where 2-D indexing does not. log|H| = sum log h_ii + log|H_s|.
    dinv = np.empty(M)
    log_det = 0.0
    for i in range(M):
        hii = alpha[i] + beta * gram[i, i]
        dinv[i] = 1.0 / np.sqrt(hii)
        log_det += np.log(hii)
    L = np.empty((M, M))
    ldinv = np.empty(M)
    for i in range(M):
        Li = L[i]
        gi = gram[i]
        si = beta * dinv[i]
        for j in range(i):
            Li[j] = si * gi[j] * dinv[j]
        for j in range(i):
            Lj = L[j]
            s = Li[j]
            for k in range(j):
                s -= Li[k] * Lj[k]
            Li[j] = s * ldinv[j]
        s = 1.0
        for k in range(i):
            s -= Li[k] * Li[k]
        if not s > 0.0:
            return np.asarray(-np.inf), out_ga, np.asarray(0.0), out_gY
        Li[i] = np.sqrt(s)
        ldinv[i] = 1.0 / Li[i]
        log_det += np.log(s)
    # X = L^-1 (lower), row i from the rows above it, inner loops along contiguous rows;
    # diag(H_s^-1) = column sums of X^2, accumulated as the rows are made.
    X = np.zeros((M, M))
    acc = np.empty(M)
    sd = np.zeros(M)
    for i in range(M):
        Li = L[i]
        for j in range(i):
            acc[j] = 0.0
        for k in range(i):
            lik = Li[k]
            Xk = X[k]
            for j in range(k + 1):
                acc[j] += lik * Xk[j]
        inv = ldinv[i]
        Xi = X[i]
        for j in range(i):
            v = -acc[j] * inv
            Xi[j] = v
            sd[j] += v * v
        Xi[i] = inv
        sd[i] += inv * inv
    PY = Phi.T @ Y
    for i in range(M):
        for c in range(D):
            PY[i, c] *= dinv[i]
    tmp = X @ PY
    mean = X.T @ tmp
    for i in range(M):
        for c in range(D):
            mean[i, c] *= beta * dinv[i]
    resid = Y - Phi @ mean
    sse = 0.0
    for n in range(N):
        for c in range(D):
            sse += resid[n, c] * resid[n, c]
    sum_la = 0.0
    alpha_sigma = 0.0
    penalty = 0.0
    for i in range(M):
        sum_la += log_alpha[i]
        sdi = sd[i] * dinv[i] * dinv[i]
        m2 = 0.0
        for c in range(D):
            m2 += mean[i, c] * mean[i, c]
        penalty += alpha[i] * m2
        alpha_sigma += alpha[i] * sdi
        out_ga[i] = 0.5 * (D - alpha[i] * (m2 + D * sdi))
    logp = 0.5 * D * (N * (lb - _LOG_2PI) + sum_la - log_det) - 0.5 * beta * sse - 0.5 * penalty
    sum_gamma = M - alpha_sigma
    g_beta = 0.5 * (N * D - D * sum_gamma - beta * sse)
    for n in range(N):
        for c in range(D):
            out_gY[n, c] = -beta * resid[n, c]
    if not np.isfinite(logp):
        return np.asarray(-np.inf), np.zeros(M), np.asarray(0.0), np.zeros((N, D))
    return np.asarray(logp), out_ga, np.asarray(g_beta), out_gY


@register_funcify_default_op_cache_key(MarginalLogLikelihood)
def _numba_funcify_marginal(op, node=None, **kwargs):
    # Bumping the integer invalidates numba's on-disk cache when the kernel changes.
    return _log_evidence_numba, 4
