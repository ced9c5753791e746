"""Predictive distributions of a fitted RVM: the plain RVM, RVM* and mixtures over MCMC draws.

Pure NumPy / SciPy functions on arrays in the user's units; the estimators only call them.

RVM* (Rasmussen & Quinonero-Candela, ICML 2005)
-----------------------------------------------
The RVM is a Gaussian process with the degenerate covariance
``k_RVM(x, x') = sum_j phi_j(x) phi_j(x') / alpha_j`` over its K relevance vectors: far from them
every ``phi_j`` vanishes and the predictive variance collapses to the noise, exactly where the
model knows least. RVM* adds, at prediction time only, one basis function centred on the test
point, ``phi_*(x) = k(x, x_*)``, with its own weight ``w_* ~ N(0, 1 / alpha_*)``, and predicts
with the augmented model, the other hyperparameters fixed. Writing ``u = phi_*(X_train)``,
``B`` for the likelihood's precision at the training points (``beta I`` for Gaussian noise, the
Laplace weights ``pi (1 - pi)`` for a Bernoulli likelihood), ``g`` for the gradient of the log
likelihood with respect to the latent function at the posterior mode (``beta (t - Phi m)``, or
``t - pi``) and ``Sigma = L^-T L^-1`` for the posterior covariance of the K weights, the added
weight's Schur complement in the augmented posterior precision is

    S_* = alpha_* + s_*,   s_* = u^T B u - (Phi^T B u)^T Sigma (Phi^T B u)

(``s_*`` is Tipping & Faul's sparsity factor of the new function), and the augmented predictive
at ``x_*`` is, exactly (a rank-one update of the posterior; no refit):

    mean_* = mean_RVM(x_*) + e_* q_* / S_*,     var_* = var_RVM(x_*) + e_*^2 / S_*,
    e_* = k(x_*, x_*) - phi(x_*)^T Sigma Phi^T B u,      q_* = u^T g.

For Gaussian noise these are the moments of the augmented linear-Gaussian model; for a Laplace
posterior they are those of its Gaussian approximation at the mode (the mean is one Newton step
of the augmented posterior from the old mode, where ``w_* = 0``).

The prior of the added weight. Far from the training data ``u``, ``s_*`` and ``phi(x_*)`` vanish
and the augmented variance tends to ``var_RVM + k(x_*, x_*)^2 / alpha_*``: the prior variance
of the added function at its own centre, written ``tau^2 k(x_*, x_*)`` with
``alpha_* = k(x_*, x_*) / tau^2``. ``alpha_*`` is set, not re-estimated (the evidence would
often prune the new function, ``alpha_* -> inf``, and undo the augmentation). For regression
``tau^2`` is the variance of the training targets (:func:`target_amplitude`; the mean over
outputs), the reading of the paper by a public re-implementation (``alpha_* = 1 / var(t)`` for a
unit-height kernel): far from the data the predictive variance returns to the targets' variance
plus the noise.

The other candidate, the RVM's own prior variance averaged over the training inputs,
``tau^2 = mean_n k_RVM(x_n, x_n) / mean_n k(x_n, x_n)`` (:func:`augmentation_amplitude`), was
measured on the problems of ``benchmarks/bench_predictive.py``: test NLPD within 0.1 nats of
the targets' variance everywhere (worse by 0.10 on the sinc gap, better by 0.01 on Friedman #3),
but with the broad, overlapping basis functions of Friedman #2, #3 and the diabetes data the
relevance vectors' weights have prior variances far above the targets' (they cancel each other
in the fit), and its predictive sd far from the data was 8 to 80 times the targets' sd
(Friedman #3: 24 against 0.29). The classifier keeps it: on the latent scale of a Laplace fit
there is no target variance to borrow.

RVM* under MCMC. Given a posterior draw ``(alpha_s, beta_s)`` of the hyperparameters the weights'
posterior is Gaussian, and the draw's augmented predictive is the formula above with that draw's
``Sigma_s``, ``m_s`` and ``beta_s`` (:func:`rvm_star_draws`); the MCMC predictive is the
equal-weight mixture of these Gaussians over the draws. Unlike the plain MCMC predictive (one
weight draw per hyperparameter draw), each draw's weights are integrated out.

Column normalisation. The engines fit on unit-norm basis columns, where a weight's prior
precision is ``alpha_n = alpha / ||phi||^2``. The added function must get its prior in the
user's units, as above: a precision fixed on the normalised scale would give it the prior
variance ``k(x_*, x_*)^2 / (alpha_n ||u||^2)``, which diverges as the test point leaves the data
(``||u|| -> 0``). Everything here is in the user's units (the estimators un-normalise their fits
first), so the normalisation plays no part.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import linalg
from scipy.special import logsumexp

from bayes_rvm.evidence.gaussian import weight_posterior
from bayes_rvm.families import gaussian_log_likelihood

__all__ = [
    "AugmentationData",
    "DrawPosteriors",
    "augmentation_amplitude",
    "mixture_log_density",
    "mixture_moments",
    "rvm_star",
    "rvm_star_cov",
    "rvm_star_draws",
    "rvm_star_softmax",
    "target_amplitude",
]


@dataclass(frozen=True)
class AugmentationData:
    """What RVM* needs of the training problem, in the user's units.

    Attributes
    ----------
    phi : ndarray of shape (N, K)
        Active design matrix at the training inputs.
    precision : float or ndarray of shape (N,)
        Likelihood precision ``B`` at the training points (``beta``, or the Laplace weights).
    score : ndarray of shape (N, D)
        Gradient of the log likelihood with respect to the latent function at the mode.
    chol : ndarray of shape (K, K)
        Lower Cholesky factor of the posterior precision of the K weights (per output block).
    amplitude : float
        ``tau^2``: the added function's prior variance at its centre is ``tau^2 k(x_*, x_*)``.
    """

    phi: np.ndarray
    precision: float | np.ndarray
    score: np.ndarray
    chol: np.ndarray
    amplitude: float


def augmentation_amplitude(phi: np.ndarray, alpha: np.ndarray, k_diag: np.ndarray) -> float:
    """``tau^2 = mean_n k_RVM(x_n, x_n) / mean_n k(x_n, x_n)``: the RVM's own prior variance.

    RVM*'s added-function amplitude for a Laplace (classification) fit; see the module
    docstring.

    Parameters
    ----------
    phi : ndarray of shape (N, K)
        Active design matrix at the training inputs (user's units).
    alpha : ndarray of shape (K,)
        Prior precisions of the active weights (user's units).
    k_diag : ndarray of shape (N,)
        ``k(x_n, x_n)`` at the training inputs.
    """
    prior_var = float(np.mean((phi**2) @ (1.0 / np.asarray(alpha, dtype=np.float64))))
    scale = float(np.mean(k_diag))
    if not (np.isfinite(prior_var) and scale > 0):
        raise ValueError(
            "RVM* needs a kernel with positive k(x, x) on the training inputs; got a mean of "
            f"{scale!r}. Use predictive='rvm' with this kernel."
        )
    return prior_var / scale


def target_amplitude(y: np.ndarray) -> float:
    """``tau^2 = var(t)``: RVM*'s added-function amplitude for regression (module docstring).

    The variance of the training targets, averaged over outputs. Constant targets give no
    scale: ``tau^2`` is then the smallest positive float, and RVM* is the plain RVM.

    Parameters
    ----------
    y : ndarray of shape (N,) or (N, D)
    """
    T = np.asarray(y, dtype=np.float64)
    var = float(np.mean(np.var(T.reshape(T.shape[0], -1), axis=0)))
    return max(var, np.finfo(np.float64).tiny)


def _solve_lower(chol: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    if chol.shape[0] == 0:
        return np.zeros((0, *rhs.shape[1:]))
    return linalg.solve_triangular(chol, rhs, lower=True, check_finite=False)


def _augmentation_terms(data: AugmentationData, phi_test, cross, self_k):
    """``S_*``-free pieces shared by :func:`rvm_star` and :func:`rvm_star_cov`.

    Returns ``V = L^-1 phi_test^T`` (K x n), ``W = L^-1 Phi^T B u`` (K x n), ``q = u^T g``
    (n x D), ``u^T B u`` (n,), the prior precision ``alpha_*`` (n,) and the mask of test points
    that get a function.
    """
    self_k = np.asarray(self_k, dtype=np.float64)
    K = data.phi.shape[1]
    scalar = np.ndim(data.precision) == 0
    # One pass over the (n, N) block of the added functions: u^T [B Phi, g], and u^T B u.
    right = np.hstack([data.phi * (1.0 if scalar else data.precision[:, None]), data.score])
    prod = cross @ right
    if scalar:
        prod[:, :K] *= data.precision
        uBu = data.precision * np.einsum("ij,ij->i", cross, cross)
    else:
        uBu = (cross**2) @ data.precision
    both = _solve_lower(data.chol, np.vstack([phi_test, prod[:, :K]]).T)
    n = phi_test.shape[0]
    return (both[:, :n], both[:, n:], prod[:, K:], uBu, *_added_prior(self_k, data.amplitude))


def _added_prior(self_k: np.ndarray, amplitude: float) -> tuple[np.ndarray, np.ndarray]:
    """``alpha_* = k(x*, x*) / tau^2`` and the mask of test points that get a function.

    A kernel with ``k(x*, x*) <= 0`` there (only non-PSD kernels) gives the added function no
    prior variance: the plain RVM's predictive is the limit, and those points keep it.
    """
    ok = self_k > 0
    return np.where(ok, self_k, 1.0) / amplitude, ok


def rvm_star(
    mean: np.ndarray,
    var: np.ndarray,
    phi_test: np.ndarray,
    cross: np.ndarray,
    self_k: np.ndarray,
    data: AugmentationData,
) -> tuple[np.ndarray, np.ndarray]:
    """RVM* predictive moments of the latent function at each test point (module docstring).

    Vectorised over test points: one GEMM gives ``u^T [B Phi, g]`` (O(N K) per point) and one
    triangular solve with 2n right-hand sides gives ``L^-1 phi_*`` and ``L^-1 Phi^T B u``
    (O(K^2) per point). With the kernel row ``k(x_*, X)`` (O(N d)), that is what RVM* costs
    per test point; the plain RVM costs O(K d + K^2). No exact RVM* avoids the O(N) terms: the
    added function's overlap with every training point enters ``s_*`` and ``q_*``.

    Parameters
    ----------
    mean : ndarray of shape (n, D)
        Plain RVM predictive mean.
    var : ndarray of shape (n,) or None
        Plain RVM predictive variance (with or without the noise: the update adds to it). None:
        the posterior part ``phi^T Sigma phi`` (no noise), computed here from the triangular
        solve RVM* needs anyway.
    phi_test : ndarray of shape (n, K)
        Active design rows of the test points.
    cross : ndarray of shape (n, N)
        ``k(x_*, x_n)``: the added functions at the training inputs.
    self_k : ndarray of shape (n,)
        ``k(x_*, x_*)``.
    data : AugmentationData

    Returns
    -------
    mean : ndarray of shape (n, D)
    var : ndarray of shape (n,)
    """
    V, W, q, uBu, alpha_star, ok = _augmentation_terms(data, phi_test, cross, self_k)
    if var is None:
        var = np.einsum("ij,ij->j", V, V)
    s = uBu - np.einsum("ij,ij->j", W, W)
    e = np.where(ok, self_k - np.einsum("ij,ij->j", V, W), 0.0)
    # s >= 0 in exact arithmetic (a Schur complement); clip its rounding error.
    S = alpha_star + np.maximum(s, 0.0)
    return mean + (e / S)[:, None] * q, var + e**2 / S


def rvm_star_cov(
    cov: np.ndarray,
    var_star: np.ndarray,
    phi_test: np.ndarray,
    cross: np.ndarray,
    self_k: np.ndarray,
    test_k: np.ndarray,
    data: AugmentationData,
) -> np.ndarray:
    """Joint RVM* predictive covariance of the test points.

    Each test point has its own augmented model, so RVM* defines marginals, not a joint law. The
    joint covariance here takes its correlations from the model augmented with all n test
    functions at once (each with its own ``alpha_*``) and its variances from RVM*
    (``var_star``): ``D^1/2 R D^1/2``, positive semi-definite, with ``var_star`` on its diagonal.

    Parameters
    ----------
    cov : ndarray of shape (n, n)
        Plain RVM predictive covariance (noise included if ``var_star`` includes it).
    var_star : ndarray of shape (n,)
        RVM* variances (:func:`rvm_star`).
    test_k : ndarray of shape (n, n)
        ``k(x_a, x_b)`` between the test points.
    phi_test, cross, self_k, data
        As in :func:`rvm_star`.
    """
    V, W, _, _, alpha_star, ok = _augmentation_terms(data, phi_test, cross, self_k)
    if not np.any(ok):
        return cov
    # Joint Schur complement of the n added weights: diag(alpha_*) + U B U^T - P Sigma P^T.
    idx = np.flatnonzero(ok)
    U = cross[idx]
    S = (U * data.precision) @ U.T - W[:, idx].T @ W[:, idx]
    S = 0.5 * (S + S.T)
    S[np.diag_indices_from(S)] += alpha_star[idx]
    E = test_k[:, idx] - V.T @ W[:, idx]
    c, low = linalg.cho_factor(S, lower=True, check_finite=False)
    joint = cov + E @ linalg.cho_solve((c, low), E.T, check_finite=False)
    d = np.sqrt(np.maximum(np.diag(joint), np.finfo(float).tiny))
    corr = joint / d[:, None] / d[None, :]
    sd = np.sqrt(var_star)
    out = corr * sd[:, None] * sd[None, :]
    out[np.diag_indices_from(out)] = var_star
    return out


@dataclass(frozen=True)
class DrawPosteriors:
    """Gaussian posteriors of the weights given each posterior draw of ``(alpha, beta)``.

    ``H_s = diag(alpha_s) + beta_s Phi^T Phi`` is equilibrated by its diagonal,
    ``H_s = D_s R_s D_s`` with ``D_s = diag(sqrt(diag H_s))``, as the weight draws of
    :func:`bayes_rvm.inference.draw_weights` are: a draw may hold alphas many orders apart
    (weights pinned at zero next to free ones), and the unit-diagonal ``R_s`` keeps the
    factorisation accurate. ``inv_chol`` is ``L_s^-1`` with ``L_s L_s^T = R_s``, so that
    ``Sigma_s = D_s^-1 L_s^-T L_s^-1 D_s^-1``.

    Attributes
    ----------
    inv_chol : ndarray of shape (S, M, M)
    scale : ndarray of shape (S, M)
        ``diag(D_s)``.
    mean : ndarray of shape (S, M, D)
        Posterior means ``m_s = beta_s Sigma_s Phi^T Y``.
    beta : ndarray of shape (S,)
    chol : ndarray of shape (S, M, M)
        ``L_s`` itself (from :func:`~bayes_rvm.evidence.gaussian.weight_posterior`).
    """

    inv_chol: np.ndarray
    scale: np.ndarray
    mean: np.ndarray
    beta: np.ndarray
    chol: np.ndarray

    @classmethod
    def from_draws(cls, gram, phi_y, alpha, beta) -> DrawPosteriors:
        """Factor every draw at once (LAPACK batched over the leading axis: no Python loop).

        Parameters
        ----------
        gram : ndarray of shape (M, M)
            ``Phi^T Phi``.
        phi_y : ndarray of shape (M, D)
            ``Phi^T Y``.
        alpha : ndarray of shape (S, M)
        beta : ndarray of shape (S,)
        """
        post = weight_posterior(gram, phi_y, alpha, beta)
        return cls(post.chol_inverse(), post.scale, post.mean, post.beta, post.chol)

    def take(self, draws: slice) -> DrawPosteriors:
        """The posteriors of some of the draws."""
        return DrawPosteriors(
            self.inv_chol[draws],
            self.scale[draws],
            self.mean[draws],
            self.beta[draws],
            self.chol[draws],
        )

    def augmentation(self, s: int, phi: np.ndarray, y: np.ndarray, amplitude: float):
        """:class:`AugmentationData` of draw ``s`` (for the per-draw joint covariance)."""
        L = self.scale[s][:, None] * self.chol[s]  # L L^T = H_s
        T = y[:, None] if y.ndim == 1 else y
        return AugmentationData(
            phi=phi,
            precision=float(self.beta[s]),
            score=self.beta[s] * (T - phi @ self.mean[s]),
            chol=L,
            amplitude=float(amplitude),
        )


def rvm_star_draws(
    phi: np.ndarray,
    y: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    phi_test: np.ndarray,
    cross: np.ndarray,
    self_k: np.ndarray,
    amplitude: float,
    *,
    max_floats: int = 4_000_000,
    posteriors: DrawPosteriors | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """RVM* predictive of new targets given each posterior draw of the hyperparameters.

    Draw ``s`` is the type-II RVM* of :func:`rvm_star` with the draw's ``(alpha_s, beta_s)`` in
    place of the optimum (weights integrated out exactly, the added function's prior as for the
    type-II fit); the MCMC predictive is the equal-weight mixture of these Gaussians
    over the draws. Vectorised over draws and test points: the terms shared by all draws
    (``Phi^T u``, ``u^T u``, ``u^T Y``) are computed once, then per block of draws one batched
    product with ``L_s^-1`` (O(M^2) per draw and test point) and a few reductions; blocks keep
    the temporaries under ``max_floats`` numbers. Cost O(S n M^2) beyond the kernel row
    (O(N d) per test point) and ``Phi^T u`` (O(N M)): with the type-II relevance vectors as
    the MCMC columns (``mcmc_basis="relevant"``, M of ten or twenty) it is a fraction of a
    second for thousands of draws and test points; over every basis function (M = N + 1) it
    grows with N^2.

    Parameters
    ----------
    phi : ndarray of shape (N, M)
        Training design of the sampled columns (user's units).
    y : ndarray of shape (N,) or (N, D)
    alpha : ndarray of shape (S, M)
        Draws of the prior precisions (user's units).
    beta : ndarray of shape (S,)
        Draws of the noise precision.
    phi_test : ndarray of shape (n, M)
    cross : ndarray of shape (n, N)
        ``k(x_*, x_n)``.
    self_k : ndarray of shape (n,)
        ``k(x_*, x_*)``.
    amplitude : float
        ``tau^2`` of the added functions (:func:`target_amplitude`).
    max_floats : int
        Bound on the numbers held by the temporaries of one block of draws.
    posteriors : DrawPosteriors, optional
        Every draw's weight posterior, factored once (``DrawPosteriors.from_draws`` of these
        draws), for a caller that predicts in blocks of rows: each block then reads them
        instead of factoring every draw again.

    Returns
    -------
    mean : ndarray of shape (S, n, D)
    var : ndarray of shape (S, n)
        Noise included.
    """
    T = y[:, None] if y.ndim == 1 else y
    alpha = np.asarray(alpha, dtype=np.float64)
    beta_all = np.asarray(beta, dtype=np.float64)
    (S, M), D, n = alpha.shape, T.shape[1], phi_test.shape[0]
    gram, phi_y = phi.T @ phi, phi.T @ T
    self_k = np.asarray(self_k, dtype=np.float64)
    b = cross @ phi  # Phi^T u per test point, (n, M)
    uu = np.einsum("ij,ij->i", cross, cross)
    uy = cross @ T
    ok = self_k > 0
    mean_out = np.empty((S, n, D))
    var_out = np.empty((S, n))
    step = max(1, max_floats // max(1, M * M + 3 * M * n))
    for start in range(0, S, step):
        blk = slice(start, min(start + step, S))
        if posteriors is None:
            p = DrawPosteriors.from_draws(gram, phi_y, alpha[blk], beta_all[blk])
        else:
            p = posteriors.take(blk)
        beta = p.beta[:, None]
        # The block's L_s^-1 D_s^-1 stacked into one (s M, M) matrix: one GEMM per operand
        # instead of s small products.
        G = (p.inv_chol / p.scale[:, None, :]).reshape(-1, M)
        V = (G @ phi_test.T).reshape(-1, M, n)  # L_s^-1 D_s^-1 phi_*
        W = (G @ b.T).reshape(-1, M, n) * beta[:, :, None]  # L_s^-1 D_s^-1 Phi^T B u
        mean = np.einsum("nm,smd->snd", phi_test, p.mean, optimize=True)
        var = np.einsum("smn,smn->sn", V, V)
        s_star = beta * uu[None] - np.einsum("smn,smn->sn", W, W)
        e = np.where(ok, self_k[None] - np.einsum("smn,smn->sn", V, W), 0.0)
        q = beta[:, :, None] * (uy[None] - np.einsum("nm,smd->snd", b, p.mean, optimize=True))
        alpha_star = np.where(ok, self_k, 1.0)[None] / amplitude
        S_star = alpha_star + np.maximum(s_star, 0.0)
        mean_out[blk] = mean + (e / S_star)[:, :, None] * q
        var_out[blk] = var + e**2 / S_star + 1.0 / beta
    return mean_out, var_out


def _per_point(sigma: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Noise sd of shape (S,) or (S, n), broadcast against ``f`` of shape (S, n[, D])."""
    sig = np.asarray(sigma, dtype=np.float64)
    sig = sig.reshape(sig.shape + (1,) * (f.ndim - sig.ndim))
    return sig


def mixture_moments(
    f: np.ndarray, sigma: np.ndarray, *, return_cov: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance (or covariance) of the mixture ``(1/S) sum_s N(f_s, diag(sigma_s^2))``.

    The law of total variance: within (``mean_s sigma_s^2``) plus between (the covariance of the
    ``f_s`` across draws).

    Parameters
    ----------
    f : ndarray of shape (S, n) or (S, n, D)
        Predictive mean at the test points for each draw.
    sigma : ndarray of shape (S,) or (S, n)
        Standard deviation of each draw's Gaussian: the noise sd (one per draw), or per test
        point (the RVM* predictive of each draw).
    return_cov : bool
        Return the (n, n) covariance (per output: (n, n, D)) instead of the variance, with the
        within part on its diagonal.

    Returns
    -------
    mean : ndarray of shape (n,) or (n, D)
    var : ndarray of shape (n,) or (n, D); or the covariance
    """
    mean = f.mean(axis=0)
    dev = f - mean
    within = np.mean(_per_point(sigma, f) ** 2, axis=0)
    S = f.shape[0]
    if not return_cov:
        return mean, np.mean(dev**2, axis=0) + within
    n = f.shape[1]
    if f.ndim == 2:
        cov = dev.T @ dev / S
        cov[np.diag_indices_from(cov)] += within
        return mean, cov
    cov = np.einsum("sad,sbd->abd", dev, dev) / S
    cov[np.arange(n), np.arange(n)] += within
    return mean, cov


def mixture_log_density(y: np.ndarray, f: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """Pointwise ``log (1/S) sum_s N(y | f_s, sigma_s^2)`` of a mixture over draws.

    Parameters
    ----------
    y : ndarray of shape (n,)
    f : ndarray of shape (S, n)
    sigma : ndarray of shape (S,) or (S, n)
    """
    logp = gaussian_log_likelihood(y[None, :], f, _per_point(sigma, f))
    return logsumexp(logp, axis=0) - np.log(f.shape[0])


def rvm_star_softmax(
    mean: np.ndarray,
    var: np.ndarray,
    phi_test: np.ndarray,
    cross: np.ndarray,
    self_k: np.ndarray,
    data: AugmentationData,
    probs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """RVM* latent moments of a softmax (multinomial) Laplace posterior.

    The added basis function gets one weight per class, ``w_* ~ N(0, I / alpha_*)``; the
    likelihood's precision at training point n is the C x C block
    ``W_n = diag(pi_n) - pi_n pi_n^T``, which couples the classes, so the Schur complement
    ``S_*`` and the cross term ``E_*`` of :func:`rvm_star` become C x C matrices:

        mean_* = mean + E_* S_*^-1 q_*,    var_* = var + diag(E_* S_*^-1 E_*^T).

    Parameters
    ----------
    mean, var : ndarray of shape (n, C)
        Plain latent means and marginal variances of the C classes.
    phi_test : ndarray of shape (n, K)
    cross, self_k
        As in :func:`rvm_star`.
    data : AugmentationData
        ``chol`` is the class-major (K C)-square factor of the negative Hessian, ``score`` the
        (N, C) gradient ``T - pi``; ``precision`` is unused (the blocks come from ``probs``).
    probs : ndarray of shape (N, C)
        Class probabilities at the training inputs, at the mode.

    Returns
    -------
    mean, var : ndarray of shape (n, C)
    """
    n, K = phi_test.shape
    N, C = probs.shape
    self_k = np.asarray(self_k, dtype=np.float64)
    alpha_star, ok = _added_prior(self_k, data.amplitude)
    phi, P = data.phi, probs
    # b[t, (c, k), c'] = sum_n phi_nk u_tn W_n[c, c'], class-major rows as in the Hessian.
    A1 = (cross @ (phi[:, :, None] * P[:, None, :]).reshape(N, K * C)).reshape(n, K, C)
    PP = P[:, :, None] * P[:, None, :]
    A2 = (cross @ (phi[:, :, None, None] * PP[:, None]).reshape(N, K * C * C)).reshape(n, K, C, C)
    b = -A2
    b[:, :, np.arange(C), np.arange(C)] += A1
    b = b.transpose(0, 2, 1, 3).reshape(n, C * K, C)  # (t, c*K + k, c')
    Wb = _solve_lower(data.chol, b.transpose(1, 0, 2).reshape(C * K, n * C)).reshape(C * K, n, C)
    u2 = cross**2
    S = -(u2 @ PP.reshape(N, C * C)).reshape(n, C, C)
    S[:, np.arange(C), np.arange(C)] += u2 @ P + alpha_star[:, None]
    S -= np.einsum("jtc,jtd->tcd", Wb, Wb)
    S = 0.5 * (S + S.transpose(0, 2, 1))
    # E[t, c, c'] = k(x*, x*) delta - (L^-1 (e_c x phi_t))^T (L^-1 b_t)[:, c'].
    E = np.zeros((n, C, C))
    E[:, np.arange(C), np.arange(C)] = np.where(ok, self_k, 0.0)[:, None]
    for c in range(C):
        rhs = np.zeros((C * K, n))
        rhs[c * K : (c + 1) * K] = phi_test.T
        Vc = _solve_lower(data.chol, rhs)
        E[:, c, :] -= np.einsum("jt,jtd->td", Vc, Wb)
    E[~ok] = 0.0
    q = cross @ data.score  # (n, C)
    SinvEt = np.linalg.solve(S, E.transpose(0, 2, 1))  # (n, C, C): S^-1 E^T
    var_add = np.einsum("tcd,tdc->tc", E, SinvEt)
    mean_add = np.einsum("tdc,td->tc", SinvEt, q)
    return mean + mean_add, var + np.maximum(var_add, 0.0)
