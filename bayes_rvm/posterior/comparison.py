"""ArviZ helpers for RVM fits: an honest elpd comparison, and the deprecated relevance summary
(its successors are in :mod:`bayes_rvm.posterior.relevance`).

What each fit's elpd is, by engine (:func:`elpd`, and the ``method`` column of :func:`compare`):

MCMC, regression
    PSIS-LOO on the exact leave-one-out terms ``ln p(t_n | t_-n, alpha, sigma)`` of the
    weight-marginalised model (:func:`bayes_rvm.inference.gaussian_loo_terms`): the hyperparameters
    are integrated over their posterior, and importance sampling moves that posterior to leave
    each point out.
Type-II (``RVR.idata_``, ``RVC.idata_``)
    Brute-force cross-validation: the hyperparameters refitted without each left-out row (exact
    leave-one-out up to 200 rows for a regressor and 50 for a classifier, 10-fold beyond), stored
    in the tree's ``loo`` group (:meth:`bayes_rvm.estimators.regressor.RVR.refit_loo`,
    :meth:`bayes_rvm.estimators.classifier.RVC.refit_loo`). PSIS-LOO on a type-II tree keeps the
    hyperparameters tuned on all the data, the left-out point included, and overstates the elpd:
    on sinc (N = 100, width 2, five data sets) by 8.5 nats against brute-force LOO, enough to rank
    type-II first every time where held-out data preferred MCMC on three sets of five. A 10-fold
    value moves with the folds, which its standard error leaves out (an RVC on 150 rows of
    ``make_moons``: -36.8 to -42.4 over five seeds, exact LOO -39.8).
Type-II without a ``loo`` group
    :func:`bayes_rvm.inference.type2_datatree` without ``loo``, or a fit whose refits failed:
    PSIS-LOO at the fixed hyperparameters, labelled as such, with a warning: it is optimistic.
MCMC, classifiers
    PSIS-LOO on ``ln p(t_n | w)``, which factorise given the weights.
VI (:func:`bayes_rvm.inference.variational.fit_vi`)
    The draws come from the approximation ``q``, not the posterior: PSIS-LOO with the importance
    ratios corrected by ``ln p(theta, y) - ln q(theta)``
    (:func:`arviz_stats.loo_approximate_posterior`; Magnusson et al. 2019), from the
    ``variational`` group's ``log_p`` and ``log_q``. Its Pareto
    k says whether ``q`` is close enough to the posterior for that correction: above ArviZ's
    threshold (0.7, or ``1 - 1 / log10(S)`` for fewer than about 2150 draws ``S``: 0.67 at 1000) the
    elpd is unreliable, and :func:`elpd` warns. A VI tree without them (saved by an earlier
    version) is scored by plain PSIS-LOO, labelled uncorrected, with a warning.
Fits from sufficient statistics (``RVR(chunk_rows=...)``)
    Their ``log_likelihood`` keeps a subset of the rows
    (:func:`bayes_rvm.models.statistics.log_likelihood_rows`): the elpd is estimated on the scale
    of all N rows as N times the mean over the subset, with the standard error of that estimate
    from the subset's spread (simple random sampling without replacement, with its finite
    population correction) reported apart as ``subsampling_se`` (``subsampling_dse`` in the
    table).
"""

from __future__ import annotations

import hashlib
import math
import re
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import logsumexp

from bayes_rvm._warnings import PACKAGE_FRAMES
from bayes_rvm.dims import BASIS, OBS
from bayes_rvm.posterior.relevance import rms_over_outputs, type2_columns

__all__ = ["compare", "elpd", "pareto_k_high", "relevance_summary"]

