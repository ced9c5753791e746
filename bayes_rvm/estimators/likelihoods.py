"""The observation models of :class:`~bayes_rvm.RVR`, one object each.

``RVR(likelihood=...)`` resolves to one of :data:`REGRESSION_LIKELIHOODS` in ``fit``, and the
estimator asks it whatever differs between likelihoods: what the targets may be and which
options the likelihood refuses, the normalised type-II problem, the shared-evidence criterion of
the default width rule, the PyMC model that MCMC samples and where the sampler starts, the score,
and how cross-validation predicts and scores a fold. The formulas are
:mod:`bayes_rvm.families`'s, the engines :mod:`bayes_rvm.evidence`'s, the graphs
:mod:`bayes_rvm.models.graphs`' and the predictors :mod:`bayes_rvm.posterior.predictors`'; a new
likelihood is a class here beside its family, engine and graph.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.metrics import d2_tweedie_score, mean_poisson_deviance, r2_score

from bayes_rvm.evidence import (
    Problem,
    shared_evidence,
    shared_laplace_evidence,
    target_scale,
)
from bayes_rvm.families import rate_moments

__all__ = [
    "MAX_COUNT",
    "REGRESSION_LIKELIHOODS",
    "Counts",
    "GaussianNoise",
    "StudentTNoise",
    "check_counts",
]

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


@dataclass(frozen=True)
class GaussianNoise:
    """``t = phi(x)^T w + e``, ``e ~ N(0, sigma^2)``: the RVM of Tipping (2001)."""

    name: str = "gaussian"
    #: The noise is estimated: rows that repeat others exactly make the evidence unbounded.
    estimates_noise: bool = True
    #: The width search may follow the closed-form gradient of the Gaussian evidence.
    width_gradient: bool = True
    #: The default width rule may learn one width per feature.
    per_feature_width: bool = True
    #: NUTS's target acceptance (None: the sampler's own).
    target_accept: float | None = None
    #: The MCMC and VI hyperprior of ``alpha_rel`` under ``prior="ard"`` unless ``prior_params``
    #: names one (:func:`~bayes_rvm.models.priors.default_alpha_prior`).
    alpha_prior: str = "ard"
    #: Where the sampler starts the precisions the type-II fit pruned: this many decades above
    #: the default hyperprior's median. Their posterior stays near that prior; from 4 decades
    #: (sinc, default R2-D2, 4 x 1000 draws after 300 tuning steps) the first tuning steps
    #: crawl at step sizes near 1e-3 with 1023 leapfrog steps each: half the fit's gradients
    #: were tuning at N = 100 (53-56 thousand of 113), 26-29 thousand from 1 decade, at the
    #: same R-hat and ESS; at N = 1000 on the full basis 54 thousand against 93-95, max R-hat
    #: 1.007-1.008 against 1.008-1.011.
    init_alpha_decades: float = 1.0
    #: How :class:`~bayes_rvm.RVRCV` scores a width, by scikit-learn's scorer name.
    cv_scoring: str = "neg_mean_squared_error"

    def check(self, y, *, noise_variance, star: bool, sampled_width: bool, ard_width: bool):
        """The targets this likelihood fits; a ValueError naming what it cannot take."""
        return y

    def problem(self, Phi, y: np.ndarray, noise_variance) -> Problem:
        """The normalised type-II problem of ``y`` on ``Phi`` (None: a design to come)."""
        return Problem.regression(Phi, y, noise_variance=noise_variance, likelihood=self.name)

    def width_criterion(self, problem: Problem):
        """``criterion(Phi, rows)`` of the default width rule: the shared-precision evidence."""
        T, beta = problem.targets, problem.noise_precision
        return lambda Phi, rows: shared_evidence(Phi, T[rows], beta=beta)

    def mcmc_basis(self, auto: str, inference: str = "mcmc") -> str:
        """``mcmc_basis="auto"`` resolved, given the rule's answer for the Gaussian model and
        the estimator's ``inference`` ("mcmc" or "vi")."""
        return auto

    def y_scale(self, y: np.ndarray) -> float:
        """The targets' scale the hyperpriors are stated in."""
        return target_scale(y)

    def centring(self, fit, columns: np.ndarray, relevant: bool) -> bool | np.ndarray:
        """The ``centred`` argument of the sampled weights' model over ``columns``, given the
        type-II ``fit``; ``relevant``: the columns are its relevance vectors."""
        return relevant

    def reference(self, fit, columns: np.ndarray) -> np.ndarray | None:
        """Weights at which the model whitens the sampled ones (None: it does not)."""
        return None

    def initvals(self, init: dict, **_) -> dict:
        """Where the sampler starts, beyond the hyperparameters' type-II values."""
        return init

    def model(self, Phi, y, *, centred: bool, form: str, **options):
        """The PyMC model of the training design ``Phi`` and targets ``y`` (user's units)."""
        from bayes_rvm.models.graphs import rvm_regression_model

        return rvm_regression_model(
            Phi, y, form=form, likelihood=self.name, centred=False, **options
        )

    def score(self, y, predicted, sample_weight=None) -> float:
        """R^2 of the predictions (scikit-learn's regressor score)."""
        return float(r2_score(y, predicted, sample_weight=sample_weight))

    def fold_prediction(self, problem: Problem, fit, Phi: np.ndarray) -> np.ndarray:
        """What :meth:`RVR.predict <bayes_rvm.RVR.predict>` gives at the design rows ``Phi`` from
        the normalised fit ``fit`` of ``problem`` (a cross-validation fold's fit)."""
        return problem.scale * (Phi[:, fit.active] @ fit.mean)

    def fold_score(self, predicted: np.ndarray, T: np.ndarray) -> float:
        """:attr:`cv_scoring` of the predictions of held-out targets ``T`` (N, outputs)."""
        return -float(np.mean((predicted - T) ** 2))


