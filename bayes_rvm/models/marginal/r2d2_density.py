"""The default regression model's whole log density, compiled by numba without PyTensor.

The model :func:`~bayes_rvm.models.graphs.rvm_regression_model` builds at its defaults (the
marginal form, the R2-D2 prior in its Gaussian coordinates, half-normal noise) has
three free variables, in nutpie's flat point ``x = (t, z, s)``:

- ``t = logit R^2 = log omega`` (``alpha_rel_r2`` under its log-odds transform),
  ``R^2 ~ Beta(a, b)``;
- ``z`` (``alpha_rel_z``, one per column), standard normal;
- ``s = log sigma_rel`` (``sigma_rel`` under its log transform), ``sigma_rel ~ HalfNormal(c)``,

and ``log alpha_rel_i = log sum_j z_j^2 - log z_i^2 - t``. In ``log alpha`` coordinates (the
estimators' choice for a basis of relevance vectors) the point is ``x = (u, s)``, ``u = log
alpha_rel`` (``alpha_rel`` under its log transform), with the R2-D2 density of ``alpha_rel``
at concentration ``k``: ``omega = sum_i exp(-u_i)`` is ``BetaPrime(a, b)`` and ``exp(-u) /
omega`` a ``Dirichlet(k)``. Then ``log alpha_i = log alpha_rel_i + 2 log phi_scale_i - 2 log
y_scale``, ``log beta = -2 (s + log y_scale)``. The functions here
compute that density (the transforms' Jacobians included) and its gradient around the marginal
likelihood's own kernels, and the trace nutpie stores, in the order PyMC's graph gives them.
Compiled with ``cache=True``, they cost a cold machine a few seconds where PyTensor's numba
backend spends most of a cold fit compiling the graph's generic pieces. The entry points that call
the kernels of :mod:`~bayes_rvm.models.marginal.numba_kernels` are not cached on their own: their
machine code would embed those kernels, and numba judges a cache entry stale by its own file only.
The C callbacks that link them are cached, keyed on both files' source;
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
    "R2D2_LOG_ALPHA_TRACE",
    "R2D2_TRACE",
    "dense_r2d2_logp",
    "dense_r2d2_rows_logp",
    "lowrank_r2d2_logp",
    "lowrank_r2d2_rows_logp",
    "r2d2_expand",
    "r2d2_gaussian_prior",
    "r2d2_precisions",
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

#: The same in ``log alpha`` coordinates.
R2D2_LOG_ALPHA_TRACE = (
    "alpha_rel_vector_log__",
    "sigma_rel_log__",
    "alpha_rel",
    "sigma_rel",
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
def r2d2_precisions(x, phi_scale, y_scale, gaussian):  # pragma: no cover - numba
    """``log alpha`` (in the data's units) and ``sum z^2`` (0 in ``log alpha`` coordinates) at
    the flat point ``x``."""
    M = phi_scale.shape[0]
    log_alpha = np.empty(M)
    if not gaussian:
        for i in range(M):
            log_alpha[i] = x[i] + 2.0 * (math.log(phi_scale[i]) - math.log(y_scale))
        return log_alpha, 0.0
    sum_z2 = 0.0
    for i in range(M):
        sum_z2 += x[1 + i] * x[1 + i]
    shift = math.log(sum_z2) - x[0] - 2.0 * math.log(y_scale)
    for i in range(M):
        z = x[1 + i]
        log_alpha[i] = shift - math.log(z * z) + 2.0 * math.log(phi_scale[i])
    return log_alpha, sum_z2


@numba.njit(cache=True, nogil=True)
def r2d2_gaussian_prior(x, sum_z2, r2_a, r2_b, g_la, grad):  # pragma: no cover - numba
    """The R2-D2 prior's log density in Gaussian coordinates; its gradient, with the chain rule
    from ``g_la`` (in ``log alpha``), into ``grad``."""
    M, t = g_la.shape[0], x[0]
    sum_g = 0.0
    for i in range(M):
        sum_g += g_la[i]
    # Beta(a, b) on R^2 = sigmoid(t), with the log-odds Jacobian R^2 (1 - R^2).
    log_r2, log_1m_r2 = -_softplus(-t), -_softplus(t)
    r2 = math.exp(log_r2)
    log_b = math.lgamma(r2_a) + math.lgamma(r2_b) - math.lgamma(r2_a + r2_b)
    logp = r2_a * log_r2 + r2_b * log_1m_r2 - log_b
    grad[0] = r2_a * (1.0 - r2) - r2_b * r2 - sum_g
    # Standard normal z; d log alpha_i / d z_j = 2 z_j / sum z^2 - 2 [i = j] / z_i.
    share = 2.0 * sum_g / sum_z2
    for i in range(M):
        z = x[1 + i]
        logp -= 0.5 * z * z + _HALF_LOG_2PI
        grad[1 + i] = -z + share * z - 2.0 * g_la[i] / z
    return logp


@numba.njit(cache=True, nogil=True)
def _log_alpha_prior(x, r2_a, r2_b, k, g_la, grad):  # pragma: no cover - numba
    """The R2-D2 prior's log density in ``log alpha`` coordinates (the shares' Dirichlet
    concentration ``k``, with the log Jacobian); its gradient into ``grad``."""
    M = g_la.shape[0]
    omega = 0.0
    for i in range(M):
        omega += math.exp(-x[i])
    log_norm = math.lgamma(r2_a + r2_b) - math.lgamma(r2_a) - math.lgamma(r2_b)
    log_norm += math.lgamma(M * k) - M * math.lgamma(k)
    logp = log_norm + (r2_a - M * k) * math.log(omega) - (r2_a + r2_b) * math.log1p(omega)
    # d/du_i of (a - M k) log omega - (a + b) log(1 + omega), through omega's exp(-u_i)
    slope = (r2_a - M * k) / omega - (r2_a + r2_b) / (1.0 + omega)
    for i in range(M):
        logp -= k * x[i]  # (k + 1) log v_i with v_i = exp(-u_i), and the Jacobian u_i
        grad[i] = -k - slope * math.exp(-x[i]) + g_la[i]
    return logp


@numba.njit(cache=True, nogil=True)
def _with_priors(x, sum_z2, hyper, logp_y, g_la, g_lb):  # pragma: no cover - numba
    """The whole density and its gradient in ``x`` from the likelihood's, in ``log alpha`` and
    ``log beta``: the priors, their Jacobians and the chain rule through ``alpha`` and ``beta``
    (``sum_z2`` from :func:`r2d2_precisions`)."""
    r2_a, r2_b, k, noise_scale, gaussian = hyper
    n = x.shape[0]
    grad = np.empty(n)
    if gaussian:
        logp = logp_y + r2d2_gaussian_prior(x, sum_z2, r2_a, r2_b, g_la, grad)
    else:
        logp = logp_y + _log_alpha_prior(x, r2_a, r2_b, k, g_la, grad)
    # HalfNormal(c) on sigma_rel = e^s, with the log Jacobian s; log beta = -2 (s + log y_scale).
    s = x[n - 1]
    v = math.exp(s) / noise_scale
    logp += 0.5 * math.log(2.0 / math.pi) - math.log(noise_scale) - 0.5 * v * v + s
    grad[n - 1] = 1.0 - v * v - 2.0 * g_lb
    return logp, grad


@numba.njit(cache=True, nogil=True)
def _likelihood_inputs(x, y, phi_scale, y_scale, gaussian):  # pragma: no cover - numba
    """The kernels' ``log alpha``, ``log beta`` (0-d) and targets ``(N, D)`` at ``x``, and
    ``sum z^2``."""
    ys = y_scale.item()
    log_beta = np.asarray(-2.0 * (x[x.shape[0] - 1] + math.log(ys)))
    log_alpha, sum_z2 = r2d2_precisions(x, phi_scale, ys, gaussian)
    return log_alpha, log_beta, y.reshape((y.shape[0], -1)), sum_z2


@numba.njit(nogil=True)  # not cached: see the module docstring
def lowrank_r2d2_logp(x, U, VS, y, phi_scale, y_scale, hyper):  # pragma: no cover - numba
    """The default model's log density at ``x`` and its gradient, on a thin SVD ``(U, V S)``
    of the design (``y`` the targets, ``(N,)`` or ``(N, D)``; ``phi_scale`` and ``y_scale``
    the model's data; ``hyper = (a, b, k, c, gaussian)``: ``Beta(a, b)`` on ``R^2``, the
    shares' concentration ``k``, ``HalfNormal(c)`` on ``sigma_rel``, 1.0 for Gaussian
    coordinates or 0.0 for ``log alpha``)."""
    log_alpha, log_beta, Y, sum_z2 = _likelihood_inputs(x, y, phi_scale, y_scale, hyper[4])
    logp_y, g_la, g_lb, _ = lowrank_log_evidence_and_grad(log_alpha, log_beta, U, Y, VS)
    return _with_priors(x, sum_z2, hyper, logp_y.item(), g_la, g_lb.item())


@numba.njit(nogil=True)  # not cached: see the module docstring
def dense_r2d2_logp(x, Phi, gram, y, phi_scale, y_scale, hyper):  # pragma: no cover - numba
    """:func:`lowrank_r2d2_logp` on the design ``Phi`` and its Gram matrix ``Phi^T Phi``."""
    log_alpha, log_beta, Y, sum_z2 = _likelihood_inputs(x, y, phi_scale, y_scale, hyper[4])
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


@numba.njit(nogil=True)  # not cached: see the module docstring
def lowrank_r2d2_rows_logp(x, U, VS, y, phi_scale, y_scale, n_rows, hyper):  # pragma: no cover
    """:func:`lowrank_r2d2_logp` on a compressed design of ``n_rows`` (0-d) data rows."""
    logp, grad = lowrank_r2d2_logp(x, U, VS, y, phi_scale, y_scale, hyper)
    return _with_row_count(x, y, y_scale, n_rows, logp, grad)


@numba.njit(nogil=True)  # not cached: see the module docstring
def dense_r2d2_rows_logp(x, Phi, gram, y, phi_scale, y_scale, n_rows, hyper):  # pragma: no cover
    """:func:`dense_r2d2_logp` on a compressed design of ``n_rows`` (0-d) data rows."""
    logp, grad = dense_r2d2_logp(x, Phi, gram, y, phi_scale, y_scale, hyper)
    return _with_row_count(x, y, y_scale, n_rows, logp, grad)


@numba.njit(cache=True, nogil=True)
def r2d2_expand(x, phi_scale, y_scale, hyper):  # pragma: no cover - numba
    """The trace at ``x``, flat in :data:`R2D2_TRACE`'s order (:data:`R2D2_LOG_ALPHA_TRACE`'s
    in ``log alpha`` coordinates, ``hyper`` as for :func:`lowrank_r2d2_logp`; one tuple entry,
    as PyTensor's joined trace function returns it)."""
    gaussian = hyper[4]
    n, M = x.shape[0], phi_scale.shape[0]
    ys = y_scale.item()
    log_alpha, sum_z2 = r2d2_precisions(x, phi_scale, ys, gaussian)
    out = np.empty(n + 3 * M + (4 if gaussian else 3))
    for i in range(n):  # a loop: a slice assignment compiles numba's broadcast errors
        out[i] = x[i]
    sigma_rel = math.exp(x[n - 1])
    if gaussian:  # R^2, sigma_rel, then alpha_rel
        out[n] = 1.0 / (1.0 + math.exp(-x[0]))
        out[n + 1] = sigma_rel
        log_r = math.log(sum_z2) - x[0]
        for i in range(M):
            out[n + 2 + i] = math.exp(log_r - math.log(x[1 + i] * x[1 + i]))
    else:  # alpha_rel, then sigma_rel
        for i in range(M):
            out[n + i] = math.exp(x[i])
        out[n + M] = sigma_rel
    pos = out.shape[0] - 2 * M - 2
    for i in range(M):
        out[pos + i] = math.exp(log_alpha[i])
        out[pos + M + i] = log_alpha[i]
    sigma = sigma_rel * ys
    out[pos + 2 * M] = sigma
    out[pos + 2 * M + 1] = sigma**-2.0
    return (out,)
