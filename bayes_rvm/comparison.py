"""ArviZ helpers for RVM fits: PSIS-LOO comparison and relevance summaries.

Any fit from :mod:`bayes_rvm.inference` (MCMC or type-II) carries a ``log_likelihood`` group with
``y[obs]`` computed the same way, so fits with different priors, kernels, widths or engines can be
compared by ``az.compare`` as long as they were made on the same observations.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import xarray as xr

from bayes_rvm.dims import BASIS

__all__ = ["compare", "relevance_summary"]


def compare(fits: Mapping[str, xr.DataTree], *, round_to="none", **kwargs) -> pd.DataFrame:
    """ArviZ's PSIS-LOO comparison table for a set of fits.

    Parameters
    ----------
    fits : mapping of str to xarray.DataTree
        Named fits (for example ``{"type-II ARD": ..., "MCMC ARD": ...}``), each with a
        ``log_likelihood`` group over the same observations.
    round_to : default="none"
        Passed to :func:`arviz.compare`; unrounded by default so the numbers can be tested and
        post-processed.
    **kwargs
        Passed to :func:`arviz.compare` (``ic``, ``method``, ``var_name``, ...).

    Returns
    -------
    pandas.DataFrame
        One row per fit, best first (``elpd``, ``p``, ``elpd_diff``, ``weight``, ``se``, ``dse``,
        ...).

    Raises
    ------
    ValueError
        With fewer than two fits, a fit without log likelihood, or fits on different numbers of
        observations.
    """
    import arviz as az

    if len(fits) < 2:
        raise ValueError("compare needs at least two fits.")
    n_obs = {}
    for name, dt in fits.items():
        if "log_likelihood" not in dt.children:
            raise ValueError(f"fit {name!r} has no log_likelihood group.")
        ll = dt["log_likelihood"].dataset
        var = kwargs.get("var_name") or next(iter(ll.data_vars))
        sizes = [s for d, s in ll[var].sizes.items() if d not in ("chain", "draw")]
        n_obs[name] = int(np.prod(sizes))
    if len(set(n_obs.values())) > 1:
        raise ValueError(f"fits were made on different numbers of observations: {n_obs}.")
    return az.compare(dict(fits), round_to=round_to, **kwargs)


def relevance_summary(
    dt: xr.DataTree,
    *,
    threshold: float = 10.0,
    type2: xr.DataTree | None = None,
) -> pd.DataFrame:
    """Per basis function: how probable it is that its ``alpha`` is small enough to matter.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit with ``alpha[basis]`` (and ``w``) in its posterior.
    threshold : float, default=10
        ``alpha_i < threshold`` counts as relevant: the prior standard deviation of the weight is
        then above ``threshold^-1/2`` (about 0.3 on the normalised problem of
        :class:`bayes_rvm.estimators.RVR`, whose columns have unit norm and targets unit RMS,
        where relevance vectors have weights of order one and more). Type-II pruning corresponds
        to ``alpha = inf``. Compare with the prior probability of the same event: a column whose
        ``p_relevant`` stays at its prior value is not informed by the data.
    type2 : xarray.DataTree, optional
        A type-II fit (:func:`bayes_rvm.inference.type2_datatree`) on the same basis; adds its
        relevant set as a column.

    Returns
    -------
    pandas.DataFrame
        Indexed by basis, with ``p_relevant`` (posterior probability of ``alpha < threshold``),
        ``log10_alpha_median``, ``w_mean``, ``w_sd`` and, with ``type2``, ``type2_relevant`` and
        ``type2_w``; sorted by ``p_relevant``, most relevant first.
    """
    post = dt["posterior"].dataset
    alpha = post["alpha"]
    sample = ("chain", "draw")
    with np.errstate(divide="ignore"):
        log10_alpha = np.log10(alpha)
    out = pd.DataFrame(
        {
            "p_relevant": (alpha < threshold).mean(sample).values,
            "log10_alpha_median": log10_alpha.median(sample).values,
        },
        index=pd.Index(alpha.coords[BASIS].values, name=BASIS),
    )
    if "w" in post:
        w = post["w"]
        extra = [d for d in w.dims if d not in (*sample, BASIS)]
        # With several outputs, report the root mean square over outputs.
        w_mean = w.mean(sample)
        w_sd = w.std(sample)
        if extra:
            w_mean = np.sqrt((w_mean**2).mean(extra))
            w_sd = np.sqrt((w_sd**2).mean(extra))
        out["w_mean"] = w_mean.values
        out["w_sd"] = w_sd.values
    if type2 is not None:
        t2 = type2["posterior"].dataset
        a2 = t2["alpha"].isel(chain=0, draw=0).to_series()
        out["type2_relevant"] = np.isfinite(a2.reindex(out.index).values)
        w2 = t2["w"].mean(sample)
        extra = [d for d in w2.dims if d != BASIS]
        if extra:
            w2 = np.sqrt((w2**2).mean(extra))
        out["type2_w"] = w2.to_series().reindex(out.index).values
    return out.sort_values("p_relevant", ascending=False, kind="stable")
