"""The marginal likelihood from sufficient statistics: ``Phi'Phi``, ``Phi't``, ``t't`` and ``N``.

With ``w`` integrated out, the log density of
:func:`bayes_rvm.models.marginal.marginal_log_likelihood`
depends on the data only through ``G = Phi'Phi`` (M x M), ``c_d = Phi't_d``, ``t_d't_d`` and the
row count ``N``: ``H = A + beta G``, ``m_d = beta H^-1 c_d`` and
``||t_d - Phi m_d||^2 = t_d't_d - 2 m_d'c_d + m_d'G m_d``. A million rows therefore cost no more
per gradient than M + D rows, once the statistics are summed (a chunked pass, or a Dask
map-reduce).

This module turns the statistics into a *compressed design*: ``k <= M + D`` rows ``R`` (k x M)
and targets ``S`` (k x D) with ``R'R = G``, ``R'S = c`` and ``diag(S'S) = t't``, from one
Cholesky factorisation of ``G`` (an eigendecomposition where ``G`` is singular). Every quantity
of the marginal likelihood except the ``N log beta`` and ``N log 2 pi`` terms is then the same on
``(R, S)`` as on ``(Phi, T)``, so the Op, its numba, low-rank and JAX kernels, and the weight
draws run unchanged on ``(R, S)``; the difference, ``D (N - k) (log beta - log 2 pi) / 2``, is
added in the graph (:func:`statistics_marginal_log_likelihood`). The off-diagonal entries of
``S'S`` are not matched: the outputs share ``alpha`` and ``beta`` but are independent given them,
and the density never uses ``t_d't_e`` for ``d != e``.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from bayes_rvm.families import LOG_2PI

__all__ = ["compressed_design", "statistics_log_density_offset"]


def compressed_design(
    gram: np.ndarray, cross: np.ndarray, tt: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """A design ``R`` (k x M) and targets ``S`` (k x D) with the same sufficient statistics.

    Parameters
    ----------
    gram : ndarray of shape (M, M)
        ``Phi'Phi``.
    cross : ndarray of shape (M,) or (M, D)
        ``Phi'T``.
    tt : float or ndarray of shape (D,)
        ``sum_n t_nd^2`` per output.

    Returns
    -------
    R : ndarray of shape (k, M)
        ``R'R = gram``.
    S : ndarray of shape (k, D)
        ``R'S = cross`` and ``diag(S'S) = tt``.

    Notes
    -----
    ``G = L L'`` gives ``R = L'`` and ``S = L^-1 c`` over M rows, then one row per output
    carrying what the columns do not explain, ``sqrt(t_d't_d - ||L^-1 c_d||^2)`` (the residual
    norm of the least-squares fit of ``t_d`` on ``Phi``). A singular ``G`` (more basis functions
    than independent columns) is factorised by its eigendecomposition over the eigenvalues above
    ``M eps lambda_max`` (those below are rounding); ``c`` lies in the column space of ``G``
    whenever it was summed from the same rows, so nothing of it is lost.
    """
    G = np.asarray(gram, dtype=np.float64)
    c = np.asarray(cross, dtype=np.float64)
    c = c[:, None] if c.ndim == 1 else c
    tt = np.atleast_1d(np.asarray(tt, dtype=np.float64))
    M = G.shape[0]
    if G.shape != (M, M) or c.shape[0] != M or tt.shape != (c.shape[1],):
        raise ValueError(
            f"statistics do not match: gram {G.shape}, cross {np.shape(cross)}, tt {tt.shape} "
            "(expected (M, M), (M,) or (M, D), and (D,))."
        )
    if not (np.all(np.isfinite(G)) and np.all(np.isfinite(c)) and np.all(np.isfinite(tt))):
        raise ValueError("the sufficient statistics must be finite.")
    try:
        L = linalg.cholesky(G, lower=True)
        R = L.T
        S = linalg.solve_triangular(L, c, lower=True)
    except linalg.LinAlgError:
        lam, Q = linalg.eigh(G)
        keep = lam > M * np.finfo(float).eps * max(lam[-1], 0.0)
        if not np.any(keep):
            raise ValueError("gram has no positive eigenvalue: the design is zero.") from None
        root = np.sqrt(lam[keep])
        R = root[:, None] * Q[:, keep].T
        S = (Q[:, keep].T @ c) / root[:, None]
    # What the columns leave of each output; rounding can take a perfect fit below zero.
    rest = np.sqrt(np.maximum(tt - np.sum(S * S, axis=0), 0.0))
    R = np.vstack([R, np.zeros((c.shape[1], M))])
    S = np.vstack([S, np.diag(rest)])
    return np.ascontiguousarray(R), np.ascontiguousarray(S)


def statistics_log_density_offset(log_beta, n_rows: int, n_compressed: int, n_outputs: int):
    """``D (N - k) (log beta - log 2 pi) / 2``: the compressed density's missing ``N`` terms.

    Works on floats and on PyTensor tensors alike (PyTensor differentiates it).
    """
    return 0.5 * n_outputs * (n_rows - n_compressed) * (log_beta - LOG_2PI)
