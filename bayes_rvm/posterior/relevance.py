"""Relevance on the scale of the function: of each basis function, and of sets of them.

A weight's prior precision ``alpha`` says how far the prior lets the weight grow, not how much its
column adds to the fitted function, and a threshold on ``alpha`` means something different at
every ``N`` (its prior probability moves with the number of rows). These summaries read the
draws of the weights instead (of an MCMC, VI or type-II fit: whichever the tree holds):

- :func:`relative_effects`: each column's contribution ``|w_j| rms(phi_j) / rms(y)`` per draw,
  the size of the column's term in the function relative to the targets' root-mean-square (on
  the latent scale for classifiers and count models, whose targets have no scale);
- :func:`column_relevance`: per column, the posterior probability that this contribution
  exceeds ``delta``;
- :func:`set_relevance`: per set of columns (near-duplicates such as neighbouring kernel
  centres, built by :func:`correlated_sets` or :func:`neighbourhood_sets`), the posterior
  probability that at least one of them does, counted draw by draw.

Under a hyperprior stated per row on unit-RMS columns (this package's models) the weight
``w_rel = w rms(phi) / rms(y)`` has prior precision ``alpha_rel`` whatever ``N``, so the prior
probability of the event ``|w_rel| > delta`` does not change with the number of rows.

The array layer is plain NumPy (:func:`set_counts`); the functions on trees map dims onto it and
return xarray Datasets (``.to_dataframe()`` gives the table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from bayes_rvm.dims import BASIS, SET

__all__ = [
    "DEFAULT_DELTA",
    "column_relevance",
    "correlated_sets",
    "neighbourhood_sets",
    "relative_effects",
    "set_counts",
    "set_relevance",
    "type2_columns",
]

#: Default effect size: a column counts as relevant where its term in the function has a root-
#: mean-square above a tenth of the targets'.
DEFAULT_DELTA = 0.1
#: Default cosine between two columns of one set (:func:`correlated_sets`): ``exp(-1/2)`` is that
#: of two RBF columns ``exp(-gamma (x - c)^2)`` on densely spread inputs whose centres lie one
#: length ``gamma^-1/2`` apart.
DEFAULT_MIN_CORRELATION = 0.6

_SAMPLE = ("chain", "draw")


def _group(dt: xr.DataTree, group: str) -> xr.Dataset:
    if not isinstance(dt, xr.DataTree):
        raise TypeError(f"dt must be an xarray.DataTree, got {type(dt).__name__}.")
    if group not in dt.children:
        raise ValueError(f"the tree has no {group!r} group; it has {sorted(dt.children)}.")
    ds = dt[group].dataset
    if "w" not in ds or BASIS not in ds["w"].dims:
        raise ValueError(
            f"the {group!r} group has no weights w[{BASIS}]: relevance is read from the weights' "
            "draws (a fit of this package stores them, MCMC, VI and type-II alike)."
        )
    return ds


def _check_delta(delta: float) -> float:
    if isinstance(delta, bool) or not np.isscalar(delta) or not (np.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be a positive number, got {delta!r}.")
    return float(delta)


def _relative_scale(dt: xr.DataTree, ds: xr.Dataset) -> xr.DataArray:
    """``rms(phi_j) / rms(y)``, which turns a weight into its column's relative contribution.

    The models state ``alpha = alpha_rel rms(phi)^2 / rms(y)^2`` (per draw for a sampled width),
    so the ratio is ``sqrt(alpha / alpha_rel)``; a tree without ``alpha_rel`` takes the design of
    ``constant_data`` and the targets of ``observed_data`` (rms 1 for classifiers and counts).
    """
    if "alpha" in ds and "alpha_rel" in ds:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.sqrt(ds["alpha"] / ds["alpha_rel"])
    const = dt["constant_data"].dataset if "constant_data" in dt.children else xr.Dataset()
    if "Phi" not in const:
        raise ValueError(
            "relevance needs the columns' scale: alpha and alpha_rel beside w, or the design "
            "(Phi in constant_data)."
        )
    Phi = const["Phi"]
    rms_phi = np.sqrt((Phi**2).mean([d for d in Phi.dims if d != BASIS]))
    rms_y = 1.0
    if dt.attrs.get("likelihood", "gaussian") in ("gaussian", "student_t"):
        if "observed_data" in dt.children and "y" in dt["observed_data"].dataset:
            y = np.asarray(dt["observed_data"]["y"].values, dtype=np.float64)
            rms_y = float(np.sqrt(np.mean(y**2))) or 1.0
    return rms_phi / rms_y


def relative_effects(dt: xr.DataTree, *, group: str = "posterior") -> xr.DataArray:
    """Each column's contribution to the function relative to the targets, per draw.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit of this package (``idata_``, :func:`bayes_rvm.inference.sample_mcmc`,
        :func:`bayes_rvm.inference.type2_datatree`, a VI fit), or the tree of
        :func:`bayes_rvm.inference.sample_prior_predictive`.
    group : str, default="posterior"
        The group whose draws of ``w`` are read (``"prior"`` for prior draws).

    Returns
    -------
    xarray.DataArray
        ``effect[chain, draw, basis] = |w_j| rms(phi_j) / rms(y)``: the root-mean-square over the
        training rows of the column's term ``w_j phi_j(x)``, as a fraction of the targets' (all
        outputs' together; of the latent function's unit scale for classifiers and count
        models). With several outputs or classes, the largest over them. ``rms(phi_j) / rms(y)``
        is the models' own normalisation, ``sqrt(alpha / alpha_rel)`` (a model built without
        ``phi_scale`` and ``y_scale`` has none, and its effects are ``|w|``).
    """
    ds = _group(dt, group)
    effect = abs(ds["w"] * _relative_scale(dt, ds))
    extra = [d for d in effect.dims if d not in (*_SAMPLE, BASIS)]
    if extra:
        effect = effect.max(extra)
    # A pruned column (alpha = inf) has w = 0: no contribution.
    return effect.fillna(0.0).transpose(*_SAMPLE, BASIS).rename("effect")


def rms_over_outputs(x: xr.DataArray) -> xr.DataArray:
    """A per-column statistic, root-mean-square over outputs or classes where there are several."""
    extra = [d for d in x.dims if d != BASIS]
    return np.sqrt((x**2).mean(extra)) if extra else x


def column_relevance(
    dt: xr.DataTree,
    *,
    delta: float = DEFAULT_DELTA,
    group: str = "posterior",
    type2: xr.DataTree | None = None,
    prior: xr.DataTree | None = None,
) -> xr.Dataset:
    """Per basis function: how probable it is that its column adds at least ``delta`` to the fit.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit with draws of ``w`` (see :func:`relative_effects`).
    delta : float, default=0.1
        The effect size: the column's term in the function, ``w_j phi_j``, with a root-mean-square
        over the training rows above ``delta`` times the targets' counts as relevant.
    group : str, default="posterior"
        ``"prior"`` gives the prior probability of the same event (from
        :func:`bayes_rvm.inference.sample_prior_predictive`), to set beside the posterior's.
    type2 : xarray.DataTree, optional
        A type-II fit on the same basis: adds whether it kept each column, and its mean weight.
        A tree of another likelihood or other training rows (the estimators' trees say which in
        their root attrs) is refused.
    prior : xarray.DataTree, optional
        Prior draws of the same model (:func:`bayes_rvm.inference.sample_prior_predictive`):
        adds ``p_effect_prior``, the prior probability of the same event. A column whose
        ``p_effect`` stays near it is not informed by the data.

    Returns
    -------
    xarray.Dataset
        Over ``basis``: ``p_effect`` (the probability of ``effect > delta``), ``effect_median``
        (:func:`relative_effects`' median), ``w_mean`` and ``w_sd`` (units of ``y`` per unit of
        the column; root-mean-square over outputs or classes), ``log10_alpha_rel_median`` where
        the fit has ``alpha_rel`` (the prior precision of the relative weight), with ``prior``
        ``p_effect_prior``, and with ``type2`` ``type2_relevant`` and ``type2_w``. Attribute
        ``delta``.

    Notes
    -----
    On columns that are nearly collinear (neighbouring kernel centres) the data fix what the
    neighbours add together, not which of them adds it, and every one of them can have a low
    ``p_effect`` where together they carry a clear signal: use :func:`set_relevance` there.
    """
    delta = _check_delta(delta)
    ds = _group(dt, group)
    effect = relative_effects(dt, group=group)
    out = xr.Dataset(
        {
            "p_effect": (effect > delta).mean(_SAMPLE),
            "effect_median": effect.median(_SAMPLE),
            "w_mean": rms_over_outputs(ds["w"].mean(_SAMPLE)),
            "w_sd": rms_over_outputs(ds["w"].std(_SAMPLE)),
        },
        attrs={"delta": delta, "group": group},
    )
    if "alpha_rel" in ds:
        with np.errstate(divide="ignore"):
            out["log10_alpha_rel_median"] = np.log10(ds["alpha_rel"]).median(_SAMPLE)
    if prior is not None:
        p_prior = (relative_effects(prior, group="prior") > delta).mean(_SAMPLE)
        out["p_effect_prior"] = p_prior.reindex({BASIS: out[BASIS].values})
    if type2 is not None:
        _check_same_fit_data(dt, type2)
        out.update(type2_columns(type2, out[BASIS].values))
    return out


def _check_same_fit_data(dt: xr.DataTree, type2: xr.DataTree) -> None:
    """Refuse a type-II tree of another likelihood or other training rows than ``dt``'s, where
    both trees say (their root attrs: the estimators write the likelihood and fingerprints of
    the rows): its columns would be matched to ``dt``'s by their labels alone."""
    for key, what in (
        ("likelihood", "likelihood"),
        ("fingerprint_y", "targets y"),
        ("fingerprint_X", "training inputs X"),
    ):
        mine, theirs = dt.attrs.get(key), type2.attrs.get(key)
        if mine is not None and theirs is not None and mine != theirs:
            raise ValueError(
                f"type2 is a fit of other {what} than dt's ({key} {theirs!r} against "
                f"{mine!r}): pass the idata_ of a type-II fit of the same X and y."
            )