#: ``method`` of a fit scored by PSIS-LOO over a posterior of the hyperparameters.
PSIS = "PSIS-LOO"
#: ``method`` of a type-II fit scored by PSIS-LOO at hyperparameters tuned on all the data.
PSIS_FIXED = "PSIS-LOO, hyperparameters fixed (optimistic)"
#: ``method`` of a VI fit: PSIS-LOO corrected for draws from the approximation.
PSIS_APPROX = "PSIS-LOO, approximate posterior (corrected by ln p - ln q)"
#: ``method`` of a VI fit without ``log_p`` and ``log_q``: the draws scored as posterior draws.
PSIS_UNCORRECTED = "PSIS-LOO of approximate draws (uncorrected)"
#: Pareto k above which an importance-sampled elpd is unreliable (Vehtari et al. 2024), at
#: about 2150 draws and more; ArviZ's threshold ``min(1 - 1 / log10(S), 0.7)`` is lower for fewer.
K_MAX = 0.7


def pareto_k_high(n_samples: int) -> float:
    """The Pareto k above which an importance-sampled elpd of ``n_samples`` draws is unreliable:
    ArviZ's ``min(1 - 1 / log10(S), 0.7)`` (0.67 at 1000 draws), which its diagnostics use."""
    return min(1.0 - 1.0 / math.log10(n_samples), K_MAX) if n_samples > 1 else K_MAX


def _tree(fit) -> xr.DataTree:
    """A fit's DataTree: the tree itself, or a fitted estimator's ``idata_``."""
    if isinstance(fit, xr.DataTree):
        return fit
    # Looked up on the class: an estimator whose idata_ raises (unfitted, one-vs-rest, a fit
    # from statistics) says why, where hasattr would turn its reason into "not a fit".
    if hasattr(type(fit), "idata_") or hasattr(fit, "idata_"):
        return fit.idata_
    raise TypeError(
        f"a fit must be an xarray.DataTree or a fitted RVR / RVC, got {type(fit).__name__}."
    )


#: What each likelihood's elpd is a log of: only fits of one kind are on one scale.
_OUTCOMES = {
    "gaussian": "densities of real-valued targets",
    "student_t": "densities of real-valued targets",
    "bernoulli": "probabilities of class labels",
    "softmax": "probabilities of class labels",
    "poisson": "probabilities of counts",
}


def _digest(values) -> str:
    """A fingerprint of an array's values and shape (not of its dtype or coordinates)."""
    arr = np.ascontiguousarray(np.asarray(values, dtype=np.float64))
    h = hashlib.sha256(repr(arr.shape).encode())
    h.update(arr.tobytes())
    return h.hexdigest()[:12]


#: Root attrs of a fit's DataTree holding the fingerprints of its training rows.
FINGERPRINT_ATTRS = {"y": "fingerprint_y", "X": "fingerprint_X"}


def data_fingerprints(X=None, y=None) -> dict[str, str]:
    """The root attrs that fingerprint a fit's training rows, for :func:`compare`.

    Parameters
    ----------
    X : array-like of shape (N, P), optional
        The training inputs (or the training kernel matrix of a precomputed kernel).
    y : array-like of shape (N,) or (N, D), optional
        The targets as the tree's ``observed_data`` holds them (class indices for classifiers).

    Returns
    -------
    dict
        ``fingerprint_X`` and ``fingerprint_y`` (those given): a hash of the values in their
        row order, so that two fits compare only when trained on the same rows in the same order.
    """
    out = {}
    for part, values in (("X", X), ("y", y)):
        if values is not None and np.ndim(values) >= 1 and np.shape(values)[0] > 0:
            out[FINGERPRINT_ATTRS[part]] = _digest(values)
    return out


