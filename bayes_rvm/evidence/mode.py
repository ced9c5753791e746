"""The posterior mode of a Laplace likelihood and the Laplace approximation there.

With weights ``W`` (K x C; C = 1 for Bernoulli and Poisson), latent ``eta = Phi W`` and the ARD
prior ``w_ic ~ N(0, 1/alpha_i)`` (one ``alpha`` per basis function, shared by the C classes) the
log posterior is

    Psi(W) = sum_n log p(t_n | eta_n) - 1/2 sum_i alpha_i sum_c W_ic^2,

its gradient ``Phi^T (T - Y) - A W`` (``Y`` the mean of the likelihood, :mod:`bayes_rvm.families`)
and its negative Hessian

    H = Phi^T B Phi + A                           (Bernoulli: B = diag(y(1-y)); Poisson: diag(y))
    H[c, c'] = Phi^T diag(y_c (delta_cc' - y_c')) Phi + delta_cc' A          (softmax blocks)

The mode ``W*`` is found by Newton's method (IRLS) with step halving (:func:`newton_mode`, the one
mode finder of the package: the Laplace engines of :mod:`bayes_rvm.evidence.laplace` call it);
the Laplace approximation of the evidence is::

    ln p(T | alpha) ~ ln p(T | W*) - 1/2 sum_i alpha_i |W*_i|^2 + C/2 sum_i ln alpha_i - 1/2 ln|H|

Layout of the multinomial results: ``mean`` is K x C; ``chol`` is the lower Cholesky factor of the
KC x KC Hessian ``H`` with the weights ordered *class-major*: entry ``c * K + i`` is weight ``W_ic``
(so block ``(c, c')`` of ``H`` is the K x K slice ``[c*K:(c+1)*K, c'*K:(c'+1)*K]``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

from bayes_rvm.evidence.design import as_design, data_hessian
from bayes_rvm.evidence.log_evidence import WARN_SKIP, cholesky, laplace_log_evidence
from bayes_rvm.evidence.problem import check_targets
from bayes_rvm.families import Family, family
from bayes_rvm.progress import Progress

__all__ = [
    "LaplacePosterior",
    "laplace_hessian",
    "laplace_posterior",
    "newton_mode",
    "posterior_mode",
    "warn_mode",
]

Likelihood = Literal["bernoulli", "softmax", "poisson"]
#: A chord step (the Hessian of an earlier iterate) must cut the largest gradient entry by this
#: factor, else the Hessian is formed at the new iterate (a Newton step).
_CHORD_RATE = 0.5


def laplace_hessian(Phi_a: np.ndarray, Y: np.ndarray, alpha: np.ndarray, fam: Family) -> np.ndarray:
    """Negative Hessian of the log posterior at the likelihood mean ``Y`` (N x C), with prior
    precisions ``alpha`` (K,) shared by the classes (class-major layout for the softmax)."""
    return _add_prior(data_hessian(Phi_a, Y, fam), alpha)


def _add_prior(H: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    # The diagonal through a strided view: the engines call this at every Newton step, on
    # matrices small enough that np.diag_indices_from and np.tile cost 8x the addition.
    n = H.shape[0]
    reps = n // max(alpha.size, 1)
    H.flat[:: n + 1] += alpha if reps == 1 else np.tile(alpha, reps)
    return H


def _newton_direction(L: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``H^-1 g`` for the lower Cholesky factor ``L`` of ``H`` and the gradient ``G`` (K, C),
    flattened class-major (LAPACK's ``potrs`` directly: scipy's checks cost more than the solve
    on the engines' small systems)."""
    d, info = lapack.dpotrs(L, G.T.ravel(), lower=1)
    if info != 0:
        raise linalg.LinAlgError(f"dpotrs failed (info={info})")
    return d


def _gradient_hessian(design, T, Y, W, alpha, fam):
    """Gradient and negative Hessian of the log posterior: one pass over the design."""
    G, H = design.curvature(T - Y, Y, fam)
    return G - alpha[:, None] * W, _add_prior(H, alpha)