def type2_columns(type2: xr.DataTree, labels: Sequence) -> xr.Dataset:
    """Which of the columns ``labels`` a type-II fit kept, and their mean weights.

    Returns
    -------
    xarray.Dataset
        Over ``basis`` (``labels``): ``type2_relevant`` (kept: a finite ``alpha``; a tree of the
        relevance vectors only leaves the others out) and ``type2_w`` (the weights' mean,
        root-mean-square over outputs or classes; NaN for a column the tree leaves out).
    """
    t2 = _group(type2, "posterior")
    if "alpha" not in t2:
        raise ValueError("type2 must be a type-II fit's tree, with alpha in its posterior.")
    labels = np.asarray(labels)
    alpha = t2["alpha"].isel(chain=0, draw=0).reindex({BASIS: labels}, fill_value=np.inf)
    return xr.Dataset(
        {
            "type2_relevant": np.isfinite(alpha).drop_vars(["chain", "draw"], errors="ignore"),
            "type2_w": rms_over_outputs(t2["w"].mean(_SAMPLE)).reindex({BASIS: labels}),
        }
    )


def set_counts(passes: np.ndarray, members: np.ndarray) -> np.ndarray:
    """How many members of each set pass, draw by draw (the array layer of :func:`set_relevance`).

    Parameters
    ----------
    passes : ndarray of bool, shape (S, M)
        Whether column ``j`` is relevant in draw ``s``.
    members : ndarray of bool, shape (K, M)
        Whether column ``j`` belongs to set ``k``.

    Returns
    -------
    ndarray of int, shape (S, K)
        The number of set ``k``'s columns relevant in draw ``s``; ``> 0`` where at least one is.
    """
    passes = np.asarray(passes, dtype=bool)
    members = np.asarray(members, dtype=bool)
    if passes.ndim != 2 or members.ndim != 2 or passes.shape[1] != members.shape[1]:
        raise ValueError(
            f"passes (draws, columns) and members (sets, columns) must share their columns, got "
            f"shapes {passes.shape} and {members.shape}."
        )
    # a floating-point product runs on BLAS, and counts up to 2^53 are exact in it
    return np.rint(passes.astype(np.float64) @ members.T.astype(np.float64)).astype(np.int64)


