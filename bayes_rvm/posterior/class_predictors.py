"""What predicts a class: one object per kind of fitted classifier posterior, behind one protocol.

The classifier's counterpart of :mod:`bayes_rvm.posterior.predictors`. :class:`~bayes_rvm.RVC`
chooses its predictor once per fitted state (:func:`class_predictor`) and every prediction goes
through it:

- ``scores(rows)``: the latent scores whose link is ``proba``, (n, outputs): the log-odds of the
  second class for a binary fit, one log-odds column per class for one-vs-rest, the logits (or
  log probabilities) of a softmax fit;
- ``proba(rows)``: class probabilities, (n, n_classes), rows summing to one.

``rows`` is a :class:`~bayes_rvm.posterior.predictors.Rows`. The predictors are

- :class:`LaplaceClasses`: the Laplace approximation at the type-II mode, its mode's scores or
  MacKay's probit-moderated ones ``kappa(s^2) mu``, with RVM*'s added function or without;
- :class:`ImportanceClasses`: the posterior predictive at the type-II hyperparameters, by
  importance sampling from a Student-t proposal around the Laplace approximation;
- :class:`DrawsClasses`: the average over posterior draws of the weights (MCMC).

Each reports ``kind``, what :attr:`RVC.moderation_ <bayes_rvm.RVC.moderation_>` shows.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from bayes_rvm.evidence import MIN_ESS, WARN_SKIP, ImportanceDraws, OneVsRestFit, moderation
from bayes_rvm.families import BERNOULLI, SOFTMAX
from bayes_rvm.posterior.draws import PosteriorDraws
from bayes_rvm.posterior.predictive import (
    AugmentationData,
    augmentation_amplitude,
    rvm_star,
    rvm_star_softmax,
)
from bayes_rvm.posterior.predictors import Rows, in_row_blocks

__all__ = [
    "ClassTraining",
    "DrawsClasses",
    "ImportanceClasses",
    "LaplaceClasses",
    "class_predictor",
    "class_proba",
    "fit_parts",
]


def fit_parts(fit) -> tuple:
    """``(fit, positions)`` of each Laplace fit: one per class for one-vs-rest, else one over
    every active column."""
    if isinstance(fit, OneVsRestFit):
        return fit.parts()
    return ((fit, np.arange(fit.active.size)),)


def class_proba(score: np.ndarray, ovr: bool) -> np.ndarray:
    """Class probabilities from latent scores (n, outputs): the logistic of a binary fit's
    log-odds, one-vs-rest's independent probabilities normalised (as scikit-learn's OvR does), or
    the softmax."""
    if score.shape[1] == 1:
        p1 = BERNOULLI.mean(score[:, 0])
        return np.column_stack([1.0 - p1, p1])
    if ovr:
        p = BERNOULLI.mean(score)
        return p / np.maximum(p.sum(axis=1, keepdims=True), np.finfo(float).tiny)
    return SOFTMAX.mean(score)


@dataclass(frozen=True)
class ClassTraining:
    """What RVM* reads of the training problem: the design over the active columns, each part's
    labels (0/1 for a binary or one-vs-rest part, class indices for a softmax one), the kernel's
    diagonal at the training inputs, and which active columns are kernel columns (a free
    intercept's prior is not the kernel's)."""

    phi: np.ndarray
    targets: tuple[np.ndarray, ...]
    k_train: np.ndarray
    kernel_columns: np.ndarray | slice


@dataclass(frozen=True)
class LaplaceClasses:
    """The Laplace approximation at the type-II mode.

    ``moderated`` gives MacKay's probit-moderated scores ``kappa(s^2) mu``, which approximate
    the average of the link over the Laplace Gaussian; otherwise the mode's scores ``mu``.
    ``star`` adds RVM*'s function at each test point.
    """

    parts: tuple
    columns: np.ndarray
    ovr: bool
    moderated: bool
    star: ClassTraining | None = None

    @property
    def kind(self) -> str:
        return "probit" if self.moderated else "mode"

    def latent(self, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent function(s) under the Laplace posterior, each
        (n, outputs)."""
        star = None if self.star is None else (rows.cross(), rows.self_kernel())
        phi = rows.design(self.columns)
        moments = [
            self._part(c, fit, phi[:, pos], pos, star) for c, (fit, pos) in enumerate(self.parts)
        ]
        return np.hstack([m for m, _ in moments]), np.hstack([v for _, v in moments])

    def _part(self, c, fit, phi, pos, star):
        mean, var = fit.predict(phi)
        if star is None:
            return mean, var
        cross, self_k = star
        training = self.star
        phi_train = training.phi[:, pos]
        eta = phi_train @ fit.mean
        C = fit.mean.shape[1]
        target = training.targets[c]
        if C == 1:
            p = BERNOULLI.mean(eta[:, 0])
            precision, score = p * (1.0 - p), (target - p)[:, None]
        else:
            P = SOFTMAX.mean(eta)
            precision, score = None, np.eye(C)[target.astype(np.intp)] - P
        # The softmax model shares its alphas across classes: one latent prior variance.
        kern = training.kernel_columns
        amplitude = augmentation_amplitude(
            phi_train[:, kern], fit.alpha[fit.active][kern], training.k_train
        )
        data = AugmentationData(phi_train, precision, score, fit.chol, amplitude)
        if C == 1:
            m, v = rvm_star(mean, var[:, 0], phi, cross, self_k, data)
            return m, v[:, None]
        return rvm_star_softmax(mean, var, phi, cross, self_k, data, P)

    def scores(self, rows: Rows) -> np.ndarray:
        mean, var = self.latent(rows)
        return mean * moderation(var) if self.moderated else mean

    def proba(self, rows: Rows) -> np.ndarray:
        return class_proba(self.scores(rows), self.ovr)


