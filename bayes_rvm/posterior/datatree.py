"""The one DataTree adapter: every DataTree of the package, built last, from arrays.

The arrays come first (:mod:`bayes_rvm.posterior.draws`); :func:`make_datatree` turns them into a
DataTree
through ``arviz_base.from_dict`` with the dims of :mod:`bayes_rvm.dims`. Whatever the engine, a fit
has:

``posterior``
    ``w[basis]`` (``w[basis, output]`` with several outputs, ``w[basis, class]`` for a softmax
    classifier), ``alpha[basis]`` and its logarithm ``log_alpha[basis]`` (the scale to plot
    the precisions on: they span many decades); for regression ``sigma`` and ``beta`` (and
    ``alpha_rel``, ``sigma_rel``, ``nu`` where they are sampled);
``log_likelihood``
    ``y[obs]``: ``ln p(t_n | w, ...)`` for each draw, summed over outputs, so that ``az.loo`` and
    ``az.compare`` leave one *row* out;
``observed_data`` / ``constant_data``
    ``y`` / ``Phi`` (and ``offset`` where the mean has terms of the user's own);
``sample_stats``
    MCMC only;
``variational``
    variational fits only (``fit_vi``): ``loss[iteration]``, the
    negative ELBO at each iteration, and the settings and convergence of the fit as attrs
    (:func:`variational_group`);
``posterior_predictive`` or ``predictions`` (+ ``predictions_constant_data``)
    from :func:`sample_posterior_predictive`.

The root ``attrs`` name the method (``"mcmc"``, ``"vi"`` or ``"type2"``), the likelihood, and
record the settings as JSON; an estimator's tree also holds ``fingerprint_X`` and
``fingerprint_y``, hashes of its training rows, by which :func:`~bayes_rvm.compare` refuses fits
of other data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from bayes_rvm.dims import BASIS, CLASS, ITERATION, OBS, OUTPUT, variable_dims
from bayes_rvm.evidence.gaussian import EvidenceFit
from bayes_rvm.evidence.loo import RefitLOO
from bayes_rvm.families import BERNOULLI, NOISE_LIKELIHOODS, POISSON, SOFTMAX
from bayes_rvm.posterior.draws import (
    PosteriorDraws,
    latent,
    pointwise_log_likelihood,
    width_designs,
)

__all__ = [
    "extra_dims",
    "make_datatree",
    "posterior_group",
    "sample_posterior_predictive",
    "type2_datatree",
    "variational_group",
]


def make_datatree(
    groups: Mapping[str, Mapping[str, np.ndarray]], *, coords, w_extra, y_extra, attrs=None
):
    """Every DataTree of the package, through ``arviz_base.from_dict`` with the package's dims."""
    from arviz_base import from_dict

    dims = variable_dims(w_extra, y_extra)
    groups = {k: dict(v) for k, v in groups.items() if v}
    ll = groups.get("log_likelihood")
    ll_dims = {**dims, "y": [OBS]}
    tree = from_dict(
        {k: v for k, v in groups.items() if k != "log_likelihood"},
        coords=coords,
        dims=dims,
        pred_dims=dims,
        pred_coords=coords,
        check_conventions=False,
    )
    tree.attrs.update(dict(attrs or {}))
    if ll is not None:
        tree["log_likelihood"] = from_dict(
            {"log_likelihood": ll}, coords=coords, dims=ll_dims, check_conventions=False
        )["log_likelihood"]
    return tree


def extra_dims(likelihood: str, multi: bool) -> tuple[str | None, str | None]:
    """The second dims of ``w`` and of ``y``."""
    if likelihood == "softmax":
        return CLASS, None
    return (OUTPUT, OUTPUT) if multi else (None, None)


def posterior_group(draws: PosteriorDraws) -> dict[str, np.ndarray]:
    """The ``posterior`` group of a DataTree from draws: ``alpha``, ``log_alpha``, ``sigma``,
    ``beta``, ``w``."""
    post = {}
    if draws.alpha is not None:
        post["alpha"] = draws.alpha
        with np.errstate(divide="ignore"):  # a pruned column's alpha is inf, and so is its log
            post["log_alpha"] = np.log(draws.alpha)
    if draws.sigma is not None:
        post.update(sigma=draws.sigma, beta=draws.sigma**-2.0)
    if draws.intercept is not None:
        post["intercept"] = draws.intercept if draws.extra_dim else draws.intercept[..., 0]
    if draws.gamma is not None:
        post["gamma"] = draws.gamma
    if draws.nu is not None:
        post["noise_nu"] = draws.nu
    post["w"] = draws.w if draws.extra_dim else draws.w[..., 0]
    return post


