"""A short ``az.summary`` of a fit: the hyperparameters first, the weights on request.

``az.summary(est.idata_)`` lists every variable of the posterior: ``alpha``, ``alpha_rel``,
``log_alpha``, ``w`` and ``z`` once per basis function, several hundred rows for a kernel on a
few hundred points. :func:`summary` lists the noise and the other scalar hyperparameters, then
``log_alpha`` of the relevance vectors (the precisions span decades: their logarithm is the
scale to read them on), and the weights only when asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from bayes_rvm.dims import BASIS

__all__ = ["HYPERPARAMETERS", "summary"]

#: The posterior variables :func:`summary` lists by default, in this order, where a fit has them:
#: the noise sd, the degrees of freedom of Student-t noise and of a Student-t weight prior, a
#: sampled kernel width, a free intercept, then the weights' log prior precisions.
HYPERPARAMETERS = ("sigma", "noise_nu", "nu", "gamma", "intercept", "log_alpha")


def _tree_and_relevant(fitted) -> tuple[xr.DataTree, np.ndarray | None]:
    """The fit's DataTree, and an estimator's relevant basis columns (None for a tree)."""
    if isinstance(fitted, xr.DataTree):
        return fitted, None
    if not hasattr(fitted, "idata_"):
        raise TypeError(
            "summary() takes a fitted estimator of bayes_rvm (RVR, RVC) or its DataTree "
            f"(est.idata_), got {type(fitted).__name__}."
        )
    return fitted.idata_, np.asarray(fitted.active_)


def summary(
    fitted,
    *,
    weights: bool = False,
    basis: str | Sequence | None = None,
    var_names: Sequence[str] | None = None,
    **kwargs,
):
    """``arviz.summary`` of a fit's posterior, hyperparameters first and the weights on request.

    Parameters
    ----------
    fitted : RVR, RVC or xarray.DataTree
        A fitted estimator (its :attr:`idata_` is summarised) or a DataTree of this package.
    weights : bool, default=False
        Add the weights ``w`` after the hyperparameters.
    basis : {"all"} or sequence, optional
        The basis functions whose ``log_alpha`` (and ``w``) are listed, as coordinates of the
        ``basis`` dimension. Default: an estimator's relevance vectors (``est.active_``, the bias
        included) where the posterior holds more columns than those (an MCMC fit over all
        columns), else every column of the posterior; ``"all"``: every column.
    var_names : sequence of str, optional
        The variables to list, in place of the default (:data:`HYPERPARAMETERS` present in the
        posterior, then ``w`` with ``weights=True``).
    **kwargs
        Passed to :func:`arviz.summary` (``kind``, ``ci_prob``, ``round_to``, ...). A type-II
        fit's ``kind`` defaults to ``"stats"``: its hyperparameters are point estimates, the same
        in every draw, whose ESS, R-hat and Monte Carlo errors mean nothing.

    Returns
    -------
    pandas.DataFrame
        One row per scalar and per listed basis function.

    Examples
    --------
    >>> from bayes_rvm import RVR, summary
    >>> from bayes_rvm.datasets import make_sinc
    >>> X, y = make_sinc(n_samples=50, random_state=0)
    >>> est = RVR().fit(X, y)
    >>> table = summary(est, kind="stats")  # sigma, then log_alpha of each relevance vector
    >>> table.index[0]
    'sigma'
    """
    import arviz as az

    dt, relevant = _tree_and_relevant(fitted)
    if not isinstance(weights, bool | np.bool_):
        raise TypeError(f"weights must be True or False, got {weights!r}.")
    post = dt["posterior"].dataset
    if var_names is None:
        var_names = [v for v in HYPERPARAMETERS if v in post.data_vars]
        var_names += ["w"] if weights else []
    else:
        var_names = list(var_names)
    missing = [v for v in var_names if v not in post.data_vars]
    if missing:
        raise ValueError(
            f"var_names {missing} are not in the posterior; it holds {sorted(post.data_vars)}."
        )
    columns = post[BASIS].values if BASIS in post.coords else None
    if isinstance(basis, str):
        if basis != "all":
            raise ValueError(
                f"basis must be 'all' or a sequence of basis coordinates, got {basis!r}."
            )
        keep = None
    elif basis is not None:
        keep = np.asarray(basis)
        unknown = np.setdiff1d(keep, columns) if columns is not None else keep
        if unknown.size:
            raise ValueError(
                f"basis {unknown.tolist()} are not basis coordinates of the posterior."
            )
    elif (
        relevant is not None
        and columns is not None
        and np.isin(columns, relevant).sum() < columns.size
    ):
        keep = columns[np.isin(columns, relevant)]
    else:
        keep = None
    coords = kwargs.pop("coords", None) or {}
    if keep is not None:
        coords = {BASIS: list(keep)} | coords
    if dt.attrs.get("method") == "type2":
        kwargs.setdefault("kind", "stats")
    return az.summary(dt, var_names=var_names, coords=coords or None, **kwargs)
