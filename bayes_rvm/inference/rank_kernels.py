"""Compiled kernels of the rank-normalised diagnostics (numba): the normal scores of ranks,
placed in one pass per row, and Geyer's initial monotone sequence of the ESS.

The rank-normalised R-hat and ESS (:mod:`bayes_rvm.inference.diagnostics`) turn each scalar's
draws into the normal quantiles of their ranks. Given each row's sort order, NumPy needs a
gather of the sorted values, comparisons of neighbours to find ties and a scatter of the scores
back to the draws' places: four passes and three temporaries of the rows' size, 60-70% of the
diagnostics' time on the full basis at N = 1000 (1001 weights and 1002 hyperparameters x 4000
draws). :func:`place_scores` does all of it in one pass per row, the scores of untied ranks read
from a table; only the average rank of a run of ties is left to the caller, which evaluates its
normal quantile with SciPy (numba has no ``ndtri``).

Imported only by the diagnostics of an MCMC fit: a type-II fit never imports numba.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["geyer_tau", "place_scores"]


@numba.njit(cache=True, nogil=True)
def place_scores(x: np.ndarray, order: np.ndarray, scores: np.ndarray):
    """Each draw's normal score, in the draws' own places.

    Parameters
    ----------
    x : ndarray of shape (K, n)
        The draws, one scalar per row.
    order : ndarray of shape (K, n)
        Each row's sort order (``np.argsort(x, axis=1)``; its order among equal values does not
        matter).
    scores : ndarray of shape (n,)
        The score of each untied rank ``1 .. n``.

    Returns
    -------
    z : ndarray of shape (K, n)
        ``scores[rank - 1]`` at each draw; NaN where the draw is one of a run of equal values.
    tied : ndarray of shape (K, n)
        The average rank (1-based) of those runs, at their draws' places; 0 elsewhere.
    n_tied : int
        The number of tied draws (0: ``tied`` is all zeros).
    """
    K, n = x.shape
    z = np.empty((K, n))
    tied = np.zeros((K, n))
    n_tied = 0
    for k in range(K):
        i = 0
        while i < n:
            value = x[k, order[k, i]]
            j = i
            while j + 1 < n and x[k, order[k, j + 1]] == value:
                j += 1
            if j == i:
                z[k, order[k, i]] = scores[i]
            else:
                average = (i + j) / 2.0 + 1.0
                for t in range(i, j + 1):
                    z[k, order[k, t]] = np.nan
                    tied[k, order[k, t]] = average
                n_tied += j - i + 1
            i = j + 1
    return z, tied, n_tied


@numba.njit(cache=True, nogil=True)
def geyer_tau(rho_all: np.ndarray, total: int) -> np.ndarray:
    """The integrated autocorrelation time of each row of ``rho_all`` (K, S), the chains'
    combined autocorrelations at every lag: ArviZ's loop, step for step (Geyer's initial
    positive and monotone sequences), floored at ``1 / log10(total)``; NaN where a used
    autocorrelation is.

    A Python loop per scalar cost 0.7 s of the diagnostics on the full basis at N = 1000
    (3006 scalars), holding the GIL that the diagnostics' threads share.
    """
    K, S = rho_all.shape
    out = np.empty(K)
    rho = np.empty(S)
    floor = 1.0 / np.log10(total)
    for k in range(K):
        r = rho_all[k]
        rho[:] = 0.0
        rho[0] = 1.0
        even, odd = 1.0, r[1]
        rho[1] = odd
        t = 1
        while t < S - 3 and even + odd > 0.0:
            even, odd = r[t + 1], r[t + 2]
            if even + odd >= 0:
                rho[t + 1], rho[t + 2] = even, odd
            t += 2
        max_t = t - 2
        if even > 0:
            rho[max_t + 1] = even
        t = 1
        while t <= max_t - 2:
            if rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t]:
                rho[t + 1] = rho[t + 2] = (rho[t - 1] + rho[t]) / 2.0
            t += 2
        if np.isnan(rho).any():
            out[k] = np.nan
            continue
        tau = -1.0 + 2.0 * np.sum(rho[: max_t + 1]) + np.sum(rho[max_t + 1 : max_t + 2])
        out[k] = max(tau, floor)
    return out
