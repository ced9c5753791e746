"""Counts in :class:`~bayes_rvm.RVR`: ``likelihood="poisson"`` (a log link).

The regressor's ``likelihood`` parameter chooses the observation model; the estimator itself
stays one class. What differs for counts lives here, as a mixin of the estimator: the checks of
the counts and of the options that mean nothing for them, the PyMC model
(:func:`bayes_rvm.models.graphs.rvm_poisson_model`), the predictive moments of the rate, draws of
new
counts and the score. The type-II fit is the Laplace engine of the classifiers
(:meth:`bayes_rvm.evidence.problem.Problem.counts`), the formulas those of
:data:`bayes_rvm.families.POISSON`.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg
from sklearn.metrics import d2_tweedie_score
from sklearn.utils.validation import check_is_fitted

from bayes_rvm._warnings import warn_at_user
from bayes_rvm.families import POISSON, rate_moments
from bayes_rvm.models.priors import Prior, as_prior

__all__ = ["LATENT_VAR_WARN", "LIKELIHOODS", "MAX_COUNT", "CountsMixin", "check_counts"]

#: The values of ``RVR(likelihood=...)``.
LIKELIHOODS = ("gaussian", "poisson", "student_t")
#: Laplace variance of the log rate above which ``predict`` warns: the lognormal mean is then
#: ``exp(var / 2) > 7`` times the median ``exp(mean)``, a factor the Gaussian's upper tail makes.
LATENT_VAR_WARN = 4.0
#: Largest count ``likelihood="poisson"`` fits. Measured (type-II, default width rule, 120-200
#: counts of smooth log rates, largest counts of about 1e6 to 1e15): up to 1e9 the large rates
#: within 2e-4 of the truth; from 3e9 the Laplace mode search stops short of convergence, from
#: 1e10 NumPy overflows inside the engine, near 1e12 the fit does not converge, near 1e14 the
#: rates are 12% off and near 1e15 up to 1e304: the curvature ``exp(eta)`` of such rates swamps
#: the scale of the hyperparameters.
MAX_COUNT = 1e9


def check_counts(y: np.ndarray, max_count: float | None = None) -> np.ndarray:
    """``y`` as float64 counts of shape (N,), or a ValueError that names ``y`` and the culprit.

    Counts are finite whole numbers of at least 0, one column; with ``max_count`` (a fit's
    check: :data:`MAX_COUNT`), at most that.
    """
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(
            f"likelihood='poisson' takes one column of counts y; got y of shape {y.shape}."
        )
    y = y.astype(np.float64)
    for bad, what in (
        (~np.isfinite(y), "is not finite"),
        (y < 0, "is negative"),
        (y != np.round(y), "is not a whole number"),
    ):
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                "likelihood='poisson' needs counts (whole numbers >= 0) in y; "
                f"y[{i}] = {float(y[i])!r} {what} ({int(bad.sum())} such value(s))."
            )
    if max_count is not None and np.any(y > max_count):
        big = y > max_count
        i = int(np.flatnonzero(big)[0])
        raise ValueError(
            f"likelihood='poisson' fits counts up to {max_count:.0e} in y; y[{i}] = "
            f"{float(y[i])!r} is larger ({int(big.sum())} such value(s)). Above it the log-link "
            "fit loses float64's precision (NumPy overflows, then rates orders of magnitude "
            f"off). At such counts the Poisson noise is below {max_count**-0.5:.1g} of each "
            "count: fit likelihood='gaussian' on log(y) (or on y) instead."
        )
    return y


class CountsMixin:
    """What :class:`~bayes_rvm.RVR` does differently for ``likelihood="poisson"``."""

    def _counts(self) -> bool:
        return getattr(self, "likelihood", "gaussian") == "poisson"

    def _check_likelihood(self, y: np.ndarray) -> np.ndarray:
        """The targets for the chosen likelihood; a clear error for what it cannot take."""
        if not self._counts():
            return y
        refused = {
            "noise_variance": self.noise_variance is not None,
            "predictive='rvm*'": self.predictive == "rvm*",
            "a sampled kernel width (gamma a Prior)": isinstance(self.gamma, Prior),
            "gamma='evidence_ard'": isinstance(self.gamma, str) and self.gamma == "evidence_ard",
        }
        for what, bad in refused.items():
            if bad:
                raise ValueError(
                    f"likelihood='poisson' does not take {what}: counts have no noise variance, "
                    "and RVM*, the sampled width and the ARD width rule are built on the "
                    "Gaussian likelihood's closed forms. Leave it at its default."
                )
        return check_counts(y, max_count=MAX_COUNT)

    def _width_criterion(self, problem):
        """``criterion(Phi, rows)`` of the default width rule: the shared-precision evidence."""
        from bayes_rvm.evidence.width import shared_evidence, shared_laplace_evidence

        T = problem.targets
        if self._counts():
            return lambda Phi, rows: shared_laplace_evidence(Phi, T[rows, 0], likelihood="poisson")
        return lambda Phi, rows: shared_evidence(Phi, T[rows], beta=problem.noise_precision)

    def _count_model(self, form: str, offset):
        """:func:`bayes_rvm.models.graphs.rvm_poisson_model` of this fit (the joint form only).

        Over the type-II relevance vectors (``mcmc_basis="relevant"``) the weights are sampled
        centred: the counts pin each of them, and on the smooth log rate of the tests (300
        counts, 4 x 1000 draws, seed 1) the centred form had no divergence, max R-hat 1.005 and
        min bulk ESS 769 where the non-centred one had 5 divergences, 1.015 and 323 (target
        acceptance 0.95 both). Over every column most weights are loose (their columns pruned),
        and a loose weight makes a funnel of the centred form: non-centred there, as RVC.
        """
        from bayes_rvm.models.graphs import rvm_poisson_model

        if form not in ("marginal", "joint"):
            raise ValueError(f"form must be 'marginal' or 'joint', got {form!r}.")
        Phi, norms, cols = self._mcmc_design()
        return rvm_poisson_model(
            Phi,
            self.training_.y.astype(np.int64),
            prior=self.prior,
            alpha_prior=as_prior(self.alpha_prior, "alpha_prior"),
            nu=self._mcmc_student_t(),
            phi_scale=norms,
            offset=offset,
            centred=self._mcmc_basis() == "relevant",
            basis_names=cols,
        )

    def _mcmc_basis(self) -> str:
        # Counts sample every weight with its alpha (no marginal): over all 301 columns of the
        # 300-count test problem the default 4 x 1000 draws did not finish in 15 minutes on a
        # busy 2-core machine, against 21 s over the type-II relevance vectors.
        if self._counts() and self.mcmc_basis == "auto":
            return "relevant"
        return super()._mcmc_basis()

    def _mcmc_initvals(self, fit_n) -> dict:
        init = super()._mcmc_initvals(fit_n)
        if self._counts():
            # The weights start at the Laplace mode (zero where pruned): from zero the log rate
            # starts flat at 0, far from counts of another level. Non-centred: z = w sqrt(alpha),
            # from the normalised fit (whose alphas stay in range).
            cols = self._mcmc_columns()
            w, z = np.zeros(self.basis_.n_basis_), np.zeros(self.basis_.n_basis_)
            w[self.active_] = self.fit_.mean[:, 0]
            z[fit_n.active] = fit_n.mean[:, 0] * np.sqrt(fit_n.alpha[fit_n.active])
            init["w"], init["z"] = w[cols], z[cols]
        return init

    def _target_accept(self) -> float | None:
        # Measured on a smooth log rate (300 counts, the type-II relevance vectors): the
        # sampler's default 0.8 left 12 divergences in 2000 draws, as the logistic likelihood
        # does for RVC, which samples at 0.95.
        return 0.95 if self._counts() else super()._target_accept()

    def _latent_draws(self, X: np.ndarray) -> np.ndarray:
        """The log rate at ``X`` per posterior draw, (S, n) (MCMC)."""
        draws = self._posterior_draws()
        phi = self.basis_.transform(X, columns=draws.columns)
        return draws.function(phi, draws.intercept_at(X.shape[0]))[..., 0]

    def _predict_rate(self, X: np.ndarray, return_std: bool, return_cov: bool):
        """``predict`` for counts: the posterior mean of the rate, its sd or covariance."""
        if self._uses_draws():
            if return_cov:
                rate = POISSON.mean(self._latent_draws(X))
                return rate.mean(axis=0), np.atleast_2d(np.cov(rate, rowvar=False, ddof=0))

            def moments(rows):
                rate = POISSON.mean(self._latent_draws(rows))
                return rate.mean(axis=0), rate.std(axis=0)

            mean, std = self._in_row_blocks(moments, X, 2 * self._n_draws())
            return (mean, std) if return_std else mean
        phi = self.basis_.transform(X, columns=self.active_)
        m, v = self.fit_.predict(phi)
        if v.size and v.max() > LATENT_VAR_WARN:
            warn_at_user(
                f"the Laplace posterior of the log rate has variance up to {v.max():.3g} at "
                f"{int(np.sum(v > LATENT_VAR_WARN))} of these inputs (regions of zero or few "
                "counts, or far from the data): there the rate's mean exp(mu + var/2) comes from "
                "the upper tail of a Gaussian the counts do not support, and can be orders of "
                "magnitude above the median exp(mu). Use inference='mcmc' for the rate's exact "
                "posterior there.",
                RuntimeWarning,
            )
        mean, std = rate_moments(m[:, 0], v[:, 0])
        if return_cov:
            u = linalg.solve_triangular(self.fit_.chol, phi.T, lower=True, check_finite=False)
            # Lognormal covariance: E r_i E r_j (exp(Cov(eta_i, eta_j)) - 1).
            return mean, np.outer(mean, mean) * np.expm1(u.T @ u)
        return (mean, std) if return_std else mean

    def _sample_counts(self, X: np.ndarray, n_samples: int, rng) -> np.ndarray:
        """``sample_y`` for counts: (n, n_samples) draws of new counts at ``X``."""
        if self._uses_draws():
            eta = self._latent_draws(X)
            eta = eta[rng.randint(eta.shape[0], size=n_samples)].T
        else:
            phi = self.basis_.transform(X, columns=self.active_)
            z = rng.standard_normal((self.active_.size, n_samples))
            # w = m + L^-T z has the Laplace covariance (L L^T)^-1.
            dw = linalg.solve_triangular(self.fit_.chol, z, lower=True, trans="T")
            eta = phi @ (self.fit_.mean + dw)
        return rng.poisson(POISSON.mean(eta)).astype(np.float64)

    def score(self, X, y, sample_weight=None) -> float:
        """The coefficient of determination; for counts the fraction of Poisson deviance explained.

        ``likelihood="gaussian"``: R^2 of :meth:`predict` (scikit-learn's regressor score).
        ``likelihood="poisson"``: D^2 = 1 - D(y, rate) / D(y, mean(y)), the Poisson deviance of
        the predicted rates against that of the constant mean, as
        :meth:`sklearn.linear_model.PoissonRegressor.score`
        (:func:`sklearn.metrics.d2_tweedie_score` with ``power=1``): 1 is perfect, 0 the
        constant model.
        """
        if not self._counts():
            return super().score(X, y, sample_weight=sample_weight)
        check_is_fitted(self, "fit_")
        y = check_counts(y)
        return float(d2_tweedie_score(y, self.predict(X), sample_weight=sample_weight, power=1))
