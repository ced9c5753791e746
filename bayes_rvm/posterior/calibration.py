"""Calibration of predictive distributions on held-out data (NumPy / SciPy / scikit-learn only).

Regression: the probability integral transform (PIT) ``u_n = F_n(y_n)`` of each held-out target
under its predictive CDF is uniform on (0, 1) when the predictive is calibrated; the central
interval of nominal level ``p`` contains ``y_n`` exactly when ``|u_n - 1/2| <= p / 2``, so
coverage against nominal level is a statistic of the PIT values. Both a Gaussian predictive
(``mean``, ``std``) and a mixture over posterior draws (MCMC) are handled exactly.

Classification: reliability diagrams through :func:`sklearn.calibration.calibration_curve`, with
the bin counts and the expected calibration error beside them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import stats

from bayes_rvm.posterior.predictive import mixture_log_density

__all__ = [
    "ReliabilityCurve",
    "gaussian_nlpd",
    "interval_coverage",
    "mixture_nlpd",
    "pit_gaussian",
    "pit_mixture",
    "reliability_curve",
]


def _check_y(y, n: int | None = None) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}.")
    if n is not None and y.size != n:
        raise ValueError(f"y has {y.size} values but the predictive has {n}.")
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinite values.")
    return y


def _check_gaussian(y, mean, std) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    if mean.shape != std.shape or mean.ndim != 1:
        raise ValueError(
            f"mean and std must be 1-D of one shape, got {mean.shape} and {std.shape}."
        )
    if not np.all(std > 0):
        raise ValueError("std must be positive everywhere.")
    return _check_y(y, mean.size), mean, std


def _check_mixture(y, f, sigma) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    f = np.asarray(f, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    if sigma.ndim == 0 or (sigma.ndim == 2 and sigma.shape[1] == 1):
        sigma = sigma.reshape(-1)
    if f.ndim != 2 or sigma.shape not in ((f.shape[0],), f.shape):
        raise ValueError(
            f"f must be (n_draws, n) and sigma (n_draws,) or (n_draws, n), got {f.shape} and "
            f"{sigma.shape}."
        )
    if not np.all(sigma > 0):
        raise ValueError("sigma must be positive in every draw.")
    return _check_y(y, f.shape[1]), f, sigma


def gaussian_nlpd(y, mean, std) -> np.ndarray:
    """Pointwise negative log predictive density ``-log N(y | mean, std^2)`` (nats)."""
    y, mean, std = _check_gaussian(y, mean, std)
    return -stats.norm.logpdf(y, mean, std)


def mixture_nlpd(y, f, sigma) -> np.ndarray:
    """Pointwise ``-log (1/S) sum_s N(y | f_s, sigma_s^2)`` over S posterior draws (nats).

    Parameters
    ----------
    y : array-like of shape (n,)
    f : array-like of shape (S, n)
        Predictive mean at the test inputs per draw (the regression function).
    sigma : array-like of shape (S,) or (S, n)
        Standard deviation per draw (the noise sd), or per draw and test input (a Gaussian
        predictive per draw, as RVM* under MCMC gives).
    """
    y, f, sigma = _check_mixture(y, f, sigma)
    return -mixture_log_density(y, f, sigma)


def pit_gaussian(y, mean, std) -> np.ndarray:
    """PIT values ``Phi((y - mean) / std)`` under a Gaussian predictive."""
    y, mean, std = _check_gaussian(y, mean, std)
    return stats.norm.cdf(y, mean, std)


def pit_mixture(y, f, sigma) -> np.ndarray:
    """PIT values ``(1/S) sum_s Phi((y - f_s) / sigma_s)`` under a mixture over draws."""
    y, f, sigma = _check_mixture(y, f, sigma)
    sig = sigma[:, None] if sigma.ndim == 1 else sigma
    return stats.norm.cdf((y[None, :] - f) / sig).mean(axis=0)


def interval_coverage(pit, levels=(0.5, 0.8, 0.9, 0.95)) -> np.ndarray:
    """Fraction of held-out targets inside the central predictive interval of each level.

    Parameters
    ----------
    pit : array-like of shape (n,)
        PIT values (:func:`pit_gaussian`, :func:`pit_mixture`).
    levels : array-like of float in (0, 1)
        Nominal levels of the central intervals.

    Returns
    -------
    coverage : ndarray of the shape of ``levels``
    """
    pit = np.asarray(pit, dtype=np.float64)
    if pit.ndim != 1 or pit.size == 0 or np.any((pit < 0) | (pit > 1)):
        raise ValueError("pit must be a non-empty 1-D array of values in [0, 1].")
    levels = np.asarray(levels, dtype=np.float64)
    if np.any((levels <= 0) | (levels >= 1)):
        raise ValueError(f"levels must lie in (0, 1), got {levels!r}.")
    return np.mean(np.abs(pit[:, None] - 0.5) <= levels.reshape(-1)[None, :] / 2, axis=0).reshape(
        levels.shape
    )


class ReliabilityCurve(NamedTuple):
    """A reliability diagram's data: per non-empty bin, observed frequency and mean forecast."""

    prob_true: np.ndarray
    prob_pred: np.ndarray
    counts: np.ndarray
    ece: float


def reliability_curve(
    y_true, proba, *, n_bins: int = 10, strategy: str = "uniform", pos_label=None
) -> ReliabilityCurve:
    """Reliability diagram of binary probabilities (:func:`sklearn.calibration.calibration_curve`).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels.
    proba : array-like of shape (n,)
        Predicted probability of the positive class.
    n_bins : int, default=10
    strategy : {"uniform", "quantile"}, default="uniform"
    pos_label : int or str, optional
        The positive class (as in scikit-learn).

    Returns
    -------
    ReliabilityCurve
        With ``counts`` (forecasts per non-empty bin) and the expected calibration error
        ``ece = sum_b (n_b / n) |prob_true_b - prob_pred_b|``.
    """
    from sklearn.calibration import calibration_curve

    proba = np.asarray(proba, dtype=np.float64)
    prob_true, prob_pred = calibration_curve(
        y_true, proba, n_bins=n_bins, strategy=strategy, pos_label=pos_label
    )
    # The same bins as calibration_curve, to count the forecasts in each non-empty one.
    if strategy == "quantile":
        edges = np.percentile(proba, np.linspace(0, 100, n_bins + 1))
    else:
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.searchsorted(edges[1:-1], proba)
    counts = np.bincount(ids, minlength=len(edges) - 1)
    counts = counts[counts > 0]
    ece = float(np.sum(counts * np.abs(prob_true - prob_pred)) / proba.size)
    return ReliabilityCurve(prob_true, prob_pred, counts, ece)