def _loo_group(loo: RefitLOO, n_obs: int) -> xr.DataTree:
    """The ``loo`` group: a type-II fit's cross-validated log predictive densities."""
    if loo.elpd_i.shape != (n_obs,):
        raise ValueError(f"loo has {loo.elpd_i.shape[0]} terms for {n_obs} observations.")
    return xr.DataTree(
        xr.Dataset(
            {"y": ((OBS,), np.asarray(loo.elpd_i, dtype=np.float64))},
            coords={OBS: np.arange(n_obs)},
            attrs={
                "method": loo.method,
                "n_folds": int(loo.n_folds),
                "exact": int(loo.exact),
                "seconds": float(loo.seconds),
            },
        )
    )


def variational_group(
    loss: np.ndarray, *, approximation: xr.Dataset | None = None, **attrs
) -> xr.DataTree:
    """The ``variational`` group: the loss (negative ELBO) per iteration of a variational fit.

    Parameters
    ----------
    loss : ndarray of shape (n_iter,)
        The loss at each iteration, in nats (PyMC's ``approx.hist``).
    approximation : xarray.Dataset, optional
        The fitted approximation and its density at the draws
        (:func:`bayes_rvm.inference.variational.approximation_density`), joined to the group.
    **attrs
        The fit's settings and convergence (numbers, strings or booleans, stored as attrs;
        booleans as 0 / 1, which every DataTree format keeps).
    """
    loss = np.asarray(loss, dtype=np.float64)
    if loss.ndim != 1:
        raise ValueError(f"loss must be one value per iteration, got shape {loss.shape}.")
    kept = {k: int(v) if isinstance(v, bool | np.bool_) else v for k, v in attrs.items()}
    ds = xr.Dataset(
        {"loss": ((ITERATION,), loss)},
        coords={ITERATION: np.arange(1, loss.size + 1)},
        attrs=kept,
    )
    if approximation is not None:
        ds = ds.merge(approximation, combine_attrs="override")
    return xr.DataTree(ds)


