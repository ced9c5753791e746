"""Prediction of :class:`~bayes_rvm.RVR` from posterior draws (MCMC or VI).

A mixin of the estimator: the regression function and noise per draw, RVM* per draw (its
moments and joint covariance, :mod:`bayes_rvm.posterior.predictive`), and the moments of the
mixture over
the draws, in blocks of rows when no covariance is asked for.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import linalg

__all__ = ["DrawsPredictionMixin"]


class _StarDraws(NamedTuple):
    """RVM* under MCMC at some inputs: per-draw moments and what the joint covariance needs."""

    mean: np.ndarray  # (S, n[, D])
    var: np.ndarray  # (S, n), noise included
    phi: np.ndarray  # (N, M) training design of the sampled columns
    alpha: np.ndarray  # (S, M)
    beta: np.ndarray  # (S,)
    phi_test: np.ndarray  # (n, M)
    cross: np.ndarray  # (n, N)
    self_k: np.ndarray  # (n,)
    amplitude: float  # tau^2 of the added functions


class DrawsPredictionMixin:
    """The draws-based prediction paths of :class:`~bayes_rvm.RVR`."""

    def _mcmc_draws(self, X) -> tuple[np.ndarray, np.ndarray]:
        """Regression function at ``X`` per MCMC draw, (S, n[, D]), and the noise sd, (S,)."""
        draws = self._posterior_draws()
        f = draws.function(self._design_draws(X, draws.columns))
        sd = draws.flat("sigma")
        if self.likelihood == "student_t":  # the t noise's sd: its moments are what is mixed
            from bayes_rvm.families import student_t_variance

            sd = np.sqrt(student_t_variance(sd, draws.flat("nu")))
        return (f[..., 0] if draws.extra_dim is None else f), sd

    def _mcmc_star(self, X) -> _StarDraws:
        """RVM* per MCMC draw at ``X``: :func:`bayes_rvm.posterior.predictive.rvm_star_draws`."""
        from bayes_rvm.posterior.predictive import rvm_star_draws, target_amplitude

        draws = self._posterior_draws()
        cols = draws.columns
        x_train = self.training_.x_train
        phi = self.basis_.transform(x_train, columns=cols)
        alpha = draws.flat("alpha")
        beta = draws.flat("sigma") ** -2.0
        cross, self_k = self._rvm_star_inputs(X)
        phi_test = self._rows_from_cross(X, cross, cols)
        y = self.training_.y
        tau2 = target_amplitude(y)
        mean, var = rvm_star_draws(phi, y, alpha, beta, phi_test, cross, self_k, tau2)
        if self._single_output:
            mean = mean[..., 0]
        return _StarDraws(mean, var, phi, alpha, beta, phi_test, cross, self_k, tau2)

    def _mcmc_star_cov(self, X, star: _StarDraws, s: int) -> np.ndarray:
        """Joint RVM* covariance of new targets at ``X`` given draw ``s`` (noise included)."""
        from bayes_rvm.posterior.predictive import DrawPosteriors, rvm_star_cov

        y = self.training_.y
        T = y[:, None] if y.ndim == 1 else y
        one = DrawPosteriors.from_draws(
            star.phi.T @ star.phi, star.phi.T @ T, star.alpha[s : s + 1], star.beta[s : s + 1]
        )
        data = one.augmentation(0, star.phi, y, star.amplitude)
        v = linalg.solve_triangular(data.chol, star.phi_test.T, lower=True, check_finite=False)
        cov = v.T @ v
        cov[np.diag_indices_from(cov)] += 1.0 / star.beta[s]
        test_k = self.basis_.kernel_matrix(X, X)
        return rvm_star_cov(cov, star.var[s], star.phi_test, star.cross, star.self_k, test_k, data)

    def _predict_mcmc(self, X, return_std: bool, return_cov: bool):
        """Moments of the mixture over MCMC draws (per draw: the RVM or RVM* predictive)."""
        from bayes_rvm.posterior.predictive import mixture_moments

        if not return_cov:
            # Each row's moments need only its own draws: in blocks of rows, the S draws at
            # each stay a bounded temporary however many rows are asked for.
            def moments(rows):
                if self.predictive == "rvm*":
                    star = self._mcmc_star(rows)
                    f, sd = star.mean, np.sqrt(star.var)
                else:
                    f, sd = self._mcmc_draws(rows)
                mean, var = mixture_moments(f, sd)
                return mean, np.sqrt(var)

            # Per draw and row: the function values and deviations (and, with the width
            # sampled, the draw's design row).
            per_draw = 2 * self._n_outputs()
            if self._samples_width():
                per_draw += self._posterior_draws().basis.size
            mean, std = self._in_row_blocks(moments, X, self._n_draws() * per_draw)
            return (mean, std) if return_std else mean
        if self.predictive != "rvm*":
            f, sigma = self._mcmc_draws(X)
            return mixture_moments(f, sigma, return_cov=True)
        star = self._mcmc_star(X)
        # Law of total covariance: the draws' joint RVM* covariances (one n x n factorisation
        # per draw), averaged, plus the covariance of the draws' means.
        mean, between = mixture_moments(star.mean, np.zeros(star.var.shape), return_cov=True)
        within = sum(self._mcmc_star_cov(X, star, s) for s in range(star.var.shape[0]))
        within /= star.var.shape[0]
        return mean, between + (within if self._single_output else within[..., None])
