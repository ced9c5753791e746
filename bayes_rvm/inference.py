"""Engines on a model: MCMC through ``pm.sample``, the type-II fit as a DataTree, prediction.

Every function here returns or consumes an :class:`xarray.DataTree` with the groups ArviZ 1.x
expects and the same variable names and dims whatever the engine:

``posterior``
    ``w[basis]`` (``w[basis, output]`` with several outputs), ``alpha[basis]``, ``sigma``,
    ``beta`` (and ``nu`` when it is sampled);
``log_likelihood``
    ``y[obs]``: ``ln N(t_n | phi_n^T w, sigma^2)`` for each draw, summed over outputs, so that
    ``az.loo`` and ``az.compare`` leave one *row* out;
``observed_data`` / ``constant_data``
    ``y`` / ``Phi``;
``sample_stats``
    MCMC only.

The root ``attrs`` name the method (``"mcmc"`` or ``"type2"``) and record its settings as JSON.
"""

from __future__ import annotations

import contextlib
import json
import time
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr
from scipy import linalg

from bayes_rvm.dims import BASIS, OBS, OUTPUT
from bayes_rvm.evidence.gaussian import EvidenceFit

__all__ = [
    "SamplingDiagnosticsWarning",
    "diagnose",
    "draw_weights",
    "pointwise_log_likelihood",
    "predict_draws",
    "sample_mcmc",
    "type2_datatree",
    "type2_initvals",
]

_LOG_2PI = float(np.log(2.0 * np.pi))
SAMPLERS = ("nutpie", "numpyro", "blackjax", "pymc")
#: Cache of compiled nutpie models keyed on the model's settings and shapes (see sample_mcmc).
_NUTPIE_CACHE: dict[tuple, object] = {}
_NUTPIE_CACHE_SIZE = 8


class SamplingDiagnosticsWarning(UserWarning):
    """Divergences, large R-hat or small ESS after sampling."""