@dataclass(frozen=True)
class StudentTNoise(GaussianNoise):
    """Student-t noise: robust regression, one output (the EM type-II fit of
    :mod:`bayes_rvm.evidence.student_t`; ``log_evidence_`` a variational lower bound)."""

    name: str = "student_t"

    def check(self, y, *, noise_variance, star: bool, sampled_width: bool, ard_width: bool):
        if y.ndim == 2 and y.shape[1] != 1:
            raise ValueError(
                f"likelihood='student_t' fits one output; y has shape {y.shape}. Fit one RVR "
                "per output."
            )
        if star or sampled_width:
            raise ValueError(
                "likelihood='student_t' takes predictive='rvm' and a fixed or chosen kernel "
                "width (gamma not a Prior) only."
            )
        return y

    def mcmc_basis(self, auto: str, inference: str = "mcmc") -> str:
        # The weights have no closed-form marginal under t noise, so MCMC samples them: over the
        # robust fit's relevance vectors.
        return "relevant"

    def model(self, Phi, y, *, centred: bool, form: str, **options):
        """The joint form whatever ``form`` says (no closed-form marginal), the weights whitened
        by their Gaussian posterior at the t noise's Fisher information
        (:mod:`bayes_rvm.models.whitening`). On outlier sinc (N = 100, 10 outliers, the
        relevance vectors, 4 x 1000 draws, a busy machine): no divergence, max R-hat 1.004, min
        bulk ESS 617, where the centred weights had 107 divergences, 1.027 and 314 (15
        divergences at a target acceptance of 0.95) and the non-centred ones an R-hat of 1.12."""
        from bayes_rvm.models.graphs import rvm_regression_model

        return rvm_regression_model(Phi, y, form="joint", likelihood=self.name, **options)