# ---------------------------------------------------------------------------------------------
# posterior mode and Laplace approximation
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LaplacePosterior:
    """Laplace approximation of the posterior of the active weights for fixed ``alpha``.

    Attributes
    ----------
    mean : ndarray of shape (K, C)
        Posterior mode ``W*``.
    chol : ndarray of shape (K*C, K*C)
        Lower Cholesky factor of the negative Hessian ``H`` at the mode (class-major layout).
    hessian : ndarray of shape (K*C, K*C)
        ``H`` itself.
    mu : ndarray of shape (N, C)
        Likelihood mean ``Y`` at the mode (probabilities or rates).
    log_likelihood : float
        ``ln p(T | W*)``.
    log_evidence : float
        Laplace approximation of ``ln p(T | alpha)``.
    grad_norm : float
        Largest absolute entry of the gradient of the log posterior at ``W*``.
    n_iter : int
        Newton steps taken.
    converged : bool
        Whether ``grad_norm`` fell below the tolerance.
    """

    mean: np.ndarray
    chol: np.ndarray
    hessian: np.ndarray
    mu: np.ndarray
    log_likelihood: float
    log_evidence: float
    grad_norm: float
    n_iter: int
    converged: bool

    def sigma_diag(self) -> np.ndarray:
        """Diagonal of ``Sigma = H^-1`` as a K x C array."""
        K, C = self.mean.shape
        # diag(H^-1) is the column sums of L^-1 squared; LAPACK inverts L in place, a third of
        # the work of solving L X = I.
        Linv, info = lapack.dtrtri(self.chol, lower=1)
        if info != 0:
            raise linalg.LinAlgError("the Cholesky factor of the posterior precision is singular")
        return np.einsum("ij,ij->j", Linv, Linv).reshape(C, K).T

    def gamma(self, alpha: np.ndarray) -> np.ndarray:
        """``gamma_ic = 1 - alpha_i Sigma_ic,ic`` (K x C)."""
        return 1.0 - alpha[:, None] * self.sigma_diag()


def newton_mode(
    Phi_a: np.ndarray,
    T: np.ndarray,
    alpha: np.ndarray,
    W0: np.ndarray,
    likelihood: str,
    tol: float,
    max_iter: int,
    start: tuple[np.ndarray, bool] | None = None,
    *,
    progress=False,
) -> LaplacePosterior:
    """Newton's method with step halving on the log posterior, from ``W0`` (not modified).

    The mode finder of every Laplace fit, without input checks (the engines' inner loop; see
    :func:`posterior_mode` for the checked entry point): ``Phi_a`` (N, K) float64 or a design
    object of :mod:`bayes_rvm.evidence.design` (each product one pass over it), ``T`` (N, C),
    ``alpha`` (K,) finite and positive, ``W0`` (K, C). Converged when the largest gradient entry
    is at most ``tol``, or at the rounding floor; at most ``max_iter`` steps (no warning here).

    ``start = (H0, exact)``: a negative Hessian (prior included) at or near ``W0`` that the steps
    use instead of forming one at every iterate (a chord method: a step then costs a gradient,
    O(N K C), instead of the O(N (K C)^2) softmax Hessian); it is formed anew where a step did
    not halve the largest gradient entry. ``exact`` says ``H0`` is the Hessian at ``W0`` itself.
    The Hessian at the mode, behind the evidence, is always the one formed there.

    ``progress`` (True, False or "auto") reports the steps and the largest gradient entry on
    stderr when the search outlasts :data:`bayes_rvm.progress.QUIET_SECONDS` (on 10^5 rows and
    more a step is a few passes over the design).
    """
    bar = Progress("posterior mode", None, "Newton steps", enabled=progress, terminal="erase")
    fam = family(likelihood)
    design = as_design(Phi_a)
    N, K = design.shape
    C = T.shape[1]
    W = np.array(W0, dtype=np.float64, copy=True)
    Y, ll = fam.mean_and_log_likelihood(design.dot(W), T)
    psi = ll - 0.5 * float((alpha[:, None] * W * W).sum())
    converged = False
    it = 0
    # ``exact``: L factors the Hessian at W. Without a start, every iterate forms its own.
    chord = start is not None
    H, exact = (None, False) if start is None else start
    L = None if H is None else cholesky(H)
    g_last = np.inf
    while True:
        if not (chord and H is not None):
            G, H = _gradient_hessian(design, T, Y, W, alpha, fam)
            L, exact = cholesky(H), True
        else:
            G = design.gradient(T - Y) - alpha[:, None] * W
        gmax = float(np.abs(G).max()) if G.size else 0.0
        if gmax <= tol:
            converged = True
            break
        if it >= max_iter:
            break
        stalled = gmax > _CHORD_RATE * g_last
        if not exact and stalled:
            # The last chord step contracted too little: a Newton step from here.
            H = _add_prior(design.curvature(np.zeros((N, 0)), Y, fam)[1], alpha)
            L, exact = cholesky(H), True
        d = _newton_direction(L, G)
        if stalled and 0.5 * float(G.T.ravel() @ d) <= 1e-13 * (1.0 + abs(psi)):
            # The gradient stopped falling and a full Newton step would raise Psi by less than
            # its rounding: the floor of ``eta = Phi W`` rounding, high where nearly collinear
            # columns carry large cancelling weights (1e-9 on a million rows), is reached.
            converged = True
            break
        g_last = gmax
        it += 1
        bar.update(it, detail=lambda g=gmax: f"largest gradient {g:.2g}")
        d = d.reshape(C, K).T
        step = 1.0
        while True:
            Wn = W + step * d
            Yn, lln = fam.mean_and_log_likelihood(design.dot(Wn), T)
            psin = lln - 0.5 * float((alpha[:, None] * Wn * Wn).sum())
            # Psi is concave, so a Newton direction ascends for a small enough step; the slack
            # admits steps that only lose to rounding near the optimum.
            if psin >= psi - 1e-13 * (1.0 + abs(psi)) or step < 1e-12:
                break
            step *= 0.5
        moved = float(np.abs(Wn - W).max())
        W, Y, ll, psi, exact = Wn, Yn, lln, psin, False
        if moved <= 1e-15 * (1.0 + float(np.abs(W).max())):
            # The gradient cannot fall further than rounding allows: accept the rounding floor.
            G, H = _gradient_hessian(design, T, Y, W, alpha, fam)
            gmax = float(np.abs(G).max())
            L, exact = cholesky(H), True
            # The Newton decrement G^T H^-1 G / 2, the rise of Psi a full step would bring, is
            # the test that does not depend on the scale of the gradient's terms: below Psi's
            # rounding, the mode is found (a fixed gradient floor refused 1.8e-10 on make_moons,
            # where the terms are large).
            d = _newton_direction(L, G)
            decrement = 0.5 * float(G.T.ravel() @ d)
            converged = gmax <= max(tol, 1e-10) or decrement <= 1e-13 * (1.0 + abs(psi))
            break
    bar.close()
    if not exact:
        # A chord run ends where no Hessian was formed: the evidence needs the one at the mode.
        H = _add_prior(design.curvature(np.zeros((N, 0)), Y, fam)[1], alpha)
        L = cholesky(H)
    log_ev = laplace_log_evidence(L, alpha, psi, C)
    return LaplacePosterior(W, L, H, Y, ll, float(log_ev), gmax, it, converged)


