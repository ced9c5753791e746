"""Plots of fitted RVMs (matplotlib): the predictive band with the relevance vectors marked."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["plot_regression"]


def plot_regression(
    model,
    X: np.ndarray,
    y: np.ndarray,
    *,
    truth: Callable[[np.ndarray], np.ndarray] | None = None,
    n_grid: int = 500,
    n_sd: float = 2.0,
    ax=None,
):
    """Predictive mean with a ``n_sd``-standard-deviation band for a 1-D regression fit.

    Parameters
    ----------
    model : fitted RVR
        A regressor with ``predict(X, return_std=True)`` and ``relevance_`` indices into ``X``.
    X : ndarray of shape (n_samples, 1)
        Training inputs (the relevance vectors are looked up among them).
    y : ndarray of shape (n_samples,)
        Training targets.
    truth : callable, optional
        Noise-free function to draw for reference.
    n_grid : int, default=500
        Points of the prediction grid.
    n_sd : float, default=2.0
        Half-width of the band in predictive standard deviations.
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    import matplotlib.pyplot as plt

    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != 1:
        raise ValueError(f"plot_regression draws 1-D inputs; X has shape {X.shape}.")
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    grid = np.linspace(X.min(), X.max(), n_grid)[:, None]
    mean, std = model.predict(grid, return_std=True)
    ax.fill_between(
        grid[:, 0],
        mean - n_sd * std,
        mean + n_sd * std,
        color="C0",
        alpha=0.2,
        label=f"predictive ±{n_sd:g} sd",
    )
    ax.plot(grid[:, 0], mean, color="C0", label="predictive mean")
    if truth is not None:
        ax.plot(grid[:, 0], truth(grid[:, 0]), "k--", lw=1, label="truth")
    ax.plot(X[:, 0], y, ".", color="0.5", ms=4, label="data")
    rv = np.asarray(model.relevance_)
    ax.plot(
        X[rv, 0],
        np.asarray(y)[rv],
        "o",
        mfc="none",
        mec="C3",
        ms=9,
        label=f"relevance vectors ({rv.size})",
    )
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="best", fontsize="small")
    return ax