@dataclass(frozen=True)
class Counts(GaussianNoise):
    """Counts with a log link: ``t ~ Poisson(exp(phi(x)^T w))``; the type-II fit is the Laplace
    engine of the classifiers, the formulas those of :data:`bayes_rvm.families.POISSON`."""

    name: str = "poisson"
    estimates_noise: bool = False
    width_gradient: bool = False
    per_feature_width: bool = False
    # The weights whitened around the type-II mode (model): over all 101 columns of 100 counts
    # no divergence at 0.8, 0.9 or 0.99, with 4 leapfrog doublings at 0.8 and 0.9 against 5.4
    # at 0.99 (2.5 times the time); 0.9 keeps a margin at 0.8's cost.
    target_accept: float | None = 0.9
    # The half-Cauchy: R2-D2 covered the rates as it does (0.89 over five replicate sets of 100
    # counts against 0.88, no divergence) at half the bulk ESS and twice the time.
    alpha_prior: str = "halfcauchy"
    # Four, as the classifiers': the count model samples the weights, and its figures above
    # were measured from this start (not from one decade).
    init_alpha_decades: float = 4.0
    cv_scoring: str = "neg_mean_poisson_deviance"

    def check(self, y, *, noise_variance, star: bool, sampled_width: bool, ard_width: bool):
        refused = {
            "likelihood_params={'noise_variance': ...}": noise_variance is not None,
            "predictive='rvm*'": star,
            "a sampled kernel width (gamma a Prior)": sampled_width,
            "gamma='evidence_ard'": ard_width,
        }
        for what, bad in refused.items():
            if bad:
                raise ValueError(
                    f"likelihood='poisson' does not take {what}: counts have no noise variance, "
                    "and RVM*, the sampled width and the ARD width rule are built on the "
                    "Gaussian likelihood's closed forms. Leave it at its default."
                )
        return check_counts(y, max_count=MAX_COUNT)

    def problem(self, Phi, y, noise_variance) -> Problem:
        return Problem.counts(Phi, y)

    def width_criterion(self, problem: Problem):
        T = problem.targets
        return lambda Phi, rows: shared_laplace_evidence(Phi, T[rows, 0], likelihood="poisson")

    def mcmc_basis(self, auto: str, inference: str = "mcmc") -> str:
        # Every basis function (at a fixed width, in memory), under MCMC and VI alike. Over the
        # relevance vectors the 90% intervals of the rate hold the true rate at 0.66 of the
        # inputs on average over nine replicate sets of 100 counts under MCMC (0.65 under VI),
        # against 0.89 over all columns (0.90 under VI, at 0.3-1.5 s a fit; 1.1 s over the 201
        # columns of 200 counts, 5.5 s over 401); benchmarks/bench_count_mcmc.py. Whitened
        # (model), the weights sample without the funnels that made every other
        # parametrisation of all columns diverge.
        return auto

    def y_scale(self, y: np.ndarray) -> float:
        return 1.0  # a log link has no target scale

    def centring(self, fit, columns: np.ndarray, relevant: bool) -> bool:
        # The weights are whitened around the type-II mode (reference), neither centred nor not.
        return False

    def reference(self, fit, columns: np.ndarray) -> np.ndarray:
        """The type-II fit's weights over ``columns`` (zero where it pruned): where the model
        expands the log-likelihood to whiten the sampled weights."""
        w = np.zeros(int(max(np.max(columns), np.max(fit.active))) + 1)
        w[fit.active] = fit.mean[:, 0]
        return w[np.asarray(columns, dtype=int)]

    def initvals(self, init: dict, *, fit, fit_n, columns, n_basis) -> dict:
        # The weights start at the Laplace mode (zero where pruned): from zero the log rate
        # starts flat at 0, far from counts of another level.
        w = np.zeros(n_basis)
        w[fit.active] = fit.mean[:, 0]
        return {**init, "w": w[columns]}

    def model(self, Phi, y, *, centred: bool, form: str, reference=None, **options):
        """:func:`bayes_rvm.models.graphs.rvm_poisson_model` (the joint form only), the weights
        whitened around ``reference`` (:meth:`reference`; ``centred`` is False).

        Over all 101 columns of 100 counts (log rate 1 + sin x) the non-centred weights, those
        centred on the relevance vectors, those whitened by the type-II Laplace covariance at
        fixed alphas, partly centred ones and a low-rank mass matrix all diverged in 2-10% of
        4000 draws: where the counts pin a weight its non-centred form is a funnel in alpha,
        where they leave it loose its centred form is one. Whitened by the Gaussian posterior
        of the expanded log-likelihood at the current alpha, each weight is as centred as the
        counts determine it at every point: no divergence in 36,000 draws over nine replicate
        sets of 100 counts, max R-hat 1.006 (target acceptance 0.9).
        """
        from bayes_rvm.models.graphs import rvm_poisson_model

        if form not in ("marginal", "joint"):
            raise ValueError(f"form must be 'marginal' or 'joint', got {form!r}.")
        keep = ("prior", "alpha_prior", "nu", "phi_scale", "offset", "basis_names")
        return rvm_poisson_model(
            Phi,
            y.astype(np.int64),
            centred=centred,
            reference=reference,
            **{k: v for k, v in options.items() if k in keep},
        )

    def score(self, y, predicted, sample_weight=None) -> float:
        """D^2 = 1 - D(y, rate) / D(y, mean(y)): the fraction of Poisson deviance explained, as
        :meth:`sklearn.linear_model.PoissonRegressor.score`."""
        y = check_counts(y)
        return float(d2_tweedie_score(y, predicted, sample_weight=sample_weight, power=1))

    def fold_prediction(self, problem: Problem, fit, Phi: np.ndarray) -> np.ndarray:
        # The rate's posterior mean, as RVR.predict gives it.
        mean, var = fit.predict(Phi[:, fit.active])
        return rate_moments(mean[:, 0], var[:, 0])[0]

    def fold_score(self, predicted: np.ndarray, T: np.ndarray) -> float:
        return -float(mean_poisson_deviance(T[:, 0], predicted))


#: ``RVR(likelihood=...)``'s values and their objects.
REGRESSION_LIKELIHOODS = {lik.name: lik for lik in (GaussianNoise(), StudentTNoise(), Counts())}