def _data_fingerprint(fit, dt: xr.DataTree) -> dict[str, str]:
    """Fingerprints of the rows a fit was trained on: targets ``y`` and, where kept, inputs ``X``.

    A tree of this package's estimators carries them in its root attrs
    (:func:`data_fingerprints`, saved and loaded with the model; of all N rows for a fit from
    sufficient statistics). Otherwise the targets are
    ``observed_data``'s ``y``, or for a fit from sufficient statistics (whose ``y_obs`` are
    compressed targets of its own basis) the targets of its log-likelihood rows,
    ``constant_data``'s ``y_rows``; the inputs are those a tree keeps (``constant_data``'s ``X``,
    a sampled width's) or a fitted estimator's training inputs (or training kernel matrix). The
    design ``Phi`` is not data: it changes with the basis, which fits on the same rows may
    differ in.
    """
    out = {part: dt.attrs[key] for part, key in FINGERPRINT_ATTRS.items() if key in dt.attrs}
    const = dt["constant_data"].dataset if "constant_data" in dt.children else xr.Dataset()
    if "y" not in out:
        if "y_rows" in const:
            out["y"] = _digest(const["y_rows"].values)
        elif "observed_data" in dt.children and "y" in dt["observed_data"].dataset:
            out["y"] = _digest(dt["observed_data"]["y"].values)
    if "X" not in out:
        if "X" in const:
            out["X"] = _digest(const["X"].values)
        elif getattr(fit, "training_", None) is not None:
            found = data_fingerprints(X=fit.training_.inputs)
            if found:
                out["X"] = found[FINGERPRINT_ATTRS["X"]]
    return out


def _check_comparable(fits, trees, n_obs) -> None:
    """Refuse fits whose elpd are not on one scale or not on the same rows (see :func:`compare`)."""
    kinds = {}
    for name, dt in trees.items():
        likelihood = dt.attrs.get("likelihood")
        if likelihood is not None:
            kind = _OUTCOMES.get(likelihood, f"likelihood {likelihood!r}")
            kinds.setdefault(kind, {})[name] = likelihood
    if len(kinds) > 1:
        parts = "; ".join(
            f"{', '.join(repr(n) for n in names)} ({', '.join(sorted(set(names.values())))}): "
            f"{kind}"
            for kind, names in kinds.items()
        )
        raise ValueError(
            "the fits' likelihoods differ, so their elpd are logs of different things and cannot "
            f"be compared: {parts}. Compare fits of one kind (regressors with regressors, "
            "classifiers with classifiers, count models with count models)."
        )
    # A fit from sufficient statistics keeps the log likelihood of a subset of its rows only.
    rows = {name: dt.attrs.get("log_likelihood_rows", "all rows") for name, dt in trees.items()}
    if len(set(rows.values())) > 1:
        raise ValueError(
            f"the fits' log likelihoods are on different rows, so their elpd cannot be "
            f"compared: {rows}."
        )
    if len(set(n_obs.values())) > 1:
        raise ValueError(
            f"fits were made on different numbers of observations, so their elpd cannot be "
            f"compared: {n_obs}."
        )
    prints = {name: _data_fingerprint(fits[name], dt) for name, dt in trees.items()}
    for part, what in (("y", "targets y"), ("X", "training inputs X")):
        groups = {}
        for name, fp in prints.items():
            if part in fp:
                groups.setdefault(fp[part], []).append(name)
        if len(groups) > 1:
            n = next(iter(n_obs.values()))
            sets = " against ".join(
                f"{', '.join(repr(m) for m in names)} (fingerprint {key})"
                for key, names in groups.items()
            )
            raise ValueError(
                f"the fits were trained on different data: their {what} differ "
                f"({n} rows each; {sets}), so their elpd cannot be compared. Compare fits of "
                "the same rows."
            )