def _membership(sets, labels: xr.DataArray) -> tuple[xr.DataArray, xr.DataArray]:
    """``sets`` as a boolean ``(set, basis)`` array over a tree's basis labels, and their sizes."""
    if isinstance(sets, Mapping):
        names = list(sets)
        lists = [np.unique(np.atleast_1d(np.asarray(sets[k]))) for k in names]
        empty = [k for k, m in zip(names, lists, strict=True) if m.size == 0]
        if empty or not names:
            raise ValueError(f"every set must name at least one basis label; empty: {empty}.")
        members = np.array([np.isin(labels.values, m) for m in lists], dtype=bool)
        members = xr.DataArray(
            members.reshape(len(names), labels.size),
            dims=(SET, BASIS),
            coords={SET: names, BASIS: labels.values},
        )
        size = xr.DataArray([m.size for m in lists], dims=SET, coords={SET: names})
        return members, size
    if isinstance(sets, xr.DataArray) and set(sets.dims) == {SET, BASIS}:
        if sets.dtype != bool:
            raise ValueError(f"sets must be boolean membership, got dtype {sets.dtype}.")
        members = sets.transpose(SET, BASIS)
        # A column outside the fit (pruned by type-II, or not sampled) has weight 0: it never
        # passes.
        return members.reindex({BASIS: labels.values}, fill_value=False), members.sum(BASIS)
    raise TypeError(
        f"sets must be a mapping of set names to basis labels, or a boolean DataArray over "
        f"({SET}, {BASIS}) (correlated_sets, neighbourhood_sets); got {type(sets).__name__}."
    )