@dataclass(frozen=True)
class ImportanceClasses:
    """The posterior predictive at the type-II hyperparameters, importance-sampled.

    The draws are of the weights of the normalised training columns (``phi / norms``), one
    :class:`~bayes_rvm.evidence.ImportanceDraws` per part. ``warn`` holds the warning each
    prediction repeats when their effective sample size is below ``MIN_ESS``.
    """

    draws: tuple[ImportanceDraws, ...]
    parts: tuple
    columns: np.ndarray
    norms: np.ndarray
    ovr: bool
    warn: str | None = None

    kind = "importance"

    def scores(self, rows: Rows) -> np.ndarray:
        if self.warn is not None:
            warnings.warn(self.warn, RuntimeWarning, skip_file_prefixes=WARN_SKIP)
        phi = rows.design(self.columns) / self.norms
        lps = [
            d.log_predictive(phi[:, pos])
            for d, (_, pos) in zip(self.draws, self.parts, strict=True)
        ]
        if self.parts[0][0].mean.shape[1] > 1:  # a softmax fit: its log probabilities
            return lps[0]
        return np.column_stack([lp[:, 1] - lp[:, 0] for lp in lps])

    def proba(self, rows: Rows) -> np.ndarray:
        return class_proba(self.scores(rows), self.ovr)

    def resampled(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` draws of the active weights in the user's units, (n, active, outputs), drawn
        with replacement in proportion to the importance weights: unweighted draws of the
        posterior these predictions average over (one fit: binary or softmax)."""
        (draws,) = self.draws
        picked = rng.choice(draws.weights.size, size=n, p=draws.weights)
        return draws.draws[picked] / self.norms[None, :, None]


@dataclass(frozen=True)
class DrawsClasses:
    """Class probabilities averaged over posterior draws of the weights (MCMC)."""

    draws: PosteriorDraws
    n_classes: int

    kind = "mcmc"

    def proba(self, rows: Rows) -> np.ndarray:
        draws = self.draws

        def proba(block: Rows):
            eta = draws.function(block.design(draws.columns), draws.intercept_at(block.n))
            if eta.shape[2] == 1:
                p1 = BERNOULLI.mean(eta[..., 0]).mean(axis=0)
                return np.column_stack([1.0 - p1, p1])
            return SOFTMAX.mean(eta).mean(axis=0)

        # Each row's probabilities need only its own draws: blocks of rows bound the S draws'
        # latent values (S x rows x classes, three temporaries of it for the softmax).
        n_latent = 1 if self.n_classes == 2 else self.n_classes
        return in_row_blocks(proba, rows, 3 * draws.n_draws * n_latent)

    def scores(self, rows: Rows) -> np.ndarray:
        with np.errstate(divide="ignore"):
            lp = np.log(self.proba(rows))
        return lp[:, 1:] - lp[:, :1] if lp.shape[1] == 2 else lp


def class_predictor(
    *,
    fit,
    columns: np.ndarray,
    n_classes: int,
    moderated: str | bool,
    draws: PosteriorDraws | None = None,
    star: ClassTraining | None = None,
    importance=None,
):
    """The predictor of a fitted classifier, chosen once from its resolved settings.

    Parameters
    ----------
    fit : EvidenceFit or OneVsRestFit
        The type-II fit in the user's units.
    columns : ndarray
        Its active columns.
    n_classes : int
    moderated : {"auto", "importance", "probit"} or bool
        As :class:`~bayes_rvm.RVC`'s parameter.
    draws : PosteriorDraws, optional
        Posterior draws (MCMC): the predictor averages over them instead of using ``fit``.
    star : ClassTraining, optional
        RVM* (``predictive="rvm*"``): the training problem its added functions need.
    importance : callable, optional
        Builds ``(draws, norms)`` for importance sampling, where it applies (the RVM's own
        predictive with the training problem at hand).
    """
    if draws is not None:
        return DrawsClasses(draws, n_classes)
    parts, ovr = fit_parts(fit), isinstance(fit, OneVsRestFit)
    if importance is not None and moderated in ("auto", "importance"):
        sampled, norms = importance()
        ess = min(d.ess for d in sampled)
        if ess >= MIN_ESS or moderated == "importance":
            warn = None
            if ess < MIN_ESS:
                warn = (
                    f"importance sampling of the posterior predictive kept an effective sample "
                    f"size of only {ess:.0f} of {sampled[0].weights.size} draws: the Laplace "
                    "approximation is far from the posterior and the probabilities carry Monte "
                    "Carlo noise. moderated='probit' gives MacKay's probit approximation to the "
                    "Laplace average; inference='mcmc' samples the exact posterior."
                )
            return ImportanceClasses(tuple(sampled), parts, columns, norms, ovr, warn)
    return LaplaceClasses(parts, columns, ovr, bool(moderated), star)