def type2_datatree(
    fit: EvidenceFit,
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    n_draws: int = 1000,
    random_seed=None,
    basis: Sequence[int] | None = None,
    basis_names: Sequence | None = None,
    class_names: Sequence | None = None,
    attrs: Mapping | None = None,
    loo: RefitLOO | None = None,
    weight_draws: np.ndarray | None = None,
) -> xr.DataTree:
    """The type-II fit as a DataTree of the same shape as an MCMC fit.

    Parameters
    ----------
    fit : EvidenceFit or LaplaceFit
        A fit of ``y`` on ``Phi`` (same units: no rescaling is done here). A Laplace fit (a
        classifier's) gives draws from the Laplace approximation at the mode.
    Phi : ndarray of shape (N, M)
        The design matrix the fit was made on.
    y : ndarray of shape (N,) or (N, D)
        Targets; class indices for a classifier.
    n_draws : int, default=1000
        Draws of ``w ~ N(m, Sigma)`` at the optimum (one chain).
    random_seed : int, optional
    basis : sequence of int, optional
        Columns to report (for example those of an MCMC model on a subset); default all. Pruned
        columns get ``w = 0`` and ``alpha = inf``.
    basis_names : sequence, optional
        Coordinates of ``basis``; default the column indices.
    class_names : sequence, optional
        Coordinates of ``class`` (softmax fits).
    attrs : dict, optional
        Further settings to record (for example the estimator's parameters).
    loo : RefitLOO, optional
        Cross-validated log predictive densities of the fit, hyperparameters refitted without
        the left-out rows (:func:`bayes_rvm.evidence.loo.refit_loo`), in the units of ``y``:
        stored as the ``loo`` group, which :func:`bayes_rvm.posterior.comparison.compare` uses in
        place
        of PSIS-LOO.
    weight_draws : ndarray of shape (n_draws, n_active, outputs), optional
        Draws of the active weights to store instead of drawing them from the fit's Gaussian
        (or Laplace) approximation: a classifier's importance-resampled posterior, which is
        what its predictions average over.

    Returns
    -------
    xarray.DataTree
        ``posterior`` (``w``, ``alpha`` and, for regression, ``sigma``, ``beta``; the
        hyperparameters constant over draws), ``log_likelihood`` (``y[obs]``), ``observed_data``,
        ``constant_data``, with ``loo`` the group ``loo`` (``y[obs]``; attrs ``method``,
        ``n_folds``, ``exact``, ``seconds``); root attrs ``method="type2"``, ``likelihood``,
        ``settings`` (JSON), ``log_evidence``, ``converged``, ``reason``.

    Notes
    -----
    ``log_likelihood`` holds ``ln p(t_n | w)`` for the draws of ``w`` at the optimum. PSIS-LOO
    on it (``az.loo``) leaves each point out of the weights' posterior but keeps the
    hyperparameters that were tuned on all the data, the left-out point included: it overstates
    the elpd (by about 8 nats on sinc, N = 100, width 2, and 15 at width 1). An honest elpd
    refits the hyperparameters: pass ``loo``, as :attr:`bayes_rvm.estimators.regressor.RVR.idata_`
    does.
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    likelihood = getattr(fit, "likelihood", "gaussian")
    y = np.asarray(y, dtype=np.float64 if likelihood in NOISE_LIKELIHOODS else np.intp)
    multi = likelihood == "gaussian" and y.ndim == 2
    N, M = Phi.shape
    D = fit.mean.shape[1]
    if fit.alpha.shape != (M,):
        raise ValueError(f"the fit has {fit.alpha.shape[0]} basis functions, Phi has {M} columns.")
    if likelihood in NOISE_LIKELIHOODS and D != (y.shape[1] if multi else 1):
        raise ValueError(f"the fit has {D} outputs, y has {y.shape[1] if multi else 1}.")
    cols = np.arange(M) if basis is None else np.asarray(basis, dtype=int)
    if not np.isin(fit.active, cols).all():
        raise ValueError("basis must contain every relevance vector of the fit.")
    names = list(cols) if basis_names is None else list(basis_names)
    w_extra, y_extra = extra_dims(likelihood, multi)
    if weight_draws is not None:
        n_draws = weight_draws.shape[0]
    draws = PosteriorDraws.at_optimum(
        fit,
        cols,
        n_draws,
        np.random.default_rng(random_seed),
        extra_dim=w_extra,
        weights=weight_draws,
    )
    if likelihood in NOISE_LIKELIHOODS:
        Y = y if multi else y[:, None]
        nu = draws.flat("nu") if likelihood == "student_t" else None
        ll = pointwise_log_likelihood(
            Phi[:, cols], Y, draws.weights, draws.flat("sigma"), likelihood=likelihood, nu=nu
        )
    else:
        ll = pointwise_log_likelihood(Phi[:, cols], y, draws.weights, likelihood=likelihood)
    coords = {"chain": [0], "draw": np.arange(n_draws), BASIS: names, OBS: np.arange(N)}
    if w_extra == OUTPUT:
        coords[OUTPUT] = np.arange(D)
    elif w_extra == CLASS:
        coords[CLASS] = list(range(D)) if class_names is None else list(class_names)
    settings = {
        "n_draws": n_draws,
        "random_seed": random_seed if isinstance(random_seed, int) else None,
        "n_iter": int(fit.n_iter),
        "basis": [int(c) for c in cols],
    }
    settings.update(dict(attrs or {}))
    tree = make_datatree(
        {
            "posterior": posterior_group(draws),
            "log_likelihood": {"y": ll[None]},
            "observed_data": {"y": y},
            "constant_data": {"Phi": Phi[:, cols]},
        },
        coords=coords,
        w_extra=w_extra,
        y_extra=y_extra,
        attrs={
            "method": "type2",
            "likelihood": likelihood,
            "settings": json.dumps(settings, sort_keys=True, default=str),
            "log_evidence": float(fit.log_evidence),
            "converged": int(bool(fit.converged)),
            "reason": str(fit.reason),
            "n_relevant": int(fit.active.size),
        },
    )
    if loo is not None:
        tree["loo"] = _loo_group(loo, N)
    return tree


def sample_posterior_predictive(
    dt: xr.DataTree,
    Phi_new: np.ndarray | None = None,
    *,
    offset: np.ndarray | None = None,
    random_seed=None,
) -> xr.DataTree:
    """Posterior predictive draws of ``y``, with ``w`` from its posterior, for any fit.

    Each posterior draw of ``w`` (and of the noise sd) gives one draw of ``y``: Gaussian around
    ``Phi w + offset`` for regression, Bernoulli / categorical on the logits for a classifier,
    Poisson counts of rate ``exp(Phi w + offset)`` for counts.
    Unlike ``pm.sample_posterior_predictive`` on the weight-marginalised model, whose ``y`` knows
    only the prior of ``w``, this uses the weights in the posterior (drawn back from ``N(m,
    Sigma)`` by :func:`complete_posterior`).

    Parameters
    ----------
    dt : xarray.DataTree
        A fit with ``w`` in its posterior (``sigma`` too for regression) and ``Phi`` in its
        ``constant_data`` (every fit of this package, or a ``pm.sample`` result after
        :func:`complete_posterior`).
    Phi_new : ndarray of shape (n, M) or (chain, draw, n, M), optional
        Design rows of new inputs, with the fit's basis columns; default the training rows.
        A fit whose kernel width was sampled has a design per draw: pass one per draw (for
        example from :func:`bayes_rvm.basis.kernels.width_design` at the posterior's ``gamma``); its
        training rows are rebuilt from ``kernel_dist`` in ``constant_data``.
    offset : ndarray, optional
        The user's terms of the mean at ``Phi_new``: shape (n,) or (n, D), or one per draw
        (chain, draw, n[, D]). At the training rows the fit's own ``offset`` is used.
    random_seed : int, optional

    Returns
    -------
    xarray.DataTree
        ``dt`` with a ``posterior_predictive`` group (training rows, beside ``observed_data``,
        as ``az.plot_ppc`` and ``az.loo_pit`` expect) or, for ``Phi_new``, ``predictions`` and
        ``predictions_constant_data`` (``Phi``).
    """
    post = dt["posterior"].dataset
    likelihood = dt.attrs.get("likelihood", "gaussian")
    posterior = PosteriorDraws.from_posterior(post, likelihood)
    C, S, M, D = posterior.w.shape
    W = posterior.weights
    training = Phi_new is None
    if training:
        const = dt["constant_data"].dataset
        if "Phi" in const:
            Phi = np.asarray(const["Phi"].values, dtype=np.float64)
        else:  # a sampled kernel width: the training design at each draw's width
            Phi = width_designs(const["kernel_dist"].values, post, post.coords)
        if "offset" in post:
            offset = post["offset"].values
        elif "offset" in dt["constant_data"].dataset:
            offset = dt["constant_data"]["offset"].values
    else:
        Phi = np.asarray(Phi_new, dtype=np.float64)
    if Phi.ndim == 4 and Phi.shape[:2] == (C, S):
        Phi = Phi.reshape(C * S, *Phi.shape[2:])
    if Phi.ndim not in (2, 3) or Phi.shape[-1] != M or (Phi.ndim == 3 and Phi.shape[0] != C * S):
        raise ValueError(
            f"Phi_new must have {M} columns, and be (n, {M}) or one design per draw "
            f"({C}, {S}, n, {M}); got shape {Phi.shape}."
        )
    n = Phi.shape[-2]
    off = None
    if offset is not None:
        off = np.asarray(offset, dtype=np.float64)
        # Exact shapes only: a reshape would take an (n * D,) vector or a transposed (D, n)
        # array without a word and add each value to another row.
        rows = (n,) if D == 1 else (n, D)
        if off.shape not in (rows, (n, D), (C, S, *rows), (C, S, n, D)):
            raise ValueError(
                f"offset must have shape {rows} (the mean's terms at the {n} rows) or one per "
                f"draw {(C, S, *rows)}; got {off.shape}."
            )
        if not np.all(np.isfinite(off)):
            raise ValueError("offset must be finite.")
        per_draw = off.ndim >= 3  # (chain, draw, n[, D]) against (n[, D])
        off = off.reshape(C * S, n, D) if per_draw else off.reshape(n, D)
    eta = latent(Phi, W, off)
    rng = np.random.default_rng(random_seed)
    if likelihood == "gaussian":
        sig = posterior.flat("sigma")[:, None, None]
        draws = eta + sig * rng.standard_normal(eta.shape)
    elif likelihood == "student_t":
        sig = posterior.flat("sigma")[:, None, None]
        nu = np.broadcast_to(posterior.flat("nu")[:, None, None], eta.shape)
        draws = eta + sig * rng.standard_t(nu)
    elif likelihood == "bernoulli":
        draws = (rng.random(eta.shape) < BERNOULLI.mean(eta)).astype(np.int64)
    elif likelihood == "poisson":
        draws = rng.poisson(POISSON.mean(eta)).astype(np.int64)
    else:
        p = SOFTMAX.mean(eta)
        u = rng.random(eta.shape[:2])[..., None]
        draws = np.minimum((p.cumsum(axis=2) < u).sum(axis=2), D - 1)[..., None]
    multi = likelihood == "gaussian" and D > 1
    w_extra, y_extra = extra_dims(likelihood, multi)
    y = draws.reshape(C, S, n, -1)
    y = y if multi else y[..., 0]
    coords = {"chain": post.chain.values, "draw": post.draw.values, OBS: np.arange(n)}
    if multi:
        coords[OUTPUT] = post[OUTPUT].values
    group = "posterior_predictive" if training else "predictions"
    groups = {group: {"y": y}}
    if not training and Phi.ndim == 2:  # per-draw designs are not data: not stored
        groups["predictions_constant_data"] = {"Phi": Phi}
        coords[BASIS] = posterior.basis
    new = make_datatree(groups, coords=coords, w_extra=w_extra, y_extra=y_extra)
    out = dt.copy()
    for name, node in new.children.items():
        out[name] = node
    return out