def set_relevance(
    dt: xr.DataTree,
    sets,
    *,
    delta: float = DEFAULT_DELTA,
    group: str = "posterior",
    prior: xr.DataTree | None = None,
) -> xr.Dataset:
    """Per set of columns: how probable it is that at least one of them is relevant.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit with draws of ``w`` (see :func:`relative_effects`).
    sets : mapping of name to basis labels, or xarray.DataArray of bool over (set, basis)
        The sets, which may overlap (:func:`correlated_sets`, :func:`neighbourhood_sets`). A
        column of a set that the fit does not hold (pruned by type-II, or not sampled over) has
        a zero weight and never counts: the same sets suit a type-II fit and a sampled one.
    delta : float, default=0.1
        The effect size of :func:`column_relevance`.
    group : str, default="posterior"
        ``"prior"`` for the prior probability of the same events.
    prior : xarray.DataTree, optional
        Prior draws of the same model (:func:`bayes_rvm.inference.sample_prior_predictive`):
        adds ``p_any_prior``. The more columns a set holds, the higher the prior probability
        that one of them passes; a set's ``p_any`` means something only against it.

    Returns
    -------
    xarray.Dataset
        Over ``set``: ``p_any`` (the probability that some member's effect exceeds ``delta``,
        counted in each draw jointly over the members), ``p_column_max`` (the largest of the
        members' own probabilities, which ``p_any`` can exceed by far where neighbours share
        one signal), ``expected_count`` (the expected number of relevant members), ``size``
        (the set's columns), ``size_in_fit`` (those the fit holds) and, with ``prior``,
        ``p_any_prior``. Attribute ``delta``.
    """
    delta = _check_delta(delta)
    out = _set_probabilities(dt, sets, delta, group)
    if prior is not None:
        out["p_any_prior"] = _set_probabilities(prior, sets, delta, "prior")["p_any"]
    return out


def _set_probabilities(dt: xr.DataTree, sets, delta: float, group: str) -> xr.Dataset:
    """:func:`set_relevance` of one group."""
    effect = relative_effects(dt, group=group)
    members, size = _membership(sets, effect[BASIS])
    passes = (effect > delta).stack(__sample=_SAMPLE).transpose("__sample", BASIS)
    counts = set_counts(passes.values, members.values)
    p_column = passes.mean("__sample")
    return xr.Dataset(
        {
            "p_any": (SET, (counts > 0).mean(axis=0)),
            "p_column_max": p_column.where(members).max(BASIS).fillna(0.0),
            "expected_count": (SET, counts.mean(axis=0)),
            "size": size,
            "size_in_fit": members.sum(BASIS),
        },
        coords={SET: members[SET].values},
        attrs={"delta": delta, "group": group},
    )