def elpd(fit, *, var_name: str | None = None):
    """The fit's expected log pointwise predictive density, and how it was estimated.

    Parameters
    ----------
    fit : xarray.DataTree or fitted estimator
        A fit of this package (``idata_``, or the estimator itself).
    var_name : str, optional
        The variable of ``log_likelihood`` (default its only one).

    Returns
    -------
    elpd_data : arviz_stats.ELPDData
        Pointwise (``elpd_i``), as :func:`arviz.compare` takes it: PSIS-LOO results
        (``az.loo``; for a VI fit ``arviz_stats.loo_approximate_posterior``), or for a type-II
        fit with a ``loo`` group its refit terms (``kind`` "loo" for exact leave-one-out,
        "loo_kfold" for K-fold), with ``p`` the in-sample log predictive density minus the elpd
        and no Pareto k (nothing was importance sampled). For a fit from sufficient statistics
        an ``arviz_stats.ELPDDataLOOSubsample``: ``elpd``, ``se`` and ``p`` on the scale of all
        ``n_data_points`` rows, ``subsampling_se``, and ``elpd_i`` of the ``subsample_size``
        rows kept (their ``obs`` coordinate holds the rows' indices).
    method : str
        ``"PSIS-LOO"``, ``"exact LOO (N refits)"``, ``"K-fold refits"``,
        ``"PSIS-LOO, hyperparameters fixed (optimistic)"``,
        ``"PSIS-LOO, approximate posterior (corrected by ln p - ln q)"`` or
        ``"PSIS-LOO of approximate draws (uncorrected)"`` (module docstring); for a fit from
        sufficient statistics followed by ``", m of N rows"``.

    Warns
    -----
    UserWarning
        For a VI fit whose largest Pareto k exceeds ArviZ's threshold (0.7; 0.67 at 1000 draws:
        its approximation is too far from the posterior for the correction), or one without the
        densities the correction needs.
    """
    dt = _tree(fit)
    if "log_likelihood" not in dt.children:
        raise ValueError("the fit has no log_likelihood group.")
    type2 = dt.attrs.get("method") == "type2"
    if type2 and "loo" in dt.children:
        return _refit_elpd(dt, var_name)
    res, method = _psis(dt, var_name, PSIS_FIXED if type2 else PSIS)
    n_rows = _n_data_rows(dt)
    if n_rows is not None and n_rows > res.n_data_points:
        res = _on_all_rows(res, n_rows)
        method = f"{method}, {res.subsample_size} of {n_rows} rows"
    return res, method


def _psis(dt: xr.DataTree, var_name: str | None, method: str):
    """PSIS-LOO of a tree's draws (corrected for a VI approximation), and its ``method``."""
    import arviz as az
    from arviz_stats import loo_approximate_posterior

    if dt.attrs.get("method") != "vi":
        return az.loo(dt, pointwise=True, var_name=var_name), method
    var = dt["variational"].dataset if "variational" in dt.children else xr.Dataset()
    if "log_p" not in var or "log_q" not in var:
        warnings.warn(
            "a VI fit without the log densities of its approximation and of the model at its "
            "draws (log_p, log_q in the variational group; fits of this version store them): "
            "its draws are scored as posterior draws by plain PSIS-LOO, which misses how far "
            "the approximation is from the posterior. Refit it for the corrected elpd.",
            UserWarning,
            skip_file_prefixes=PACKAGE_FRAMES,
        )
        return az.loo(dt, pointwise=True, var_name=var_name), PSIS_UNCORRECTED
    with warnings.catch_warnings():
        # The warning below says what a high k means for an approximation.
        warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
        res = loo_approximate_posterior(
            dt, var["log_p"], var["log_q"], pointwise=True, var_name=var_name
        )
    k = _pareto_k(res)
    good_k = pareto_k_high(res.n_samples)  # as the table's own diagnostic counts
    if k.max() > good_k:
        warnings.warn(
            f"the VI fit's importance-corrected PSIS-LOO has Pareto k up to {k.max():.3f} "
            f"({int((k > good_k).sum())} of {k.size} rows above {good_k:.3f}; inf: not "
            "estimable): the variational approximation is too far from the posterior for its "
            "leave-one-out terms to be corrected, and its elpd is unreliable, and so are its "
            "rank and weight in a comparison. Rank with an MCMC fit (inference='mcmc').",
            UserWarning,
            skip_file_prefixes=PACKAGE_FRAMES,
        )
    return res, PSIS_APPROX