def posterior_mode(
    Phi: np.ndarray,
    T,
    alpha,
    *,
    likelihood: Likelihood = "bernoulli",
    w_init: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iter: int = 100,
) -> LaplacePosterior:
    """Posterior mode and Laplace approximation for fixed prior precisions.

    Parameters
    ----------
    Phi : ndarray of shape (N, K)
        Design matrix of the basis functions in the model.
    T : array-like of shape (N,) or (N, C)
        Targets: 0/1 (or probabilities) for ``"bernoulli"``, one-hot rows for ``"softmax"``,
        counts for ``"poisson"``.
    alpha : array-like of shape (K,)
        Prior precisions (finite, positive).
    likelihood : {"bernoulli", "softmax", "poisson"}, default="bernoulli"
    w_init : ndarray of shape (K,) or (K, C), optional
        Starting weights (warm start); default zero.
    tol : float, default=1e-10
        Converged when every entry of the gradient of the log posterior is below ``tol``.
    max_iter : int, default=100
        Newton steps at most; not converging warns with ``ConvergenceWarning``.

    Returns
    -------
    LaplacePosterior
    """
    family(likelihood)
    Phi = np.asarray(Phi, dtype=np.float64)
    N, K = Phi.shape
    T = check_targets(T, N, likelihood)
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (K,))
    if np.any(~np.isfinite(alpha)) or np.any(alpha <= 0):
        raise ValueError("alpha must be finite and positive.")
    W0 = np.zeros((K, T.shape[1])) if w_init is None else np.asarray(w_init, dtype=np.float64)
    W0 = W0.reshape(K, T.shape[1])
    post = newton_mode(Phi, T, alpha, W0, likelihood, tol, max_iter)
    if not post.converged:
        warn_mode(post)
    return post


def laplace_posterior(Phi, T, alpha, **kwargs) -> LaplacePosterior:
    """Alias of :func:`posterior_mode` (the Laplace approximation is built at the mode)."""
    return posterior_mode(Phi, T, alpha, **kwargs)


def warn_mode(post: LaplacePosterior) -> None:
    """Warn (``ConvergenceWarning``) that the mode search of ``post`` did not converge."""
    warnings.warn(
        f"posterior mode search did not converge in {post.n_iter} Newton steps (largest gradient "
        f"entry {post.grad_norm:.2e}); the Laplace approximation is taken at the last iterate. "
        "The classes may be separable with too weak a prior.",
        ConvergenceWarning,
        skip_file_prefixes=WARN_SKIP,
    )
