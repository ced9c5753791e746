"""Student-t noise in :class:`~bayes_rvm.RVR`: ``likelihood="student_t"``.

As :mod:`bayes_rvm.estimators.counts` does for counts, what the estimator does differently for
Student-t
noise lives here, as a mixin: the checks of what the likelihood takes, the centring of the
sampled weights, a new target's noise variance, and type-II draws of new targets. The type-II
fit is :mod:`bayes_rvm.evidence.student_t`'s, the formulas those of :mod:`bayes_rvm.families`.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from bayes_rvm.models.priors import Prior

__all__ = ["StudentTMixin"]


class StudentTMixin:
    """What :class:`~bayes_rvm.RVR` does differently for ``likelihood="student_t"``."""

    def _check_student_t(self, y: np.ndarray) -> None:
        """Student-t noise: one output, the RVM predictive, a type-II or MCMC fit."""
        if self.likelihood != "student_t":
            return
        if y.ndim == 2 and y.shape[1] != 1:
            raise ValueError(
                f"likelihood='student_t' fits one output; y has shape {y.shape}. Fit one RVR "
                "per output."
            )
        if self.predictive != "rvm" or isinstance(self.gamma, Prior):
            raise ValueError(
                "likelihood='student_t' takes predictive='rvm' and a fixed or chosen kernel "
                "width (gamma not a Prior) only."
            )

    def _student_t_centred(self) -> bool:
        """Student-t noise samples the weights: centred over the relevance vectors, which the
        data pin (non-centred there, R-hat 1.12 against 1.005 on outlier sinc), else not."""
        return self.likelihood == "student_t" and self._mcmc_basis() == "relevant"

    def _new_noise_variance(self) -> float:
        """A new target's noise variance: ``1/beta``, or the Student-t's ``nu/(nu-2) sigma^2``."""
        from bayes_rvm.families import student_t_variance

        if self.likelihood != "student_t":
            return 1.0 / self.fit_.beta
        return float(student_t_variance(self.fit_.beta**-0.5, self.noise_nu_))

    def _sample_y_student_t(self, X, n_samples: int, rng) -> np.ndarray:
        """Type-II draws of new targets: a location from ``q(w)``, plus Student-t noise."""
        phi = self.basis_.transform(X, columns=self.active_)
        v = linalg.solve_triangular(self.fit_.chol, phi.T, lower=True, check_finite=False)
        loc = rng.multivariate_normal((phi @ self.fit_.mean)[:, 0], v.T @ v, n_samples)
        noise = self.fit_.beta**-0.5 * rng.standard_t(self.noise_nu_, size=loc.shape)
        out = (loc + noise).T
        return out if self._single_output else out[:, None, :]
