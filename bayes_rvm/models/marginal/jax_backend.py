"""JAX implementation of :class:`~.op.MarginalLogLikelihood` (numpyro / blackjax).

Registered on demand by :func:`register_jax_dispatch`: importing JAX costs seconds, so nothing
here runs unless a JAX-based sampler is asked for.
"""

from __future__ import annotations

from bayes_rvm.families import LOG_2PI
from bayes_rvm.models.marginal.op import MarginalLogLikelihood

__all__ = ["register_jax_dispatch"]

_JAX_REGISTERED = False


def _core(log_alpha, log_beta, Phi, Y, gram):
    """Log density, closed-form gradient and finiteness on the full design, in jax.numpy."""
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    N, M = Phi.shape
    D = Y.shape[1]
    alpha = jnp.exp(log_alpha)
    beta = jnp.exp(log_beta)
    H = beta * gram + jnp.diag(alpha)
    d = jnp.sqrt(jnp.diag(H))
    Ls = jnp.linalg.cholesky(H / d[:, None] / d[None, :])
    Linv = solve_triangular(Ls, jnp.eye(M, dtype=Phi.dtype), lower=True)
    PY = (Phi.T @ Y) / d[:, None]
    mean = beta * (Linv.T @ (Linv @ PY)) / d[:, None]
    sigma_diag = jnp.sum(Linv**2, axis=0) / d**2
    resid = Y - Phi @ mean
    sse = jnp.sum(resid**2)
    m2 = jnp.sum(mean**2, axis=1)
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diag(Ls))) + 2.0 * jnp.sum(jnp.log(d))
    logp = (
        0.5 * D * (N * (log_beta - LOG_2PI) + jnp.sum(log_alpha) - log_det)
        - 0.5 * beta * sse
        - 0.5 * jnp.sum(alpha * m2)
    )
    g_alpha = 0.5 * (D - alpha * (m2 + D * sigma_diag))
    sum_gamma = M - jnp.sum(alpha * sigma_diag)
    g_beta = 0.5 * (N * D - D * sum_gamma - beta * sse)
    g_Y = -beta * resid
    finite = jnp.isfinite(logp)
    logp = jnp.where(finite, logp, -jnp.inf)
    return logp, g_alpha, g_beta, g_Y, finite


def _lowrank_core(log_alpha, log_beta, U, Y, VS):
    """The same on a thin SVD of the design (:mod:`~bayes_rvm.models.marginal.lowrank`)."""
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    # The algebra of numba_kernels.lowrank_log_evidence_and_grad, in jax.numpy.
    N, r = U.shape
    D = Y.shape[1]
    ainv = jnp.exp(-log_alpha)
    beta = jnp.exp(log_beta)
    K = (VS.T * ainv) @ VS + jnp.eye(r, dtype=U.dtype) / beta
    d = jnp.sqrt(jnp.diag(K))
    Ls = jnp.linalg.cholesky(K / d[:, None] / d[None, :])
    Linv = solve_triangular(Ls, jnp.eye(r, dtype=U.dtype), lower=True) / d[None, :]
    Kinv = Linv.T @ Linv
    Z = U.T @ Y
    Q = Kinv @ Z
    R = Y - U @ Z
    sse = jnp.sum(R**2)
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diag(Ls))) + 2.0 * jnp.sum(jnp.log(d))
    logp = -0.5 * (D * (N * LOG_2PI - (N - r) * log_beta + log_det) + beta * sse)
    logp = logp - 0.5 * jnp.sum(Z * Q)
    gkg = jnp.sum((VS @ Kinv) * VS, axis=1)
    g_alpha = 0.5 * ainv * (D * gkg - jnp.sum((VS @ Q) ** 2, axis=1))
    g_beta = 0.5 * (D * (N - r) + D * jnp.trace(Kinv) / beta - beta * sse - jnp.sum(Q**2) / beta)
    g_Y = -(beta * R + U @ Q)
    finite = jnp.isfinite(logp)
    logp = jnp.where(finite, logp, -jnp.inf)
    return logp, g_alpha, g_beta, g_Y, finite


def _with_closed_form_vjp(core):
    """``core``'s log density as a JAX function whose gradient is ``core``'s closed form."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def logp_fn(log_alpha, log_beta, A, Y, B):
        return core(log_alpha, log_beta, A, Y, B)[0]

    def fwd(log_alpha, log_beta, A, Y, B):
        logp, g_alpha, g_beta, g_Y, finite = core(log_alpha, log_beta, A, Y, B)
        keep = jnp.where(finite, 1.0, 0.0)
        zeros = (jnp.zeros_like(A), jnp.zeros_like(B))
        return logp, (keep * g_alpha, keep * g_beta, keep * g_Y, *zeros)

    def bwd(res, g):
        g_alpha, g_beta, g_Y, g_A, g_B = res
        return g * g_alpha, g * g_beta, g_A, g * g_Y, g_B

    logp_fn.defvjp(fwd, bwd)

    def marginal(log_alpha, log_beta, A, Y, B):
        logp = logp_fn(log_alpha, log_beta, A, Y, B)
        _, g_alpha, g_beta, g_Y, _ = jax.lax.stop_gradient(core(log_alpha, log_beta, A, Y, B))
        return logp, g_alpha, g_beta, g_Y

    return marginal


def register_jax_dispatch() -> None:
    """Give :class:`MarginalLogLikelihood` a JAX implementation (for numpyro / blackjax).

    JAX is imported only when a JAX-based sampler is asked for, since importing it costs seconds.
    PyMC's JAX samplers differentiate the JAX log density with ``jax.grad``; a ``custom_vjp``
    makes that gradient the same closed form as the PyTensor one. Idempotent.
    """
    global _JAX_REGISTERED
    if _JAX_REGISTERED:
        return
    from pytensor.link.jax.dispatch import jax_funcify

    implementations = {
        False: _with_closed_form_vjp(_core),
        True: _with_closed_form_vjp(_lowrank_core),
    }

    @jax_funcify.register(MarginalLogLikelihood)
    def _jax_funcify_marginal(op, **kwargs):
        return implementations[op.lowrank]

    _JAX_REGISTERED = True
