"""The default regression model's whole log density, compiled by numba without PyTensor.

The model :func:`~bayes_rvm.models.graphs.rvm_regression_model` builds at its defaults (the
marginal form, the R2-D2 prior in its Gaussian coordinates, half-normal noise) has
three free variables, in nutpie's flat point ``x = (t, z, s)``:

- ``t = logit R^2 = log omega`` (``alpha_rel_r2`` under its log-odds transform),
  ``R^2 ~ Beta(a, b)``;
- ``z`` (``alpha_rel_z``, one per column), standard normal;
- ``s = log sigma_rel`` (``sigma_rel`` under its log transform), ``sigma_rel ~ HalfNormal(c)``,

and ``log alpha_rel_i = log sum_j z_j^2 - log z_i^2 - t``, ``log alpha_i = log alpha_rel_i +
2 log phi_scale_i - 2 log y_scale``, ``log beta = -2 (s + log y_scale)``. The functions here
compute that density (the transforms' Jacobians included) and its gradient around the marginal
likelihood's own kernels, and the trace nutpie stores, in the order PyMC's graph gives them.
Compiled with ``cache=True``, they cost a cold machine a few seconds where PyTensor's numba
backend spends most of a cold fit compiling the graph's generic pieces;
:mod:`bayes_rvm.inference.nutpie_backend` hands them to nutpie for the models it recognises as
this one, and the tests hold them to PyMC's graph.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from bayes_rvm.models.marginal.numba_kernels import (
    log_evidence_numba,
    lowrank_log_evidence_and_grad,
)

__all__ = [
    "R2D2_TRACE",
    "dense_r2d2_logp",
    "dense_r2d2_rows_logp",
    "lowrank_r2d2_logp",
    "lowrank_r2d2_rows_logp",
    "r2d2_expand",
]

#: The flat point's variables, then the trace's (nutpie's layout of the model's graph).
R2D2_TRACE = (
    "alpha_rel_r2_logodds__",
    "alpha_rel_z",
    "sigma_rel_log__",
    "alpha_rel_r2",
    "sigma_rel",
    "alpha_rel",
    "alpha",
    "log_alpha",
    "sigma",
    "beta",
)

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@numba.njit(cache=True, nogil=True)
def _softplus(v):  # pragma: no cover - numba
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


@numba.njit(cache=True, nogil=True)
def _precisions(x, phi_scale, y_scale):  # pragma: no cover - numba
    """``log alpha`` (in the data's units) and ``sum z^2`` at the flat point ``x``."""
    M = x.shape[0] - 2
    sum_z2 = 0.0
    for i in range(M):
        sum_z2 += x[1 + i] * x[1 + i]
    shift = math.log(sum_z2) - x[0] - 2.0 * math.log(y_scale)
    log_alpha = np.empty(M)
    for i in range(M):
        z = x[1 + i]
        log_alpha[i] = shift - math.log(z * z) + 2.0 * math.log(phi_scale[i])
    return log_alpha, sum_z2


@numba.njit(cache=True, nogil=True)
def _with_priors(x, sum_z2, hyper, logp_y, g_la, g_lb):  # pragma: no cover - numba
    """The whole density and its gradient in ``x`` from the likelihood's, in ``log alpha`` and
    ``log beta``: the priors, their Jacobians and the chain rule through ``alpha`` and ``beta``
    (``sum_z2`` from :func:`_precisions`)."""
    r2_a, r2_b, noise_scale = hyper
    M = x.shape[0] - 2
    t, s = x[0], x[M + 1]
    sum_g = 0.0
    for i in range(M):
        sum_g += g_la[i]
    grad = np.empty(M + 2)
    # Beta(a, b) on R^2 = sigmoid(t), with the log-odds Jacobian R^2 (1 - R^2).
    log_r2, log_1m_r2 = -_softplus(-t), -_softplus(t)
    r2 = math.exp(log_r2)
    log_b = math.lgamma(r2_a) + math.lgamma(r2_b) - math.lgamma(r2_a + r2_b)
    logp = logp_y + r2_a * log_r2 + r2_b * log_1m_r2 - log_b
    grad[0] = r2_a * (1.0 - r2) - r2_b * r2 - sum_g
    # Standard normal z; d log alpha_i / d z_j = 2 z_j / sum z^2 - 2 [i = j] / z_i.
    share = 2.0 * sum_g / sum_z2
    for i in range(M):
        z = x[1 + i]
        logp -= 0.5 * z * z + _HALF_LOG_2PI
        grad[1 + i] = -z + share * z - 2.0 * g_la[i] / z
    # HalfNormal(c) on sigma_rel = e^s, with the log Jacobian s; log beta = -2 (s + log y_scale).
    v = math.exp(s) / noise_scale
    logp += 0.5 * math.log(2.0 / math.pi) - math.log(noise_scale) - 0.5 * v * v + s
    grad[M + 1] = 1.0 - v * v - 2.0 * g_lb
    return logp, grad


@numba.njit(cache=True, nogil=True)
def _likelihood_inputs(x, y, phi_scale, y_scale):  # pragma: no cover - numba
    """The kernels' ``log alpha``, ``log beta`` (0-d) and targets ``(N, D)`` at ``x``, and
    ``sum z^2``."""
    ys = y_scale.item()
    log_beta = np.asarray(-2.0 * (x[x.shape[0] - 1] + math.log(ys)))
    log_alpha, sum_z2 = _precisions(x, phi_scale, ys)
    return log_alpha, log_beta, y.reshape((y.shape[0], -1)), sum_z2


@numba.njit(cache=True, nogil=True)
def lowrank_r2d2_logp(x, U, VS, y, phi_scale, y_scale, hyper):  # pragma: no cover - numba
    """The default model's log density at ``x`` and its gradient, on a thin SVD ``(U, V S)``
    of the design (``y`` the targets, ``(N,)`` or ``(N, D)``; ``phi_scale`` and ``y_scale``
    the model's data; ``hyper = (a, b, c)``: ``Beta(a, b)`` on ``R^2``, ``HalfNormal(c)`` on
    ``sigma_rel``)."""
    log_alpha, log_beta, Y, sum_z2 = _likelihood_inputs(x, y, phi_scale, y_scale)
    logp_y, g_la, g_lb, _ = lowrank_log_evidence_and_grad(log_alpha, log_beta, U, Y, VS)
    return _with_priors(x, sum_z2, hyper, logp_y.item(), g_la, g_lb.item())


@numba.njit(cache=True, nogil=True)
def dense_r2d2_logp(x, Phi, gram, y, phi_scale, y_scale, hyper):  # pragma: no cover - numba
    """:func:`lowrank_r2d2_logp` on the design ``Phi`` and its Gram matrix ``Phi^T Phi``."""
    log_alpha, log_beta, Y, sum_z2 = _likelihood_inputs(x, y, phi_scale, y_scale)
    logp_y, g_la, g_lb, _ = log_evidence_numba(log_alpha, log_beta, Phi, Y, gram)
    return _with_priors(x, sum_z2, hyper, logp_y.item(), g_la, g_lb.item())


@numba.njit(cache=True, nogil=True)
def _with_row_count(x, y, y_scale, n_rows, logp, grad):  # pragma: no cover - numba
    """The density on a compressed design of ``n_rows`` data rows: its missing terms
    ``D (n_rows - k) (log beta - log 2 pi) / 2`` (``k`` compressed rows, as
    :func:`~bayes_rvm.models.marginal.statistics_log_density_offset`), in ``log beta``."""
    extra = 0.5 * (y.size // y.shape[0]) * (n_rows.item() - y.shape[0])
    log_beta = -2.0 * (x[x.shape[0] - 1] + math.log(y_scale.item()))
    grad[x.shape[0] - 1] -= 2.0 * extra
    return logp + extra * (log_beta - 2.0 * _HALF_LOG_2PI), grad


@numba.njit(cache=True, nogil=True)
def lowrank_r2d2_rows_logp(x, U, VS, y, phi_scale, y_scale, n_rows, hyper):  # pragma: no cover
    """:func:`lowrank_r2d2_logp` on a compressed design of ``n_rows`` (0-d) data rows."""
    logp, grad = lowrank_r2d2_logp(x, U, VS, y, phi_scale, y_scale, hyper)
    return _with_row_count(x, y, y_scale, n_rows, logp, grad)


@numba.njit(cache=True, nogil=True)
def dense_r2d2_rows_logp(x, Phi, gram, y, phi_scale, y_scale, n_rows, hyper):  # pragma: no cover
    """:func:`dense_r2d2_logp` on a compressed design of ``n_rows`` (0-d) data rows."""
    logp, grad = dense_r2d2_logp(x, Phi, gram, y, phi_scale, y_scale, hyper)
    return _with_row_count(x, y, y_scale, n_rows, logp, grad)


@numba.njit(cache=True, nogil=True)
def r2d2_expand(x, phi_scale, y_scale):  # pragma: no cover - numba
    """The trace at ``x``, flat in :data:`R2D2_TRACE`'s order (one tuple entry, as PyTensor's
    joined trace function returns it)."""
    M = x.shape[0] - 2
    ys = y_scale.item()
    log_alpha, sum_z2 = _precisions(x, phi_scale, ys)
    out = np.empty(4 * M + 6)
    for i in range(M + 2):  # a loop: a slice assignment compiles numba's broadcast errors
        out[i] = x[i]
    out[M + 2] = 1.0 / (1.0 + math.exp(-x[0]))
    sigma_rel = math.exp(x[M + 1])
    out[M + 3] = sigma_rel
    log_r = math.log(sum_z2) - x[0]
    for i in range(M):
        z = x[1 + i]
        out[M + 4 + i] = math.exp(log_r - math.log(z * z))
        out[2 * M + 4 + i] = math.exp(log_alpha[i])
        out[3 * M + 4 + i] = log_alpha[i]
    sigma = sigma_rel * ys
    out[4 * M + 4] = sigma
    out[4 * M + 5] = sigma**-2.0
    return (out,)
