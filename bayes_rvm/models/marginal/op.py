"""The marginal-likelihood Op of the RVM regression model and its NumPy reference path.

``w`` integrated out: ``t_d ~ N(0, C)``, ``C = beta^-1 I + Phi A^-1 Phi^T``, evaluated in the
M x M space through the Woodbury identity and the determinant lemma
(``log|C| = log|H| - sum log alpha - N log beta`` with ``H = A + beta Phi^T Phi``) by one
Cholesky factorisation. The Op's gradient is the closed form of the evidence derivatives
(Tipping 2001, appendix; Fletcher eqs. 1.11-1.12)::

    d L / d log alpha_i = (D - alpha_i (sum_d m_id^2 + D Sigma_ii)) / 2
    d L / d log beta    = (N D - D sum_i gamma_i - beta ||T - Phi M||^2) / 2
    d L / d T           = -beta (T - Phi M)

so NUTS pays one O(N M^2 + M^3) pass per leapfrog step instead of differentiating through a
Cholesky. ``perform`` runs the NumPy path below; the numba backend (nutpie's default) lives in
:mod:`bayes_rvm.models.marginal.numba_backend` (its kernels in
:mod:`bayes_rvm.models.marginal.numba_kernels`),
the JAX one (numpyro / blackjax) in
:mod:`bayes_rvm.models.marginal.jax_backend`.
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.graph.op import Op

from bayes_rvm.evidence.gaussian import weight_posterior
from bayes_rvm.evidence.log_evidence import gaussian_log_evidence
from bayes_rvm.models.marginal.numba_kernels import lowrank_log_evidence_and_grad

__all__ = [
    "MarginalLogLikelihood",
    "log_evidence_and_grad",
    "lowrank_marginal_log_likelihood",
    "marginal_log_likelihood",
]


# ---------------------------------------------------------------------------------------------
# The marginal log density and its closed-form gradient
# ---------------------------------------------------------------------------------------------
def log_evidence_and_grad(
    log_alpha: np.ndarray,
    log_beta: float,
    Phi: np.ndarray,
    Y: np.ndarray,
    gram: np.ndarray | None = None,
) -> tuple[float, np.ndarray, float, np.ndarray]:
    """Log marginal likelihood ``sum_d ln N(t_d | 0, C)`` and its gradient (NumPy / SciPy).

    Parameters
    ----------
    log_alpha : ndarray of shape (M,)
        Log prior precisions of the weights.
    log_beta : float
        Log noise precision.
    Phi : ndarray of shape (N, M)
        Design matrix.
    Y : ndarray of shape (N, D)
        Targets; the D outputs share ``alpha`` and ``beta``.
    gram : ndarray of shape (M, M), optional
        ``Phi^T Phi``, precomputed once per data set (it is the largest cost of an evaluation).

    Returns
    -------
    logp : float
    grad_log_alpha : ndarray of shape (M,)
    grad_log_beta : float
    grad_Y : ndarray of shape (N, D)
        ``-C^-1 T = -beta (T - Phi M)``.

    Notes
    -----
    ``H = A + beta Phi^T Phi`` is equilibrated by its diagonal before the Cholesky factorisation:
    ``alpha`` spans many orders of magnitude between relevant and irrelevant basis functions, and
    the scaled matrix has unit diagonal whatever they are. Non-finite input or a failed
    factorisation gives ``logp = -inf`` (NUTS counts it as a divergence) and a zero gradient.
    """
    N, M = Phi.shape
    D = Y.shape[1]
    log_beta = float(log_beta)
    with np.errstate(over="ignore"):  # overflow is caught just below
        alpha = np.exp(log_alpha)
        beta = np.exp(log_beta)
    bad = (-np.inf, np.zeros(M), 0.0, np.zeros_like(Y, dtype=np.float64))
    if not (np.all(np.isfinite(alpha)) and np.isfinite(beta) and np.all(alpha > 0) and beta > 0):
        return bad
    try:
        post = weight_posterior(Phi.T @ Phi if gram is None else gram, Phi.T @ Y, alpha, beta)
    except np.linalg.LinAlgError:
        return bad
    mean = post.mean
    sigma_diag = post.sigma_diag()
    resid = Y - Phi @ mean
    sse = float(np.sum(resid**2))
    m2 = np.sum(mean**2, axis=1)
    # The engines' own formula, from the Cholesky factor of the unequilibrated H.
    logp = gaussian_log_evidence(
        post.chol * post.scale[:, None], alpha, beta, N, beta * sse + float(np.sum(alpha * m2)), D
    )
    g_alpha = 0.5 * (D - alpha * (m2 + D * sigma_diag))
    sum_gamma = M - float(np.sum(alpha * sigma_diag))
    g_beta = 0.5 * (N * D - D * sum_gamma - beta * sse)
    g_Y = -beta * resid
    if not np.isfinite(logp):
        return bad
    return float(logp), g_alpha, float(g_beta), g_Y


class MarginalLogLikelihood(Op):
    """PyTensor Op: ``(log alpha, log beta, Phi, T, Phi^T Phi) -> (logp, and its gradient)``.

    The outputs are ``logp``, ``dlogp/dlog alpha``, ``dlogp/dlog beta`` and ``dlogp/dT``.

    With ``lowrank=True`` the inputs are ``(log alpha, log beta, U, T, V S)`` of a thin SVD
    ``Phi = U S V^T`` (:func:`bayes_rvm.models.marginal.lowrank.thin_svd`) and the density is
    evaluated
    in the r-dimensional column space of the design (:mod:`bayes_rvm.models.marginal.lowrank`).

    Only the first output is meant to be used in a model; the others are the closed-form gradient,
    computed in the same pass and returned by :meth:`grad`, so that the logp-and-gradient function
    a NUTS sampler compiles runs one factorisation per evaluation. ``Phi^T Phi`` is an input so that
    it is computed once per data set (``pm.Data``), not once per leapfrog step; the caller keeps it
    consistent with ``Phi``. Gradients with respect to the design matrix and its Gram matrix are
    not implemented (they are data). Second derivatives are not available.
    """

    __props__ = ("lowrank",)

    def __init__(self, lowrank: bool = False):
        self.lowrank = bool(lowrank)
        super().__init__()

    def make_node(self, log_alpha, log_beta, Phi, Y, gram):
        inputs = [
            pt.as_tensor_variable(v).astype("float64") for v in (log_alpha, log_beta, Phi, Y, gram)
        ]
        if [v.ndim for v in inputs] != [1, 0, 2, 2, 2]:
            raise TypeError(
                "expected log_alpha (M,), log_beta (), Phi (N, M), Y (N, D) and gram (M, M)"
            )
        outputs = [pt.dscalar(), pt.dvector(), pt.dscalar(), pt.dmatrix()]
        return Apply(self, inputs, outputs)

    def perform(self, node, inputs, output_storage):
        if self.lowrank:
            # One implementation of the low-rank algebra: the compiled kernel (cached on disk).
            logp, g_alpha, g_beta, g_Y = lowrank_log_evidence_and_grad(*inputs)
        else:
            logp, g_alpha, g_beta, g_Y = log_evidence_and_grad(*inputs)
        output_storage[0][0] = np.asarray(logp, dtype=np.float64)
        output_storage[1][0] = np.asarray(g_alpha, dtype=np.float64)
        output_storage[2][0] = np.asarray(g_beta, dtype=np.float64)
        output_storage[3][0] = np.asarray(g_Y, dtype=np.float64)

    def infer_shape(self, node, input_shapes):
        return [(), input_shapes[0], (), input_shapes[3]]

    def pullback(self, inputs, outputs, cotangents):
        for g in cotangents[1:]:
            if not isinstance(g.type, DisconnectedType):
                raise NotImplementedError(
                    "MarginalLogLikelihood has no second derivatives: differentiate only its logp."
                )
        g = cotangents[0]
        _, g_alpha, g_beta, g_Y = outputs
        return [
            g * g_alpha,
            g * g_beta,
            grad_not_implemented(self, 2, inputs[2], "the design (or its factor U) is data"),
            g * g_Y,
            grad_not_implemented(self, 4, inputs[4], "the Gram matrix (or V S) is data"),
        ]


_marginal_op = MarginalLogLikelihood()
_lowrank_op = MarginalLogLikelihood(lowrank=True)


def marginal_log_likelihood(log_alpha, log_beta, Phi, Y, gram=None) -> pt.TensorVariable:
    """Symbolic ``sum_d ln N(t_d | 0, beta^-1 I + Phi A^-1 Phi^T)`` with a closed-form gradient.

    Parameters
    ----------
    log_alpha : tensor of shape (M,)
    log_beta : scalar tensor
    Phi : tensor of shape (N, M)
    Y : tensor of shape (N,) or (N, D)
    gram : tensor of shape (M, M), optional
        ``Phi^T Phi``; pass a ``pm.Data`` so it is not recomputed at every evaluation.

    Returns
    -------
    TensorVariable
        Scalar log density.
    """
    Y = pt.as_tensor_variable(Y)
    if Y.ndim == 1:
        Y = Y[:, None]
    if gram is None:
        gram = pt.as_tensor_variable(Phi).T @ pt.as_tensor_variable(Phi)
    return _marginal_op(log_alpha, log_beta, Phi, Y, gram)[0]


def lowrank_marginal_log_likelihood(log_alpha, log_beta, U, VS, Y) -> pt.TensorVariable:
    """The same density as :func:`marginal_log_likelihood` on a thin SVD ``Phi = U S V^T``.

    Parameters
    ----------
    log_alpha : tensor of shape (M,)
    log_beta : scalar tensor
    U : tensor of shape (N, r)
        Orthonormal left singular vectors of the design.
    VS : tensor of shape (M, r)
        ``V S``: right singular vectors scaled by the singular values.
    Y : tensor of shape (N,) or (N, D)

    Returns
    -------
    TensorVariable
        Scalar log density; one evaluation and its gradient cost ``O(M r^2 + N r D)``.
    """
    Y = pt.as_tensor_variable(Y)
    if Y.ndim == 1:
        Y = Y[:, None]
    return _lowrank_op(log_alpha, log_beta, U, Y, VS)[0]