# ---------------------------------------------------------------------------------------------
# Weights given hyperparameters
# ---------------------------------------------------------------------------------------------
def draw_weights(
    Phi: np.ndarray,
    Y: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Draw ``w ~ N(m, Sigma)`` given each draw of ``(alpha, beta)``.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    Y : ndarray of shape (N, D)
    alpha : ndarray of shape (S, M)
        Draws of the prior precisions.
    beta : ndarray of shape (S,)
        Draws of the noise precision.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray of shape (S, M, D)

    Notes
    -----
    ``w = m + L^-T z`` with ``L L^T = H = A + beta Phi^T Phi`` (equilibrated by its diagonal, as
    in the log density), which is exact for any ``alpha``: a basis function with a huge ``alpha``
    gets a weight pinned at zero rather than a pruned column.
    """
    S, M = alpha.shape
    D = Y.shape[1]
    gram = Phi.T @ Phi
    phi_y = Phi.T @ Y
    out = np.empty((S, M, D))
    z = rng.standard_normal((S, M, D))
    for s in range(S):
        H = beta[s] * gram
        H[np.diag_indices(M)] += alpha[s]
        d = np.sqrt(np.diag(H))
        Ls = linalg.cholesky(H / d[:, None] / d[None, :], lower=True, check_finite=False)
        mean = beta[s] * linalg.cho_solve((Ls, True), phi_y / d[:, None], check_finite=False)
        noise = linalg.solve_triangular(Ls, z[s], lower=True, trans="T", check_finite=False)
        out[s] = (mean + noise) / d[:, None]
    return out


def pointwise_log_likelihood(Phi: np.ndarray, Y: np.ndarray, w: np.ndarray, sigma: np.ndarray):
    """``sum_d ln N(t_nd | phi_n^T w_d, sigma^2)`` for each draw and observation.

    Parameters
    ----------
    Phi : ndarray of shape (N, M)
    Y : ndarray of shape (N, D)
    w : ndarray of shape (S, M, D)
    sigma : ndarray of shape (S,)

    Returns
    -------
    ndarray of shape (S, N)
    """
    mu = np.einsum("nm,smd->snd", Phi, w, optimize=True)  # BLAS: 10x faster at N = 1000
    sig = sigma[:, None, None]
    ll = -0.5 * ((Y[None] - mu) / sig) ** 2 - np.log(sig) - 0.5 * _LOG_2PI
    return ll.sum(axis=2)


# ---------------------------------------------------------------------------------------------
# MCMC
# ---------------------------------------------------------------------------------------------
def _model_arrays(model) -> tuple[np.ndarray, np.ndarray, bool]:
    Phi = np.asarray(model["Phi"].get_value(), dtype=np.float64)
    y = np.asarray(model["y_obs"].get_value(), dtype=np.float64)
    return Phi, (y[:, None] if y.ndim == 1 else y), y.ndim == 2


def _interactive() -> bool:
    """Whether a person is watching: a Jupyter kernel, or standard error on a terminal."""
    import sys

    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is not None and "IPKernelApp" in getattr(shell, "config", {}):
        return True
    stream = sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


def _seed_from(random_seed) -> int:
    # One integer seed for the sampler, derived reproducibly from whatever the user passed.
    if random_seed is None:
        return int(np.random.default_rng().integers(2**31 - 1))
    if isinstance(random_seed, int | np.integer):
        return int(random_seed)
    return int(np.random.default_rng(random_seed).integers(2**31 - 1))


def _nutpie_cache_key(model) -> tuple | None:
    # Initial values are not part of the key: they are set per run (with_initial_points).
    settings = getattr(model, "rvm_settings", None)
    if settings is None or settings["custom_alpha_prior"] or settings["custom_noise_prior"]:
        return None  # graphs built from user callables cannot be compared by their settings
    if settings["nu_random"]:
        return None
    data = sorted(_data_vars(model).items())
    shapes = tuple((k, tuple(np.shape(v.get_value()))) for k, v in data)
    extra = tuple(sorted(model.named_vars)) + tuple(sorted(map(str, model.coords.items())))
    return (json.dumps(settings, sort_keys=True), shapes, extra)


def _data_vars(model) -> dict:
    import pytensor.compile.sharedvalue as sv

    return {
        name: var for name, var in model.named_vars.items() if isinstance(var, sv.SharedVariable)
    }


def _sample_nutpie_cached(model, *, draws, tune, chains, cores, seed, progressbar, initvals, nuts):
    """``pm.sample``'s nutpie branch, compiled through :func:`bayes_rvm._nutpie.compile_nutpie`.

    Its numba functions are cached on disk, so a fresh process does not recompile them; models
    built by :func:`rvm_regression_model` with the same settings and shapes compile to the same
    function, so within a process a compiled one is reused with the new model's data
    (``with_data``), coordinates and initial values.
    """
    import nutpie
    from pymc.backends.arviz import patch_nutpie_idata

    from bayes_rvm._nutpie import compile_nutpie, with_initial_points

    key = _nutpie_cache_key(model)
    compiled = _NUTPIE_CACHE.get(key) if key is not None else None
    if compiled is None:
        compiled = compile_nutpie(model)
        if key is not None:
            if len(_NUTPIE_CACHE) >= _NUTPIE_CACHE_SIZE:
                _NUTPIE_CACHE.pop(next(iter(_NUTPIE_CACHE)))
            _NUTPIE_CACHE[key] = compiled
    compiled = with_initial_points(compiled, model, initvals)
    data = _data_vars(model)
    compiled = compiled.with_data(
        **{k: np.asarray(v.get_value()) for k, v in data.items() if k in compiled._shared_data}
    )
    nuts = dict(nuts or {})
    if "max_treedepth" in nuts:
        nuts["maxdepth"] = nuts.pop("max_treedepth")
    try:
        from pymc.progress_bar.progress import NutpieProgressBarManager

        pb = NutpieProgressBarManager(
            chains=chains, draws=draws, progressbar=progressbar, progressbar_theme=None
        )
        pb_kwargs = {"progress_bar": False, "progress_callback": pb.update}
    except (ImportError, TypeError):  # pragma: no cover - PyMC moved its progress bar
        pb, pb_kwargs = None, {"progress_bar": bool(progressbar)}
    t0 = time.time()
    with pb if pb is not None else contextlib.nullcontext():
        dt = nutpie.sample(
            compiled,
            draws=draws,
            tune=max(tune, 1),
            chains=chains,
            cores=cores,
            seed=seed,
            **pb_kwargs,
            **nuts,
        )
    patch_nutpie_idata(dt, model, sampling_time=time.time() - t0)
    return dt


def sample_mcmc(
    model,
    *,
    draws: int = 1000,
    tune: int = 1000,
    chains: int = 4,
    sampler: str = "nutpie",
    random_seed=None,
    progressbar: bool | str = "auto",
    initvals: Mapping | None = None,
    cores: int | None = None,
    nuts: Mapping | None = None,
    warn: bool = True,
    cache: bool = True,
    **kwargs,
) -> xr.DataTree:
    """Sample a model of :func:`bayes_rvm.models.rvm_regression_model` with NUTS.

    Parameters
    ----------
    model : pymc.Model
    draws, tune, chains : int
        As in :func:`pymc.sample`.
    sampler : {"nutpie", "numpyro", "blackjax", "pymc"}, default="nutpie"
        The NUTS implementation (``nuts_sampler`` of :func:`pymc.sample`). ``"nutpie"`` runs the
        numba kernels with its chains in parallel threads and is the one to use on a CPU.
        ``"numpyro"`` and ``"blackjax"`` run the JAX implementation of the marginal likelihood
        (dense and low-rank); they are meant for a JAX accelerator: on a CPU they pay a JAX
        compilation in every process and run their chains one core each (see the ``samplers``
        section of ``benchmarks/bench_mcmc.py`` for measured figures). ``"pymc"`` is PyMC's own
        NUTS (C backend, one process per chain).
    random_seed : int, optional
        Makes the run reproducible (also the draws of ``w`` in the marginal form).
    progressbar : bool or "auto", default="auto"
        PyMC's progress bar. ``"auto"``: shown where a person is watching (a terminal or a
        Jupyter kernel), left out of non-interactive output (logs, CI, redirected streams).
    initvals : dict, optional
        Starting values by variable name (one dict for all chains), for example
        :func:`type2_initvals`.
    cores : int, optional
        Parallel chains (nutpie, pymc).
    nuts : dict, optional
        Sampler options, for example ``{"target_accept": 0.9}``.
    warn : bool, default=True
        Emit :class:`SamplingDiagnosticsWarning` for divergences, R-hat > 1.01 or bulk ESS < 400
        of the hyperparameters, each with the usual remedy.
    cache : bool, default=True
        Reuse compiled nutpie models across calls (nutpie only; see Notes).
    **kwargs
        Passed to :func:`pymc.sample`.

    Returns
    -------
    xarray.DataTree
        Groups ``posterior`` (``w``, ``alpha``, ``sigma``, ``beta``), ``log_likelihood`` (``y``),
        ``observed_data``, ``constant_data``, ``sample_stats``; root attrs ``method="mcmc"``,
        ``settings`` (JSON) and ``diagnostics`` (JSON of :func:`diagnose`).

    Notes
    -----
    In the marginal form, ``w`` is drawn from its Gaussian conditional ``N(m, Sigma)`` for each
    posterior draw of ``(alpha, sigma)``. The pointwise log likelihood is computed here from the
    drawn weights (``pm.compute_log_likelihood`` finds no pointwise terms in a marginalised model)
    and, for comparability, the same way in the joint form.

    With nutpie and ``cache=True`` the model is compiled through nutpie's function-based entry
    on PyTensor numba functions (:mod:`bayes_rvm._nutpie`), whose machine code is cached on disk,
    so a fresh process does not recompile; within a process the compiled model is also kept in a
    small cache keyed on the model settings, data shapes, variable names and coordinates, so that
    refitting on new data of the same shape reuses it with new data and initial values.

    Large full-basis problems (N = 1000 on sinc, rank 25): the low-rank marginal form
    (:mod:`bayes_rvm.marginal.lowrank`), initial values from the type-II fit
    (:func:`type2_initvals`, as :class:`~bayes_rvm.estimators.RVR` does), nutpie's diagonal mass
    matrix and the default half-Cauchy hyperprior on the weight scales sample it with no
    divergence and R-hat below 1.01 (``benchmarks/bench_mcmc.py``, ``scale`` section).
    """
    import pymc as pm

    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}.")
    settings = dict(getattr(model, "rvm_settings", {}))
    if sampler in ("numpyro", "blackjax"):
        from bayes_rvm.marginal import register_jax_dispatch

        register_jax_dispatch()
    seed = _seed_from(random_seed)
    progressbar = _interactive() if progressbar == "auto" else bool(progressbar)
    t0 = time.time()
    if sampler == "nutpie" and cache and not kwargs:
        dt = _sample_nutpie_cached(
            model,
            draws=draws,
            tune=tune,
            chains=chains,
            cores=cores,
            seed=seed,
            progressbar=progressbar,
            initvals=initvals,
            nuts=nuts,
        )
    else:
        dt = pm.sample(
            draws=draws,
            tune=tune,
            chains=chains,
            cores=cores,
            model=model,
            nuts_sampler=sampler,
            random_seed=seed,
            progressbar=progressbar,
            initvals=initvals,
            nuts=dict(nuts or {}),
            compute_convergence_checks=False,
            **kwargs,
        )
    wall = time.time() - t0

    post = dt["posterior"].dataset
    Phi, Y, multi = _model_arrays(model)
    alpha = post["alpha"].values
    sigma = post["sigma"].values
    C, S = alpha.shape[:2]
    rng = np.random.default_rng([seed, 1])
    if "w" in post:
        w = post["w"].values.reshape(C * S, *post["w"].shape[2:])
        w = w if multi else w[..., None]
    else:
        args = (Y, alpha.reshape(C * S, -1), sigma.reshape(-1) ** -2.0, rng)
        if "Phi_U" in model.named_vars:  # low-rank marginal form: O(M r) per draw, not O(M^3)
            from bayes_rvm.marginal import draw_weights_lowrank

            U, VS = (np.asarray(model[k].get_value()) for k in ("Phi_U", "Phi_VS"))
            w = draw_weights_lowrank(U, VS, *args)
        else:
            w = draw_weights(Phi, *args)
    basis_coord = post["alpha"].coords[BASIS].values
    w_dims = ("chain", "draw", BASIS, OUTPUT) if multi else ("chain", "draw", BASIS)
    w_values = w.reshape(C, S, *w.shape[1:]) if multi else w[..., 0].reshape(C, S, -1)
    w_coords = {"chain": post.chain.values, "draw": post.draw.values, BASIS: basis_coord}
    if multi:
        w_coords[OUTPUT] = np.asarray(list(model.coords[OUTPUT]))
    post = post.assign(w=xr.DataArray(w_values, dims=w_dims, coords=w_coords))
    dt["posterior"] = xr.DataTree(post)
    ll = pointwise_log_likelihood(Phi, Y, w, sigma.reshape(-1)).reshape(C, S, -1)
    dt["log_likelihood"] = xr.DataTree(
        xr.Dataset(
            {"y": (("chain", "draw", OBS), ll)},
            coords={
                "chain": post.chain.values,
                "draw": post.draw.values,
                OBS: np.arange(ll.shape[2]),
            },
        )
    )
    diag = diagnose(dt, warn=warn, stacklevel=3)
    dt.attrs.update(
        method="mcmc",
        sampler=sampler,
        settings=json.dumps(
            {
                **settings,
                "draws": draws,
                "tune": tune,
                "chains": chains,
                "sampler": sampler,
                "random_seed": None if random_seed is None else seed,
            },
            sort_keys=True,
        ),
        diagnostics=json.dumps(diag, sort_keys=True),
        wall_time=float(wall),
    )
    return dt


def diagnose(dt: xr.DataTree, *, warn: bool = True, stacklevel: int = 2) -> dict:
    """Divergences, max R-hat and min bulk ESS of the hyperparameters, with warnings and remedies.

    Parameters
    ----------
    dt : xarray.DataTree
        An MCMC fit from :func:`sample_mcmc` (or any ``pm.sample`` result with ``alpha``).
    warn : bool, default=True
        Emit a :class:`SamplingDiagnosticsWarning` for each problem found.

    Returns
    -------
    dict
        ``divergences``, ``max_rhat``, ``min_ess_bulk``, ``min_ess_tail`` (over ``log alpha``,
        ``sigma`` and ``nu``), ``max_rhat_w`` (over the weights), ``max_treedepth_hits``.
    """
    import arviz as az

    post = dt["posterior"].dataset
    hyper = [v for v in ("alpha", "sigma", "nu") if v in post]
    ds = post[hyper]
    if "alpha" in ds:
        # As documented, on log alpha: the scale NUTS moves on (rank R-hat is not log-invariant).
        ds = ds.assign(alpha=np.log(ds["alpha"]))
    rhat = az.rhat(ds)
    ess_b = az.ess(ds, method="bulk")
    ess_t = az.ess(ds, method="tail")
    out = {
        "divergences": 0,
        "max_rhat": float(max(np.nanmax(rhat[v].values) for v in hyper)),
        "min_ess_bulk": float(min(np.nanmin(ess_b[v].values) for v in hyper)),
        "min_ess_tail": float(min(np.nanmin(ess_t[v].values) for v in hyper)),
        "max_treedepth_hits": 0,
    }
    if "w" in post:
        out["max_rhat_w"] = float(np.nanmax(az.rhat(post[["w"]])["w"].values))
    if "sample_stats" in dt.children:
        ss = dt["sample_stats"].dataset
        if "diverging" in ss:
            out["divergences"] = int(ss["diverging"].sum())
        for name in ("maxdepth_reached", "reached_max_treedepth"):
            if name in ss:
                out["max_treedepth_hits"] = int(ss[name].sum())
    if warn:
        n = post.sizes["chain"] * post.sizes["draw"]
        if out["divergences"]:
            warnings.warn(
                f"{out['divergences']} of {n} draws diverged. Raise target_accept "
                "(nuts={'target_accept': 0.95}); prefer form='marginal' over the joint form; "
                "avoid Gamma hyperpriors with tiny rates, whose wall in log alpha NUTS cannot "
                "cross.",
                SamplingDiagnosticsWarning,
                stacklevel=stacklevel,
            )
        if out["max_rhat"] > 1.01:
            warnings.warn(
                f"max R-hat of the hyperparameters is {out['max_rhat']:.3f} > 1.01: the chains "
                "disagree. Run longer (more tune and draws), start from type2_initvals(fit), or "
                "restrict the basis to the type-II relevance vectors (RVR(mcmc_basis='relevant'), "
                "or basis=fit.active in rvm_regression_model). Nearly collinear columns, as from "
                "a wide kernel, make a ridged posterior; a narrower one (larger gamma) helps.",
                SamplingDiagnosticsWarning,
                stacklevel=stacklevel,
            )
        if out["min_ess_bulk"] < 400:
            warnings.warn(
                f"min bulk ESS of the hyperparameters is {out['min_ess_bulk']:.0f} < 400. "
                "Draw more samples or use the marginal form.",
                SamplingDiagnosticsWarning,
                stacklevel=stacklevel,
            )
    return out


def type2_initvals(
    fit: EvidenceFit,
    basis: Sequence[int] | None = None,
    *,
    alpha_max: float = 1e4,
) -> dict[str, np.ndarray]:
    """Initial values for MCMC from a type-II fit: ``alpha`` (pruned ones capped) and ``sigma``.

    Parameters
    ----------
    fit : EvidenceFit
    basis : sequence of int, optional
        The columns the MCMC model uses (default all columns of the fit).
    alpha_max : float, default=1e4
        Cap for pruned (infinite) or very large ``alpha``: a finite start in the region the
        hyperprior supports.
    """
    alpha = np.asarray(fit.alpha, dtype=np.float64)
    if basis is not None:
        alpha = alpha[np.asarray(basis, dtype=int)]
    alpha = np.minimum(np.where(np.isfinite(alpha), alpha, alpha_max), alpha_max)
    return {"alpha": alpha, "sigma": np.asarray(fit.beta**-0.5)}


# ---------------------------------------------------------------------------------------------
# Type-II as a DataTree
# ---------------------------------------------------------------------------------------------
def type2_datatree(
    fit: EvidenceFit,
    Phi: np.ndarray,
    y: np.ndarray,
    *,
    n_draws: int = 1000,
    random_seed=None,
    basis: Sequence[int] | None = None,
    basis_names: Sequence | None = None,
    attrs: Mapping | None = None,
) -> xr.DataTree:
    """The type-II fit as a DataTree of the same shape as an MCMC fit.

    Parameters
    ----------
    fit : EvidenceFit
        A fit of ``y`` on ``Phi`` (same units: no rescaling is done here).
    Phi : ndarray of shape (N, M)
        The design matrix the fit was made on.
    y : ndarray of shape (N,) or (N, D)
    n_draws : int, default=1000
        Draws of ``w ~ N(m, Sigma)`` at the optimum (one chain).
    random_seed : int, optional
    basis : sequence of int, optional
        Columns to report (for example those of an MCMC model on a subset); default all. Pruned
        columns get ``w = 0`` and ``alpha = inf``.
    basis_names : sequence, optional
        Coordinates of ``basis``; default the column indices.
    attrs : dict, optional
        Further settings to record (for example the estimator's parameters).

    Returns
    -------
    xarray.DataTree
        ``posterior`` (``w``, ``alpha``, ``sigma``, ``beta``; the hyperparameters constant over
        draws), ``log_likelihood`` (``y[obs]``), ``observed_data``, ``constant_data``; root attrs
        ``method="type2"``, ``settings`` (JSON), ``log_evidence``, ``converged``, ``reason``.
    """
    Phi = np.asarray(Phi, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    multi = y.ndim == 2
    Y = y if multi else y[:, None]
    N, M = Phi.shape
    D = Y.shape[1]
    if fit.alpha.shape != (M,):
        raise ValueError(f"the fit has {fit.alpha.shape[0]} basis functions, Phi has {M} columns.")
    if fit.mean.shape[1] != D:
        raise ValueError(f"the fit has {fit.mean.shape[1]} outputs, y has {D}.")
    cols = np.arange(M) if basis is None else np.asarray(basis, dtype=int)
    if not np.isin(fit.active, cols).all():
        raise ValueError("basis must contain every relevance vector of the fit.")
    names = list(cols) if basis_names is None else list(basis_names)
    rng = np.random.default_rng(random_seed)
    K = fit.active.size
    z = rng.standard_normal((n_draws, K, D))
    # w = m + L^-T z has covariance (L L^T)^-1 = Sigma.
    noise = linalg.solve_triangular(
        fit.chol, z.transpose(1, 0, 2).reshape(K, -1), lower=True, trans="T", check_finite=False
    )
    w_active = fit.mean[None] + noise.reshape(K, n_draws, D).transpose(1, 0, 2)
    w_full = np.zeros((n_draws, M, D))
    w_full[:, fit.active] = w_active
    sigma = float(fit.beta) ** -0.5
    ll = pointwise_log_likelihood(Phi, Y, w_full, np.full(n_draws, sigma))
    w = w_full[:, cols]
    sample = {"chain": [0], "draw": np.arange(n_draws)}
    w_dims = ("chain", "draw", BASIS, OUTPUT) if multi else ("chain", "draw", BASIS)
    w_val = w[None] if multi else w[None, ..., 0]
    coords = {**sample, BASIS: names}
    if multi:
        coords[OUTPUT] = np.arange(D)
    posterior = xr.Dataset(
        {
            "w": (w_dims, w_val),
            "alpha": (
                ("chain", "draw", BASIS),
                np.broadcast_to(fit.alpha[cols], (1, n_draws, cols.size)).copy(),
            ),
            "sigma": (("chain", "draw"), np.full((1, n_draws), sigma)),
            "beta": (("chain", "draw"), np.full((1, n_draws), float(fit.beta))),
        },
        coords=coords,
    )
    y_dims = (OBS, OUTPUT) if multi else (OBS,)
    obs_coords = {OBS: np.arange(N), **({OUTPUT: np.arange(D)} if multi else {})}
    tree = xr.DataTree.from_dict(
        {
            "posterior": posterior,
            "log_likelihood": xr.Dataset(
                {"y": (("chain", "draw", OBS), ll[None])}, coords={**sample, OBS: np.arange(N)}
            ),
            "observed_data": xr.Dataset({"y": (y_dims, y)}, coords=obs_coords),
            "constant_data": xr.Dataset(
                {"Phi": ((OBS, BASIS), Phi[:, cols])}, coords={OBS: np.arange(N), BASIS: names}
            ),
        }
    )
    settings = {
        "n_draws": n_draws,
        "random_seed": random_seed if isinstance(random_seed, int) else None,
        "n_iter": int(fit.n_iter),
        "basis": [int(c) for c in cols],
    }
    settings.update(dict(attrs or {}))
    tree.attrs.update(
        method="type2",
        settings=json.dumps(settings, sort_keys=True, default=str),
        log_evidence=float(fit.log_evidence),
        converged=int(bool(fit.converged)),
        reason=str(fit.reason),
        n_relevant=int(K),
    )
    return tree


# ---------------------------------------------------------------------------------------------
# Prediction
# ---------------------------------------------------------------------------------------------
def predict_draws(
    dt: xr.DataTree,
    Phi_new: np.ndarray,
    *,
    random_seed=None,
    include_noise: bool = True,
) -> tuple[np.ndarray, xr.DataArray]:
    """Posterior predictive for new design rows from any fit (MCMC or type-II).

    Parameters
    ----------
    dt : xarray.DataTree
        A fit with ``w`` and ``sigma`` in its posterior.
    Phi_new : ndarray of shape (n, M)
        Design rows of the new inputs, with the fit's basis columns (same order).
    random_seed : int, optional
        Seed of the observation noise.
    include_noise : bool, default=True
        Add ``N(0, sigma^2)`` noise to each draw (posterior predictive of new targets) rather than
        returning draws of the regression function.

    Returns
    -------
    mean : ndarray of shape (n,) or (n, D)
        Posterior mean of the regression function ``E[phi(x)^T w]``.
    draws : xarray.DataArray
        Dims ``(chain, draw, obs)`` (``(chain, draw, obs, output)`` with several outputs).
    """
    post = dt["posterior"].dataset
    w = post["w"]
    Phi_new = np.asarray(Phi_new, dtype=np.float64)
    if Phi_new.ndim != 2 or Phi_new.shape[1] != w.sizes[BASIS]:
        raise ValueError(f"Phi_new must have {w.sizes[BASIS]} columns, got shape {Phi_new.shape}.")
    multi = OUTPUT in w.dims
    f = np.einsum("nm,cdm...->cdn...", Phi_new, w.transpose("chain", "draw", BASIS, ...).values)
    mean = f.mean(axis=(0, 1))
    if include_noise:
        rng = np.random.default_rng(random_seed)
        sig = post["sigma"].values.reshape(f.shape[:2] + (1,) * (f.ndim - 2))
        f = f + sig * rng.standard_normal(f.shape)
    dims = ("chain", "draw", OBS, OUTPUT) if multi else ("chain", "draw", OBS)
    coords = {
        "chain": post.chain.values,
        "draw": post.draw.values,
        OBS: np.arange(Phi_new.shape[0]),
    }
    if multi:
        coords[OUTPUT] = w.coords[OUTPUT].values
    return mean, xr.DataArray(f, dims=dims, coords=coords, name="y")