def _n_data_rows(dt: xr.DataTree) -> int | None:
    """The number of data rows of a fit whose ``log_likelihood`` keeps a subset (else None)."""
    if "n_data_rows" in dt.attrs:
        return int(dt.attrs["n_data_rows"])
    # Trees saved before the attribute: "subset of m of N data rows".
    found = re.fullmatch(
        r"subset of \d+ of (\d+) data rows", str(dt.attrs.get("log_likelihood_rows"))
    )
    return int(found.group(1)) if found else None


def _on_all_rows(res, n_rows: int):
    """PSIS-LOO of a simple random sample of rows, as an estimate over all ``n_rows``.

    ``N`` times the sample's mean, with the sampling variance of simple random sampling
    without replacement (``N^2 (1 - m / N) s^2 / m``) as ``subsampling_se``: ArviZ's difference
    estimator (:func:`arviz_stats.loo_subsample`) with no approximation of the terms outside
    the sample, so that :func:`arviz.compare` pairs two such fits row by row.
    """
    from arviz_stats.utils import ELPDDataLOOSubsample

    m = res.elpd_i.size
    zeros = xr.zeros_like(res.elpd_i)
    elpd_hat, subsampling_se, se = res.elpd_i.azstats.diff_srs_estimator(
        lpd_approx_sample=zeros, lpd_approx_all=zeros, n_data_points=n_rows
    )
    return ELPDDataLOOSubsample(
        elpd=float(elpd_hat),
        se=float(se),
        p=float(res.p) * n_rows / m,
        n_samples=res.n_samples,
        n_data_points=n_rows,
        scale="log",
        warning=res.warning,
        good_k=res.good_k,
        elpd_i=res.elpd_i,
        pareto_k=res.pareto_k,
        approx_posterior=bool(getattr(res, "approx_posterior", False)),
        subsampling_se=float(subsampling_se),
        subsample_size=m,
        # Positions in elpd_i (whose obs coordinate holds the row indices), which every fit
        # of the same N keeps in the same order (log_likelihood_rows).
        loo_subsample_observations=np.arange(m),
        elpd_loo_approx=zeros,
    )


def _refit_elpd(dt: xr.DataTree, var_name: str | None):
    """A type-II tree's refit terms (its ``loo`` group) as ArviZ's ELPDData, and ``method``."""
    from arviz_stats.utils import ELPDDataLOO, ELPDDataLOOKFold

    loo = dt["loo"].dataset
    elpd_i = loo["y"].rename({d: OBS for d in loo["y"].dims})
    ll = dt["log_likelihood"].dataset
    ll = ll[var_name or next(iter(ll.data_vars))]
    n_samples = ll.sizes["chain"] * ll.sizes["draw"]
    lppd_i = logsumexp(ll.stack(__s=("chain", "draw")).values, axis=-1) - np.log(n_samples)
    n = elpd_i.size
    common = {
        "elpd": float(elpd_i.sum()),
        "se": float(np.sqrt(n * np.var(elpd_i.values))),
        "p": float(lppd_i.sum() - elpd_i.sum()),
        "n_samples": n_samples,
        "n_data_points": n,
        "scale": "log",
        "warning": False,
        "good_k": None,
        "elpd_i": elpd_i,
    }
    if bool(loo.attrs.get("exact", True)):
        return ELPDDataLOO(**common), str(loo.attrs["method"])
    return ELPDDataLOOKFold(**common, n_folds=int(loo.attrs["n_folds"])), str(loo.attrs["method"])


