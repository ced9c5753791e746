"""JAX implementation of :class:`~bayes_rvm.marginal.op.MarginalLogLikelihood` (numpyro / blackjax).

Registered on demand by :func:`register_jax_dispatch`: importing JAX costs seconds, so nothing
here runs unless a JAX-based sampler is asked for.
"""

from __future__ import annotations

from bayes_rvm.marginal.op import _LOG_2PI, MarginalLogLikelihood

__all__ = ["register_jax_dispatch"]

_JAX_REGISTERED = False


def register_jax_dispatch() -> None:
    """Give :class:`MarginalLogLikelihood` a JAX implementation (for numpyro / blackjax).

    JAX is imported only when a JAX-based sampler is asked for, since importing it costs seconds.
    PyMC's JAX samplers differentiate the JAX log density with ``jax.grad``; a ``custom_vjp``
    makes that gradient the same closed form as the PyTensor one. Idempotent.
    """
    global _JAX_REGISTERED
    if _JAX_REGISTERED:
        return
    import jax
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular
    from pytensor.link.jax.dispatch import jax_funcify

    def _core(log_alpha, log_beta, Phi, Y, gram):
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
            0.5 * D * (N * (log_beta - _LOG_2PI) + jnp.sum(log_alpha) - log_det)
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

    @jax.custom_vjp
    def logp_fn(log_alpha, log_beta, Phi, Y, gram):
        return _core(log_alpha, log_beta, Phi, Y, gram)[0]

    def fwd(log_alpha, log_beta, Phi, Y, gram):
        logp, g_alpha, g_beta, g_Y, finite = _core(log_alpha, log_beta, Phi, Y, gram)
        keep = jnp.where(finite, 1.0, 0.0)
        zeros = (jnp.zeros_like(Phi), jnp.zeros_like(gram))
        return logp, (keep * g_alpha, keep * g_beta, keep * g_Y, *zeros)

    def bwd(res, g):
        g_alpha, g_beta, g_Y, g_Phi, g_gram = res
        return g * g_alpha, g * g_beta, g_Phi, g * g_Y, g_gram

    logp_fn.defvjp(fwd, bwd)

    @jax_funcify.register(MarginalLogLikelihood)
    def _jax_funcify_marginal(op, **kwargs):
        def marginal(log_alpha, log_beta, Phi, Y, gram):
            logp = logp_fn(log_alpha, log_beta, Phi, Y, gram)
            _, g_alpha, g_beta, g_Y, _ = jax.lax.stop_gradient(
                _core(log_alpha, log_beta, Phi, Y, gram)
            )
            return logp, g_alpha, g_beta, g_Y

        return marginal

    _JAX_REGISTERED = True