def _seeded_sets(close: np.ndarray, labels: Sequence) -> xr.DataArray:
    """One set per column: the columns ``close`` to it (a square boolean matrix)."""
    labels = np.asarray(labels)
    return xr.DataArray(close.astype(bool), dims=(SET, BASIS), coords={SET: labels, BASIS: labels})


def correlated_sets(
    dt: xr.DataTree, *, min_correlation: float = DEFAULT_MIN_CORRELATION
) -> xr.DataArray:
    """One set per column: the columns nearly collinear with it on the training rows.

    Parameters
    ----------
    dt : xarray.DataTree
        A fit with its design (``Phi`` in ``constant_data``; a fit that samples the kernel width
        has none: use :func:`neighbourhood_sets`).
    min_correlation : float, default=0.6
        The smallest ``|cos|`` of the angle between two columns of one set (uncentred, as the
        columns enter the model). On densely spread inputs two RBF columns whose centres lie
        one length ``gamma^-1/2`` apart have a cosine of ``exp(-1/2) = 0.61``.

    Returns
    -------
    xarray.DataArray of bool over (set, basis)
        Set ``j`` (named by column ``j``'s label) holds the columns whose cosine with column
        ``j`` is at least ``min_correlation``; the sets overlap.
    """
    if not (np.isscalar(min_correlation) and 0.0 < min_correlation <= 1.0):
        raise ValueError(f"min_correlation must lie in (0, 1], got {min_correlation!r}.")
    const = dt["constant_data"].dataset if "constant_data" in dt.children else xr.Dataset()
    if "Phi" not in const:
        raise ValueError(
            "correlated_sets needs the design (Phi in constant_data); for a fit without one "
            "(a sampled kernel width) build the sets from the centres with neighbourhood_sets."
        )
    Phi = const["Phi"].transpose(..., BASIS)
    P = np.asarray(Phi.values, dtype=np.float64).reshape(-1, Phi.sizes[BASIS])
    norms = np.linalg.norm(P, axis=0)
    unit = P / np.where(norms > 0, norms, 1.0)
    cos = np.abs(unit.T @ unit)
    np.fill_diagonal(cos, 1.0)
    return _seeded_sets(cos >= min_correlation - 1e-12, Phi[BASIS].values)


def neighbourhood_sets(centres, radius: float, *, basis: Sequence | None = None) -> xr.DataArray:
    """One set per centre: the basis functions whose centres lie within ``radius`` of it.

    Parameters
    ----------
    centres : array-like of shape (K,) or (K, n_features)
        The basis functions' centres (for an estimator ``basis_.centres_``).
    radius : float
        Euclidean distance; one kernel length (``gamma^-1/2`` for an RBF ``exp(-gamma d^2)``)
        groups the columns whose kernels overlap most.
    basis : sequence, optional
        The basis labels of the centres (default ``0 .. K-1``, the estimators' labels; the bias,
        which has no centre, belongs to no set).

    Returns
    -------
    xarray.DataArray of bool over (set, basis)
    """
    C = np.asarray(centres, dtype=np.float64)
    C = C[:, None] if C.ndim == 1 else C
    if C.ndim != 2 or not np.isfinite(C).all():
        raise ValueError(f"centres must be a finite (K,) or (K, n_features) array, got {C.shape}.")
    if not (np.isscalar(radius) and np.isfinite(radius) and radius >= 0):
        raise ValueError(f"radius must be a non-negative number, got {radius!r}.")
    labels = np.arange(C.shape[0]) if basis is None else np.asarray(basis)
    if labels.shape != (C.shape[0],):
        raise ValueError(
            f"basis must have one label per centre ({C.shape[0]}), got {labels.shape}."
        )
    dist2 = np.sum((C[:, None, :] - C[None, :, :]) ** 2, axis=-1)
    return _seeded_sets(dist2 <= radius**2 * (1 + 1e-12), labels)
