"""The typed, frozen result of every type-II engine and the weight posteriors it composes.

:class:`EvidenceFit` holds what all engines share (hyperparameters, active set, evidence, trace,
stopping) and a ``posterior`` of the active weights: a :class:`GaussianWeights` (Gaussian
likelihood: mean, precision factor, noise precision) or a :class:`LaplaceWeights` (Laplace
approximation at the mode: mean, factor of the negative Hessian, likelihood).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from scipy import linalg

from bayes_rvm.evidence.options import LIKELIHOODS
from bayes_rvm.families import family

__all__ = [
    "EvidenceFit",
    "GaussianWeights",
    "LaplaceWeights",
    "moderated_probabilities",
    "moderation",
]


def _covariance(chol: np.ndarray) -> np.ndarray:
    inv = linalg.solve_triangular(chol, np.eye(chol.shape[0]), lower=True)
    return inv.T @ inv


@dataclass(frozen=True)
class GaussianWeights:
    """Gaussian posterior of the K active weights (D outputs).

    Attributes
    ----------
    mean : ndarray of shape (K, D)
        Posterior means ``m``.
    chol : ndarray of shape (K, K)
        Lower Cholesky factor ``L`` of the posterior precision ``H = A + beta Phi^T Phi``.
    beta : float
        Noise precision.
    """

    mean: np.ndarray
    chol: np.ndarray
    beta: float

    @property
    def covariance(self) -> np.ndarray:
        """Posterior covariance ``Sigma = H^-1`` (K x K)."""
        return _covariance(self.chol)

    def predict(self, phi_active: np.ndarray, *, with_noise: bool = True):
        """Predictive mean (n, D) and variance (n,) for rows of the active design matrix.

        The variance is ``1/beta + phi^T Sigma phi`` (Tipping 2001; Bishop 2006, section
        7.2.1), or only the
        weight-uncertainty part when ``with_noise`` is False.
        """
        mean = phi_active @ self.mean
        v = linalg.solve_triangular(self.chol, phi_active.T, lower=True, check_finite=False)
        var = np.einsum("ij,ij->j", v, v)
        if with_noise:
            var = var + 1.0 / self.beta
        return mean, var

    def rescaled(self, column_norms: np.ndarray, target_scale: float) -> GaussianWeights:
        """The posterior for columns ``phi * column_norms`` and targets ``T * target_scale``."""
        return GaussianWeights(
            mean=self.mean * (target_scale / column_norms)[:, None],
            chol=self.chol * (column_norms / target_scale)[:, None],
            beta=self.beta / target_scale**2,
        )


@dataclass(frozen=True)
class LaplaceWeights:
    """Gaussian (Laplace) approximation of the posterior of the K active weights, C classes.

    Attributes
    ----------
    mean : ndarray of shape (K, C)
        The mode ``W*``, centre of the approximation.
    chol : ndarray of shape (K*C, K*C)
        Cholesky factor (lower) of the precision, the negative Hessian at the mode; class-major:
        entry ``c*K + i`` is weight ``W_ic``.
    likelihood : {"bernoulli", "softmax", "poisson"}
    grad_norm : float
        Largest absolute gradient entry of the log posterior at the returned mode.
    """

    mean: np.ndarray
    chol: np.ndarray
    likelihood: str = "bernoulli"
    grad_norm: float = 0.0

    @property
    def covariance(self) -> np.ndarray:
        """Posterior covariance (K*C x K*C, class-major)."""
        return _covariance(self.chol)

    def predict(self, phi_active: np.ndarray, *, with_noise: bool = False):
        """Gaussian marginals of the latent function at rows of the active design matrix.

        Returns the mean ``phi^T W`` (n x C) and the variance ``phi^T Sigma_cc phi`` (n x C) of
        each class's latent value (``with_noise`` is accepted for signature compatibility with
        :meth:`GaussianWeights.predict` and ignored: there is no noise term).
        """
        mean = phi_active @ self.mean
        K, C = self.mean.shape
        if C == 1:
            v = linalg.solve_triangular(self.chol, phi_active.T, lower=True, check_finite=False)
            return mean, np.einsum("ij,ij->j", v, v)[:, None]
        var = np.empty_like(mean)
        for c in range(C):
            blk = slice(c * K, (c + 1) * K)
            # Rows of the inverse factor for class c: Sigma_cc = V_c^T V_c with V_c = L^-1 E_c.
            E = np.zeros((K * C, K))
            E[blk] = np.eye(K)
            Vc = linalg.solve_triangular(self.chol, E, lower=True, check_finite=False)
            U = phi_active @ Vc.T
            var[:, c] = np.einsum("ij,ij->i", U, U)
        return mean, var

    def predict_mean(self, phi_active: np.ndarray, *, moderated: bool = True) -> np.ndarray:
        """Predictive probabilities (n x C; Bernoulli: the one column ``p(t = 1)``) or rates."""
        mean, var = self.predict(phi_active)
        return moderated_probabilities(mean, var, self.likelihood, moderated=moderated)

    def rescaled(self, column_norms: np.ndarray, target_scale: float = 1.0) -> LaplaceWeights:
        """The posterior for columns ``phi * column_norms`` (the targets have no scale)."""
        C = self.mean.shape[1]
        return dataclasses.replace(
            self,
            mean=self.mean / column_norms[:, None],
            chol=self.chol * np.tile(column_norms, C)[:, None],
        )


@dataclass(frozen=True)
class EvidenceFit:
    """Result of a type-II (evidence) fit; free of any estimator or PyMC object.

    Attributes
    ----------
    alpha : ndarray of shape (M,)
        Prior precisions of all M basis functions; ``inf`` for pruned ones.
    active : ndarray of int, shape (K,)
        Indices of the retained basis functions (the relevance vectors), increasing.
    posterior : GaussianWeights or LaplaceWeights
        Posterior of the active weights at the returned hyperparameters.
    log_evidence : float
        Log marginal likelihood (Laplace: its approximation) at the returned hyperparameters.
    trace : ndarray of shape (n_iter,)
        Objective (log evidence plus log hyperprior) after each of ``actions``.
    n_iter : int
        Iterations run.
    converged : bool
        Whether the stopping rule was met before ``max_iter``.
    reason : str
        Why the iteration stopped.
    actions : tuple of str
        What each step did (``"init ..."``, then e.g. ``"add j"``, ``"reestimate all"``).

    ``mean``, ``chol``, ``covariance``, ``beta`` (Gaussian only), ``likelihood`` and
    :meth:`predict` are the posterior's.
    """

    alpha: np.ndarray
    active: np.ndarray
    posterior: GaussianWeights | LaplaceWeights
    log_evidence: float
    trace: np.ndarray
    n_iter: int
    converged: bool
    reason: str
    actions: tuple[str, ...] = field(default=())

    @property
    def mean(self) -> np.ndarray:
        """Posterior mean of the active weights (K x D, or K x C)."""
        return self.posterior.mean

    @property
    def chol(self) -> np.ndarray:
        """Lower Cholesky factor of the posterior precision of the active weights."""
        return self.posterior.chol

    @property
    def covariance(self) -> np.ndarray:
        """Posterior covariance of the active weights."""
        return self.posterior.covariance

    @property
    def likelihood(self) -> str:
        """``"gaussian"``, or the likelihood of the Laplace approximation."""
        return getattr(self.posterior, "likelihood", "gaussian")

    @property
    def beta(self) -> float:
        """Noise precision of a Gaussian-likelihood fit."""
        if not isinstance(self.posterior, GaussianWeights):
            raise AttributeError(f"a fit of the {self.likelihood} likelihood has no noise (beta).")
        return self.posterior.beta

    def predict(self, phi_active: np.ndarray, **kwargs):
        """The posterior's predictive mean and variance at rows of the active design matrix."""
        return self.posterior.predict(phi_active, **kwargs)

    def rescaled(
        self, column_norms: np.ndarray, target_scale: float = 1.0, n_values: int = 0
    ) -> EvidenceFit:
        """The fit of the problem with columns ``Phi * column_norms`` and targets ``T * scale``.

        A fit on normalised columns and targets maps back exactly: ``w = scale w_n / norm``,
        ``alpha = alpha_n norm^2 / scale^2``, and the log evidence drops by
        ``n_values * log(scale)`` (the Jacobian of the target scaling over ``n_values`` targets).
        """
        shift = n_values * np.log(target_scale)
        factor = column_norms / target_scale
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            # Pruned columns stay pruned (inf * 0 would be NaN where a norm underflows).
            alpha = np.where(np.isinf(self.alpha), np.inf, self.alpha * factor * factor)
        return dataclasses.replace(
            self,
            alpha=alpha,
            posterior=self.posterior.rescaled(column_norms[self.active], target_scale),
            log_evidence=self.log_evidence - shift,
            trace=self.trace - shift,
        )


def moderation(var: np.ndarray) -> np.ndarray:
    """MacKay's probit factor ``kappa = (1 + pi var / 8)^(-1/2)``."""
    return 1.0 / np.sqrt(1.0 + (np.pi / 8.0) * var)


def moderated_probabilities(
    mean: np.ndarray, var: np.ndarray, likelihood: str, *, moderated: bool = True
) -> np.ndarray:
    """Predictive mean of the likelihood under a Gaussian latent ``N(mean, var)``.

    Bernoulli: ``sigmoid(kappa(var) mean)``, the probit approximation of
    ``E[sigmoid(a)]`` (MacKay 1992); softmax: ``softmax(kappa(var_c) mean_c)`` with each class's
    marginal variance; Poisson: ``exp(mean + var / 2)`` (exact). ``moderated=False`` plugs in the
    mean (``var`` ignored).
    """
    if likelihood not in LIKELIHOODS[1:]:
        raise ValueError(f"likelihood must be one of {LIKELIHOODS[1:]}, got {likelihood!r}.")
    if likelihood == "poisson":
        return family(likelihood).mean(mean + 0.5 * var if moderated else mean)
    return family(likelihood).mean(mean * moderation(var) if moderated else mean)