def compare(fits: Mapping[str, object] | Sequence, *, round_to="none", **kwargs) -> pd.DataFrame:
    """ArviZ's comparison table for a set of fits, each scored as its engine allows honestly.

    Parameters
    ----------
    fits : mapping of str to xarray.DataTree or fitted estimator, or a list / tuple of them
        Named fits (for example ``{"type-II": rvr.idata_, "MCMC": rvr_mcmc}``), each with a
        ``log_likelihood`` group over the same observations; a list or tuple names its fits by
        position, ``"model_0"``, ``"model_1"``, ... Precomputed ``arviz_stats.ELPDData``
        (pointwise) are passed through (checked for their number of observations only).
    round_to : default="none"
        Passed to :func:`arviz.compare`; unrounded by default so the numbers can be tested and
        post-processed.
    **kwargs
        Passed to :func:`arviz.compare` (``method``, ``var_name``, ...).

    Returns
    -------
    pandas.DataFrame
        One row per fit, best first (``elpd``, ``p``, ``elpd_diff``, ``weight``, ``se``,
        ``dse``, ...), ``method``: how each row's elpd was estimated (:func:`elpd`), and
        ``pareto_k``: the largest Pareto k of its importance sampling (NaN for refits).
        ``p`` is ArviZ's ``lppd - elpd`` on each tree's ``log_likelihood``, whose terms differ:
        a type-II fit's are ``ln p(t_n | w)`` at draws of the weights, so its ``p`` counts the
        weights and the tuning of the hyperparameters; a Gaussian MCMC or VI regression fit's
        are the leave-one-out terms ``ln p(t_n | t_-n, alpha, sigma)`` with the weights
        integrated out, so its ``p`` is the hyperparameters' share alone (the README's quick
        start: 11.2 against 1.2). Compare ``p`` between fits of one kind only. A
        type-II regression fit (``RVR.idata_``) is scored by refitting its hyperparameters
        without each left-out row, never by PSIS-LOO at hyperparameters that saw that row; a
        VI fit by PSIS-LOO corrected for its approximation. Fits from sufficient statistics
        have ``elpd``, ``se``, ``elpd_diff`` and ``dse`` on the scale of all their rows,
        estimated from the rows their ``log_likelihood`` keeps (the same rows for every fit of
        the same N), and ``subsampling_dse``: the part of ``dse`` that is due to that
        subsampling.

    Raises
    ------
    ValueError
        With fewer than two fits, a fit without log likelihood, fits of likelihoods whose elpd
        are logs of different things (a regression density, a classifier's probabilities, a
        count model's: the trees' ``likelihood`` attribute), log likelihoods on different rows
        (a fit from sufficient statistics keeps those of a subset of rows: its DataTree's
        ``log_likelihood_rows`` attribute), or fits trained on different data: a different
        number of rows, or rows whose targets or inputs differ, compared by a fingerprint of
        their values in row order: the tree's root attrs ``fingerprint_y`` and ``fingerprint_X``
        (which the estimators write, and saved models keep), else the targets
        (``observed_data``'s ``y``; a fit from sufficient statistics: ``constant_data``'s
        ``y_rows``) and inputs (``constant_data``'s ``X``, or a fitted estimator's training
        inputs, where kept). The message names the fits and what differs.
    TypeError
        For ``fits`` neither a mapping nor a list / tuple.

    Warns
    -----
    UserWarning
        For a type-II fit with no refit terms, scored by PSIS-LOO at its fixed hyperparameters;
        for a VI fit whose Pareto k exceed ArviZ's threshold (:func:`elpd`).
    """
    import arviz as az
    from arviz_stats.utils import ELPDData

    if isinstance(fits, list | tuple):
        fits = {f"model_{i}": fit for i, fit in enumerate(fits)}
    elif isinstance(fits, xr.DataTree):  # a Mapping of its groups, which are not fits
        raise TypeError(
            "fits must be a dict of named fits or a list / tuple of fits, got one DataTree: "
            "compare({'a': est_a.idata_, 'b': est_b.idata_})."
        )
    elif not isinstance(fits, Mapping):
        raise TypeError(
            "fits must be a dict of named fits or a list / tuple of fits, got "
            f"{type(fits).__name__}."
        )
    if len(fits) < 2:
        raise ValueError("compare needs at least two fits.")
    seen = {}
    for name, fit in fits.items():
        if id(fit) in seen:
            warnings.warn(
                f"fits {seen[id(fit)]!r} and {name!r} are the same object: their rows of the "
                "table are one fit's.",
                UserWarning,
                skip_file_prefixes=PACKAGE_FRAMES,
            )
        seen.setdefault(id(fit), name)
    # Checked before any LOO is computed: the refits or PSIS of a mismatched set would be wasted.
    trees, n_obs = {}, {}
    for name, fit in fits.items():
        if isinstance(fit, ELPDData):
            n_obs[name] = int(fit.n_data_points)
            continue
        dt = trees[name] = _tree(fit)
        if "log_likelihood" not in dt.children:
            raise ValueError(f"fit {name!r} has no log_likelihood group.")
        ll = dt["log_likelihood"].dataset
        var = ll[kwargs.get("var_name") or next(iter(ll.data_vars))]
        n_obs[name] = _n_data_rows(dt) or int(
            np.prod([s for d, s in var.sizes.items() if d not in ("chain", "draw")])
        )
    _check_comparable(fits, trees, n_obs)
    scored, methods = {}, {}
    for name, fit in fits.items():
        if name in trees:
            scored[name], methods[name] = elpd(trees[name], var_name=kwargs.get("var_name"))
        else:
            scored[name], methods[name] = fit, fit.kind
    fixed = [name for name, m in methods.items() if m == PSIS_FIXED]
    if fixed:
        warnings.warn(
            f"{fixed}: type-II fits without refit LOO terms are scored by PSIS-LOO at "
            "hyperparameters tuned on all the data, which overstates their elpd (by about 8 nats "
            "on sinc, N = 100). Pass the estimator's idata_ (RVR's and RVC's carry LOO by "
            "refits), or type2_datatree(..., loo=est.refit_loo()).",
            UserWarning,
            skip_file_prefixes=PACKAGE_FRAMES,
        )
    kwargs.pop("var_name", None)
    with warnings.catch_warnings():
        # The rows say which method each used; ArviZ's note on mixing LOO and K-fold is that.
        warnings.filterwarnings("ignore", message="Comparing LOO-CV to K-fold-CV")
        table = az.compare(scored, round_to=round_to, **kwargs)
    table["method"] = [methods[name] for name in table.index]
    table["pareto_k"] = [_max_k(scored[name]) for name in table.index]
    return table


