"""Plots of fitted RVMs (matplotlib): the predictive band with the relevance vectors marked, the
elpd of a model comparison study, and calibration on held-out data (coverage against nominal
level, PIT histograms, reliability diagrams; the numbers come from
:mod:`bayes_rvm.posterior.calibration`), and relevance along a 1-D input (the numbers come from
:mod:`bayes_rvm.posterior.relevance`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "plot_coverage",
    "plot_pit",
    "plot_regression",
    "plot_relevance",
    "plot_reliability",
    "plot_study",
    "plot_width_path",
]


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
        A regressor with ``predict(X, return_std=True)`` and ``relevance_`` indices into ``X``
        (for an MCMC fit those of the type-II fit that seeded it, and labelled so).
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
    # An MCMC or VI fit predicts by its posterior over every sampled basis function; its
    # relevance_ are those of the type-II fit that ran first.
    mcmc = getattr(model, "inference", "type2") in ("mcmc", "vi")
    # A count model predicts the rate and the sd of the rate, not a count's spread.
    what = "rate" if predicts_rate(model) else "predictive"
    ax.fill_between(
        grid[:, 0],
        mean - n_sd * std,
        mean + n_sd * std,
        color="C0",
        alpha=0.2,
        label=f"{'posterior ' if mcmc else ''}{what} ±{n_sd:g} sd",
    )
    ax.plot(grid[:, 0], mean, color="C0", label=f"{what} mean")
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
        label=f"{'type-II ' if mcmc else ''}relevance vectors ({rv.size})",
    )
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(loc="best", fontsize="small")
    return ax


def plot_relevance(sets, centres, *, columns=None, relevance_vectors=None, ax=None):
    """Relevance along a 1-D input: of each centre's neighbourhood, of each column, and type-II's.

    Parameters
    ----------
    sets : xarray.Dataset
        :func:`bayes_rvm.posterior.relevance.set_relevance` of sets seeded one per column
        (:func:`~bayes_rvm.posterior.relevance.neighbourhood_sets`,
        :func:`~bayes_rvm.posterior.relevance.correlated_sets`), whose ``set`` labels are basis
        labels; ``p_any`` is drawn at each seed's centre, ``p_any_prior`` too where present.
    centres : array-like of shape (K,) or (K, 1)
        The centre of basis label ``i`` is ``centres[i]`` (an estimator's ``basis_.centres_``);
        labels from ``K`` on (the bias) have none and are left out.
    columns : xarray.Dataset, optional
        :func:`bayes_rvm.posterior.relevance.column_relevance`: each column's ``p_effect`` as a
        point.
    relevance_vectors : array-like, optional
        Positions of a type-II fit's relevance vectors (``relevance_vectors_``), marked on the
        axis.
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    import matplotlib.pyplot as plt

    C = np.asarray(centres, dtype=np.float64)
    if C.ndim == 2 and C.shape[1] == 1:
        C = C[:, 0]
    if C.ndim != 1:
        raise ValueError(f"plot_relevance draws 1-D centres; centres have shape {C.shape}.")
    if "p_any" not in sets or "set" not in sets.dims:
        raise ValueError("sets must be the Dataset of set_relevance (p_any over set).")
    own = ax is None
    if own:
        # Constrained: the legend beside the axes and the x label inside a saved figure.
        _, ax = plt.subplots(figsize=(10, 3.5), layout="constrained")

    def _along(table, dim):
        labels = np.asarray(table[dim].values)
        keep = np.array([np.issubdtype(type(v), np.integer) and 0 <= v < C.size for v in labels])
        if not keep.any():
            raise ValueError(f"no {dim} label of the table names one of the {C.size} centres.")
        x = C[labels[keep].astype(np.intp)]
        order = np.argsort(x, kind="stable")
        return x[order], keep, order

    x, keep, order = _along(sets, "set")
    delta = sets.attrs.get("delta")
    what = f"effect > {delta:g} rms(y)" if delta is not None else "relevant"
    ax.plot(
        x, sets["p_any"].values[keep][order], "-", color="C0", label=f"P(some neighbour: {what})"
    )
    if "p_any_prior" in sets:
        ax.plot(
            x, sets["p_any_prior"].values[keep][order], "--", color="C0", lw=1, label="its prior"
        )
    if columns is not None:
        xc, keep_c, order_c = _along(columns, "basis")
        ax.plot(
            xc,
            columns["p_effect"].values[keep_c][order_c],
            ".",
            color="C1",
            ms=5,
            label="P(column: effect)",
        )
    if relevance_vectors is not None:
        rv = np.asarray(relevance_vectors, dtype=np.float64).reshape(-1)
        ax.plot(
            rv,
            np.full(rv.size, -0.04),
            "^",
            color="C3",
            ms=8,
            clip_on=False,
            label=f"type-II relevance vectors ({rv.size})",
        )
        for r in rv:
            ax.axvline(r, color="C3", lw=0.6, alpha=0.4)
    ax.set_ylim(-0.06, 1.04)
    ax.set_xlabel("centre")
    ax.set_ylabel("posterior probability")
    if own:
        # Beside the axes: the curves span the whole range, and "best" put it over one.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    else:
        ax.legend(loc="best", fontsize="small")  # inside the caller's axes, off its neighbours
    return ax


def predicts_rate(model) -> bool:
    """Whether ``model.predict`` gives a rate (a Poisson regression), not a target's mean."""
    return getattr(model, "likelihood", "gaussian") == "poisson"


def plot_study(table, *, n_se: float = 1.0, axes=None):
    """Leave-one-out elpd with its standard error per model, one panel per data set.

    Parameters
    ----------
    table : pandas.DataFrame
        A study table (:func:`bayes_rvm.studies.runner.run_study` or
        :func:`~bayes_rvm.studies.runner.load_study`)
        with ``dataset``, ``model``, ``elpd_loo`` and ``elpd_loo_se``; with ``elpd_method``
        each model is labelled by how its elpd was estimated (PSIS-LOO, or leave-one-out refits
        for a type-II regression fit).
    n_se : float, default=1.0
        Half-width of the error bars in standard errors.
    axes : sequence of matplotlib Axes, optional
        One per data set.

    Returns
    -------
    matplotlib.figure.Figure

    Notes
    -----
    The elpd of different data sets are not on one scale (they sum over different points), hence
    one panel each. Within a panel the best model is marked, among the fits whose elpd is to be
    trusted (all, where none is); models whose fits have Pareto k above ArviZ's threshold for
    their draws (the table's ``n_pareto_k_high``; 0.7 from about 2150 draws) are drawn hollow,
    as their elpd is not reliable, and fits that failed a convergence check (the table's
    ``converged`` is False) are crossed in red.
    """
    import matplotlib.pyplot as plt

    missing = {"dataset", "model", "elpd_loo", "elpd_loo_se"} - set(table.columns)
    if missing:
        raise ValueError(f"table lacks the columns {sorted(missing)}: not a study table.")
    names = list(dict.fromkeys(table["dataset"]))
    if not names:
        raise ValueError("the study table is empty.")
    if axes is None:
        n_models = table.groupby("dataset")["model"].size().max()
        fig, axes = plt.subplots(
            1, len(names), figsize=(4.5 * len(names), 0.9 + 0.6 * n_models), squeeze=False
        )
        axes = axes[0]
    elif len(axes) != len(names):
        raise ValueError(f"axes has {len(axes)} panels for {len(names)} data sets.")
    for ax, name in zip(axes, names, strict=True):
        rows = table[table["dataset"] == name]
        pos = np.arange(len(rows))[::-1]
        elpd = rows["elpd_loo"].to_numpy(float)
        se = rows["elpd_loo_se"].to_numpy(float)
        flagged = (
            rows["n_pareto_k_high"].to_numpy(float) > 0
            if "n_pareto_k_high" in rows
            else np.zeros(len(rows), dtype=bool)
        )
        for ok, style in ((True, {"mfc": "C0"}), (False, {"mfc": "white"})):
            sel = flagged != ok
            ax.errorbar(
                elpd[sel],
                pos[sel],
                xerr=n_se * se[sel],
                fmt="o",
                color="C0",
                mec="C0",
                capsize=3,
                **style,
                label=("Pareto k not high" if ok else "Pareto k high") if sel.any() else None,
            )
        # A failed convergence check (R-hat, ESS, divergences, the iteration cap): the elpd of a
        # fit that did not converge is not to be trusted.
        failed = (
            rows["converged"].eq(False).to_numpy()
            if "converged" in rows
            else np.zeros(len(rows), dtype=bool)
        )
        if failed.any():
            ax.plot(elpd[failed], pos[failed], "x", color="C3", ms=10, mew=2, label="not converged")
        # The best of the fits to be trusted (of all, where none is).
        trusted = np.where(flagged | failed, np.nan, elpd)
        reference = trusted if np.isfinite(trusted).any() else elpd
        if np.isfinite(reference).any():
            ax.axvline(np.nanmax(reference), color="0.6", ls="--", lw=1)
        how = rows["elpd_method"] if "elpd_method" in rows else [None] * len(rows)
        ticks = [
            f"{model}\n({m})" if isinstance(m, str) and m else str(model)
            for model, m in zip(rows["model"], how, strict=True)
        ]
        ax.set_yticks(pos, ticks)
        ax.set(title=str(name), xlabel=f"elpd (leave-one-out) ± {n_se:g} se")
    axes[0].legend(fontsize="small", loc="best")
    fig = axes[0].figure
    fig.tight_layout()
    return fig


def _axes(ax, figsize=(4.5, 4.0)):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    return ax


def _unit_square(ax, xlabel: str, ylabel: str):
    """Labels, [0, 1] limits and the legend of a calibration diagram."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", fontsize="small")
    return ax


def plot_coverage(pits: dict, *, levels=None, ax=None):
    """Empirical coverage of central predictive intervals against their nominal level.

    Parameters
    ----------
    pits : dict of str -> array-like
        PIT values of held-out targets per model
        (:func:`bayes_rvm.posterior.calibration.pit_gaussian`,
        :func:`~bayes_rvm.posterior.calibration.pit_mixture`). Calibrated models lie on the
        diagonal;
        below it the intervals are too narrow.
    levels : array-like, optional
        Nominal levels (default 0.05 to 0.95 in steps of 0.05).
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    from bayes_rvm.posterior.calibration import interval_coverage

    levels = np.arange(0.05, 0.96, 0.05) if levels is None else np.asarray(levels, dtype=float)
    ax = _axes(ax)
    ax.plot([0, 1], [0, 1], "k:", lw=1, label="calibrated")
    for name, pit in pits.items():
        ax.plot(levels, interval_coverage(pit, levels), "o-", ms=3, label=name)
    return _unit_square(ax, "nominal level of the central interval", "fraction of targets inside")


def plot_pit(pit, *, bins: int = 10, ax=None, label: str | None = None):
    """Histogram of PIT values with the uniform density a calibrated predictive gives.

    A U shape means intervals too narrow (overconfident), a hump too wide.

    Parameters
    ----------
    pit : array-like of shape (n,)
    bins : int, default=10
    ax : matplotlib Axes, optional
    label : str, optional
        Title of the panel.

    Returns
    -------
    ax : matplotlib Axes
    """
    pit = np.asarray(pit, dtype=float)
    ax = _axes(ax, (4.0, 3.0))
    ax.hist(pit, bins=bins, range=(0, 1), density=True, color="C0", alpha=0.6, edgecolor="w")
    ax.axhline(1.0, color="k", ls=":", lw=1)
    # +-2 sd of a bin's density under uniformity (binomial counts).
    half = 2 * np.sqrt(bins * (1 - 1 / bins) / pit.size)
    ax.axhspan(1 - half, 1 + half, color="0.85", zorder=0)
    ax.set_xlim(0, 1)
    ax.set_xlabel("PIT")
    ax.set_ylabel("density")
    if label:
        ax.set_title(label)
    return ax


def plot_reliability(y_true, probas: dict, *, n_bins: int = 10, strategy="uniform", ax=None):
    """Reliability diagram of binary probabilities for several models.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels (0 / 1 or the positive class's label as the larger one).
    probas : dict of str -> array-like of shape (n,)
        Predicted probability of the positive class per model.
    n_bins : int, default=10
    strategy : {"uniform", "quantile"}, default="uniform"
    ax : matplotlib Axes, optional

    Returns
    -------
    ax : matplotlib Axes
    """
    from bayes_rvm.posterior.calibration import reliability_curve

    ax = _axes(ax)
    ax.plot([0, 1], [0, 1], "k:", lw=1, label="calibrated")
    for name, proba in probas.items():
        curve = reliability_curve(y_true, proba, n_bins=n_bins, strategy=strategy)
        ax.plot(curve.prob_pred, curve.prob_true, "o-", ms=4, label=f"{name} (ECE {curve.ece:.3f})")
    return _unit_square(ax, "mean predicted probability", "observed frequency")


def plot_width_path(model, *, cv=None, ax=None):
    """The evidence curve over the kernel width, with the chosen width and, optionally, a CV curve.

    Parameters
    ----------
    model : fitted RVR or RVC with ``gamma="evidence"``
        Its ``width_path_`` (log evidence at each start width) and ``length_scale_`` are drawn.
    cv : fitted RVRCV or RVCCV, optional
        Its mean test score (with one standard deviation) over its width grid, on a second axis.
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
        The evidence axis (the CV axis is its twin).
    """
    import matplotlib.pyplot as plt

    path = getattr(model, "width_path_", None)
    if path is None:
        raise ValueError("model has no width_path_: fit it with gamma='evidence' first.")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(path.length_scale, path.log_evidence, "o-", color="C0", label="log evidence")
    ls = np.atleast_1d(model.length_scale_)
    if ls.size == 1:
        ax.axvline(float(ls[0]), color="C0", ls=":", label=f"evidence: r = {float(ls[0]):.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("kernel width r")
    ax.set_ylabel("log evidence", color="C0")
    handles, labels = ax.get_legend_handles_labels()
    if cv is not None:
        res = cv.cv_results_
        ax2 = ax.twinx()
        order = np.argsort(res["length_scale"])  # cv_results_ is in the order of the widths given
        r = res["length_scale"][order]
        mean, sd = res["mean_test_score"][order], res["std_test_score"][order]
        ax2.plot(r, mean, "s-", color="C1", label="CV score")
        ax2.fill_between(r, mean - sd, mean + sd, color="C1", alpha=0.2)
        ax2.axvline(cv.length_scale_, color="C1", ls=":", label=f"CV: r = {cv.length_scale_:.3g}")
        ax2.set_ylabel("mean CV score", color="C1")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, fontsize="small", loc="lower center")
    return ax
