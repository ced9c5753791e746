"""The RVM regression model on sufficient statistics, and the rows its log likelihood keeps.

A million rows do not fit in a model's data, nor their pointwise log likelihood in a DataTree
(10^6 x draws). The weight-marginalised likelihood needs only ``Phi'Phi``, ``Phi't``, ``t't`` and
``N`` (:mod:`bayes_rvm.models.marginal.statistics_form`): :func:`rvm_statistics_model` builds
:func:`bayes_rvm.models.graphs.rvm_regression_model` on a compressed design with those statistics,
and
keeps the design rows and targets of a documented deterministic subset of the data rows
(:func:`log_likelihood_rows`) for the pointwise log likelihood.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from bayes_rvm.models.graphs import rvm_regression_model
from bayes_rvm.models.marginal import compressed_design

__all__ = ["LOG_LIKELIHOOD_ROWS", "log_likelihood_rows", "rvm_statistics_model"]


#: Rows of the documented deterministic subset whose pointwise log likelihood a model built
#: from sufficient statistics keeps (:func:`rvm_statistics_model`).
LOG_LIKELIHOOD_ROWS = 2000


def log_likelihood_rows(n_rows: int, n_subset: int = LOG_LIKELIHOOD_ROWS) -> np.ndarray:
    """The rows whose pointwise log likelihood a statistics model keeps: evenly spaced.

    ``np.linspace(0, n_rows - 1, n_subset)`` rounded down (all rows when there are fewer): a
    deterministic subset, the same for every fit on the same number of rows, so that two fits'
    log likelihoods can be compared row by row; for data in a random order it is a simple
    random sample of the rows.
    """
    if n_rows <= n_subset:
        return np.arange(n_rows)
    return np.unique(np.linspace(0, n_rows - 1, n_subset).astype(np.int64))


def rvm_statistics_model(
    statistics,
    *,
    rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    **kwargs,
) -> pm.Model:
    """The weight-marginalised regression model on sufficient statistics, not a design.

    The marginal likelihood depends on the data only through ``Phi'Phi``, ``Phi't``, ``t't``
    and ``N``: the model holds a compressed design of ``k <= M + D`` rows with the same
    statistics (:func:`bayes_rvm.models.marginal.compressed_design`) and adds the density's
    ``N``-dependent terms, so its log density equals that of :func:`rvm_regression_model` on
    the full design (to rounding) at a cost independent of ``N``.

    Parameters
    ----------
    statistics : SufficientStatistics
        Anything with ``gram`` (M, M), ``cross`` (M, D), ``tt`` (D,) and ``n``
        (:class:`bayes_rvm.basis.statistics.SufficientStatistics`), of the design in the user's
        units.
    rows : (index, Phi_rows, y_rows), optional
        A subset of the data rows (their indices, design rows and targets, e.g. at
        :func:`log_likelihood_rows`) whose pointwise log likelihood
        :func:`bayes_rvm.inference.complete_posterior` computes: the exact leave-one-out terms
        ``ln p(t_n | t_-n, alpha, sigma)`` of those rows, from the full data's statistics.
        Without it the completed posterior has weights and no ``log_likelihood``.
    **kwargs
        The keywords of :func:`rvm_regression_model` (priors, ``phi_scale``, ``y_scale``,
        ``basis_names``, ``marginal``...); not ``form``, ``offset``, ``basis``, ``n_rows``.

    Returns
    -------
    pymc.Model
        As :func:`rvm_regression_model`, with the compressed design as ``Phi`` and ``y_obs``
        (its ``obs`` coordinate counts compressed rows, not data rows), ``n_rows`` data and,
        with ``rows``, the data ``ll_rows``, ``Phi_rows`` and ``y_rows``.
    """
    for key in ("form", "offset", "basis", "n_rows"):
        if key in kwargs:
            raise TypeError(f"rvm_statistics_model takes no {key!r}.")
    cross = np.asarray(statistics.cross, dtype=np.float64)
    cross = cross[:, None] if cross.ndim == 1 else cross
    R, S = compressed_design(statistics.gram, cross, statistics.tt)
    multi = cross.shape[1] > 1
    model = rvm_regression_model(R, S if multi else S[:, 0], n_rows=int(statistics.n), **kwargs)
    if rows is not None:
        index, Phi_rows, y_rows = (np.asarray(v) for v in rows)
        y_rows = y_rows.astype(np.float64)
        if Phi_rows.shape != (index.size, R.shape[1]) or len(y_rows) != index.size:
            raise ValueError(
                f"rows: {index.size} indices need Phi_rows of shape ({index.size}, "
                f"{R.shape[1]}) and as many targets; got {Phi_rows.shape} and {y_rows.shape}."
            )
        with model:
            pm.Data("ll_rows", index.astype(np.int64))
            pm.Data("Phi_rows", Phi_rows.astype(np.float64))
            pm.Data("y_rows", y_rows if multi else y_rows.reshape(-1))
    return model