def _pareto_k(res) -> np.ndarray:
    """An importance-sampled elpd's Pareto k per row, inf where ArviZ could not estimate it."""
    k = np.asarray(res.pareto_k.values, dtype=np.float64).reshape(-1)
    return np.where(np.isnan(k), np.inf, k)


def _max_k(res) -> float:
    """The largest Pareto k of an importance-sampled elpd; NaN for refits (none sampled)."""
    if getattr(res, "pareto_k", None) is None or not res.pareto_k.size:
        return np.nan
    return float(_pareto_k(res).max())


def relevance_summary(
    dt: xr.DataTree,
    *,
    threshold: float = 10.0,
    type2: xr.DataTree | None = None,
) -> pd.DataFrame:
    """Per basis function: how probable it is that its ``alpha`` is below a threshold.

    .. deprecated:: 0.1.0
        ``p_relevant``, the probability of ``alpha < threshold`` on unit-norm columns, has a
        prior probability that grows with the number of rows, so it means something different
        at every ``N``, and it does not tell irrelevant columns from relevant ones well.
        Use :func:`bayes_rvm.posterior.relevance.column_relevance` (the probability that a
        column's term in the function exceeds a fraction of the targets' root-mean-square) and,
        on a basis of near-duplicate columns such as kernel centres,
        :func:`bayes_rvm.posterior.relevance.set_relevance`. This function will be removed.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit with ``alpha[basis]`` (and ``w``) in its posterior.
    threshold : float, default=10
        ``alpha_i < threshold`` on the normalised problem counts as relevant: columns of unit
        norm, regression targets of unit root-mean-square (as
        :class:`bayes_rvm.estimators.regressor.RVR`
        fits them), where relevance vectors have weights of order one and more and the prior sd
        of a relevant weight is above ``threshold^-1/2`` (about 0.3). The alphas of ``dt`` (in
        the user's units) are mapped there as ``alpha_i rms(y)^2 / ||phi_i||^2`` with the design
        of ``constant_data`` and the targets of ``observed_data`` (rms 1 for class labels), so
        the table does not change with the units of ``y`` or of the design's columns; a fit
        without ``Phi`` in ``constant_data`` (a sampled width) uses its ``alpha_rel``. Type-II
        pruning corresponds to ``alpha = inf``. Compare with the prior probability of the same
        event: a column whose ``p_relevant`` stays at its prior value is not informed by the
        data.
    type2 : xarray.DataTree, optional
        A type-II fit (:func:`bayes_rvm.inference.type2_datatree`) on the same basis; adds its
        relevant set as a column.

    Returns
    -------
    pandas.DataFrame
        Indexed by basis, with ``p_relevant`` (posterior probability of ``alpha < threshold``
        on the normalised problem), ``log10_alpha_median`` (normalised too), ``w_mean``,
        ``w_sd`` (units of ``y`` per unit of the column) and, with ``type2``, ``type2_relevant``
        and ``type2_w``; sorted by ``p_relevant``, most relevant first.
    """
    warnings.warn(
        "relevance_summary is deprecated and will be removed: its p_relevant (alpha below a "
        "threshold on unit-norm columns) has a prior probability that grows with the number of "
        "rows. Use bayes_rvm.posterior.relevance.column_relevance (effect sizes on the scale of "
        "the targets) and, for near-duplicate columns such as kernel centres, set_relevance.",
        FutureWarning,
        skip_file_prefixes=PACKAGE_FRAMES,
    )
    post = dt["posterior"].dataset
    alpha = _normalised_alpha(dt)
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
        # With several outputs, the root mean square over outputs.
        out["w_mean"] = rms_over_outputs(post["w"].mean(sample)).values
        out["w_sd"] = rms_over_outputs(post["w"].std(sample)).values
    if type2 is not None:
        t2 = type2_columns(type2, out.index.values)
        out["type2_relevant"] = t2["type2_relevant"].values
        out["type2_w"] = t2["type2_w"].values
    return out.sort_values("p_relevant", ascending=False, kind="stable")


