"""The weights of the Gaussian joint form, sampled whitened by their conditional posterior.

Given the precisions ``alpha``, the noise precision ``beta`` and the rest of the mean (the user's
terms, ``offset``), the weights of the Gaussian RVM have a Gaussian posterior::

    w | alpha, beta, t ~ N(m, Sigma),  Sigma = (A + beta Phi^T Phi)^-1,  m = beta Sigma Phi^T r

with ``r = t - offset``.

The joint form samples ``w`` through the change of variables ``w = m + Sigma^(1/2) u`` (the
Cholesky factor of ``Sigma^-1``, computed at every point from the current ``alpha``, ``beta`` and
offset; :class:`ConditionalGaussianWhitening`). In ``u`` the posterior factorises exactly::

    p(u, alpha, beta, ... | t) = N(u | 0, I) p(alpha, beta, ... | t)

with the second factor the weight-marginalised posterior: NUTS meets neither the funnel of the
centred weights (``w`` tied to ``alpha`` where the data say little) nor that of the non-centred
ones (``z = w sqrt(alpha)`` tied to ``alpha`` where the data pin ``w``), nor the correlations of
nearly collinear columns, which a diagonal mass matrix cannot follow. Each gradient factors an
M x M matrix, as the marginal form does.

The weights stay a random variable of the model with their prior ``N(0, 1/alpha)``
(``pm.sample_prior_predictive`` draws them from it); the whitening is the transform of their
value, so only the sampler sees ``u`` (the value variable ``w_whitened__``).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.logprob.transforms import Transform

__all__ = ["ConditionalGaussianWhitening", "whitened_gaussian_weights"]


def _conditional_factor(log_alpha, log_beta, gram, target):
    """``(L, d, m)``: ``A + beta G = diag(d) L L^T diag(d)`` and the conditional mean.

    ``G = Phi^T Phi`` and ``target = Phi^T r``, ``(M,)`` or ``(M, D)`` (outputs sharing
    ``alpha`` and ``beta``). Equilibrated by its diagonal ``d`` before the Cholesky
    factorisation, as the engines do, so that precisions decades apart (a pruned weight's
    ``alpha`` beside a relevant one's) keep the factor accurate.
    """
    beta = pt.exp(log_beta)
    H = beta * gram + pt.diag(pt.exp(log_alpha))
    d = pt.sqrt(pt.diag(H))
    L = pt.linalg.cholesky(H / pt.outer(d, d), lower=True)
    dd = d[:, None] if target.ndim == 2 else d
    u = pt.linalg.solve_triangular(L, beta * target / dd, lower=True)
    m = pt.linalg.solve_triangular(L.T, u, lower=False) / dd
    return L, d, m


class ConditionalGaussianWhitening(Transform):
    """The value transform ``w = m + Sigma^(1/2) u`` of :func:`whitened_gaussian_weights`.

    Reads ``log_alpha``, ``log_beta``, ``Phi`` and the residual ``t - offset`` (or, with
    ``statistics``, ``Phi^T Phi`` and ``Phi^T (t - offset)``) from the inputs of the weights'
    random variable (PyMC hands a transform those inputs, with every random variable among them
    replaced by its value), so the factor follows the current point.
    """

    name = "whitened"

    def __init__(self, statistics: bool = False):
        self.statistics = statistics

    def _parts(self, inputs):
        # inputs of the CustomDist's node: rng, size, then the four parameters.
        log_alpha, log_beta, a, b = inputs[-4:]
        if not self.statistics:
            a, b = a.T @ a, a.T @ b
        return _conditional_factor(log_alpha, log_beta, a, b)

    def backward(self, value, *inputs):
        L, d, m = self._parts(inputs)
        dd = d[:, None] if value.ndim == 2 else d
        return m + pt.linalg.solve_triangular(L.T, value, lower=False) / dd

    def forward(self, value, *inputs):
        L, d, m = self._parts(inputs)
        dd = d[:, None] if value.ndim == 2 else d
        return L.T @ (dd * (value - m))

    def log_jac_det(self, value, *inputs):
        L, d, _ = self._parts(inputs)
        outputs = 1 if value.ndim == 1 else value.shape[1]
        return -outputs * (pt.sum(pt.log(pt.diag(L))) + pt.sum(pt.log(d)))


def _prior_logp(value, log_alpha, log_beta, *data):
    scale = pt.exp(-0.5 * log_alpha)
    return pm.logp(pm.Normal.dist(0.0, scale[:, None] if value.ndim == 2 else scale), value)


def _prior_draw(log_alpha, log_beta, Phi, resid, rng=None, size=None):
    # resid: (N,) or (N, D), or Phi^T resid, (M,) or (M, D): its trailing axis is the outputs'.
    scale = np.exp(-0.5 * np.asarray(log_alpha))
    core = scale.shape[-1:] + np.shape(resid)[1:]
    size = core if size is None else tuple(size)
    if size[len(size) - len(core) :] != core:
        size = (*size, *core)
    return rng.normal(0.0, 1.0, size=size) * (scale[..., None] if len(core) == 2 else scale)


def whitened_gaussian_weights(
    log_alpha, log_beta, Phi, resid, w_dims: tuple, *, statistics: bool = False
):
    """The weights ``w[basis]`` (``w[basis, output]``) ``~ N(0, 1/alpha)``, sampled whitened.

    Parameters
    ----------
    log_alpha : tensor of shape (M,)
        The weights' prior precisions (logarithms), in the units of ``Phi`` and the targets.
    log_beta : scalar tensor
        The noise precision's logarithm.
    Phi : tensor of shape (N, M)
        The design.
    resid : tensor of shape (N,) or (N, D)
        The targets less the rest of the mean (the user's terms, which may be random).
    w_dims : tuple
        Dims of the weights: ``(basis,)`` or ``(basis, output)``.
    statistics : bool, default=False
        ``Phi`` and ``resid`` are given as ``Phi^T Phi`` (M, M) and ``Phi^T resid`` (M,) or
        (M, D): fixed data, computed once instead of at every gradient.

    Returns
    -------
    TensorVariable
        The random variable ``w``, whose value the sampler sees through
        :class:`ConditionalGaussianWhitening`.
    """
    multi = len(w_dims) == 2
    transform = ConditionalGaussianWhitening(statistics)
    rows = "m,m" if statistics else "n,m"
    resid_core = ("m" if statistics else "n") + (",d" if multi else "")

    def conditional_mean(rv, size, *inputs):
        # Where the sampler starts: u = 0, the weights' conditional mean at the starting point.
        return transform._parts(inputs)[2]

    return pm.CustomDist(
        "w",
        log_alpha,
        log_beta,
        Phi,
        resid,
        logp=_prior_logp,
        random=_prior_draw,
        support_point=conditional_mean,
        signature=f"(m),(),({rows}),({resid_core})->(m{',d' if multi else ''})",
        transform=transform,
        dims=w_dims,
    )