def _normalised_alpha(dt: xr.DataTree) -> xr.DataArray:
    """``alpha`` on the normalised problem: ``alpha_i rms(y)^2 / ||phi_i||^2``."""
    post = dt["posterior"].dataset
    const = dt["constant_data"].dataset if "constant_data" in dt.children else xr.Dataset()
    if "Phi" not in const:
        if "alpha_rel" in post and "observed_data" in dt.children:
            # alpha_rel is stated for unit-RMS columns
            # (bayes_rvm.evidence.problem.prior_column_scale):
            # N times the unit-norm alpha.
            return post["alpha_rel"] / dt["observed_data"]["y"].sizes[OBS]
        raise ValueError(
            "relevance_summary needs the design (Phi in constant_data) or alpha_rel in the "
            "posterior to put the alphas on the normalised scale."
        )
    Phi = const["Phi"]
    other = [d for d in Phi.dims if d != BASIS]
    norm2 = (Phi**2).sum(other)
    norm2 = norm2.where(norm2 > 0, 1.0)
    y_scale2 = 1.0
    if dt.attrs.get("likelihood", "gaussian") == "gaussian" and "observed_data" in dt.children:
        y = np.asarray(dt["observed_data"]["y"].values, dtype=np.float64)
        y_scale2 = float(np.mean(y**2)) or 1.0
    alpha = post["alpha"]
    return alpha * y_scale2 / norm2
